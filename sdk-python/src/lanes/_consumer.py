"""The consume loop (docs/consuming.md §3 to §5): one asyncio engine, run directly by
:class:`AsyncConsumer` and on a private event loop thread by :class:`Consumer` (sync handlers run
in a bounded thread pool there, a pop's messages per trip to the pool, which then sends the pop's
acks; the other blocking HTTP calls in long-lived helper threads, :class:`IoThreads`).
:class:`AsyncConsumer` awaits ``async def`` handlers on the loop, a pop's messages in one task, and
runs any other handler in its own bounded thread pool, a pop's messages per trip as in the sync
consumer."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import inspect
import math
import queue
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from types import TracebackType
from typing import Any, Literal, TypeVar

from lanes import _protocol as P
from lanes._exceptions import (
    AutoAckDroppedError,
    ConsumerStoppedError,
    HandlerError,
    failure_text,
)
from lanes._http import CUT_WAIT_S, CallCut
from lanes._pacer import (
    AckResend,
    ErrorCallback,
    ErrorReporter,
    PollPacer,
    ack_error_ends_loop,
    broker_unavailable,
    rate_limited_pause,
)
from lanes._renewal import LeaseRenewalTimer
from lanes._types import AckResult, Message, PopResult, RenewResult

T = TypeVar("T")
__all__ = [
    "AsyncConsumer",
    "Consumer",
    "Engine",
    "ErrorCallback",
    "IoThreads",
    "Ops",
    "PopsInFlight",
]
Status = Literal["completed", "failed", "retry"]

# The engine whose tasks run the current code (its workers, so its handlers and their callbacks):
# a stop called from there must not wait for the end, which waits for that very handler.
_running_engine: contextvars.ContextVar[Engine | None] = contextvars.ContextVar(
    "lanes_running_engine", default=None
)


# The nack's error text for a handler exception (the DLQ reads the same from all three SDKs).
_failure_text = failure_text


def _handler_failure(exc: BaseException, handling: _Handling) -> tuple[Status, str | None]:
    """The ack of a message whose handler raised exc: ``retry`` (no retry spent) when it failed
    for want of a broker, so an outage dead-letters nothing (noted in ``handling``, which sets
    the worker's pause); else ``failed`` with its text, which spends one retry."""
    if broker_unavailable(exc):
        pause = rate_limited_pause(exc)
        if pause is None:
            handling.broker_down = True
        elif handling.rate_limited_pause is None or pause > handling.rate_limited_pause:
            handling.rate_limited_pause = pause
        return "retry", None
    return "failed", _failure_text(exc)


class _UnawaitedHandlerResult(TypeError):
    """A blocking client's handler returned an awaitable: its work never ran."""


def refuse_async_handler(handler: Callable[..., Any]) -> None:
    """The blocking client's consume() refuses an ``async def`` handler: it would never await
    it, so every message would be acked unprocessed."""
    if inspect.iscoroutinefunction(handler):
        raise TypeError(
            "lanes: the blocking Lanes client runs plain (def) handlers and would not await "
            "this async def one: use lanes.AsyncLanes for async handlers"
        )


def _unawaited(result: Awaitable[Any]) -> _UnawaitedHandlerResult:
    """The error of a blocking client's handler that returned an awaitable (an async callable
    refuse_async_handler could not see): its message is nacked ``failed`` and the error
    reported, never acked."""
    if inspect.iscoroutine(result):
        result.close()  # no "never awaited" warning: the error says it
    return _UnawaitedHandlerResult(
        f"lanes: the handler returned {type(result).__name__}, which the blocking Lanes "
        "client does not await (the message is nacked failed): use lanes.AsyncLanes "
        "for async handlers"
    )


def _blocking_call(handler: Callable[[Any], Any]) -> Callable[[Any], None]:
    """The blocking client's handler, failing when it returns an awaitable (:func:`_unawaited`)."""

    def call(arg: Any) -> None:
        result = handler(arg)
        if result is not None and inspect.isawaitable(result):
            raise _unawaited(result)

    return call


@dataclass
class _Handling:
    """What handling one pop decided: the outcomes to ack and the messages to release."""

    outcomes: list[P.Outcome] = field(default_factory=list)
    unhandled: list[Sequence[Message]] = field(default_factory=list)
    handed: int = 0
    """Messages handed to a batch handler (a failed slice has one outcome for all of them)."""
    acked: bool = False
    """The acks went out from the handler thread (:meth:`Engine._each_then_ack_blocking`)."""
    ack_error: Exception | None = None
    rate_limited_pause: float | None = None
    """A handler failed with a broker's 429: the longest wait one asked for (its Retry-After,
    1 s without one)."""
    broker_down: bool = False
    """A handler failed for want of a broker otherwise (no answer, 502, 503, 504)."""


@dataclass
class Ops:
    """The I/O the engine needs, as coroutines (the sync client wraps its blocking calls)."""

    pop: Callable[[P.QueueSpec], Awaitable[PopResult]]
    """Pop with this spec (the builder's, or its batch capped under server auto-ack)."""
    ack: Callable[[list[tuple[str, P.AckEntry]]], Awaitable[list[AckResult]]]
    renew: Callable[[str, int], Awaitable[RenewResult]]
    invoke: Callable[[Any], Awaitable[None]]
    """Run the user's handler on one message (or one partition slice in batch mode)."""
    ack_blocking: Callable[[list[tuple[str, P.AckEntry]]], list[AckResult]] | None = None
    """The blocking client's ack, sent from the handler thread once a pop is handled."""
    pop_under_cut: Callable[[P.QueueSpec, CallCut], Awaitable[PopResult]] | None = None
    """AsyncLanes on its own pool: pop under this cut, which a stop fires (:meth:`Engine.
    _end_cut_pop`) instead of cancelling the pop."""


class Engine:
    """One consumer: ``concurrency`` workers popping, handling in order per partition, acking."""

    def __init__(
        self,
        spec: P.QueueSpec,
        ops: Ops,
        report: ErrorReporter,
        cancellable_handlers: bool,
        client_autopilot: bool,
    ) -> None:
        self.spec = spec
        self.ops = ops
        self.report = report
        self.cancellable = cancellable_handlers
        self.error: BaseException | None = None
        self.delivered = 0  # messages handed to the handler, counted where a limit is set
        # Guards the limit check and ``delivered`` when sync handlers run the per-message plan in
        # pool threads (_each_blocking): with concurrency > 1 several threads count at once.
        self._count_lock = threading.Lock()
        self.hard = False
        # Set (from any thread, at once) when a stop is requested, and a hard one: read by
        # handler threads between messages, before the loop has seen the request. A handler
        # raising the stop's cancellation once ``cancelling`` is set has its message released
        # with ``retry``; ``cancelling`` is the sync consumer's ``cancel_event``.
        self.stopping = threading.Event()
        self.cancelling = threading.Event()
        self._stop = asyncio.Event()  # binds to the loop on first use (3.10+)
        self._hard_stop = asyncio.Event()  # ends the resending of a failed ack (_ack_until_done)
        # Done once the pops in flight are to be abandoned (see _abandon_pops), made by run() on the
        # loop: one future every pop waits on beside its own, not a waiting task per pop.
        self._pops_cut: asyncio.Future[None] | None = None
        self._handlers: set[asyncio.Future[Any]] = set()
        self._busy = 0  # workers handling a pop (handlers, then acks)
        self._last_activity = time.monotonic()
        self._escalation: asyncio.TimerHandle | None = None
        # Under server auto-ack with a limit: messages popped so far, and the batch caps of the
        # pops in flight, so that all workers together never pop more than the limit.
        self._auto_acked = 0
        self._auto_ack_reserved = 0
        self._pop_batch = P.pop_batch(spec, client_autopilot)

    # -- control (call on the engine's loop) --------------------------------------------------

    def request_stop(self, hard: bool = False) -> None:
        first = not self._stop.is_set()
        self._stop.set()
        self.stopping.set()
        if hard and not self.hard:
            self.hard = True
            self.cancelling.set()
            self._hard_stop.set()
            if self.cancellable:
                for f in list(self._handlers):
                    f.cancel()
        elif first and not hard and self.spec.soft_stop_timeout_millis > 0:
            loop = asyncio.get_running_loop()
            after = self.spec.soft_stop_timeout_millis / 1000.0
            self._escalation = loop.call_later(after, self.request_stop, True)
        self._abandon_pops()

    def _abandon_pops(self) -> None:
        """Wake the workers out of their pops in flight, to abandon them: on any stop, but under
        server auto-ack only on a hard one (the broker commits what such a pop takes, so a soft
        stop lets it answer and hands its messages over: cut, they would be lost)."""
        cut = self._pops_cut
        if cut is not None and not cut.done() and (self.hard or not self.spec.server_auto_ack):
            cut.set_result(None)

    def runs_current_code(self) -> bool:
        """Whether the caller is this engine's own code: a handler, or a callback it runs."""
        return _running_engine.get() is self

    def _fail(self, e: BaseException, op: str) -> None:
        """End the whole consumer with a terminal error; on_error hears of it too (as in Go and
        TS), then closed() raises it."""
        self.report(e, op)
        if self.error is None:
            self.error = e
        self.request_stop()

    def _cut_short(self) -> bool:
        """Whether to stop handing messages to the handler: on any stop, but under server
        auto-ack only on a hard one (they are committed: nothing could release them)."""
        return (self.cancelling if self.spec.server_auto_ack else self.stopping).is_set()

    def _auto_ack_room(self) -> int | None:
        """How many messages the next pop may take under server auto-ack with a limit (None:
        no cap): its batch, cut to what the other workers' pops in flight leave of the limit,
        so workers pop side by side and never take more than the limit between them."""
        if not self.spec.server_auto_ack or self.spec.limit <= 0:
            return None
        return min(self.spec.limit - self._auto_acked - self._auto_ack_reserved, self._pop_batch)

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._stop.wait(), timeout=max(seconds, 0.0))

    # -- main -----------------------------------------------------------------------------------

    async def run(self) -> None:
        _running_engine.set(self)  # this task's context: the workers and handlers inherit it
        self._pops_cut = asyncio.get_running_loop().create_future()
        if self._stop.is_set():
            self._abandon_pops()
        workers = [asyncio.ensure_future(self._worker()) for _ in range(self.spec.concurrency)]
        idle = asyncio.ensure_future(self._idle_watch()) if self.spec.idle_millis > 0 else None
        try:
            await asyncio.gather(*workers)
        finally:
            if idle is not None:
                idle.cancel()
            if self._escalation is not None:
                self._escalation.cancel()

    async def _idle_watch(self) -> None:
        """Soft-stop once idle for ``idle_millis`` (:meth:`_idle_left`)."""
        while not self._stop.is_set():
            left = self._idle_left()
            if left <= 0:
                self.request_stop()
                return
            await self._pause(max(left, 0.05))

    def _idle_left(self) -> float:
        """Seconds left before the idle timeout (inf: none). The consumer is idle while no
        worker handles a pop (handlers, then its acks), counted from the later of the last pop
        with messages and the end of handling: while one is busy, a whole ``idle_millis``."""
        if self.spec.idle_millis <= 0:
            return math.inf
        limit = self.spec.idle_millis / 1000.0
        if self._busy > 0:
            return limit
        return self._last_activity + limit - time.monotonic()

    def _limit_reached(self) -> bool:
        return self.spec.limit > 0 and self.delivered >= self.spec.limit

    async def _worker(self) -> None:
        stop = self._stop
        pops_cut = self._pops_cut
        assert pops_cut is not None  # made by run()
        pacer = PollPacer(self.spec, lambda e, _pause: self.report(e, "pop"))
        outages = 0  # consecutive pops in which a handler failed for want of a broker, 429s aside
        while not stop.is_set():
            if self._limit_reached():
                # A worker whose pop handed nothing (the others reached the limit first) ends
                # here too: popping on would take and release the same messages in a tight
                # loop until another handler returned.
                self.request_stop()
                break
            idle_left = self._idle_left()
            if idle_left <= 0:
                self.request_stop()  # a pop now would only wait past the idle deadline
                break
            spec = P.cut_long_poll(self.spec, idle_left)
            room = self._auto_ack_room()
            if room is not None:
                if room <= 0:
                    if self._auto_ack_reserved == 0:
                        break  # the limit is popped: the workers holding it hand it over
                    await self._pause(0.05)  # another worker's pop may come back short
                    continue
                spec = P.auto_ack_pop_cap(spec, room)
                self._auto_ack_reserved += room
            pacer.popping(spec.timeout_millis)
            cut = None
            if self.ops.pop_under_cut is None:
                pop_t = asyncio.ensure_future(self.ops.pop(spec))
            else:
                cut = CallCut()
                pop_t = asyncio.ensure_future(self.ops.pop_under_cut(spec, cut))
            either: set[asyncio.Future[Any]] = {pop_t, pops_cut}
            try:
                done, _ = await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            finally:
                if room is not None:
                    self._auto_ack_reserved -= room
                    if pop_t.done() and not pop_t.cancelled() and pop_t.exception() is None:
                        self._auto_acked += len(pop_t.result().messages)
            if pop_t not in done:
                # Stopping: abandon the long-poll. A blocking one (the sync client) cannot be
                # cancelled: cancelling its future half-closes its connection (CallCut), and an
                # answer that comes anyway is released by on_abandoned (see Queue._release).
                # An asyncio one on the client's own pool is cut the same way; on a caller's
                # http_client it is cancelled (the broker gives back a claim whose answer it
                # had not written yet).
                if cut is not None:
                    await self._end_cut_pop(pop_t, cut)
                    break
                pop_t.cancel()
                with contextlib.suppress(BaseException):
                    await pop_t
                break
            try:
                res = pop_t.result()
            except ConsumerStoppedError:
                break
            except Exception as e:
                pause = pacer.after_error(e)
                if pause is not None:
                    await self._pause(pause)
                    continue
                self._fail(e, "pop")  # 403, 413, every other 4xx and 501
                break
            pause = pacer.after_answer(res)
            if not res.messages:
                if pause:
                    await self._pause(pause)
                continue
            self._busy += 1
            self._last_activity = time.monotonic()
            try:
                handling = await self._handle(res)
            finally:
                self._last_activity = time.monotonic()
                self._busy -= 1
            if handling.rate_limited_pause is None and not handling.broker_down:
                outages = 0
                continue
            # The broker the handler needed is down: pop again after the wait of a failed pop,
            # not at once, or the released message would come back to fail in a tight loop. As
            # for a pop's 429, a handler's is waited out by its hint and neither counts in the
            # doubling nor resets it (docs/consuming.md §4).
            pause = handling.rate_limited_pause or 0.0
            if handling.broker_down:
                outages += 1
                pause = max(pause, P.loop_error_backoff(outages))
            await self._pause(pause)

    async def _end_cut_pop(self, pop_t: asyncio.Future[PopResult], cut: CallCut) -> None:
        """Half-close a stopped worker's pop (the broker answers 499 at once and claims
        nothing; an answer it had already written still arrives whole) and wait for it, at most
        ``CUT_WAIT_S`` (then it is cancelled); release with ``retry`` what it got."""
        cut.fire()
        try:
            await asyncio.wait({pop_t}, timeout=CUT_WAIT_S)
        finally:
            if not pop_t.done():
                pop_t.cancel()
                await asyncio.wait({pop_t})  # a cancel only asks: its outcome is read below
        if pop_t.cancelled() or pop_t.exception() is not None:
            return
        res = pop_t.result()
        if self.spec.server_auto_ack:  # committed at the pop: nothing can release them
            if res.messages:
                self.report(AutoAckDroppedError(len(res.messages), "popped after the stop"), "pop")
            return
        entries = P.release_acks(res, self.spec)
        if entries:
            try:
                await self.ops.ack(entries)
            except Exception as e:
                self.report(e, "ack")  # its messages redeliver when the lease expires

    async def _call(
        self, arg: Message | list[Message], handling: _Handling
    ) -> tuple[Status, str | None]:
        handed = arg if isinstance(arg, list) else [arg]
        return await self._outcome(self.ops.invoke(arg), handling, handed)

    async def _outcome(
        self, work: Awaitable[Any], handling: _Handling, handed: list[Message]
    ) -> tuple[Status, str | None]:
        """Await one handler call (or what a plain handler returned) on ``handed`` and say how
        to ack it."""
        try:
            await work
            if self.cancellable and self.cancelling.is_set():
                # A handler that returned before the hard stop's cancellation reached it (no
                # await after the stop) is cancelled all the same, as its own task would be.
                await asyncio.sleep(0)
        except BaseException as exc:
            if isinstance(exc, (KeyboardInterrupt, SystemExit)) or self._cancelled_elsewhere(exc):
                raise  # as from a handler's own task: they end the loop or the task
            if self._stopped_by_cancel(exc):
                return "retry", None  # release without spending the budget
            if self._reports(exc):
                self.report(self._reported(exc, handed), "handler")
            return _handler_failure(exc, handling)
        return "completed", None

    def _cancelled_elsewhere(self, exc: BaseException) -> bool:
        """Whether the task running the handler was cancelled by something other than the hard
        stop (asyncio.run ending, say): it ends there, as a handler's own task did, instead of
        handing the next message over (3.11+: 3.10 cannot tell it from a handler's own
        CancelledError, nacked ``failed``)."""
        if sys.version_info < (3, 11) or not isinstance(exc, asyncio.CancelledError):
            return False
        task = asyncio.current_task()
        return not self.cancelling.is_set() and task is not None and task.cancelling() > 0

    def _reports(self, handler_error: BaseException) -> bool:
        """Whether a handler's exception goes to on_error: with report_handler_errors, and
        always for a handler the blocking client could not run (a bug, not a failure)."""
        return self.spec.report_handler_errors or isinstance(handler_error, _UnawaitedHandlerResult)

    @staticmethod
    def _reported(handler_error: BaseException, handed: list[Message]) -> BaseException:
        """What on_error gets for a handler's exception: a HandlerError naming the messages the
        handler was given; the blocking client's refusal of an awaitable as it is, since it is
        about the handler, not about those messages."""
        if isinstance(handler_error, _UnawaitedHandlerResult):
            return handler_error
        return HandlerError(handed, handler_error)

    def _stopped_by_cancel(self, exc: BaseException) -> bool:
        """A handler ended by the hard stop's cancellation (its task cancelled, or it raised
        ConsumerStoppedError after ``cancel_event`` was set). The same exception without a hard
        stop is the handler's own failure, nacked ``failed`` as in Go and TS: released with
        ``retry`` it would be redelivered at once, forever, never reaching the DLQ."""
        return self.cancelling.is_set() and isinstance(
            exc, (ConsumerStoppedError, asyncio.CancelledError)
        )

    async def _handle(self, res: PopResult) -> _Handling:
        """Hand a pop's messages to the handler and ack them; the handling says whether a
        handler failed for want of a broker (its message released with ``retry``: only that and
        a hard stop's cancellation release a message handed over, and after a hard stop the
        worker ends)."""
        handling = _Handling()
        ticker = None
        popped_at = datetime.now(timezone.utc)
        lease_seconds = P.pop_lease_seconds(self.spec, res)
        schedule: P.RenewalSchedule | None = None
        renew_every = P.renew_every(self.spec, lease_seconds)
        if renew_every is not None and res.lease_id:
            schedule = P.RenewalSchedule(renew_every, popped_at)
            ticker = LeaseRenewalTimer(res.lease_id, schedule, self.ops.renew, self.report)
        try:
            groups = P.by_partition(res.messages)
            if self.spec.each and isinstance(self.ops.invoke, SyncInvoke):
                await self._each_in_pool(self.ops.invoke, groups, handling, ticker)
            elif self.cancellable:
                # One task per pop, not per message (a task and a wait per message were a
                # quarter of the client's CPU with a fast handler): the hard stop cancels it,
                # which raises the cancellation in the handler running in it.
                plan = asyncio.ensure_future(self._plan(groups, handling))
                await asyncio.wait({plan})
                if not plan.cancelled():  # a stop cancellation still pending when it returned
                    plan.result()
            else:
                await self._plan(groups, handling)
        finally:
            if ticker is not None:
                ticker.cancel()
        if handling.acked:
            if handling.ack_error is not None:
                entries = P.batch_acks(handling.outcomes, handling.unhandled, self.spec.auto_ack)
                expires_at = P.lease_expiry(lease_seconds, popped_at, schedule)
                await self._ack_until_done(entries, expires_at, handling.ack_error)
            return handling
        outcomes, unhandled = handling.outcomes, handling.unhandled
        if self.spec.server_auto_ack:
            # Committed at the pop, so nothing releases what a hard stop or a failure cut off.
            dropped = len(res.messages) - (len(outcomes) if self.spec.each else handling.handed)
            if dropped:
                why = "hard stop" if self.hard else "after a handler failure in their partition"
                self.report(AutoAckDroppedError(dropped, why), "handle")
            return handling
        entries = P.batch_acks(outcomes, unhandled, self.spec.auto_ack)
        if entries:
            await self._ack_until_done(entries, P.lease_expiry(lease_seconds, popped_at, schedule))
        return handling

    async def _ack_until_done(
        self,
        entries: list[tuple[str, P.AckEntry]],
        expires_at: datetime,
        failed: Exception | None = None,
    ) -> None:
        """Send a pop's acks (``failed``: the first call, sent from a handler thread, failed so),
        resending a call that fails for want of a broker while the lease lasts (``AckResend``);
        a hard stop abandons the resending."""
        resend = AckResend(expires_at)
        while True:
            if failed is None:
                try:
                    await self.ops.ack(entries)
                    return
                except Exception as e:
                    failed = e
            if ack_error_ends_loop(failed):
                self._fail(failed, "ack")
                return
            self.report(failed, "ack")
            wait = resend.after_error(failed)
            if wait is None:
                return  # not resent: the pop redelivers after its lease
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._hard_stop.wait(), timeout=wait)
            if self._hard_stop.is_set():
                return  # a hard stop abandons the ack
            failed = None

    async def _plan(self, groups: list[list[Message]], handling: _Handling) -> None:
        """Hand a pop's messages to the handler, in order per partition, recording outcomes."""
        task = asyncio.current_task() if self.cancellable else None
        if task is not None:
            # Registered once running, so the hard stop never cancels it before its first
            # message: the stop flag it reads then releases the whole pop.
            self._handlers.add(task)
        try:
            for group in groups:
                if self._cut_short() or self._limit_reached():
                    handling.unhandled.append(group)
                    continue
                if not self.spec.each:
                    room = len(group)
                    if self.spec.limit > 0:
                        room = min(room, self.spec.limit - self.delivered)
                    handed, rest = group[:room], group[room:]
                    self.delivered += len(handed)
                    handling.handed += len(handed)
                    st, err = await self._call(list(handed), handling)
                    if st == "completed":
                        handling.outcomes.extend((m, "completed", None) for m in handed)
                        if rest:
                            handling.unhandled.append(rest)
                    else:
                        handling.outcomes.append((handed[0], st, err))
                else:
                    for i, m in enumerate(group):
                        if self._cut_short() or self._limit_reached():
                            handling.unhandled.append(group[i:])
                            break
                        self.delivered += 1
                        st, err = await self._call(m, handling)
                        handling.outcomes.append((m, st, err))
                        if st != "completed":
                            break  # the rest redelivers after the nack / release
                if self._limit_reached():
                    self.request_stop()
        finally:
            if task is not None:
                self._handlers.discard(task)

    # -- plain (def) handlers, one message at a time ---------------------------------------------
    #
    # The loop in _handle hands each message to the handler pool and back (a thread round trip,
    # about 100 µs per message: most of the consumer's cost with a fast handler). For plain
    # per-message handlers, of both clients, the same plan runs in the pool thread instead, one
    # trip per pop. It comes back to the event loop wherever _handle acts between two handler
    # calls — a handler error to report, the limit reached, an awaitable a plain handler of
    # AsyncLanes returned — so on_error, request_stop and the await still run on the loop and in
    # the same order; the stop flag is read before every message as before. The lease ticker keeps
    # running on the loop meanwhile.

    async def _each_in_pool(
        self,
        inv: SyncInvoke,
        groups: list[list[Message]],
        handling: _Handling,
        ticker: LeaseRenewalTimer | None,
    ) -> None:
        outcomes = handling.outcomes
        gi, mi = 0, 0
        while gi < len(groups):
            if self.ops.ack_blocking is not None and not self.spec.server_auto_ack:
                fut = inv.run(self._each_then_ack_blocking, inv, groups, gi, mi, handling, ticker)
            else:
                fut = inv.run(self._each_blocking, inv, groups, gi, mi, handling)
            try:
                await asyncio.wait({fut})
            except asyncio.CancelledError:
                # Cancelled from elsewhere (asyncio.run ending): the thread hands over no other
                # message, and the end waits for the handler in hand, which cannot be interrupted.
                self.stopping.set()
                await _outlive_cancellation(fut)
                raise
            gi, mi, exc, returned = fut.result()
            if exc is not None:
                self.report(exc, "handler")
            if returned is not None:
                m, work = returned
                st, err = await self._await_returned(work, handling, m)
                outcomes.append((m, st, err))
                if st != "completed":
                    gi, mi = gi + 1, 0  # the rest redelivers after the nack / release
            if self._limit_reached():
                self.request_stop()

    async def _await_returned(
        self, work: Awaitable[Any], handling: _Handling, m: Message
    ) -> tuple[Status, str | None]:
        """Await on the loop what a plain handler returned, in a task the hard stop cancels, as
        it cancels an async handler."""

        async def run() -> tuple[Status, str | None]:
            task = asyncio.current_task()
            assert task is not None
            self._handlers.add(task)  # once running: a cancellation must reach the await
            try:
                return await self._outcome(work, handling, [m])
            finally:
                self._handlers.discard(task)

        return await asyncio.ensure_future(run())

    def _each_then_ack_blocking(
        self,
        inv: SyncInvoke,
        groups: list[list[Message]],
        start_group: int,
        start_message: int,
        handling: _Handling,
        ticker: LeaseRenewalTimer | None,
    ) -> tuple[int, int, BaseException | None, tuple[Message, Awaitable[Any]] | None]:
        """In a pool thread: :meth:`_each_blocking`, then, when the whole pop is handled and the
        loop has nothing to do before its acks, the acks, from this thread: one trip from the
        loop to a thread and back per pop, not two. Its lease renewal ends before they go."""
        step = self._each_blocking(inv, groups, start_group, start_message, handling)
        gi, _, exc, returned = step
        if gi < len(groups) or exc is not None or returned is not None or self._limit_reached():
            return step
        if ticker is not None:
            ticker.settle()
        handling.acked = True
        entries = P.batch_acks(handling.outcomes, handling.unhandled, self.spec.auto_ack)
        if entries:
            assert self.ops.ack_blocking is not None
            try:
                self.ops.ack_blocking(entries)
            except Exception as e:
                handling.ack_error = e
        return step

    def _each_blocking(
        self,
        inv: SyncInvoke,
        groups: list[list[Message]],
        start_group: int,
        start_message: int,
        handling: _Handling,
    ) -> tuple[int, int, BaseException | None, tuple[Message, Awaitable[Any]] | None]:
        """In a pool thread: _handle's per-message plan from ``groups[start_group]
        [start_message]`` on. Returns where to go on, and the handler error to report or the
        message and awaitable its handler returned, when the loop must act before that."""
        outcomes, unhandled = handling.outcomes, handling.unhandled
        handler = inv.handler
        # _cut_short and _limit_reached inlined, and the lock taken only under a limit: per
        # message they cost three times the rest of this loop with a fast handler.
        cut = self.cancelling if self.spec.server_auto_ack else self.stopping
        limit = self.spec.limit
        for gi in range(start_group, len(groups)):
            group = groups[gi]
            for i in range(start_message if gi == start_group else 0, len(group)):
                m = group[i]
                if limit > 0:  # only a limit reads the count
                    with self._count_lock:
                        if cut.is_set() or self.delivered >= limit:
                            unhandled.append(group[i:])
                            break
                        self.delivered += 1
                elif cut.is_set():
                    unhandled.append(group[i:])
                    break
                try:
                    r = handler(m)
                except BaseException as exc:  # as the pool's futures did: any exception is the nack
                    if self._stopped_by_cancel(exc):
                        outcomes.append((m, "retry", None))
                        break  # the rest redelivers after the release
                    outcomes.append((m, *_handler_failure(exc, handling)))
                    if self._reports(exc):
                        return gi + 1, 0, self._reported(exc, [m]), None
                    break
                if r is not None and inspect.isawaitable(r):
                    if inv.awaits_results:  # AsyncLanes awaits it on the loop
                        return gi, i + 1, None, (m, r)
                    unawaited = _unawaited(r)
                    outcomes.append((m, "failed", _failure_text(unawaited)))
                    return gi + 1, 0, unawaited, None
                outcomes.append((m, "completed", None))
            if self._limit_reached():
                return gi + 1, 0, None, None
        return len(groups), 0, None, None


# ---------------------------------------------------------------------------------------------
# Async consumer


class AsyncConsumer:
    """A running asyncio consumer. ``await stop()`` is a soft stop, ``await stop_and_cancel()``
    also cancels the async handlers (their messages are released with ``retry``) and sets
    :attr:`cancel_event`, which plain (def) handlers, running in threads, may poll; ``await
    closed()`` waits for the end and raises the terminal error (403, 413, other 4xx, 501) if
    there was one."""

    def __init__(self, engine: Engine, handler_pool: concurrent.futures.ThreadPoolExecutor) -> None:
        self._engine = engine
        self.cancel_event = engine.cancelling
        self._task: asyncio.Task[None] = asyncio.ensure_future(self._run(handler_pool))

    async def _run(self, handler_pool: concurrent.futures.ThreadPoolExecutor) -> None:
        try:
            await self._engine.run()
        finally:
            await _shut_down(handler_pool)

    @property
    def done(self) -> bool:
        return self._task.done()

    @property
    def error(self) -> BaseException | None:
        """The terminal error, once done (None after a requested stop, limit or idle end)."""
        return self._engine.error

    async def _wait(self, timeout: float | None) -> None:
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout)
        except asyncio.TimeoutError:
            raise TimeoutError("lanes: consumer still stopping") from None

    def _request_stop(self) -> None:
        """The soft stop without the wait (the client's aclose() asks every consumer first)."""
        if not self._task.done():
            self._engine.request_stop(False)

    async def stop(self, timeout: float | None = None) -> None:
        """Soft stop: no new pops, finish current messages, ack, release the rest (with
        ``auto_ack(False)``, see ``auto_ack()``). A parked pop is cut (its connection
        half-closed): it ends at once, and what the broker had already sent it is released;
        on a caller's ``http_client`` it is cancelled. Raises
        ``TimeoutError`` if not ended within ``timeout`` (it keeps stopping; call again).
        Called from inside a handler (or its on_error), it requests the stop and returns at
        once: waiting there for the end would wait for that handler itself."""
        self._request_stop()
        if not self._engine.runs_current_code():
            await self._wait(timeout)

    async def stop_and_cancel(self, timeout: float | None = None) -> None:
        """Hard stop: as :meth:`stop`, and cancel running handlers (from inside a handler, that
        one too, at its next await)."""
        if not self._task.done():
            self._engine.request_stop(True)
        if not self._engine.runs_current_code():
            await self._wait(timeout)

    async def closed(self) -> None:
        """Wait until the consumer ended; raise its terminal error if any. Cancelling this wait
        does not stop the consumer (``stop()`` / ``stop_and_cancel()`` do; ``AsyncQueue.run``
        calls ``stop_and_cancel()`` when it is cancelled)."""
        await asyncio.shield(self._task)
        if self._engine.error is not None:
            raise self._engine.error

    async def __aenter__(self) -> AsyncConsumer:
        return self

    async def __aexit__(
        self,
        et: type[BaseException] | None,
        ev: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
        if et is None and self._engine.error is not None:
            raise self._engine.error


# ---------------------------------------------------------------------------------------------
# Sync consumer


class IoThreads:
    """The sync consumer's helper threads for its blocking calls (pops, lease renewals, and the
    acks the handler thread does not send), each kept for the next call: a thread started per
    call cost as much CPU as the pop's own client work. Daemon threads, so a long poll never
    keeps the interpreter from exiting. There are as many as calls ran at once: per worker a pop
    or an ack, and a renewal."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue[Callable[[], None] | None]] = []
        self._closed = False

    def _start(self, job: Callable[[], None]) -> None:
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
        if inbox is None:
            inbox = queue.SimpleQueue()
            thread = threading.Thread(target=self._serve, args=(inbox,), name="lanes-io")
            thread.daemon = True
            thread.start()
        inbox.put(job)

    def _serve(self, inbox: queue.SimpleQueue[Callable[[], None] | None]) -> None:
        while (job := inbox.get()) is not None:
            job()
            with self._lock:
                if self._closed:
                    return
                self._idle.append(inbox)

    def close(self) -> None:
        """End the idle threads; a busy one (an abandoned pop) ends after its call. Called on
        the loop as the consumer's last act there: from then on a call's answer is not handed
        to the loop but to ``on_abandoned``, in its own thread (see :meth:`submit`)."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for inbox in idle:
            inbox.put(None)

    async def call(
        self,
        fn: Callable[..., T],
        *args: Any,
        on_abandoned: Callable[[T], None] | None = None,
        on_finished: Callable[[], None] | None = None,
    ) -> T:
        """Run a blocking call in one of the threads; cancelling the await abandons it. A
        blocking call cannot be interrupted, so an abandoned call still completes:
        ``on_abandoned`` then gets its result, in a helper thread (a stopped consumer's pop
        releases what the broker leased to it meanwhile). ``on_finished`` runs once when all is
        done: the answer handed over, or given to ``on_abandoned`` and that returned, or the
        call failed."""
        return await self.submit(fn, *args, on_abandoned=on_abandoned, on_finished=on_finished)

    def submit(
        self,
        fn: Callable[..., T],
        *args: Any,
        on_abandoned: Callable[[T], None] | None = None,
        on_finished: Callable[[], None] | None = None,
        cut: CallCut | None = None,
    ) -> asyncio.Future[T]:
        """:meth:`call` as a future of the running loop, which needs no task to be awaited or
        cancelled (cancelling it abandons the call). With ``cut``, abandoning the call also
        fires it: a long poll then ends at once instead of holding its connection (and a
        message it would still get) until its wait is over."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        if cut is not None:
            fut.add_done_callback(lambda f: cut.fire() if f.cancelled() else None)

        def finished() -> None:
            if on_finished is not None:
                on_finished()

        def abandon(v: T) -> None:
            try:
                if on_abandoned is not None:
                    on_abandoned(v)
            finally:
                finished()

        def settle(ok: bool, v: Any) -> None:
            if not fut.done():
                if ok:
                    fut.set_result(v)
                else:
                    fut.set_exception(v)
                finished()
            elif ok and on_abandoned is not None:  # cancelled while this answer was on its way
                self._start(lambda: abandon(v))
            else:
                finished()

        def run() -> None:
            ok = True
            try:
                if cut is None:
                    r: Any = fn(*args)
                else:
                    with cut.running():
                        r = fn(*args)
            except BaseException as e:
                ok, r = False, e
            # Handed to the loop only before close() (checked under its lock): such a callback
            # runs before the loop ends. After it, asyncio.run stops the loop and then closes
            # it, and a callback handed over in between was dropped unrun: the pop's answer was
            # neither released nor finished, its messages leased for the whole lease.
            with self._lock:
                if not self._closed:
                    try:
                        loop.call_soon_threadsafe(settle, ok, r)
                        return
                    except RuntimeError:  # the loop is closed: the consumer has ended
                        pass
            if ok:
                abandon(r)
            else:
                finished()

        self._start(run)
        return fut


class PopsInFlight:
    """The sync client's consumer pops still running in helper threads. A stopped consumer
    abandons (and cuts) its blocking long poll, whose answer the broker may have written already
    and which must then release it; so ``Lanes.close()`` waits briefly for them, and leaves the
    HTTP pool open until the last of them has answered and released what it got
    (docs/consuming.md §5). An iterator stopped while its pop was under way counts here too,
    until it has closed (released what that pop got), and so does a consumer still stopping
    when close() gave up on it, until it ends, so its acks still go out."""

    def __init__(self) -> None:
        self._lock = threading.Condition(threading.Lock())
        self._count = 0
        self._on_idle: Callable[[], None] | None = None

    def begin(self) -> None:
        with self._lock:
            self._count += 1

    def end(self) -> None:
        with self._lock:
            self._count -= 1
            run = self._on_idle if self._count == 0 else None
            if run is not None:
                self._on_idle = None
            if self._count == 0:
                self._lock.notify_all()
        if run is not None:
            run()

    def wait_idle(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds until no pop is in flight; whether none is."""
        with self._lock:
            return self._lock.wait_for(lambda: self._count == 0, timeout)

    def when_idle(self, fn: Callable[[], None]) -> int:
        """Run ``fn`` now if no pop is in flight, else when the last one ends; returns how many
        are in flight."""
        with self._lock:
            n = self._count
            if n:
                self._on_idle = fn
        if not n:
            fn()
        return n


class Consumer:
    """A running consumer with blocking handlers. ``stop(timeout)`` is a soft stop;
    ``stop_and_cancel`` also sets :attr:`cancel_event`, which long handlers may poll (a running
    Python function cannot be interrupted). Usable as a context manager (soft stop on exit)."""

    def __init__(
        self,
        make_engine: Callable[[concurrent.futures.ThreadPoolExecutor, IoThreads], Engine],
        concurrency: int,
    ) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=concurrency, thread_name_prefix="lanes-handler"
        )
        self._io = IoThreads()
        self._engine = make_engine(self._pool, self._io)
        # Set by stop_and_cancel, and by a soft stop's escalation (soft_stop_timeout_millis).
        self.cancel_event = self._engine.cancelling
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = threading.Event()
        # Set at the very end of _main: what done, closed() and the stops wait on. Not
        # Thread.join / is_alive: on CPython 3.10 and 3.11 a KeyboardInterrupt inside
        # Thread.join marks the thread ended while it still runs (bpo-45274), and every later
        # join returns at once; Event.wait can be interrupted safely.
        self._ended = threading.Event()
        self._end_lock = threading.Lock()
        self._on_end: list[Callable[[], None]] = []
        self._thread = threading.Thread(target=self._main, name="lanes-consumer")
        self._thread.start()
        self._started.wait()

    def _main(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._started.set()
            try:
                await self._engine.run()
            finally:
                self._io.close()  # on the loop: the answers handed to it before still run

        try:
            asyncio.run(main())
        finally:
            self._started.set()
            try:
                self._pool.shutdown(wait=True)
            finally:
                with self._end_lock:
                    self._ended.set()
                    on_end, self._on_end = self._on_end, []
                for fn in on_end:
                    fn()

    def when_ended(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` once the consumer has ended: now if it has, else on its thread at the end
        (the client's close() keeps the HTTP pool open for a consumer still stopping)."""
        with self._end_lock:
            if not self._ended.is_set():
                self._on_end.append(fn)
                return
        fn()

    @property
    def done(self) -> bool:
        return self._ended.is_set()

    @property
    def error(self) -> BaseException | None:
        return self._engine.error

    def _signal(self, hard: bool) -> None:
        self._engine.stopping.set()  # a handler thread stops taking messages at once
        if hard:
            self.cancel_event.set()
        loop = self._loop
        if loop is not None and not self.done:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._engine.request_stop, hard)

    def _request_stop(self) -> None:
        """The soft stop without the wait (the client's close() asks every consumer first)."""
        self._signal(False)

    def _join(self, timeout: float | None) -> None:
        if not self._ended.wait(timeout):
            raise TimeoutError("lanes: consumer still stopping")

    def stop(self, timeout: float | None = None) -> None:
        """Soft stop; raises ``TimeoutError`` if not ended within ``timeout`` (call again).
        Called from inside a handler (or its on_error), it requests the stop and returns at
        once."""
        self._signal(False)
        if not self._engine.runs_current_code():  # else the end waits for this very handler
            self._join(timeout)

    def stop_and_cancel(self, timeout: float | None = None) -> None:
        """Hard stop: set :attr:`cancel_event`, stop popping, wait for handlers to return."""
        self._signal(True)
        if not self._engine.runs_current_code():
            self._join(timeout)

    def closed(self, timeout: float | None = None) -> None:
        """Block until the consumer ended; raise its terminal error if any."""
        self._join(timeout)
        if self._engine.error is not None:
            raise self._engine.error

    def __enter__(self) -> Consumer:
        return self

    def __exit__(
        self,
        et: type[BaseException] | None,
        ev: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
        if et is None and self._engine.error is not None:
            raise self._engine.error


def make_invoke_async(
    handler: Callable[[Any], Any], pool: concurrent.futures.ThreadPoolExecutor
) -> Callable[[Any], Awaitable[None]]:
    """The asyncio consumer's handler call: an ``async def`` handler runs on the event loop;
    any other callable runs in ``pool`` (a blocking one on the loop would stall it, lease
    renewal included), and an awaitable it returns is awaited on the loop."""
    if inspect.iscoroutinefunction(handler):

        async def invoke_coroutine(arg: Any) -> None:
            await handler(arg)

        return invoke_coroutine
    return SyncInvoke(handler, pool, awaits_results=True)


async def _shut_down(pool: concurrent.futures.ThreadPoolExecutor) -> None:
    """Shut ``pool`` down and wait, without blocking the event loop, until its threads have
    ended: every handler has returned, so they are only leaving, but they are not daemons, and
    a stopped consumer must leave no thread that holds the interpreter's exit."""
    pool.shutdown(wait=False)
    # Polled: nothing signals a thread's end but join(), which would block the loop.
    while any(t.is_alive() for t in pool._threads):  # noqa: ASYNC110
        await asyncio.sleep(0.001)


async def _outlive_cancellation(fut: asyncio.Future[T]) -> T:
    """A handler running in a thread cannot be interrupted: a cancellation (the hard stop)
    waits for it to return, and its message is acked by its outcome, as in the blocking
    client."""
    while True:
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            if fut.cancelled():
                raise


class SyncInvoke:
    """A plain handler and the consumer's pool. Called, it runs the handler on one argument
    in the pool and awaits on the loop an awaitable it returned; the engine also runs a pop's
    per-message plan there in one trip (:meth:`Engine._each_in_pool`)."""

    def __init__(
        self,
        handler: Callable[[Any], Any],
        pool: concurrent.futures.ThreadPoolExecutor,
        awaits_results: bool,
    ) -> None:
        self.handler = handler
        self.pool = pool
        self.awaits_results = awaits_results
        """AsyncLanes awaits what a plain handler returns; Lanes fails it (:func:`_unawaited`)."""
        self._call_one = handler if awaits_results else _blocking_call(handler)

    async def __call__(self, arg: Any) -> None:
        r = await _outlive_cancellation(self.run(self._call_one, arg))
        if r is not None and inspect.isawaitable(r):
            await r

    def run(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        # In the caller's context, as asyncio.to_thread does: the handler's stop() sees its engine.
        call = contextvars.copy_context().run
        return asyncio.get_running_loop().run_in_executor(self.pool, call, fn, *args)


def make_invoke_sync(
    handler: Callable[[Any], Any], pool: concurrent.futures.ThreadPoolExecutor
) -> Callable[[Any], Awaitable[None]]:
    """The blocking client's handler call: in ``pool``; an awaitable it returns fails it."""
    return SyncInvoke(handler, pool, awaits_results=False)
