"""Wire-level tests over httpx.MockTransport: the pop query table of docs/consuming.md §2 byte
for byte, the autopilot off switch, request bodies, and loop reactions (403 stops the loop,
empty non-waiting polls paced by ``waitMs``)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

import lanes
from lanes import _protocol as P
from lanes import _requests as R
from lanes._http import _encode

Builder = Callable[[lanes.Queue], lanes.Queue]


def capture(
    answer: Callable[[httpx.Request], httpx.Response] | None = None,
) -> tuple[httpx.MockTransport, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        return answer(req) if answer else httpx.Response(204)

    return httpx.MockTransport(handler), seen


def client(t: httpx.MockTransport, **kw: Any) -> lanes.Lanes:
    return lanes.Lanes("http://broker", http_client=httpx.Client(transport=t), **kw)


TABLE: list[tuple[str, Builder, str]] = [
    ("defaults", lambda q: q, "autopilot=true&wait=true&timeout=30000"),
    (
        "group",
        lambda q: q.group("billing"),
        "autopilot=true&wait=true&timeout=30000&consumerGroup=billing",
    ),
    ("batch", lambda q: q.batch(10), "autopilot=true&batch=10&wait=true&timeout=30000"),
    (
        "partitions",
        lambda q: q.partitions(1),
        "autopilot=true&wait=true&timeout=30000&partitions=1",
    ),
    ("both", lambda q: q.batch(10).partitions(4), "batch=10&wait=true&timeout=30000&partitions=4"),
    ("off", lambda q: q.autopilot(False), "batch=1&wait=true&timeout=30000"),
    (
        "off+both",
        lambda q: q.autopilot(False).batch(5).partitions(3),
        "batch=5&wait=true&timeout=30000&partitions=3",
    ),
    ("off+width1", lambda q: q.autopilot(False).partitions(1), "batch=1&wait=true&timeout=30000"),
    ("batch0=unset", lambda q: q.batch(0), "autopilot=true&wait=true&timeout=30000"),
    (
        "nowait",
        lambda q: q.wait(False).group("g").subscription_mode("all"),
        "autopilot=true&wait=false&timeout=30000&consumerGroup=g&subscriptionMode=all",
    ),
    (
        "tail",
        lambda q: (
            q.batch(2)
            .partitions(2)
            .lease_seconds(30)
            .subscription_from("now")
            .server_auto_ack(True)
            .timeout_millis(1000)
        ),
        "batch=2&wait=true&timeout=1000&partitions=2&leaseSeconds=30&subscriptionFrom=now&autoAck=true",
    ),
    (
        "escaped group",
        lambda q: q.group("a b&c"),
        "autopilot=true&wait=true&timeout=30000&consumerGroup=a+b%26c",
    ),
]


@pytest.mark.parametrize(("name", "build", "query"), TABLE, ids=[t[0] for t in TABLE])
def test_pop_query_table(name: str, build: Builder, query: str) -> None:
    t, seen = capture()
    c = client(t, pop_autopilot=True)
    assert build(c.queue("orders")).pop() == []
    assert seen[0].url.path == "/api/v1/pop/queue/orders"
    assert seen[0].url.query.decode() == query


CAP_TABLE: list[tuple[str, P.QueueSpec, int, str]] = [
    ("unset, cap below 100", P.QueueSpec(queue="q"), 3, "autopilot=true&batch=3"),
    (
        "unset, cap 500: the automatic batch",
        P.QueueSpec(queue="q"),
        500,
        "autopilot=true&batch=100",
    ),
    ("unset, cap above the bound", P.QueueSpec(queue="q"), 20_000, "autopilot=true&batch=100"),
    ("autopilot off: 1 stays 1", P.QueueSpec(queue="q", autopilot=False), 500, "batch=1"),
    ("explicit batch is cut", P.QueueSpec(queue="q", batch=10), 3, "autopilot=true&batch=3"),
    ("explicit batch stays", P.QueueSpec(queue="q", batch=250), 500, "autopilot=true&batch=250"),
]


@pytest.mark.parametrize(("name", "spec", "left", "head"), CAP_TABLE, ids=[t[0] for t in CAP_TABLE])
def test_server_auto_ack_caps_the_pop_at_what_is_left_of_the_limit(
    name: str, spec: P.QueueSpec, left: int, head: str
) -> None:
    spec = dataclasses.replace(spec, server_auto_ack=True)
    query = P.pop_query(P.auto_ack_pop_cap(spec, left), client_autopilot=True)
    assert query == f"{head}&wait=true&timeout=30000&autoAck=true"


def test_env_off_read_once_at_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    t, seen = capture()
    monkeypatch.setenv("LANES_SDK_POP_AUTOPILOT", " OFF ")
    c = client(t)
    monkeypatch.setenv("LANES_SDK_POP_AUTOPILOT", "on")  # too late: read once
    c.queue("orders").pop()
    c.queue("orders").autopilot(True).pop()
    assert [r.url.query.decode() for r in seen] == [
        "batch=1&wait=true&timeout=30000",
        "autopilot=true&wait=true&timeout=30000",
    ]
    assert c.pop_autopilot is False


@pytest.mark.parametrize("value", ["off", "false", "0", "no", "disabled", "Disabled"])
def test_env_values(value: str) -> None:
    assert P.autopilot_from_env({"LANES_SDK_POP_AUTOPILOT": value}) is False
    assert P.autopilot_from_env({}) is True


def test_partition_and_discovery_routes() -> None:
    t, seen = capture()
    c = client(t, pop_autopilot=True)
    c.queue("orders").partition("customer 42").partitions(4).pop()
    c.queue("orders").partition("p").batch(3).pop()
    c.queue().namespace("billing").task("invoices").pop()
    assert seen[0].url.raw_path.decode() == (
        "/api/v1/pop/queue/orders/partition/customer%2042?autopilot=true&wait=true&timeout=30000"
    )
    assert seen[1].url.query.decode() == "batch=3&wait=true&timeout=30000"
    assert seen[2].url.path == "/api/v1/pop"
    assert seen[2].url.query.decode() == (
        "autopilot=true&wait=true&timeout=30000&namespace=billing&task=invoices"
    )


async def test_async_pop_query_and_echo() -> None:
    body = {
        "success": True,
        "queue": "orders",
        "partition": "p",
        "partitionId": "pid",
        "leaseId": "L",
        "consumerGroup": "g",
        "partitionsClaimed": 1,
        "messages": [
            {
                "id": "m1",
                "transactionId": "t1",
                "traceId": None,
                "data": {"x": 1},
                "producerSub": None,
                "createdAt": "2026-01-01T00:00:00Z",
                "partitionId": "pid",
                "partition": "p",
                "leaseId": "L",
                "consumerGroup": "g",
            }
        ],
        "autopilot": {"partitions": 3, "batch": 100, "waitMs": 40},
    }
    t, seen = capture(lambda r: httpx.Response(200, json=body))
    c = lanes.AsyncLanes(
        "http://broker", http_client=httpx.AsyncClient(transport=t), pop_autopilot=True
    )
    res = await c.queue("orders").group("g").pop_result()
    assert seen[0].url.query.decode() == "autopilot=true&wait=true&timeout=30000&consumerGroup=g"
    assert res.autopilot == lanes.AutopilotEcho(3, 100, 40)
    assert res.messages[0].queue == "orders" and res.messages[0].data == {"x": 1}


def test_push_body_is_byte_for_byte_the_encoding_of_its_items() -> None:
    items = [
        {"data": {"note": 'é\u2028"x"', "n": [1.5, None, True]}, "transaction_id": "t-1"},
        lanes.Item(data="bare", transaction_id="t-2", trace_id="trace"),
        7,
    ]
    for partition in ("customer-42", None):
        checked = P.check_items(items)  # mints the third item's id once, for both encodings
        body = P.push_body("orders", partition, checked)
        assert body == _encode({"items": P.push_items("orders", partition, checked)})


def test_transaction_body_is_the_json_of_its_operations_kv_and_timers() -> None:
    with lanes.Lanes("http://127.0.0.1:1") as c:
        tx = c.transaction()
    tx.queue("orders").partition("c-42").push([lanes.Item(data={"n": "é"}, transaction_id="t-1")])
    tx.queue("orders").push([])  # an empty push adds no operation
    tx.kv_put("ns", "k", [1, None]).timer_schedule("orders", "tk", delay_millis=5)
    assert json.loads(tx.body()) == {
        "operations": [
            {
                "type": "push",
                "items": P.push_items(
                    "orders", "c-42", [lanes.Item(data={"n": "é"}, transaction_id="t-1")]
                ),
            }
        ],
        "kv": [R.kv_op("put", "ns", "k", value=[1, None])],
        "timers": tx._timers,  # as collected: scheduling mints a txn id
    }


def test_push_body_items() -> None:
    def ok(req: httpx.Request) -> httpx.Response:
        n = len(json.loads(req.content)["items"])
        return httpx.Response(
            201,
            json=[
                {
                    "index": i,
                    "message_id": "m",
                    "transaction_id": "t",
                    "queueName": "q",
                    "status": "queued",
                }
                for i in range(n)
            ],
        )

    t, seen = capture(ok)
    c = client(t)
    c.queue("orders").partition("customer-42").push(
        [
            {"transaction_id": "order-1", "data": {"a": 1}},
            {"payload": [1, 2], "traceId": "tr"},
            {"orderId": 7},
            lanes.Item(data=None, transaction_id="x"),
            "bare",
        ]
    )
    items = json.loads(seen[0].content)["items"]
    assert items[0] == {
        "queue": "orders",
        "partition": "customer-42",
        "payload": {"a": 1},
        "transactionId": "order-1",
    }
    assert items[1]["payload"] == [1, 2] and items[1]["traceId"] == "tr"
    assert items[2]["payload"] == {"orderId": 7}
    assert items[3]["payload"] is None and items[3]["transactionId"] == "x"
    minted = items[1]["transactionId"]
    assert minted[14] == "7" and minted[19] in "89ab"  # UUIDv7
    assert c.queue("orders").push([]) == [] and len(seen) == 1


def test_push_failed_item_raises_with_results() -> None:
    t, _ = capture(
        lambda r: httpx.Response(
            201,
            json=[
                {
                    "index": 0,
                    "message_id": "m",
                    "transaction_id": "a",
                    "queueName": "q",
                    "status": "queued",
                },
                {
                    "index": 1,
                    "message_id": "",
                    "transaction_id": "b",
                    "queueName": "q",
                    "status": "failed",
                    "error": "disk",
                },
            ],
        )
    )
    with pytest.raises(lanes.PushError) as ei:
        client(t).queue("q").push([1, 2])
    assert len(ei.value.results) == 2 and ei.value.items[0].transaction_id == "b"


def _msg(tid: str, pid: str = "p1", group: str = "g", lease: str = "L") -> lanes.Message:
    return lanes.Message(
        id=tid, transaction_id=tid, data=None, partition_id=pid, partition="x", lease_id=lease,
        consumer_group=group,
    )  # fmt: skip


def _ack_answer(
    req: httpx.Request, *, single_as_object: bool = False, batch_as_object: bool = False
) -> httpx.Response:
    """The broker's ack answer: an array of results on both routes; with ``single_as_object``
    /api/v1/ack answers the object alone (earlier brokers), with ``batch_as_object`` the batch
    answers its first result alone (a broker fault)."""
    b = json.loads(req.content)
    items = b.get("acknowledgments", [b])
    results = [
        {"index": i, "transactionId": it["transactionId"],
         "success": it["transactionId"] != "bad",
         "error": None if it["transactionId"] != "bad" else "unresolvable",
         "leaseReleased": True, "dlq": False, "noop": False}
        for i, it in enumerate(items)
    ]  # fmt: skip
    one = req.url.path == "/api/v1/ack"
    alone = single_as_object if one else batch_as_object
    return httpx.Response(200, json=results[0] if alone else results)


def test_ack_bodies_and_results() -> None:
    t, seen = capture(_ack_answer)
    c = client(t)
    c.ack(_msg("a"), "failed", error="boom")
    assert seen[0].url.path == "/api/v1/ack"
    assert json.loads(seen[0].content) == {
        "transactionId": "a", "partitionId": "p1", "status": "failed", "leaseId": "L",
        "error": "boom", "consumerGroup": "g",
    }  # fmt: skip
    res = c.ack([_msg("a"), _msg("b", group="h"), _msg("c")])
    assert [r.transaction_id for r in res] == ["a", "b", "c"]
    assert seen[1].url.path == "/api/v1/ack/batch"
    assert json.loads(seen[1].content)["consumerGroup"] == "g"
    assert len(json.loads(seen[1].content)["acknowledgments"]) == 2
    assert seen[2].url.path == "/api/v1/ack"
    with pytest.raises(lanes.AckError) as ei:
        c.ack([_msg("ok"), _msg("bad")])
    assert len(ei.value.results) == 2 and ei.value.items[0].transaction_id == "bad"
    with pytest.raises(ValueError):
        c.ack(_msg("a"), "nack")  # type: ignore[arg-type]


def test_a_single_ack_still_reads_the_object_earlier_brokers_answered() -> None:
    t, _ = capture(lambda req: _ack_answer(req, single_as_object=True))
    res = client(t).ack(_msg("a"))
    assert [r.transaction_id for r in res] == ["a"] and res[0].success


def test_an_ack_answer_is_read_only_in_its_documented_shape() -> None:
    t, _ = capture(lambda req: _ack_answer(req, batch_as_object=True))
    c = client(t)
    with pytest.raises(
        lanes.UnexpectedAnswerError, match=r"/api/v1/ack/batch answered dict, want an array"
    ):
        c.ack([_msg("a"), _msg("b")])


_ONE_ACK_RESULT = {"index": 0, "transactionId": "a", "success": True}


def test_an_ack_answered_with_another_count_raises_unexpected_answer_error() -> None:
    t, _ = capture(lambda r: httpx.Response(200, json=[_ONE_ACK_RESULT]))
    with pytest.raises(lanes.UnexpectedAnswerError) as ei:
        client(t).ack([_msg("a"), _msg("b")])
    assert str(ei.value) == "lanes: ack: broker answered 1 results for 2 items"
    assert (ei.value.status, ei.value.body) == (0, [_ONE_ACK_RESULT])


def test_a_2xx_html_page_raises_unexpected_answer_error_with_status_and_body() -> None:
    page = b"<html><body>Welcome to the proxy</body></html>"
    t, seen = capture(lambda r: httpx.Response(200, content=page))
    c = client(t)
    for call in (lambda: c.ack(_msg("a")), lambda: c.kv("ns").get("k"), c.health):
        with pytest.raises(lanes.UnexpectedAnswerError, match="cannot decode the answer") as ei:
            call()
        assert (ei.value.status, ei.value.body) == (200, page)
    assert len(seen) == 3  # not retried: the request may have been applied


def test_kv_and_timers_answered_with_no_result_raise_unexpected_answer_error() -> None:
    t, _ = capture(lambda r: httpx.Response(200, json={"results": []}))
    c = client(t)
    with pytest.raises(lanes.UnexpectedAnswerError) as ei:
        c.kv("ns").incr("k")
    assert str(ei.value) == "lanes: kv: broker answered 0 results for 1 operations"
    assert (ei.value.status, ei.value.body) == (0, {"results": []})
    with pytest.raises(
        lanes.UnexpectedAnswerError, match="timers: broker answered 0 results for 1 operations"
    ):
        c.timers("q").schedule("k", delay_millis=1000)


def test_a_consumer_reports_an_ack_answered_with_another_count_and_goes_on() -> None:
    # Two partitions, so the loop's ack keeps two items (one partition's would collapse to one).
    two = {"leaseId": "L", "messages": [
        {**_ONE_MESSAGE["messages"][0], "id": tid, "transactionId": tid, "partitionId": pid}  # type: ignore[dict-item]
        for tid, pid in (("t1", "pid"), ("t2", "pid2"))
    ]}  # fmt: skip
    pops = 0

    def answer(req: httpx.Request) -> httpx.Response:
        nonlocal pops
        if req.url.path == "/api/v1/ack/batch":
            return httpx.Response(200, json=[_ONE_ACK_RESULT])  # one result for two acks
        if req.url.path == "/api/v1/ack":
            return httpx.Response(200, json=_ONE_ACK_RESULT)
        pops += 1
        return httpx.Response(200, json=two if pops == 1 else _ONE_MESSAGE)

    t, _ = capture(answer)
    errors: list[BaseException] = []
    handled: list[str] = []
    q = client(t, retry_attempts=0).queue("q").batch(2).wait(False).limit(3)
    cons = q.on_error(errors.append).consume(lambda m: handled.append(m.transaction_id))
    cons.closed(timeout=5)
    assert handled == ["t1", "t2", "t1"]
    assert [type(e) for e in errors] == [lanes.UnexpectedAnswerError]


def _portal_then_one_message() -> Callable[[httpx.Request], httpx.Response]:
    """A pop answered 200 with a proxy's HTML page, then one message; acks land."""
    pops = 0

    def answer(req: httpx.Request) -> httpx.Response:
        nonlocal pops
        if req.url.path.startswith("/api/v1/ack"):
            return httpx.Response(200, json=_ONE_ACK_RESULT)
        pops += 1
        if pops == 1:
            return httpx.Response(200, text="<html>portal</html>")
        return httpx.Response(200, json=_ONE_MESSAGE)

    return answer


def test_a_consumer_reports_a_pop_answer_it_cannot_use_and_goes_on() -> None:
    # sdk-design.md §7: an UnexpectedAnswerError goes to on_error and the loop goes on (as in Go
    # and TS), after the loop's error backoff, like a 5xx.
    t, _ = capture(_portal_then_one_message())
    errors: list[BaseException] = []
    handled: list[str] = []
    q = client(t).queue("q").wait(False).limit(1).on_error(errors.append)
    q.consume(lambda m: handled.append(m.transaction_id)).closed(timeout=5)
    assert handled == ["t1"]
    assert [type(e) for e in errors] == [lanes.UnexpectedAnswerError]


async def test_async_consumer_reports_a_pop_answer_it_cannot_use_and_goes_on() -> None:
    t, _ = capture(_portal_then_one_message())
    c = lanes.AsyncLanes("http://broker", http_client=httpx.AsyncClient(transport=t))
    errors: list[BaseException] = []
    handled: list[str] = []
    q = c.queue("q").wait(False).limit(1).on_error(errors.append)
    await q.consume(lambda m: handled.append(m.transaction_id)).closed()
    assert handled == ["t1"]
    assert [type(e) for e in errors] == [lanes.UnexpectedAnswerError]


def test_an_iterator_reports_a_pop_answer_it_cannot_use_and_goes_on() -> None:
    t, _ = capture(_portal_then_one_message())
    errors: list[BaseException] = []
    with client(t).queue("q").wait(False).limit(1).on_error(errors.append).messages() as it:
        assert [m.transaction_id for m in it] == ["t1"]
    assert [type(e) for e in errors] == [lanes.UnexpectedAnswerError]


def test_transaction_body() -> None:
    t, seen = capture(
        lambda r: httpx.Response(200, json={"transactionId": "x", "success": True, "results": []})
    )
    c = client(t)
    m = _msg("in1")
    (
        c.transaction()
        .queue("invoices")
        .partition("c-42")
        .push([{"transaction_id": "inv-1", "data": {"ok": True}}])
        .ack(m, "completed", consumer_group="invoicing")
        .kv_put("dedup", "order-9", True)
        .timer_schedule("reminders", "order-9", delay_millis=1000, payload={"r": 1})
        .commit()
    )
    b = json.loads(seen[0].content)
    assert b["operations"][0] == {
        "type": "push",
        "items": [
            {
                "queue": "invoices",
                "partition": "c-42",
                "payload": {"ok": True},
                "transactionId": "inv-1",
            }
        ],
    }
    assert (
        b["operations"][1]["consumerGroup"] == "invoicing" and b["operations"][1]["leaseId"] == "L"
    )
    assert b["requiredLeases"] == ["L"]
    assert b["kv"] == [
        {"op": "put", "ns": "dedup", "key": "order-9", "value": True, "forever": True}
    ]
    assert b["timers"][0]["timerKey"] == "order-9" and b["timers"][0]["delayMs"] == 1000
    with pytest.raises(lanes.EmptyTransactionError):
        c.transaction().commit()
    assert len(seen) == 1


def test_transaction_ack_without_lease_is_refused_unsent() -> None:
    # A transaction ack has no lease-less form; Go and TypeScript refuse it too.
    t, seen = capture(lambda r: httpx.Response(500))
    with pytest.raises(lanes.LanesError, match="cannot be lease-less"):
        client(t).transaction().ack(_msg("in1"), "completed", without_lease=True)
    assert seen == []


def test_transaction_ack_names_its_group_as_client_ack_does() -> None:
    t, seen = capture(
        lambda r: httpx.Response(200, json={"transactionId": "x", "success": True, "results": []})
    )
    c = client(t)
    c.transaction().ack(_msg("in1"), "completed", group="invoicing").commit()
    assert json.loads(seen[0].content)["operations"][0]["consumerGroup"] == "invoicing"
    with pytest.raises(ValueError, match="group or consumer_group"):
        c.transaction().ack(_msg("in1"), group="a", consumer_group="b")


def test_consumer_stopped_error_is_named_like_the_other_errors() -> None:
    assert lanes.ConsumerStoppedError.__name__ == "ConsumerStoppedError"
    assert issubclass(lanes.ConsumerStoppedError, lanes.LanesError)
    assert lanes.ConsumerStopped is lanes.ConsumerStoppedError  # the old name still works


def test_transaction_rollback_raises_reason() -> None:
    t, _ = capture(
        lambda r: httpx.Response(
            200,
            json={
                "transactionId": "x",
                "success": False,
                "reason": "ack_rejected",
                "error": "stale lease",
                "results": [],
            },
        )
    )
    with pytest.raises(lanes.TransactionError) as ei:
        client(t).transaction().ack(_msg("a")).commit()
    assert ei.value.reason == "ack_rejected" and ei.value.attempts == 1


def test_sync_consumer_stops_on_403() -> None:
    t, seen = capture(lambda r: httpx.Response(403, json={"error": "no", "code": "forbidden"}))
    errors: list[BaseException] = []
    cons = client(t).queue("q").on_error(errors.append).consume(lambda m: None)
    with pytest.raises(lanes.PermissionDeniedError):
        cons.closed(timeout=5)
    assert len(seen) == 1 and cons.done
    # the error that ended the loop also went to on_error (as in Go and TS)
    assert len(errors) == 1 and isinstance(errors[0], lanes.PermissionDeniedError)


def test_sync_consumer_stops_on_408_after_retries() -> None:
    # A 408 is retried by the policy (retries.md §2 row 7); once that gave up it is a 4xx like the
    # others and ends the loop (consuming.md §4), as in Go and TS.
    t, seen = capture(lambda r: httpx.Response(408, json={"error": "slow", "code": "timeout"}))
    errors: list[BaseException] = []
    cons = client(t, retry_attempts=1, retry_delay=0.01).queue("q").on_error(errors.append)
    c = cons.consume(lambda m: None)
    with pytest.raises(lanes.APIError) as ei:
        c.closed(timeout=5)
    assert ei.value.status == 408
    assert len(seen) == 2 and c.done
    assert len(errors) == 1


async def test_async_consumer_stops_on_403() -> None:
    t, seen = capture(lambda r: httpx.Response(403, json={"error": "no", "code": "forbidden"}))
    c = lanes.AsyncLanes("http://broker", http_client=httpx.AsyncClient(transport=t))
    errors: list[BaseException] = []
    cons = c.queue("q").on_error(errors.append).consume(lambda m: None)
    with pytest.raises(lanes.PermissionDeniedError):
        await cons.closed()
    assert len(seen) == 1
    assert len(errors) == 1 and isinstance(errors[0], lanes.PermissionDeniedError)


NOT_IMPLEMENTED = {"error": "no", "code": "not_implemented"}


def test_sync_consumer_stops_on_501() -> None:
    # 501 is terminal (consuming.md §4), as in Go and TypeScript: no backoff-and-pop forever.
    t, seen = capture(lambda r: httpx.Response(501, json=NOT_IMPLEMENTED))
    cons = client(t).queue("q").consume(lambda m: None)
    with pytest.raises(lanes.NotImplementedByBrokerError):
        cons.closed(timeout=5)
    assert len(seen) == 1 and cons.done


async def test_async_consumer_stops_on_501() -> None:
    t, seen = capture(lambda r: httpx.Response(501, json=NOT_IMPLEMENTED))
    c = lanes.AsyncLanes("http://broker", http_client=httpx.AsyncClient(transport=t))
    cons = c.queue("q").consume(lambda m: None)
    with pytest.raises(lanes.NotImplementedByBrokerError):
        await __import__("asyncio").wait_for(cons.closed(), 5)
    assert len(seen) == 1


async def test_async_empty_nowait_polls_paced_by_waitms() -> None:
    body = {"success": True, "queue": "q", "partition": "", "partitionId": "", "leaseId": "",
            "consumerGroup": "", "partitionsClaimed": 0, "messages": [],
            "autopilot": {"partitions": 1, "batch": 100, "waitMs": 200}}  # fmt: skip
    t, seen = capture(lambda r: httpx.Response(200, json=body))
    c = lanes.AsyncLanes("http://broker", http_client=httpx.AsyncClient(transport=t))
    cons = c.queue("q").wait(False).consume(lambda m: None)
    start = time.monotonic()
    await __import__("asyncio").sleep(0.5)
    await cons.stop(timeout=2)
    n = len(seen)
    assert 2 <= n <= 4, n  # ~0.5 s / 200 ms, not a hot loop
    assert time.monotonic() - start < 2


def _drained_answer() -> Callable[[httpx.Request], httpx.Response]:
    """One message with a ``waitMs: 0`` echo (the broker's echo on a 200), its ack, then 204s
    without an echo: what a non-waiting loop sees once a queue is drained."""
    msg: dict[str, Any] = {"id": "m1", "transactionId": "t1", "traceId": None, "data": {},
                           "producerSub": None, "createdAt": "2026-01-01T00:00:00Z",
                           "partitionId": "pid", "partition": "p", "leaseId": "L",
                           "consumerGroup": "__QUEUE_MODE__"}  # fmt: skip
    echo = {"partitions": 1, "batch": 100, "waitMs": 0}
    body = {"success": True, "queue": "q", "partition": "p", "partitionId": "pid",
            "leaseId": "L", "consumerGroup": "__QUEUE_MODE__", "partitionsClaimed": 1,
            "messages": [msg], "autopilot": echo}  # fmt: skip
    popped: list[int] = []

    def answer(req: httpx.Request) -> httpx.Response:
        if req.url.path.startswith("/api/v1/ack"):
            ack = {"transactionId": "t1", "success": True, "error": None, "leaseReleased": True,
                   "dlq": False, "noop": False}  # fmt: skip
            return httpx.Response(200, json=[ack] if req.url.path.endswith("batch") else ack)
        popped.append(1)
        return httpx.Response(200, json=body) if len(popped) == 1 else httpx.Response(204)

    return answer


def _pops(seen: list[httpx.Request]) -> int:
    return sum(1 for r in seen if r.url.path.startswith("/api/v1/pop"))


@pytest.mark.parametrize(
    "knob", [lambda q: q.wait(False), lambda q: q.timeout_millis(0)], ids=["nowait", "timeout0"]
)
def test_sync_waitms_zero_is_no_advice(knob: Callable[[Any], Any]) -> None:
    # waitMs 0 is "no advice": the loop pauses 100 ms between empty pops (consuming.md §3 step 2),
    # as Go does, instead of polling hundreds of times a second.
    t, seen = capture(_drained_answer())
    cons = knob(client(t).queue("q")).consume(lambda m: None)
    time.sleep(0.5)
    cons.stop(timeout=2)
    assert 3 <= _pops(seen) <= 8, _pops(seen)


async def test_async_waitms_zero_is_no_advice() -> None:
    t, seen = capture(_drained_answer())
    c = lanes.AsyncLanes("http://broker", http_client=httpx.AsyncClient(transport=t))
    cons = c.queue("q").wait(False).consume(lambda m: None)
    await __import__("asyncio").sleep(0.5)
    await cons.stop(timeout=2)
    assert 3 <= _pops(seen) <= 8, _pops(seen)


def test_sync_iterator_waitms_zero_is_no_advice() -> None:
    t, seen = capture(_drained_answer())
    got = [m.transaction_id for m in client(t).queue("q").wait(False).messages(idle_timeout=0.5)]
    assert got == ["t1"]
    assert 3 <= _pops(seen) <= 8, _pops(seen)


async def test_async_iterator_waitms_zero_is_no_advice() -> None:
    t, seen = capture(_drained_answer())
    c = lanes.AsyncLanes("http://broker", http_client=httpx.AsyncClient(transport=t))
    async with c.queue("q").timeout_millis(0).messages(idle_timeout=0.5) as it:
        got = [m.transaction_id async for m in it]
    assert got == ["t1"]
    assert 3 <= _pops(seen) <= 8, _pops(seen)


async def test_async_idle_timeout_waits_for_a_slow_ack() -> None:
    # A worker handling a pop (its handlers, then its ack) keeps the consumer busy: the idle
    # timeout (300 ms) counts from the end of that handling, not from the pop, so a 500 ms ack
    # does not stop the consumer before the second message (as in Go and TS).
    pops = 0
    handled: list[Any] = []

    def one(tid: str) -> dict[str, Any]:
        m = {"id": tid, "transactionId": tid, "data": 1, "createdAt": "2026-01-01T00:00:00Z",
             "partitionId": "pid", "partition": "p", "leaseId": "L" + tid}  # fmt: skip
        return {"success": True, "queue": "q", "partition": "p", "partitionId": "pid",
                "leaseId": "L" + tid, "consumerGroup": "__QUEUE_MODE__", "partitionsClaimed": 1,
                "messages": [m]}  # fmt: skip

    async def answer(req: httpx.Request) -> httpx.Response:
        nonlocal pops
        if req.url.path.startswith("/api/v1/ack"):
            await asyncio.sleep(0.5)
            tid = json.loads(req.content)["transactionId"]
            return httpx.Response(200, json={"transactionId": tid, "success": True})
        pops += 1
        return httpx.Response(200, json=one(f"t{pops}")) if pops <= 2 else httpx.Response(204)

    c = lanes.AsyncLanes(
        "http://broker", http_client=httpx.AsyncClient(transport=httpx.MockTransport(answer))
    )
    cons = c.queue("q").wait(False).idle_millis(300).consume(lambda m: handled.append(m.data))
    await asyncio.wait_for(cons.closed(), 5)
    assert handled == [1, 1] and pops >= 3


def test_sync_iterator_idle_counts_from_the_end_of_handling() -> None:
    # The caller holds the message for 0.8 s, longer than the 0.5 s idle timeout: the idle
    # time starts when it asks for the next message, so the iteration goes on polling for
    # about 0.5 s more instead of ending at the first empty pop (as in Go).
    t, seen = capture(_drained_answer())
    it = client(t).queue("q").wait(False).messages(idle_timeout=0.5)
    with it:
        assert next(it).transaction_id == "t1"
        time.sleep(0.8)
        asked = time.monotonic()
        assert list(it) == []
        assert time.monotonic() - asked >= 0.45
    assert _pops(seen) >= 4, _pops(seen)


def _push_answer(body: dict[str, Any], failed: set[int]) -> httpx.Response:
    return httpx.Response(
        201,
        json=[
            {
                "index": i,
                "message_id": f"m{i}",
                "transaction_id": it["transactionId"],
                "queueName": it["queue"],
                "status": "failed" if i in failed else "queued",
                **({"error": "boom"} if i in failed else {}),
            }
            for i, it in enumerate(body["items"])
        ],
    )


def test_buffer_resends_only_the_failed_items_under_their_ids() -> None:
    bodies: list[dict[str, Any]] = []

    def answer(req: httpx.Request) -> httpx.Response:
        body = json.loads(req.content)
        bodies.append(body)
        return _push_answer(body, {1} if len(bodies) == 1 else set())

    t, _ = capture(answer)
    c = client(t)
    buf = c.queue("q").buffer(message_count=3, time_millis=60_000, retry_delay_millis=1)
    buf.push([{"n": 0}, {"n": 1}, {"n": 2}])
    c.close(timeout=5)
    first, second = bodies
    assert [it["payload"] for it in second["items"]] == [{"n": 1}]
    assert second["items"][0]["transactionId"] == first["items"][1]["transactionId"]


def test_buffer_resends_a_batch_under_the_same_ids_after_a_lost_answer() -> None:
    bodies: list[dict[str, Any]] = []

    def answer(req: httpx.Request) -> httpx.Response:
        body = json.loads(req.content)
        bodies.append(body)
        return httpx.Response(503) if len(bodies) == 1 else _push_answer(body, set())

    t, _ = capture(answer)
    c = client(t, retry_attempts=0)
    buf = c.queue("q").buffer(message_count=2, time_millis=60_000, retry_delay_millis=1)
    buf.push([{"n": 0}, {"n": 1}])
    c.close(timeout=5)
    ids = [[it["transactionId"] for it in b["items"]] for b in bodies]
    assert len(ids) == 2 and ids[0] == ids[1]


def test_buffer_resends_a_batch_under_the_same_ids_after_an_unexpected_answer() -> None:
    bodies: list[dict[str, Any]] = []

    def answer(req: httpx.Request) -> httpx.Response:
        body = json.loads(req.content)
        bodies.append(body)
        return httpx.Response(201, json=[]) if len(bodies) == 1 else _push_answer(body, set())

    t, _ = capture(answer)
    c = client(t)
    errors: list[BaseException] = []
    buf = c.queue("q").buffer(
        message_count=1, time_millis=60_000, retry_delay_millis=1, on_error=errors.append
    )
    buf.push([{"n": 0}])
    c.close(timeout=5)
    ids = [[it["transactionId"] for it in b["items"]] for b in bodies]
    assert len(ids) == 2 and ids[0] == ids[1]
    assert [type(e) for e in errors] == [lanes.UnexpectedAnswerError]


_ONE_MESSAGE = {
    "leaseId": "L",
    "messages": [
        {
            "id": "m1",
            "transactionId": "t1",
            "data": 1,
            "createdAt": "2026-01-01T00:00:00Z",
            "partitionId": "pid",
            "partition": "p",
            "leaseId": "L",
        }
    ],
}


def test_iterator_waits_out_a_transient_pop_error_and_stops_on_a_terminal_one() -> None:
    pops = 0

    def answer(req: httpx.Request) -> httpx.Response:
        nonlocal pops
        if req.url.path.startswith("/api/v1/ack"):
            return httpx.Response(200, json=[{"index": 0, "success": True}])
        pops += 1
        return httpx.Response(503) if pops == 1 else httpx.Response(200, json=_ONE_MESSAGE)

    t, _ = capture(answer)
    c = client(t, retry_attempts=0)
    errors: list[BaseException] = []
    with c.queue("q").wait(False).on_error(errors.append).messages(limit=1) as it:
        assert [m.data for m in it] == [1]  # the 503 was waited out, as in the consume loop
    assert pops == 2
    assert [(type(e), e.status) for e in errors if isinstance(e, lanes.APIError)] == [
        (lanes.InternalServerError, 503)
    ]  # and reported to on_error

    t, _ = capture(lambda r: httpx.Response(400, json={"error": "bad", "code": "bad_request"}))
    with pytest.raises(lanes.APIError), client(t).queue("q").wait(False).messages() as it:
        next(it)


def test_printing_a_client_does_not_show_its_bearer_token() -> None:
    token = "eyJ-secret-token-value"
    t, seen = capture()
    c = client(t, bearer_token=token)
    ac = lanes.AsyncLanes("http://broker", bearer_token=token)
    for shown in (repr(c._cfg), str(c._cfg), repr(vars(c)), repr(ac._cfg), repr(vars(ac))):
        assert token not in shown
    assert "bearer_token" not in repr(c._cfg)
    assert c.queue("q").pop() == []
    assert seen[0].headers["Authorization"] == f"Bearer {token}"


def test_a_bearer_token_callable_is_asked_before_every_attempt() -> None:
    t, seen = capture(lambda r: httpx.Response(503) if len(seen) == 1 else httpx.Response(204))
    asked = iter(range(1, 10))
    c = client(t, bearer_token=lambda: f"tok-{next(asked)}", retry_delay=0.001)
    assert c.queue("q").wait(False).pop() == []
    assert [r.headers["Authorization"] for r in seen] == ["Bearer tok-1", "Bearer tok-2"]


def test_a_failing_bearer_token_callable_fails_the_call_with_its_own_error() -> None:
    """Before the first attempt nothing is sent; before a retry the call ends. The error is the
    callable's, not an APIConnectionError (as in Go and TS)."""

    class TokenGone(Exception):
        pass

    def gone() -> str:
        raise TokenGone

    t, seen = capture()
    with pytest.raises(TokenGone):
        client(t, bearer_token=gone).admin.get_maintenance_mode()
    assert seen == []
    asked: list[int] = []

    def once() -> str:
        asked.append(1)
        if len(asked) > 1:
            raise TokenGone
        return "tok-1"

    t, seen = capture(lambda r: httpx.Response(503))
    with pytest.raises(TokenGone):
        client(t, bearer_token=once, retry_delay=0.001).admin.get_maintenance_mode()
    assert len(seen) == 1


def test_the_default_url_is_lanes_url_else_localhost(monkeypatch: pytest.MonkeyPatch) -> None:
    """As Go and TS (docs/sdk-design.md §1)."""
    t, seen = capture(lambda r: httpx.Response(200, json={"enabled": False}))
    monkeypatch.setenv("LANES_URL", "http://broker-from-env:7000")
    with lanes.Lanes(http_client=httpx.Client(transport=t)) as c:
        c.admin.get_maintenance_mode()
    monkeypatch.delenv("LANES_URL")
    with lanes.Lanes(http_client=httpx.Client(transport=t)) as c:
        c.admin.get_maintenance_mode()
    assert [f"{r.url.scheme}://{r.url.netloc.decode()}" for r in seen] == [
        "http://broker-from-env:7000",
        "http://localhost:6632",
    ]


def test_a_push_answered_buffered_is_no_error_and_is_logged_at_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """As Go and TS (docs/sdk-design.md §2)."""
    row = {"index": 0, "message_id": "m", "transaction_id": "t", "queueName": "q"}
    t, _ = capture(lambda r: httpx.Response(201, json=[row | {"status": "buffered"}]))
    with caplog.at_level(logging.WARNING, logger="lanes"), client(t) as c:
        assert [r.status for r in c.queue("q").push([1])] == ["buffered"]
    warnings = [r for r in caplog.records if r.name == "lanes" and r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "disk spool" in warnings[0].getMessage()
