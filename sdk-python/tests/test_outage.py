"""A handler that fails only for want of a broker spends no retry of its message
(docs/consuming.md §3 step 5): released with ``retry``, it is handled again and never reaches the
DLQ through an outage; a 500 or another 4xx is nacked ``failed`` as before."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

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
