"""Push item encoding and the push buffer's lifecycle: against a real broker (LANES_TEST_URL)
for what is stored, over httpx.MockTransport for the buffer's batch policy."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
import logging
import re
import threading
import time
import uuid
from typing import Any

import httpx
import pydantic
import pytest

import lanes

from .scripts import run_script


def _pop_all(c: lanes.Lanes, q: str) -> list[Any]:
    msgs = c.queue(q).autopilot(False).batch(50).wait(False).pop()
    if msgs:
        c.ack(msgs)
    return [m.data for m in msgs]


# --- what an item is (real broker) -----------------------------------------------------------


def test_a_str_or_bytes_is_not_a_list_of_items(broker_url: str, qname: str) -> None:
    with lanes.Lanes(broker_url) as c:
        for wrong in ("hello", b"hello", {"data": 1}):
            with pytest.raises(lanes.InvalidItemError, match="want a list of items"):
                c.queue(qname).push(wrong)  # type: ignore[arg-type]
        assert _pop_all(c, qname) == []


def test_an_envelope_has_no_other_keys_and_one_payload_key(broker_url: str, qname: str) -> None:
    with lanes.Lanes(broker_url) as c:
        event = {"type": "order.created", "id": "evt-1", "data": {"orderId": 9137}}
        c.queue(qname).push([event, {"data": {"orderId": 1}, "transaction_id": "t-1"}])
        with pytest.raises(lanes.InvalidItemError, match="both data and payload"):
            c.queue(qname).push([{"data": 1, "payload": 2}])
        assert _pop_all(c, qname) == [event, {"orderId": 1}]


def test_a_transaction_id_that_is_not_a_str_is_refused(broker_url: str, qname: str) -> None:
    with lanes.Lanes(broker_url) as c:
        with pytest.raises(lanes.InvalidItemError, match="transaction_id must be a str") as e:
            c.queue(qname).push([{"data": 0}, {"data": 1, "transactionId": 9137}])
        assert e.value.index == 1
        assert _pop_all(c, qname) == []


def test_none_and_an_empty_id_are_absent_and_minted(broker_url: str, qname: str) -> None:
    """As TS's undefined, null and "" (docs/sdk-design.md §2's Push items table)."""
    with lanes.Lanes(broker_url) as c:
        items = [{"data": 1, "transaction_id": ""}, {"data": 2, "transactionId": None}]
        items.append({"data": 3, "transaction_id": None, "trace_id": ""})
        results = c.queue(qname).push(items)
        assert [uuid.UUID(r.transaction_id).version for r in results] == [7, 7, 7]
        assert sorted(_pop_all(c, qname)) == [1, 2, 3]


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (b"\x00\x01", "bytes are not JSON"),
        (datetime.datetime(2020, 1, 1), "not JSON serializable"),
        (float("nan"), "Out of range float"),
        ({"total": float("inf")}, "Out of range float"),
        ("lone \ud800 surrogate", "surrogate"),
    ],
)
def test_a_payload_json_cannot_send_as_given_is_refused(
    broker_url: str, qname: str, payload: Any, why: str
) -> None:
    with lanes.Lanes(broker_url) as c:
        with pytest.raises(lanes.InvalidItemError, match=why):
            c.queue(qname).push([1, {"data": payload}])
        assert _pop_all(c, qname) == []


class _Order(pydantic.BaseModel):
    order_id: int


@dataclasses.dataclass
class _Invoice:
    order_id: int


@pytest.mark.parametrize(
    ("payload", "fix"),
    [
        (_Order(order_id=1), 'push _Order.model_dump(mode="json")'),
        (_Invoice(order_id=1), "push dataclasses.asdict(_Invoice)"),
        (datetime.datetime(2020, 1, 1), "push datetime.isoformat()"),
    ],
)
def test_a_payload_of_a_model_dataclass_or_datetime_is_refused_saying_what_to_push(
    broker_url: str, qname: str, payload: Any, fix: str
) -> None:
    """``message.decode(Order)`` reads a pydantic model; pushing one is refused (the payload
    must be JSON as given), and the error says what to push instead, for items, KV values and
    timer payloads alike."""
    with lanes.Lanes(broker_url) as c:
        with pytest.raises(lanes.InvalidItemError, match=re.escape(fix)):
            c.queue(qname).push([{"data": {"order": payload}}])
        with pytest.raises(lanes.InvalidValueError, match=re.escape(fix)):
            c.kv(qname).put("k", payload)
        with pytest.raises(lanes.InvalidValueError, match=re.escape(fix)):
            c.timers(qname).schedule("t", delay_millis=60_000, payload=payload)
        assert _pop_all(c, qname) == []


class _CountingDict(dict[str, Any]):
    """A payload that counts how often ``json`` encodes it (the encoder reads a dict subclass
    through ``items()``)."""

    encodes = 0

    def items(self) -> Any:
        _CountingDict.encodes += 1
        return super().items()


def test_a_payload_is_encoded_once_per_push_direct_or_buffered(broker_url: str, qname: str) -> None:
    with lanes.Lanes(broker_url) as c:
        _CountingDict.encodes = 0
        c.queue(qname).push([_CountingDict(n=1), {"data": _CountingDict(n=2), "trace_id": "t"}])
        assert _CountingDict.encodes == 2, "each payload encoded once: the check's encoding is sent"

        _CountingDict.encodes = 0
        b = c.queue(qname).buffer(time_millis=60_000)
        b.push([_CountingDict(n=3)])
        b.flush(timeout=10)
        assert _CountingDict.encodes == 1, "checked at buffer.push, the same bytes sent at flush"
        assert _pop_all(c, qname) == [{"n": 1}, {"n": 2}, {"n": 3}]


def test_a_payload_is_encoded_once_per_transaction_push(broker_url: str, qname: str) -> None:
    with lanes.Lanes(broker_url) as c:
        _CountingDict.encodes = 0
        tx = c.transaction().queue(qname).push([_CountingDict(n=1)])
        tx.queue(qname).push([{"data": _CountingDict(n=2), "trace_id": "t"}])
        assert tx.commit().success
        assert _CountingDict.encodes == 2, "each payload encoded once: the check's encoding is sent"
        assert _pop_all(c, qname) == [{"n": 1}, {"n": 2}]


def test_buffered_pushes_are_logged_at_warning(caplog: pytest.LogCaptureFixture) -> None:
    def answer(req: httpx.Request) -> httpx.Response:
        items = json.loads(req.content)["items"]
        rows = [
            {"index": i, "message_id": "m", "transaction_id": it["transactionId"]}
            | {"queueName": "q", "status": "buffered"}
            for i, it in enumerate(items)
        ]
        return httpx.Response(201, json=rows)

    c = lanes.Lanes(
        "http://broker", http_client=httpx.Client(transport=httpx.MockTransport(answer))
    )
    with caplog.at_level(logging.WARNING, logger="lanes"):
        c.queue("q").push([1, 2])
    assert any("2 push item(s) buffered" in r.getMessage() for r in caplog.records)


def test_buffered_items_are_logged_even_when_another_item_failed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def answer(req: httpx.Request) -> httpx.Response:
        a, b = json.loads(req.content)["items"]
        return httpx.Response(
            201,
            json=[
                {"index": 0, "message_id": "m0", "transaction_id": a["transactionId"]}
                | {"queueName": "q", "status": "buffered"},
                {"index": 1, "message_id": "", "transaction_id": b["transactionId"]}
                | {"queueName": "q", "status": "failed", "error": "boom"},
            ],
        )

    c = lanes.Lanes(
        "http://broker", http_client=httpx.Client(transport=httpx.MockTransport(answer))
    )
    with caplog.at_level(logging.WARNING, logger="lanes"), pytest.raises(lanes.PushError) as e:
        c.queue("q").push([1, 2])
    assert [it.index for it in e.value.items] == [1]
    assert any("1 push item(s) buffered" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("status", "content", "error", "want_status", "want_body"),
    [
        (201, b"[]", "^lanes: push: broker answered 0 results for 2 items$", 0, []),
        (
            201,
            b'[{"index":0,"status":"queued"}]',
            "^lanes: push: broker answered 1 results for 2 items$",
            0,
            [{"index": 0, "status": "queued"}],
        ),
        (201, b'{"items":[]}', "broker answered 0 results for 2 items", 0, {"items": []}),
        (
            200,
            b"<html>proxy</html>",
            "^lanes: POST /api/v1/push: cannot decode the answer: ",
            200,
            b"<html>proxy</html>",
        ),
    ],
)
def test_a_push_answer_that_does_not_match_the_items_raises_unexpected_answer_error(
    status: int, content: bytes, error: str, want_status: int, want_body: Any
) -> None:
    def answer(req: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=content)

    c = lanes.Lanes(
        "http://broker", http_client=httpx.Client(transport=httpx.MockTransport(answer))
    )
    with pytest.raises(lanes.UnexpectedAnswerError, match=error) as e:
        c.queue("q").push([1, 2])
    assert not isinstance(e.value, lanes.PushError), "not a failed item: the push may be stored"
    assert (e.value.status, e.value.body) == (want_status, want_body)


async def test_an_async_push_answer_with_another_count_raises_unexpected_answer_error() -> None:
    def answer(req: httpx.Request) -> httpx.Response:
        return httpx.Response(201, json=[])

    c = lanes.AsyncLanes(
        "http://broker", http_client=httpx.AsyncClient(transport=httpx.MockTransport(answer))
    )
    with pytest.raises(lanes.UnexpectedAnswerError, match="broker answered 0 results for 1 items"):
        await c.queue("q").push([1])
    await c.aclose()


# --- the buffer against a real broker --------------------------------------------------------


def test_an_unencodable_item_is_refused_at_the_buffer_push(broker_url: str, qname: str) -> None:
    c = lanes.Lanes(broker_url)
    b = c.queue(qname).buffer(message_count=5, time_millis=50)
    with pytest.raises(lanes.InvalidItemError):
        b.push([1, 2, datetime.datetime(2020, 1, 1), 4])
    assert len(b) == 0
    b.push([1, 2, 4, 5, 6, 7])
    c.close(timeout=5)
    with lanes.Lanes(broker_url) as c2:
        assert _pop_all(c2, qname) == [1, 2, 4, 5, 6, 7]


def test_the_buffer_drops_only_the_item_the_broker_refuses_alone(
    broker_url: str, qname: str, caplog: pytest.LogCaptureFixture
) -> None:
    dropped: list[lanes.Item] = []

    def on_error(e: BaseException) -> None:
        assert isinstance(e, lanes.DroppedError) and isinstance(e.cause, lanes.APIError)
        dropped.extend(e.items)

    with lanes.Lanes(broker_url) as c:
        b = c.queue(qname).buffer(message_count=10, time_millis=60_000, on_error=on_error)
        b.push(
            [{"data": i, "transaction_id": "bad\x00id" if i == 5 else f"ok-{i}"} for i in range(10)]
        )
        with caplog.at_level(logging.WARNING, logger="lanes"):
            b.flush()
        assert _pop_all(c, qname) == [0, 1, 2, 3, 4, 6, 7, 8, 9]
    assert [d.transaction_id for d in dropped] == ["bad\x00id"]
    assert [r.levelno for r in caplog.records if "dropped" in r.getMessage()] == [logging.ERROR]


def test_close_flushes_every_buffer_then_raises_with_the_count(broker_url: str, qname: str) -> None:
    def stuck(items: list[Any]) -> list[lanes.PushResult]:
        raise lanes.APIConnectionError("down")

    c = lanes.Lanes(broker_url)
    # A buffer whose every flush fails, registered first so the old close() waited on it alone.
    first = lanes._buffer.PushBuffer(stuck, lanes._buffer.BufferOptions(time_millis=60_000))
    c._buffers[("stuck", None)] = first
    first.push([1, 2])
    healthy = c.queue(qname).buffer(message_count=1000, time_millis=3_600_000)
    healthy.push([1, 2, 3])
    with pytest.raises(lanes.UnsentError) as e:
        c.flush_all(timeout=0.5)
    assert e.value.unsent == 2
    assert isinstance(e.value, TimeoutError)
    with lanes.Lanes(broker_url) as c2:
        assert _pop_all(c2, qname) == [1, 2, 3]
    healthy.push([4])
    with pytest.raises(lanes.UnsentError) as e:
        c.close(timeout=0.5)
    assert e.value.unsent == 2
    with lanes.Lanes(broker_url) as c2:
        assert _pop_all(c2, qname) == [4]


def test_buffer_stats_counts_buffers_waiting_items_and_batches_sent(
    broker_url: str, qname: str
) -> None:
    """As Go's BufferStats and TS's bufferStats()."""
    with lanes.Lanes(broker_url) as c:
        assert c.buffer_stats() == lanes.BufferStats(0, 0, 0)
        c.queue(qname).partition("a").buffer(time_millis=3_600_000).push([1, 2, 3])
        c.queue(qname).partition("b").buffer(time_millis=3_600_000).push([4, 5])
        assert c.buffer_stats() == lanes.BufferStats(
            active_buffers=2, total_buffered_messages=5, flushes_performed=0
        )
        c.queue(qname).partition("a").buffer(message_count=7)  # shared per (queue, partition)
        assert c.buffer_stats() == lanes.BufferStats(2, 5, 0)
        c.flush_all()
        assert c.buffer_stats() == lanes.BufferStats(2, 0, 2)
        stored = _pop_all(c, qname) + _pop_all(c, qname)  # a pop claims one partition
        assert sorted(stored) == [1, 2, 3, 4, 5]


async def test_async_buffer_stats_counts_buffers_waiting_items_and_batches_sent(
    broker_url: str, qname: str
) -> None:
    async with lanes.AsyncLanes(broker_url) as c:
        assert c.buffer_stats() == lanes.BufferStats(0, 0, 0)
        await c.queue(qname).partition("a").buffer(time_millis=3_600_000).push([1, 2, 3])
        await c.queue(qname).partition("b").buffer(time_millis=3_600_000).push([4, 5])
        assert c.buffer_stats() == lanes.BufferStats(2, 5, 0)
        await c.flush_all()
        assert c.buffer_stats() == lanes.BufferStats(2, 0, 2)


def test_a_closed_client_refuses_buffers_and_calls(broker_url: str, qname: str) -> None:
    c = lanes.Lanes(broker_url)
    b = c.queue(qname).buffer(time_millis=60_000)
    b.push([1])
    c.close()
    with pytest.raises(lanes.ClientClosedError):
        b.push([2])
    with pytest.raises(lanes.ClientClosedError):
        c.queue(qname).partition("later").buffer()
    with pytest.raises(lanes.ClientClosedError):
        c.queue(qname).push([3])
    with lanes.Lanes(broker_url) as c2:
        assert _pop_all(c2, qname) == [1]


def test_close_wakes_a_push_waiting_for_room_with_client_closed_error() -> None:
    """As Go's Close: a push blocked on a full buffer fails at once, nothing of it enqueued."""
    release = threading.Event()

    def answer(req: httpx.Request) -> httpx.Response:
        release.wait(10)  # the broker holds the flush, so the buffer stays full
        return httpx.Response(503, json={"error": "down", "code": "unavailable"})

    t = httpx.MockTransport(answer)
    c = lanes.Lanes("http://broker", http_client=httpx.Client(transport=t), retry_attempts=0)
    b = c.queue("q").buffer(max_size=2, message_count=2, time_millis=60_000, on_error=_ignore)
    b.push([1, 2])
    outcome: list[str] = []

    def waiting_push() -> None:
        try:
            b.push([3])
            outcome.append("enqueued")
        except lanes.ClientClosedError:
            outcome.append("closed")

    waiter = threading.Thread(target=waiting_push)
    waiter.start()
    time.sleep(0.2)
    assert outcome == []  # waiting for room

    def close() -> None:
        with pytest.raises(lanes.UnsentError):
            c.close(timeout=0.5)

    closing = threading.Thread(target=close)
    closing.start()
    waiter.join(3)
    assert outcome == ["closed"]
    release.set()
    closing.join(5)


async def test_a_closed_async_client_refuses_buffers_and_calls(broker_url: str, qname: str) -> None:
    c = lanes.AsyncLanes(broker_url)
    b = c.queue(qname).buffer(time_millis=60_000)
    await b.push([1])
    await c.aclose()
    with pytest.raises(lanes.ClientClosedError):
        await b.push([2])
    with pytest.raises(lanes.ClientClosedError):
        c.queue(qname).buffer()
    with pytest.raises(lanes.ClientClosedError):
        await c.queue(qname).push([3])
    with lanes.Lanes(broker_url) as c2:
        assert _pop_all(c2, qname) == [1]


# --- batch policy (scripted transport) -------------------------------------------------------


def _broker(limit: int, bodies: list[dict[str, Any]]) -> httpx.MockTransport:
    """Answers like the push route, with 413 for a body over ``limit`` bytes."""
    lock = threading.Lock()

    def answer(req: httpx.Request) -> httpx.Response:
        if len(req.content) > limit:
            return httpx.Response(413, json={"error": "too large", "code": "payload_too_large"})
        body = json.loads(req.content)
        with lock:
            bodies.append(body)
        rows = [
            {"index": i, "message_id": "m", "transaction_id": it["transactionId"]}
            | {"queueName": "q", "status": "queued"}
            for i, it in enumerate(body["items"])
        ]
        return httpx.Response(201, json=rows)

    return httpx.MockTransport(answer)


def _ignore(err: BaseException) -> None:
    pass


def _down_until(healthy: threading.Event, stored: list[Any]) -> httpx.MockTransport:
    """A broker that answers 503 until ``healthy`` is set, then stores every payload."""

    def answer(req: httpx.Request) -> httpx.Response:
        if not healthy.is_set():
            return httpx.Response(503, json={"error": "down", "code": "unavailable"})
        items = json.loads(req.content)["items"]
        stored.extend(it["payload"] for it in items)
        rows = [
            {"index": i, "message_id": "m", "transaction_id": it["transactionId"]}
            | {"queueName": "q", "status": "queued"}
            for i, it in enumerate(items)
        ]
        return httpx.Response(201, json=rows)

    return httpx.MockTransport(answer)


def test_a_buffer_push_that_does_not_fit_in_time_queues_none_of_its_items() -> None:
    healthy = threading.Event()
    stored: list[Any] = []
    c = lanes.Lanes(
        "http://broker",
        http_client=httpx.Client(transport=_down_until(healthy, stored)),
        retry_attempts=0,
    )
    b = c.queue("q").buffer(
        message_count=100, time_millis=50, max_size=4, retry_delay_millis=20, on_error=_ignore
    )
    b.push([1, 2, 3])
    with pytest.raises(lanes.LanesError, match="push buffer full"):
        b.push([4, 5], timeout=0.2)
    assert len(b) == 3, "nothing of the timed-out push is queued"
    healthy.set()
    b.push([4, 5])  # the caller's retry of the whole call
    c.close(timeout=5)
    assert stored == [1, 2, 3, 4, 5]


async def test_a_cancelled_async_buffer_push_queues_none_of_its_items() -> None:
    healthy = threading.Event()
    stored: list[Any] = []
    c = lanes.AsyncLanes(
        "http://broker",
        http_client=httpx.AsyncClient(transport=_down_until(healthy, stored)),
        retry_attempts=0,
    )
    b = c.queue("q").buffer(
        message_count=100, time_millis=50, max_size=4, retry_delay_millis=20, on_error=_ignore
    )
    await b.push([1, 2, 3])
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(b.push([4, 5]), 0.2)
    assert len(b) == 3, "nothing of the cancelled push is queued"
    healthy.set()
    await b.push([4, 5])
    await c.aclose(timeout=5)
    assert stored == [1, 2, 3, 4, 5]


def test_a_buffer_push_larger_than_max_size_is_taken_whole_into_an_empty_buffer() -> None:
    healthy = threading.Event()
    stored: list[Any] = []
    healthy.set()
    c = lanes.Lanes(
        "http://broker", http_client=httpx.Client(transport=_down_until(healthy, stored))
    )
    b = c.queue("q").buffer(message_count=100, time_millis=60_000, max_size=2)
    b.push([1, 2, 3], timeout=0.2)
    assert len(b) == 3
    c.close(timeout=5)
    assert stored == [1, 2, 3]


def test_a_program_that_ends_without_close_still_flushes_its_buffer(
    broker_url: str, qname: str
) -> None:
    ran = run_script(
        f"""
        import lanes
        closed = lanes.Lanes({broker_url!r})
        closed.queue({qname!r} + "-closed").buffer(time_millis=60_000).push([0])
        closed.close()
        lanes.Lanes({broker_url!r}).queue({qname!r}).buffer(time_millis=60_000).push([1, 2])
        """
    )
    assert "unsent" not in ran.stderr
    with lanes.Lanes(broker_url) as c:
        assert _pop_all(c, qname) == [1, 2]


def test_an_async_program_that_ends_without_aclose_logs_what_it_lost(
    broker_url: str, qname: str
) -> None:
    ran = run_script(
        f"""
        import asyncio, lanes
        async def main():
            closed = lanes.AsyncLanes({broker_url!r})
            await closed.queue({qname!r}).buffer(time_millis=60_000).push([0])
            await closed.aclose()
            c = lanes.AsyncLanes({broker_url!r})
            await c.queue({qname!r}).buffer(time_millis=60_000).push([1, 2])
        asyncio.run(main())
        """
    )
    assert "lanes: 2 buffered push item(s) unsent at exit" in ran.stderr
    assert ran.stderr.count("unsent at exit") == 1, "the closed client logs nothing"


def test_a_batch_refused_with_413_is_halved_until_only_the_big_item_is_dropped() -> None:
    limit = 3000
    stored: list[dict[str, Any]] = []
    dropped: list[lanes.Item] = []

    def on_error(e: BaseException) -> None:
        assert isinstance(e, lanes.DroppedError)
        assert isinstance(e.cause, lanes.PayloadTooLargeError)
        dropped.extend(e.items)

    t = _broker(limit, stored)
    c = lanes.Lanes("http://broker", http_client=httpx.Client(transport=t), retry_attempts=0)
    b = c.queue("q").buffer(message_count=10, time_millis=60_000, on_error=on_error)
    big = "y" * (2 * limit)
    b.push([{"data": big if i == 7 else "x" * 500, "transaction_id": f"tx-{i}"} for i in range(10)])
    b.flush(timeout=5)
    ids = sorted(it["transactionId"] for body in stored for it in body["items"])
    assert ids == [f"tx-{i}" for i in range(10) if i != 7]
    assert [d.transaction_id for d in dropped] == ["tx-7"]
    c.close()


def test_a_403_drops_the_batch_whole_without_splitting() -> None:
    calls: list[int] = []

    def answer(req: httpx.Request) -> httpx.Response:
        calls.append(1)
        return httpx.Response(403, json={"error": "no", "code": "forbidden"})

    got: list[lanes.DroppedError] = []
    t = httpx.MockTransport(answer)
    c = lanes.Lanes("http://broker", http_client=httpx.Client(transport=t), retry_attempts=0)
    b = c.queue("q").buffer(time_millis=60_000, on_error=lambda e: got.append(e))  # type: ignore[arg-type]
    b.push([1, 2, 3])
    b.flush(timeout=5)
    assert len(calls) == 1 and len(got) == 1 and len(got[0].items) == 3
    c.close()


@pytest.mark.parametrize("status", [401, 404, 409, 500, 422])
def test_a_flush_answered_with_a_status_that_can_change_is_kept_and_retried(status: int) -> None:
    """401, 404, 409 and 5xx (a token, a route, a conflict) are retried under the same ids, as in
    Go and TS; only 400, 403 and 413 drop."""
    stored: list[dict[str, Any]] = []
    inner = _broker(1_000_000, stored)
    refused: list[int] = []

    def answer(req: httpx.Request) -> httpx.Response:
        if not refused:
            refused.append(status)
            return httpx.Response(status, json={"error": "not now", "code": "x"})
        return inner.handle_request(req)

    got: list[BaseException] = []
    t = httpx.MockTransport(answer)
    c = lanes.Lanes("http://broker", http_client=httpx.Client(transport=t), retry_attempts=0)
    b = c.queue("q").buffer(time_millis=60_000, retry_delay_millis=10, on_error=got.append)
    b.push([{"data": 1, "transaction_id": "tx-1"}, {"data": 2, "transaction_id": "tx-2"}])
    b.flush(timeout=5)
    assert [it["transactionId"] for body in stored for it in body["items"]] == ["tx-1", "tx-2"]
    assert len(got) == 1 and not isinstance(got[0], lanes.DroppedError)
    c.close()


async def test_async_flush_all_flushes_every_buffer_then_raises_with_the_count() -> None:
    stored: list[dict[str, Any]] = []
    t = _broker(1_000_000, stored)

    async def stuck(items: list[Any]) -> list[lanes.PushResult]:
        raise lanes.APIConnectionError("down")

    c = lanes.AsyncLanes("http://broker", http_client=httpx.AsyncClient(transport=t))
    first = lanes._buffer.AsyncPushBuffer(stuck, lanes._buffer.BufferOptions(time_millis=60_000))
    c._buffers[("stuck", None)] = first
    await first.push([1, 2])
    healthy = c.queue("q").buffer(message_count=1000, time_millis=3_600_000)
    await healthy.push([1, 2, 3])
    started = time.monotonic()
    with pytest.raises(lanes.UnsentError) as e:
        await c.flush_all(timeout=0.5)
    assert time.monotonic() - started < 2
    assert e.value.unsent == 2
    assert [it["payload"] for body in stored for it in body["items"]] == [1, 2, 3]
    with pytest.raises(lanes.UnsentError):
        await c.aclose(timeout=0.2)


def _refuse_all(req: httpx.Request) -> httpx.Response:
    return httpx.Response(400, json={"error": "no", "code": "validation_failed"})


def test_the_drops_of_one_flush_are_reported_once(caplog: pytest.LogCaptureFixture) -> None:
    got: list[BaseException] = []
    t = httpx.MockTransport(_refuse_all)
    c = lanes.Lanes("http://broker", http_client=httpx.Client(transport=t), retry_attempts=0)
    b = c.queue("q").buffer(time_millis=60_000, on_error=got.append)
    b.push([{"data": i, "transaction_id": f"tx-{i}"} for i in range(8)])
    with caplog.at_level(logging.WARNING, logger="lanes"):
        b.flush(timeout=5)
    assert len(got) == 1 and isinstance(got[0], lanes.DroppedError)
    assert [d.transaction_id for d in got[0].items] == [f"tx-{i}" for i in range(8)]
    assert len([r for r in caplog.records if "dropped" in r.getMessage()]) == 1
    c.close()


async def test_the_drops_of_one_async_flush_are_reported_once() -> None:
    got: list[BaseException] = []
    t = httpx.MockTransport(_refuse_all)
    c = lanes.AsyncLanes(
        "http://broker", http_client=httpx.AsyncClient(transport=t), retry_attempts=0
    )
    b = c.queue("q").buffer(time_millis=60_000, on_error=got.append)
    await b.push([{"data": i, "transaction_id": f"tx-{i}"} for i in range(8)])
    await b.flush(timeout=5)
    assert len(got) == 1 and isinstance(got[0], lanes.DroppedError)
    assert len(got[0].items) == 8
    await c.aclose()


_REFUSED_NAMES = [
    ("  ", None, "queue"),
    (".", None, "queue"),
    ("..", None, "queue"),
    ("a\x00b", None, "queue"),
    ("q" * 513, None, "queue"),
    ("\ud800", None, "queue"),
    ("q", "..", "partition"),
    ("q", "é" * 257, "partition"),
    ("q", " \t", "partition"),
]


@pytest.mark.parametrize(("queue", "partition", "field"), _REFUSED_NAMES)
def test_a_buffer_for_a_name_the_broker_refuses_is_refused(
    queue: str, partition: str | None, field: str
) -> None:
    t = httpx.MockTransport(_refuse_all)
    with lanes.Lanes("http://broker", http_client=httpx.Client(transport=t)) as c:
        qb = c.queue(queue) if partition is None else c.queue(queue).partition(partition)
        with pytest.raises(lanes.InvalidNameError) as caught:
            qb.buffer()
        assert caught.value.field == field
        assert not c._buffers


@pytest.mark.parametrize(("queue", "partition", "field"), _REFUSED_NAMES)
async def test_an_async_buffer_for_a_name_the_broker_refuses_is_refused(
    queue: str, partition: str | None, field: str
) -> None:
    t = httpx.MockTransport(_refuse_all)
    c = lanes.AsyncLanes("http://broker", http_client=httpx.AsyncClient(transport=t))
    qb = c.queue(queue) if partition is None else c.queue(queue).partition(partition)
    with pytest.raises(lanes.InvalidNameError) as caught:
        qb.buffer()
    assert caught.value.field == field
    await c.aclose()


def test_the_longest_names_the_broker_takes_are_buffered_and_stored(
    broker_url: str, qname: str
) -> None:
    longest = qname.ljust(512, "q")
    with lanes.Lanes(broker_url) as c:
        b = c.queue(longest).partition("p" * 512).buffer(time_millis=60_000)
        b.push([1])
        b.flush(timeout=5)
        assert _pop_all(c, longest) == [1]


def _clock_from_boot(monkeypatch: pytest.MonkeyPatch) -> None:
    """A monotonic clock that reads 1 s, as on a machine (or in a process) just started."""
    real = time.monotonic
    start = real()
    monkeypatch.setattr(time, "monotonic", lambda: real() - start + 1.0)


def test_flush_sends_a_long_window_buffer_soon_after_boot(monkeypatch: pytest.MonkeyPatch) -> None:
    # flush() marked what waits as first queued at clock 0.0, which is not due before the
    # window passes when the clock itself reads less than the window (an hour here).
    _clock_from_boot(monkeypatch)
    stored: list[dict[str, Any]] = []
    c = lanes.Lanes("http://broker", http_client=httpx.Client(transport=_broker(1_000_000, stored)))
    b = c.queue("q").buffer(message_count=1000, time_millis=3_600_000)
    b.push([1, 2, 3])
    b.flush(timeout=5)
    assert [it["payload"] for body in stored for it in body["items"]] == [1, 2, 3]
    c.close()


async def test_async_flush_sends_a_long_window_buffer_soon_after_boot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _clock_from_boot(monkeypatch)
    stored: list[dict[str, Any]] = []
    c = lanes.AsyncLanes(
        "http://broker", http_client=httpx.AsyncClient(transport=_broker(1_000_000, stored))
    )
    b = c.queue("q").buffer(message_count=1000, time_millis=3_600_000)
    await b.push([1, 2, 3])
    await b.flush(timeout=5)
    assert [it["payload"] for body in stored for it in body["items"]] == [1, 2, 3]
    await c.aclose()


def test_a_buffer_sized_zero_or_below_takes_the_defaults(broker_url: str, qname: str) -> None:
    """As Go's zero BufferOptions: message_count=0 once took no item per flush, so nothing was
    ever sent."""
    with lanes.Lanes(broker_url) as c:
        buf = c.queue(qname).buffer(message_count=0, max_size=-1, retry_delay_millis=0)
        buf.push([1, 2, 3])
        c.flush_all(timeout=5)
        assert c.buffer_stats() == lanes.BufferStats(1, 0, 1)
        assert _pop_all(c, qname) == [1, 2, 3]


async def test_an_async_buffer_sized_zero_or_below_takes_the_defaults(
    broker_url: str, qname: str
) -> None:
    async with lanes.AsyncLanes(broker_url) as c:
        buf = c.queue(qname).buffer(message_count=-3, max_size=0, retry_delay_millis=-1)
        await buf.push([1, 2, 3])
        await c.flush_all(timeout=5)
        assert c.buffer_stats() == lanes.BufferStats(1, 0, 1)
    with lanes.Lanes(broker_url) as sync:
        assert _pop_all(sync, qname) == [1, 2, 3]
