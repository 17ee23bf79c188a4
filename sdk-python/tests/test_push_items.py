"""Push item encoding and the push buffer's lifecycle: against a real broker (LANES_TEST_URL)
for what is stored, over httpx.MockTransport for the buffer's batch policy."""

from __future__ import annotations

import datetime
import json
import logging
from typing import Any

import httpx
import pytest

import lanes


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
