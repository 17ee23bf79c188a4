"""Queue builders: ``client.queue(name)`` for ``Lanes`` and ``AsyncLanes`` (push, pop, messages,
consume, buffer, configure, depth, dead letters)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import warnings
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from lanes import _protocol as P
from lanes import _requests as R
from lanes._admin import async_walk, walk
from lanes._buffer import AsyncPushBuffer, BufferOptions, PushBuffer
from lanes._consumer import (
    AsyncConsumer,
    Consumer,
    Engine,
    IoThreads,
    Ops,
    make_invoke_async,
    make_invoke_sync,
    refuse_async_handler,
)
from lanes._exceptions import AutoAckDroppedError
from lanes._generated import models
from lanes._http import CallCut
from lanes._iter import AsyncMessageIterator, MessageIterator, _Core
from lanes._pacer import ErrorCallback, ErrorReporter
from lanes._types import Message, PopResult, PushResult

if TYPE_CHECKING:
    # Named only in the string base classes below (``_QueueBase["Lanes"]``), unseen by ruff.
    from lanes._client import AsyncLanes, Lanes  # noqa: F401

QB = TypeVar("QB", bound="_QueueBase[Any]")
C = TypeVar("C")


class _QueueBase(Generic[C]):
    """Immutable builder: every setter returns a new builder, so a base can be shared."""

    def __init__(self, client: C, spec: P.QueueSpec, on_error: ErrorCallback | None = None) -> None:
        self._client = client
        self._spec = spec
        self._on_error = on_error

    def _with(self: QB, **kw: Any) -> QB:
        return type(self)(self._client, dataclasses.replace(self._spec, **kw), self._on_error)

    @property
    def spec(self) -> P.QueueSpec:
        return self._spec

    def partition(self: QB, name: str) -> QB:
        """Target one partition (push target; pop uses the partition route)."""
        return self._with(partition=name)

    def namespace(self: QB, ns: str) -> QB:
        return self._with(namespace=ns)

    def task(self: QB, task: str) -> QB:
        return self._with(task=task)

    def group(self: QB, group: str) -> QB:
        return self._with(group=group)

    def subscription_mode(self: QB, mode: Literal["all", "new", "new-only"]) -> QB:
        return self._with(subscription_mode=mode)

    def subscription_from(self: QB, value: str | datetime) -> QB:
        return self._with(subscription_from=R._iso(value) if isinstance(value, datetime) else value)

    def batch(self: QB, n: int) -> QB:
        """Messages per pop; 0 or below = unset (the broker sizes it under autopilot), as in Go."""
        return self._with(batch=n if n > 0 else None)

    def partitions(self: QB, n: int) -> QB:
        """Partitions claimed per pop; 0 or below = unset (the broker sizes it under autopilot),
        as in Go."""
        return self._with(partitions=n if n > 0 else None)

    def autopilot(self: QB, on: bool) -> QB:
        """``False`` restores batch 1 / width 1 exactly; ``True`` outranks the environment."""
        return self._with(autopilot=on)

    def wait(self: QB, on: bool) -> QB:
        return self._with(wait=on)

    def timeout_millis(self: QB, ms: int) -> QB:
        return self._with(timeout_millis=int(ms))

    def lease_seconds(self: QB, n: int) -> QB:
        return self._with(lease_seconds=n)

    def server_auto_ack(self: QB, on: bool) -> QB:
        """The broker's at-most-once pop (wire ``autoAck``); the loop then never acks."""
        return self._with(server_auto_ack=on)

    def concurrency(self: QB, n: int) -> QB:
        return self._with(concurrency=n)

    def limit(self: QB, n: int) -> QB:
        return self._with(limit=n)

    def idle_millis(self: QB, ms: int) -> QB:
        """End the consume loop or iterator once idle for ``ms`` (0 = never); each pop waits at
        most the idle time left, so a longer ``timeout_millis`` does not delay the end."""
        return self._with(idle_millis=ms)

    def renew_lease(self: QB, enabled: bool = True, interval_millis: int = 0) -> QB:
        """Lease renewal, on by default: while handlers run, the pop's lease is extended every
        ``interval_millis`` (0 = a third of the lease the pop's answer names, else of
        ``lease_seconds``, at most 10 s; from an older broker without ``lease_seconds``, 1 s after
        the pop, then a third of the lease the renewal's answer shows, at most 10 s),
        so a handler slower than the lease keeps its messages. ``renew_lease(False)`` turns it
        off."""
        if interval_millis < 0:
            raise ValueError("lanes: renew_lease interval_millis must be >= 0")
        return self._with(renew_lease=enabled, renew_interval_millis=int(interval_millis))

    def each(self: QB) -> QB:
        """Handler per message (the default)."""
        return self._with(each=True)

    def auto_ack(self: QB, on: bool) -> QB:
        """Client-side ack after the handler (default True); False leaves acking to you. A
        ``retry`` below a message not acked yet would release that one too, so with False a stop
        or the limit releases only the partitions of a pop of which nothing was handed to the
        handler, and leaving an iterator early releases nothing: the rest redelivers when the
        lease expires."""
        return self._with(auto_ack=on)

    def soft_stop_timeout_millis(self: QB, ms: int) -> QB:
        """Escalate a soft stop to a hard one after ``ms`` milliseconds (0 = never)."""
        if ms < 0:
            raise ValueError("lanes: soft_stop_timeout_millis must be >= 0")
        return self._with(soft_stop_timeout_millis=int(ms))

    def soft_stop_timeout(self: QB, seconds: float) -> QB:
        """Deprecated: use :meth:`soft_stop_timeout_millis` (builder knobs take milliseconds).
        Still works, with ``seconds`` as before."""
        warnings.warn(
            "lanes: soft_stop_timeout(seconds) is deprecated; use soft_stop_timeout_millis(ms)",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.soft_stop_timeout_millis(round(seconds * 1000))

    def report_handler_errors(self: QB, on: bool = True) -> QB:
        return self._with(report_handler_errors=on)

    def on_error(self: QB, fn: ErrorCallback) -> QB:
        b = self._with()
        b._on_error = fn
        return b

    def _iter_core(
        self,
        auto_ack: bool | None,
        limit: int | None,
        idle_timeout: float | None,
        on_error: ErrorCallback | None,
    ) -> _Core:
        """The iterator's state: a keyword given to ``messages()`` wins over the builder."""
        spec = self._spec
        return _Core(
            spec,
            spec.auto_ack if auto_ack is None else auto_ack,
            spec.limit if limit is None else limit,
            spec.idle_millis / 1000.0 if idle_timeout is None else idle_timeout,
            self._reporter("messages", on_error),
        )

    def _reporter(self, loop: str, on_error: ErrorCallback | None = None) -> ErrorReporter:
        """Where a loop's errors go: ``on_error`` (else the builder's), else the client's logger."""
        logger = self._client._cfg.logger  # type: ignore[attr-defined]
        return ErrorReporter(self._on_error if on_error is None else on_error, logger, loop)

    def _queue_name(self) -> str:
        if not self._spec.queue:
            raise ValueError("lanes: this call needs a queue name")
        return self._spec.queue


class Queue(_QueueBase["Lanes"]):
    """Blocking queue builder from ``client.queue(name)``."""

    def push(self, items: Sequence[Any]) -> list[PushResult]:
        """Push items (one request); raises :class:`PushError` when any item is ``failed`` and
        :class:`InvalidItemError` (nothing sent) for an item that cannot be sent as given."""
        items = P.item_list(items)
        if not items:
            return []
        c = self._client
        results = c._call(R.push(self._queue_name(), self._spec.partition, items))
        # Logged first: a failed item raises, and the buffered ones are stored all the same.
        return P.check_push_results(P.warn_buffered(results, c._cfg.logger))

    def pop_result(self) -> PopResult:
        """One pop with its autopilot echo; a 204 is an empty result."""
        P.validate_spec(self._spec)
        return self._pop_with(self._spec)

    def _pop_with(self, spec: P.QueueSpec) -> PopResult:
        c = self._client
        return c._call(R.pop(spec, c._cfg.pop_autopilot, c._cfg.timeout))

    def pop(self) -> list[Message]:
        """One pop; errors are raised (unlike the reference client)."""
        return self.pop_result().messages

    def messages(
        self,
        *,
        auto_ack: bool | None = None,
        limit: int | None = None,
        idle_timeout: float | None = None,
        on_error: ErrorCallback | None = None,
    ) -> MessageIterator:
        """Pull iterator (see :mod:`lanes._iter` for the ack and error rules). ``auto_ack``,
        ``limit``, ``idle_timeout`` (seconds) and ``on_error`` default to the builder's
        ``auto_ack()``, ``limit()``, ``idle_millis()`` and ``on_error()``; a keyword given here
        overrides the builder. ``on_error`` receives the errors the iteration waits out (failed
        pops, failed acks); only an error that ends the iteration is raised. Once the client's
        ``close()`` began it raises :class:`ClientClosedError`: the close ends only the
        iterators made before it."""
        P.validate_spec(self._spec)
        c = self._client
        core = self._iter_core(auto_ack, limit, idle_timeout, on_error)
        return c._start_iterator(  # close() ends it
            lambda: MessageIterator(
                core,
                self._pop_with,
                # after_close: close() keeps the HTTP pool open for a stopped iterator's release.
                lambda entries: c._ack_entries(P.loop_acks(entries), after_close=True),
                c._renew_one,
                c._pops,
            )
        )

    def _engine(self, handler: Callable[[Any], Any], pool: Any, io: IoThreads) -> Engine:
        c = self._client
        report = self._reporter("consume")
        return Engine(
            self._spec,
            Ops(
                pop=lambda spec: self._pop_in_thread(spec, io, report),
                # after_close: close() keeps the pool open for a consumer still stopping.
                ack=lambda entries: io.call(
                    lambda: c._ack_entries(P.loop_acks(entries), after_close=True)
                ),
                renew=lambda lid, s: io.call(lambda: c._renew_one(lid, s, after_close=True)),
                invoke=make_invoke_sync(handler, pool),
                ack_blocking=lambda entries: c._ack_entries(P.loop_acks(entries), after_close=True),
            ),
            report,
            cancellable_handlers=False,
            client_autopilot=c._cfg.pop_autopilot,
        )

    def _pop_in_thread(
        self, spec: P.QueueSpec, io: IoThreads, report: ErrorReporter
    ) -> asyncio.Future[PopResult]:
        """The consume loop's pop: blocking, in a helper thread the client's close() waits for
        (see PopsInFlight); a pop abandoned by a stop releases what it got."""
        pops = self._client._pops
        pops.begin()
        return io.submit(
            self._pop_with,
            spec,
            on_abandoned=lambda res: self._release(res, report),
            on_finished=pops.end,
            cut=CallCut(),
        )

    def _release(self, res: PopResult, report: ErrorReporter) -> None:
        """Release with ``retry`` a pop that answered after its consumer stopped: its blocking
        request could not be cancelled, and nobody will handle what it leased (under server
        auto-ack, nothing can release them: report how many were dropped)."""
        if self._spec.server_auto_ack and res.messages:
            report(AutoAckDroppedError(len(res.messages), "popped after the stop"), "pop")
        entries = P.release_acks(res, self._spec)
        if not entries:
            return
        try:
            self._client._ack_entries(entries, after_close=True)
        except Exception as e:
            self._client._cfg.logger.warning(
                "lanes: releasing lease %s (%d messages) of a pop answered after its consumer "
                "stopped failed: %s; they are redelivered when the lease expires",
                res.lease_id,
                len(res.messages),
                e,
            )

    def consume(self, handler: Callable[[Message], None]) -> Consumer:
        """Start the consume loop (non-blocking) with a blocking per-message handler. An
        ``async def`` handler raises ``TypeError`` (use :class:`AsyncLanes`); an async callable
        seen only when called (its result awaitable) nacks its message ``failed`` and reports a
        ``TypeError`` to ``on_error``: no message is acked without being handled. Once the
        client's ``close()`` began it raises :class:`ClientClosedError`: the close stops only
        the consumers started before it."""
        P.validate_spec(self._spec)
        refuse_async_handler(handler)
        return self._client._start_consumer(
            lambda: Consumer(
                lambda pool, io: self._engine(handler, pool, io), self._spec.concurrency
            )
        )

    def consume_batch(self, handler: Callable[[list[Message]], None]) -> Consumer:
        """As :meth:`consume`, the handler gets each partition's slice of a pop at once."""
        return self._with(each=False).consume(handler)  # type: ignore[arg-type]

    def run(self, handler: Callable[[Message], None]) -> None:
        """Blocking convenience: consume until the loop ends; raise its terminal error.
        Interrupted (Ctrl-C's ``KeyboardInterrupt``, or any exception raised in this thread
        while it waits), it soft-stops the consumer and waits for its end before re-raising:
        the message in hand finishes and what was handled is acked."""
        cons = self.consume(handler)
        try:
            cons.closed()
        except BaseException:
            if not cons.done:
                cons.stop()
            raise

    def buffer(
        self,
        *,
        message_count: int = 100,
        time_millis: int = 1000,
        max_size: int = 0,
        retry_delay_millis: int = 250,
        on_error: ErrorCallback | None = None,
    ) -> PushBuffer:
        """The client's bounded push buffer for this (queue, partition)."""
        opts = BufferOptions(message_count, time_millis, max_size, retry_delay_millis)
        return self._client._buffer(self._queue_name(), self._spec.partition, opts, on_error)

    def configure(
        self,
        options: models.QueueOptions | Mapping[str, Any] | None = None,
        mode: Literal["merge", "replace"] | None = None,
    ) -> models.ConfigureResult:
        return self._client.admin.configure_queue(self._queue_name(), options, mode)

    def delete(self) -> models.DeleteQueueResult:
        return self._client.admin.delete_queue(self._queue_name())

    def depth(self) -> models.QueueDepth:
        """Pending counts of this queue for the builder's group (none = queue mode)."""
        return self._client.admin.get_queue_depth(self._queue_name(), self._spec.group)

    def dlq(self, group: str | None = None) -> DlqQuery:
        """This queue's dead letters of ``group`` (default: the builder's group; neither = every
        group), paged: ``client.queue(q).dlq(g).limit(10).get()``."""
        return DlqQuery(self._client, _DlqFilter(self._queue_name(), group or self._spec.group))


class AsyncQueue(_QueueBase["AsyncLanes"]):
    """Asyncio queue builder from ``client.queue(name)``."""

    async def push(self, items: Sequence[Any]) -> list[PushResult]:
        items = P.item_list(items)
        if not items:
            return []
        c = self._client
        results = await c._call(R.push(self._queue_name(), self._spec.partition, items))
        # Logged first: a failed item raises, and the buffered ones are stored all the same.
        return P.check_push_results(P.warn_buffered(results, c._cfg.logger))

    async def pop_result(self) -> PopResult:
        P.validate_spec(self._spec)
        return await self._pop_with(self._spec)

    async def _pop_with(self, spec: P.QueueSpec) -> PopResult:
        c = self._client
        return await c._call(R.pop(spec, c._cfg.pop_autopilot, c._cfg.timeout))

    async def _pop_under_cut(self, spec: P.QueueSpec, cut: CallCut) -> PopResult:
        """The consume loop's pop, which its stop cuts (half-closes) instead of cancelling."""
        with cut.running_in_task():
            return await self._pop_with(spec)

    async def pop(self) -> list[Message]:
        return (await self.pop_result()).messages

    def messages(
        self,
        *,
        auto_ack: bool | None = None,
        limit: int | None = None,
        idle_timeout: float | None = None,
        on_error: ErrorCallback | None = None,
    ) -> AsyncMessageIterator:
        """Async pull iterator; the keywords default to the builder's values, and
        ``aclose()`` refuses it, as in :meth:`Queue.messages`."""
        P.validate_spec(self._spec)
        c = self._client
        core = self._iter_core(auto_ack, limit, idle_timeout, on_error)
        return c._start_iterator(  # aclose() ends it
            lambda: AsyncMessageIterator(
                core,
                self._pop_with,
                # after_close: a cancelled aclose() keeps the HTTP pool open for a stopped
                # iterator's release.
                lambda entries: c._ack_entries(P.loop_acks(entries), after_close=True),
                c._renew_one,
                c._stopped_iterators,
            )
        )

    def consume(self, handler: Callable[[Message], Any]) -> AsyncConsumer:
        """Start the consume loop as a task (non-blocking). An ``async def`` handler runs on
        the event loop (a hard stop cancels it); any other callable runs in a pool of
        ``concurrency`` threads, as in the blocking client, so blocking work in it stalls
        neither the loop nor lease renewal (a hard stop cannot interrupt it: it may poll
        ``consumer.cancel_event``, and its message is acked by its outcome). Refused with
        :class:`ClientClosedError` once ``aclose()`` began, as :meth:`Queue.consume`."""
        P.validate_spec(self._spec)
        return self._client._start_consumer(lambda: self._new_consumer(handler))

    def _new_consumer(self, handler: Callable[[Message], Any]) -> AsyncConsumer:
        c = self._client
        pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=self._spec.concurrency, thread_name_prefix="lanes-handler"
        )
        engine = Engine(
            self._spec,
            Ops(
                pop=self._pop_with,
                # after_close: aclose() keeps the pool open for a consumer still stopping.
                ack=lambda entries: c._ack_entries(P.loop_acks(entries), after_close=True),
                renew=lambda lid, s: c._renew_one(lid, s, after_close=True),
                invoke=make_invoke_async(handler, pool),
                pop_under_cut=self._pop_under_cut if c._t.cuts_calls else None,
            ),
            self._reporter("consume"),
            cancellable_handlers=True,
            client_autopilot=c._cfg.pop_autopilot,
        )
        return AsyncConsumer(engine, pool)

    def consume_batch(self, handler: Callable[[list[Message]], Any]) -> AsyncConsumer:
        return self._with(each=False).consume(handler)  # type: ignore[arg-type]

    async def run(self, handler: Callable[[Message], Any]) -> None:
        """Consume until the loop ends; raise its terminal error. Cancelling this call (for
        example ``asyncio.wait_for(q.run(h), 5)``) hard-stops the consumer (handlers cancelled,
        their messages released with ``retry``) and waits for its end before re-raising."""
        cons = self.consume(handler)
        try:
            await cons.closed()
        except asyncio.CancelledError:
            await cons.stop_and_cancel()
            raise

    def buffer(
        self,
        *,
        message_count: int = 100,
        time_millis: int = 1000,
        max_size: int = 0,
        retry_delay_millis: int = 250,
        on_error: ErrorCallback | None = None,
    ) -> AsyncPushBuffer:
        opts = BufferOptions(message_count, time_millis, max_size, retry_delay_millis)
        return self._client._buffer(self._queue_name(), self._spec.partition, opts, on_error)

    async def configure(
        self,
        options: models.QueueOptions | Mapping[str, Any] | None = None,
        mode: Literal["merge", "replace"] | None = None,
    ) -> models.ConfigureResult:
        return await self._client.admin.configure_queue(self._queue_name(), options, mode)

    async def delete(self) -> models.DeleteQueueResult:
        return await self._client.admin.delete_queue(self._queue_name())

    async def depth(self) -> models.QueueDepth:
        """Pending counts of this queue for the builder's group (none = queue mode)."""
        return await self._client.admin.get_queue_depth(self._queue_name(), self._spec.group)

    def dlq(self, group: str | None = None) -> AsyncDlqQuery:
        """As :meth:`Queue.dlq`; ``await …get()``."""
        return AsyncDlqQuery(
            self._client, _DlqFilter(self._queue_name(), group or self._spec.group)
        )


@dataclasses.dataclass(frozen=True)
class _DlqFilter:
    queue: str
    consumer_group: str | None = None
    partition: str | None = None
    from_: datetime | str | None = None
    to: datetime | str | None = None
    limit: int | None = None
    offset: int | None = None
    after: str | None = None

    def request(self) -> R.Req[models.DlqList]:
        f = self
        return R.list_dlq(
            f.queue, f.consumer_group, f.partition, f.from_, f.to, f.limit, f.offset, f.after
        )

    def walk(self) -> R.Walk[models.DlqMessage]:
        f = self
        return R.walk_dlq(
            f.queue, f.consumer_group, f.partition, f.from_, f.to, f.limit, f.offset, f.after
        )


DQ = TypeVar("DQ", bound="_DlqQueryBase[Any]")


class _DlqQueryBase(Generic[C]):
    """Immutable: every setter returns a new query, as the queue builders do."""

    def __init__(self, client: C, f: _DlqFilter) -> None:
        self._client = client
        self._f = f

    def _with(self: DQ, **kw: Any) -> DQ:
        return type(self)(self._client, dataclasses.replace(self._f, **kw))

    def partition(self: DQ, name: str) -> DQ:
        return self._with(partition=name)

    def limit(self: DQ, n: int) -> DQ:
        """Page size (default 100)."""
        return self._with(limit=n)

    def offset(self: DQ, n: int) -> DQ:
        """Rows to skip. Prefer :meth:`after`: dead letters replayed or filed between two pages
        move an offset."""
        return self._with(offset=n)

    def after(self: DQ, key: str) -> DQ:
        """Start after the row ``key`` names: the ``next_after`` of the page before (not with
        :meth:`offset`)."""
        return self._with(after=key)

    def from_(self: DQ, t: datetime | str) -> DQ:
        """Lower bound on when the dead letters failed (``from`` is a keyword)."""
        return self._with(from_=t)

    def to(self: DQ, t: datetime | str) -> DQ:
        """Upper bound on when the dead letters failed."""
        return self._with(to=t)


class DlqQuery(_DlqQueryBase["Lanes"]):
    """A page of one queue's dead letters, from ``client.queue(q).dlq(group)``."""

    def get(self) -> models.DlqList:
        """The page, newest first (``admin.list_dlq`` with these filters)."""
        return self._client._call(self._f.request())

    def all(self) -> Iterator[models.DlqMessage]:
        """Every dead letter these filters select, newest first, page by page (:meth:`limit`
        rows a page, default 100), as ``admin.all_dlq``:
        ``for m in client.queue(q).dlq(g).all(): ...``."""
        return walk(self._client, self._f.walk())


class AsyncDlqQuery(_DlqQueryBase["AsyncLanes"]):
    """Asyncio :class:`DlqQuery`."""

    async def get(self) -> models.DlqList:
        return await self._client._call(self._f.request())

    def all(self) -> AsyncIterator[models.DlqMessage]:
        """Asyncio :meth:`DlqQuery.all`: ``async for m in client.queue(q).dlq(g).all(): ...``."""
        return async_walk(self._client, self._f.walk())
