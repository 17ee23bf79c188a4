"""AsyncLanes cuts its consumer's and iterator's pops at a stop by half-closing their connection,
as the blocking client does (docs/consuming.md §5): the broker answers 499 at once and claims
nothing, and an answer it had already written still arrives whole and is released with
``retry``. Against a real broker (LANES_TEST_URL)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import Awaitable, Callable

import httpx

import lanes

from .proxying import SlowAnswerProxy, stop_an_async_iterator_with_an_answer_on_its_way


async def test_a_soft_stop_releases_the_answer_the_broker_wrote_before_it(
    broker_url: str, qname: str
) -> None:
    # The proxy holds each answer 0.6 s: the consumer's parked long poll has got the message
    # (the broker wrote its answer) when the consumer stops. The stop cancelled the pop, which
    # closed its connection: the answer was lost and the message stayed leased for the whole
    # 60 s lease. The stop now half-closes it: the answer arrives and is released.
    proxy = SlowAnswerProxy(broker_url, 0.6)
    handled: list[object] = []

    async def handler(m: lanes.Message) -> None:
        handled.append(m.data)

    try:
        async with lanes.AsyncLanes(proxy.url) as c:
            q = c.queue(qname).lease_seconds(60).timeout_millis(20000)
            cons = q.consume(handler)
            await asyncio.sleep(1.0)  # the long poll is parked on the broker
            async with lanes.AsyncLanes(broker_url) as pusher:
                await pusher.queue(qname).push(["late"])
            await asyncio.sleep(0.2)  # the broker wrote the answer; the proxy holds it
            t0 = time.monotonic()
            await cons.stop(10)
            stop_took = time.monotonic() - t0
    finally:
        proxy.close()
    assert handled == []
    assert stop_took < 2.5
    async with lanes.AsyncLanes(broker_url) as c:
        got = await c.queue(qname).autopilot(False).timeout_millis(3000).pop()
        assert [m.data for m in got] == ["late"], "held by the stopped consumer's cut pop"
        await c.ack(got)


async def test_a_soft_stop_ends_a_parked_pop_at_once_and_it_claims_nothing(
    broker_url: str, qname: str
) -> None:
    async with lanes.AsyncLanes(broker_url) as c:
        cons = c.queue(qname).timeout_millis(20000).consume(lambda m: None)
        await asyncio.sleep(0.5)
        t0 = time.monotonic()
        await cons.stop(10)
        assert time.monotonic() - t0 < 1
        await c.queue(qname).push(["after"])
        got = await c.queue(qname).wait(False).pop()
        assert [m.data for m in got] == ["after"]
        await c.ack(got)


async def test_the_async_iterators_stop_cuts_a_parked_pop(broker_url: str, qname: str) -> None:
    # stop() waited out the pop under way: up to its 20 s long poll.
    async with lanes.AsyncLanes(broker_url) as c:
        it = c.queue(qname).timeout_millis(20000).messages()

        async def iterate() -> list[object]:
            return [m.data async for m in it]

        task = asyncio.ensure_future(iterate())
        await asyncio.sleep(0.5)  # the pop is parked on the broker
        t0 = time.monotonic()
        it.stop()
        got = await asyncio.wait_for(task, 5)
        took = time.monotonic() - t0
        assert (got, took < 1) == ([], True), took
        await c.queue(qname).push(["after"])  # the cut pop claimed nothing
        again = await c.queue(qname).wait(False).pop()
        assert [m.data for m in again] == ["after"]
        await c.ack(again)


async def test_the_async_iterators_stop_releases_an_answer_the_broker_wrote(
    broker_url: str, qname: str
) -> None:
    proxy = SlowAnswerProxy(broker_url, 0.6)
    try:
        async with lanes.AsyncLanes(proxy.url) as c:
            it = c.queue(qname).lease_seconds(60).timeout_millis(20000).messages()

            async def iterate() -> list[object]:
                return [m.data async for m in it]

            task = asyncio.ensure_future(iterate())
            await asyncio.sleep(1.0)
            async with lanes.AsyncLanes(broker_url) as pusher:
                await pusher.queue(qname).push(["late"])
            await asyncio.sleep(0.2)
            it.stop()
            assert await asyncio.wait_for(task, 5) == []
    finally:
        proxy.close()
    async with lanes.AsyncLanes(broker_url) as c:
        got = await c.queue(qname).autopilot(False).timeout_millis(3000).pop()
        assert [m.data for m in got] == ["late"]
        await c.ack(got)


async def test_on_a_callers_http_client_a_stop_still_ends_the_consumer(
    broker_url: str, qname: str
) -> None:
    # The SDK cannot reach the connections of a caller's http_client: the stop cancels the pop,
    # as before (a parked pop gives its claim back; nothing is cut).
    async with httpx.AsyncClient() as http, lanes.AsyncLanes(broker_url, http_client=http) as c:
        cons = c.queue(qname).timeout_millis(20000).consume(lambda m: None)
        await asyncio.sleep(0.5)
        t0 = time.monotonic()
        await cons.stop(10)
        assert time.monotonic() - t0 < 1
        await c.queue(qname).push(["after"])
        got = await c.queue(qname).wait(False).pop()
        assert [m.data for m in got] == ["after"]
        await c.ack(got)


async def test_a_stop_ends_a_pop_waiting_to_retry_at_once(broker_url: str, qname: str) -> None:
    # The pop's first attempt got a 503 asking for 5 s: the cut ends the wait between attempts
    # too (there is no connection to half-close then), and no second attempt goes out.
    run = f"py-{uuid.uuid4().hex[:12]}"
    faults = f"{broker_url}/__test/faults/{run}"
    rules = [
        {
            "method": "GET",
            "path": f"/api/v1/pop/queue/{qname}",
            "responses": [{"status": 503, "headers": {"Retry-After": "5"}}],
        }
    ]
    async with httpx.AsyncClient() as script:
        assert (await script.put(faults, content=json.dumps({"rules": rules}))).status_code == 204
        try:
            async with lanes.AsyncLanes(broker_url, headers={"X-Lanes-Test-Run": run}) as c:
                cons = c.queue(qname).consume(lambda m: None)
                await asyncio.sleep(0.5)
                t0 = time.monotonic()
                await cons.stop(10)
                assert time.monotonic() - t0 < 0.5
            pops = (await script.get(faults)).json()["rules"][0]["attempts"]
        finally:
            await script.delete(faults)
    assert pops == 1


async def test_aclose_right_after_an_iterators_stop_waits_for_its_release(
    broker_url: str, qname: str
) -> None:
    # The program stops the iterator and closes the client at once, not awaiting the iterating
    # task: the cut pop's answer (held 0.6 s by the proxy) is still on its way, and closing the
    # pool under it would leave the message leased for 60 s. aclose() waits (at most 2 s) for
    # the iterator to release it.
    proxy = SlowAnswerProxy(broker_url, 0.6)
    try:
        c = lanes.AsyncLanes(proxy.url)
        task = await stop_an_async_iterator_with_an_answer_on_its_way(c, broker_url, qname)
        t0 = time.monotonic()
        await c.aclose()
        assert time.monotonic() - t0 < 2.5
        assert await asyncio.wait_for(task, 5) == []
    finally:
        proxy.close()
    async with lanes.AsyncLanes(broker_url) as c:
        got = await c.queue(qname).autopilot(False).timeout_millis(3000).pop()
        assert [m.data for m in got] == ["late"], "held by the stopped iterator's cut pop"
        await c.ack(got)


async def test_aclose_does_not_wait_for_a_stopped_iterator_whose_task_was_cancelled(
    broker_url: str, qname: str
) -> None:
    # The program stops the iterator mid-pop and cancels the iterating task: the cancellation
    # ends the pop, and the iterator, left without `async with`, is never closed. aclose() still
    # waited its whole 2 s for that iterator's release, which nothing would send.
    c = lanes.AsyncLanes(broker_url)
    it = c.queue(qname).timeout_millis(20000).messages()

    async def iterate() -> list[object]:
        return [m.data async for m in it]

    task = asyncio.ensure_future(iterate())
    await asyncio.sleep(0.5)  # the long poll is parked on the broker
    it.stop()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    t0 = time.monotonic()
    await c.aclose()
    took = time.monotonic() - t0
    assert took < 0.5, took


def _slow_bearer_token() -> tuple[asyncio.Event, Callable[[], Awaitable[str]]]:
    """A bearer token function that takes 0.5 s, and the event it sets when first asked: a stop
    made once it is set lands before the pop's request goes out."""
    asked = asyncio.Event()

    async def slow_token() -> str:
        asked.set()
        await asyncio.sleep(0.5)
        return "t"

    return asked, slow_token


async def test_the_async_iterators_stop_before_its_pop_is_sent_ends_at_once(
    broker_url: str, qname: str
) -> None:
    # A stop that comes after the pop's attempt began but before its request went out (here,
    # while an async bearer token function is asked; a new connection's dial is the same
    # window) refused the write on the cut. httpcore takes a write error for a server that
    # answered early and reads the answer: on a connection where nothing was sent, it waited
    # out the whole attempt (the 10 s long poll and more).
    asked, slow_token = _slow_bearer_token()
    async with lanes.AsyncLanes(broker_url, bearer_token=slow_token) as c:
        it = c.queue(qname).timeout_millis(10000).messages()

        async def iterate() -> list[object]:
            return [m.data async for m in it]

        task = asyncio.ensure_future(iterate())
        await asyncio.wait_for(asked.wait(), 5)
        t0 = time.monotonic()
        it.stop()
        got = await asyncio.wait_for(task, 15)
        took = time.monotonic() - t0
        assert (got, took < 2) == ([], True), took


async def test_a_soft_stop_before_the_consumers_pop_is_sent_ends_at_once(
    broker_url: str, qname: str
) -> None:
    # The same window for the consume loop: its stop waited the cut's 2 s, then cancelled.
    asked, slow_token = _slow_bearer_token()
    async with lanes.AsyncLanes(broker_url, bearer_token=slow_token) as c:
        cons = c.queue(qname).timeout_millis(10000).consume(lambda m: None)
        await asyncio.wait_for(asked.wait(), 5)
        t0 = time.monotonic()
        await cons.stop(10)
        took = time.monotonic() - t0
        assert took < 1, took


async def test_a_soft_stop_cancels_a_cut_pop_that_gets_no_answer_within_the_grace(
    broker_url: str, qname: str
) -> None:
    # Behind a proxy that does not pass the half-close on, the cut pop gets no answer: the stop
    # cancels it after CUT_WAIT_S (2 s). The stop asked the still-pending pop for its exception
    # right after requesting its cancellation: asyncio's InvalidStateError ended the worker, and
    # the consumer with it, as failed.
    proxy = SlowAnswerProxy(broker_url, 0)
    proxy.deaf = True
    errors: list[BaseException] = []
    try:
        async with lanes.AsyncLanes(proxy.url) as c:
            cons = (
                c.queue(qname).timeout_millis(20000).on_error(errors.append).consume(lambda m: None)
            )
            await asyncio.sleep(0.5)  # the long poll is parked on the broker
            t0 = time.monotonic()
            await cons.stop(10)
            took = time.monotonic() - t0
            assert cons.error is None, repr(cons.error)
    finally:
        proxy.close()
    assert errors == []
    assert 1.9 <= took < 4, took


async def test_the_async_iterators_stop_ends_a_cut_pop_that_gets_no_answer_within_the_grace(
    broker_url: str, qname: str
) -> None:
    # Behind a proxy that does not pass the half-close on, the cut pop got no answer and the
    # iteration waited out the long poll (5.5 s of its 6 s here). Its connection is now closed
    # CUT_WAIT_S (2 s) after the stop, as the consume loop cancels its pop then.
    proxy = SlowAnswerProxy(broker_url, 0)
    proxy.deaf = True
    try:
        async with lanes.AsyncLanes(proxy.url) as c:
            it = c.queue(qname).timeout_millis(6000).messages()

            async def iterate() -> list[object]:
                return [m.data async for m in it]

            task = asyncio.ensure_future(iterate())
            await asyncio.sleep(0.5)  # the pop is parked on the broker
            t0 = time.monotonic()
            it.stop()
            got = await asyncio.wait_for(task, 15)
            took = time.monotonic() - t0
    finally:
        proxy.close()
    assert got == []
    assert 1.9 <= took < 4, took
