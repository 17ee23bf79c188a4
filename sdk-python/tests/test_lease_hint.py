"""A pop's answer names its lease (``leaseSeconds``, ``leaseExpiresAt``); the consume loop and the
iterators (blocking and asyncio) count with it instead of assuming 60 s, against a real broker
(LANES_TEST_URL) whose fault scripts fail the ack calls. The same cases run in sdk-go
(leasehint_integration_test.go) and sdk-js (leasehint.test.ts)."""

from __future__ import annotations

import time
from datetime import datetime, timezone

import lanes
from tests.test_iterator_acks import failing_acks as failing_acks  # the fixture, by name
from tests.test_iterator_acks import redelivered, script_acks, statuses


def test_pop_result_names_the_queues_lease(broker_url: str, qname: str) -> None:
    with lanes.Lanes(broker_url) as c:
        assert c.queue(qname).configure({"leaseTime": 120}).configured
        c.queue(qname).push([1])
        res = c.queue(qname).wait(False).pop_result()
    assert len(res.messages) == 1
    assert res.lease_seconds == 120
    assert res.lease_expires_at is not None
    ends_in = (res.lease_expires_at - datetime.now(timezone.utc)).total_seconds()
    assert 110 < ends_in < 130


# Without lease_seconds, the iterator counts with the queue's 3 s lease the answer names: attempts
# at 0 s and 1 s, the next would be at 3 s. Before, it assumed 60 s and resent past the lease (a
# third attempt at 3 s, cut only by the 5 s bound on leaving).
def test_a_failed_ack_is_not_resent_past_the_queues_lease(
    broker_url: str, qname: str, failing_acks: tuple[str, dict[str, str]]
) -> None:
    run, headers = failing_acks
    script_acks(broker_url, run, [{"status": 503, "times": 10}])
    errors: list[BaseException] = []
    with lanes.Lanes(broker_url, retry_attempts=0, max_429_attempts=0, headers=headers) as c:
        assert c.queue(qname).configure({"leaseTime": 3}).configured
        c.queue(qname).push([1, 2, 3])
        q = c.queue(qname).batch(10).limit(3).on_error(errors.append)
        start = time.monotonic()
        with q.messages() as it:
            handled = [m.data for m in it]
        took = time.monotonic() - start
    assert handled == [1, 2, 3]
    assert statuses(errors) == [503, 503]
    assert took < 2.5, "no attempt past the lease"
    assert redelivered(broker_url, qname, 6000) == [1, 2, 3]


async def test_async_a_failed_ack_is_not_resent_past_the_queues_lease(
    broker_url: str, qname: str, failing_acks: tuple[str, dict[str, str]]
) -> None:
    run, headers = failing_acks
    script_acks(broker_url, run, [{"status": 503, "times": 10}])
    errors: list[BaseException] = []
    async with lanes.AsyncLanes(
        broker_url, retry_attempts=0, max_429_attempts=0, headers=headers
    ) as c:
        assert (await c.queue(qname).configure({"leaseTime": 3})).configured
        await c.queue(qname).push([1, 2, 3])
        q = c.queue(qname).batch(10).limit(3).on_error(errors.append)
        start = time.monotonic()
        async with q.messages() as it:
            handled = [m.data async for m in it]
        took = time.monotonic() - start
    assert handled == [1, 2, 3]
    assert statuses(errors) == [503, 503]
    assert took < 2.5, "no attempt past the lease"
    assert redelivered(broker_url, qname, 6000) == [1, 2, 3]


# The consume loop, likewise: its soft stop at the limit waits for the resending, which ends
# before the 3 s lease does. Before, it resent for the rest of an assumed 60 s lease.
def test_the_consume_loop_does_not_resend_an_ack_past_the_queues_lease(
    broker_url: str, qname: str, failing_acks: tuple[str, dict[str, str]]
) -> None:
    run, headers = failing_acks
    script_acks(broker_url, run, [{"status": 503, "times": 10}])
    errors: list[BaseException] = []
    with lanes.Lanes(broker_url, retry_attempts=0, max_429_attempts=0, headers=headers) as c:
        assert c.queue(qname).configure({"leaseTime": 3}).configured
        c.queue(qname).push([1, 2, 3])
        handled: list[object] = []
        start = time.monotonic()
        cons = c.queue(qname).batch(10).limit(3).on_error(errors.append)
        cons.consume(lambda m: handled.append(m.data)).closed(timeout=30)
        took = time.monotonic() - start
    assert handled == [1, 2, 3]
    assert statuses(errors) == [503, 503]
    assert took < 2.5, "resent past the lease"
    assert redelivered(broker_url, qname, 6000) == [1, 2, 3]
