"""A handler that fails only for want of a broker spends no retry of its message
(docs/consuming.md §3 step 5): released with ``retry``, it is handled again and never reaches the
DLQ through an outage; a 500 or another 4xx is nacked ``failed`` as before."""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

import lanes


def closed_port_url() -> str:
    """A local URL nobody listens on: a call to it is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.fixture
def client(broker_url: str) -> Iterator[lanes.Lanes]:
    with lanes.Lanes(broker_url, retry_attempts=1, timeout=10) as c:
        yield c


def connection_refused() -> BaseException:
    """The SDK's own error of a call to a broker that is down: a push through a second client
    to a closed port."""
    with lanes.Lanes(closed_port_url(), retry_attempts=0) as down:
        try:
            down.queue("orders-out").push([1])
        except lanes.APIConnectionError as e:
            return e
    raise AssertionError("the push to a closed port succeeded")


def wrapped_connection_refused() -> BaseException:
    try:
        raise RuntimeError("commit order") from connection_refused()
    except RuntimeError as e:
        return e


FAILURES: list[tuple[str, Callable[[], BaseException], bool]] = [
    ("connection-refused", connection_refused, True),
    ("connection-refused-wrapped", wrapped_connection_refused, True),
    (
        "503",
        lambda: lanes.InternalServerError(503, "database unavailable", code="database_unavailable"),
        True,
    ),
    ("502", lambda: lanes.InternalServerError(502, "Bad Gateway"), True),
    ("504", lambda: lanes.InternalServerError(504, "Gateway Timeout"), True),
    (
        "429",
        lambda: lanes.RateLimitError(429, "slow down", code="rate_limited", retry_after=0.3),
        True,
    ),
    ("500", lambda: lanes.InternalServerError(500, "internal", code="internal"), False),
    ("400", lambda: lanes.BadRequestError(400, "bad", code="bad_request"), False),
]


@pytest.mark.parametrize(
    ("failure", "redelivered"), [(f, r) for _, f, r in FAILURES], ids=[n for n, _, _ in FAILURES]
)
def test_a_handler_failing_for_want_of_a_broker_spends_no_retry(
    client: lanes.Lanes, qname: str, failure: Callable[[], BaseException], redelivered: bool
) -> None:
    assert client.queue(qname).configure({"retryLimit": 0}).configured
    client.queue(qname).push(["order"])
    calls: list[Any] = []

    def handler(m: Any) -> None:
        calls.append(m)
        if len(calls) == 1:
            raise failure()

    client.queue(qname).wait(False).idle_millis(2500).consume(handler).closed(timeout=20)
    dead = [m.data for m in client.admin.list_dlq(queue=qname).messages]
    if redelivered:
        assert (len(calls), dead) == (2, [])
    else:
        assert (len(calls), dead) == (1, ["order"])


def test_a_batch_handler_failing_for_want_of_a_broker_spends_no_retry(
    client: lanes.Lanes, qname: str
) -> None:
    assert client.queue(qname).configure({"retryLimit": 0}).configured
    client.queue(qname).push(["a", "b"])
    calls: list[list[Any]] = []

    def handler(ms: list[Any]) -> None:
        calls.append(ms)
        if len(calls) == 1:
            raise lanes.InternalServerError(503, "database unavailable")

    q = client.queue(qname).wait(False).batch(10).idle_millis(2500)
    q.consume_batch(handler).closed(timeout=20)
    assert [len(ms) for ms in calls] == [2, 2]
    assert client.admin.list_dlq(queue=qname).messages == []


@pytest.mark.parametrize(
    ("failure", "redelivered"),
    [(connection_refused, True), (FAILURES[6][1], False)],
    ids=["connection-refused", "500"],
)
def test_an_async_handler_failing_for_want_of_a_broker_spends_no_retry(
    broker_url: str, qname: str, failure: Callable[[], BaseException], redelivered: bool
) -> None:
    async def main() -> tuple[int, list[Any]]:
        async with lanes.AsyncLanes(broker_url, retry_attempts=1, timeout=10) as c:
            assert (await c.queue(qname).configure({"retryLimit": 0})).configured
            await c.queue(qname).push(["order"])
            calls = 0
            err = failure()

            async def handler(m: Any) -> None:
                nonlocal calls
                calls += 1
                if calls == 1:
                    raise err

            await asyncio.wait_for(
                c.queue(qname).wait(False).idle_millis(2500).consume(handler).closed(), 20
            )
            return calls, [m.data for m in (await c.admin.list_dlq(queue=qname)).messages]

    calls, dead = asyncio.run(main())
    assert (calls, dead) == ((2, []) if redelivered else (1, ["order"]))


def test_a_handler_failing_for_want_of_a_broker_is_paced(client: lanes.Lanes, qname: str) -> None:
    # It does not spin: after each such pop the worker waits the backoff of a failed pop (1 s,
    # 2 s, 4 s, … up to 30 s) before popping again, and a stop cuts that wait short.
    client.queue(qname).push(["order"])
    calls: list[Any] = []
    with lanes.Lanes(closed_port_url(), retry_attempts=0) as down:

        def handler(m: Any) -> None:
            calls.append(m)
            down.queue("orders-out").push([1])

        c = client.queue(qname).timeout_millis(1000).consume(handler)
        time.sleep(2.5)
        # handled at 0 s, again after 1 s, next after 2 s more (3 s): two calls, not hundreds
        assert len(calls) == 2
        started = time.monotonic()
        c.stop(timeout=5)
        assert time.monotonic() - started < 0.5, "a stop cuts the wait short"
    assert client.admin.list_dlq(queue=qname).messages == []


@pytest.fixture
def rate_limited_push(broker_url: str) -> Iterator[dict[str, str]]:
    """A fault-script run whose first push answers 429 with ``Retry-After: 3``; its headers,
    given to a client, make the script apply to that client's pushes."""
    run = f"py-{uuid.uuid4().hex[:12]}"
    rules = [
        {
            "method": "POST",
            "path": "/api/v1/push",
            "responses": [{"status": 429, "headers": {"Retry-After": "3"}}],
        }
    ]
    r = httpx.put(f"{broker_url}/__test/faults/{run}", content=json.dumps({"rules": rules}))
    assert r.status_code == 204
    yield {"X-Lanes-Test-Run": run}
    httpx.delete(f"{broker_url}/__test/faults/{run}")


# The worker waited only the loop's own backoff (1 s) after a handler failed with the broker's
# 429 asking for 3 s, and popped the message back while the broker still asked it to wait.
def test_a_handler_failing_with_a_429_waits_at_least_its_retry_after(
    client: lanes.Lanes, broker_url: str, qname: str, rate_limited_push: dict[str, str]
) -> None:
    client.queue(qname).push(["order"])
    calls: list[float] = []
    with lanes.Lanes(broker_url, max_429_attempts=0, headers=rate_limited_push) as out:

        def handler(m: Any) -> None:
            calls.append(time.monotonic())
            out.queue(qname + "-out").push([m.data])  # 429, Retry-After: 3, the first time

        cons = client.queue(qname).idle_millis(5000).consume(handler)
        cons.closed(timeout=20)
    assert len(calls) == 2
    assert calls[1] - calls[0] >= 2.9, calls[1] - calls[0]


def test_an_async_handler_failing_with_a_429_waits_at_least_its_retry_after(
    broker_url: str, qname: str, rate_limited_push: dict[str, str]
) -> None:
    async def main() -> list[float]:
        calls: list[float] = []
        async with (
            lanes.AsyncLanes(broker_url, retry_attempts=1, timeout=10) as c,
            lanes.AsyncLanes(broker_url, max_429_attempts=0, headers=rate_limited_push) as out,
        ):
            await c.queue(qname).push(["order"])

            async def handler(m: Any) -> None:
                calls.append(time.monotonic())
                try:
                    await out.queue(qname + "-out").push([m.data])
                except lanes.APIError as e:
                    raise RuntimeError("forward order") from e  # wrapped: its hint still counts

            await asyncio.wait_for(c.queue(qname).idle_millis(5000).consume(handler).closed(), 20)
        return calls

    calls = asyncio.run(main())
    assert len(calls) == 2
    assert calls[1] - calls[0] >= 2.9, calls[1] - calls[0]


def test_a_handlers_429_neither_counts_in_nor_resets_the_outage_backoff(
    client: lanes.Lanes, qname: str
) -> None:
    # As a pop's 429 (docs/consuming.md §4): refused (1 s), then a 429 asking for 0.2 s (waited
    # by its hint), then refused again: 2 s, the doubling carried on past the 429.
    client.queue(qname).push(["order"])
    refused = connection_refused()
    failures: list[BaseException] = [
        refused,
        lanes.RateLimitError(429, "slow down", code="rate_limited", retry_after=0.2),
        refused,
    ]
    calls: list[float] = []

    def handler(m: Any) -> None:
        calls.append(time.monotonic())
        if failures:
            raise failures.pop(0)

    client.queue(qname).idle_millis(4000).consume(handler).closed(timeout=20)
    gaps = [b - a for a, b in itertools.pairwise(calls)]
    assert len(gaps) == 3, gaps
    for gap, want in zip(gaps, [1.0, 0.2, 2.0], strict=True):
        assert want - 0.05 <= gap < want + 0.4, gaps
