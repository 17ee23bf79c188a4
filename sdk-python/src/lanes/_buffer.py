"""Optional client-side push buffer (docs/sdk-design.md §2): bounded, flushed on count or time,
a failed flush kept at the front and retried, a batch the broker refuses split until only the
items it refuses alone are dropped, flushed by ``close()``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from lanes._exceptions import (
    APIError,
    ClientClosedError,
    DroppedError,
    LanesError,
    PushError,
    UnsentError,
)
from lanes._protocol import CheckedItem, check_items
from lanes._types import PushResult


@dataclass(frozen=True)
class BufferOptions:
    message_count: int = 100
    time_millis: int = 1000
    max_size: int = 0  # 0 → 4 x message_count
    retry_delay_millis: int = 250

    def __post_init__(self) -> None:
        # 0 or below takes the default, as Go's zero value does: a count of 0 took no item
        # per flush, so nothing was ever sent, and a delay of 0 retried a failing flush in a
        # tight loop.
        if self.message_count <= 0:
            object.__setattr__(self, "message_count", 100)
        if self.retry_delay_millis <= 0:
            object.__setattr__(self, "retry_delay_millis", 250)

    @property
    def bound(self) -> int:
        return self.max_size if self.max_size > 0 else 4 * self.message_count


@dataclass(frozen=True)
class BufferStats:
    """What ``buffer_stats()`` reports of a client's push buffers (Go ``BufferStats``, TS
    ``bufferStats()``)."""

    active_buffers: int
    """How many buffers the client holds (one per queue and partition)."""
    total_buffered_messages: int
    """How many items wait in them, not sent yet."""
    flushes_performed: int
    """The batches they sent (a batch halved to set a refused item apart counts once); a batch
    that failed and stays to be retried is not counted."""


def buffer_stats(buffers: Sequence[PushBuffer] | Sequence[AsyncPushBuffer]) -> BufferStats:
    return BufferStats(
        active_buffers=len(buffers),
        total_buffered_messages=sum(len(b) for b in buffers),
        flushes_performed=sum(b.flushes for b in buffers),
    )


def _status(e: BaseException) -> int:
    return e.status if isinstance(e, APIError) and not isinstance(e, PushError) else 0


def _splits(e: BaseException, n: int) -> bool:
    """A batch the broker refused as a whole (413, or a 400 for several items) may hold items
    it would take alone: the buffer built the batch, so it halves it."""
    return n > 1 and _status(e) in (400, 413)


def _drops(e: BaseException) -> bool:
    """Errors after which resending the same items cannot help: dropped and reported."""
    return _status(e) in (400, 403, 413)


@dataclass
class _Refused:
    """The items one flush drops, so they are logged and reported once; ``cause`` is the
    broker's answer to the first."""

    items: list[CheckedItem]
    cause: BaseException | None = None

    def add(self, batch: list[CheckedItem], err: BaseException) -> None:
        if self.cause is None:
            self.cause = err
        self.items.extend(batch)


def _prepare(items: Sequence[Any]) -> list[CheckedItem]:
    """Check every item of a push before any is enqueued, so an item that cannot be sent
    fails the call (InvalidItemError) instead of blocking the buffer. The transaction id is
    minted once, here: a batch sent again after a lost answer carries the same ids and the
    broker deduplicates it. The payload is encoded here too, and that encoding is what is sent."""
    return check_items(items)


class _Core:
    def __init__(
        self,
        opts: BufferOptions,
        on_error: Callable[[BaseException], None] | None,
        logger: logging.Logger,
        name: str,
    ) -> None:
        self.opts = opts
        self.on_error = on_error
        self.log = logger
        self.name = name
        self.items: deque[CheckedItem] = deque()
        self.first_at: float | None = None
        self.flushes = 0

    def due(self, now: float) -> float | None:
        """Seconds until a flush is due (0 = now), None when empty."""
        if not self.items:
            return None
        if len(self.items) >= self.opts.message_count:
            return 0.0
        assert self.first_at is not None
        return max(0.0, self.first_at + self.opts.time_millis / 1000.0 - now)

    def make_due(self) -> None:
        """Make what waits due now, whatever the monotonic clock reads: it counts from boot
        (or process start), so a first_at of 0.0 was not due until time_millis after that."""
        if self.items:
            self.first_at = -math.inf

    def fits(self, n: int, inflight: int) -> bool:
        """Whether a push of ``n`` items may be queued whole now: it fits under the bound, or
        nothing waits (a push larger than the bound is taken alone rather than never)."""
        waiting = len(self.items) + inflight
        return waiting == 0 or waiting + n <= self.opts.bound

    def add(self, items: list[CheckedItem], now: float) -> None:
        if items and not self.items:
            self.first_at = now
        self.items.extend(items)

    def take(self) -> list[CheckedItem]:
        n = min(len(self.items), self.opts.message_count)
        return [self.items.popleft() for _ in range(n)]

    def settle(
        self, batch: list[CheckedItem], err: BaseException, dropped: _Refused
    ) -> tuple[list[CheckedItem], BaseException | None]:
        """A failed send that is not split: the items to keep for a retry and the retryable
        error, or nothing when the items are dropped (added to ``dropped``)."""
        if _drops(err):
            dropped.add(batch, err)
            return [], None
        if self.on_error is None:
            self.log.warning("lanes: push buffer %s: flush failed: %s", self.name, err)
        self.report(err)
        if isinstance(err, PushError):
            # The others were stored: only the failed items go back.
            failed = {e.index for e in err.items}
            return [it for i, it in enumerate(batch) if i in failed], err
        return batch, err

    def drop(self, dropped: _Refused) -> None:
        """Give up on the items one flush dropped: one log line, one DroppedError."""
        if dropped.cause is None:
            return
        # Lost messages are never silent: "lanes" warnings reach stderr by default.
        self.log.error(
            "lanes: push buffer %s dropped %d item(s) the broker refuses (first transaction "
            "id %r): %s",
            self.name,
            len(dropped.items),
            dropped.items[0].transaction_id,
            dropped.cause,
        )
        self.report(DroppedError([c.as_item() for c in dropped.items], dropped.cause))

    def report(self, err: BaseException) -> None:
        if self.on_error is not None:
            with contextlib.suppress(Exception):
                self.on_error(err)

    def done(self, keep: list[CheckedItem], err: BaseException | None, now: float) -> bool:
        """Record a flush; True when items went back to the front for a retry."""
        self.items.extendleft(reversed(keep))
        if err is None:
            self.flushes += 1
            if not self.items:
                self.first_at = None
            return False
        self.first_at = now
        return True


class PushBuffer:
    """Blocking buffer for one (queue, partition). ``push`` is all or nothing: it waits until
    all its items fit under ``max_size`` and queues them in one step; on a timeout or
    ``close()`` none of them is queued, so the caller can retry the whole call."""

    def __init__(
        self,
        send: Callable[[list[Any]], list[PushResult]],
        opts: BufferOptions,
        on_error: Callable[[BaseException], None] | None = None,
        logger: logging.Logger | None = None,
        name: str = "",
    ) -> None:
        self._send = send
        self._core = _Core(opts, on_error, logger or logging.getLogger("lanes"), name)
        self._cv = threading.Condition()
        self._inflight = 0
        self._closed = False  # refuses pushes
        self._stopped = False  # ends the flusher thread
        self._thread = threading.Thread(target=self._loop, name="lanes-buffer", daemon=True)
        self._thread.start()

    def __len__(self) -> int:
        with self._cv:
            return len(self._core.items) + self._inflight

    @property
    def flushes(self) -> int:
        """The batches this buffer sent."""
        with self._cv:
            return self._core.flushes

    def push(self, items: Sequence[Any], timeout: float | None = None) -> None:
        """Enqueue all items or none. Nothing is enqueued when it raises:
        :class:`InvalidItemError` for an item that cannot be sent, :class:`LanesError` when the
        items do not fit within ``timeout``, :class:`ClientClosedError` after ``close()``."""
        entries = _prepare(items)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            while not self._closed and not self._core.fits(len(entries), self._inflight):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise LanesError("lanes: push buffer full")
                self._cv.wait(left)
            if self._closed:
                raise ClientClosedError("lanes: client is closed")
            self._core.add(entries, time.monotonic())
            self._cv.notify_all()

    def _send_split(
        self, batch: list[CheckedItem], dropped: _Refused
    ) -> tuple[list[CheckedItem], BaseException | None]:
        try:
            self._send(batch)
            return [], None
        except Exception as e:
            if not _splits(e, len(batch)):
                return self._core.settle(batch, e, dropped)
        half = len(batch) // 2
        keep, err = self._send_split(batch[:half], dropped)
        if err is not None:
            return keep + batch[half:], err
        return self._send_split(batch[half:], dropped)

    def _flush_once(self) -> bool:
        with self._cv:
            batch = self._core.take()
            self._inflight += len(batch)
        if not batch:
            return False
        dropped = _Refused([])
        keep, err = self._send_split(batch, dropped)
        self._core.drop(dropped)
        with self._cv:
            self._inflight -= len(batch)
            retry = self._core.done(keep, err, time.monotonic())
            self._cv.notify_all()
        return retry

    def _loop(self) -> None:
        while True:
            with self._cv:
                while True:
                    if self._stopped:
                        return
                    due = self._core.due(time.monotonic())
                    if due == 0.0 or (self._closed and due is not None):
                        break
                    self._cv.wait(due)
            if self._flush_once():
                with self._cv:
                    self._cv.wait_for(
                        lambda: self._stopped, self._core.opts.retry_delay_millis / 1000.0
                    )

    def kick(self) -> None:
        """Make what waits due now."""
        with self._cv:
            self._core.make_due()
            self._cv.notify_all()

    def flush(self, timeout: float | None = 30.0) -> None:
        """Send everything waiting now (retrying failed batches until ``timeout``); raises
        :class:`UnsentError` with the count left when time runs out."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self.kick()
        with self._cv:
            while self._core.items or self._inflight:
                left = None if deadline is None else deadline - time.monotonic()
                if self._stopped or (left is not None and left <= 0):
                    raise UnsentError(len(self._core.items) + self._inflight)
                self._cv.wait(min(left, 0.05) if left is not None else 0.05)
                if self._core.items:
                    self._core.make_due()
                    self._cv.notify_all()

    def refuse(self) -> None:
        """Later pushes raise ClientClosedError; pushes waiting for room are woken."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()

    def stop(self) -> None:
        """End the flusher thread; what is left stays (and is counted by UnsentError)."""
        with self._cv:
            self._stopped = True
            self._cv.notify_all()

    def close(self, timeout: float | None = 30.0) -> None:
        self.refuse()
        try:
            self.flush(timeout)
        finally:
            self.stop()


def flush_every(buffers: Sequence[PushBuffer], timeout: float | None) -> None:
    """Flush every buffer at once (each has its own thread), so one that cannot be sent does not
    use up the others' time; then raise :class:`UnsentError` with the total left."""
    deadline = None if timeout is None else time.monotonic() + timeout
    for b in buffers:
        b.kick()
    unsent = 0
    for b in buffers:
        try:
            b.flush(None if deadline is None else max(0.0, deadline - time.monotonic()))
        except UnsentError as e:
            unsent += e.unsent
    if unsent:
        raise UnsentError(unsent)


class AsyncPushBuffer:
    """Asyncio twin of :class:`PushBuffer` (its flusher is a task on the running loop)."""

    def __init__(
        self,
        send: Callable[[list[Any]], Awaitable[list[PushResult]]],
        opts: BufferOptions,
        on_error: Callable[[BaseException], None] | None = None,
        logger: logging.Logger | None = None,
        name: str = "",
    ) -> None:
        self._send = send
        self._core = _Core(opts, on_error, logger or logging.getLogger("lanes"), name)
        self._cv = asyncio.Condition()
        self._inflight = 0
        # How many items at the front of the batch in flight are settled (stored or dropped):
        # a cut send puts the rest back, so what was not known sent stays counted.
        self._settled = 0
        self._closed = False  # refuses pushes
        self._stopped = False  # ends the flusher task
        self._task = asyncio.ensure_future(self._loop())

    def __len__(self) -> int:
        return len(self._core.items) + self._inflight

    @property
    def flushes(self) -> int:
        """The batches this buffer sent."""
        return self._core.flushes

    async def push(self, items: Sequence[Any]) -> None:
        """As :meth:`PushBuffer.push`: all or nothing (a cancelled push queues nothing)."""
        entries = _prepare(items)
        async with self._cv:
            while not self._closed and not self._core.fits(len(entries), self._inflight):
                await self._cv.wait()
            if self._closed:
                raise ClientClosedError("lanes: client is closed")
            self._core.add(entries, time.monotonic())
            self._cv.notify_all()

    async def _send_split(
        self, batch: list[CheckedItem], dropped: _Refused
    ) -> tuple[list[CheckedItem], BaseException | None]:
        try:
            await self._send(batch)
            self._settled += len(batch)
            return [], None
        except Exception as e:
            if not _splits(e, len(batch)):
                keep, err = self._core.settle(batch, e, dropped)
                if err is None:
                    self._settled += len(batch)
                return keep, err
        half = len(batch) // 2
        keep, err = await self._send_split(batch[:half], dropped)
        if err is not None:
            return keep + batch[half:], err
        return await self._send_split(batch[half:], dropped)

    async def _loop(self) -> None:
        while True:
            async with self._cv:
                while True:
                    if self._stopped:
                        return
                    due = self._core.due(time.monotonic())
                    if due == 0.0 or (self._closed and due is not None):
                        break
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(self._cv.wait(), due)
                batch = self._core.take()
                self._inflight += len(batch)
                self._settled = 0
            dropped = _Refused([])
            try:
                keep, err = await self._send_split(batch, dropped)
            except asyncio.CancelledError:
                # Cut by stop(): the items not known sent go back to the front, counted as
                # unsent (the halves a split settled are not), and its drops are still reported.
                self._core.drop(dropped)
                self._inflight -= len(batch)
                self._core.items.extendleft(reversed(batch[self._settled :]))
                raise
            self._core.drop(dropped)
            # Settled here, before any await, so a cancellation cannot lose the outcome.
            self._inflight -= len(batch)
            retry = self._core.done(keep, err, time.monotonic())
            async with self._cv:
                self._cv.notify_all()
            if retry:
                await asyncio.sleep(self._core.opts.retry_delay_millis / 1000.0)

    async def flush(self, timeout: float | None = 30.0) -> None:
        async def drain() -> None:
            async with self._cv:
                while len(self):
                    if self._stopped:
                        raise UnsentError(len(self))
                    self._core.make_due()
                    self._cv.notify_all()
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(self._cv.wait(), 0.05)

        try:
            await asyncio.wait_for(drain(), timeout)
        except asyncio.TimeoutError:
            raise UnsentError(len(self)) from None

    async def refuse(self) -> None:
        async with self._cv:
            self._closed = True
            self._cv.notify_all()

    async def stop(self) -> None:
        """End the flusher task, a send it has in flight included (close gave up on it: its
        items count as unsent), so no task of the buffer outlives the client's close."""
        async with self._cv:
            self._stopped = True
            self._cv.notify_all()
        self._task.cancel()
        await asyncio.wait({self._task})

    async def aclose(self, timeout: float | None = 30.0) -> None:
        await self.refuse()
        try:
            await self.flush(timeout)
        finally:
            await self.stop()


async def aflush_every(buffers: Sequence[AsyncPushBuffer], timeout: float | None) -> None:
    """Async twin of :func:`flush_every`: every buffer flushes concurrently under one timeout."""
    outcomes = await asyncio.gather(*(b.flush(timeout) for b in buffers), return_exceptions=True)
    unsent = 0
    for o in outcomes:
        if isinstance(o, UnsentError):
            unsent += o.unsent
        elif isinstance(o, BaseException):
            raise o
    if unsent:
        raise UnsentError(unsent)
