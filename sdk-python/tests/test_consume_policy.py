"""The consume loop's and the iterators' pacing and error policy (docs/consuming.md §3 and §4)
over httpx.MockTransport, a fake broker that answers what each test scripts: pops that answer
empty at once although they asked to wait, acks refused with a given status, and where errors
go without an ``on_error`` callback. The real broker's behaviour is in the integration tests."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from datetime import datetime, timedelta, timezone

import httpx
import pytest

import lanes
from lanes import _protocol as P
from lanes._pacer import AckResend, PollPacer
from lanes._types import Message, PopResult

QUEUE = "q"


def a_message(i: int = 0) -> dict[str, object]:
    return {
        "id": f"m{i}",
        "transactionId": f"t{i}",
        "partitionId": "p",
        "partition": "Default",
        "leaseId": "lease-1",
        "data": i,
    }


class FakeBroker:
    """Pops answer one message the first time (when ``first_pop_has_a_message``), then 204 at
    once; acks answer ``ack_status`` (the first ``ack_failures`` of them when given, then 200).
    Counts the requests of each kind."""

    def __init__(
        self,
        ack_status: int = 200,
        first_pop_has_a_message: bool = False,
        ack_failures: int | None = None,
    ) -> None:
        self.ack_status = ack_status
        self.ack_failures = ack_failures
        self.message_left = first_pop_has_a_message
        self.pops = 0
        self.acks = 0

    def __call__(self, req: httpx.Request) -> httpx.Response:
        if req.url.path.startswith("/api/v1/pop"):
            self.pops += 1
            if self.message_left:
                self.message_left = False
                return httpx.Response(200, json={"messages": [a_message()], "leaseId": "lease-1"})
            return httpx.Response(204)
        if req.url.path.startswith("/api/v1/ack"):
            self.acks += 1
            if self.ack_status != 200 and (
                self.ack_failures is None or self.acks <= self.ack_failures
            ):
                return httpx.Response(self.ack_status, json={"error": "refused", "code": "x"})
            return httpx.Response(200, json={"transactionId": "t0", "success": True})
        if req.url.path.startswith("/api/v1/lease"):
            return httpx.Response(200, json={"leaseId": "lease-1", "success": True, "renewed": 1})
        return httpx.Response(404, json={"error": "no route", "code": "not_found"})


def sync_client(broker: FakeBroker) -> lanes.Lanes:
    return lanes.Lanes(
        "http://broker", http_client=httpx.Client(transport=httpx.MockTransport(broker))
    )


def async_client(broker: FakeBroker) -> lanes.AsyncLanes:
    return lanes.AsyncLanes(
        "http://broker", http_client=httpx.AsyncClient(transport=httpx.MockTransport(broker))
    )


# --- D1: a long poll that answers empty at once is paced ------------------------------------


def test_fast_empty_long_polls_back_off_from_100_ms_to_2_s_and_reset() -> None:
    now = [0.0]
    pacer = PollPacer(
        P.QueueSpec(queue=QUEUE, timeout_millis=30_000), lambda e, p: None, lambda: now[0]
    )
    empty = PopResult(messages=[])

    def answer(after: float, res: PopResult = empty) -> float:
        pacer.popping()
        now[0] += after
        return pacer.after_answer(res)

    assert [answer(0.01) for _ in range(7)] == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]
    assert answer(3.0) == 0.0  # waited a tenth of its 30 s timeout: a normal long poll
    assert answer(2.9) == 0.1  # starts over
    msg = Message.from_wire(a_message(), QUEUE)
    assert answer(0.01, PopResult(messages=[msg])) == 0.0
    assert answer(0.01) == 0.1  # a non-empty answer reset it too
    no_wait = PollPacer(P.QueueSpec(queue=QUEUE, wait=False), lambda e, p: None, lambda: 0.0)
    no_wait.popping()
    assert no_wait.after_answer(empty) == P.EMPTY_POLL_PAUSE  # the non-waiting rule is unchanged


def test_sync_consumer_paces_long_polls_that_answer_empty_at_once() -> None:
    broker = FakeBroker()
    with sync_client(broker) as c:
        cons = c.queue(QUEUE).consume(lambda m: None)
        time.sleep(1.0)
        cons.stop(5)
    # 100 + 200 + 400 ms of pauses fit in the second: 4 or 5 pops, not thousands.
    assert 2 <= broker.pops <= 6, broker.pops


async def test_async_consumer_and_iterator_pace_long_polls_that_answer_empty_at_once() -> None:
    broker = FakeBroker()
    async with async_client(broker) as c:
        cons = c.queue(QUEUE).consume(lambda m: None)
        await asyncio.sleep(1.0)
        await cons.stop(5)
        assert 2 <= broker.pops <= 6, broker.pops
        broker.pops = 0
        it = c.queue(QUEUE).messages()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(it.__anext__(), 1.0)
        assert 2 <= broker.pops <= 6, broker.pops


def test_sync_iterator_paces_long_polls_that_answer_empty_at_once() -> None:
    broker = FakeBroker()
    with sync_client(broker) as c, c.queue(QUEUE).messages(idle_timeout=1.0) as it:
        assert list(it) == []  # ends by idle after about a second
    assert 2 <= broker.pops <= 6, broker.pops


# --- D4: an ack refused for good ends the consumer; a transient failure does not -------------


def run_sync_consumer(broker: FakeBroker, errors: list[BaseException]) -> lanes.Consumer:
    c = sync_client(broker)
    cons = c.queue(QUEUE).autopilot(False).on_error(errors.append).consume(lambda m: None)
    deadline = time.monotonic() + 5
    while broker.acks == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)
    return cons


@pytest.mark.parametrize(
    ("status", "error"),
    [(403, lanes.PermissionDeniedError), (400, lanes.APIError), (501, lanes.APIError)],
)
def test_sync_consumer_ends_on_an_ack_refused_for_good(
    status: int, error: type[lanes.APIError]
) -> None:
    broker = FakeBroker(ack_status=status, first_pop_has_a_message=True)
    errors: list[BaseException] = []
    cons = run_sync_consumer(broker, errors)
    assert cons.done
    with pytest.raises(error):
        cons.closed(1)
    assert isinstance(cons.error, error) and cons.error.status == status
    assert errors == [cons.error]


# A 409 concerns that ack alone: sent once. A 503 (a broker that fails) outlasting the client's
# three attempts is resent after the loop's 1 s backoff until it lands, and the soft stop waits
# for it (docs/consuming.md §4).
@pytest.mark.parametrize(("status", "acks"), [(409, 1), (503, 4)])
def test_sync_consumer_goes_on_after_a_transient_ack_failure(status: int, acks: int) -> None:
    broker = FakeBroker(ack_status=status, first_pop_has_a_message=True, ack_failures=3)
    errors: list[BaseException] = []
    cons = run_sync_consumer(broker, errors)
    assert not cons.done
    cons.stop(5)
    assert cons.error is None
    assert [getattr(e, "status", None) for e in errors] == [status]
    assert broker.acks == acks


async def test_async_consumer_ends_on_a_403_ack_and_goes_on_after_a_503() -> None:
    for status, ends in ((403, True), (503, False)):
        broker = FakeBroker(ack_status=status, first_pop_has_a_message=True, ack_failures=3)
        errors: list[BaseException] = []
        async with async_client(broker) as c:
            cons = c.queue(QUEUE).on_error(errors.append).consume(lambda m: None)
            await asyncio.sleep(0.5)
            assert cons.done is ends, status
            if ends:
                with pytest.raises(lanes.PermissionDeniedError):
                    await cons.closed()
            else:
                await cons.stop(5)
        assert [getattr(e, "status", None) for e in errors] == [status]
        assert broker.acks == (1 if ends else 4), "a 503 ack is resent until it lands"


def test_sync_iterator_raises_a_403_ack_and_reports_a_503() -> None:
    broker = FakeBroker(ack_status=403, first_pop_has_a_message=True)
    with sync_client(broker) as c:
        it = c.queue(QUEUE).messages(idle_timeout=1.0)  # idle bounds the test without the rule
        assert next(it).data == 0
        with pytest.raises(lanes.PermissionDeniedError):
            next(it)  # acks the message in hand before popping again
        with pytest.raises(StopIteration):
            next(it)
    # A 503 outlasting the client's three attempts is reported and resent after the loop's 1 s
    # backoff until it lands, as in the consume loop; before, the iterator sent it once.
    broker = FakeBroker(ack_status=503, first_pop_has_a_message=True, ack_failures=3)
    errors: list[BaseException] = []
    with sync_client(broker) as c:
        it = c.queue(QUEUE).messages(on_error=errors.append, idle_timeout=0.3)
        assert [m.data for m in it] == [0]
    assert [getattr(e, "status", None) for e in errors] == [503]
    assert broker.acks == 4, "a 503 ack is resent until it lands"


async def test_async_iterator_raises_a_403_ack_and_reports_a_503() -> None:
    broker = FakeBroker(ack_status=403, first_pop_has_a_message=True)
    async with async_client(broker) as c:
        it = c.queue(QUEUE).messages(idle_timeout=1.0)
        assert (await it.__anext__()).data == 0
        with pytest.raises(lanes.PermissionDeniedError):
            await it.__anext__()
    broker = FakeBroker(ack_status=503, first_pop_has_a_message=True, ack_failures=3)
    errors: list[BaseException] = []
    async with async_client(broker) as c:
        it = c.queue(QUEUE).messages(on_error=errors.append, idle_timeout=0.3)
        assert [m.data async for m in it] == [0]
    assert [getattr(e, "status", None) for e in errors] == [503]
    assert broker.acks == 4, "a 503 ack is resent until it lands"


# --- D5: without on_error, loop errors are warnings on the `lanes` logger --------------------


def test_consume_loop_errors_are_logged_without_on_error(caplog: pytest.LogCaptureFixture) -> None:
    broker = FakeBroker(ack_status=503, first_pop_has_a_message=True, ack_failures=3)
    with caplog.at_level(logging.WARNING, logger="lanes"), sync_client(broker) as c:
        cons = c.queue(QUEUE).consume(lambda m: None)
        deadline = time.monotonic() + 5
        while broker.acks == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        cons.stop(5)
    lines = [r.getMessage() for r in caplog.records if r.name == "lanes"]
    assert any(line.startswith("lanes: consume: ack: ") and "503" in line for line in lines), lines


def closed_port_url() -> str:
    """A local URL nobody listens on: each pop's connection is refused, a transient failure."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def pop_warnings(caplog: pytest.LogCaptureFixture, loop: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "lanes" and r.getMessage().startswith(f"lanes: {loop}: pop")
    ]


async def test_a_failed_pop_is_logged_alike_by_the_loop_and_the_iterators(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A failed pop that is waited out is one line, "lanes: <consume | messages>: pop: <error>",
    from the loop and both iterators alike, as TypeScript words it (the iterators added the
    pause, "pop (popping again in 1.0 s): ...", which no other line or SDK does)."""
    url = closed_port_url()

    async def until_logged(loop: str, count: int) -> None:
        for _ in range(1000):  # 10 s at most
            if len(pop_warnings(caplog, loop)) >= count:
                return
            await asyncio.sleep(0.01)

    with caplog.at_level(logging.WARNING, logger="lanes"):
        with lanes.Lanes(url) as c:
            cons = c.queue(QUEUE).consume(lambda m: None)
            await until_logged("consume", 1)
            cons.stop(5)
            it = c.queue(QUEUE).messages()
            iterating = asyncio.get_running_loop().run_in_executor(None, lambda: list(it))
            await until_logged("messages", 1)
            it.stop()
            assert await iterating == []
        async with lanes.AsyncLanes(url) as ac:

            async def drain() -> None:
                async for _ in ac.queue(QUEUE).messages():
                    pass

            task = asyncio.create_task(drain())
            await until_logged("messages", 2)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    loop_lines, iter_lines = pop_warnings(caplog, "consume"), pop_warnings(caplog, "messages")
    assert loop_lines, "the loop logged no failed pop"
    assert len(iter_lines) == 2, f"each iterator logs its failed pop once: {iter_lines}"
    # The error's own text differs between the blocking and asyncio clients' transports.
    error = f"lanes: GET /api/v1/pop/queue/{QUEUE}: ConnectError("
    assert all(line.startswith(f"lanes: consume: pop: {error}") for line in loop_lines), loop_lines
    assert all(line.startswith(f"lanes: messages: pop: {error}") for line in iter_lines), iter_lines


async def test_async_consume_loop_errors_go_to_the_clients_logger() -> None:
    seen: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    logger = logging.getLogger("test-consume-policy")
    logger.addHandler(Collect())
    broker = FakeBroker(ack_status=503, first_pop_has_a_message=True, ack_failures=3)
    transport = httpx.MockTransport(broker)
    async with lanes.AsyncLanes(
        "http://broker", http_client=httpx.AsyncClient(transport=transport), logger=logger
    ) as c:
        cons = c.queue(QUEUE).consume(lambda m: None)
        await asyncio.sleep(0.5)
        await cons.stop(5)
    assert [s for s in seen if s.startswith("lanes: consume: ack: ")], seen


def test_ack_resend_rules_shared_by_the_loop_and_the_iterators() -> None:
    """A 5xx or no answer waits 1 s, 2 s, 4 s …; a 429 its hint (else 1 s), left out of that
    count; a 409 (or another answer that is not a broker failure) is not resent, and nothing
    is resent whose next attempt would come within 1 s of the lease's expiry."""
    resend = AckResend(datetime.now(timezone.utc) + timedelta(seconds=9))
    unavailable = lanes.InternalServerError(503, "down")
    assert resend.after_error(unavailable) == 1.0
    assert resend.after_error(lanes.RateLimitError(429, "busy", retry_after=0.3)) == 0.3
    assert resend.after_error(lanes.RateLimitError(429, "busy")) == 1.0
    assert resend.after_error(lanes.APIConnectionError("reset")) == 2.0
    assert resend.after_error(unavailable) == 4.0
    assert resend.after_error(unavailable) is None, "8 s + 1 s would reach the 9 s lease's end"
    assert (
        AckResend(datetime.now(timezone.utc) + timedelta(seconds=60)).after_error(
            lanes.ConflictError(409, "gone")
        )
        is None
    )


def test_cut_long_poll_rounds_up_to_whole_milliseconds() -> None:
    """The long poll of a pop with idle time left is cut to it, rounded up to whole milliseconds
    so it never becomes 0 (which would not wait at all); other pops are sent as they were."""
    spec = P.QueueSpec(queue=QUEUE, timeout_millis=5000)
    assert P.cut_long_poll(spec, 0.0003).timeout_millis == 1
    assert P.cut_long_poll(spec, 0.2992).timeout_millis == 300
    assert P.cut_long_poll(spec, 60.0) is spec
    assert P.cut_long_poll(spec, float("inf")) is spec
    no_wait = P.QueueSpec(queue=QUEUE, wait=False, timeout_millis=5000)
    assert P.cut_long_poll(no_wait, 0.3) is no_wait
    at_once = P.QueueSpec(queue=QUEUE, timeout_millis=0)
    assert P.cut_long_poll(at_once, 0.3) is at_once
