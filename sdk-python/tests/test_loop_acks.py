"""The consume loops and iterators of ``Lanes`` and ``AsyncLanes`` ack a pop with the smallest list
that moves the cursor the same way (docs/sdk-design.md, "Loop acks"), read off the wire by an
httpx event hook, against a real broker (LANES_TEST_URL). The same cases run in sdk-go
(loopacks_integration_test.go) and sdk-js (loop-acks.test.ts)."""

from __future__ import annotations

import json

import httpx

import lanes


class AckWire:
    """The items of every ack call a client sent, as (transactionId, status) pairs."""

    def __init__(self) -> None:
        self.calls: list[list[tuple[str, str]]] = []

    def record(self, request: httpx.Request) -> None:
        path = request.url.path
        if request.method != "POST" or not path.startswith("/api/v1/ack"):
            return
        body = json.loads(request.read())
        items = [body] if path == "/api/v1/ack" else body["acknowledgments"]
        self.calls.append([(i["transactionId"], i["status"]) for i in items])

    def client(self, url: str) -> lanes.Lanes:
        return lanes.Lanes(url, http_client=httpx.Client(event_hooks={"request": [self.record]}))

    def async_client(self, url: str) -> lanes.AsyncLanes:
        async def hook(request: httpx.Request) -> None:
            self.record(request)

        return lanes.AsyncLanes(url, http_client=httpx.AsyncClient(event_hooks={"request": [hook]}))


def push_ids(url: str, queue: str, partition: str, ids: list[str]) -> None:
    with lanes.Lanes(url) as c:
        for i in ids:
            c.queue(queue).partition(partition).push([{"transaction_id": i, "data": i}])


def pending(url: str, queue: str) -> int:
    """Messages the queue-mode cursors have not passed, leased or not."""
    with lanes.Lanes(url) as c:
        return c.queue(queue).depth().pending


def ids(prefix: str, first: int, last: int) -> list[str]:
    return [f"{prefix}-{i}" for i in range(first, last + 1)]


def test_consume_acks_a_completed_partition_with_its_last_message(
    broker_url: str, qname: str
) -> None:
    wire = AckWire()
    push_ids(broker_url, qname, "a", ids("all", 0, 9))
    handled: list[str] = []
    with wire.client(broker_url) as c:
        q = c.queue(qname).wait(False).batch(10).limit(10)
        q.consume(lambda m: handled.append(m.transaction_id)).closed(timeout=20)
    assert handled == ids("all", 0, 9)
    assert pending(broker_url, qname) == 0
    assert wire.calls == [[("all-9", "completed")]]


def test_consume_sends_a_failure_with_the_last_completed_message_before_it(
    broker_url: str, qname: str
) -> None:
    wire = AckWire()
    push_ids(broker_url, qname, "a", ids("mid", 0, 5))
    handled: list[str] = []

    def handler(m: lanes.Message) -> None:
        handled.append(m.transaction_id)
        if m.transaction_id == "mid-2" and handled.count("mid-2") == 1:
            raise RuntimeError("boom")

    with wire.client(broker_url) as c:
        q = c.queue(qname).wait(False).batch(10).limit(7).on_error(lambda e: None)
        q.consume(handler).closed(timeout=20)
    assert handled == ids("mid", 0, 2) + ids("mid", 2, 5)
    assert pending(broker_url, qname) == 0
    assert wire.calls == [[("mid-1", "completed"), ("mid-2", "failed")], [("mid-5", "completed")]]


def test_messages_acks_each_partition_with_its_last_message(broker_url: str, qname: str) -> None:
    wire = AckWire()
    push_ids(broker_url, qname, "a", ids("ita", 0, 3))
    push_ids(broker_url, qname, "b", ids("itb", 0, 2))
    with wire.client(broker_url) as c:
        q = c.queue(qname).wait(False).batch(10).partitions(2).limit(7)
        with q.messages() as it:
            n = sum(1 for _ in it)
    assert n == 7
    assert pending(broker_url, qname) == 0
    assert len(wire.calls) == 1
    assert sorted(wire.calls[0]) == [("ita-3", "completed"), ("itb-2", "completed")]


def test_consume_sends_a_partition_that_repeats_a_transaction_id_whole(
    broker_url: str, qname: str
) -> None:
    wire = AckWire()
    with lanes.Lanes(broker_url) as c:
        c.admin.configure_queue(qname, {"dedupWindowSeconds": 0}, mode="merge")
    push_ids(broker_url, qname, "a", ["x", "y", "x"])
    with wire.client(broker_url) as c:
        c.queue(qname).wait(False).batch(10).limit(3).consume(lambda m: None).closed(timeout=20)
    assert pending(broker_url, qname) == 0, "both copies of x committed"
    assert wire.calls == [[("x", "completed"), ("y", "completed"), ("x", "completed")]]


def test_ack_still_sends_every_message_it_is_given(broker_url: str, qname: str) -> None:
    wire = AckWire()
    push_ids(broker_url, qname, "a", ids("man", 0, 2))
    with wire.client(broker_url) as c:
        ms = c.queue(qname).wait(False).batch(10).pop()
        c.ack(ms, "completed")
    assert [len(items) for items in wire.calls] == [3]


async def test_async_consume_acks_a_completed_partition_with_its_last_message(
    broker_url: str, qname: str
) -> None:
    wire = AckWire()
    push_ids(broker_url, qname, "a", ids("all", 0, 9))
    handled: list[str] = []
    async with wire.async_client(broker_url) as c:
        q = c.queue(qname).wait(False).batch(10).limit(10)
        await q.consume(lambda m: handled.append(m.transaction_id)).closed()
    assert handled == ids("all", 0, 9)
    assert pending(broker_url, qname) == 0
    assert wire.calls == [[("all-9", "completed")]]


async def test_async_messages_acks_each_partition_with_its_last_message(
    broker_url: str, qname: str
) -> None:
    wire = AckWire()
    push_ids(broker_url, qname, "a", ids("ita", 0, 3))
    push_ids(broker_url, qname, "b", ids("itb", 0, 2))
    async with wire.async_client(broker_url) as c:
        q = c.queue(qname).wait(False).batch(10).partitions(2).limit(7)
        async with q.messages() as it:
            n = len([m async for m in it])
    assert n == 7
    assert pending(broker_url, qname) == 0
    assert len(wire.calls) == 1
    assert sorted(wire.calls[0]) == [("ita-3", "completed"), ("itb-2", "completed")]
