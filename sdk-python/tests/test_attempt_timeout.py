"""The per-attempt timeout bounds the whole attempt, reading the answer included
(docs/retries.md §1), as in Go and TS: an answer the broker sent whole but that reaches the
client a byte at a time, its head or its body, is cut at the timeout, and a push is resent (it
answers duplicate). httpx's own timeout bounds each read only, so such an answer used to outlast
it. And a timeout that ends the connect proves the request never left (docs/retries.md §5)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

import lanes

from .proxying import forward, send_head

# The attempt timeout of the tests that cut an attempt: an attempt that nothing slows (the retry
# after a cut, a push before a pause) must end within it on a loaded CI machine too.
ATTEMPT_S = 2.0
# A cut attempt and its retry end within this; a trickled answer takes far longer to come in
# whole (see below), so a call that ends in time was cut.
CUT_BOUND_S = 2 * ATTEMPT_S + 4.0
# A byte of a trickled answer every so often: well inside ATTEMPT_S, so httpx's own timeout, on
# each read, never ends the attempt.
TRICKLE_BODY_S = 0.1  # a push answer (about 160 bytes) takes about 16 s
TRICKLE_HEAD_S = 0.2  # an answer's head (about 70 bytes) takes about 14 s


class Trickler:
    """Forwards to the broker; for the next ``slow`` requests it hands the answer's body on a
    byte every TRICKLE_BODY_S, for the next ``slow_head`` ones the answer's head a byte every
    TRICKLE_HEAD_S, and it holds the next ``held`` answers
    ``hold`` seconds before sending them. ``connections`` counts the connections."""

    def __init__(self, broker: str) -> None:
        self.slow = 0
        self.slow_head = 0
        self.seen = 0
        self.held = 0
        self.hold = 0.0
        self.connections = 0
        trickler = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the broker

            def setup(self) -> None:
                trickler.connections += 1
                super().setup()

            def _forward(self) -> None:
                answer = forward(self, broker)
                trickler.seen += 1
                slow = trickler.slow > 0
                trickler.slow -= int(slow)
                if trickler.held > 0:
                    trickler.held -= 1
                    time.sleep(trickler.hold)
                if trickler.slow_head > 0:
                    trickler.slow_head -= 1
                    self._trickle_head(answer)
                    return
                send_head(self, answer)
                try:
                    if not slow:
                        self.wfile.write(answer.content)
                        return
                    for byte in answer.content:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                        time.sleep(TRICKLE_BODY_S)
                except OSError:
                    self.close_connection = True  # the client gave up on the answer

            def _trickle_head(self, answer: httpx.Response) -> None:
                head = (
                    f"HTTP/1.1 {answer.status_code} {answer.reason_phrase}\r\n"
                    f"Content-Type: {answer.headers.get('content-type', '')}\r\n"
                    f"Content-Length: {len(answer.content)}\r\n\r\n"
                ).encode()
                try:
                    for byte in head:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                        time.sleep(TRICKLE_HEAD_S)
                    self.wfile.write(answer.content)
                except OSError:
                    self.close_connection = True

            do_GET = do_POST = do_PUT = do_DELETE = _forward

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def slow_next(self, n: int) -> None:
        self.slow, self.seen = n, 0

    def slow_head_next(self, n: int) -> None:
        self.slow_head, self.seen = n, 0

    def hold_next(self, n: int, seconds: float) -> None:
        self.held, self.hold, self.seen = n, seconds, 0


@pytest.fixture
def proxy(broker_url: str) -> Iterator[Trickler]:
    p = Trickler(broker_url)
    yield p
    p.server.shutdown()
    p.server.server_close()


def test_a_trickling_answer_is_cut_at_the_attempt_timeout(
    broker_url: str, qname: str, proxy: Trickler
) -> None:
    c = lanes.Lanes(proxy.url, timeout=ATTEMPT_S, retry_delay=0.01)
    proxy.slow_next(1)
    started = time.monotonic()
    results = c.queue(qname).push([{"data": 1, "transaction_id": "t-1"}])
    assert ATTEMPT_S <= time.monotonic() - started < CUT_BOUND_S
    assert proxy.seen == 2
    assert results[0].status == "duplicate"

    # The connection the cut attempt used is not reused; the next call works at once.
    assert c.queue(qname).push([{"data": 2}])[0].status == "queued"
    assert len(lanes.Lanes(broker_url).queue(qname).batch(10).wait(False).pop()) == 2


def test_a_trickling_body_is_cut_at_the_attempt_timeout_on_a_callers_http_client(
    qname: str, proxy: Trickler
) -> None:
    # A caller's httpx.Client keeps its own connections: the watchdog bounds the body there.
    c = lanes.Lanes(proxy.url, timeout=ATTEMPT_S, retry_delay=0.01, http_client=httpx.Client())
    proxy.slow_next(1)
    started = time.monotonic()
    results = c.queue(qname).push([{"data": 1, "transaction_id": "t-1"}])
    assert ATTEMPT_S <= time.monotonic() - started < CUT_BOUND_S
    assert proxy.seen == 2
    assert results[0].status == "duplicate"


def test_a_trickling_answer_is_cut_at_the_callers_deadline(qname: str, proxy: Trickler) -> None:
    c = lanes.Lanes(proxy.url, retry_delay=5.0)
    proxy.slow_next(1)
    started = time.monotonic()
    with pytest.raises(lanes.APIConnectionError), lanes.deadline(1.0):
        c.queue(qname).push([{"data": 1}])
    assert time.monotonic() - started < 4.0  # not the trickle's end, nor the 5 s retry delay


def test_a_trickling_answer_is_cut_at_the_attempt_timeout_async(
    qname: str, proxy: Trickler
) -> None:
    async def run() -> None:
        c = lanes.AsyncLanes(proxy.url, timeout=ATTEMPT_S, retry_delay=0.01)
        proxy.slow_next(1)
        started = time.monotonic()
        results = await c.queue(qname).push([{"data": 1, "transaction_id": "t-1"}])
        assert ATTEMPT_S <= time.monotonic() - started < CUT_BOUND_S
        assert proxy.seen == 2
        assert results[0].status == "duplicate"
        await c.aclose()

    asyncio.run(run())


@pytest.mark.parametrize("connection", ["new", "kept-alive"])
def test_a_trickling_head_is_cut_at_the_attempt_timeout(
    broker_url: str, qname: str, proxy: Trickler, connection: str
) -> None:
    # The head is bounded as the body is, on a new connection and on one the pool kept: a GET
    # is retried at once, an incr (not idempotent) ends in OutcomeUnknownError.
    lanes.Lanes(broker_url).kv(qname).incr("hits")
    c = lanes.Lanes(proxy.url, timeout=ATTEMPT_S, retry_delay=0.01)
    if connection == "kept-alive":
        assert c.kv(qname).get("hits").value == 1
    before = proxy.connections

    proxy.slow_head_next(1)
    started = time.monotonic()
    assert c.kv(qname).get("hits").value == 1
    assert ATTEMPT_S <= time.monotonic() - started < CUT_BOUND_S
    assert proxy.seen == 2
    assert proxy.connections == before + (1 if connection == "kept-alive" else 2)

    if connection == "new":
        c = lanes.Lanes(proxy.url, timeout=ATTEMPT_S, retry_delay=0.01)
    proxy.slow_head_next(1)
    started = time.monotonic()
    with pytest.raises(lanes.OutcomeUnknownError) as unknown:
        c.kv(qname).incr("hits")
    assert ATTEMPT_S <= time.monotonic() - started < CUT_BOUND_S
    assert isinstance(unknown.value.cause, lanes.APITimeoutError)
    assert proxy.seen == 1


@pytest.mark.parametrize("connection", ["new", "kept-alive"])
def test_a_trickling_head_is_cut_at_the_attempt_timeout_async(
    broker_url: str, qname: str, proxy: Trickler, connection: str
) -> None:
    async def run() -> None:
        c = lanes.AsyncLanes(proxy.url, timeout=ATTEMPT_S, retry_delay=0.01)
        if connection == "kept-alive":
            assert (await c.kv(qname).get("hits")).value == 1
        proxy.slow_head_next(1)
        started = time.monotonic()
        assert (await c.kv(qname).get("hits")).value == 1
        assert ATTEMPT_S <= time.monotonic() - started < CUT_BOUND_S
        assert proxy.seen == 2

        proxy.slow_head_next(1)
        started = time.monotonic()
        with pytest.raises(lanes.OutcomeUnknownError) as unknown:
            await c.kv(qname).incr("hits")
        assert ATTEMPT_S <= time.monotonic() - started < CUT_BOUND_S
        assert isinstance(unknown.value.cause, lanes.APITimeoutError)
        assert proxy.seen == 1
        await c.aclose()

    lanes.Lanes(broker_url).kv(qname).incr("hits")
    asyncio.run(run())


@pytest.mark.parametrize("pool", ["own", "callers"])
def test_a_connection_that_read_its_answer_in_time_is_reused_after_its_timeout(
    qname: str, proxy: Trickler, pool: str
) -> None:
    # The attempt's cut is called off when its answer is in: the pooled connection is still
    # whole when the cut's time has passed (on a caller's httpx.Client, the watchdog's cut).
    http_client = httpx.Client() if pool == "callers" else None
    c = lanes.Lanes(proxy.url, timeout=ATTEMPT_S, retry_attempts=0, http_client=http_client)
    q = c.queue(qname)
    started = time.monotonic()
    assert q.push([{"data": 1}])[0].status == "queued"
    # Past the first attempt's end, with a second to spare for a watchdog woken late.
    time.sleep(max(0.0, started + ATTEMPT_S + 1.0 - time.monotonic()))
    assert q.push([{"data": 2}])[0].status == "queued"
    assert q.push([{"data": 3}])[0].status == "queued"
    assert proxy.connections == 1


class RecordedTimeouts(httpx.BaseTransport):
    """httpx's own transport; notes the timeouts each request carried."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.timeouts: list[Any] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.timeouts.append(request.extensions.get("timeout"))
        return self.inner.handle_request(request)


NO_TIMEOUTS = {"connect": None, "read": None, "write": None, "pool": None}


def test_a_timeout_of_0_sets_no_per_attempt_timeout(qname: str, proxy: Trickler) -> None:
    # docs/retries.md §1, as in Go and TS: not the 30 s default, nor a timeout of 0 s.
    recorded = RecordedTimeouts()
    c = lanes.Lanes(proxy.url, timeout=0, http_client=httpx.Client(transport=recorded))
    proxy.hold_next(1, 1.0)
    started = time.monotonic()
    assert c.queue(qname).push([{"data": 1}])[0].status == "queued"
    assert time.monotonic() - started >= 1.0
    assert proxy.seen == 1
    assert recorded.timeouts == [NO_TIMEOUTS]


def test_a_timeout_of_0_sets_no_per_attempt_timeout_async(qname: str, proxy: Trickler) -> None:
    async def run() -> None:
        c = lanes.AsyncLanes(proxy.url, timeout=0)
        proxy.hold_next(1, 1.0)
        started = time.monotonic()
        assert (await c.queue(qname).push([{"data": 1}]))[0].status == "queued"
        assert time.monotonic() - started >= 1.0
        assert proxy.seen == 1
        await c.aclose()

    asyncio.run(run())


def test_a_timeout_of_0_leaves_the_callers_deadline(qname: str, proxy: Trickler) -> None:
    c = lanes.Lanes(proxy.url, timeout=0, retry_delay=5.0)
    proxy.slow_next(1)
    started = time.monotonic()
    with pytest.raises(lanes.APIConnectionError), lanes.deadline(1.0):
        c.queue(qname).push([{"data": 1}])
    assert time.monotonic() - started < 4.0  # not the trickle's end, nor the 5 s retry delay


def test_a_timeout_of_0_leaves_the_callers_deadline_async(qname: str, proxy: Trickler) -> None:
    async def run() -> None:
        c = lanes.AsyncLanes(proxy.url, timeout=0, retry_delay=5.0)
        proxy.slow_next(1)
        started = time.monotonic()
        with pytest.raises(lanes.APIConnectionError), lanes.deadline(1.0):
            await c.queue(qname).push([{"data": 1}])
        assert time.monotonic() - started < 4.0
        await c.aclose()

    asyncio.run(run())


@pytest.mark.parametrize("client", [lanes.Lanes, lanes.AsyncLanes])
@pytest.mark.parametrize("timeout", [-1.0, float("nan"), float("inf")])
def test_a_negative_or_non_finite_timeout_is_refused(client: Any, timeout: float) -> None:
    with pytest.raises(ValueError, match="timeout must be a non-negative number"):
        client("http://127.0.0.1:2", timeout=timeout)


@pytest.fixture
def unanswered_url() -> Iterator[str]:
    """A URL whose connects wait without an answer, as to a host that drops packets: a listener
    with a backlog of 0 that never accepts, its queue filled."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(0)
    fill = []
    for _ in range(4):
        s = socket.socket()
        s.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            s.connect(srv.getsockname())
        fill.append(s)
    yield f"http://127.0.0.1:{srv.getsockname()[1]}"
    for s in fill:
        s.close()
    srv.close()


def test_an_attempt_timeout_during_the_connect_resends_a_kv_incr(
    broker_url: str, qname: str, unanswered_url: str
) -> None:
    # The request never left (docs/retries.md §5), so even an incr goes on to the next URL.
    c = lanes.Lanes(urls=[unanswered_url, broker_url], timeout=ATTEMPT_S)
    started = time.monotonic()
    assert c.kv(qname).incr("hits").applied
    assert time.monotonic() - started < CUT_BOUND_S
    assert lanes.Lanes(broker_url).kv(qname).get("hits").value == 1


def test_an_attempt_timeout_during_the_connect_resends_a_kv_incr_async(
    broker_url: str, qname: str, unanswered_url: str
) -> None:
    async def run() -> None:
        c = lanes.AsyncLanes(urls=[unanswered_url, broker_url], timeout=ATTEMPT_S)
        started = time.monotonic()
        assert (await c.kv(qname).incr("hits")).applied
        assert time.monotonic() - started < CUT_BOUND_S
        await c.aclose()

    for _ in range(3):  # the whole-attempt bound and httpx's connect timeout end together
        asyncio.run(run())
    assert lanes.Lanes(broker_url).kv(qname).get("hits").value == 3


def test_one_watchdog_cuts_the_earliest_attempt_first_and_forgets_finished_ones() -> None:
    """The blocking client's attempts share one watchdog thread: an attempt due before every
    other one wakes it, and attempts that finished in time leave its heap."""
    from lanes._http import _Watchdog

    dog = _Watchdog()
    mine, peer = socket.socketpair()
    with mine, peer:

        class Stream:
            def get_extra_info(self, name: str) -> socket.socket | None:
                return mine if name == "socket" else None

        later = [dog.arm(time.monotonic() + 60, Stream()) for _ in range(3000)]
        for cut in later:
            dog.finish(cut)
        assert len(dog._heap) < 1100

        # A watchdog that slept on past the new cut would wake for the finished ones at 60 s:
        # the bound sits far from both, so a loaded machine's late wake-up stays inside it.
        mine.settimeout(30)  # a read the watchdog never wakes fails instead of hanging
        started = time.monotonic()
        cut = dog.arm(started + 0.2, Stream())
        assert mine.recv(1) == b""  # the shutdown wakes the read
        assert 0.15 <= time.monotonic() - started < 20.0
        assert cut.fired
