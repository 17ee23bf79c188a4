"""The asyncio client against a real broker and PostgreSQL (LANES_TEST_URL)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import datetime
import functools
import inspect
import json
import logging
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from types import FrameType
from typing import Any

import httpx
import pytest

import lanes

from .proxying import SlowAnswerProxy, stop_an_async_iterator_with_an_answer_on_its_way
from .scripts import run_script


@pytest.fixture
async def client(broker_url: str) -> AsyncIterator[lanes.AsyncLanes]:
    async with lanes.AsyncLanes(broker_url, retry_attempts=1, timeout=10) as c:
        yield c


async def drain(q: lanes.AsyncQueue) -> list[lanes.Message]:
    return await q.wait(False).autopilot(False).batch(1000).partitions(100).pop()


async def test_health(client: lanes.AsyncLanes) -> None:
    assert (await client.health()).status == "healthy"


async def test_push_pop_ack(client: lanes.AsyncLanes, qname: str) -> None:
    res = await client.queue(qname).partition("c-1").push([{"transaction_id": "t1", "data": 1}, 2])
    assert [r.status for r in res] == ["queued", "queued"]
    assert (await client.queue(qname).partition("c-1").push([{"transaction_id": "t1", "data": 1}]))[
        0
    ].status == "duplicate"
    msgs = await client.queue(qname).wait(False).pop()
    assert [m.data for m in msgs] == [1, 2]
    assert all(a.success for a in await client.ack(msgs))
    one = await client.queue(qname).wait(False).pop()
    assert one == []
    await client.queue(qname).push([1, 2])
    assert len(await client.queue(qname).wait(False).autopilot(False).pop()) == 1


async def test_consume_order_per_partition(client: lanes.AsyncLanes, qname: str) -> None:
    parts = [f"p{i}" for i in range(3)]
    for p in parts:
        await client.queue(qname).partition(p).push([{"p": p, "i": i} for i in range(8)])
    seen: dict[str, list[int]] = {p: [] for p in parts}

    async def handler(m: lanes.Message) -> None:
        await asyncio.sleep(0.001)
        seen[m.data["p"]].append(m.data["i"])

    await (
        client.queue(qname)
        .group("g")
        .subscription_mode("all")
        .concurrency(3)
        .limit(24)
        .run(handler)
    )
    assert all(v == list(range(8)) for v in seen.values()), seen
    assert await drain(client.queue(qname).group("g")) == []


async def test_nack_and_batch_handler(client: lanes.AsyncLanes, qname: str) -> None:
    await client.queue(qname).push(["a", "b"])
    batches: list[list[str]] = []

    async def handler(ms: list[lanes.Message]) -> None:
        batches.append([m.data for m in ms])
        if len(batches) == 1:
            raise ValueError("nack the slice")

    async with client.queue(qname).timeout_millis(500).idle_millis(1500).consume_batch(handler):
        await asyncio.sleep(3)
    assert batches[0] == ["a", "b"] and batches[1] == ["a", "b"]
    assert await drain(client.queue(qname)) == []


async def test_batch_limit_cuts_slice(client: lanes.AsyncLanes, qname: str) -> None:
    # limit(n) is "n messages handed to the handler": a larger slice is cut to n, the rest is
    # released with `retry` at once (the same in Go and TypeScript).
    await client.queue(qname).push(list(range(10)))
    batches: list[list[int]] = []

    async def handler(ms: list[lanes.Message]) -> None:
        batches.append([m.data for m in ms])

    c = client.queue(qname).batch(10).wait(False).lease_seconds(120).limit(5).consume_batch(handler)
    await asyncio.wait_for(c.closed(), 10)
    assert batches == [[0, 1, 2, 3, 4]]
    assert [m.data for m in await drain(client.queue(qname))] == [5, 6, 7, 8, 9]


async def test_a_worker_finding_the_limit_reached_stops_popping(
    broker_url: str, qname: str
) -> None:
    # Four workers, four partitions, limit 3: the worker whose pop comes after the other three
    # handed the limit releases it and ends, so there are four pops and the five messages not
    # handed are back at once. Before, that worker popped and released the same partition in a
    # tight loop until a handler returned (about a hundred pops in 0.5 s), and the stop then
    # cut one of those pops on its way back, leaving its messages leased for the 30 s lease.
    run = f"py-{uuid.uuid4().hex[:12]}"
    faults = f"{broker_url}/__test/faults/{run}"
    count_pops = {"method": "GET", "path": f"/api/v1/pop/queue/{qname}", "responses": []}
    handled: list[str] = []

    async def handler(m: lanes.Message) -> None:
        handled.append(m.data)
        await asyncio.sleep(0.5)

    async with httpx.AsyncClient() as script:
        put = await script.put(faults, content=json.dumps({"rules": [count_pops]}))
        assert put.status_code == 204
        try:
            async with lanes.AsyncLanes(broker_url, headers={"X-Lanes-Test-Run": run}) as c:
                for p in "abcd":
                    await c.queue(qname).partition(p).push([f"{p}1", f"{p}2"])
                q = c.queue(qname).batch(2).partitions(1).concurrency(4).limit(3)
                await asyncio.wait_for(q.lease_seconds(30).consume(handler).closed(), 10)
            pops = (await script.get(faults)).json()["rules"][0]["attempts"]
        finally:
            await script.delete(faults)
    assert len(handled) == 3
    assert pops == 4, f"{pops} pops: a worker kept popping after the limit was reached"
    async with lanes.AsyncLanes(broker_url) as c:
        assert len(await drain(c.queue(qname))) == 5


async def test_hard_stop_cancels_and_releases(client: lanes.AsyncLanes, qname: str) -> None:
    await client.queue(qname).push(["x", "y"])
    started = asyncio.Event()

    async def handler(m: lanes.Message) -> None:
        started.set()
        await asyncio.sleep(30)

    c = client.queue(qname).batch(2).consume(handler)
    await asyncio.wait_for(started.wait(), 10)
    await c.stop_and_cancel(timeout=5)
    assert c.done and c.error is None
    assert [m.data for m in await drain(client.queue(qname))] == ["x", "y"]


async def test_soft_stop_escalates_after_soft_stop_timeout_millis(
    client: lanes.AsyncLanes, qname: str
) -> None:
    await client.queue(qname).push(["x"])
    started = asyncio.Event()

    async def handler(m: lanes.Message) -> None:
        started.set()
        await asyncio.sleep(30)  # ignores the soft stop; the escalation cancels it

    c = client.queue(qname).soft_stop_timeout_millis(200).consume(handler)
    await asyncio.wait_for(started.wait(), 10)
    t0 = asyncio.get_running_loop().time()
    await c.stop(timeout=5)
    assert asyncio.get_running_loop().time() - t0 < 2
    assert c.done and c.error is None
    assert [m.data for m in await drain(client.queue(qname))] == ["x"]  # released with retry


def test_soft_stop_timeout_in_seconds_is_a_deprecated_alias(client: lanes.AsyncLanes) -> None:
    with pytest.warns(DeprecationWarning, match="soft_stop_timeout_millis"):
        q = client.queue("q").soft_stop_timeout(1.5)
    assert q._spec.soft_stop_timeout_millis == 1500
    with pytest.raises(ValueError):
        client.queue("q").soft_stop_timeout_millis(-1)


async def test_soft_stop_finishes_current(client: lanes.AsyncLanes, qname: str) -> None:
    await client.queue(qname).push([1, 2, 3])
    started = asyncio.Event()
    done: list[int] = []

    async def handler(m: lanes.Message) -> None:
        started.set()
        await asyncio.sleep(0.3)
        done.append(m.data)

    c = client.queue(qname).batch(3).consume(handler)
    await asyncio.wait_for(started.wait(), 10)
    await c.stop(timeout=5)
    assert done == [1]
    assert [m.data for m in await drain(client.queue(qname))] == [2, 3]


async def test_messages_iterator(client: lanes.AsyncLanes, qname: str) -> None:
    await client.queue(qname).push([1, 2, 3])
    async with client.queue(qname).timeout_millis(300).messages(idle_timeout=0.5) as it:
        got = [m.data async for m in it]
    assert got == [1, 2, 3]
    assert await drain(client.queue(qname)) == []


async def test_messages_iterator_reports_a_failed_ack_to_on_error_and_goes_on(
    client: lanes.AsyncLanes, qname: str
) -> None:
    # As the sync test: the lease of the message in hand ends and another consumer takes it; the
    # refused ack goes to the builder's on_error and the iteration ends by idle, not by raising.
    await client.queue(qname).push(["a"])
    errors: list[BaseException] = []
    got = []
    q = (
        client.queue(qname)
        .lease_seconds(1)
        .renew_lease(False)  # so the lease ends in the loop body
        .timeout_millis(300)
        .on_error(errors.append)
    )
    async with q.messages(idle_timeout=0.5) as it:
        async for m in it:
            got.append(m.data)
            await asyncio.sleep(1.5)
            assert [t.data for t in await client.queue(qname).wait(False).pop()] == ["a"]
    assert got == ["a"]
    assert len(errors) == 1 and isinstance(errors[0], lanes.AckError)


async def test_messages_iterator_takes_auto_ack_limit_and_idle_from_the_builder(
    client: lanes.AsyncLanes, qname: str
) -> None:
    # As the sync test: the builder's auto_ack(False), limit() and idle_millis() apply.
    await client.queue(qname).push([0, 1, 2, 3])
    q = client.queue(qname).auto_ack(False).lease_seconds(1).timeout_millis(300)

    async def take(it: lanes.AsyncMessageIterator) -> list[object]:
        async with it:
            return [m.data async for m in it]

    got = await asyncio.wait_for(take(q.limit(3).idle_millis(500).messages()), 5)
    assert got == [0, 1, 2]
    await asyncio.sleep(1.5)  # nothing was acked; the leases end and the messages come back
    assert [m.data for m in await drain(client.queue(qname))] == [0, 1, 2, 3]


async def test_messages_iterator_with_auto_ack_off_leaving_early_releases_nothing(
    client: lanes.AsyncLanes, qname: str
) -> None:
    # The caller owns every message handed over: a retry of 2 would release 1 (in hand, not
    # acked) too, so leaving in the body of 1 releases nothing while the 30 s lease lasts.
    await client.queue(qname).push([1, 2, 3])
    q = client.queue(qname).batch(10).lease_seconds(30).auto_ack(False)
    got: list[object] = []
    async with q.messages() as it:
        async for m in it:
            got.append(m.data)
            break
    assert got == [1]
    assert await client.queue(qname).wait(False).pop() == []


async def test_soft_stop_with_auto_ack_off_releases_nothing(
    client: lanes.AsyncLanes, qname: str
) -> None:
    # The handler owns what it was handed (1, not acked): a retry of 2 would release it too.
    await client.queue(qname).push([1, 2, 3])
    started = asyncio.Event()

    async def handler(m: lanes.Message) -> None:
        started.set()
        await asyncio.sleep(0.3)

    c = client.queue(qname).batch(10).lease_seconds(30).auto_ack(False).consume(handler)
    await asyncio.wait_for(started.wait(), 10)
    await c.stop(timeout=5)
    assert c.done and c.error is None
    assert await client.queue(qname).wait(False).pop() == []


async def test_renew_and_buffer(client: lanes.AsyncLanes, qname: str, broker_url: str) -> None:
    await client.queue(qname).push(["r"])
    msgs = await client.queue(qname).wait(False).pop()
    assert (await client.renew(msgs[0], seconds=30))[0].success
    await client.ack(msgs)
    c = lanes.AsyncLanes(broker_url)
    buf = c.queue(qname).partition("b").buffer(message_count=1000, time_millis=60_000)
    await buf.push(list(range(10)))
    await c.aclose()
    assert len(await drain(client.queue(qname))) == 10


async def test_transaction(client: lanes.AsyncLanes, qname: str) -> None:
    await client.queue(qname).push([{"n": 1}])
    msg = (await client.queue(qname).wait(False).pop())[0]
    res = await client.transaction().queue(qname + "-out").push([{"n": 2}]).ack(msg).commit()
    assert res.success
    assert [m.data for m in await drain(client.queue(qname + "-out"))] == [{"n": 2}]


async def test_admin(client: lanes.AsyncLanes, qname: str) -> None:
    assert (await client.queue(qname).configure({"retryLimit": 2})).configured
    assert (await client.admin.get_queue(qname)).name == qname
    await client.queue(qname).push(["x"])
    await client.admin.seek_consumer_group("g", qname, to_end=True)
    assert (await client.admin.list_dlq(queue=qname)).messages == []


async def test_a_groups_cursors_are_a_plain_dict_keyed_by_queue(
    client: lanes.AsyncLanes, qname: str
) -> None:
    await client.queue(qname).partition("p").push(["a"])
    group = client.queue(qname).group("cursors").subscription_mode("all")
    await client.ack(await group.wait(False).pop())
    detail = await client.admin.get_consumer_group("cursors")
    assert isinstance(detail, dict)
    assert [(c.partition, c.total_consumed) for c in detail[qname].partitions] == [("p", 1)]
    await client.admin.delete_consumer_group("cursors")


async def test_dead_letters_and_messages_take_a_from_to_window(
    client: lanes.AsyncLanes, qname: str
) -> None:
    await client.queue(qname).push(["poison"])
    await client.ack(await client.queue(qname).wait(False).pop(), "dlq", error="poison")
    failed_at = (await client.admin.list_dlq(queue=qname)).messages[0].failed_at
    created_at = (await client.admin.list_messages(queue=qname)).messages[0].created_at
    second = datetime.timedelta(seconds=1)
    admin = client.admin
    assert (
        await admin.list_dlq(queue=qname, from_=failed_at - second, to=failed_at + second)
    ).messages
    assert not (await admin.list_dlq(queue=qname, from_=failed_at + second)).messages
    assert (await admin.list_messages(queue=qname, from_=created_at - second)).messages
    assert not (await admin.list_messages(queue=qname, from_=created_at + second)).messages


async def test_timers_batch(client: lanes.AsyncLanes, qname: str) -> None:
    ops = [lanes.timer_op("schedule", qname, k, delay_millis=3_600_000) for k in ("a", "b")]
    res = await client.timers(qname).batch(ops)
    assert [r.timer_key for r in res] == ["a", "b"] and all(r.ok for r in res)


async def test_kv_and_timers(client: lanes.AsyncLanes, qname: str) -> None:
    await client.kv(qname).put("k", 1)
    assert (await client.kv(qname).get("k")).value == 1
    r = await client.timers(qname).schedule("t", delay_millis=60_000, payload=b'"raw"')
    assert r.ok


async def test_kv_helpers(client: lanes.AsyncLanes, qname: str) -> None:
    kv = client.kv(qname)
    assert (await kv.put_if_absent("once", "a")).applied
    lost = await kv.put_if_absent("once", "b")
    assert not lost.applied and lost.reason == "exists"
    assert (await kv.put("cas", 1, expect=0)).applied
    assert (await kv.put("cas", 2, expect=5)).reason == "version"
    assert (await kv.incr("n", 2, min=0, max=3)).value == 2
    assert (await kv.incr("n", 2, max=3)).reason == "limit"
    many = await kv.get_many(["once", "n", "x"])
    assert many.missing == ["x"] and len(many.rows or []) == 2
    page = await kv.get_prefix("n", limit=1)
    assert [row.key for row in page.rows or []] == ["n"] and not page.truncated
    listed = await kv.list(prefix="c")
    assert [row.key for row in listed.rows] == ["cas"]
    counts = {n.namespace: n.keys for n in (await client.kv_namespaces()).namespaces}
    assert counts.get(qname) == 3


async def test_timers_reschedule_partition_prefix(client: lanes.AsyncLanes, qname: str) -> None:
    t = client.timers(qname)
    assert (await t.schedule("a:1", delay_millis=60_000, partition="p1")).ok
    r = await t.reschedule("a:1", delay_millis=90_000, partition="p2")
    assert r.ok and r.status == "rescheduled"
    assert (await t.get("a:1")).partition == "p2"
    await t.schedule("b:1", delay_millis=60_000)
    assert [x.timer_key for x in (await t.list(prefix="a:")).rows or []] == ["a:1"]


async def test_kv_conditional_delete(client: lanes.AsyncLanes, qname: str) -> None:
    kv = client.kv(qname)
    await kv.put("k", "v")
    stale = await kv.delete("k", expect=2)
    assert (stale.applied, stale.reason) == (False, "version")
    assert (await kv.delete("k", expect=1)).applied
    assert not (await kv.get("k")).found


async def test_stop_with_a_pop_in_flight_leaves_nothing_leased(
    client: lanes.AsyncLanes, qname: str
) -> None:
    handled: list[object] = []
    c = client.queue(qname).lease_seconds(60).timeout_millis(3000).consume(handled.append)
    await asyncio.sleep(0.3)  # the pop is parked on the broker
    await c.stop(timeout=10)
    await client.queue(qname).push(["late"])
    got = await asyncio.wait_for(client.queue(qname).timeout_millis(5000).pop(), 4)
    assert [m.data for m in got] == ["late"]  # not held for the 60 s lease of an abandoned pop
    assert handled == []


async def test_messages_iterator_renews_the_lease_while_a_slow_loop_body_runs(
    client: lanes.AsyncLanes, qname: str
) -> None:
    # As the sync test: a 2 s lease outlived by a 3.5 s loop body.
    await client.queue(qname).push(["slow"])
    errors: list[BaseException] = []
    q = client.queue(qname).lease_seconds(2).timeout_millis(300).on_error(errors.append)
    async with q.messages(idle_timeout=0.5) as it:
        async for m in it:
            await asyncio.sleep(3.5)
            assert await drain(client.queue(qname)) == [], "the lease ran out in the loop body"
            assert m.data == "slow"
    assert errors == []
    assert await drain(client.queue(qname)) == []


async def test_server_auto_ack_limit_caps_the_pop_and_a_hard_stop_reports_what_it_dropped(
    client: lanes.AsyncLanes, qname: str
) -> None:
    await client.queue(qname).push(list(range(10)))
    errors: list[BaseException] = []
    q = (
        client.queue(qname)
        .server_auto_ack(True)
        .autopilot(False)
        .batch(4)
        .timeout_millis(300)
        .on_error(errors.append)
    )
    seen: list[int] = []
    await q.limit(3).run(lambda m: seen.append(m.data))
    assert seen == [0, 1, 2]  # 3..9 still queued: the pop asked for 3, not 4
    started = asyncio.Event()

    async def stuck(m: lanes.Message) -> None:
        seen.append(m.data)
        started.set()
        await asyncio.sleep(30)

    cons = q.consume(stuck)
    await asyncio.wait_for(started.wait(), 5)
    await cons.stop_and_cancel(10)
    assert seen == [0, 1, 2, 3]
    dropped = [e for e in errors if isinstance(e, lanes.AutoAckDroppedError)]
    assert [e.count for e in dropped] == [3]  # 4, 5, 6 were committed by the pop, never handled
    assert [m.data for m in await drain(client.queue(qname))] == [7, 8, 9]


async def test_server_auto_ack_soft_stop_lets_a_pop_in_flight_answer_and_hands_it_over(
    client: lanes.AsyncLanes, qname: str
) -> None:
    # The broker commits the pop's messages: cut by the stop, they would be lost unseen.
    errors: list[BaseException] = []
    seen: list[int] = []
    q = client.queue(qname).server_auto_ack(True).timeout_millis(5000).on_error(errors.append)
    cons = q.consume(lambda m: seen.append(m.data))
    await asyncio.sleep(0.3)  # the pop is parked on the empty queue
    stopping = asyncio.ensure_future(cons.stop(10))
    await asyncio.sleep(0.2)
    await client.queue(qname).push([7])
    await stopping
    assert seen == [7]
    assert errors == []
    assert await drain(client.queue(qname)) == []  # committed in the pop, and handed over


async def _push_to_partitions(
    client: lanes.AsyncLanes, qname: str, partitions: int, each: int
) -> None:
    for p in range(partitions):
        await client.queue(qname).partition(f"p{p}").push(list(range(p * each, (p + 1) * each)))


async def _count_left(q: lanes.AsyncQueue) -> int:
    n = 0
    while got := await q.wait(False).batch(100).pop():
        n += len(got)
    return n


@pytest.mark.parametrize("batch", [0, 2], ids=["autopilot", "batch-2"])
async def test_server_auto_ack_limit_5_concurrency_4_commits_exactly_5(
    client: lanes.AsyncLanes, qname: str, batch: int
) -> None:
    await _push_to_partitions(client, qname, 4, 10)
    seen: list[int] = []
    q = client.queue(qname).server_auto_ack(True).concurrency(4).limit(5).wait(False).batch(batch)
    await q.run(lambda m: seen.append(m.data))
    assert len(seen) == 5
    assert await _count_left(client.queue(qname)) == 35


class _PopsInFlight(httpx.AsyncHTTPTransport):
    """Counts the pop requests outstanding at once."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0
        self.most = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        pop = "/api/v1/pop" in request.url.path
        if pop:
            self.now += 1
            self.most = max(self.most, self.now)
        try:
            return await super().handle_async_request(request)
        finally:
            if pop:
                self.now -= 1


async def test_server_auto_ack_workers_pop_side_by_side_and_commit_exactly_the_limit(
    broker_url: str, client: lanes.AsyncLanes, qname: str
) -> None:
    await _push_to_partitions(client, qname, 6, 60)
    pops = _PopsInFlight()
    seen: list[int] = []

    async def handle(m: lanes.Message) -> None:
        seen.append(m.data)
        await asyncio.sleep(0.001)

    async with (
        httpx.AsyncClient(transport=pops) as http,
        lanes.AsyncLanes(broker_url, retry_attempts=1, timeout=10, http_client=http) as c,
    ):
        q = c.queue(qname).server_auto_ack(True).concurrency(3).batch(50).limit(300)
        await q.run(handle)
    assert len(seen) == 300
    assert len(set(seen)) == 300
    assert pops.most > 1  # each worker reserved its batch, not the whole limit
    assert await _count_left(client.queue(qname)) == 60


async def test_cancelling_run_stops_the_consumer(client: lanes.AsyncLanes, qname: str) -> None:
    seen: list[object] = []
    q = client.queue(qname).timeout_millis(1000)
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(q.run(lambda m: seen.append(m.data)), 0.5)
    await client.queue(qname).push(["after"])
    await asyncio.sleep(1.5)
    assert seen == []  # no consumer left behind
    assert [m.data for m in await drain(client.queue(qname))] == ["after"]


async def _cancel_an_inner_task() -> None:
    inner = asyncio.ensure_future(asyncio.sleep(10))
    inner.cancel()
    await inner  # raises CancelledError in the handler, with no stop under way


async def _raise_consumer_stopped() -> None:
    raise lanes.ConsumerStoppedError("the handler's own")


@pytest.mark.parametrize(
    "fail", [_cancel_an_inner_task, _raise_consumer_stopped], ids=["cancelled", "stopped"]
)
async def test_a_handler_raising_a_cancellation_without_a_stop_is_nacked_failed(
    client: lanes.AsyncLanes, qname: str, fail: Callable[[], Awaitable[None]]
) -> None:
    # Released with `retry` it would come back at once, forever; `failed` spends the budget
    # (retryLimit 0: straight to the DLQ), as in Go and TS.
    assert (await client.queue(qname).configure({"retryLimit": 0})).configured
    await client.queue(qname).push(["poison"])
    errors: list[BaseException] = []
    calls: list[str] = []

    async def handler(m: lanes.Message) -> None:
        calls.append(m.data)
        await fail()

    q = client.queue(qname).wait(False).report_handler_errors(True).on_error(errors.append)
    await asyncio.wait_for(q.limit(1).run(handler), 10)
    assert calls == ["poison"]
    assert len(errors) == 1  # reported as the handler's own failure
    assert [m.data for m in (await client.admin.list_dlq(queue=qname)).messages] == ["poison"]
    assert await drain(client.queue(qname)) == []


@pytest.mark.parametrize("how", ["stop", "stop_and_cancel"])
async def test_a_stop_awaited_inside_a_handler_returns_and_the_consumer_ends(
    client: lanes.AsyncLanes, qname: str, how: str
) -> None:
    await client.queue(qname).push([0, 1, 2])
    handled: list[int] = []
    box: list[lanes.AsyncConsumer] = []

    async def handler(m: lanes.Message) -> None:
        handled.append(m.data)
        await getattr(box[0], how)()
        handled.append(-1)  # the stop returned (a hard stop cancels at the next await only)

    box.append(client.queue(qname).batch(3).consume(handler))
    await asyncio.wait_for(box[0].closed(), 5)
    assert handled == [0, -1]
    # Released with retry: the rest, and under a hard stop the cancelled handler's own message.
    released = [1, 2] if how == "stop" else [0, 1, 2]
    assert [m.data for m in await drain(client.queue(qname))] == released


async def test_a_stop_awaited_from_on_error_of_a_failed_lease_renewal_returns_and_the_consumer_ends(
    client: lanes.AsyncLanes, qname: str
) -> None:
    # As Go's TestITStopFromOnErrorOfARenewal, where Stop there waited for the end that waits
    # for that renewal. The handler acks its message itself, so the next renewal finds the lease
    # gone. on_error is synchronous: it starts the stop in a task.
    await client.queue(qname).push(["self"])
    box: list[lanes.AsyncConsumer] = []
    renew_failed = asyncio.Event()
    first_error: list[BaseException] = []
    stopped: list[asyncio.Future[float]] = []

    async def stop() -> float:
        start = asyncio.get_running_loop().time()
        await box[0].stop(timeout=3)
        return asyncio.get_running_loop().time() - start

    def on_error(e: BaseException) -> None:
        if first_error:
            return
        first_error.append(e)
        renew_failed.set()
        stopped.append(asyncio.ensure_future(stop()))

    async def handler(m: lanes.Message) -> None:
        await client.ack(m)
        await renew_failed.wait()

    q = client.queue(qname).wait(False).lease_seconds(5).renew_lease(True, 200)
    box.append(q.on_error(on_error).consume(handler))
    await asyncio.wait_for(renew_failed.wait(), 10)
    assert "was not renewed" in str(first_error[0])
    took = await stopped[0]
    assert took < 1, "stop from on_error waited for the end that waits for it"
    await asyncio.wait_for(box[0].closed(), 5)


async def test_server_auto_ack_with_a_limit_above_the_largest_batch_pops_the_automatic_batch(
    client: lanes.AsyncLanes, qname: str
) -> None:
    # The pop asks for min(left, 100), never batch=20000 (a 400 that ended the consumer).
    await client.queue(qname).push(list(range(5)))
    q = client.queue(qname).server_auto_ack(True).limit(20_000).wait(False).idle_millis(1000)
    seen: list[int] = []
    await asyncio.wait_for(q.run(lambda m: seen.append(m.data)), 10)
    assert seen == [0, 1, 2, 3, 4]
    await client.queue(qname).push([5, 6])
    async with q.messages() as it:
        assert [m.data async for m in it] == [5, 6]


@pytest.mark.parametrize(
    ("queue", "partition", "field"),
    [
        (".", None, "queue"),
        ("..", None, "queue"),
        ("ok", ".", "partition"),
        ("ok", "..", "partition"),
    ],
)
async def test_a_queue_or_partition_named_dot_or_dot_dot_is_refused_before_sending(
    client: lanes.AsyncLanes, queue: str, partition: str | None, field: str
) -> None:
    q = client.queue(queue).wait(False)
    if partition is not None:
        q = q.partition(partition)
    for start in (q.pop, lambda: q.consume(lambda m: None), q.messages):
        with pytest.raises(lanes.InvalidNameError) as caught:
            r = start()
            if inspect.isawaitable(r):
                await r
        assert (caught.value.field, caught.value.value) == (field, partition or queue)


@pytest.mark.parametrize("group", [" ", "\t\n", "\u3000"])
async def test_a_consumer_group_of_only_white_space_is_refused_wherever_a_group_is_taken(
    broker_url: str, qname: str, group: str
) -> None:
    sent: list[httpx.Request] = []
    transport = httpx.AsyncHTTPTransport()

    class Counting(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            sent.append(request)
            return await transport.handle_async_request(request)

    client = lanes.AsyncLanes(broker_url, http_client=httpx.AsyncClient(transport=Counting()))
    msg = lanes.Message(
        id="m",
        transaction_id="t",
        data=1,
        partition_id="00000000-0000-0000-0000-000000000000",
        partition="p",
        lease_id="",
        consumer_group="g",
    )

    async def refused(call: Callable[[], Any], value: str = group) -> None:
        with pytest.raises(lanes.InvalidNameError) as caught:
            r = call()
            if inspect.isawaitable(r):
                await r
        assert (caught.value.field, caught.value.value) == ("group", value)

    for b in (
        client.queue(qname),
        client.queue(qname).partition("p"),
        client.queue().namespace(qname),
    ):
        q = b.group(group).wait(False)
        for start in (q.pop, functools.partial(q.consume, lambda m: None), q.messages):
            await refused(start)
    await refused(lambda: client.ack(msg, group=group))
    await refused(lambda: client.ack([msg, msg], group=group))
    await refused(lambda: client.transaction().ack(msg, group=group))
    await refused(client.queue(qname).group(group).depth)
    await refused(client.queue(qname).dlq(group).get)
    await refused(lambda: client.admin.get_queue_depth(qname, group))
    await refused(lambda: client.admin.list_dlq(queue=qname, consumer_group=group))
    await refused(lambda: client.admin.purge_dlq(qname, group))
    admin = client.admin
    for g in (group, ""):
        await refused(functools.partial(admin.seek_consumer_group, g, qname, to_end=True), g)
        await refused(
            functools.partial(admin.seek_consumer_group_partition, g, qname, "p", to_end=True), g
        )
        await refused(functools.partial(admin.get_consumer_group, g), g)
        await refused(functools.partial(admin.delete_consumer_group, g), g)
        await refused(functools.partial(admin.delete_consumer_group_for_queue, g, qname), g)
        await refused(
            functools.partial(
                admin.update_subscription, g, datetime.datetime.now(datetime.timezone.utc)
            ),
            g,
        )
    await client.aclose()
    assert sent == []


async def test_a_blocking_def_handler_runs_off_the_event_loop_and_its_lease_is_renewed(
    client: lanes.AsyncLanes, qname: str, broker_url: str
) -> None:
    # On the event loop, the handler's sleep would stall lease renewal: the 1 s lease would
    # expire under it, a second consumer would take the message and the final ack would fail.
    await client.queue(qname).push(["slow"])
    stolen: list[int] = []
    errors: list[BaseException] = []
    thief = lanes.Lanes(broker_url, retry_attempts=1, timeout=10)

    def handle(m: lanes.Message) -> None:
        time.sleep(1.5)
        stolen.append(len(thief.queue(qname).wait(False).pop()))
        time.sleep(0.5)

    q = client.queue(qname).wait(False).lease_seconds(1).limit(1).on_error(errors.append)
    try:
        await asyncio.wait_for(q.run(handle), 20)
    finally:
        thief.close()
    assert stolen == [0] and errors == []
    assert await drain(client.queue(qname)) == []  # acked under the renewed lease


async def test_a_hard_stop_waits_for_a_blocking_handler_and_acks_what_it_handled(
    client: lanes.AsyncLanes, qname: str
) -> None:
    await client.queue(qname).push(["a", "b"])
    started = threading.Event()
    handled: list[str] = []
    box: list[lanes.AsyncConsumer] = []

    def handle(m: lanes.Message) -> None:
        started.set()
        box[0].cancel_event.wait(10)  # a thread cannot be cancelled: it watches the event
        handled.append(m.data)

    box.append(client.queue(qname).batch(2).consume(handle))
    assert await asyncio.to_thread(started.wait, 10)
    await box[0].stop_and_cancel(timeout=10)
    assert handled == ["a"]
    assert [m.data for m in await drain(client.queue(qname))] == ["b"]  # "a" acked, "b" released


async def test_async_handlers_run_without_a_task_per_message(
    client: lanes.AsyncLanes, qname: str
) -> None:
    # A task and a wait per message were a quarter of the client's CPU with a fast handler: a
    # pop's messages are handled in one task.
    await client.queue(qname).push(list(range(200)))
    loop = asyncio.get_running_loop()
    created = 0

    def count_tasks(loop: asyncio.AbstractEventLoop, coro: Any, **kw: Any) -> asyncio.Task[Any]:
        nonlocal created
        created += 1
        return asyncio.Task(coro, loop=loop, **kw)

    handled: list[int] = []

    async def handler(m: lanes.Message) -> None:
        handled.append(m.data)

    loop.set_task_factory(count_tasks)
    try:
        q = client.queue(qname).autopilot(False).batch(100).wait(False).limit(200)
        await asyncio.wait_for(q.run(handler), 10)
    finally:
        loop.set_task_factory(None)
    assert handled == list(range(200))
    assert created < 50, created


@pytest.mark.skipif(
    sys.version_info < (3, 11), reason="3.10 cannot tell this cancellation from a handler's own"
)
def test_handlers_stop_being_called_when_asyncio_run_ends(broker_url: str, qname: str) -> None:
    # asyncio.run cancels every task when its main returns: the handler in hand ends there, and
    # no other message of its pop is handed over.
    script = f"""
        import asyncio
        import lanes
        calls = []
        async def main():
            client = lanes.AsyncLanes({broker_url!r})
            for p in "abc":
                await client.queue({qname!r}).partition(p).push([p + "1", p + "2"])
            started = asyncio.Event()
            async def handler(m):
                calls.append(m.data)
                started.set()
                await asyncio.sleep(30)
            client.queue({qname!r}).batch(10).partitions(3).consume(handler)
            await started.wait()
        asyncio.run(main())
        print(len(calls))
        """
    ran = run_script(script)
    assert ran.stdout.split() == ["1"], ran.stderr


async def test_plain_handlers_take_one_pool_trip_per_pop_not_per_message(
    client: lanes.AsyncLanes, qname: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A trip to a pool thread and back per message cost about 100 µs of client CPU, 3x an async
    # def handler: a pop's plain handlers run in one trip.
    for p in "abc":
        await client.queue(qname).partition(p).push([f"{p}{i}" for i in range(50)])
    trips = 0
    submit = concurrent.futures.ThreadPoolExecutor.submit

    def count_trips(pool: concurrent.futures.ThreadPoolExecutor, *a: Any, **kw: Any) -> Any:
        nonlocal trips
        if pool._thread_name_prefix == "lanes-handler":
            trips += 1
        return submit(pool, *a, **kw)

    monkeypatch.setattr(concurrent.futures.ThreadPoolExecutor, "submit", count_trips)
    handled: dict[str, list[str]] = {"a": [], "b": [], "c": []}
    pops = 0

    def handle(m: lanes.Message) -> None:
        handled[m.data[0]].append(m.data)

    q = client.queue(qname).autopilot(False).batch(150).partitions(3).wait(False).limit(150)
    q = q.concurrency(2)
    pop = lanes.AsyncQueue._pop_with

    async def count_pops(self: lanes.AsyncQueue, spec: Any) -> Any:
        nonlocal pops
        res = await pop(self, spec)
        pops += bool(res.messages)
        return res

    monkeypatch.setattr(lanes.AsyncQueue, "_pop_with", count_pops)
    await asyncio.wait_for(q.run(handle), 20)
    assert handled == {p: [f"{p}{i}" for i in range(50)] for p in "abc"}
    assert pops >= 1 and trips <= pops, (trips, pops)
    assert await drain(client.queue(qname)) == []


async def test_an_awaitable_a_plain_handler_returns_is_awaited_on_the_loop_in_order(
    client: lanes.AsyncLanes, qname: str
) -> None:
    client_thread = threading.get_ident()
    await client.queue(qname).push(list(range(6)))
    calls: list[tuple[str, int]] = []

    async def on_the_loop(n: int) -> None:
        assert threading.get_ident() == client_thread
        await asyncio.sleep(0)
        calls.append(("loop", n))
        if n == 3:
            raise RuntimeError("odd three")

    def handle(m: lanes.Message) -> Awaitable[None] | None:
        assert threading.get_ident() != client_thread
        calls.append(("thread", m.data))
        return on_the_loop(m.data) if m.data % 2 else None

    q = client.queue(qname).autopilot(False).batch(6).wait(False).limit(4)
    await asyncio.wait_for(q.run(handle), 20)
    # 3's awaitable failed: it is nacked and the rest of its partition redelivers.
    assert calls == [
        ("thread", 0),
        ("thread", 1),
        ("loop", 1),
        ("thread", 2),
        ("thread", 3),
        ("loop", 3),
    ]
    assert [m.data for m in await drain(client.queue(qname))] == [3, 4, 5]


async def test_a_hard_stop_cancels_the_awaitable_a_plain_handler_returned_and_releases_it(
    client: lanes.AsyncLanes, qname: str
) -> None:
    await client.queue(qname).push(["a", "b"])
    started = asyncio.Event()

    async def forever() -> None:
        started.set()
        await asyncio.sleep(30)

    c = client.queue(qname).batch(2).consume(lambda m: forever())
    await asyncio.wait_for(started.wait(), 10)
    await c.stop_and_cancel(timeout=10)
    assert [m.data for m in await drain(client.queue(qname))] == ["a", "b"]  # both released


def test_plain_handlers_stop_being_called_when_asyncio_run_ends(
    broker_url: str, qname: str
) -> None:
    # asyncio.run cancels every task when its main returns: the handler in hand, which a thread
    # cannot interrupt, returns, and no other message of its pop is handed over.
    script = f"""
        import asyncio
        import time
        import lanes
        calls = []
        async def main():
            client = lanes.AsyncLanes({broker_url!r})
            for p in "abc":
                await client.queue({qname!r}).partition(p).push([p + "1", p + "2"])
            started = asyncio.Event()
            loop = asyncio.get_running_loop()
            def handler(m):
                calls.append(m.data)
                loop.call_soon_threadsafe(started.set)
                time.sleep(0.5)
            client.queue({qname!r}).batch(10).partitions(3).consume(handler)
            await started.wait()
        asyncio.run(main())
        print(len(calls))
        """
    ran = run_script(script)
    assert ran.stdout.split() == ["1"] and ran.stderr == "", ran.stderr


async def test_a_call_in_flight_when_the_client_closes_raises_client_closed(
    broker_url: str, qname: str
) -> None:
    # aclose() closes the HTTP pool under a call another task has in flight: its retry used to
    # raise httpx's bare RuntimeError, which no `except lanes.LanesError` catches.
    c = lanes.AsyncLanes(broker_url)
    pop = asyncio.ensure_future(c.queue(qname).timeout_millis(2000).pop())
    await asyncio.sleep(0.3)
    await c.aclose()
    with pytest.raises(lanes.ClientClosedError):
        await asyncio.wait_for(pop, 10)


async def test_aclose_names_what_a_consumer_outliving_its_timeout_leaves_unsent(
    broker_url: str, qname: str
) -> None:
    # A handler slower than aclose()'s timeout used to end aclose() before the flush: what was
    # buffered was lost without an UnsentError; and the pool closed under the handler, whose ack
    # failed (its message redelivered). The handler uses up aclose()'s one deadline, so the
    # flush has no time left: it names the item.
    c = lanes.AsyncLanes(broker_url)
    consumer = await consume_one_slowly(c, qname, 1.5, lease_seconds=2)
    await c.queue(qname + "-buffered").buffer().push(["buffered"])
    with pytest.raises(lanes.UnsentError) as unsent:
        await c.aclose(timeout=0.3)
    assert unsent.value.unsent == 1
    await asyncio.wait_for(consumer.closed(), 10)
    async with lanes.AsyncLanes(broker_url) as c2:
        assert await c2.queue(qname + "-buffered").wait(False).pop() == []
        await asyncio.sleep(2.5)  # past the lease: an unacked "work" would be redelivered
        assert await c2.queue(qname).wait(False).pop() == [], "the handler's ack was lost"


async def test_aclose_holds_one_deadline_for_a_held_handler_and_an_unsendable_buffer(
    broker_url: str, qname: str
) -> None:
    # The consumers' stop had `timeout`, then the flush its own: a handler held past it and a
    # buffer the broker keeps refusing held aclose(2) about 4 s, past the grace period a caller
    # sized it for (a Kubernetes terminationGracePeriodSeconds).
    # The first push (the handler's message) goes through; every later one is refused.
    responses: list[dict[str, Any]] = [{"pass": True}, {"status": 503, "times": 1000}]
    async with scripted_pushes(broker_url, responses) as run:
        c = lanes.AsyncLanes(broker_url, headers={"X-Lanes-Test-Run": run})
        consumer = await consume_one_slowly(c, qname + "-work", 4)
        await c.queue(qname).buffer(time_millis=60_000).push(["unsent"])
        began = time.monotonic()
        with pytest.raises(lanes.UnsentError) as unsent:
            await c.aclose(timeout=2)
        took = time.monotonic() - began
    assert took < 2 + 1, f"aclose(timeout=2) took {took:.2f} s"
    assert unsent.value.unsent == 1
    assert not consumer.done  # left stopping at the deadline
    await asyncio.wait_for(consumer.closed(), 10)


@contextlib.asynccontextmanager
async def scripted_pushes(broker_url: str, responses: list[dict[str, Any]]) -> AsyncIterator[str]:
    """Scripts the test broker's answers to the pushes of one run; yields the run's name."""
    run = f"py-{uuid.uuid4().hex[:12]}"
    faults = f"{broker_url}/__test/faults/{run}"
    rules = [{"method": "POST", "path": "/api/v1/push", "responses": responses}]
    async with httpx.AsyncClient() as script:
        assert (await script.put(faults, content=json.dumps({"rules": rules}))).status_code == 204
        try:
            yield run
        finally:
            await script.delete(faults)


async def wait_stored(broker_url: str, queue: str, n: int) -> None:
    async with lanes.AsyncLanes(broker_url) as watcher:
        for _ in range(250):
            if len((await watcher.admin.list_messages(queue=queue)).messages) >= n:
                return
            await asyncio.sleep(0.02)
    pytest.fail(f"{n} messages were not stored in {queue}")


async def consume_one_slowly(
    c: lanes.AsyncLanes,
    queue: str,
    seconds: float,
    *,
    lease_seconds: int | None = None,
    handled: list[Any] | None = None,
) -> lanes.AsyncConsumer:
    """Pushes one message to queue and starts a consumer whose handler spends `seconds` on it
    (then adds its data to `handled`); returns once the handler is running."""
    await c.queue(queue).push(["work"])
    handling = asyncio.Event()

    async def slow(m: lanes.Message) -> None:
        handling.set()
        await asyncio.sleep(seconds)
        if handled is not None:
            handled.append(m.data)

    q = c.queue(queue)
    consumer = (q.lease_seconds(lease_seconds) if lease_seconds else q).consume(slow)
    await asyncio.wait_for(handling.wait(), 10)
    return consumer


async def cancel_aclose(c: lanes.AsyncLanes, how: str) -> BaseException | None:
    """Cancels c.aclose() after 0.3 s, by wait_for or by cancelling its task; returns the
    CancelledError that came out of it."""
    if how == "wait_for":
        with pytest.raises(TimeoutError) as timed_out:
            await asyncio.wait_for(c.aclose(), 0.3)
        return timed_out.value.__cause__
    closing = asyncio.ensure_future(c.aclose())
    await asyncio.sleep(0.3)
    closing.cancel()
    with pytest.raises(asyncio.CancelledError) as cancelled:
        await closing
    return cancelled.value


def lanes_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == "lanes" and r.levelno >= logging.ERROR
    ]


async def no_task_left(within: float) -> list[asyncio.Task[Any]]:
    """The tasks other than this one still running after ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        if not left or time.monotonic() >= deadline:
            return left
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("how", ["task.cancel", "wait_for"])
async def test_a_cancelled_aclose_names_what_it_leaves_unsent(
    broker_url: str, qname: str, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    # A cancelled aclose() closed the pool all the same and lost what was buffered with no
    # UnsentError and no error log. The flusher's batch is in flight, its push stored but the
    # answer held: not known sent, so it counts as unsent with the two items behind it.
    async with scripted_pushes(broker_url, [{"pass": True, "holdAnswerMs": 3000}]) as run:
        c = lanes.AsyncLanes(broker_url, headers={"X-Lanes-Test-Run": run})
        buf = c.queue(qname).buffer(message_count=3, time_millis=60_000)
        await buf.push([{"transaction_id": f"held-{i}", "data": i} for i in range(3)])
        await wait_stored(broker_url, qname, 3)
        await buf.push([{"transaction_id": f"later-{i}", "data": i} for i in range(2)])
        with caplog.at_level(logging.ERROR, logger="lanes"):
            cancelled = await cancel_aclose(c, how)
    assert c.buffer_stats().total_buffered_messages == 5
    with pytest.raises(lanes.UnsentError) as unsent:
        await c.flush_all()
    assert unsent.value.unsent == 5
    errors = lanes_errors(caplog)
    assert len(errors) == 1, errors
    assert "5 buffered push item(s)" in errors[0]
    assert isinstance(cancelled, asyncio.CancelledError)
    assert isinstance(cancelled.__cause__, lanes.UnsentError)
    assert cancelled.__cause__.unsent == 5


async def test_a_cancelled_aclose_counts_only_the_unsettled_part_of_a_split_batch(
    broker_url: str, qname: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A NUL in a transaction id makes the broker refuse a batch with 400, so the buffer halves
    # it: [0..3] 400, [0, 1] 400, [0] 400 (dropped), [1] stored, then [2, 3] stored with its
    # answer held when aclose() is cancelled. Item 1 is known sent and item 0 dropped (and
    # reported as such); only items 2 and 3 are unsent. The whole batch used to stay counted,
    # and the drop went unreported.
    responses = [{"pass": True, "times": 4}, {"pass": True, "holdAnswerMs": 3000}]
    async with scripted_pushes(broker_url, responses) as run:
        c = lanes.AsyncLanes(broker_url, headers={"X-Lanes-Test-Run": run}, retry_attempts=0)
        buf = c.queue(qname).buffer(message_count=4, time_millis=60_000)
        ids = ["bad\x00id", "ok-1", "ok-2", "ok-3"]
        await buf.push([{"transaction_id": t, "data": i} for i, t in enumerate(ids)])
        await wait_stored(broker_url, qname, 3)
        with caplog.at_level(logging.ERROR, logger="lanes"):
            cancelled = await cancel_aclose(c, "task.cancel")
    assert c.buffer_stats().total_buffered_messages == 2
    errors = lanes_errors(caplog)
    assert len(errors) == 2, errors
    assert "dropped 1 item(s)" in errors[0]
    assert "2 buffered push item(s)" in errors[1]
    assert isinstance(cancelled, asyncio.CancelledError)
    assert isinstance(cancelled.__cause__, lanes.UnsentError)
    assert cancelled.__cause__.unsent == 2


async def test_an_aclose_cancelled_while_a_consumer_stops_still_ends_the_buffers(
    broker_url: str, qname: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Cancelled before the buffers' turn, aclose() used to leave their flusher tasks running
    # past the client's close, and said nothing of their items.
    c = lanes.AsyncLanes(broker_url)
    consumer = await consume_one_slowly(c, qname, 1.5)
    await c.queue(qname + "-buffered").buffer(time_millis=60_000).push([1, 2])
    with caplog.at_level(logging.ERROR, logger="lanes"):
        cancelled = await cancel_aclose(c, "wait_for")
    assert isinstance(cancelled, asyncio.CancelledError)
    assert isinstance(cancelled.__cause__, lanes.UnsentError)
    assert cancelled.__cause__.unsent == 2
    assert any("2 buffered push item(s)" in e for e in lanes_errors(caplog))
    await asyncio.wait_for(consumer.closed(), 10)
    # The pool closes just after the consumer's end (it stayed open for its ack).
    assert await no_task_left(2) == []


@pytest.mark.parametrize("how", ["task.cancel", "wait_for"])
async def test_an_aclose_cancelled_mid_handler_lets_the_handlers_ack_go_out(
    broker_url: str, qname: str, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    # A cancelled aclose() closed the pool under a handler still running: its ack failed
    # ("client is closed") and its message came back after the lease, a needless duplicate.
    c = lanes.AsyncLanes(broker_url)
    handled: list[Any] = []
    consumer = await consume_one_slowly(c, qname, 1.0, lease_seconds=2, handled=handled)
    with caplog.at_level(logging.WARNING, logger="lanes"):
        began = time.monotonic()
        cancelled = await cancel_aclose(c, how)
        took = time.monotonic() - began
        await asyncio.wait_for(consumer.closed(), 10)
    assert isinstance(cancelled, asyncio.CancelledError)
    assert took < 0.3 + 0.2, f"the cancellation waited {took:.2f} s for the handler"
    assert handled == ["work"]
    warnings = [r.getMessage() for r in caplog.records if r.name == "lanes"]
    assert warnings == [], warnings
    # The pool closes once the handler's consumer ended: nothing is left running.
    assert await no_task_left(2) == []
    async with lanes.AsyncLanes(broker_url) as c2:
        await asyncio.sleep(2.5)  # past the lease: an unacked "work" would be redelivered
        assert await c2.queue(qname).wait(False).pop() == [], "the handler's ack was lost"


async def test_an_aclose_cancelled_before_reaching_a_consumer_soft_stops_it(
    broker_url: str, qname: str
) -> None:
    # Cancelled during the first consumer's stop, aclose() never told the second to stop: the
    # closed pool failed its ack and then its pop, which ended it with ClientClosedError.
    c = lanes.AsyncLanes(broker_url)
    queues = [qname + "-first", qname + "-second"]
    release = asyncio.Event()
    consumers = await _hold_handlers(c, queues, release, lease_seconds=2)
    asyncio.get_running_loop().call_later(1.0, release.set)  # each handler takes about 1 s
    await cancel_aclose(c, "task.cancel")
    for consumer in consumers:
        await asyncio.wait_for(consumer.closed(), 10)  # no terminal error
        assert consumer.error is None
    assert await no_task_left(2) == []
    async with lanes.AsyncLanes(broker_url) as c2:
        await asyncio.sleep(2.5)  # past the lease: an unacked "work" would be redelivered
        assert [await c2.queue(q).wait(False).pop() for q in queues] == [[], []]


async def test_aclose_asks_every_consumer_to_stop_before_it_waits_for_one(
    broker_url: str, qname: str
) -> None:
    # aclose() stopped its consumers one after another: while it waited for the first one's
    # handler, the others kept popping and started handlers for messages pushed meanwhile,
    # work a shutdown then had to wait for (or release, to be redelivered).
    c = lanes.AsyncLanes(broker_url)
    held, others = qname + "-held", [qname + "-second", qname + "-third"]
    release, holding = asyncio.Event(), asyncio.Event()
    started_during_close: list[str] = []

    async def hold(_: lanes.Message) -> None:
        holding.set()
        await release.wait()

    async def record(m: lanes.Message) -> None:
        started_during_close.append(m.data)

    await c.queue(held).push(["work"])
    consumers = [c.queue(held).consume(hold)] + [c.queue(q).consume(record) for q in others]
    await asyncio.wait_for(holding.wait(), 10)
    await asyncio.sleep(0.3)  # the other two are parked in their long polls
    closing = asyncio.ensure_future(c.aclose(timeout=10))
    await asyncio.sleep(0.1)  # aclose() began and waits for the held handler
    async with lanes.AsyncLanes(broker_url) as c2:
        for q in others:
            await c2.queue(q).push([q])
        await asyncio.sleep(1.0)  # time enough for a consumer still running to start a handler
        assert started_during_close == [], "a consumer not yet asked to stop started a handler"
        assert not closing.done()
        release.set()
        await asyncio.wait_for(closing, 10)
        for consumer in consumers:
            assert consumer.done and consumer.error is None
        for q in others:  # left on their queues for the next consumer, not leased
            got = await c2.queue(q).wait(False).pop()
            assert [m.data for m in got] == [q]
            await c2.ack(got)


async def _hold_handlers(
    c: lanes.AsyncLanes, queues: list[str], release: asyncio.Event, lease_seconds: int = 5
) -> list[lanes.AsyncConsumer]:
    """One consumer per queue, each in a handler that waits for ``release``, once all run."""
    consumers, handling = [], []
    for q in queues:
        await c.queue(q).push(["work"])
        started = asyncio.Event()
        handling.append(started)

        async def held(_: lanes.Message, started: asyncio.Event = started) -> None:
            started.set()
            await release.wait()

        consumers.append(c.queue(q).lease_seconds(lease_seconds).consume(held))
    for started in handling:
        await asyncio.wait_for(started.wait(), 10)
    return consumers


async def test_aclose_refuses_consumers_and_iterators_started_while_it_waits(
    broker_url: str, qname: str
) -> None:
    # A consumer another task started while aclose() waited for a handler was never asked to
    # stop: it ran on after aclose() returned, its pops failing on the closed HTTP pool, and an
    # iterator made then went on leasing messages no call could ack any more.
    c = lanes.AsyncLanes(broker_url)
    release = asyncio.Event()
    held = await _hold_handlers(c, [qname + "-held"], release)
    closing = asyncio.ensure_future(c.aclose(timeout=10))
    await asyncio.sleep(0.2)  # aclose() asked the consumer to stop and waits for its handler
    late_consumers: list[lanes.AsyncConsumer] = []
    late_iterators: list[lanes.AsyncMessageIterator] = []

    async def nothing(_: lanes.Message) -> None:
        pass

    try:
        with pytest.raises(lanes.ClientClosedError, match="lanes: consume: client is closed"):
            late_consumers.append(c.queue(qname).consume(nothing))
        with pytest.raises(lanes.ClientClosedError, match="lanes: messages: client is closed"):
            late_iterators.append(c.queue(qname).messages())
    finally:
        release.set()
        await asyncio.wait_for(closing, 10)
        for consumer in late_consumers:
            await consumer.stop(10)
        for it in late_iterators:
            await it.aclose()
    assert held[0].done
    with pytest.raises(lanes.ClientClosedError, match="lanes: consume: client is closed"):
        c.queue(qname).consume(nothing)  # and after aclose() ended


async def test_aclose_timeout_bounds_the_wait_for_all_its_consumers_together(
    broker_url: str, qname: str
) -> None:
    # aclose(timeout) waited up to `timeout` for each consumer in turn: three handlers slower
    # than it held aclose() three times as long as it was told.
    c = lanes.AsyncLanes(broker_url)
    release = asyncio.Event()
    consumers = await _hold_handlers(c, [f"{qname}-{i}" for i in range(3)], release)
    began = time.monotonic()
    try:
        with pytest.raises(TimeoutError):
            await c.aclose(timeout=0.6)
        took = time.monotonic() - began
    finally:
        release.set()
    assert took < 0.6 + 0.4, f"aclose(timeout=0.6) took {took:.2f} s for three consumers"
    for consumer in consumers:
        await asyncio.wait_for(consumer.closed(), 10)  # each ended once its handler returned


@pytest.mark.parametrize("how", ["task.cancel", "wait_for"])
async def test_an_aclose_cancelled_while_it_waits_for_a_stopped_iterators_cut_pop(
    broker_url: str, qname: str, how: str
) -> None:
    # aclose() waits for a stopped iterator's cut pop, whose answer (held 1 s by the proxy) the
    # broker already wrote. Cancelled there, it closed the pool under that pop: the message it
    # carried stayed leased for the whole 60 s lease instead of being released.
    proxy = SlowAnswerProxy(broker_url, 1.0)
    try:
        c = lanes.AsyncLanes(proxy.url)
        iterating = await stop_an_async_iterator_with_an_answer_on_its_way(c, broker_url, qname)
        began = time.monotonic()
        cancelled = await cancel_aclose(c, how)
        took = time.monotonic() - began
        assert isinstance(cancelled, asyncio.CancelledError)
        assert took < 0.3 + 0.2, f"the cancellation waited {took:.2f} s for the iterator"
        assert await asyncio.wait_for(iterating, 5) == []
        # The pool closes once the iterator's release went out: nothing is left running.
        assert await no_task_left(2) == []
    finally:
        proxy.close()
    async with lanes.AsyncLanes(broker_url) as c2:
        got = await c2.queue(qname).autopilot(False).timeout_millis(3000).pop()
        assert [m.data for m in got] == ["late"], "left leased by the stopped iterator's cut pop"
        await c2.ack(got)


async def test_the_consume_loop_starts_two_tasks_per_pop(
    client: lanes.AsyncLanes, qname: str
) -> None:
    # The pop's request and the pop's handlers run in a task each (the stop cancels them);
    # a stop watcher beside the pop and the lease renewal started two more per pop.
    await client.queue(qname).push(list(range(300)))
    started = 0

    def count(frame: FrameType, event: str, arg: Any) -> None:
        nonlocal started
        if event == "call" and frame.f_code.co_name == "create_task":
            started += 1

    async def handle(m: lanes.Message) -> None:
        pass

    q = client.queue(qname).autopilot(False).batch(10).wait(False).limit(300)
    sys.setprofile(count)
    try:
        await q.run(handle)
    finally:
        sys.setprofile(None)
    pops = 30  # and asyncio's own two; a few to spare for a lease renewal on a slow machine
    assert started <= 2 * pops + 6, started


async def test_renew_takes_the_default_at_0_or_below(client: lanes.AsyncLanes, qname: str) -> None:
    await client.queue(qname).push(["r"])
    msgs = await client.queue(qname).lease_seconds(5).wait(False).pop()
    before = datetime.datetime.now(datetime.timezone.utc)
    [res] = await client.renew(msgs, seconds=-1)  # was a 1 s lease, leaving the 5 s one as it was
    assert res.new_expires_at is not None
    assert (res.new_expires_at - before).total_seconds() > 50
    await client.ack(msgs)
