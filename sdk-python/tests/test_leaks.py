"""A consumer, iterator or buffer ended in each way it can end leaves no non-daemon thread of the
SDK and no asyncio task running: a program that stopped them exits without waiting, and a test
harness that checks for leaks finds none (a real broker at LANES_TEST_URL)."""

from __future__ import annotations

import asyncio
import gc
import socket
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Iterator

import pytest

import lanes


def sdk_threads_holding_exit() -> list[str]:
    """The SDK's threads that would keep the interpreter from exiting (daemon threads do not:
    an abandoned long poll's helper thread ends when the broker answers it)."""
    return [t.name for t in threading.enumerate() if t.name.startswith("lanes") and not t.daemon]


def other_tasks() -> list[asyncio.Task[object]]:
    return [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]


def plain(_: lanes.Message) -> None:
    time.sleep(0.01)


async def awaited(_: lanes.Message) -> None:
    await asyncio.sleep(0.01)


# -- asyncio client ------------------------------------------------------------------------------


async def soft_stop(c: lanes.AsyncLanes, q: str, handler: Callable[..., object]) -> None:
    k = c.queue(q).timeout_millis(2000).consume(handler)
    await asyncio.sleep(0.3)
    await k.stop()


async def hard_stop(c: lanes.AsyncLanes, q: str, handler: Callable[..., object]) -> None:
    k = c.queue(q).renew_lease(True, 50).consume(handler)
    await asyncio.sleep(0.3)
    await k.stop_and_cancel()


async def limit(c: lanes.AsyncLanes, q: str, handler: Callable[..., object]) -> None:
    await c.queue(q).limit(2).concurrency(3).run(handler)


async def idle(c: lanes.AsyncLanes, q: str, handler: Callable[..., object]) -> None:
    await c.queue(q).timeout_millis(100).idle_millis(300).run(handler)


async def terminal(c: lanes.AsyncLanes, q: str, handler: Callable[..., object]) -> None:
    with pytest.raises(lanes.APIError):
        await c.queue(q).batch(1_000_000).run(handler)


async def run_cancelled(c: lanes.AsyncLanes, q: str, handler: Callable[..., object]) -> None:
    run = asyncio.ensure_future(c.queue(q).timeout_millis(2000).run(handler))
    await asyncio.sleep(0.3)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run


ASYNC_ENDS: dict[str, Callable[[lanes.AsyncLanes, str, Callable[..., object]], Awaitable[None]]] = {
    "soft stop": soft_stop,
    "hard stop": hard_stop,
    "limit": limit,
    "idle timeout": idle,
    "terminal error": terminal,
    "run cancelled": run_cancelled,
}


@pytest.mark.parametrize("handler", [plain, awaited], ids=["def handler", "async def handler"])
@pytest.mark.parametrize("end", list(ASYNC_ENDS), ids=list(ASYNC_ENDS))
async def test_async_consumer_leaves_nothing_running(
    broker_url: str, qname: str, end: str, handler: Callable[..., object]
) -> None:
    async with lanes.AsyncLanes(broker_url, retry_attempts=1, timeout=10) as c:
        await c.queue(qname).push([1, 2, 3])
        await ASYNC_ENDS[end](c, qname, handler)
        assert sdk_threads_holding_exit() == []
        assert other_tasks() == []
    assert sdk_threads_holding_exit() == []
    assert other_tasks() == []


async def test_async_iterator_and_buffer_leave_nothing_running(broker_url: str, qname: str) -> None:
    async with lanes.AsyncLanes(broker_url, retry_attempts=1, timeout=10) as c:
        await c.queue(qname).push([1, 2])
        async with c.queue(qname).batch(2).renew_lease(True, 50).messages() as it:
            async for _ in it:
                await asyncio.sleep(0.12)
                break
        async for _ in c.queue(qname).timeout_millis(100).idle_millis(300).messages():
            pass
        assert other_tasks() == []
        await c.queue(qname).buffer().push([3])
    assert sdk_threads_holding_exit() == []
    assert other_tasks() == []


@pytest.fixture
def stalled_url() -> Iterator[str]:
    """A broker address that accepts connections and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


async def test_async_close_that_gives_up_leaves_no_task(stalled_url: str) -> None:
    # The flusher's send to a broker that does not answer went on after aclose() gave up.
    c = lanes.AsyncLanes(stalled_url, timeout=10)
    await c.queue("stalled").buffer().push([1])
    await asyncio.sleep(0.1)  # the flush is in flight
    with pytest.raises(lanes.UnsentError):
        await c.aclose(timeout=0.3)
    assert other_tasks() == []


# -- blocking client -----------------------------------------------------------------------------


def test_blocking_consumer_leaves_no_thread_holding_exit(broker_url: str, qname: str) -> None:
    with lanes.Lanes(broker_url, retry_attempts=1, timeout=10) as c:
        c.queue(qname).push([1, 2, 3])
        k = c.queue(qname).timeout_millis(2000).consume(plain)
        time.sleep(0.3)
        k.stop()
        assert sdk_threads_holding_exit() == []
        k = c.queue(qname).renew_lease(True, 50).consume(plain)
        time.sleep(0.2)
        k.stop_and_cancel()
        assert sdk_threads_holding_exit() == []
        c.queue(qname).push([4, 5])
        c.queue(qname).limit(2).concurrency(3).run(plain)
        assert sdk_threads_holding_exit() == []
        c.queue(qname).timeout_millis(100).idle_millis(300).run(plain)
        assert sdk_threads_holding_exit() == []
        with pytest.raises(lanes.APIError):
            c.queue(qname).batch(1_000_000).run(plain)
        assert sdk_threads_holding_exit() == []
        c.queue(qname).push([6, 7])
        with c.queue(qname).batch(2).renew_lease(True, 50).messages() as it:
            for _ in it:
                break
        c.queue(qname).buffer().push([8])
        c.queue(qname).timeout_millis(2000).consume(plain)  # left to close()
    assert sdk_threads_holding_exit() == []


def test_a_client_keeps_no_ended_consumer_alive(broker_url: str, qname: str) -> None:
    # A long-lived client starting many short consumers held every one until close(): each
    # ended consumer (its engine, handler state, last messages) stayed referenced.
    with lanes.Lanes(broker_url, retry_attempts=1, timeout=10) as c:
        ended: list[weakref.ref[lanes.Consumer]] = []
        for _ in range(3):
            k = c.queue(qname).timeout_millis(100).idle_millis(200).consume(plain)
            k.closed(5)
            ended.append(weakref.ref(k))
            del k
        c.queue(qname).timeout_millis(2000).consume(plain)  # the next start lets the ended ones go
        gc.collect()
        assert [r() for r in ended] == [None, None, None]


async def test_an_async_client_keeps_no_ended_consumer_alive(broker_url: str, qname: str) -> None:
    async with lanes.AsyncLanes(broker_url, retry_attempts=1, timeout=10) as c:
        ended: list[weakref.ref[lanes.AsyncConsumer]] = []
        for _ in range(3):
            k = c.queue(qname).timeout_millis(100).idle_millis(200).consume(awaited)
            await asyncio.wait_for(k.closed(), 5)
            ended.append(weakref.ref(k))
            del k
        c.queue(qname).timeout_millis(2000).consume(awaited)
        gc.collect()
        assert [r() for r in ended] == [None, None, None]
