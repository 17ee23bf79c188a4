"""The message iterators (blocking and asyncio) resend a failed ack while the pop's lease lasts,
as the consume loop does (docs/consuming.md §4), against a real broker (LANES_TEST_URL) whose
fault scripts fail the ack calls (scripts/test-broker.sh serves them when auth is off). The same
cases run in sdk-go (iterator_integration_test.go) and sdk-js (iterator-acks.test.ts)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

import lanes


@pytest.fixture
def failing_acks(broker_url: str) -> Iterator[tuple[str, dict[str, str]]]:
    """A fault-script run on the test broker (deleted after the test); its headers, given to a
    client, make the scripted answers apply to that client's ack calls."""
    run = f"py-{uuid.uuid4().hex[:12]}"
    yield run, {"X-Lanes-Test-Run": run}
    httpx.delete(f"{broker_url}/__test/faults/{run}")


def script_acks(broker_url: str, run: str, responses: list[dict[str, object]]) -> None:
    rules = [{"method": "POST", "path": "/api/v1/ack*", "responses": responses}]
    r = httpx.put(f"{broker_url}/__test/faults/{run}", content=json.dumps({"rules": rules}))
    assert r.status_code == 204, (
        "the test broker serves no fault scripts: start it with scripts/test-broker.sh"
        " (LANES_TEST_FAULTS on)"
    )


def statuses(errors: list[BaseException]) -> list[int | None]:
    return [getattr(e, "status", None) for e in errors]


def redelivered(broker_url: str, qname: str, wait_ms: int) -> list[object]:
    """What a long poll of wait_ms finds: a pop whose ack never landed is back after its lease."""
    with lanes.Lanes(broker_url) as c:
        q = c.queue(qname).batch(10).wait(True).timeout_millis(wait_ms)
        return [m.data for m in q.pop()]


# Before, the iterator sent the acks once and all three messages came back after the lease.
def test_a_failed_ack_is_resent_until_it_lands(
    broker_url: str, qname: str, failing_acks: tuple[str, dict[str, str]]
) -> None:
    run, headers = failing_acks
    script_acks(broker_url, run, [{"status": 503, "times": 2}, {"pass": True}])
    errors: list[BaseException] = []
    with lanes.Lanes(broker_url, retry_attempts=0, max_429_attempts=0, headers=headers) as c:
        c.queue(qname).push([1, 2, 3])
        q = c.queue(qname).lease_seconds(6).batch(10).limit(3).on_error(errors.append)
        start = time.monotonic()
        with q.messages() as it:
            handled = [m.data for m in it]
        took = time.monotonic() - start
    assert handled == [1, 2, 3]
    assert redelivered(broker_url, qname, 8000) == [], "the failed ack was not resent"
    assert statuses(errors) == [503, 503], "each failed call reported"
    assert took >= 3, "resent after 1 s, then after 2 s"


async def test_async_a_failed_ack_is_resent_until_it_lands(
    broker_url: str, qname: str, failing_acks: tuple[str, dict[str, str]]
) -> None:
    run, headers = failing_acks
    script_acks(broker_url, run, [{"status": 503, "times": 2}, {"pass": True}])
    errors: list[BaseException] = []
    async with lanes.AsyncLanes(
        broker_url, retry_attempts=0, max_429_attempts=0, headers=headers
    ) as c:
        await c.queue(qname).push([1, 2, 3])
        q = c.queue(qname).lease_seconds(6).batch(10).limit(3).on_error(errors.append)
        async with q.messages() as it:
            handled = [m.data async for m in it]
    assert handled == [1, 2, 3]
    assert redelivered(broker_url, qname, 8000) == [], "the failed ack was not resent"
    assert statuses(errors) == [503, 503]


# Attempts at 0 s and 1 s; the next would be at 3 s, when the 3 s lease ends: the pop redelivers.
def test_a_failed_ack_is_not_resent_past_its_lease(
    broker_url: str, qname: str, failing_acks: tuple[str, dict[str, str]]
) -> None:
    run, headers = failing_acks
    script_acks(broker_url, run, [{"status": 503, "times": 10}])
    errors: list[BaseException] = []
    with lanes.Lanes(broker_url, retry_attempts=0, max_429_attempts=0, headers=headers) as c:
        c.queue(qname).push([1, 2, 3])
        q = c.queue(qname).lease_seconds(3).batch(10).limit(3).on_error(errors.append)
        start = time.monotonic()
        with q.messages() as it:
            handled = [m.data for m in it]
        took = time.monotonic() - start
    assert handled == [1, 2, 3]
    assert statuses(errors) == [503, 503]
    assert took < 2.5, "no attempt past the lease"
    assert redelivered(broker_url, qname, 6000) == [1, 2, 3]


# Two 429s wait their 300 ms hint and are left out of the backoff's count, so the 503 after
# them waits 1 s (4 s had they counted); then the ack lands and nothing redelivers.
def test_a_429_on_an_ack_is_waited_out_by_its_hint(
    broker_url: str, qname: str, failing_acks: tuple[str, dict[str, str]]
) -> None:
    run, headers = failing_acks
    hinted = {"status": 429, "headers": {"retry-after-ms": "300"}, "times": 2}
    script_acks(broker_url, run, [hinted, {"status": 503}, {"pass": True}])
    errors: list[BaseException] = []
    with lanes.Lanes(broker_url, retry_attempts=0, max_429_attempts=0, headers=headers) as c:
        c.queue(qname).push([1, 2, 3])
        q = c.queue(qname).lease_seconds(4).batch(10).limit(3).on_error(errors.append)
        start = time.monotonic()
        with q.messages() as it:
            handled = [m.data for m in it]
        took = time.monotonic() - start
    assert handled == [1, 2, 3]
    assert statuses(errors) == [429, 429, 503]
    assert 1.5 <= took < 3, "300 ms, 300 ms, then 1 s"
    assert redelivered(broker_url, qname, 5000) == [], "the failed ack was not resent"


# Leaving (break, or the end at the limit) resends a failed ack only within 5 s of leaving, not
# for the rest of a 30 s lease: attempts at 0 s, 1 s and 3 s; the next (7 s) is not made, and
# the messages redeliver after their lease. Before, leaving waited 15 s (0, 1, 3, 7 and 15 s).
@pytest.mark.parametrize("how", ["break", "limit"])
def test_leaving_resends_a_failed_ack_for_at_most_5_s(
    broker_url: str, qname: str, failing_acks: tuple[str, dict[str, str]], how: str
) -> None:
    run, headers = failing_acks
    script_acks(broker_url, run, [{"status": 503, "times": 20}])
    errors: list[BaseException] = []
    with lanes.Lanes(broker_url, retry_attempts=0, max_429_attempts=0, headers=headers) as c:
        c.queue(qname).push([1, 2, 3])
        q = c.queue(qname).lease_seconds(30).batch(10).on_error(errors.append)
        if how == "limit":
            q = q.limit(3)
        start = time.monotonic()
        with q.messages() as it:
            for _ in it:
                if how == "break":
                    break
        took = time.monotonic() - start
    assert statuses(errors) == [503, 503, 503], "attempts at 0 s, 1 s and 3 s"
    assert took < 5, "resent past the leave's 5 s"


async def test_async_leaving_resends_a_failed_ack_for_at_most_5_s(
    broker_url: str, qname: str, failing_acks: tuple[str, dict[str, str]]
) -> None:
    run, headers = failing_acks
    script_acks(broker_url, run, [{"status": 503, "times": 20}])
    errors: list[BaseException] = []
    async with lanes.AsyncLanes(
        broker_url, retry_attempts=0, max_429_attempts=0, headers=headers
    ) as c:
        await c.queue(qname).push([1, 2, 3])
        q = c.queue(qname).lease_seconds(30).batch(10).on_error(errors.append)
        start = time.monotonic()
        async with q.messages() as it:
            async for _ in it:
                break
        took = time.monotonic() - start
    assert statuses(errors) == [503, 503, 503], "attempts at 0 s, 1 s and 3 s"
    assert took < 5, "resent past the leave's 5 s"


# stop(), from any thread, ends the blocking iterator as aborting the signal ends TypeScript's:
# here it cuts short the wait before the first resend of the leave's failed ack.
def test_stop_abandons_the_resending_of_an_ack(
    broker_url: str, qname: str, failing_acks: tuple[str, dict[str, str]]
) -> None:
    run, headers = failing_acks
    script_acks(broker_url, run, [{"status": 503, "times": 10}])
    errors: list[BaseException] = []
    with lanes.Lanes(broker_url, retry_attempts=0, max_429_attempts=0, headers=headers) as c:
        c.queue(qname).push([1, 2])

        def failed(e: BaseException) -> None:
            errors.append(e)
            threading.Timer(0.2, it.stop).start()

        it = c.queue(qname).lease_seconds(30).batch(10).limit(2).messages(on_error=failed)
        start = time.monotonic()
        with it:
            handled = [m.data for m in it]
        took = time.monotonic() - start
    assert handled == [1, 2]
    assert statuses(errors) == [503]
    assert took < 0.8, "stop() ended the 1 s wait for the resend"


# stop() from another thread ends an iteration parked in a long poll on an empty queue once that
# poll answers (500 ms here), after acking what was handled.
def test_stop_ends_an_iteration_from_another_thread(broker_url: str, qname: str) -> None:
    with lanes.Lanes(broker_url) as c:
        c.queue(qname).push([1])
        it = c.queue(qname).lease_seconds(30).timeout_millis(500).messages()
        handled: list[object] = []

        def iterate() -> None:
            with it:
                handled.extend(m.data for m in it)

        iterating = threading.Thread(target=iterate, daemon=True)
        iterating.start()
        deadline = time.monotonic() + 5
        while not handled and time.monotonic() < deadline:
            time.sleep(0.01)
        assert handled == [1]
        it.stop()
        iterating.join(timeout=2)
        assert not iterating.is_alive(), "stop() did not end the iteration"
        assert c.queue(qname).depth().pending == 0, "the handled message was not acked"


# The asyncio iterator's stop(), from another task, ends it as the blocking one's does: here it
# cuts short the wait before the first resend of the leave's failed ack.
async def test_async_stop_abandons_the_resending_of_an_ack(
    broker_url: str, qname: str, failing_acks: tuple[str, dict[str, str]]
) -> None:
    run, headers = failing_acks
    script_acks(broker_url, run, [{"status": 503, "times": 10}])
    errors: list[BaseException] = []
    stopping: list[asyncio.Task[None]] = []
    async with lanes.AsyncLanes(
        broker_url, retry_attempts=0, max_429_attempts=0, headers=headers
    ) as c:
        await c.queue(qname).push([1, 2])

        async def stop_soon() -> None:
            await asyncio.sleep(0.2)
            it.stop()

        def failed(e: BaseException) -> None:
            errors.append(e)
            stopping.append(asyncio.ensure_future(stop_soon()))

        it = c.queue(qname).lease_seconds(30).batch(10).limit(2).messages(on_error=failed)
        start = time.monotonic()
        async with it:
            handled = [m.data async for m in it]
        took = time.monotonic() - start
    assert handled == [1, 2]
    assert statuses(errors) == [503]
    assert took < 0.8, "stop() ended the 1 s wait for the resend"


# stop() from another task ends an asyncio iteration parked in a long poll on an empty queue
# once that poll answers (500 ms here), after acking what was handled.
async def test_async_stop_ends_an_iteration_from_another_task(broker_url: str, qname: str) -> None:
    async with lanes.AsyncLanes(broker_url) as c:
        await c.queue(qname).push([1])
        it = c.queue(qname).lease_seconds(30).timeout_millis(500).messages()
        handled: list[object] = []
        first = asyncio.Event()

        async def iterate() -> None:
            async with it:
                async for m in it:
                    handled.append(m.data)
                    first.set()

        iterating = asyncio.ensure_future(iterate())
        await asyncio.wait_for(first.wait(), 5)
        assert handled == [1]
        it.stop()
        await asyncio.wait_for(iterating, 2)
        assert (await c.queue(qname).depth()).pending == 0, "the handled message was not acked"


# stop() ends the asyncio iteration after the message in hand: it is acked completed, and the
# rest of the pop is released with retry, so another pop gets it at once, not after the lease.
async def test_async_stop_ends_after_the_message_in_hand(broker_url: str, qname: str) -> None:
    async with lanes.AsyncLanes(broker_url) as c:
        await c.queue(qname).push([1, 2, 3])
        it = c.queue(qname).lease_seconds(30).batch(10).messages()

        async def stop_from_another_task() -> None:
            it.stop()

        handled: list[object] = []
        async with it:
            async for m in it:
                handled.append(m.data)
                await asyncio.ensure_future(stop_from_another_task())
        assert handled == [1]
        rest = await c.queue(qname).batch(10).wait(False).pop()
        assert [m.data for m in rest] == [2, 3]
