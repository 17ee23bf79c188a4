"""Time spent on pops that fail counts as idle (docs/consuming.md §3): with no broker to answer,
the idle timeout ends the iterators and the consume loops quietly, each failure reported, and
the 1 s error backoff is cut at the idle deadline rather than slept out (the same case as sdk-go
and sdk-js)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import lanes

IDLE = 0.3


def closed_port_url() -> str:
    """A local URL nobody listens on: connecting to it is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_blocking_iterator_ends_when_idle_while_pops_fail() -> None:
    errors: list[BaseException] = []
    with lanes.Lanes(closed_port_url(), retry_attempts=0) as client:
        started = time.monotonic()
        it = client.queue("q").messages(idle_timeout=IDLE, on_error=errors.append)
        guard = threading.Timer(5.0, it.stop)  # ends the iteration if the idle timeout does not
        guard.start()
        try:
            with it:
                for m in it:
                    raise AssertionError(f"handed over {m}")
        finally:
            guard.cancel()
        took = time.monotonic() - started
    assert IDLE <= took < IDLE + 0.5, "the idle timeout ended it, not the guard's stop() at 5 s"
    assert errors


def test_asyncio_iterator_ends_when_idle_while_pops_fail() -> None:
    errors: list[BaseException] = []

    async def drain() -> None:
        async with (
            lanes.AsyncLanes(closed_port_url(), retry_attempts=0) as client,
            client.queue("q").messages(idle_timeout=IDLE, on_error=errors.append) as it,
        ):
            async for m in it:
                raise AssertionError(f"handed over {m}")

    started = time.monotonic()
    asyncio.run(asyncio.wait_for(drain(), 5.0))
    took = time.monotonic() - started
    assert IDLE <= took < IDLE + 0.5
    assert errors


def test_consume_loop_stops_when_idle_while_pops_fail() -> None:
    errors: list[BaseException] = []
    with lanes.Lanes(closed_port_url(), retry_attempts=0) as client:
        started = time.monotonic()
        q = client.queue("q").idle_millis(int(IDLE * 1000)).on_error(errors.append)
        cons = q.consume(lambda m: None)
        try:
            cons.closed(5.0)  # raises TimeoutError if the idle timeout does not end it
        finally:
            cons.stop(5.0)
        took = time.monotonic() - started
    assert took < IDLE + 1.0
    assert errors


def test_asyncio_consume_loop_stops_when_idle_while_pops_fail() -> None:
    errors: list[BaseException] = []

    async def run() -> None:
        async with lanes.AsyncLanes(closed_port_url(), retry_attempts=0) as client:
            q = client.queue("q").idle_millis(int(IDLE * 1000)).on_error(errors.append)
            await asyncio.wait_for(q.run(lambda m: None), 5.0)

    started = time.monotonic()
    asyncio.run(run())
    assert time.monotonic() - started < IDLE + 1.0
    assert errors
