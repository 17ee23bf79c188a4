"""The blocking client against a real broker and PostgreSQL (LANES_TEST_URL)."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import datetime
import functools
import json
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Annotated, Any
from urllib.parse import quote

import httpx
import pydantic
import pytest

import lanes

from .proxying import SlowAnswerProxy
from .scripts import run_script


@pytest.fixture
def client(broker_url: str) -> Iterator[lanes.Lanes]:
    c = lanes.Lanes(broker_url, retry_attempts=1, timeout=10)
    yield c
    c.close()


def drain(q: lanes.Queue) -> list[lanes.Message]:
    return q.wait(False).autopilot(False).batch(1000).partitions(100).pop()


def test_health(client: lanes.Lanes) -> None:
    assert client.health().status == "healthy"


def test_push_dedup_pop_ack(client: lanes.Lanes, qname: str) -> None:
    q = client.queue(qname).partition("customer-42")
    res = q.push([{"transaction_id": "order-1", "data": {"n": 1}}, {"data": {"n": 2}}, 3])
    assert [r.status for r in res] == ["queued"] * 3
    dup = q.push([{"transaction_id": "order-1", "data": {"n": 1}}])
    assert dup[0].status == "duplicate" and dup[0].message_id == res[0].message_id
    msgs = client.queue(qname).wait(False).pop()
    assert [m.data for m in msgs] == [{"n": 1}, {"n": 2}, 3]
    assert msgs[0].partition == "customer-42" and msgs[0].queue == qname
    acks = client.ack(msgs)
    assert all(a.success for a in acks)
    assert client.queue(qname).wait(False).pop() == []


def test_autopilot_off_restores_batch_one(client: lanes.Lanes, qname: str) -> None:
    client.queue(qname).push([1, 2, 3])
    one = client.queue(qname).wait(False).autopilot(False).pop()
    assert len(one) == 1
    client.ack(one)


def test_batch_and_partitions(client: lanes.Lanes, qname: str) -> None:
    for p in ("a", "b", "c"):
        client.queue(qname).partition(p).push([p + "1", p + "2"])
    res = client.queue(qname).batch(10).partitions(3).wait(False).pop_result()
    assert res.partitions_claimed == 3 and len(res.messages) == 6
    client.ack(res.messages)
    # the partition route only reads its own lane
    client.queue(qname).partition("b").push(["b3"])
    got = client.queue(qname).partition("b").wait(False).pop()
    assert [m.data for m in got] == ["b3"]
    client.ack(got)


def test_long_poll_woken_by_push(client: lanes.Lanes, qname: str) -> None:
    threading.Timer(0.3, lambda: client.queue(qname).push(["late"])).start()
    t0 = time.monotonic()
    got = client.queue(qname).timeout_millis(5000).pop()
    assert [m.data for m in got] == ["late"] and time.monotonic() - t0 < 4
    client.ack(got)


def test_consume_order_per_partition_with_concurrency(client: lanes.Lanes, qname: str) -> None:
    parts = [f"p{i}" for i in range(4)]
    for p in parts:
        client.queue(qname).partition(p).push([{"p": p, "i": i} for i in range(10)])
    seen: dict[str, list[int]] = {p: [] for p in parts}
    lock = threading.Lock()

    def handler(m: lanes.Message) -> None:
        time.sleep(0.002)
        with lock:
            seen[m.data["p"]].append(m.data["i"])

    cons = client.queue(qname).group("g").subscription_mode("all").concurrency(4).limit(40)
    cons.consume(handler).closed(timeout=30)
    assert all(v == list(range(10)) for v in seen.values()), seen
    assert drain(client.queue(qname).group("g")) == []


def test_nack_on_error_redelivers(client: lanes.Lanes, qname: str) -> None:
    client.queue(qname).push(["boom", "ok"])
    calls: list[Any] = []

    def handler(m: lanes.Message) -> None:
        calls.append(m.data)
        if m.data == "boom" and calls.count("boom") == 1:
            raise RuntimeError("first time fails")

    with client.queue(qname).idle_millis(1500).timeout_millis(500).consume(handler) as c:
        c.closed(timeout=20)
    assert calls[:1] == ["boom"] and calls.count("boom") == 2 and "ok" in calls
    assert drain(client.queue(qname)) == []


def test_failure_reported_before_next_handler_and_rest_of_partition_abandoned(
    client: lanes.Lanes, qname: str
) -> None:
    client.queue(qname).partition("a").push(["boom", "a2"])
    client.queue(qname).partition("b").push(["b1", "b2"])
    events: list[Any] = []

    def handler(m: lanes.Message) -> None:
        events.append(m.data)
        if m.data == "boom" and events.count("boom") == 1:
            raise RuntimeError("first time fails")

    def on_error(e: BaseException) -> None:
        assert isinstance(e, lanes.HandlerError)
        events.append(f"error: {e.__cause__}")

    q = client.queue(qname).batch(10).partitions(2).report_handler_errors(True).on_error(on_error)
    q.idle_millis(1500).timeout_millis(500).consume(handler).closed(timeout=20)
    i = events.index("boom")
    # on_error hears of it before the handler sees another message; "a2" was not handed over
    # after the failure, it comes back behind the redelivered "boom"
    assert events[i + 1] == "error: first time fails", events
    assert events.index("a2") > events.index("boom", i + 1), events
    handled = sorted(e for e in events if not e.startswith("error"))
    assert handled == ["a2", "b1", "b2", "boom", "boom"], events
    assert drain(client.queue(qname)) == []


def test_limit_is_exact_with_concurrency(client: lanes.Lanes, qname: str) -> None:
    for p in range(8):
        client.queue(qname).partition(f"p{p}").push([f"p{p}-{i}" for i in range(10)])
    handled: list[str] = []
    lock = threading.Lock()

    def handler(m: lanes.Message) -> None:
        with lock:
            handled.append(m.data)

    q = client.queue(qname).batch(20).partitions(2).concurrency(4).limit(25).lease_seconds(1)
    q.consume(handler).closed(timeout=20)
    assert len(handled) == 25 and len(set(handled)) == 25
    # The rest comes back: released with retry, or (a pop still in flight when the limit stopped
    # the loop is abandoned, docs/consuming.md §5) after its 1 s lease.
    rest: list[lanes.Message] = []
    deadline = time.monotonic() + 10
    while len(rest) < 55 and time.monotonic() < deadline:
        got = drain(client.queue(qname))
        client.ack(got)
        rest.extend(got)
        time.sleep(0.2)
    assert sorted(m.data for m in rest) == sorted(
        f"p{p}-{i}" for p in range(8) for i in range(10) if f"p{p}-{i}" not in handled
    )


def test_lease_renewal_keeps_slow_handler_lease(client: lanes.Lanes, qname: str) -> None:
    client.queue(qname).push(["slow"])
    errors: list[BaseException] = []
    q = client.queue(qname).lease_seconds(1).renew_lease(True, 300).on_error(errors.append)
    q.limit(1).consume(lambda m: time.sleep(2.5)).closed(timeout=20)
    assert errors == []  # the final ack found a live lease
    assert drain(client.queue(qname)) == []


def _run_slow_handler(
    client: lanes.Lanes, qname: str, renew: Callable[[lanes.Queue], lanes.Queue]
) -> tuple[int, list[BaseException]]:
    """Consume one message with a handler that outlives its 1 s lease while a second consumer
    pops; return how many messages that consumer got and the loop's errors."""
    stolen: list[int] = []
    errors: list[BaseException] = []

    def handler(m: lanes.Message) -> None:
        time.sleep(1.5)
        stolen.append(len(client.queue(qname).wait(False).pop()))
        time.sleep(1.0)

    q = renew(client.queue(qname).wait(False).lease_seconds(1).limit(1)).on_error(errors.append)
    q.consume(handler).closed(timeout=20)
    return stolen[0], errors


def test_lease_renewed_by_default_and_renew_lease_false_turns_it_off(
    client: lanes.Lanes, qname: str
) -> None:
    client.queue(qname).push(["slow"])
    assert _run_slow_handler(client, qname, lambda q: q) == (0, [])
    assert drain(client.queue(qname)) == []  # acked under the renewed lease
    q2 = qname + "-off"
    client.queue(q2).push(["slow"])
    stolen, errors = _run_slow_handler(client, q2, lambda q: q.renew_lease(False))
    assert stolen == 1  # without renewal the lease expired under the handler
    assert isinstance(errors[0], lanes.AckError)


def test_default_renewal_keeps_a_3_s_lease_under_a_7_s_handler(
    client: lanes.Lanes, qname: str
) -> None:
    """No renewal options: the loop renews every third of the 3 s lease the pop's answer names,
    so the message is handled once, acked, and never redelivered to a second consumer."""
    assert client.queue(qname).configure({"leaseTime": 3}).configured
    client.queue(qname).push(["slow"])
    handled: list[str] = []
    errors: list[BaseException] = []
    slow = client.queue(qname).limit(1).on_error(errors.append)

    def handle_slowly(m: lanes.Message) -> None:
        handled.append("slow")
        time.sleep(7)

    running = slow.consume(handle_slowly)
    time.sleep(0.5)
    other = client.queue(qname).consume(lambda m: handled.append("other"))
    running.closed(timeout=20)
    time.sleep(1)  # time for a redelivery, were the message released
    other.stop(timeout=10)
    assert (handled, errors) == (["slow"], [])
    assert drain(client.queue(qname)) == []


def test_soft_stop_finishes_current_and_releases_rest(client: lanes.Lanes, qname: str) -> None:
    client.queue(qname).push(list(range(5)))
    started = threading.Event()
    handled: list[int] = []

    def handler(m: lanes.Message) -> None:
        started.set()
        time.sleep(0.5)
        handled.append(m.data)

    c = client.queue(qname).batch(5).consume(handler)
    assert started.wait(10)
    c.stop(timeout=10)
    assert handled == [0]
    rest = drain(client.queue(qname))  # released with retry: available at once
    assert [m.data for m in rest] == [1, 2, 3, 4]
    client.ack(rest)


def test_stop_with_a_pop_in_flight_leaves_nothing_leased(client: lanes.Lanes, qname: str) -> None:
    # The stopped consumer's long-poll pop (parked on the broker in its helper thread) still gets
    # a message pushed after the stop; it must release it at once, not hold it for the 60 s
    # lease with nobody to handle it.
    q = client.queue(qname).lease_seconds(60)
    handled: list[Any] = []
    c = q.timeout_millis(3000).consume(lambda m: handled.append(m.data))
    time.sleep(0.3)  # the pop is parked on the broker
    c.stop(timeout=10)
    client.queue(qname).push(["late"])
    t0 = time.monotonic()
    got: list[Any] = []
    while not got and time.monotonic() - t0 < 10:
        got = q.wait(False).pop()
        time.sleep(0.05)
    assert [m.data for m in got] == ["late"]
    assert time.monotonic() - t0 < 5  # the abandoned pop's answer came at most 3 s after the stop
    assert handled == []


class _LoopLingeringAtItsEnd(asyncio.DefaultEventLoopPolicy):
    """Makes the consumer thread's event loop wait in ``close()``, stopped but not yet closed,
    until ``go_on`` is set: as that thread does when a busy machine preempts it there."""

    def __init__(self) -> None:
        super().__init__()
        self.closing = threading.Event()
        self.go_on = threading.Event()

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        loop = super().new_event_loop()
        if threading.current_thread().name == "lanes-consumer":
            close = loop.close

            def lingering_close() -> None:
                self.closing.set()
                self.go_on.wait(10)
                close()

            loop.close = lingering_close  # type: ignore[method-assign]
        return loop


def test_an_answer_arriving_as_the_stopped_consumers_loop_shuts_down_is_released(
    client: lanes.Lanes, qname: str
) -> None:
    # After a stop the consumer's thread ends with asyncio.run shutting its loop down. A
    # message reaching an abandoned long poll just then was handed to the stopped loop, whose
    # close() dropped it: neither handled nor released, it stayed leased for the whole lease.
    policy = _LoopLingeringAtItsEnd()
    before = asyncio.get_event_loop_policy()
    asyncio.set_event_loop_policy(policy)
    try:
        q = client.queue(qname).lease_seconds(60)
        handled: list[Any] = []
        c = q.concurrency(3).timeout_millis(5000).consume(lambda m: handled.append(m.data))
        time.sleep(0.3)  # the three pops are parked on the broker
        stopping = threading.Thread(target=c.stop, args=(10,))
        stopping.start()
        assert policy.closing.wait(10)
        client.queue(qname).push(["late"])
        time.sleep(1)  # one of the abandoned pops gets it
        policy.go_on.set()
        stopping.join()
    finally:
        policy.go_on.set()
        asyncio.set_event_loop_policy(before)
    got = q.autopilot(False).timeout_millis(3000).pop()
    assert [m.data for m in got] == ["late"], "held by the stopped consumer's pop"
    assert handled == []


def test_hard_stop_sets_cancel_event(client: lanes.Lanes, qname: str) -> None:
    client.queue(qname).push(["x"])
    started = threading.Event()
    box: list[lanes.Consumer] = []

    def handler(m: lanes.Message) -> None:
        started.set()
        while not box or not box[0].cancel_event.wait(0.05):
            pass
        raise lanes.ConsumerStoppedError("cancelled")

    c = client.queue(qname).consume(handler)
    box.append(c)
    assert started.wait(10)
    c.stop_and_cancel(timeout=10)
    assert [m.data for m in drain(client.queue(qname))] == ["x"]  # released, not failed


def test_messages_iterator(client: lanes.Lanes, qname: str) -> None:
    client.queue(qname).push(list(range(5)))
    with client.queue(qname).timeout_millis(300).messages(idle_timeout=0.5) as it:
        got = [m.data for m in it]
    assert got == [0, 1, 2, 3, 4]
    assert drain(client.queue(qname)) == []
    client.queue(qname).push(["a", "b"])
    for m in client.queue(qname).wait(False).messages():
        assert m.data == "a"
        break  # leaves early: "a" and "b" are released
    assert [m.data for m in drain(client.queue(qname))] == ["a", "b"]


def _take(it: lanes.MessageIterator, deadline: float = 5.0) -> list[Any]:
    """The iterator's messages; fails if the iteration has not ended after ``deadline`` s (one
    that ignored its limit or idle setting would run forever)."""
    got: list[Any] = []

    def run() -> None:
        with it:
            got.extend(m.data for m in it)

    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(deadline)
    assert not th.is_alive(), f"the iteration has not ended (got {got})"
    return got


def test_messages_iterator_takes_auto_ack_limit_and_idle_from_the_builder(
    client: lanes.Lanes, qname: str
) -> None:
    # auto_ack(False): nothing is acked, so the messages come back once their 1 s lease ends
    # (with the builder's value dropped they were acked `completed`: lost to a caller who acks
    # in a transaction); idle_millis(500) ends the iteration.
    client.queue(qname).push([0, 1, 2])
    q = client.queue(qname).auto_ack(False).lease_seconds(1).timeout_millis(300).idle_millis(500)
    t0 = time.monotonic()
    assert _take(q.messages()) == [0, 1, 2]
    assert time.monotonic() - t0 < 4
    time.sleep(1.5)
    assert [m.data for m in drain(client.queue(qname))] == [0, 1, 2]
    # limit(2): two messages, acked; the rest released at once
    q2 = qname + "-limit"
    client.queue(q2).push([3, 4, 5])
    assert _take(client.queue(q2).limit(2).timeout_millis(300).messages()) == [3, 4]
    assert [m.data for m in drain(client.queue(q2))] == [5]
    # a keyword given to messages() overrides the builder
    q3 = qname + "-kw"
    client.queue(q3).push([6, 7])
    q = client.queue(q3).auto_ack(False).limit(1).timeout_millis(300).idle_millis(60_000)
    assert _take(q.messages(auto_ack=True, limit=0, idle_timeout=0.5)) == [6, 7]
    assert drain(client.queue(q3)) == []


def test_messages_iterator_reports_a_failed_ack_to_on_error_and_goes_on(
    client: lanes.Lanes, qname: str
) -> None:
    # The message in hand outlives its 1 s lease and another consumer takes it: the iterator's
    # ack is refused (AckError), which goes to on_error (the keyword here; the builder's
    # .on_error() otherwise) instead of ending the iteration, as in Go and TypeScript.
    client.queue(qname).push(["a"])
    errors: list[BaseException] = []
    got: list[Any] = []
    q = client.queue(qname).lease_seconds(1).renew_lease(False).timeout_millis(300)
    with q.messages(idle_timeout=0.5, on_error=errors.append) as it:
        for m in it:
            got.append(m.data)
            time.sleep(1.5)
            taken = client.queue(qname).wait(False).pop()
            assert [t.data for t in taken] == ["a"]
    assert got == ["a"]
    assert len(errors) == 1 and isinstance(errors[0], lanes.AckError)


def test_renew_and_configure(client: lanes.Lanes, qname: str) -> None:
    cfg = client.queue(qname).configure({"leaseTime": 120, "retryLimit": 5})
    assert cfg.configured
    detail = client.admin.get_queue(qname)
    assert detail.name == qname
    client.queue(qname).push(["r"])
    msgs = client.queue(qname).wait(False).pop()
    r = client.renew(msgs, seconds=30)
    assert r[0].success and r[0].renewed == 1
    client.ack(msgs)


def test_buffer_flushed_on_close(broker_url: str, qname: str) -> None:
    c = lanes.Lanes(broker_url)
    buf = c.queue(qname).buffer(message_count=1000, time_millis=60_000)
    buf.push([{"n": i} for i in range(25)])
    c.close()
    c2 = lanes.Lanes(broker_url)
    assert len(drain(c2.queue(qname))) == 25
    c2.close()


def test_transaction_pipeline(client: lanes.Lanes, qname: str) -> None:
    client.queue(qname).push([{"orderId": 9}])
    msg = client.queue(qname).group("invoicing").subscription_mode("all").wait(False).pop()[0]
    res = (
        client.transaction()
        .queue(qname + "-out")
        .push([{"data": {"orderId": 9, "invoiced": True}}])
        .ack(msg, "completed")
        .commit()
    )
    assert res.success
    out = drain(client.queue(qname + "-out"))
    assert out[0].data == {"orderId": 9, "invoiced": True}
    assert drain(client.queue(qname).group("invoicing")) == []
    with pytest.raises(lanes.TransactionError) as ei:
        client.transaction().queue(qname + "-out").push(
            [{"transaction_id": out[0].transaction_id, "data": 1}]
        ).commit()
    assert ei.value.reason == "duplicate"


def test_a_transaction_put_if_absent_on_a_present_key_commits_unless_required(
    client: lanes.Lanes, qname: str
) -> None:
    client.kv(qname).put("order-7", "first")
    res = (
        client.transaction()
        .queue(qname)
        .push([{"n": 1}])
        .kv_put_if_absent(qname, "order-7", "second")
        .commit()
    )
    assert res.success, "the wire default: the put is not applied, the bundle commits"
    assert client.kv(qname).get("order-7").value == "first"
    assert [m.data for m in drain(client.queue(qname))] == [{"n": 1}]
    with pytest.raises(lanes.TransactionError) as ei:
        client.transaction().queue(qname).push([{"n": 2}]).kv_put_if_absent(
            qname, "order-7", "third", required=True
        ).commit()
    assert ei.value.reason == "kv_precondition"
    assert drain(client.queue(qname)) == []


def test_timers_batch_sends_several_ops_in_one_call(client: lanes.Lanes, qname: str) -> None:
    """``timers(q).batch`` with ``lanes.timer_op``, as Go's ``Timers.Batch`` and TS's
    ``timers(q).batch``: any queue, one result per op in order."""
    other = qname + "-other"
    res = client.timers(qname).batch(
        [
            lanes.timer_op("schedule", qname, "a", delay_millis=3_600_000, payload={"n": 1}),
            lanes.timer_op("schedule", other, "b", delay_millis=3_600_000, transaction_id="b-1"),
            lanes.timer_op("cancel", qname, "never-scheduled"),
        ]
    )
    assert [(r.queue, r.timer_key) for r in res] == [
        (qname, "a"),
        (other, "b"),
        (qname, "never-scheduled"),
    ]
    assert res[0].ok and res[1].ok and res[1].txn == "b-1"
    assert client.timers(other).get("b").found


def test_a_transaction_reads_a_key_after_its_own_write(client: lanes.Lanes, qname: str) -> None:
    res = client.transaction().kv_put(qname, "k", {"v": 1}).kv_get(qname, "k").commit()
    got = res.kv[1] if res.kv else None
    assert got is not None and (got.op, got.found, got.value) == ("get", True, {"v": 1})


def test_a_required_incr_past_its_bound_rolls_the_transaction_back(
    client: lanes.Lanes, qname: str
) -> None:
    with pytest.raises(lanes.TransactionError) as ei:
        client.transaction().queue(qname).push([{"n": 1}]).kv_incr(
            qname, "hits", 5, max=4, required=True
        ).commit()
    assert (ei.value.reason, ei.value.kv_reason) == ("kv_precondition", "limit")
    assert drain(client.queue(qname)) == []
    assert not client.kv(qname).get("hits").found
    res = client.transaction().kv_incr(qname, "hits", -1, min=0).commit()
    assert res.success, "without required a crossed bound leaves the key and commits"
    assert not client.kv(qname).get("hits").found


def test_a_required_delete_at_a_stale_version_rolls_the_transaction_back(
    client: lanes.Lanes, qname: str
) -> None:
    version = client.kv(qname).put("lock", "me").version
    assert version is not None
    with pytest.raises(lanes.TransactionError) as ei:
        client.transaction().queue(qname).push([{"n": 1}]).kv_delete(
            qname, "lock", expect=version + 1, required=True
        ).commit()
    assert ei.value.reason == "kv_precondition"
    assert drain(client.queue(qname)) == []
    assert client.kv(qname).get("lock").found
    client.transaction().kv_delete(qname, "lock", expect=version, required=True).commit()
    assert not client.kv(qname).get("lock").found


def test_admin_groups_seek_dlq_messages(client: lanes.Lanes, qname: str) -> None:
    client.queue(qname).push(["a", "b"])
    msgs = client.queue(qname).group("audit").subscription_mode("all").wait(False).pop()
    client.ack(msgs)
    groups = client.admin.list_consumer_groups()
    assert any(g.name == "audit" for g in groups)
    client.admin.seek_consumer_group("audit", qname, timestamp="2000-01-01T00:00:00Z")
    again = client.queue(qname).group("audit").wait(False).pop()
    assert [m.data for m in again] == ["a", "b"]
    client.ack(again, "dlq", error="poison")
    dlq = client.admin.list_dlq(queue=qname, consumer_group="audit")
    assert dlq.messages
    lst = client.admin.list_messages(queue=qname)
    assert lst.messages is not None
    assert client.admin.list_queues().queues is not None
    client.admin.delete_consumer_group("audit")


def test_a_groups_cursors_are_a_plain_dict_keyed_by_queue(client: lanes.Lanes, qname: str) -> None:
    """``get_consumer_group`` returns the cursors keyed by queue as a dict, as Go's map and TS's
    Record do and as the other listings return plain lists: ``detail[queue]``, not ``.root``."""
    client.queue(qname).partition("p").push(["a"])
    client.ack(client.queue(qname).group("cursors").subscription_mode("all").wait(False).pop())
    detail = client.admin.get_consumer_group("cursors")
    assert isinstance(detail, dict)
    assert [(c.partition, c.total_consumed) for c in detail[qname].partitions] == [("p", 1)]
    client.admin.delete_consumer_group("cursors")


def test_a_time_window_in_any_zone_is_sent_as_its_utc_instant(client: lanes.Lanes) -> None:
    start = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
    end = start + datetime.timedelta(hours=1)
    for zone in (
        datetime.timezone(datetime.timedelta(hours=5)),
        datetime.timezone(datetime.timedelta(hours=-5)),
        datetime.timezone(
            datetime.timedelta(seconds=45)
        ),  # like the local mean times of old tz rules
    ):
        status = client.admin.get_status(from_=start.astimezone(zone), to=end.astimezone(zone))
        assert (status.time_range.from_, status.time_range.to) == (start, end)


def test_dead_letters_and_messages_are_listed_within_a_from_to_window(
    client: lanes.Lanes, qname: str
) -> None:
    """``list_dlq`` and ``list_messages`` take ``from_``/``to`` as Go's DLQQuery and TS's listDlq
    and listMessages do; without ``from_`` a message older than the broker's default hour could
    not be listed."""
    client.queue(qname).push(["poison"])
    client.ack(client.queue(qname).wait(False).pop(), "dlq", error="poison")
    failed_at = client.admin.list_dlq(queue=qname).messages[0].failed_at
    created_at = client.admin.list_messages(queue=qname).messages[0].created_at
    second, hours = datetime.timedelta(seconds=1), datetime.timedelta(hours=2)

    def dead(from_: datetime.datetime | None = None, to: datetime.datetime | None = None) -> int:
        return len(client.admin.list_dlq(queue=qname, from_=from_, to=to).messages)

    def listed(from_: datetime.datetime | None = None, to: datetime.datetime | None = None) -> int:
        return len(client.admin.list_messages(queue=qname, from_=from_, to=to).messages)

    assert dead(from_=failed_at - second, to=failed_at + second) == 1
    assert dead(from_=failed_at + second) == 0
    assert dead(to=failed_at - second) == 0
    assert listed(from_=created_at - hours) == 1
    assert listed(from_=created_at + second) == 0
    # The broker extends ``to`` to the end of its minute.
    assert listed(from_=created_at - hours, to=created_at - 2 * datetime.timedelta(minutes=1)) == 0


def test_kv(client: lanes.Lanes, qname: str) -> None:
    kv = client.kv(qname)
    kv.put("k", {"v": 1})
    got = kv.get("k")
    assert got.found and got.value == {"v": 1}
    kv.delete("k")
    assert not kv.get("k").found


def test_kv_put_answers_the_value_as_a_get_reads_it(client: lanes.Lanes, qname: str) -> None:
    # The broker stores values as jsonb: a put's answer shows jsonb's form (keys in jsonb's
    # order), as every later get does, so both iterate the same; integers stay exact.
    kv = client.kv(qname)
    value = {"zzz": 1, "a": 123456789012345678901234567890, "mm": [1.5, None]}
    put = kv.put("k", value)
    got = kv.get("k")
    assert put.value == got.value == value
    assert list(put.value) == list(got.value) == ["a", "mm", "zzz"]


def test_kv_ttl_zero_is_refused_and_a_sub_second_ttl_is_one_second(
    client: lanes.Lanes, qname: str
) -> None:
    """The KV ttl rule of all three SDKs: only None means no expiry; ttl_seconds=0 is refused
    (400, nothing written) like a negative one, never kept forever; a sub-second ttl is 1 s."""
    kv = client.kv(qname)
    refused: list[Callable[[], object]] = [
        lambda: kv.put("k", 1, ttl_seconds=0),
        lambda: kv.put("k", 1, ttl_seconds=0, expect=0),
        lambda: kv.put_if_absent("k", 1, ttl_seconds=0),
        lambda: kv.incr("n", 1, ttl_seconds=0),
        lambda: kv.batch([lanes.kv_op("put", qname, "k", value=1, ttl_seconds=0)]),
    ]
    for call in refused:
        with pytest.raises(lanes.BadRequestError):
            call()
    assert not kv.get("k").found and not kv.get("n").found
    before = datetime.datetime.now(datetime.timezone.utc)
    put = kv.put("short", 1, ttl_seconds=0.3)
    assert put.applied and put.expires_at is not None
    assert abs((put.expires_at - before).total_seconds() - 1) < 1.5


def test_kv_helpers(client: lanes.Lanes, qname: str) -> None:
    kv = client.kv(qname)
    first = kv.put_if_absent("once", "a")
    assert first.applied
    again = kv.put_if_absent("once", "b", ttl_seconds=3600)
    assert not again.applied and again.reason == "exists" and again.value == "a"

    created = kv.put("cas", 1, expect=0)
    assert created.applied and created.version == 1
    stale = kv.put("cas", 2, expect=7)
    assert not stale.applied and stale.reason == "version"
    moved = kv.put("cas", 2, expect=1, ttl_seconds=3600)
    assert moved.applied and moved.version == 2 and moved.expires_at is not None

    assert kv.incr("count", 5).value == 5
    assert kv.incr("count").value == 6
    r = kv.incr("count", -3, min=0, max=10)
    assert r.applied and r.value == 3
    over = kv.incr("count", 8, max=10)
    assert not over.applied and over.reason == "limit"
    under = kv.incr("count", -4, min=0)
    assert not under.applied and under.reason == "limit"
    assert kv.get("count").value == 3

    many = kv.get_many(["once", "cas", "nope"])
    assert sorted(row.key for row in many.rows or []) == ["cas", "once"]
    assert many.missing == ["nope"]
    with pytest.raises(TypeError):
        kv.get_many("once")

    for i in range(5):
        kv.put(f"user:{i}", i)
    keys: list[str] = []
    after: str | None = None
    for _ in range(5):
        page = kv.get_prefix("user:", after=after, limit=2)
        keys += [row.key for row in page.rows or []]
        if not page.truncated:
            break
        after = page.next_after
    assert keys == [f"user:{i}" for i in range(5)]
    only = kv.get_prefix("user:", after="user:3", keys_only=True)
    assert [(row.key, row.value) for row in only.rows or []] == [("user:4", None)]

    res = kv.batch(
        [
            lanes.kv_op("incr", qname, "count", delta=1, max=4),
            lanes.kv_op("getPrefix", qname, prefix="c", keys_only=True),
        ]
    )
    assert res[0].value == 4
    assert [row.key for row in res[1].rows or []] == ["cas", "count"]


def test_kv_incr_keeps_int64_precision(client: lanes.Lanes, qname: str) -> None:
    # Counters are int64 on the broker: an int keeps every digit past 2**53, and a sum past
    # int64 is applied false, reason limit, not a wrap.
    kv = client.kv(qname)
    assert kv.incr("n", 2**53 - 1).value == 2**53 - 1
    assert kv.incr("n", 2).value == 2**53 + 1
    assert kv.get("n").value == 2**53 + 1
    assert kv.incr("top", 2**63 - 1, max=2**63 - 1).value == 2**63 - 1
    over = kv.incr("top", 1)
    assert not over.applied and over.reason == "limit" and over.value == 2**63 - 1
    assert kv.incr("low", -(2**63)).value == -(2**63)
    under = kv.incr("low", -1)
    assert not under.applied and under.reason == "limit" and under.value == -(2**63)
    got = kv.get_many(["n", "top"])
    rows = sorted((row.key, row.value) for row in got.rows or [])
    assert rows == [("n", 2**53 + 1), ("top", 2**63 - 1)]


def test_kv_conditional_delete(client: lanes.Lanes, qname: str) -> None:
    kv = client.kv(qname)
    kv.put("k", "v1")
    assert kv.put("k", "v2", expect=1).version == 2
    stale = kv.delete("k", expect=1)
    assert (stale.applied, stale.reason) == (False, "version")
    with pytest.raises(lanes.APIError) as bad:
        kv.delete("k", expect=0)  # a version is >= 1
    assert (bad.value.status, bad.value.code) == (400, "kv_bad_request")
    assert kv.get("k").found  # neither the stale nor the refused delete removed it
    assert kv.delete("k", expect=2).applied
    assert not kv.get("k").found
    kv.put("j", 1)
    res = kv.batch(
        [lanes.kv_op("delete", qname, "j", expect=5), lanes.kv_op("delete", qname, "j", expect=1)]
    )
    assert [r.applied for r in res] == [False, True]


def test_kv_list(client: lanes.Lanes, qname: str) -> None:
    kv = client.kv(qname)
    for k in ("a:1", "a:2", "a:3", "b:1"):
        kv.put(k, k)
    counts = {n.namespace: n.keys for n in client.kv_namespaces().namespaces}
    assert counts.get(qname) == 4
    assert [row.key for row in kv.list().rows] == ["a:1", "a:2", "a:3", "b:1"]
    page = kv.list(prefix="a:", limit=2, keys_only=True)
    assert page.truncated and [row.value for row in page.rows] == [None, None]
    rest = kv.list(prefix="a:", after=page.next_after)
    assert [(row.key, row.value) for row in rest.rows] == [("a:3", "a:3")]
    assert not rest.truncated


def test_timers_reschedule_partition_prefix(client: lanes.Lanes, qname: str) -> None:
    t = client.timers(qname)
    r = t.schedule("job:1", delay_millis=60_000, payload={"n": 1}, partition="p-7")
    assert r.ok
    got = t.get("job:1")
    assert got.found and got.partition == "p-7"
    r = t.reschedule(
        "job:1", delay_millis=120_000, payload={"n": 2}, partition="p-8", transaction_id="fixed-1"
    )
    assert r.ok and r.status == "rescheduled" and r.txn == "fixed-1"
    got = t.get("job:1")
    assert got.partition == "p-8" and got.txn == "fixed-1"
    t.schedule("job:2", delay_millis=60_000)
    t.schedule("other", delay_millis=60_000)
    jobs = t.list(prefix="job:")
    assert [x.timer_key for x in jobs.rows or []] == ["job:1", "job:2"]
    first = t.list(prefix="job:", limit=1)
    assert first.truncated and [x.timer_key for x in first.rows or []] == ["job:1"]
    nxt = t.list(prefix="job:", after=first.next_after)
    assert [x.timer_key for x in nxt.rows or []] == ["job:2"]

    # a rescheduled timer fires into its partition
    t.reschedule("job:1", delay_millis=0, payload={"n": 3}, partition="p-9")
    deadline = time.monotonic() + 20
    msgs: list[lanes.Message] = []
    while not msgs and time.monotonic() < deadline:
        msgs = client.queue(qname).partition("p-9").wait(False).pop()
        if not msgs:
            time.sleep(0.2)
    assert [(m.partition, m.data) for m in msgs] == [("p-9", {"n": 3})]


def test_timers(client: lanes.Lanes, qname: str) -> None:
    t = client.timers(qname)
    r = t.schedule("remind", delay_millis=60_000, payload={"x": 1})
    assert r.ok and r.status == "scheduled"
    assert t.get("remind").found
    assert t.cancel("remind").status == "cancelled"


def test_a_timer_without_a_payload_fires_an_empty_object_and_none_fires_null(
    client: lanes.Lanes, qname: str
) -> None:
    t = client.timers(qname)
    t.schedule("bare", delay_millis=60_000)
    t.reschedule("bare-again", delay_millis=60_000)
    client.transaction().timer_schedule(qname, "bare-in-tx", delay_millis=60_000).commit()
    t.schedule("null", delay_millis=60_000, payload=None)
    fired = {k: t.get(k).payload for k in ("bare", "bare-again", "bare-in-tx", "null")}
    assert fired == {"bare": "{}", "bare-again": "{}", "bare-in-tx": "{}", "null": "null"}


def test_messages_iterator_renews_the_lease_while_a_slow_loop_body_runs(
    client: lanes.Lanes, qname: str
) -> None:
    # A 2 s lease and a 3.5 s loop body: the iterator's renewal thread keeps the message leased
    # (no other consumer gets it), and the ack after the body succeeds, as in the consume loop.
    client.queue(qname).push(["slow"])
    errors: list[BaseException] = []
    q = client.queue(qname).lease_seconds(2).timeout_millis(300).on_error(errors.append)
    with q.messages(idle_timeout=0.5) as it:
        for m in it:
            time.sleep(3.5)
            assert drain(client.queue(qname)) == [], "the lease ran out in the loop body"
            assert m.data == "slow"
    assert errors == []
    assert drain(client.queue(qname)) == []  # acked


def test_server_auto_ack_pops_no_more_than_the_limit_and_a_soft_stop_hands_every_message_over(
    client: lanes.Lanes, qname: str
) -> None:
    # Under server auto-ack a popped message is committed: the pop asks for what is left of the
    # limit only, so the rest stays in the queue for the next consumer.
    client.queue(qname).push(list(range(10)))
    q = client.queue(qname).server_auto_ack(True).autopilot(False).batch(10).timeout_millis(300)
    seen: list[int] = []
    q.limit(3).run(lambda m: seen.append(m.data))
    assert seen == [0, 1, 2]
    it = q.messages(limit=2)
    assert _take(it) == [3, 4]
    # A soft stop while the first of five committed messages is in the handler: all five are
    # handed over (nothing could release them).
    started = threading.Event()

    def slow(m: lanes.Message) -> None:
        started.set()
        seen.append(m.data)
        time.sleep(0.2)

    cons = q.consume(slow)
    assert started.wait(5)
    cons.stop(10)
    assert seen == [0, 1, 2, 5, 6, 7, 8, 9]
    assert drain(client.queue(qname)) == []


def test_a_message_pushed_right_after_close_is_not_held_by_the_stopped_consumers_long_poll(
    broker_url: str, qname: str
) -> None:
    # close() stops the consumer, whose blocking long poll cannot be interrupted and stays
    # parked on the broker. A message pushed then is leased to that poll; the client keeps its
    # HTTP pool open until the poll answers so it can release the message, then closes it.
    closed = lanes.Lanes(broker_url)
    with closed as c:
        c.queue(qname).group("g").timeout_millis(5000).consume(lambda m: None)
        time.sleep(0.5)
    with lanes.Lanes(broker_url) as c2:
        c2.queue(qname).push([42])
        got = c2.queue(qname).group("g").autopilot(False).timeout_millis(3000).pop()
        assert [m.data for m in got] == [42], "the message was held by the abandoned poll"
        c2.ack(got)
    deadline = time.monotonic() + 5
    while not closed._t.http.is_closed and time.monotonic() < deadline:
        time.sleep(0.05)
    assert closed._t.http.is_closed
    with pytest.raises(lanes.ClientClosedError):
        closed.health()


def test_starting_and_stopping_consumers_on_one_client_leaves_its_http_pool_free(
    broker_url: str, qname: str
) -> None:
    # A stopped consumer's long polls (30 s by default) were abandoned but stayed parked, each
    # holding one of httpx's 100 pool connections: after 34 stops of a concurrency-3 consumer a
    # plain push waited 28 s for a connection. The stop now cuts them (half-close).
    with lanes.Lanes(broker_url, timeout=10) as c:
        q = c.queue(qname).concurrency(3)
        for _ in range(40):
            cons = q.consume(lambda m: None)
            time.sleep(0.05)
            cons.stop(10)
        t0 = time.monotonic()
        c.queue(qname).push(["x"])
        assert time.monotonic() - t0 < 1


def test_an_answer_the_broker_wrote_before_the_stop_is_released_by_a_program_exiting_after_close(
    broker_url: str, qname: str
) -> None:
    # The proxy holds each answer 0.6 s: the consumer's parked long poll has got the message
    # (the broker wrote its answer) when the program stops its consumer, closes and exits.
    # close() returned at once and the exit ended the poll's daemon thread before the answer
    # came: the message stayed leased for the whole 60 s lease. The stop now half-closes the
    # poll's connection, the answer still arrives whole and is released, and close() waits
    # (at most 2 s) for that.
    proxy = SlowAnswerProxy(broker_url, 0.6)
    try:
        out = run_script(
            f"""
            import time, lanes
            c = lanes.Lanes({proxy.url!r})
            handled = []
            q = c.queue({qname!r}).lease_seconds(60).timeout_millis(20000)
            cons = q.consume(lambda m: handled.append(m.data))
            time.sleep(1.0)  # the long poll is parked on the broker
            with lanes.Lanes({broker_url!r}) as pusher:
                pusher.queue({qname!r}).push(["late"])
            time.sleep(0.2)  # the broker wrote the answer; the proxy holds it
            cons.stop(10)
            t0 = time.monotonic()
            c.close()
            print(handled, round(time.monotonic() - t0, 2))
            """
        )
    finally:
        proxy.close()
    handled, close_took = out.stdout.rsplit(" ", 1)
    assert handled == "[]"
    assert float(close_took) < 2.5
    with lanes.Lanes(broker_url) as c:
        got = c.queue(qname).autopilot(False).timeout_millis(3000).pop()
        assert [m.data for m in got] == ["late"], "held by the exited program's long poll"
        c.ack(got)


def test_on_a_callers_http_client_a_stopped_consumers_long_poll_is_not_cut_and_releases_its_answer(
    broker_url: str, qname: str
) -> None:
    # The SDK cannot reach a caller's connections: the abandoned long poll stays parked, gets
    # the message pushed after the stop, and releases it (the path the cut makes rare).
    http = httpx.Client()
    with lanes.Lanes(broker_url, http_client=http) as c:
        q = c.queue(qname).lease_seconds(60)
        cons = q.timeout_millis(3000).consume(lambda m: None)
        time.sleep(0.3)  # the pop is parked on the broker
        cons.stop(10)
        time.sleep(0.3)
        assert not c._pops.wait_idle(0), "the long poll was cut"
        c.queue(qname).push(["late"])
        assert c._pops.wait_idle(5), "the parked poll did not end within its 3 s wait"
        got = q.autopilot(False).wait(False).pop()
        assert [m.data for m in got] == ["late"], "held by the stopped consumer's pop"
        c.ack(got)
    http.close()


def test_iterator_stop_cuts_the_pop_under_way_and_releases_what_the_broker_had_sent_it(
    broker_url: str, qname: str
) -> None:
    # stop() from another thread left the pop under way parked until its long poll ended (20 s
    # here). It now half-closes the pop's connection: the iteration ends at once, with no error,
    # and a message the broker had already sent (held 0.6 s by the proxy) is released.
    proxy = SlowAnswerProxy(broker_url, 0.6)
    errors: list[BaseException] = []
    handled: list[Any] = []
    try:
        with lanes.Lanes(proxy.url) as c:
            it = (
                c.queue(qname)
                .lease_seconds(60)
                .timeout_millis(20000)
                .messages(on_error=errors.append)
            )

            def iterate() -> None:
                with it:
                    handled.extend(m.data for m in it)

            iterating = threading.Thread(target=iterate, daemon=True)
            iterating.start()
            time.sleep(1.0)  # the pop is parked on the broker
            with lanes.Lanes(broker_url) as pusher:
                pusher.queue(qname).push(["late"])
            time.sleep(0.2)  # the broker wrote the answer; the proxy holds it
            t0 = time.monotonic()
            it.stop()
            iterating.join(timeout=5)
            took = time.monotonic() - t0
            assert not iterating.is_alive(), "stop() did not end the iteration"
    finally:
        proxy.close()
    assert took < 2.5
    assert handled == [] and errors == []
    with lanes.Lanes(broker_url) as c:
        got = c.queue(qname).autopilot(False).timeout_millis(3000).pop()
        assert [m.data for m in got] == ["late"], "held by the stopped iteration's pop"
        c.ack(got)


def _iterate_on_a_held_answer(
    broker_url: str, proxy: SlowAnswerProxy, qname: str
) -> tuple[lanes.Lanes, lanes.MessageIterator, threading.Thread, list[Any]]:
    """A client on the proxy whose iterator, in a thread, has a pop under way that the broker
    has answered with a message ("late", leased 60 s) and whose answer the proxy still holds."""
    c = lanes.Lanes(proxy.url)
    it = c.queue(qname).lease_seconds(60).timeout_millis(20000).messages()
    handled: list[Any] = []
    iterating = threading.Thread(target=lambda: handled.extend(m.data for m in it), daemon=True)
    iterating.start()
    time.sleep(1.0)  # the pop is parked on the broker
    with lanes.Lanes(broker_url) as pusher:
        pusher.queue(qname).push(["late"])
    time.sleep(0.2)  # the broker wrote the answer; the proxy holds it
    return c, it, iterating, handled


def test_close_right_after_an_iterators_stop_waits_for_the_release_of_its_cut_pop(
    broker_url: str, qname: str
) -> None:
    # close() right after stop() closed the HTTP pool under the iterator's cut pop, whose
    # answer (held 1 s by the proxy) the broker had already written: the release of its
    # message failed and the message stayed leased for the whole 60 s lease.
    proxy = SlowAnswerProxy(broker_url, 1.0)
    try:
        c, it, iterating, handled = _iterate_on_a_held_answer(broker_url, proxy, qname)
        it.stop()
        began = time.monotonic()
        c.close()
        took = time.monotonic() - began
        with lanes.Lanes(broker_url) as c2:  # at once, as a program exiting after close()
            got = c2.queue(qname).autopilot(False).wait(False).pop()
            assert [m.data for m in got] == ["late"], "left leased by the stopped iterator"
            c2.ack(got)
        iterating.join(5)
        assert not iterating.is_alive()
    finally:
        proxy.close()
    assert took < 2.5, f"close() waited {took:.2f} s"
    assert handled == []
    with pytest.raises(lanes.ClientClosedError):
        c.health()


def test_ctrl_c_in_close_while_it_waits_for_a_stopped_iterators_cut_pop_leaves_the_pool_open(
    broker_url: str, qname: str
) -> None:
    # A Ctrl-C while close() waits for the stopped iterator's cut pop re-raises at once and
    # leaves the HTTP pool open until the iterator has released what that pop got: it closes
    # then, and the message is free again at once instead of leased for the whole lease.
    proxy = SlowAnswerProxy(broker_url, 1.0)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    ctrl_c = threading.Timer(0.3, _interrupt_main_thread)
    try:
        c, it, iterating, handled = _iterate_on_a_held_answer(broker_url, proxy, qname)
        it.stop()
        began = time.monotonic()
        ctrl_c.start()
        with pytest.raises(KeyboardInterrupt):
            c.close()
        took = time.monotonic() - began
        assert not c._t.http.is_closed, "the pool closed under the iterator's cut pop"
        iterating.join(5)
        assert not iterating.is_alive()
    finally:
        ctrl_c.cancel()
        signal.signal(signal.SIGINT, previous)
        proxy.close()
    assert took < 0.3 + 0.3, f"the interrupt waited {took:.2f} s for the iterator"
    assert handled == []
    assert c._t.http.is_closed, "the pool stayed open after the iterator's release"
    c.close()  # nothing is left for it to do
    with pytest.raises(lanes.ClientClosedError):
        c.health()
    with lanes.Lanes(broker_url) as c2:
        got = c2.queue(qname).autopilot(False).wait(False).pop()
        assert [m.data for m in got] == ["late"], "left leased by the stopped iterator"
        c2.ack(got)


def test_iterator_stop_before_its_pop_is_sent_ends_at_once(broker_url: str, qname: str) -> None:
    # A stop while the pop's attempt was being prepared (here, a bearer token function asked; a
    # new connection's dial is the same window) refused the write on the cut: httpcore took the
    # write error for a server that answered early and read on a connection where nothing was
    # sent, until the attempt's end (the 10 s long poll and more).
    asked = threading.Event()

    def slow_token() -> str:
        asked.set()
        time.sleep(0.5)
        return "t"

    with lanes.Lanes(broker_url, bearer_token=slow_token) as c:
        it = c.queue(qname).timeout_millis(10000).messages()
        iterating = threading.Thread(target=lambda: list(it), daemon=True)
        iterating.start()
        assert asked.wait(5)
        t0 = time.monotonic()
        it.stop()
        iterating.join(timeout=15)
        assert not iterating.is_alive(), "stop() did not end the iteration"
        assert time.monotonic() - t0 < 2


def test_iterator_stop_ends_a_cut_pop_that_gets_no_answer_within_the_grace(
    broker_url: str, qname: str
) -> None:
    # Behind a proxy that does not pass the half-close on, the cut pop got no answer and the
    # iteration waited out the long poll (5.5 s of its 6 s here). Its connection is now closed
    # CUT_WAIT_S (2 s) after the stop.
    proxy = SlowAnswerProxy(broker_url, 0)
    proxy.deaf = True
    try:
        with lanes.Lanes(proxy.url) as c:
            it = c.queue(qname).timeout_millis(6000).messages()
            iterating = threading.Thread(target=lambda: list(it), daemon=True)
            iterating.start()
            time.sleep(0.5)  # the pop is parked on the broker
            t0 = time.monotonic()
            it.stop()
            iterating.join(timeout=15)
            took = time.monotonic() - t0
            assert not iterating.is_alive(), "stop() did not end the iteration"
    finally:
        proxy.close()
    assert 1.9 <= took < 4, took


def test_iterator_stop_ends_a_parked_pop_at_once(broker_url: str, qname: str) -> None:
    errors: list[BaseException] = []
    with lanes.Lanes(broker_url) as c:
        it = c.queue(qname).timeout_millis(20000).messages(on_error=errors.append)
        iterating = threading.Thread(target=lambda: list(it), daemon=True)
        iterating.start()
        time.sleep(0.5)  # the pop is parked on the broker
        t0 = time.monotonic()
        it.stop()
        iterating.join(timeout=5)
        assert not iterating.is_alive(), "stop() did not end the iteration"
        assert time.monotonic() - t0 < 1
        assert errors == []


def test_a_call_in_flight_when_the_client_closes_raises_client_closed(
    broker_url: str, qname: str
) -> None:
    # close() closes the HTTP pool under a direct call another thread has in flight: its retry
    # used to raise httpx's bare RuntimeError, which no `except lanes.LanesError` catches.
    c = lanes.Lanes(broker_url)
    failed: list[BaseException] = []

    def pop() -> None:
        try:
            c.queue(qname).timeout_millis(2000).pop()
        except Exception as e:
            failed.append(e)

    popping = threading.Thread(target=pop)
    popping.start()
    time.sleep(0.3)
    c.close()
    popping.join(10)
    assert len(failed) == 1 and isinstance(failed[0], lanes.ClientClosedError), failed


def test_close_names_what_a_consumer_outliving_its_timeout_leaves_unsent(
    broker_url: str, qname: str
) -> None:
    # A handler slower than close()'s timeout used to end close() before the flush: what was
    # buffered was lost without an UnsentError, and the flusher retried on a closed pool forever;
    # and the pool closed under the handler, whose ack failed (its message redelivered). The
    # handler uses up close()'s one deadline, so the flush has no time left: it names the item.
    c = lanes.Lanes(broker_url)
    c.queue(qname).push(["work"])
    handling = threading.Event()

    def slow(_: lanes.Message) -> None:
        handling.set()
        time.sleep(1.5)

    consumer = c.queue(qname).lease_seconds(2).consume(slow)
    assert handling.wait(10)
    c.queue(qname + "-buffered").buffer().push(["buffered"])
    [buffer] = c._buffers.values()
    with pytest.raises(lanes.UnsentError) as unsent:
        c.close(timeout=0.3)
    assert unsent.value.unsent == 1
    buffer._thread.join(1)
    assert not buffer._thread.is_alive(), "the flusher outlived close()"
    consumer.closed(10)
    with lanes.Lanes(broker_url) as c2:
        assert c2.queue(qname + "-buffered").wait(False).pop() == []
        time.sleep(2.5)  # past the lease: an unacked "work" would be redelivered
        assert c2.queue(qname).wait(False).pop() == [], "the handler's ack was lost"


def test_close_holds_one_deadline_for_a_held_handler_and_an_unsendable_buffer(
    broker_url: str, qname: str
) -> None:
    # The consumers' stop had `timeout`, then the flush its own: a handler held past it and a
    # buffer the broker keeps refusing held close(2) about 4 s, past the grace period a caller
    # sized it for (a Kubernetes terminationGracePeriodSeconds).
    run = f"py-{uuid.uuid4().hex[:12]}"
    c = lanes.Lanes(broker_url, headers={"X-Lanes-Test-Run": run})
    release = threading.Event()
    [consumer] = _hold_handlers(c, [qname], release)
    rules = [
        {"method": "POST", "path": "/api/v1/push", "responses": [{"status": 503, "times": 1000}]}
    ]
    faults = f"{broker_url}/__test/faults/{run}"
    assert httpx.put(faults, content=json.dumps({"rules": rules})).status_code == 204
    try:
        c.queue(qname + "-buffered").buffer(time_millis=60_000).push(["unsent"])
        began = time.monotonic()
        with pytest.raises(lanes.UnsentError) as unsent:
            c.close(timeout=2)
        took = time.monotonic() - began
    finally:
        release.set()
        httpx.delete(faults)
    assert took < 2 + 1, f"close(timeout=2) took {took:.2f} s"
    assert unsent.value.unsent == 1
    consumer.closed(10)  # left stopping at the deadline, it ends once its handler returns


def test_ctrl_c_in_close_leaves_the_handlers_acks_and_every_consumers_stop_to_a_second_close(
    broker_url: str, qname: str
) -> None:
    # A Ctrl-C while close() waited for the first consumer's handler closed the HTTP pool under
    # both handlers (their acks failed, their messages came back after the lease), left the
    # consumer close() had not reached yet running, and left the buffer unflushed for good.
    c = lanes.Lanes(broker_url)
    queues = [qname + "-first", qname + "-second"]
    release = threading.Event()
    consumers = _hold_handlers(c, queues, release, lease_seconds=2)
    c.queue(qname + "-buffered").buffer(time_millis=60_000).push(["buffered"])
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    ctrl_c = threading.Timer(0.3, _interrupt_main_thread)
    try:
        began = time.monotonic()
        ctrl_c.start()
        with pytest.raises(KeyboardInterrupt):
            c.close(timeout=30)
        took = time.monotonic() - began
    finally:
        ctrl_c.cancel()
        signal.signal(signal.SIGINT, previous)
    assert took < 0.3 + 0.5, f"the interrupt waited {took:.2f} s for the handlers"
    assert not any(consumer.done for consumer in consumers)  # both handlers still run
    release.set()
    for consumer in consumers:
        consumer.closed(10)  # both were asked to stop, and ended without an error
    c.close()
    with pytest.raises(lanes.ClientClosedError):
        c.health()
    with lanes.Lanes(broker_url) as c2:
        got = c2.queue(qname + "-buffered").wait(False).pop()
        assert [m.data for m in got] == ["buffered"], "the second close() did not flush"
        time.sleep(2.5)  # past the lease: an unacked "work" would be redelivered
        assert [c2.queue(q).wait(False).pop() for q in queues] == [[], []], "an ack was lost"


def _hold_handlers(
    c: lanes.Lanes, queues: list[str], release: threading.Event, lease_seconds: int = 5
) -> list[lanes.Consumer]:
    """One consumer per queue, each in a handler that waits for ``release``, once all run."""
    consumers, handling = [], []
    for q in queues:
        c.queue(q).push(["work"])
        started = threading.Event()
        handling.append(started)

        def held(_: lanes.Message, started: threading.Event = started) -> None:
            started.set()
            release.wait(10)

        consumers.append(c.queue(q).lease_seconds(lease_seconds).consume(held))
    for started in handling:
        assert started.wait(10)
    return consumers


def test_close_refuses_consumers_and_iterators_started_while_it_waits(
    broker_url: str, qname: str
) -> None:
    # A consumer another thread started while close() waited for a handler was never asked to
    # stop: it ran on after close() returned, its pops failing on the closed HTTP pool, and an
    # iterator made then went on leasing messages no call could ack any more.
    c = lanes.Lanes(broker_url)
    release = threading.Event()
    held = _hold_handlers(c, [qname + "-held"], release)
    closing = threading.Thread(target=c.close, kwargs={"timeout": 10})
    closing.start()
    time.sleep(0.2)  # close() asked the consumer to stop and waits for its handler
    late_consumers: list[lanes.Consumer] = []
    late_iterators: list[lanes.MessageIterator] = []
    try:
        with pytest.raises(lanes.ClientClosedError, match="lanes: consume: client is closed"):
            late_consumers.append(c.queue(qname).consume(lambda _: None))
        with pytest.raises(lanes.ClientClosedError, match="lanes: messages: client is closed"):
            late_iterators.append(c.queue(qname).messages())
    finally:
        release.set()
        closing.join(10)
        for consumer in late_consumers:
            consumer.stop(10)
        for it in late_iterators:
            it.close()
    assert not closing.is_alive() and held[0].done
    with pytest.raises(lanes.ClientClosedError, match="lanes: consume: client is closed"):
        c.queue(qname).consume(lambda _: None)  # and after close() ended


def test_close_timeout_bounds_the_wait_for_all_its_consumers_together(
    broker_url: str, qname: str
) -> None:
    # close(timeout) waited up to `timeout` for each consumer in turn: three handlers slower
    # than it held close() three times as long as it was told.
    c = lanes.Lanes(broker_url)
    release = threading.Event()
    queues = [f"{qname}-{i}" for i in range(3)]
    consumers = _hold_handlers(c, queues, release)
    began = time.monotonic()
    try:
        with pytest.raises(TimeoutError):
            c.close(timeout=0.6)
        took = time.monotonic() - began
    finally:
        release.set()
    assert took < 0.6 + 0.4, f"close(timeout=0.6) took {took:.2f} s for three consumers"
    for consumer in consumers:
        consumer.closed(10)  # each ended without an error once its handler returned


def test_messages_iterator_stops_renewing_once_the_pops_messages_are_acked(
    client: lanes.Lanes, qname: str
) -> None:
    # Renewing a lease whose messages were all acked would answer success:false, reported as an
    # error: the renewal stops at the ack instead.
    client.queue(qname).push(["a"])
    errors: list[BaseException] = []
    q = client.queue(qname).auto_ack(False).lease_seconds(2).timeout_millis(300)
    with q.messages(idle_timeout=0.3, on_error=errors.append) as it:
        for m in it:
            client.ack(m)
            time.sleep(1.5)  # two renewal ticks (every 2/3 s)
    assert errors == []


@pytest.mark.parametrize("batch", [False, True], ids=["each", "batch"])
def test_a_handler_raising_consumer_stopped_without_a_stop_is_nacked_failed(
    client: lanes.Lanes, qname: str, batch: bool
) -> None:
    # Only a hard stop (cancel_event set) makes it the stop's cancellation, released with
    # `retry`; otherwise it would come back at once, forever. retryLimit 0: straight to the DLQ.
    assert client.queue(qname).configure({"retryLimit": 0}).configured
    client.queue(qname).push(["poison"])
    calls: list[Any] = []

    def handler(m: Any) -> None:
        calls.append(m)
        raise lanes.ConsumerStoppedError("the handler's own")

    q = client.queue(qname).wait(False).limit(1)
    c = q.consume_batch(handler) if batch else q.consume(handler)
    c.closed(timeout=10)
    assert len(calls) == 1
    assert [m.data for m in client.admin.list_dlq(queue=qname).messages] == ["poison"]
    assert drain(client.queue(qname)) == []


def test_a_soft_stop_escalation_sets_cancel_event(client: lanes.Lanes, qname: str) -> None:
    assert client.queue(qname).configure({"retryLimit": 0}).configured
    client.queue(qname).push(["x"])
    started = threading.Event()
    saw_cancel: list[bool] = []
    box: list[lanes.Consumer] = []

    def handler(m: lanes.Message) -> None:
        started.set()
        saw_cancel.append(box[0].cancel_event.wait(5))
        raise lanes.ConsumerStoppedError("cancelled")

    box.append(client.queue(qname).soft_stop_timeout_millis(200).consume(handler))
    assert started.wait(10)
    box[0].stop(timeout=10)
    assert saw_cancel == [True]
    # retryLimit 0: released with retry (the stop's cancellation), not failed into the DLQ
    assert [m.data for m in drain(client.queue(qname))] == ["x"]


@pytest.mark.parametrize("how", ["stop", "stop_and_cancel"])
def test_a_stop_called_inside_a_handler_returns_and_the_consumer_ends(
    client: lanes.Lanes, qname: str, how: str
) -> None:
    client.queue(qname).push([0, 1, 2])
    handled: list[int] = []
    box: list[lanes.Consumer] = []
    ready = threading.Event()

    def handler(m: lanes.Message) -> None:
        ready.wait(5)
        handled.append(m.data)
        getattr(box[0], how)()
        handled.append(-1)  # the stop returned

    box.append(client.queue(qname).batch(3).consume(handler))
    ready.set()
    box[0].closed(timeout=5)
    assert handled == [0, -1]
    assert [m.data for m in drain(client.queue(qname))] == [1, 2]  # released with retry


def test_a_stop_called_from_on_error_of_a_failed_lease_renewal_returns_and_the_consumer_ends(
    client: lanes.Lanes, qname: str
) -> None:
    # As Go's TestITStopFromOnErrorOfARenewal, where Stop there waited for the end that waits
    # for that renewal. The handler acks its message itself, so the next renewal finds the lease
    # gone.
    client.queue(qname).push(["self"])
    box: list[lanes.Consumer] = []
    renew_failed = threading.Event()
    first_error: list[BaseException] = []
    stopped: list[tuple[BaseException | None, float]] = []
    stop_called = threading.Event()

    def on_error(e: BaseException) -> None:
        if first_error:
            return
        first_error.append(e)
        renew_failed.set()
        start = time.monotonic()
        try:
            box[0].stop(timeout=3)
            stopped.append((None, time.monotonic() - start))
        except BaseException as err:
            stopped.append((err, time.monotonic() - start))
        stop_called.set()

    def handler(m: lanes.Message) -> None:
        client.ack(m)
        renew_failed.wait(10)

    q = client.queue(qname).wait(False).lease_seconds(5).renew_lease(True, 200)
    box.append(q.on_error(on_error).consume(handler))
    assert stop_called.wait(10), "no renewal failed"
    assert "was not renewed" in str(first_error[0])
    err, took = stopped[0]
    assert err is None
    assert took < 1, "stop from on_error waited for the end that waits for it"
    box[0].closed(timeout=5)


def test_server_auto_ack_soft_stop_lets_a_pop_in_flight_answer_and_hands_it_over(
    client: lanes.Lanes, qname: str
) -> None:
    # The broker commits the pop's messages: cut by the stop, they would be lost unseen.
    errors: list[BaseException] = []
    seen: list[int] = []
    q = client.queue(qname).server_auto_ack(True).timeout_millis(5000).on_error(errors.append)
    cons = q.consume(lambda m: seen.append(m.data))
    time.sleep(0.3)  # the pop is parked on the empty queue
    pusher = threading.Timer(0.2, lambda: client.queue(qname).push([7]))
    pusher.start()
    cons.stop(10)
    pusher.join()
    assert seen == [7]
    assert errors == []
    assert drain(client.queue(qname)) == []  # committed in the pop, and handed over


def test_server_auto_ack_with_a_limit_above_the_largest_batch_pops_the_automatic_batch(
    client: lanes.Lanes, qname: str
) -> None:
    client.queue(qname).push(list(range(5)))
    q = client.queue(qname).server_auto_ack(True).limit(20_000).wait(False).idle_millis(1000)
    seen: list[int] = []
    q.run(lambda m: seen.append(m.data))
    assert seen == [0, 1, 2, 3, 4]
    client.queue(qname).push([5, 6])
    with q.messages() as it:
        assert [m.data for m in it] == [5, 6]


@pytest.mark.parametrize(
    ("queue", "partition", "field"),
    [
        (".", None, "queue"),
        ("..", None, "queue"),
        ("ok", ".", "partition"),
        ("ok", "..", "partition"),
        ("ok", "  ", "partition"),
    ],
)
def test_a_queue_or_partition_named_dot_or_dot_dot_is_refused_before_sending(
    client: lanes.Lanes, queue: str, partition: str | None, field: str
) -> None:
    q = client.queue(queue).wait(False)
    if partition is not None:
        q = q.partition(partition)
    for start in (q.pop, lambda: q.consume(lambda m: None), q.messages):
        with pytest.raises(lanes.InvalidNameError) as caught:
            start()
        assert (caught.value.field, caught.value.value) == (field, partition or queue)


@pytest.mark.parametrize("group", [" ", "\t\n", "\u3000"])
def test_a_consumer_group_of_only_white_space_is_refused_wherever_a_group_is_taken(
    broker_url: str, qname: str, group: str
) -> None:
    # The broker answers a pop or seek naming such a group 400, but takes an ack or a delete
    # naming it as a group of its own; a route naming the group in its path refuses "" too.
    sent: list[httpx.Request] = []
    transport = httpx.HTTPTransport()

    class Counting(httpx.BaseTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            sent.append(request)
            return transport.handle_request(request)

    client = lanes.Lanes(broker_url, http_client=httpx.Client(transport=Counting()))
    msg = lanes.Message(
        id="m",
        transaction_id="t",
        data=1,
        partition_id="00000000-0000-0000-0000-000000000000",
        partition="p",
        lease_id="",
        consumer_group="g",
    )

    def refused(call: Callable[[], object], value: str = group) -> None:
        with pytest.raises(lanes.InvalidNameError) as caught:
            call()
        assert (caught.value.field, caught.value.value) == ("group", value)

    for b in (
        client.queue(qname),
        client.queue(qname).partition("p"),
        client.queue().namespace(qname),
    ):
        q = b.group(group).wait(False)
        for start in (q.pop, functools.partial(q.consume, lambda m: None), q.messages):
            refused(start)
    refused(lambda: client.ack(msg, group=group))
    refused(lambda: client.ack([msg, msg], group=group))
    refused(lambda: client.transaction().ack(msg, group=group))
    refused(client.queue(qname).group(group).depth)
    refused(client.queue(qname).dlq(group).get)
    refused(lambda: client.admin.get_queue_depth(qname, group))
    refused(lambda: client.admin.list_dlq(queue=qname, consumer_group=group))
    refused(lambda: client.admin.purge_dlq(qname, group))
    admin = client.admin
    for g in (group, ""):
        refused(functools.partial(admin.seek_consumer_group, g, qname, to_end=True), g)
        refused(
            functools.partial(admin.seek_consumer_group_partition, g, qname, "p", to_end=True), g
        )
        refused(functools.partial(admin.get_consumer_group, g), g)
        refused(functools.partial(admin.delete_consumer_group, g), g)
        refused(functools.partial(admin.delete_consumer_group_for_queue, g, qname), g)
        refused(
            functools.partial(
                admin.update_subscription, g, datetime.datetime.now(datetime.timezone.utc)
            ),
            g,
        )
    client.close()
    assert sent == []


# Names on the edge of the broker's white-space rule (Go's unicode.IsSpace, Unicode's
# White_Space): str.strip() also strips U+001C..U+001F, which the broker takes as names.
EDGE_SPACE_NAMES = [
    *"\t\n\v\f\r \x1c\x1d\x1e\x1f\x85\xa0\u1680\u180e",
    *"\u2000\u200a\u200b\u2028\u2029\u202f\u205f\u3000\ufeff",
    " \ufeff ",
    "\x85\u3000",
]


def test_a_blank_group_or_partition_name_is_what_the_broker_calls_blank(
    broker_url: str, client: lanes.Lanes, qname: str
) -> None:
    # A pop sent by hand asks the broker; the SDK refuses the name before sending exactly when
    # the broker answers 400 for it.
    queue_url = f"{broker_url}/api/v1/pop/queue/{qname}"

    def broker_refuses(url: str, params: dict[str, str]) -> bool:
        answer = httpx.get(url, params={"wait": "false", **params})
        assert answer.status_code in (204, 400), answer.text
        return answer.status_code == 400

    def sdk_refuses(q: lanes.Queue) -> bool:
        try:
            q.wait(False).pop()
        except lanes.InvalidNameError:
            return True
        except lanes.BadRequestError:
            return False  # sent, and the broker refused it
        return False

    disagreements = []
    refused = 0
    for name in EDGE_SPACE_NAMES:
        group_refused = broker_refuses(queue_url, {"consumerGroup": name})
        if group_refused != sdk_refuses(client.queue(qname).group(name)):
            disagreements.append(f"group {name!r}")
        partition_refused = broker_refuses(f"{queue_url}/partition/{quote(name, safe='')}", {})
        if partition_refused != sdk_refuses(client.queue(qname).partition(name)):
            disagreements.append(f"partition {name!r}")
        refused += group_refused
    assert disagreements == []
    assert 0 < refused < len(EDGE_SPACE_NAMES)


def _interrupt_main_thread() -> None:
    """A Ctrl-C: SIGINT to the main thread, which is blocked waiting on the consumer."""
    signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)


@pytest.mark.parametrize("wait", ["run", "closed_then_stop"])
def test_ctrl_c_while_waiting_on_the_consumer_soft_stops_it_and_acks_what_was_handled(
    client: lanes.Lanes, qname: str, wait: str
) -> None:
    # On CPython 3.10/3.11 a KeyboardInterrupt inside Thread.join marks a live thread as ended:
    # the consumer then looked done while its handler still ran, stop() returned at once, and
    # the handled messages were never acked (redelivered after their lease).
    client.queue(qname).partition("p0").push(["m0", "m1", "m2"])
    events: list[str] = []

    def handle(m: lanes.Message) -> None:
        events.append(f"start {m.data}")
        if m.data == "m1":
            _interrupt_main_thread()
        time.sleep(0.8)
        events.append(f"done {m.data}")

    q = client.queue(qname).group("g").subscription_mode("all").batch(3).lease_seconds(60)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        if wait == "run":
            with pytest.raises(KeyboardInterrupt):
                q.run(handle)
        else:
            consumer = q.consume(handle)
            with pytest.raises(KeyboardInterrupt):
                consumer.closed()
            assert not consumer.done  # m1's handler still runs
            consumer.stop(timeout=30)
            assert consumer.done
    finally:
        signal.signal(signal.SIGINT, previous)
    # The stop waited for m1's handler, acked m0 and m1 and released m2 at once.
    assert events == ["start m0", "done m0", "start m1", "done m1"]
    assert [m.data for m in drain(client.queue(qname).group("g"))] == ["m2"]


def test_an_async_def_handler_is_refused_by_the_blocking_client(
    client: lanes.Lanes, qname: str
) -> None:
    async def handle(m: lanes.Message) -> None:
        pass

    q = client.queue(qname)
    for start in (q.consume, q.consume_batch, q.run):
        with pytest.raises(TypeError, match="AsyncLanes"):
            start(handle)  # type: ignore[arg-type]
    assert not client._consumers  # nothing was started


class _AsyncCallable:
    """An async handler ``inspect`` cannot see before calling it."""

    def __init__(self) -> None:
        self.ran = False

    async def __call__(self, m: lanes.Message) -> None:
        self.ran = True


@pytest.mark.parametrize("batch", [False, True], ids=["each", "batch"])
def test_a_handler_returning_an_awaitable_is_nacked_failed_and_reported_not_acked(
    client: lanes.Lanes, qname: str, batch: bool
) -> None:
    client.queue(qname).push(["x"])
    errors: list[BaseException] = []
    handler = _AsyncCallable()
    q = client.queue(qname).group("g").subscription_mode("all").on_error(errors.append)
    q = q.limit(1).timeout_millis(300)
    (q.consume_batch(handler) if batch else q.consume(handler)).closed(timeout=20)  # type: ignore[arg-type]
    assert not handler.ran
    assert len(errors) == 1 and isinstance(errors[0], TypeError), errors
    assert "AsyncLanes" in str(errors[0])
    # Nacked "failed", not committed: it comes back.
    assert [m.data for m in drain(client.queue(qname).group("g"))] == ["x"]


def test_a_failed_handlers_exception_text_is_the_nack_error_as_in_go_and_ts(
    client: lanes.Lanes, qname: str
) -> None:
    client.queue(qname).configure({"retryLimit": 0})
    client.queue(qname).partition("a").push(["boom"])
    client.queue(qname).partition("b").push(["bare"])

    def handle(m: lanes.Message) -> None:
        if m.data == "boom":
            raise RuntimeError("boom")
        raise ValueError  # no text: the type name stands in

    client.queue(qname).partitions(2).limit(2).consume(handle).closed(timeout=20)
    dlq = client.admin.list_dlq(queue=qname).messages
    assert sorted((d.data, d.error_message) for d in dlq) == [
        ("bare", "ValueError"),
        ("boom", "boom"),
    ]


class _Order(pydantic.BaseModel):
    orderId: int
    amount: float


@dataclasses.dataclass
class _OrderRow:
    orderId: int
    amount: float


def test_decode_validates_a_messages_data_into_a_type(client: lanes.Lanes, qname: str) -> None:
    client.queue(qname).push([{"orderId": 7, "amount": 9.5}, [1, 2], {"orderId": "x"}])
    order, numbers, bad = drain(client.queue(qname))
    assert order.decode(_Order) == _Order(orderId=7, amount=9.5)
    assert order.decode(_OrderRow) == _OrderRow(orderId=7, amount=9.5)
    numbers_list: list[int] = numbers.decode(list[int])
    assert numbers_list == [1, 2]
    with pytest.raises(pydantic.ValidationError, match="orderId"):
        bad.decode(_Order)
    assert numbers.decode(Annotated[list[int], ["unhashable metadata"]]) == [1, 2]
    assert order.data == {"orderId": 7, "amount": 9.5}  # data itself stays as it came


def test_the_consume_loop_keeps_its_helper_threads_across_pops(
    client: lanes.Lanes, qname: str
) -> None:
    # The blocking pops and acks run in helper threads; one started per call cost as much CPU
    # as the pop itself. They are kept: 300 pops and 300 acks start a couple of threads.
    client.queue(qname).push(list(range(300)))
    started: list[str] = []

    def count_start(frame: FrameType, event: str, arg: Any) -> None:
        started.append(threading.current_thread().name)
        sys.settrace(None)  # only a thread's first call counts

    handled: list[int] = []
    threading.settrace(count_start)
    try:
        q = client.queue(qname).autopilot(False).batch(1).wait(False).limit(300)
        q.run(lambda m: handled.append(m.data))
    finally:
        threading.settrace(None)
    assert handled == list(range(300))
    assert 1 <= started.count("lanes-io") <= 4, started


def _calls_while_consuming(q: lanes.Queue, names: set[str]) -> collections.Counter[str]:
    """Run ``q`` over its limit with a no-op handler, counting the Python-level calls of the
    functions named ``names`` in every thread the consumer starts."""
    calls: collections.Counter[str] = collections.Counter()

    def count(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_name in names:
            calls[frame.f_code.co_name] += 1

    threading.setprofile(count)
    try:
        q.run(lambda m: None)
    finally:
        threading.setprofile(None)
    return calls


def test_the_consume_loop_starts_no_task_per_pop(client: lanes.Lanes, qname: str) -> None:
    # A task started per pop (for the pop, for a stop watcher beside it, for the lease
    # renewal) cost more client CPU per pop than the rest of the loop's bookkeeping.
    client.queue(qname).push(list(range(300)))
    q = client.queue(qname).autopilot(False).batch(10).wait(False).limit(300)
    calls = _calls_while_consuming(q, {"create_task"})
    # asyncio.run's own three and the worker; none of the 30 pops starts one (a few to spare
    # for a lease renewal on a slow machine).
    assert calls["create_task"] <= 8, calls


def test_the_consume_loop_reads_its_stop_and_limit_without_a_call_per_message(
    client: lanes.Lanes, qname: str
) -> None:
    # With a fast handler, the calls the loop made around each one (the stop and limit checks,
    # two awaitable checks of its result) cost more than the rest of its work per message.
    client.queue(qname).push(list(range(300)))
    q = client.queue(qname).autopilot(False).batch(10).wait(False).limit(300)
    per_message = {"_cut_short", "_limit_reached", "isawaitable"}
    calls = _calls_while_consuming(q, per_message)
    # _limit_reached is read per pop: at the top of the worker's loop, twice in the handler
    # thread, once after the pop
    pops = 30
    assert sum(calls.values()) <= 4 * pops, calls


def test_the_consume_loop_hands_each_pop_to_other_threads_twice(
    client: lanes.Lanes, qname: str
) -> None:
    # Each hand-over between the loop's thread and another one (the blocking pop, the pop's
    # handlers, the blocking ack) costs about 45 µs of CPU. The handler thread sends the acks:
    # two per pop, three before.
    client.queue(qname).push(list(range(300)))
    q = client.queue(qname).autopilot(False).batch(10).wait(False).limit(300)
    calls = _calls_while_consuming(q, {"call_soon_threadsafe"})
    pops = 30  # and a few to spare for a lease renewal on a slow machine
    assert calls["call_soon_threadsafe"] <= 2 * pops + 8, calls


def test_a_lease_renewal_failing_while_the_acks_are_in_flight_reports_nothing(
    broker_url: str, qname: str
) -> None:
    # The handler thread sends the pop's acks. A renewal that was under way then and fails
    # after they released the lease is no error to report: the messages are acked.
    run = f"py-{uuid.uuid4().hex[:12]}"
    rules = [
        {"path": "/api/v1/lease/*", "responses": [{"status": 503, "times": 10}]},
        {"path": "/api/v1/ack*", "responses": [{"pass": True, "holdAnswerMs": 2000}]},
    ]
    put = httpx.put(f"{broker_url}/__test/faults/{run}", content=json.dumps({"rules": rules}))
    assert put.status_code == 204, "the test broker serves no fault scripts"
    errors: list[BaseException] = []
    handled = threading.Event()

    def handle(m: lanes.Message) -> None:
        time.sleep(1.3)
        handled.set()

    try:
        with lanes.Lanes(broker_url, retry_attempts=1, headers={"X-Lanes-Test-Run": run}) as c:
            c.queue(qname).push(["slow"])
            # The first renewal goes out 1 s after the pop (renewing every 1 s: the answer's
            # 60 s lease alone would renew at 10 s) and fails after its retry, about 0.5 s
            # later; the ack went out at 1.3 s and answers at 3.3 s.
            q = c.queue(qname).wait(False).renew_lease(True, 1000).on_error(errors.append)
            consumer = q.consume(handle)
            assert handled.wait(10)
            consumer.stop()  # once the ack has answered
            assert c.queue(qname).depth().pending == 0
        rule = httpx.get(f"{broker_url}/__test/faults/{run}").json()["rules"][0]
        assert rule["faulted"] >= 1  # the renewal was under way
    finally:
        httpx.delete(f"{broker_url}/__test/faults/{run}")
    assert errors == []


def test_a_program_whose_consumer_stopped_during_a_long_poll_exits_at_once(
    broker_url: str, qname: str
) -> None:
    # The stopped consumer's pop cannot be cancelled and waits out its 30 s long poll in a
    # helper thread, which must not keep the interpreter alive (nor must the idle ones).
    script = f"""
        import time
        import lanes
        client = lanes.Lanes({broker_url!r})
        consumer = client.queue({qname!r}).timeout_millis(30000).consume(lambda m: None)
        time.sleep(0.5)  # the first long poll is in flight
        consumer.stop(timeout=5)
        """
    start = time.monotonic()
    subprocess.run([sys.executable, "-c", textwrap.dedent(script)], check=True, timeout=25)
    assert time.monotonic() - start < 15


def test_renew_rounds_seconds_up_and_takes_the_default_at_0_or_below(
    client: lanes.Lanes, qname: str
) -> None:
    """As Go and TS: -5 s is the broker's default 60 s (was a 1 s lease), 1.5 s is 2 s (was 1)."""
    client.queue(qname).push(["r"])
    msgs = client.queue(qname).lease_seconds(5).wait(False).pop()
    before = datetime.datetime.now(datetime.timezone.utc)
    [res] = client.renew(msgs, seconds=-5)
    assert res.success and res.new_expires_at is not None
    assert (res.new_expires_at - before).total_seconds() > 50
    before = datetime.datetime.now(datetime.timezone.utc)
    [res] = client.renew(msgs, seconds=1.5)
    assert res.new_expires_at is not None
    assert (res.new_expires_at - before).total_seconds() > 1.8
    client.ack(msgs)


def test_a_batch_or_width_below_0_is_unset_as_in_go(client: lanes.Lanes, qname: str) -> None:
    """Go's Batch(-1) and Partitions(-1) leave them unset; Python sent them and got a 400."""
    client.queue(qname).push([1, 2, 3])
    q = client.queue(qname).wait(False)
    got = q.autopilot(False).batch(-1).partitions(-1).pop()
    assert [m.data for m in got] == [1]  # autopilot off, nothing set: batch 1
    client.ack(got)
    got = q.autopilot(True).batch(-2).pop()
    assert [m.data for m in got] == [2, 3]  # autopilot sizes it
    client.ack(got)


@pytest.mark.parametrize(
    ("headers", "want"),
    [({}, "lanes-mq-python/0.0.0"), ({"user-agent": "billing/2.1"}, "billing/2.1")],
)
def test_every_request_names_the_sdk_unless_headers_name_another_agent(
    broker_url: str, qname: str, headers: dict[str, str], want: str
) -> None:
    """As Go and TS; a caller's agent in any case replaces the SDK's, never joins it."""
    agents: list[list[str]] = []
    hook = {"request": [lambda r: agents.append(r.headers.get_list("user-agent"))]}
    with (
        httpx.Client(event_hooks=hook) as own,
        lanes.Lanes(broker_url, http_client=own, headers=headers) as c,
    ):
        c.queue(qname).push([1])
        c.health()
    assert agents == [[want], [want]]


# What each request must carry once: the caller's value where the caller names the header, in
# any letter case (the last spelling), else the SDK's; the bearer token and the attempt count stay
# the SDK's, as in Go. A caller's header goes on every request, with a body or not.
_CALLER_HEADERS = {
    "Accept": "text/plain",
    "accept": "application/json",
    "CONTENT-TYPE": "application/json; charset=utf-8",
    "user-agent": "billing/2.1",
    "AUTHORIZATION": "Bearer the-callers",
    "x-retry-count": "9",
    "X-Team": "a",
    "x-team": "b",
}
_SENT_ONCE = {
    "accept": ["application/json"],
    "content-type": ["application/json; charset=utf-8"],
    "user-agent": ["billing/2.1"],
    "authorization": ["Bearer the-token"],
    "x-retry-count": ["0"],
    "x-team": ["b"],
}


def _sent(requests: list[httpx.Request]) -> list[dict[str, list[str]]]:
    return [{name: r.headers.get_list(name) for name in _SENT_ONCE} for r in requests]


def test_a_header_in_two_cases_or_also_set_by_the_sdk_goes_out_once(
    broker_url: str, qname: str
) -> None:
    """Header names are case-insensitive, and httpx sends every spelling a dict holds: the
    broker got Accept twice, and two Content-Types or Authorizations it may read either of."""
    requests: list[httpx.Request] = []
    with (
        httpx.Client(event_hooks={"request": [requests.append]}) as own,
        lanes.Lanes(
            broker_url, http_client=own, headers=_CALLER_HEADERS, bearer_token="the-token"
        ) as c,
    ):
        c.queue(qname).push([1])
        c.health()
    assert _sent(requests) == [_SENT_ONCE, _SENT_ONCE]  # a push, then a GET


def test_a_header_in_two_cases_or_also_set_by_the_sdk_goes_out_once_async(
    broker_url: str, qname: str
) -> None:
    """The same for AsyncLanes."""
    requests: list[httpx.Request] = []

    async def record(r: httpx.Request) -> None:
        requests.append(r)

    async def main() -> None:
        own = httpx.AsyncClient(event_hooks={"request": [record]})
        async with lanes.AsyncLanes(
            broker_url, http_client=own, headers=_CALLER_HEADERS, bearer_token="the-token"
        ) as c:
            await c.queue(qname).push([1])
            await c.health()
        await own.aclose()

    asyncio.run(main())
    assert _sent(requests) == [_SENT_ONCE, _SENT_ONCE]  # a push, then a GET
