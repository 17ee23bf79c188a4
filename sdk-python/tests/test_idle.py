"""Time spent on pops that fail counts as idle (docs/consuming.md §3): with no broker to answer,
the idle timeout ends the iterators and the consume loops quietly, each failure reported, and
the 1 s error backoff is cut at the idle deadline rather than slept out (the same case as sdk-go
and sdk-js)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

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


# An idle timeout shorter than the long poll ends the iterators and the consume loops within a
# moment of its deadline (docs/consuming.md §3): each pop waits at most the idle time left, not
# its whole timeout. Before, an empty queue's long poll of 5 s ran out first.

LONG_POLL_MS = 5000
MOMENT = 0.7
# Each shape turns a builder (blocking or asyncio) into the one under test.
SHAPES: dict[str, Callable[[Any], Any]] = {
    "plain": lambda q: q,
    "server-auto-ack": lambda q: q.server_auto_ack(True),
}
CONSUME_SHAPES: dict[str, Callable[[Any], Any]] = {
    **SHAPES,
    "three-workers": lambda q: q.concurrency(3),
}


class PopTimeouts:
    """Records the long-poll timeout (ms) of every pop sent through an httpx client's hook."""

    def __init__(self) -> None:
        self.sent: list[int] = []

    def record(self, request: httpx.Request) -> None:
        if "/pop/" in request.url.path:
            self.sent.append(int(request.url.params["timeout"]))

    async def record_async(self, request: httpx.Request) -> None:
        self.record(request)

    def check_cut(self) -> None:
        assert self.sent
        assert all(0 < ms <= IDLE * 1000 for ms in self.sent), self.sent


def ended_at_idle_deadline(took: float) -> bool:
    return IDLE <= took < IDLE + MOMENT


@pytest.mark.parametrize("shape", SHAPES)
def test_blocking_iterator_ends_at_idle_deadline_within_long_poll(
    broker_url: str, qname: str, shape: str
) -> None:
    rec = PopTimeouts()
    http = httpx.Client(event_hooks={"request": [rec.record]})
    with lanes.Lanes(broker_url, http_client=http) as client:
        q = SHAPES[shape](client.queue(qname).timeout_millis(LONG_POLL_MS))
        started = time.monotonic()
        with q.messages(idle_timeout=IDLE) as it:
            for m in it:
                raise AssertionError(f"handed over {m}")
        took = time.monotonic() - started
    assert ended_at_idle_deadline(took), took
    rec.check_cut()


@pytest.mark.parametrize("shape", SHAPES)
def test_asyncio_iterator_ends_at_idle_deadline_within_long_poll(
    broker_url: str, qname: str, shape: str
) -> None:
    rec = PopTimeouts()

    async def drain() -> None:
        http = httpx.AsyncClient(event_hooks={"request": [rec.record_async]})
        async with lanes.AsyncLanes(broker_url, http_client=http) as client:
            q = SHAPES[shape](client.queue(qname).timeout_millis(LONG_POLL_MS))
            async with q.messages(idle_timeout=IDLE) as it:
                async for m in it:
                    raise AssertionError(f"handed over {m}")

    started = time.monotonic()
    asyncio.run(asyncio.wait_for(drain(), 10.0))
    took = time.monotonic() - started
    assert ended_at_idle_deadline(took), took
    rec.check_cut()


@pytest.mark.parametrize("shape", CONSUME_SHAPES)
def test_consume_loop_stops_at_idle_deadline_within_long_poll(
    broker_url: str, qname: str, shape: str
) -> None:
    rec = PopTimeouts()
    http = httpx.Client(event_hooks={"request": [rec.record]})
    with lanes.Lanes(broker_url, http_client=http) as client:
        q = CONSUME_SHAPES[shape](client.queue(qname).timeout_millis(LONG_POLL_MS))
        started = time.monotonic()
        q.idle_millis(int(IDLE * 1000)).run(lambda m: None)
        took = time.monotonic() - started
    assert ended_at_idle_deadline(took), took
    rec.check_cut()


@pytest.mark.parametrize("shape", CONSUME_SHAPES)
def test_asyncio_consume_loop_stops_at_idle_deadline_within_long_poll(
    broker_url: str, qname: str, shape: str
) -> None:
    rec = PopTimeouts()

    async def run() -> float:
        http = httpx.AsyncClient(event_hooks={"request": [rec.record_async]})
        async with lanes.AsyncLanes(broker_url, http_client=http) as client:
            q = CONSUME_SHAPES[shape](client.queue(qname).timeout_millis(LONG_POLL_MS))
            started = time.monotonic()
            await asyncio.wait_for(q.idle_millis(int(IDLE * 1000)).run(lambda m: None), 10.0)
            return time.monotonic() - started

    took = asyncio.run(run())
    assert ended_at_idle_deadline(took), took
    rec.check_cut()


def test_without_idle_timeout_each_long_poll_is_the_builders(broker_url: str, qname: str) -> None:
    rec = PopTimeouts()
    http = httpx.Client(event_hooks={"request": [rec.record]})
    with lanes.Lanes(broker_url, http_client=http) as client:
        it = client.queue(qname).timeout_millis(400).messages()
        guard = threading.Timer(1.0, it.stop)
        guard.start()
        with it:
            for m in it:
                raise AssertionError(f"handed over {m}")
    assert rec.sent
    assert all(ms == 400 for ms in rec.sent), rec.sent
