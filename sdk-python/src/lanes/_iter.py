"""Pull iterators: ``for msg in q.messages()`` / ``async for msg in q.messages()``.

With ``auto_ack`` (default) a message is acked ``completed`` once you ask for the next one; the
acks of one pop go out as one batch before the next pop. Leaving early (``break``, an exception,
``close()``) releases the message in hand (unless you acked it) and the rest of its batch with
``retry``: redelivered without spending the retry budget. With ``auto_ack=False`` leaving releases
nothing: every message handed over is yours to ack, and the rest of the pop redelivers when its
lease expires (acking them ``retry`` yourself hands them back sooner, but a ``retry`` below a
message you have not acked releases that one too).

The lease of each pop is renewed while its messages are in hand, as in the consume loop (on by
default, off with ``renew_lease(False)``; the blocking iterator renews from a daemon thread, so a
slow loop body keeps its lease), until they are all acked or released.

Errors the iteration waits out (failed pops: network failures, 429, 5xx but 501; failed renewals;
failed acks but those below) go to ``on_error`` (the builder's ``.on_error()`` or the ``on_error=``
keyword of ``messages()``), else to the client's logger (``lanes``) as a warning; only an error
that ends the iteration is raised: from a pop or an ack, 403, 413, other 4xx (an ack's 408, 409
and 429 aside) and 501, as in Go and TypeScript. An ack call that fails for want of a broker
(network failure, 429, 5xx but 501) is resent as the consume loop resends it, while the pop's
lease lasts, before the next pop (docs/consuming.md §4); as the iteration ends (``break``, an
exception, ``close()``, the limit, the idle timeout) no resend starts later than
``LEAVE_ACK_BUDGET_S`` (5 s) after it, so leaving never waits out the lease. The blocking
iterator's :meth:`MessageIterator.stop`, from any thread, ends the iteration and abandons the
resending at once; the asyncio one's :meth:`AsyncMessageIterator.stop`, from another task, does
the same, as cancelling its task does."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from types import TracebackType

from lanes import _protocol as P
from lanes._consumer import PopsInFlight
from lanes._exceptions import AutoAckDroppedError, ConsumerStoppedError
from lanes._http import CUT_WAIT_S, CallCut
from lanes._pacer import AckResend, ErrorReporter, PollPacer, ack_error_ends_loop
from lanes._renewal import LeaseRenewalThread, renew_lease_async
from lanes._types import AckResult, Message, PopResult, RenewResult

Entries = list[tuple[str, P.AckEntry]]


class _Core:
    def __init__(
        self,
        spec: P.QueueSpec,
        auto_ack: bool,
        limit: int,
        idle_timeout: float,
        report: ErrorReporter,
    ) -> None:
        self.spec = spec
        self.report = report
        self.auto_ack = auto_ack
        self.limit = limit
        self.idle_timeout = idle_timeout
        self.buf: deque[Message] = deque()
        self.current: Message | None = None
        self.pending: Entries = []
        self.yielded = 0
        self.closed = False
        self.last_msg = time.monotonic()
        self.pacer = PollPacer(spec, lambda e, _pause: self.report(e, "pop"))
        # The current pop's answer, lease length and renewals, from which its lease's expiry is
        # counted.
        self.popped_at = datetime.now(timezone.utc)
        self.lease_seconds = spec.lease_seconds
        self.schedule: P.RenewalSchedule | None = None

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
            m._acked = True  # its ack goes out before the next pop: no more renewals for it

    def pop_spec(self) -> P.QueueSpec:
        """The next pop's spec: its long poll cut to the idle time left (StopIteration once
        none is left: the pop would only wait past the deadline) and, under server auto-ack,
        its batch capped at what is left of the limit (a message committed beyond it could be
        handed to nobody)."""
        left = self.idle_left()
        if left <= 0:
            raise StopIteration
        spec = P.cut_long_poll(self.spec, left)
        if not spec.server_auto_ack or not self.limit:
            return spec
        return P.auto_ack_pop_cap(spec, self.limit - self.yielded)

    def renewal(self, res: PopResult) -> tuple[P.RenewalSchedule, Callable[[], bool]] | None:
        """How to renew a pop's lease while its messages are in hand (None: not at all), and
        the check that says they are all acked or released. Called as each answer arrives: the
        pop's lease is counted from then (:meth:`ack_resend`)."""
        self.popped_at = datetime.now(timezone.utc)
        self.lease_seconds = P.pop_lease_seconds(self.spec, res)
        self.schedule = None
        renew_every = P.renew_every(self.spec, self.lease_seconds)
        if renew_every is None or not res.lease_id or not res.messages:
            return None
        msgs = res.messages
        self.schedule = P.RenewalSchedule(renew_every, self.popped_at)
        return self.schedule, lambda: self.closed or all(m._acked for m in msgs)

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

    def ack_resend(self, leaving: bool) -> AckResend:
        """The resending of the current pop's acks, counted against its lease (and, as the
        iteration ends, against the leave's budget)."""
        until = time.monotonic() + P.LEAVE_ACK_BUDGET_S if leaving else None
        return AckResend(P.lease_expiry(self.lease_seconds, self.popped_at, self.schedule), until)

    def ack_failed(self, err: Exception, resend: AckResend) -> float | None:
        """Raise an ack error that ends the iteration; report any other and return the wait
        before resending the call (None: not resent, its messages redeliver after their lease)."""
        if ack_error_ends_loop(err):
            self.closed = True
            raise err
        self.report(err, "ack")
        return resend.after_error(err)

    def pause_after(self, err: Exception) -> float:
        """The pause before the next pop after a pop error the iteration waits out, as the
        consume loop does (docs/consuming.md §4: network failures, 429, 5xx but 501); an error
        that ends the iteration (403, 413, other 4xx, 501) is raised again. Failed pops count
        as idle (§3): the pause is cut at the idle deadline, and StopIteration is raised once
        it has passed."""
        pause = self.pacer.after_error(err)
        if pause is None:
            raise err
        left = self.idle_left()
        if left <= 0:
            raise StopIteration
        return min(pause, left)

    def idle_left(self) -> float:
        """Seconds left before the idle timeout ends the iteration (inf: no idle timeout)."""
        if not self.idle_timeout:
            return float("inf")
        return self.last_msg + self.idle_timeout - time.monotonic()

    def end_if_idle(self) -> None:
        """Raise StopIteration once the idle timeout has passed (after a failed pop's pause)."""
        if self.idle_left() <= 0:
            raise StopIteration

    def feed(self, res: PopResult) -> float:
        """Take a pop's messages; return the pause before the next pop (0 = none)."""
        pause = self.pacer.after_answer(res)
        if res.messages:
            for g in P.by_partition(res.messages):
                self.buf.extend(g)
            return pause
        self.end_if_idle()
        return pause

    def close_entries(self) -> Entries:
        self.closed = True
        out = self.take_pending()
        if self.spec.server_auto_ack:
            if self.buf:
                self.report(AutoAckDroppedError(len(self.buf), "iterator left early"), "close")
            self.buf.clear()
            self.current = None
            return out
        m, self.current = self.current, None
        rest = list(self.buf)
        self.buf.clear()
        if not self.auto_ack:
            # The caller may still hold unacked messages of the pop, and a retry below one would
            # release it too: nothing is released, the rest redelivers when the lease expires.
            return out
        if m is not None and not m._acked:
            rest.insert(0, m)
        for g in P.by_partition(rest):
            out.append(self._entry(g[0], "retry"))
        return out


class MessageIterator:
    """Blocking pull iterator; also a context manager that calls :meth:`close`."""

    def __init__(
        self,
        core: _Core,
        pop: Callable[[P.QueueSpec], PopResult],
        ack: Callable[[Entries], list[AckResult]],
        renew: Callable[[str, int], RenewResult],
        stopped: PopsInFlight | None = None,
    ) -> None:
        self._c, self._pop, self._ack_call = core, pop, ack
        self._renew_call = renew
        self._renewals: list[LeaseRenewalThread] = []
        self._stopping = threading.Event()
        self._pop_cut = CallCut()  # fired by stop(): the pop under way ends at once
        # The client's count of cut pops not yet released, which its close() waits for: this
        # iterator counts there from a stop during next() until it has closed.
        self._stopped = stopped
        self._lock = threading.Lock()
        self._fetching = False  # in next(): popping, sending acks or pausing after a failure
        self._counted = False

    def _sleep(self, seconds: float) -> None:
        self._stopping.wait(seconds)  # stop() cuts a pause short

    def _ack(self, entries: Entries, leaving: bool = False) -> None:
        resend = self._c.ack_resend(leaving)
        while True:
            try:
                self._ack_call(entries)
                return
            except Exception as e:
                wait = self._c.ack_failed(e, resend)
            if wait is None or self._stopping.wait(wait):
                return  # not resent: its messages redeliver after their lease

    def _start_renewal(self, res: PopResult) -> None:
        plan = self._c.renewal(res)
        if plan is None:
            return
        self._renewals = [r for r in self._renewals if r.running]
        schedule, settled = plan
        self._renewals.append(
            LeaseRenewalThread(res.lease_id, schedule, self._renew_call, self._c.report, settled)
        )

    def __iter__(self) -> MessageIterator:
        return self

    def __next__(self) -> Message:
        c = self._c
        with self._lock:  # against the client's close() ending the iteration meanwhile
            if c.closed:
                raise StopIteration
            self._fetching = True
        c.finish_current()
        try:
            while True:
                if self._stopping.is_set():
                    raise StopIteration
                m = c.next_buffered()
                if m is not None:
                    return m
                pending = c.take_pending()
                if pending:
                    self._ack(pending)
                spec = c.pop_spec()
                try:
                    c.pacer.popping(spec.timeout_millis)
                    with self._pop_cut.running():
                        res = self._pop(spec)
                except Exception as e:
                    if self._stopping.is_set():  # cut by stop(): no error, the iteration ends
                        raise StopIteration from None
                    self._sleep(c.pause_after(e))
                    c.end_if_idle()
                    continue
                self._start_renewal(res)
                pause = c.feed(res)
                if pause:
                    self._sleep(pause)
        except StopIteration:
            self.close()
            raise
        except BaseException:
            # Ended without its own release (an error, a KeyboardInterrupt in this thread):
            # close() of the client has nothing of this iterator to wait for. A `with` around
            # the iteration still releases what it holds while the client is open.
            self._fetching = False  # a stop from now on counts nothing
            self._uncount()
            raise
        finally:
            self._fetching = False

    def close(self) -> None:
        """Send pending acks and release what was not handled (idempotent); raises an ack error
        that ends the iteration (403, 413, other 4xx but 408/409/429, 501)."""
        try:
            with self._lock:
                if self._c.closed:
                    return
                entries = self._c.close_entries()
            self._release(entries)
        finally:
            self._uncount()

    def _release(self, entries: Entries) -> None:
        for r in self._renewals:
            r.stop()
        if entries:
            self._ack(entries, leaving=True)

    def _end_with_client(self) -> None:
        """The client's close(): end the iteration, which could ack nothing after it. In
        next() it is stopped (:meth:`stop`), and close() waits for its release as for any
        stopped iterator's; paused between two messages it releases at once what
        :meth:`close` releases (the message in hand and those not handed over, under
        ``auto_ack``), while the HTTP pool is open, and the next ``next()`` ends it."""
        self.stop()  # no resend of a failed release: close() does not wait out the lease
        with self._lock:
            if self._fetching or self._c.closed:
                return
            entries = self._c.close_entries()
        try:
            self._release(entries)
        except Exception as e:  # an ack error that ends the iteration: close() goes on
            self._c.report(e, "close")

    def stop(self) -> None:
        """End the iteration from any thread (a signal handler, a timer, another worker), as
        aborting the signal ends TypeScript's: a wait (a pause after a failed pop, the wait
        before resending a failed ack, the close's included) ends at once, and the next
        message asked for ends the iteration with the release of :meth:`close`, sent once. A
        pop under way is cut (its connection half-closed): it ends at once, and what the broker
        had already sent it is released by that close, which the client's ``close()`` waits
        for (2 s at most); on a caller's ``http_client`` it cannot be cut and ends within its
        long poll (``timeout_millis``)."""
        self._stopping.set()
        self._pop_cut.fire()
        # A pop the broker does not answer within CUT_WAIT_S of the cut (a proxy that ignores
        # the half-close) has its connection closed then.
        grace = threading.Timer(CUT_WAIT_S, self._pop_cut.abort)
        grace.daemon = True
        grace.start()
        with self._lock:
            # next() ends within milliseconds (its pop cut, its wait cut short) and releases
            # what the cut pop got, which the broker may already have leased to this client:
            # the client's close() waits for that release.
            if (
                self._fetching
                and not self._c.closed
                and not self._counted
                and self._stopped is not None
            ):
                self._counted = True
                self._stopped.begin()

    def _uncount(self) -> None:
        with self._lock:
            counted, self._counted = self._counted, False
        if counted and self._stopped is not None:
            self._stopped.end()  # may close the client's HTTP pool: outside the lock

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


class StoppedIterators:
    """An AsyncLanes client's iterators stopped while a pop was under way, until they closed:
    the cut pop ends within milliseconds, and ``aclose()`` of the client waits briefly for the
    release of what it got before it closes the HTTP pool under it."""

    def __init__(self) -> None:
        self._open: set[AsyncMessageIterator] = set()
        self._changed: asyncio.Event | None = None

    def add(self, it: AsyncMessageIterator) -> None:
        self._open.add(it)

    @property
    def open(self) -> bool:
        """Whether one has not closed yet."""
        return bool(self._open)

    def discard(self, it: AsyncMessageIterator) -> None:
        self._open.discard(it)
        if self._changed is not None:
            self._changed.set()

    async def closed(self, within: float) -> None:
        """Wait up to ``within`` seconds until they have all closed."""
        loop = asyncio.get_running_loop()
        until = loop.time() + within
        changed = self._changed = asyncio.Event()
        while self._open:
            left = until - loop.time()
            if left <= 0:
                return
            changed.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(changed.wait(), left)


class AsyncMessageIterator:
    """Asyncio pull iterator; use ``async with q.messages() as it: async for m in it`` so the
    release on early exit is awaited."""

    def __init__(
        self,
        core: _Core,
        pop: Callable[[P.QueueSpec], Awaitable[PopResult]],
        ack: Callable[[Entries], Awaitable[list[AckResult]]],
        renew: Callable[[str, int], Awaitable[RenewResult]],
        stopped: StoppedIterators | None = None,
    ) -> None:
        self._c, self._pop, self._ack_call = core, pop, ack
        self._renew_call = renew
        self._renewals: set[asyncio.Future[None]] = set()
        self._stopping = asyncio.Event()  # binds to the loop on first use (3.10+)
        self._pop_cut = CallCut()  # fired by stop(): the pop under way ends at once
        self._popping = False
        self._in_next = False  # in __anext__: popping, sending acks or pausing
        self._stopped = stopped
        self._ending: asyncio.Future[None] | None = None  # its release at the client's aclose()

    async def _sleep(self, seconds: float) -> bool:
        """Wait, cut short by :meth:`stop`; True when stopped."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), timeout=max(seconds, 0.0))
        return self._stopping.is_set()

    async def _ack(self, entries: Entries, leaving: bool = False) -> None:
        resend = self._c.ack_resend(leaving)
        while True:
            try:
                await self._ack_call(entries)
                return
            except Exception as e:
                wait = self._c.ack_failed(e, resend)
            if wait is None or await self._sleep(wait):
                return  # not resent: its messages redeliver after their lease

    def _start_renewal(self, res: PopResult) -> None:
        plan = self._c.renewal(res)
        if plan is None:
            return
        schedule, settled = plan
        task = asyncio.ensure_future(
            renew_lease_async(res.lease_id, schedule, self._renew_call, self._c.report, settled)
        )
        self._renewals.add(task)
        task.add_done_callback(self._renewals.discard)

    def __aiter__(self) -> AsyncMessageIterator:
        return self

    async def __anext__(self) -> Message:
        c = self._c
        if c.closed:
            raise StopAsyncIteration
        c.finish_current()
        self._in_next = True
        try:
            while True:
                if self._stopping.is_set():
                    raise StopIteration
                m = c.next_buffered()
                if m is not None:
                    return m
                pending = c.take_pending()
                if pending:
                    await self._ack(pending)
                spec = c.pop_spec()
                try:
                    c.pacer.popping(spec.timeout_millis)
                    self._popping = True
                    try:
                        with self._pop_cut.running_in_task():
                            res = await self._pop(spec)
                    finally:
                        self._popping = False
                except Exception as e:
                    if self._stopping.is_set():  # cut by stop(): no error, the iteration ends
                        raise StopIteration from None
                    await self._sleep(c.pause_after(e))
                    c.end_if_idle()
                    continue
                self._start_renewal(res)
                pause = c.feed(res)
                if pause:
                    await self._sleep(pause)
        except StopIteration:
            await self.aclose()
            raise StopAsyncIteration from None
        except BaseException:
            # Ended without its own release (the task's cancellation, which ends a cut pop too,
            # or an error): aclose() of the client has nothing of this iterator to wait for. An
            # `async with` around the iteration still releases what it holds.
            if self._stopped is not None:
                self._stopped.discard(self)
            raise
        finally:
            self._in_next = False

    async def aclose(self) -> None:
        """As :meth:`MessageIterator.close`."""
        try:
            if self._c.closed:
                return
            await self._release(self._c.close_entries())
        finally:
            if self._stopped is not None:
                self._stopped.discard(self)

    async def _release(self, entries: Entries) -> None:
        # The renewals end before the acks go, so none is left running or races them.
        renewals = list(self._renewals)
        for t in renewals:
            t.cancel()
        if renewals:
            await asyncio.wait(renewals)
        if entries:
            await self._ack(entries, leaving=True)

    def _end_with_client(self) -> None:
        """The client's aclose(): end the iteration, which could ack nothing after it. It is
        stopped (:meth:`stop`); in __anext__, aclose() waits for its release as for any stopped
        iterator's, and paused between two messages it starts at once the release of
        :meth:`aclose` (the message in hand and those not handed over, under ``auto_ack``),
        which aclose() waits for the same way, 2 s at most, before it closes the HTTP pool."""
        self.stop()  # no resend of a failed release: aclose() does not wait out the lease
        if self._in_next or self._c.closed or self._stopped is None:
            return
        entries = self._c.close_entries()  # the next __anext__ ends the iteration
        self._stopped.add(self)
        self._ending = asyncio.ensure_future(self._release_at_client_close(entries))

    async def _release_at_client_close(self, entries: Entries) -> None:
        try:
            await self._release(entries)
        except Exception as e:  # an ack error that ends the iteration: aclose() goes on
            self._c.report(e, "close")
        finally:
            if self._stopped is not None:
                self._stopped.discard(self)

    def stop(self) -> None:
        """End the iteration from another task (from another thread, through the loop's
        ``call_soon_threadsafe``), as :meth:`MessageIterator.stop` does for the blocking one: a
        wait (a pause after a failed pop, the wait before resending a failed ack, the close's
        included) ends at once, and the next message asked for ends the iteration with the
        release of :meth:`aclose`, sent once. A pop under way is cut (its connection
        half-closed), as the blocking iterator's: it ends at once, and what the broker had
        already sent it is released by that aclose; on a caller's ``http_client`` it cannot be
        cut and ends within its long poll (``timeout_millis``)."""
        self._stopping.set()
        self._pop_cut.fire()
        if self._popping:
            # A pop the broker does not answer within CUT_WAIT_S of the cut (a proxy that
            # ignores the half-close) has its connection closed then, as the consume loop's
            # stop cancels its pop.
            with contextlib.suppress(RuntimeError):  # no loop here: stop() was misused
                asyncio.get_running_loop().call_later(CUT_WAIT_S, self._pop_cut.abort)
        if self._in_next and self._stopped is not None:
            # It ends within milliseconds (its pop cut, its wait cut short) and releases what
            # it holds: the client's aclose() waits for that.
            self._stopped.add(self)

    async def __aenter__(self) -> AsyncMessageIterator:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


__all__ = ["AsyncMessageIterator", "ConsumerStoppedError", "MessageIterator", "StoppedIterators"]
