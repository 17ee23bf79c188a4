"""Pull iterators: ``for msg in q.messages()`` / ``async for msg in q.messages()``.

With ``auto_ack`` (default) a message is acked ``completed`` once you ask for the next one; the
acks of one pop go out as one batch before the next pop. Leaving early (``break``, an exception,
``close()``) releases the message in hand (unless you acked it) and the rest of its batch with
``retry``: redelivered without spending the retry budget.

Errors the iteration waits out (failed pops: network failures, 429, 5xx but 501) and failed acks
(``AckError`` or the call's own error) go to ``on_error`` (the builder's ``.on_error()`` or the
``on_error=`` keyword of ``messages()``), else to the ``lanes`` logger; only an error that ends the
iteration is raised (403, 413, other 4xx, 501), as in Go and TypeScript."""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from types import TracebackType

from lanes import _protocol as P
from lanes._consumer import ErrorCallback
from lanes._exceptions import ConsumerStoppedError
from lanes._pacer import PollPacer
from lanes._types import AckResult, Message, PopResult

Entries = list[tuple[str, P.AckEntry]]

_log = logging.getLogger("lanes")


class _Core:
    def __init__(
        self,
        spec: P.QueueSpec,
        auto_ack: bool,
        limit: int,
        idle_timeout: float,
        on_error: ErrorCallback | None = None,
    ) -> None:
        self.spec = spec
        self.on_error = on_error
        self.auto_ack = auto_ack
        self.limit = limit
        self.idle_timeout = idle_timeout
        self.buf: deque[Message] = deque()
        self.current: Message | None = None
        self.pending: Entries = []
        self.yielded = 0
        self.closed = False
        self.last_msg = time.monotonic()
        self.pacer = PollPacer(
            spec.parks, lambda e, pause: self.report(e, f"popping again in {pause:.1f} s")
        )

    def _entry(self, m: Message, status: str) -> tuple[str, P.AckEntry]:
        return (
            P.group_of(m, None),
            P.AckEntry(m.transaction_id, m.partition_id, m.lease_id, status),
        )

    def finish_current(self) -> None:
        m, self.current = self.current, None
        if m is not None:
            self.last_msg = time.monotonic()  # idle counts from the end of the handling, as in Go
        if m is not None and self.auto_ack and not m._acked and not self.spec.server_auto_ack:
            self.pending.append(self._entry(m, "completed"))

    def next_buffered(self) -> Message | None:
        if self.limit and self.yielded >= self.limit:
            raise StopIteration
        if self.buf:
            self.current = self.buf.popleft()
            self.yielded += 1
            self.last_msg = time.monotonic()
            return self.current
        return None

    def take_pending(self) -> Entries:
        out, self.pending = self.pending, []
        return out

    def pause_after(self, err: Exception) -> float:
        """The pause before the next pop after a pop error the iteration waits out, as the
        consume loop does (docs/consuming.md §4: network failures, 429, 5xx but 501); an error
        that ends the iteration (403, 413, other 4xx, 501) is raised again."""
        pause = self.pacer.after_error(err)
        if pause is None:
            raise err
        return pause

    def report(self, err: BaseException, then: str) -> None:
        """Pass an error the iteration goes on after to ``on_error``, else log it."""
        if self.on_error is None:
            _log.warning("lanes: messages: %s; %s", err, then)
            return
        with contextlib.suppress(Exception):  # a broken callback must not end the iteration
            self.on_error(err)

    def feed(self, res: PopResult) -> float:
        """Take a pop's messages; return the pause before the next pop (0 = none)."""
        pause = self.pacer.after_answer(res)
        if res.messages:
            for g in P.by_partition(res.messages):
                self.buf.extend(g)
            return pause
        if self.idle_timeout and time.monotonic() - self.last_msg >= self.idle_timeout:
            raise StopIteration
        return pause

    def close_entries(self) -> Entries:
        self.closed = True
        out = self.take_pending()
        if self.spec.server_auto_ack:
            self.buf.clear()
            self.current = None
            return out
        m, self.current = self.current, None
        rest = list(self.buf)
        self.buf.clear()
        if m is not None and self.auto_ack and not m._acked:
            rest.insert(0, m)
        for g in P.by_partition(rest):
            out.append(self._entry(g[0], "retry"))
        return out


class MessageIterator:
    """Blocking pull iterator; also a context manager that calls :meth:`close`."""

    def __init__(
        self,
        core: _Core,
        pop: Callable[[], PopResult],
        ack: Callable[[Entries], list[AckResult]],
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._c, self._pop, self._ack_call, self._sleep = core, pop, ack, sleep

    def _ack(self, entries: Entries) -> None:
        """Send acks; a failure is reported, not raised (the messages redeliver after their
        lease), as in the consume loop."""
        try:
            self._ack_call(entries)
        except Exception as e:
            self._c.report(e, "its messages redeliver after their lease")

    def __iter__(self) -> MessageIterator:
        return self

    def __next__(self) -> Message:
        c = self._c
        if c.closed:
            raise StopIteration
        c.finish_current()
        try:
            while True:
                m = c.next_buffered()
                if m is not None:
                    return m
                pending = c.take_pending()
                if pending:
                    self._ack(pending)
                try:
                    res = self._pop()
                except Exception as e:
                    self._sleep(c.pause_after(e))
                    continue
                pause = c.feed(res)
                if pause:
                    self._sleep(pause)
        except StopIteration:
            self.close()
            raise

    def close(self) -> None:
        """Send pending acks and release what was not handled (idempotent)."""
        if self._c.closed:
            return
        entries = self._c.close_entries()
        if entries:
            self._ack(entries)

    def __enter__(self) -> MessageIterator:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if not self._c.closed:
                self.close()
        except Exception:
            pass


class AsyncMessageIterator:
    """Asyncio pull iterator; use ``async with q.messages() as it: async for m in it`` so the
    release on early exit is awaited."""

    def __init__(
        self,
        core: _Core,
        pop: Callable[[], Awaitable[PopResult]],
        ack: Callable[[Entries], Awaitable[list[AckResult]]],
        sleep: Callable[[float], Awaitable[None]],
    ) -> None:
        self._c, self._pop, self._ack_call, self._sleep = core, pop, ack, sleep

    async def _ack(self, entries: Entries) -> None:
        try:
            await self._ack_call(entries)
        except Exception as e:
            self._c.report(e, "its messages redeliver after their lease")

    def __aiter__(self) -> AsyncMessageIterator:
        return self

    async def __anext__(self) -> Message:
        c = self._c
        if c.closed:
            raise StopAsyncIteration
        c.finish_current()
        try:
            while True:
                m = c.next_buffered()
                if m is not None:
                    return m
                pending = c.take_pending()
                if pending:
                    await self._ack(pending)
                try:
                    res = await self._pop()
                except Exception as e:
                    await self._sleep(c.pause_after(e))
                    continue
                pause = c.feed(res)
                if pause:
                    await self._sleep(pause)
        except StopIteration:
            await self.aclose()
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        if self._c.closed:
            return
        entries = self._c.close_entries()
        if entries:
            await self._ack(entries)

    async def __aenter__(self) -> AsyncMessageIterator:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


__all__ = ["AsyncMessageIterator", "ConsumerStoppedError", "MessageIterator"]
