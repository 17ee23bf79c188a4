"""IoThreads.call, which runs the sync consumer's blocking pops: a call abandoned by a stop still
completes, and its result must reach ``on_abandoned`` (to be released), whether the event loop is
still running or already closed."""

from __future__ import annotations

import asyncio
import threading

from lanes._consumer import IoThreads


class _HeldPop:
    """A blocking pop held until ``answer`` is set, and the ``on_abandoned`` that collects it."""

    def __init__(self) -> None:
        self.answer = threading.Event()
        self.delivered = threading.Event()
        self.got: list[str] = []

    def blocking_pop(self) -> str:
        self.answer.wait(5)
        return "leased"

    def on_abandoned(self, v: str) -> None:
        self.got.append(v)
        self.delivered.set()


def _abandon_then_answer(keep_loop_running: bool) -> list[str]:
    pop = _HeldPop()

    async def main() -> None:
        call = IoThreads().call(pop.blocking_pop, on_abandoned=pop.on_abandoned)
        task = asyncio.ensure_future(call)
        await asyncio.sleep(0.05)
        task.cancel()  # the consumer stopped while its pop was in flight
        await asyncio.gather(task, return_exceptions=True)
        if keep_loop_running:
            pop.answer.set()
            await asyncio.sleep(0.2)  # the answer arrives while the loop still runs

    asyncio.run(main())
    pop.answer.set()  # else: the loop is closed when the answer arrives
    assert pop.delivered.wait(5)
    return pop.got


def test_an_abandoned_call_hands_its_result_over_while_the_loop_runs() -> None:
    assert _abandon_then_answer(keep_loop_running=True) == ["leased"]


def test_an_abandoned_call_hands_its_result_over_after_the_loop_closed() -> None:
    assert _abandon_then_answer(keep_loop_running=False) == ["leased"]


def test_an_answer_arriving_while_the_loop_shuts_down_goes_to_on_abandoned() -> None:
    # The sync consumer closes its IoThreads as its loop's last act; asyncio.run then stops the
    # loop and closes it. An answer arriving in between was handed to the stopped loop, whose
    # close() dropped it, so on_abandoned never saw it (its pop's message stayed leased).
    pop = _HeldPop()

    async def main() -> None:
        io = IoThreads()
        task = asyncio.ensure_future(io.call(pop.blocking_pop, on_abandoned=pop.on_abandoned))
        await asyncio.sleep(0.05)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        io.close()

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(main())
        pop.answer.set()  # the loop is stopped, not yet closed
        assert pop.delivered.wait(5)
    finally:
        loop.close()
    assert pop.got == ["leased"]
