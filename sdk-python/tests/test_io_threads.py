"""IoThreads.call, which runs the sync consumer's blocking pops: a call abandoned by a stop still
completes, and its result must reach ``on_abandoned`` (to be released), whether the event loop is
still running or already closed."""

from __future__ import annotations

import asyncio
import threading

from lanes._consumer import IoThreads


def _abandon_then_answer(keep_loop_running: bool) -> list[str]:
    answer = threading.Event()
    got: list[str] = []
    delivered = threading.Event()

    def blocking_pop() -> str:
        answer.wait(5)
        return "leased"

    def on_abandoned(v: str) -> None:
        got.append(v)
        delivered.set()

    async def main() -> None:
        task = asyncio.ensure_future(IoThreads().call(blocking_pop, on_abandoned=on_abandoned))
        await asyncio.sleep(0.05)
        task.cancel()  # the consumer stopped while its pop was in flight
        await asyncio.gather(task, return_exceptions=True)
        if keep_loop_running:
            answer.set()
            await asyncio.sleep(0.2)  # the answer arrives while the loop still runs

    asyncio.run(main())
    answer.set()  # else: the loop is closed when the answer arrives
    assert delivered.wait(5)
    return got


def test_an_abandoned_call_hands_its_result_over_while_the_loop_runs() -> None:
    assert _abandon_then_answer(keep_loop_running=True) == ["leased"]


def test_an_abandoned_call_hands_its_result_over_after_the_loop_closed() -> None:
    assert _abandon_then_answer(keep_loop_running=False) == ["leased"]


def test_an_answer_arriving_while_the_loop_shuts_down_goes_to_on_abandoned() -> None:
    # The sync consumer closes its IoThreads as its loop's last act; asyncio.run then stops the
    # loop and closes it. An answer arriving in between was handed to the stopped loop, whose
    # close() dropped it, so on_abandoned never saw it (its pop's message stayed leased).
    answer = threading.Event()
    delivered = threading.Event()
    got: list[str] = []

    def blocking_pop() -> str:
        answer.wait(5)
        return "leased"

    def on_abandoned(v: str) -> None:
        got.append(v)
        delivered.set()

    async def main() -> None:
        io = IoThreads()
        task = asyncio.ensure_future(io.call(blocking_pop, on_abandoned=on_abandoned))
        await asyncio.sleep(0.05)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        io.close()

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(main())
        answer.set()  # the loop is stopped, not yet closed
        assert delivered.wait(5)
    finally:
        loop.close()
    assert got == ["leased"]
