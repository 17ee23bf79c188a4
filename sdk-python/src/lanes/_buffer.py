"""Optional client-side push buffer (docs/sdk-design.md §2): bounded, flushed on count or time,
a failed flush kept at the front and retried, flushed by ``close()``."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from lanes._exceptions import APIError, LanesError, PushError
from lanes._protocol import normalize_item, uuid7
from lanes._types import Item, PushResult


@dataclass(frozen=True)
class BufferOptions:
    message_count: int = 100
    time_millis: int = 1000
    max_size: int = 0  # 0 → 4 x message_count
    retry_delay_millis: int = 250

    @property
    def bound(self) -> int:
        return self.max_size or 4 * self.message_count


def _terminal(e: BaseException) -> bool:
    """Errors after which resending the same batch cannot help: dropped and reported."""
    if isinstance(e, PushError):
        return False  # failed items are retried with the same transaction ids
    return isinstance(e, APIError) and e.status in (400, 403, 413)


class _Core:
    def __init__(
        self, opts: BufferOptions, on_error: Callable[[BaseException], None] | None
    ) -> None:
        self.opts = opts
        self.on_error = on_error
        self.items: deque[Any] = deque()
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

    def add(self, item: Any, now: float) -> None:
        if not self.items:
            self.first_at = now
        # The transaction id is minted once, here: a batch sent again after a
        # lost answer then carries the same ids and the broker deduplicates it.
        payload, tid, trace = normalize_item(item)
        self.items.append(Item(data=payload, transaction_id=tid or uuid7(), trace_id=trace))

    def take(self) -> list[Any]:
        n = min(len(self.items), self.opts.message_count)
        return [self.items.popleft() for _ in range(n)]

    def done(self, batch: list[Any], err: BaseException | None, now: float) -> bool:
        """Record a flush; True when the batch must be retried (kept at the front)."""
        if err is None:
            self.flushes += 1
            if not self.items:
                self.first_at = None
            return False
        if self.on_error is not None:
            with contextlib.suppress(Exception):
                self.on_error(err)
        if _terminal(err):
            return False
        if isinstance(err, PushError):
            # The others were stored: only the failed items go back.
            failed = {e.index for e in err.items}
            batch = [it for i, it in enumerate(batch) if i in failed]
        self.items.extendleft(reversed(batch))
        self.first_at = now
        return True


class PushBuffer:
    """Blocking buffer for one (queue, partition). ``push`` blocks while ``max_size`` items wait."""

    def __init__(
        self,
        send: Callable[[list[Any]], list[PushResult]],
        opts: BufferOptions,
        on_error: Callable[[BaseException], None] | None = None,
    ) -> None:
        self._send = send
        self._core = _Core(opts, on_error)
        self._cv = threading.Condition()
        self._inflight = 0
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="lanes-buffer", daemon=True)
        self._thread.start()

    def __len__(self) -> int:
        with self._cv:
            return len(self._core.items) + self._inflight

    def push(self, items: Sequence[Any], timeout: float | None = None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            for it in items:
                while len(self._core.items) + self._inflight >= self._core.opts.bound:
                    left = None if deadline is None else deadline - time.monotonic()
                    if self._closed or (left is not None and left <= 0):
                        raise LanesError("lanes: push buffer full")
                    self._cv.wait(left)
                self._core.add(it, time.monotonic())
            self._cv.notify_all()

    def _flush_once(self) -> bool:
        with self._cv:
            batch = self._core.take()
            self._inflight += len(batch)
        if not batch:
            return False
        err: BaseException | None = None
        try:
            self._send(batch)
        except Exception as e:
            err = e
        with self._cv:
            self._inflight -= len(batch)
            retry = self._core.done(batch, err, time.monotonic())
            self._cv.notify_all()
        return retry

    def _loop(self) -> None:
        while True:
            with self._cv:
                while True:
                    due = self._core.due(time.monotonic())
                    if self._closed and due is None:
                        return
                    if due == 0.0 or (self._closed and due is not None):
                        break
                    self._cv.wait(due)
            if self._flush_once():
                time.sleep(self._core.opts.retry_delay_millis / 1000.0)

    def flush(self, timeout: float | None = 30.0) -> None:
        """Send everything waiting now (retrying failed batches until ``timeout``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            self._core.first_at = 0.0  # make the time trigger due
            self._cv.notify_all()
            while self._core.items or self._inflight:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"lanes: {len(self._core.items)} buffered items unsent")
                self._cv.wait(min(left, 0.05) if left is not None else 0.05)
                if self._core.items:
                    self._core.first_at = 0.0
                    self._cv.notify_all()

    def close(self, timeout: float | None = 30.0) -> None:
        try:
            self.flush(timeout)
        finally:
            with self._cv:
                self._closed = True
                self._cv.notify_all()


class AsyncPushBuffer:
    """Asyncio twin of :class:`PushBuffer` (its flusher is a task on the running loop)."""

    def __init__(
        self,
        send: Callable[[list[Any]], Awaitable[list[PushResult]]],
        opts: BufferOptions,
        on_error: Callable[[BaseException], None] | None = None,
    ) -> None:
        self._send = send
        self._core = _Core(opts, on_error)
        self._cv = asyncio.Condition()
        self._inflight = 0
        self._closed = False
        self._task = asyncio.ensure_future(self._loop())

    def __len__(self) -> int:
        return len(self._core.items) + self._inflight

    async def push(self, items: Sequence[Any]) -> None:
        async with self._cv:
            for it in items:
                while len(self) >= self._core.opts.bound:
                    if self._closed:
                        raise LanesError("lanes: push buffer closed")
                    await self._cv.wait()
                self._core.add(it, time.monotonic())
            self._cv.notify_all()

    async def _loop(self) -> None:
        while True:
            async with self._cv:
                while True:
                    due = self._core.due(time.monotonic())
                    if self._closed and due is None:
                        return
                    if due == 0.0 or (self._closed and due is not None):
                        break
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(self._cv.wait(), due)
                batch = self._core.take()
                self._inflight += len(batch)
            err: BaseException | None = None
            try:
                await self._send(batch)
            except Exception as e:
                err = e
            async with self._cv:
                self._inflight -= len(batch)
                retry = self._core.done(batch, err, time.monotonic())
                self._cv.notify_all()
            if retry:
                await asyncio.sleep(self._core.opts.retry_delay_millis / 1000.0)

    async def flush(self, timeout: float | None = 30.0) -> None:
        async def drain() -> None:
            async with self._cv:
                while len(self):
                    if self._core.items:
                        self._core.first_at = 0.0
                    self._cv.notify_all()
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(self._cv.wait(), 0.05)

        try:
            await asyncio.wait_for(drain(), timeout)
        except asyncio.TimeoutError:
            raise TimeoutError(f"lanes: {len(self._core.items)} buffered items unsent") from None

    async def aclose(self, timeout: float | None = 30.0) -> None:
        try:
            await self.flush(timeout)
        finally:
            async with self._cv:
                self._closed = True
                self._cv.notify_all()
            if not self._core.items:
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(self._task, 1.0)
