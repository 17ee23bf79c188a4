"""Thin sync and async transports. Both drive :class:`lanes._retry.CallState`; the only
differences are how they send a request and how they sleep."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import heapq
import inspect
import json as _json
import logging
import os
import random
import socket
import ssl
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpcore
import httpx

from lanes._deadline import current_deadline
from lanes._exceptions import (
    APIConnectionError,
    APITimeoutError,
    ClientClosedError,
    ConsumerStoppedError,
    OutcomeUnknownError,
    api_error_from,
)
from lanes._retry import CallState, Decision, Endpoints, RetrySettings

USER_AGENT = "lanes-mq-python/0.0.0"

# A bearer token, or a function asked for one before every attempt (AsyncLanes may await it).
BearerToken = str | Callable[[], str] | Callable[[], Awaitable[str]]


def set_header(h: dict[str, str], name: str, value: str) -> None:
    """Sets ``name`` in ``h``, dropping the header in any other letter case: names are
    case-insensitive, and httpx sends every spelling a dict holds as a header of its own."""
    lower = name.lower()
    for spelled in [k for k in h if k.lower() == lower]:
        del h[spelled]
    h[name] = value


@dataclass
class Config:
    """Resolved client settings, shared by the sync and async clients."""

    urls: list[str]
    settings: RetrySettings
    timeout: float = 30.0
    # Left out of the repr: a logged client, or a traceback that captures locals, must not
    # show the token. A callable is asked before every attempt (a client outlives its tokens).
    bearer_token: BearerToken | None = field(default=None, repr=False)
    headers: dict[str, str] = field(default_factory=dict)
    logger: logging.Logger = field(default_factory=lambda: logging.getLogger("lanes"))
    pop_autopilot: bool = True
    clock: Callable[[], float] = time.time
    rng: Callable[[], float] = random.random

    def base_headers(self, token: str | None) -> dict[str, str]:
        # The caller's headers replace the SDK's defaults; the bearer token replaces a caller's
        # Authorization, as in Go.
        h = {"Accept": "application/json", "User-Agent": USER_AGENT}
        for name, value in self.headers.items():
            set_header(h, name, value)
        if token:
            set_header(h, "Authorization", f"Bearer {token}")
        return h

    def token(self) -> str | Awaitable[str] | None:
        """The attempt's bearer token; an awaitable when an async function returned one."""
        return self.bearer_token() if callable(self.bearer_token) else self.bearer_token


@dataclass(frozen=True)
class Response:
    """A 2xx answer. ``body`` is only decoded on demand and never for a 204."""

    status: int
    content: bytes
    attempts: int
    # The paging headers of a listing answered as a bare array (X-Lanes-Truncated) live here.
    headers: Mapping[str, str] = field(default_factory=dict)

    def json(self) -> Any:
        if self.status == 204 or not self.content:
            return None
        return _json.loads(self.content)


def encode_json(value: Any) -> bytes:
    """JSON as every request body is sent: compact, UTF-8."""
    return _json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _encode(body: Any) -> bytes | None:
    if body is None:
        return None
    if isinstance(body, bytes):  # already JSON: a push or transaction body of checked items
        return body
    return encode_json(body)


def _url(base: str, path: str, query: str | None) -> httpx.URL:
    return _parsed_url(base.rstrip("/") + path + (f"?{query}" if query else ""))


@functools.lru_cache(maxsize=256)
def _parsed_url(url: str) -> httpx.URL:
    """``url`` parsed once: httpx parses a URL given as a str twice a request (about 35 µs),
    and a client's calls go to a few URLs (a loop's pops and acks, each to one)."""
    return httpx.URL(url)


class _Base:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.endpoints = Endpoints(cfg.urls, cfg.settings.health_retry_after)

    def _state(self, long_poll: bool, deadline: float | None, not_idempotent: bool) -> CallState:
        scoped = current_deadline()
        if scoped is not None and (deadline is None or scoped < deadline):
            deadline = scoped
        return CallState(
            self.cfg.settings,
            self.endpoints,
            long_poll=long_poll,
            clock=self.cfg.clock,
            rng=self.cfg.rng,
            deadline=deadline,
            not_idempotent=not_idempotent,
        )

    def _timeout(self, st: CallState, timeout: float | None) -> float | None:
        """The attempt's timeout in seconds: the call's (else the client's), cut at the deadline;
        None when there is neither (a client timeout of 0). Notes in ``st`` whether the deadline
        cut it: a timeout then is the caller's, not the broker's."""
        t: float | None = timeout if timeout is not None else self.cfg.timeout
        if t == 0:
            t = None
        st.cut_at_deadline = False
        if st.deadline is not None:
            left = st.deadline - self.cfg.clock()
            st.cut_at_deadline = t is None or left < t
            t = max(0.001, left if t is None else min(t, left))
        return t

    def _headers(self, st: CallState, has_body: bool, token: str | None) -> dict[str, str]:
        h = self.cfg.base_headers(token)
        set_header(h, "X-Retry-Count", st.retry_count_header())
        if has_body and not any(name.lower() == "content-type" for name in h):
            h["Content-Type"] = "application/json"
        return h

    @staticmethod
    def _closed(st: CallState) -> ClientClosedError:
        """The error of a call whose next attempt finds the HTTP pool closed, as a call made
        after close() gets; when close() ran while it was in flight, an attempt already sent
        may have been applied."""
        if st.attempts == 1:  # none sent yet
            return ClientClosedError("lanes: client is closed")
        return ClientClosedError(
            "lanes: client closed while the call was in flight; an attempt sent before may have"
            " been applied"
        )

    def _failed(self, method: str, path: str, st: CallState, exc: httpx.TransportError) -> Decision:
        """The retry decision after a transport error; raises when it says stop."""
        # A failed connect proves the request never left.
        d = st.after(
            None,
            None,
            not_sent=isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)),
            by_deadline=st.cut_at_deadline and isinstance(exc, httpx.TimeoutException),
        )
        if not d.retry:
            kind = (
                APITimeoutError if isinstance(exc, httpx.TimeoutException) else APIConnectionError
            )
            err = kind(f"lanes: {method} {path}: {exc!r}", attempts=st.attempts, url=st.url)
            if d.outcome_unknown:
                raise OutcomeUnknownError(err, attempts=st.attempts) from err
            raise err from exc
        self._log(method, path, st, d, None)
        return d

    def _answered(
        self, method: str, path: str, st: CallState, resp: httpx.Response
    ) -> tuple[Response | None, Decision]:
        """A 2xx as the call's Response, or the retry decision for any other status; raises when
        the decision says stop."""
        status = resp.status_code
        d = st.after(status, resp.headers)
        if 200 <= status < 300:
            return Response(
                status, b"" if status == 204 else resp.content, st.attempts, resp.headers
            ), d
        if not d.retry:
            err = api_error_from(
                status,
                resp.reason_phrase,
                resp.content,
                retry_after=d.retry_after,
                attempts=st.attempts,
            )
            if d.outcome_unknown:
                raise OutcomeUnknownError(err, attempts=st.attempts) from err
            raise err
        self._log(method, path, st, d, status)
        return None, d

    def _log(self, method: str, path: str, st: CallState, d: Decision, status: int | None) -> None:
        if d.retry:
            self.cfg.logger.debug(
                "lanes retry %s %s: %s attempt=%d delay=%.0fms url=%s",
                method,
                path,
                d.reason,
                st.attempts,
                d.delay * 1000,
                st.url,
            )


class _SendTrace:
    """httpcore's trace of one attempt: whether it reported anything, and whether it began to
    send the request's head. A transport that reports nothing proves nothing. With ``cut``, the
    trace also tells the cut when the attempt's connection stops being the call's."""

    def __init__(self, cut: CallCut | None = None) -> None:
        self.traced = False
        self.sent = False
        self._cut = cut

    async def atrace(self, name: str, info: Mapping[str, Any]) -> None:
        self.traced = True
        if "send_request_headers" in name:
            self.sent = True
        if self._cut is not None:
            self._cut._trace(name, info)

    @property
    def not_sent(self) -> bool:
        return self.traced and not self.sent


class _SocketCut:
    """An attempt's socket, shut down by the :class:`_Watchdog` when the attempt's time is up."""

    __slots__ = ("at", "done", "fired", "sock")

    def __init__(self, at: float, sock: socket.socket | None) -> None:
        self.at = at
        self.sock = sock
        self.done = False  # finished in time, or fired
        self.fired = False

    def __lt__(self, other: _SocketCut) -> bool:
        return self.at < other.at


class _Watchdog:
    """One daemon thread that shuts an attempt's socket down when its time is up, which wakes
    a body read still waiting on it (a thread per attempt cost about 30 µs a call). An attempt
    that read its whole answer in time calls :meth:`finish` under the same lock, so its
    connection goes back to the pool intact."""

    # Finished cuts stay in the heap until their time; past this many, and half the heap, the
    # heap is rebuilt without them, so a high call rate under a long timeout keeps it small.
    _COMPACT_AFTER = 1024
    # A cut may come this late, so cuts due close together (finished ones, mostly) cost one
    # wake-up per slack, not one per attempt.
    _SLACK = 0.01

    def __init__(self) -> None:
        self._reset()
        if hasattr(os, "register_at_fork"):  # the thread does not survive a fork
            os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._heap: list[_SocketCut] = []
        self._finished = 0  # finished cuts still in the heap
        self._thread: threading.Thread | None = None

    def arm(self, at: float, network_stream: Any) -> _SocketCut:
        """A cut of ``network_stream``'s socket at ``at`` (``time.monotonic()``)."""
        get = getattr(network_stream, "get_extra_info", None)
        cut = _SocketCut(at, get("socket") if get is not None else None)
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="lanes-attempt-timeout")
                self._thread.daemon = True
                self._thread.start()
            heapq.heappush(self._heap, cut)
            if self._heap[0] is cut:
                self._cond.notify()
        return cut

    def finish(self, cut: _SocketCut) -> None:
        with self._cond:
            if cut.done:
                return
            cut.done = True
            cut.sock = None
            self._finished += 1
            if self._finished > self._COMPACT_AFTER and 2 * self._finished > len(self._heap):
                self._heap = [c for c in self._heap if not c.done]
                heapq.heapify(self._heap)
                self._finished = 0

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                while self._heap and self._heap[0].at <= now:
                    cut = heapq.heappop(self._heap)
                    if cut.done:
                        self._finished -= 1
                    else:
                        self._fire(cut)
                self._cond.wait(max(self._heap[0].at - now, self._SLACK) if self._heap else None)

    @staticmethod
    def _fire(cut: _SocketCut) -> None:
        cut.done = cut.fired = True
        sock, cut.sock = cut.sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                # socket.socket's own shutdown: an ssl.SSLSocket's would also drop its TLS
                # state under the read still running on it.
                socket.socket.shutdown(sock, socket.SHUT_RDWR)


_WATCHDOG = _Watchdog()


class _AttemptEnd:
    """When the blocking attempt running in a thread must end (``time.monotonic()``), and
    whether a :class:`_BoundedStream` has carried its I/O (else the watchdog must bound it)."""

    __slots__ = ("at", "bounded")

    def __init__(self, at: float) -> None:
        self.at = at
        self.bounded = False


class _RunningAttempt(threading.local):
    end: _AttemptEnd | None = None
    cut: CallCut | None = None


# How long a stop (and close()/aclose()) waits for a cut call to end: within milliseconds, an
# answer the broker had already written read and released first.
CUT_WAIT_S = 2.0


class CallCut:
    """Cuts a call from elsewhere without abandoning it (a stopped consumer's or iterator's long
    poll: a blocking one cannot be interrupted, and cancelling an asyncio one would close its
    connection under an answer the broker already wrote, leaving its messages leased):
    :meth:`fire` half-closes the connection its attempt is on. The broker then answers ``499``
    at once and claims nothing, or the answer it already wrote still arrives whole; either way
    the call ends within milliseconds, not at its long poll's end, and is not retried (a call
    between attempts ends at once). Only connections of the client's own pool
    (:class:`_BoundedStream`, :class:`_CuttableAsyncStream`) can be cut; on a caller's
    ``http_client`` the call runs to its end, as before."""

    __slots__ = ("_cut_stream", "_lock", "_stream", "_wake", "fired")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # The attempt's connection while it is on it.
        self._stream: _BoundedStream | _CuttableAsyncStream | None = None
        self._wake: Callable[[], None] | None = None  # ends an asyncio call's wait between attempts
        # The connection the cut half-closed, which abort() closes.
        self._cut_stream: _BoundedStream | _CuttableAsyncStream | None = None
        self.fired = False

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Run the blocking call in this block (in this thread) under this cut."""
        outer, _RUNNING.cut = _RUNNING.cut, self
        try:
            yield
        finally:
            _RUNNING.cut = outer

    @contextlib.contextmanager
    def running_in_task(self) -> Iterator[None]:
        """Run the AsyncLanes call awaited in this block (in this task) under this cut."""
        token = _TASK_CUT.set(self)
        try:
            yield
        finally:
            _TASK_CUT.reset(token)

    def fire(self) -> None:
        """Half-close the call's connection, and make it end at its attempt: from any thread for
        a blocking call, on the event loop for an asyncio one."""
        with self._lock:
            self.fired = True
            stream, self._stream = self._stream, None
            wake, self._wake = self._wake, None
            if stream is not None:
                stream.half_close()
                self._cut_stream = stream
        if wake is not None:
            wake()

    def abort(self) -> None:
        """Close the connection the cut half-closed, when the broker has not answered on it in
        the while since (a proxy that ignores the half-close, a hung broker): its read ends, and
        so does the call, which is not retried."""
        with self._lock:
            if self._cut_stream is not None:
                self._cut_stream.abort()

    def _attach(self, stream: _BoundedStream | _CuttableAsyncStream) -> None:
        """The call's attempt is about to send on ``stream``; refused once the cut fired. The
        refused stream is half-closed too: httpcore takes a write error for a server that
        answered early and reads on, and the broker, sent nothing but the FIN, closes at once."""
        with self._lock:
            if self.fired:
                stream.half_close()
                self._cut_stream = stream
                raise httpcore.WriteError("lanes: the call was cut")
            self._stream = stream

    def _trace(self, name: str, info: Mapping[str, Any]) -> None:
        # httpcore's trace of the attempt: its connection goes back to the pool (where another
        # call may take it) only after "response_closed" began; from then on it is not the
        # call's to cut.
        if name.endswith("response_closed.started"):
            self._detach()

    def _detach(self) -> None:
        with self._lock:
            self._stream = None


_RUNNING = _RunningAttempt()
# The cut of the AsyncLanes call the current task awaits (CallCut.running_in_task).
_TASK_CUT: contextvars.ContextVar[CallCut | None] = contextvars.ContextVar(
    "lanes_task_cut", default=None
)


def _half_close(sock: Any, how: int = socket.SHUT_WR) -> None:
    """Send the end of the request side of a connection (a FIN); its answer can still be read.
    With ``how`` SHUT_RDWR, end the read side too: a read waiting on it ends."""
    if sock is None:
        return
    with contextlib.suppress(OSError):
        if isinstance(sock, socket.socket):
            # socket.socket's own shutdown, as the watchdog's: an ssl.SSLSocket's would drop
            # its TLS state under the read still running on it.
            socket.socket.shutdown(sock, how)
        else:  # asyncio's TransportSocket (its TLS is above the socket)
            sock.shutdown(how)


def _until_attempt_end(timeout: float | None, timed_out: type[Exception]) -> float | None:
    """``timeout`` cut at the running attempt's end; raises ``timed_out`` once it has passed."""
    end = _RUNNING.end
    if end is None:
        return timeout
    end.bounded = True
    left = end.at - time.monotonic()
    if left <= 0:
        raise timed_out("lanes: the attempt's time is up")
    return left if timeout is None or left < timeout else timeout


class _BoundedStream(httpcore.NetworkStream):
    """A connection of the blocking client's own pool whose every connect, read and write ends
    by the running attempt's end, as a Go conn deadline: httpx's read timeout restarts on every
    read, so an answer's head or body trickled in a byte at a time would outlast it."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner
        self._half_closed = False

    def half_close(self) -> None:
        """Send the end of the request side (a FIN); the answer can still be read. The
        connection is never reused after it (see ``is_readable``)."""
        self._half_closed = True
        _half_close(self._inner.get_extra_info("socket"))

    def abort(self) -> None:
        """Shut the connection down both ways after :meth:`half_close`: a read on it ends."""
        _half_close(self._inner.get_extra_info("socket"), socket.SHUT_RDWR)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _until_attempt_end(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        cut = _RUNNING.cut
        if cut is not None:
            cut._attach(self)
        self._inner.write(buffer, _until_attempt_end(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        timeout = _until_attempt_end(timeout, httpcore.ConnectTimeout)
        return _BoundedStream(self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable" and self._half_closed:
            return True  # as a connection the server closed: httpcore drops it, never reuses it
        return self._inner.get_extra_info(info)


class _BoundedBackend(httpcore.NetworkBackend):
    """httpcore's network backend with :class:`_BoundedStream` connections."""

    def __init__(self, inner: httpcore.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        timeout = _until_attempt_end(timeout, httpcore.ConnectTimeout)
        return _BoundedStream(
            self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        )

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        timeout = _until_attempt_end(timeout, httpcore.ConnectTimeout)
        return _BoundedStream(self._inner.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


# The SDK's own pools: no cap on connections, as Go's and Node's clients have none, because
# every consumer's long poll holds one for up to its wait (httpx's default cap of 100 would park
# the 101st consumer's pop behind the others'); 100 kept idle, as the Go SDK keeps per host.
_POOL_LIMITS = httpx.Limits(max_connections=None, max_keepalive_connections=100)


def _bounded_client() -> httpx.Client:
    """An ``httpx.Client`` whose pools' connections end their I/O by the attempt's end. httpx
    takes no network backend (httpcore's extension point for one), so it is set on its
    transports' pools; where that fails, the watchdog still bounds the answer's body."""
    client = httpx.Client(limits=_POOL_LIMITS)
    for transport in [
        getattr(client, "_transport", None),
        *getattr(client, "_mounts", {}).values(),
    ]:
        pool = getattr(transport, "_pool", None)
        if isinstance(pool, httpcore.ConnectionPool):
            pool._network_backend = _BoundedBackend(pool._network_backend)
    return client


class _CuttableAsyncStream(httpcore.AsyncNetworkStream):
    """A connection of AsyncLanes's own pool that a :class:`CallCut` can half-close: the cut of
    the task's call (``_TASK_CUT``) is attached at each write."""

    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self._inner = inner
        self._half_closed = False

    def half_close(self) -> None:
        """As :meth:`_BoundedStream.half_close`."""
        self._half_closed = True
        _half_close(self._inner.get_extra_info("socket"))

    def abort(self) -> None:
        """As :meth:`_BoundedStream.abort`."""
        _half_close(self._inner.get_extra_info("socket"), socket.SHUT_RDWR)

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        return await self._inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        cut = _TASK_CUT.get()
        if cut is not None:
            cut._attach(self)
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
    ) -> httpcore.AsyncNetworkStream:
        return _CuttableAsyncStream(
            await self._inner.start_tls(ssl_context, server_hostname, timeout)
        )

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable" and self._half_closed:
            return True  # never reused, as _BoundedStream
        return self._inner.get_extra_info(info)


class _CuttableAsyncBackend(httpcore.AsyncNetworkBackend):
    """httpcore's async network backend with :class:`_CuttableAsyncStream` connections."""

    def __init__(self, inner: httpcore.AsyncNetworkBackend) -> None:
        self._inner = inner

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return _CuttableAsyncStream(
            await self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        )

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return _CuttableAsyncStream(
            await self._inner.connect_unix_socket(path, timeout, socket_options)
        )

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def _cuttable_async_client() -> tuple[httpx.AsyncClient, bool]:
    """An ``httpx.AsyncClient`` whose connections a :class:`CallCut` can half-close, set on its
    transports' pools as :func:`_bounded_client` does; and whether that worked (else its calls
    cannot be cut, and a stop cancels them)."""
    client = httpx.AsyncClient(limits=_POOL_LIMITS)
    cuttable = False
    for transport in [
        getattr(client, "_transport", None),
        *getattr(client, "_mounts", {}).values(),
    ]:
        pool = getattr(transport, "_pool", None)
        if isinstance(pool, httpcore.AsyncConnectionPool):
            pool._network_backend = _CuttableAsyncBackend(pool._network_backend)
            cuttable = True
    return client, cuttable


class SyncTransport(_Base):
    """Blocking transport over ``httpx.Client``."""

    def __init__(
        self,
        cfg: Config,
        http_client: httpx.Client | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        super().__init__(cfg)
        self._own = http_client is None
        self.http = http_client or _bounded_client()
        self._sleep = sleep or time.sleep

    @property
    def cuts_calls(self) -> bool:
        """Whether a :class:`CallCut` can cut this client's calls: only on its own pool."""
        return self._own

    def close(self) -> None:
        if self._own:
            self.http.close()

    def _token(self) -> str | None:
        token = self.cfg.token()
        if token is None or isinstance(token, str):
            return token
        if inspect.iscoroutine(token):
            token.close()  # never awaited: no "coroutine was never awaited" warning
        raise TypeError(
            "lanes: bearer_token returned an awaitable; an async function needs AsyncLanes"
        )

    def _attempt(self, req: httpx.Request, t: float | None) -> httpx.Response:
        """Send ``req`` and read its whole answer within ``t`` seconds (None: no bound), as Go
        and TS do: httpx's timeout bounds each read, so an answer that trickles in would outlast
        it. The connections of the client's own pool end every read and write at the attempt's
        end (:class:`_BoundedStream`). On others (a caller's ``http_client``) each read of the head
        waits at most ``t``; once the head is in, the watchdog shuts the connection's socket
        down when ``t`` is up, which ends a body read still waiting."""
        started = time.monotonic()
        req.extensions["timeout"] = httpx.Timeout(t).as_dict()
        call_cut = _RUNNING.cut
        if call_cut is not None:
            req.extensions["trace"] = call_cut._trace
        end = None if t is None else _AttemptEnd(started + t)
        outer, _RUNNING.end = _RUNNING.end, end
        try:
            resp = self.http.send(req, stream=True)
            try:
                if end is None or end.bounded:
                    resp.read()
                    return resp
                if end.at <= time.monotonic():
                    raise httpx.ReadTimeout(f"answer not in after {t:g} s", request=req)
                cut = _WATCHDOG.arm(end.at, resp.extensions.get("network_stream"))
                try:
                    resp.read()
                except httpx.TransportError as exc:
                    if cut.fired:
                        raise httpx.ReadTimeout(
                            f"answer not in after {t:g} s", request=req
                        ) from exc
                    raise
                finally:
                    _WATCHDOG.finish(cut)
            finally:
                resp.close()
        finally:
            _RUNNING.end = outer
            if call_cut is not None:
                call_cut._detach()
        return resp

    def request(
        self,
        method: str,
        path: str,
        *,
        query: str | None = None,
        body: Any = None,
        long_poll: bool = False,
        timeout: float | None = None,
        deadline: float | None = None,
        not_idempotent: bool = False,
        cancel: threading.Event | None = None,
    ) -> Response:
        data = _encode(body)
        st = self._state(long_poll, deadline, not_idempotent)
        call_cut = _RUNNING.cut
        while True:
            if (cancel is not None and cancel.is_set()) or (
                call_cut is not None and call_cut.fired
            ):
                raise ConsumerStoppedError("lanes: stopped")
            if self.http.is_closed:
                raise self._closed(st)
            try:
                resp = self._attempt(
                    self.http.build_request(
                        method,
                        _url(st.url, path, query),
                        content=data,
                        headers=self._headers(st, data is not None, self._token()),
                    ),
                    self._timeout(st, timeout),
                )
            except httpx.TransportError as exc:
                if call_cut is not None and call_cut.fired:  # the cut's doing: not retried
                    raise ConsumerStoppedError("lanes: stopped") from exc
                d = self._failed(method, path, st, exc)
            else:
                done, d = self._answered(method, path, st, resp)
                if done is not None:
                    return done
            if d.delay > 0:
                if cancel is not None:
                    if cancel.wait(d.delay):
                        raise ConsumerStoppedError("lanes: stopped")
                else:
                    self._sleep(d.delay)


class AsyncTransport(_Base):
    """Asyncio transport over ``httpx.AsyncClient``; cancellation is asyncio's."""

    def __init__(
        self,
        cfg: Config,
        http_client: httpx.AsyncClient | None = None,
        sleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> None:
        super().__init__(cfg)
        self._own = http_client is None
        if http_client is None:
            self.http, self._cuttable = _cuttable_async_client()
        else:
            self.http, self._cuttable = http_client, False
        self._sleep = sleep or asyncio.sleep

    @property
    def cuts_calls(self) -> bool:
        """Whether a :class:`CallCut` can cut this client's calls: only on its own pool."""
        return self._cuttable

    async def aclose(self) -> None:
        if self._own:
            await self.http.aclose()

    async def _sleep_unless_cut(self, seconds: float, cut: CallCut) -> None:
        """Wait between attempts; a cut fired meanwhile ends the wait and the call."""
        sleeping = asyncio.ensure_future(self._sleep(seconds))

        def wake() -> None:
            sleeping.cancel()

        cut._wake = wake
        try:
            await sleeping
        except asyncio.CancelledError:
            if not (cut.fired and sleeping.cancelled()):
                raise
            raise ConsumerStoppedError("lanes: stopped") from None
        finally:
            cut._wake = None

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: str | None = None,
        body: Any = None,
        long_poll: bool = False,
        timeout: float | None = None,  # noqa: ASYNC109 (per attempt, not a deadline)
        deadline: float | None = None,
        not_idempotent: bool = False,
    ) -> Response:
        data = _encode(body)
        st = self._state(long_poll, deadline, not_idempotent)
        call_cut = _TASK_CUT.get()
        try:
            while True:
                if call_cut is not None and call_cut.fired:
                    raise ConsumerStoppedError("lanes: stopped")
                if self.http.is_closed:
                    raise self._closed(st)
                try:
                    token = self.cfg.token()
                    if not (token is None or isinstance(token, str)):
                        token = await token
                    t = self._timeout(st, timeout)
                    trace = _SendTrace(call_cut)
                    try:
                        # The whole attempt, answer included, as in Go and TS: httpx's timeout
                        # bounds each read, so an answer that trickles in would outlast it.
                        with anyio.fail_after(t):
                            resp = await self.http.request(
                                method,
                                _url(st.url, path, query),
                                content=data,
                                headers=self._headers(st, data is not None, token),
                                timeout=httpx.Timeout(t),
                                extensions={"trace": trace.atrace},
                            )
                    except TimeoutError as exc:
                        # Cut before the request's head went out (while connecting): never sent.
                        kind = httpx.ConnectTimeout if trace.not_sent else httpx.ReadTimeout
                        raise kind(f"attempt timed out after {t:g} s") from exc
                except httpx.TransportError as exc:
                    if call_cut is not None and call_cut.fired:  # the cut's doing: not retried
                        raise ConsumerStoppedError("lanes: stopped") from exc
                    d = self._failed(method, path, st, exc)
                else:
                    if (
                        call_cut is not None
                        and call_cut.fired
                        and not 200 <= resp.status_code < 300
                    ):
                        raise ConsumerStoppedError("lanes: stopped")  # the broker's 499 to the cut
                    done, d = self._answered(method, path, st, resp)
                    if done is not None:
                        return done
                if d.delay > 0:
                    if call_cut is not None:
                        await self._sleep_unless_cut(d.delay, call_cut)
                    else:
                        await self._sleep(d.delay)
        finally:
            if call_cut is not None:
                call_cut._detach()
