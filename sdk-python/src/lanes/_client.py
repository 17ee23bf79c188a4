"""``Lanes`` (blocking) and ``AsyncLanes`` (asyncio): thin executors of the shared rules in
``_protocol``, ``_requests``, ``_retry`` and the consume engine in ``_consumer``. The surfaces they
hand out live beside them: ``_queue``, ``_admin``, ``_kv`` and ``_timers``."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import math
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx

from lanes import _protocol as P
from lanes import _requests as R
from lanes._admin import Admin, AsyncAdmin, async_whole_listing, whole_listing
from lanes._buffer import (
    AsyncPushBuffer,
    BufferOptions,
    BufferStats,
    PushBuffer,
    aflush_every,
    buffer_stats,
    flush_every,
)
from lanes._consumer import (
    AsyncConsumer,
    Consumer,
    ErrorCallback,
    PopsInFlight,
)
from lanes._deadline import deadline as call_deadline
from lanes._exceptions import ClientClosedError, UnsentError
from lanes._generated import models
from lanes._http import CUT_WAIT_S, AsyncTransport, BearerToken, Config, SyncTransport
from lanes._iter import AsyncMessageIterator, MessageIterator, StoppedIterators
from lanes._kv import KV, AsyncKV
from lanes._names import check_names
from lanes._queue import AsyncQueue, Queue
from lanes._requests import Req
from lanes._retry import RetrySettings
from lanes._timers import AsyncTimers, Timers
from lanes._tx import AsyncTransaction, Transaction
from lanes._types import AckResult, AckStatus, Message, RenewResult

T = TypeVar("T")

DEFAULT_URL = "http://localhost:6632"

# How long the exit hook of a client never closed may spend flushing its buffers.
EXIT_FLUSH_TIMEOUT = 5.0


def _log_unsent_at_exit(logger: logging.Logger, unsent: int) -> None:
    logger.error(
        "lanes: %d buffered push item(s) unsent at exit and lost: close() the client "
        "(await aclose() for AsyncLanes) before the program ends",
        unsent,
    )


def _time_left(deadline: float | None) -> float | None:
    """Seconds from now to a ``time.monotonic()`` deadline (0 once passed; None: no deadline)."""
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def _check_broker_url(url: str) -> None:
    # Any other URL would build a client whose every call fails (as Go's New and TypeScript refuse).
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ValueError(f"lanes: bad broker URL {url!r} (want http:// or https:// and a host)")


def _cut_wait(deadline: float | None) -> float:
    """How long a close waits for cut pops: ``CUT_WAIT_S``, never past its deadline."""
    left = _time_left(deadline)
    return CUT_WAIT_S if left is None else min(CUT_WAIT_S, left)


@contextlib.contextmanager
def _bounded_by(deadline: float | None) -> Iterator[None]:
    """Bound the SDK calls made inside to a ``time.monotonic()`` deadline (None: unbounded)."""
    left = _time_left(deadline)
    if left is None:
        yield
        return
    with call_deadline(left):
        yield


def _split_urls(entries: Iterable[str]) -> list[str]:
    """Each entry split on commas, blank parts dropped."""
    return [u.strip() for e in entries for u in e.split(",") if u.strip()]


def _config(
    url: str | None,
    urls: Sequence[str] | None,
    bearer_token: BearerToken | None,
    timeout: float,
    retry_attempts: int,
    retry_delay: float,
    max_retry_delay: float,
    max_429_attempts: int,
    max_retry_after: float,
    health_retry_after: float,
    logger: logging.Logger | None,
    headers: Mapping[str, str] | None,
    pop_autopilot: bool | None,
    clock: Callable[[], float] | None,
    rng: Callable[[], float] | None,
) -> Config:
    if not math.isfinite(timeout) or timeout < 0:
        raise ValueError(f"lanes: timeout must be a non-negative number, got {timeout}")
    if not math.isfinite(health_retry_after) or health_retry_after < 0:
        raise ValueError(
            f"lanes: health_retry_after must be a non-negative number, got {health_retry_after}"
        )
    # A comma separates several brokers in every URL given, LANES_URL included, as in Go's WithURL.
    lst = (
        _split_urls(urls if urls else [url or ""])
        or _split_urls([os.environ.get("LANES_URL", "")])
        or [DEFAULT_URL]
    )
    for u in lst:
        _check_broker_url(u)
    cfg = Config(
        urls=[u.rstrip("/") for u in lst],
        settings=RetrySettings(
            retry_attempts=max(0, retry_attempts),
            retry_delay=retry_delay,
            max_retry_delay=max_retry_delay,
            max_429_attempts=max(0, max_429_attempts),
            max_retry_after=max_retry_after,
            health_retry_after=health_retry_after,
        ),
        timeout=timeout,
        bearer_token=bearer_token,
        headers=dict(headers or {}),
        # The environment is read once, here.
        pop_autopilot=P.autopilot_from_env() if pop_autopilot is None else pop_autopilot,
    )
    if logger is not None:
        cfg.logger = logger
    if clock is not None:
        cfg.clock = clock
    if rng is not None:
        cfg.rng = rng
    return cfg


def _ack_pairs(
    messages: Message | Sequence[Message],
    status: str,
    group: str | None,
    error: str | None,
    without_lease: bool = False,
) -> list[tuple[str, P.AckEntry]]:
    msgs = [messages] if isinstance(messages, Message) else list(messages)
    out = [(P.group_of(m, group), P.ack_entry(m, status, error)) for m in msgs]
    if without_lease:
        out = [(g, e._replace(lease_id="")) for g, e in out]
    return out


# ---------------------------------------------------------------------------------------------
# Clients


class Lanes:
    """Blocking Lanes client. Thread-safe; builders from :meth:`queue` are immutable values.

    ``pop_autopilot`` defaults to the environment (``LANES_SDK_POP_AUTOPILOT=off`` disables it),
    read once here. The library installs no signal handlers; call :meth:`close` (or use ``with``)
    to stop consumers started from this client and flush push buffers.

    ``bearer_token`` is a token, or a function asked for one before every attempt, so a
    long-lived client outlives its tokens: return a cached token and renew it before it expires.

    With several ``urls``, a URL that failed (network failure, 408, 5xx) is skipped for
    ``health_retry_after`` seconds (default 5; 0 never skips), then asked again.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        urls: Sequence[str] | None = None,
        bearer_token: str | Callable[[], str] | None = None,
        timeout: float = 30.0,
        retry_attempts: int = 2,
        retry_delay: float = 0.5,
        max_retry_delay: float = 8.0,
        max_429_attempts: int = 10,
        max_retry_after: float = 60.0,
        health_retry_after: float = 5.0,
        logger: logging.Logger | None = None,
        http_client: httpx.Client | None = None,
        headers: Mapping[str, str] | None = None,
        pop_autopilot: bool | None = None,
        _clock: Callable[[], float] | None = None,
        _rng: Callable[[], float] | None = None,
        _sleep: Callable[[float], None] | None = None,
    ) -> None:
        self._cfg = _config(
            url, urls, bearer_token, timeout, retry_attempts, retry_delay, max_retry_delay,
            max_429_attempts, max_retry_after, health_retry_after, logger, headers, pop_autopilot,
            _clock, _rng,
        )  # fmt: skip
        self._t = SyncTransport(self._cfg, http_client, _sleep)
        self._consumers: set[Consumer] = set()
        self._pops = PopsInFlight()
        # The iterators made here, which close() ends (one dropped unclosed has released already).
        self._iterators: weakref.WeakSet[MessageIterator] = weakref.WeakSet()
        self._buffers: dict[tuple[str, str | None], PushBuffer] = {}
        self._lock = threading.Lock()
        self._closed = False  # close() began: no new buffers, buffer pushes, consumers or iterators
        self._closing = False  # a close() runs (an interrupted one leaves it False)
        self._gone = False  # close() ended: the HTTP pool is closed
        self.admin = Admin(self)

    @property
    def pop_autopilot(self) -> bool:
        """The client-wide autopilot setting resolved at construction."""
        return self._cfg.pop_autopilot

    def _call(self, req: Req[T], *, after_close: bool = False) -> T:
        """``after_close``: a consumer's ack, renewal or release, or a stopped iterator's
        release, sent while close() keeps the HTTP pool open for it."""
        if self._gone and not after_close:
            raise ClientClosedError("lanes: client is closed")
        r = self._t.request(
            req.method,
            req.path,
            query=req.query,
            body=req.body,
            long_poll=req.long_poll,
            timeout=req.timeout,
            not_idempotent=req.not_idempotent,
        )
        return req.answer(r)

    def _start_consumer(self, start: Callable[[], Consumer]) -> Consumer:
        """Start a consumer close() will stop. Refused once close() began: its list of consumers
        to stop is taken then, so one started later would run on with no HTTP pool."""
        with self._lock:
            if self._closed:
                raise ClientClosedError("lanes: consume: client is closed")
            consumer = start()
            # Ended ones go: a long-lived client starting many short consumers keeps only those
            # still running (close() has nothing to stop in the others).
            self._consumers = {c for c in self._consumers if not c.done}
            self._consumers.add(consumer)
        return consumer

    def _start_iterator(self, make: Callable[[], MessageIterator]) -> MessageIterator:
        """Make an iterator close() will end; refused once close() began, as consumers are."""
        with self._lock:
            if self._closed:
                raise ClientClosedError("lanes: messages: client is closed")
            it = make()
            self._iterators.add(it)
        return it

    def queue(self, name: str | None = None) -> Queue:
        return Queue(self, P.QueueSpec(queue=name))

    def health(self) -> models.Health:
        return self._call(R.health())

    def transaction(self) -> Transaction:
        return Transaction(self)

    def kv(self, ns: str) -> KV:
        return KV(self, ns)

    def kv_namespaces(self) -> models.KvNamespaceList:
        """Every KV namespace with its live key count (following the broker's pages)."""
        return whole_listing(self, R.kv_namespaces())

    def timers(self, queue: str) -> Timers:
        return Timers(self, queue)

    def _ack_entries(
        self, entries: list[tuple[str, P.AckEntry]], *, after_close: bool = False
    ) -> list[AckResult]:
        parts = [
            (idx, self._call(R.ack(path, body), after_close=after_close))
            for path, body, idx in P.ack_requests(entries)
        ]
        return P.merge_ack_results(len(entries), parts)

    def ack(
        self,
        messages: Message | Sequence[Message],
        status: AckStatus = "completed",
        *,
        group: str | None = None,
        error: str | None = None,
        without_lease: bool = False,
    ) -> list[AckResult]:
        """Ack (or nack) leased messages; raises :class:`AckError` (with ``results``) when any
        item answered ``success: false``. ``without_lease`` sends no lease id (a lease-less ack
        that works after expiry and skips the lease check)."""
        pairs = _ack_pairs(messages, status, group, error, without_lease)
        if not pairs:
            return []
        res = self._ack_entries(pairs)
        for m in [messages] if isinstance(messages, Message) else messages:
            m._acked = True
        return res

    def _renew_one(self, lease_id: str, seconds: int, *, after_close: bool = False) -> RenewResult:
        return self._call(R.renew(lease_id, seconds), after_close=after_close)

    def renew(
        self, messages_or_lease_ids: Message | str | Sequence[Message | str], *, seconds: float = 60
    ) -> list[RenewResult]:
        """Extend leases (deduplicated; one call per lease id)."""
        items = (
            [messages_or_lease_ids]
            if isinstance(messages_or_lease_ids, (Message, str))
            else list(messages_or_lease_ids)
        )
        return [self._renew_one(lid, P.renew_seconds(seconds)) for lid in P.lease_ids(items)]

    def _buffer(
        self, queue: str, partition: str | None, opts: BufferOptions, on_error: ErrorCallback | None
    ) -> PushBuffer:
        with self._lock:
            if self._closed:
                raise ClientClosedError("lanes: buffer: client is closed")
            check_names("buffer", queue, partition)
            key = (queue, partition)
            b = self._buffers.get(key)
            if b is None:
                q = self.queue(queue)
                if partition:
                    q = q.partition(partition)
                b = PushBuffer(
                    q.push, opts, on_error, self._cfg.logger, f"{queue}/{partition or 'Default'}"
                )
                if not self._buffers:
                    atexit.register(self._flush_at_exit)
                self._buffers[key] = b
            return b

    def _flush_at_exit(self) -> None:
        """The safety net for a program that ends without close(): the flusher threads are
        daemons, so what is buffered would be lost. Flushed briefly; what is left is logged."""
        try:
            flush_every(list(self._buffers.values()), EXIT_FLUSH_TIMEOUT)
        except UnsentError as e:
            _log_unsent_at_exit(self._cfg.logger, e.unsent)

    def flush_all(self, timeout: float | None = 30.0) -> None:
        """Flush every buffer at once; :class:`UnsentError` names the total left at ``timeout``."""
        flush_every(list(self._buffers.values()), timeout)

    def buffer_stats(self) -> BufferStats:
        """The client's push buffers: how many, the items waiting in them, the batches sent."""
        with self._lock:
            buffers = list(self._buffers.values())
        return buffer_stats(buffers)

    def close(self, timeout: float | None = 30.0) -> None:
        """Soft-stop consumers started here, flush buffers (all at once, raising
        :class:`UnsentError` with the count left at ``timeout``), close the HTTP client.
        Afterwards buffers and every call raise :class:`ClientClosedError`. Idempotent. From
        its start ``consume()``, ``run()``, ``messages()`` and new buffers raise it (another
        thread's too): close() stops the consumers and ends the iterators made before it.
        The iterations made here end: an iterator paused between two messages releases what its
        own close() would (under ``auto_ack``, the message in hand and those not handed over)
        before the pool closes, and one inside ``next()`` is stopped (docs/consuming.md §5).
        Every consumer is asked to stop before close() waits for any.
        A stopped consumer's long poll was cut at the stop (its connection half-closed), and so
        was the pop of an iterator stopped (:meth:`MessageIterator.stop`) while it was under
        way: close() waits up to 2 s for them to end and release what the broker had already
        leased to them, so a program may exit right after. On a caller's ``http_client`` a pop
        cannot be cut: the HTTP pool stays open until it answers (within its
        ``timeout_millis``) and releases what it leased, then closes; a consumer's thread is a
        daemon, and a program exiting before then leaves a message it got in those last moments
        leased until the lease expires.
        ``timeout`` is one deadline for the whole close, as ``Close(ctx)`` in Go and
        ``close({timeoutMillis})`` in TypeScript: the paused iterators' releases, the wait for
        all the consumers together (not one per consumer), the flush, which gets what is left,
        and the wait for cut pops (2 s at most) share it, so close() returns within about
        ``timeout`` (None: no deadline). A consumer still stopping at the deadline (a handler
        slower than it) leaves the flush no time: close() starts no send, and raises
        :class:`UnsentError` naming what the buffers hold, or ``TimeoutError`` when they hold
        nothing; the HTTP pool stays open until that consumer ends, so its lease renewals and
        acks still go out. A release cut at the deadline leaves its messages leased until
        their lease ends.
        Interrupted while it waits (Ctrl-C's ``KeyboardInterrupt``), it re-raises at once and
        leaves the HTTP pool open and the buffers' flushers running, so handlers still running
        get their acks out; call close() again to finish (the exit hook flushes the buffers of
        a program that ends instead). Interrupted in its last wait, for the cut pops, it has
        nothing left to finish: the pool closes once they have released what they got."""
        with self._lock:
            if self._gone or self._closing:
                return
            self._closed = self._closing = True
        # One deadline for the whole close: the iterators' releases, the consumers' stop, the
        # flush and the wait for cut pops share it, so close(5) returns within about 5 s.
        closing_by = None if timeout is None else time.monotonic() + timeout
        try:
            # No call can ack for an iterator once the pool is closed: each ends here, and
            # releases what it holds while the pool is open (within the deadline).
            with _bounded_by(closing_by):
                for it in list(self._iterators):
                    it._end_with_client()
            still_stopping = self._stop_consumers(closing_by)
            unsent = self._flush_buffers(closing_by)
        except BaseException:
            # Interrupted: every consumer was asked to stop, and nothing they or the buffers
            # need is closed, so the next close() (or the exit hook) finishes the job.
            self._closing = False
            raise
        atexit.unregister(self._flush_at_exit)
        self._gone = True
        try:
            if self._t.cuts_calls and still_stopping is None:
                # The stopped consumers' long polls were cut: they end within milliseconds,
                # and a program that exits right after close() must not end them first (a
                # message one got would stay leased for the whole lease).
                self._pops.wait_idle(_cut_wait(closing_by))
        finally:
            self._pops.when_idle(self._t.close)
        if unsent is not None:
            raise unsent
        if still_stopping is not None:
            raise still_stopping

    def _stop_consumers(self, deadline: float | None) -> TimeoutError | None:
        """Soft-stop the consumers started here; the first ``TimeoutError`` of one still
        stopping at the ``time.monotonic()`` deadline, for which the HTTP pool stays open until
        it ends (its acks)."""
        consumers = list(self._consumers)  # none is added once _closed is set
        still_stopping: TimeoutError | None = None
        # One deadline for them all: N consumers still stopping hold close() `timeout`, not N
        # times it.
        try:
            # Every one is asked before close() waits on any: an interrupt during a wait leaves
            # no consumer running that was never told to stop.
            for c in consumers:
                c._request_stop()
            for c in consumers:
                try:
                    c.stop(_time_left(deadline))
                except TimeoutError as e:
                    still_stopping = still_stopping or e  # the flush still gets what is left
                    self._pops.begin()
                    c.when_ended(self._pops.end)
        except BaseException:
            for c in consumers:  # the interrupt may have come before the last was asked
                c._request_stop()
            raise
        return still_stopping

    def _flush_buffers(self, deadline: float | None) -> UnsentError | None:
        """Refuse pushes and flush every buffer until the ``time.monotonic()`` deadline; the
        ``UnsentError`` naming what is left then. Interrupted, the flushers go on sending for
        the next close()."""
        buffers = list(self._buffers.values())  # no buffer is made once _closed is set
        left = _time_left(deadline)
        if left == 0:
            # No time left: stopped before refuse() wakes them, the flushers start no send the
            # pool would close under; what they hold is counted unsent.
            for b in buffers:
                b.stop()
        for b in buffers:
            b.refuse()
        unsent: UnsentError | None = None
        try:
            flush_every(buffers, left)
        except UnsentError as e:
            unsent = e
        for b in buffers:
            b.stop()
        return unsent

    def __enter__(self) -> Lanes:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class AsyncLanes:
    """Asyncio Lanes client (same options as :class:`Lanes`; ``http_client`` is an
    ``httpx.AsyncClient``, and a ``bearer_token`` function may be async). Use ``async with`` or
    ``await client.aclose()``."""

    def __init__(
        self,
        url: str | None = None,
        *,
        urls: Sequence[str] | None = None,
        bearer_token: BearerToken | None = None,
        timeout: float = 30.0,
        retry_attempts: int = 2,
        retry_delay: float = 0.5,
        max_retry_delay: float = 8.0,
        max_429_attempts: int = 10,
        max_retry_after: float = 60.0,
        health_retry_after: float = 5.0,
        logger: logging.Logger | None = None,
        http_client: httpx.AsyncClient | None = None,
        headers: Mapping[str, str] | None = None,
        pop_autopilot: bool | None = None,
        _clock: Callable[[], float] | None = None,
        _rng: Callable[[], float] | None = None,
        _sleep: Callable[[float], Any] | None = None,
    ) -> None:
        self._cfg = _config(
            url, urls, bearer_token, timeout, retry_attempts, retry_delay, max_retry_delay,
            max_429_attempts, max_retry_after, health_retry_after, logger, headers, pop_autopilot,
            _clock, _rng,
        )  # fmt: skip
        self._t = AsyncTransport(self._cfg, http_client, _sleep)
        self._consumers: set[AsyncConsumer] = set()
        self._stopped_iterators = StoppedIterators()
        self._iterators: weakref.WeakSet[AsyncMessageIterator] = weakref.WeakSet()
        # Closes the HTTP pool once the consumers aclose() gave up on have ended.
        self._pool_closing: asyncio.Future[None] | None = None
        self._buffers: dict[tuple[str, str | None], AsyncPushBuffer] = {}
        self._closed = False  # close() began: no new buffers, buffer pushes, consumers or iterators
        self._gone = False  # close() ended: the HTTP pool is closed
        self.admin = AsyncAdmin(self)

    @property
    def pop_autopilot(self) -> bool:
        return self._cfg.pop_autopilot

    async def _call(self, req: Req[T], *, after_close: bool = False) -> T:
        """``after_close``: a consumer's ack or renewal, sent while aclose() keeps the HTTP
        pool open for it."""
        if self._gone and not after_close:
            raise ClientClosedError("lanes: client is closed")
        r = await self._t.request(
            req.method,
            req.path,
            query=req.query,
            body=req.body,
            long_poll=req.long_poll,
            timeout=req.timeout,
            not_idempotent=req.not_idempotent,
        )
        return req.answer(r)

    def _start_consumer(self, start: Callable[[], AsyncConsumer]) -> AsyncConsumer:
        """As :meth:`Lanes._start_consumer` (one event loop: no lock needed)."""
        if self._closed:
            raise ClientClosedError("lanes: consume: client is closed")
        consumer = start()
        self._consumers = {c for c in self._consumers if not c.done}
        self._consumers.add(consumer)
        return consumer

    def _start_iterator(self, make: Callable[[], AsyncMessageIterator]) -> AsyncMessageIterator:
        if self._closed:
            raise ClientClosedError("lanes: messages: client is closed")
        it = make()
        self._iterators.add(it)
        return it

    def queue(self, name: str | None = None) -> AsyncQueue:
        return AsyncQueue(self, P.QueueSpec(queue=name))

    async def health(self) -> models.Health:
        return await self._call(R.health())

    def transaction(self) -> AsyncTransaction:
        return AsyncTransaction(self)

    def kv(self, ns: str) -> AsyncKV:
        return AsyncKV(self, ns)

    async def kv_namespaces(self) -> models.KvNamespaceList:
        """Every KV namespace with its live key count (following the broker's pages)."""
        return await async_whole_listing(self, R.kv_namespaces())

    def timers(self, queue: str) -> AsyncTimers:
        return AsyncTimers(self, queue)

    async def _ack_entries(
        self, entries: list[tuple[str, P.AckEntry]], *, after_close: bool = False
    ) -> list[AckResult]:
        parts = [
            (idx, await self._call(R.ack(path, body), after_close=after_close))
            for path, body, idx in P.ack_requests(entries)
        ]
        return P.merge_ack_results(len(entries), parts)

    async def ack(
        self,
        messages: Message | Sequence[Message],
        status: AckStatus = "completed",
        *,
        group: str | None = None,
        error: str | None = None,
        without_lease: bool = False,
    ) -> list[AckResult]:
        pairs = _ack_pairs(messages, status, group, error, without_lease)
        if not pairs:
            return []
        res = await self._ack_entries(pairs)
        for m in [messages] if isinstance(messages, Message) else messages:
            m._acked = True
        return res

    async def _renew_one(
        self, lease_id: str, seconds: int, *, after_close: bool = False
    ) -> RenewResult:
        return await self._call(R.renew(lease_id, seconds), after_close=after_close)

    async def renew(
        self, messages_or_lease_ids: Message | str | Sequence[Message | str], *, seconds: float = 60
    ) -> list[RenewResult]:
        items = (
            [messages_or_lease_ids]
            if isinstance(messages_or_lease_ids, (Message, str))
            else list(messages_or_lease_ids)
        )
        return [await self._renew_one(lid, P.renew_seconds(seconds)) for lid in P.lease_ids(items)]

    def _buffer(
        self, queue: str, partition: str | None, opts: BufferOptions, on_error: ErrorCallback | None
    ) -> AsyncPushBuffer:
        if self._closed:
            raise ClientClosedError("lanes: buffer: client is closed")
        check_names("buffer", queue, partition)
        key = (queue, partition)
        b = self._buffers.get(key)
        if b is None:
            q = self.queue(queue)
            if partition:
                q = q.partition(partition)
            b = AsyncPushBuffer(
                q.push, opts, on_error, self._cfg.logger, f"{queue}/{partition or 'Default'}"
            )
            if not self._buffers:
                atexit.register(self._report_unsent_at_exit)
            self._buffers[key] = b
        return b

    def _report_unsent_at_exit(self) -> None:
        """A program that ends without aclose() loses what is buffered: no coroutine can run
        at exit to flush it, so the loss is logged."""
        unsent = sum(len(b) for b in self._buffers.values())
        if unsent:
            _log_unsent_at_exit(self._cfg.logger, unsent)

    async def flush_all(self, timeout: float | None = 30.0) -> None:
        """As :meth:`Lanes.flush_all`."""
        await aflush_every(list(self._buffers.values()), timeout)

    def buffer_stats(self) -> BufferStats:
        """As :meth:`Lanes.buffer_stats`."""
        return buffer_stats(list(self._buffers.values()))

    async def aclose(self, timeout: float | None = 30.0) -> None:
        """As :meth:`Lanes.close`: ``timeout`` is one deadline for the whole aclose(). A stopped
        consumer's or iterator's long poll is cut at the stop (its connection half-closed): the
        consumer's stop waits up to 2 s for it to end and release what the broker had already
        leased to it, and aclose() waits up to 2 s for an iterator's, so a program may exit
        right after; neither wait runs past the deadline, and the HTTP pool stays open for
        what is still on its way then. On a caller's ``http_client`` a consumer's is
        cancelled instead, and an iterator's runs to its long poll's end.
        Cancelled, unlike an interrupted ``Lanes.close()``, it still closes the client (a
        second aclose() does nothing) and re-raises the ``CancelledError`` at once, after
        logging the buffered items it leaves (the error's ``__cause__`` is an
        :class:`UnsentError` naming them). Its consumers are then left as a timed-out aclose()
        leaves those still stopping: each was soft-stopped before aclose() first waited (it
        asks every one before it waits for any), and the HTTP pool stays open until every one
        still running has ended, so their handlers' lease renewals, acks and releases still go
        out, and until a stopped iterator whose cut pop was still on its way has released what
        it got (2 s at most); it closes then, and no task outlives the last of them."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self._report_unsent_at_exit)
        still_stopping: TimeoutError | None = None
        running: list[AsyncConsumer] = []
        buffers = list(self._buffers.values())  # no buffer is made once _closed is set
        consumers = list(self._consumers)
        # One deadline for the whole aclose(), as in Lanes.close().
        deadline = None if timeout is None else time.monotonic() + timeout
        # Every consumer is asked before aclose() awaits anything: one not yet asked would go
        # on popping and starting handlers while aclose() waits for another's (or is
        # cancelled), work the shutdown would then wait for or release to be redelivered.
        for c in consumers:
            c._request_stop()
        try:
            # No call can ack for an iterator once the pool is closed: each ends here, and
            # releases what it holds. A stopped iterator's cut pop ends within milliseconds,
            # then releases what the broker had already sent it: closing the pool first would
            # leave that leased, and so would closing it before those releases.
            for it in list(self._iterators):
                it._end_with_client()
            # One still releasing at the deadline keeps the pool open for it (below).
            await self._stopped_iterators.closed(_cut_wait(deadline))
            for c in consumers:
                try:
                    await c.stop(_time_left(deadline))
                except TimeoutError as e:
                    still_stopping = still_stopping or e  # the flush still gets what is left
                    running.append(c)
            left = _time_left(deadline)
            if left == 0:
                # No time left: stopped before refuse() wakes them, the flushers start no send
                # the pool would close under; what they hold is counted unsent.
                for b in buffers:
                    await b.stop()
            for b in buffers:
                await b.refuse()
            try:
                await aflush_every(buffers, left)
            finally:
                for b in buffers:
                    await b.stop()
        except asyncio.CancelledError as cancelled:
            running = [c for c in consumers if not c.done]
            await self._report_unsent_at_cancel(buffers, cancelled)
            raise
        finally:
            if running or self._stopped_iterators.open:
                # The pool stays open until the consumers still stopping end (their acks) and,
                # after a cancellation, the stopped iterators release what their cut pops got.
                self._pool_closing = asyncio.ensure_future(self._close_pool_after(running))
            else:
                await self._t.aclose()
            self._gone = True
        if still_stopping is not None:
            raise still_stopping

    async def _report_unsent_at_cancel(
        self, buffers: list[AsyncPushBuffer], cancelled: asyncio.CancelledError
    ) -> None:
        """A cancelled aclose() must let the cancellation through, so it cannot raise the
        UnsentError a timed-out one raises: it logs the count at error level (the pool closes,
        so the items are lost) and hangs the UnsentError on the CancelledError as its cause.
        The buffers are stopped first (also when the cancellation came before their flush), so
        no flusher outlives the client and a send it had in flight counts as unsent."""
        for b in buffers:
            await b.refuse()
            await b.stop()
        unsent = sum(len(b) for b in buffers)
        if unsent:
            self._cfg.logger.error(
                "lanes: aclose() was cancelled with %d buffered push item(s) unsent: they are "
                "lost with the client",
                unsent,
            )
            cancelled.__cause__ = UnsentError(unsent)

    async def _close_pool_after(self, consumers: list[AsyncConsumer]) -> None:
        await asyncio.gather(
            self._stopped_iterators.closed(CUT_WAIT_S),
            *(c.closed() for c in consumers),
            return_exceptions=True,
        )
        await self._t.aclose()

    async def __aenter__(self) -> AsyncLanes:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
