"""``Lanes`` (blocking) and ``AsyncLanes`` (asyncio): thin executors of the shared rules in
``_protocol``, ``_requests``, ``_retry`` and the consume engine in ``_consumer``."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Generic, Literal, TypeVar

import httpx

from lanes import _protocol as P
from lanes import _requests as R
from lanes._buffer import AsyncPushBuffer, BufferOptions, PushBuffer, aflush_every, flush_every
from lanes._consumer import (
    AsyncConsumer,
    Consumer,
    Engine,
    Ops,
    in_thread,
    make_invoke_async,
    make_invoke_sync,
)
from lanes._exceptions import ClientClosedError
from lanes._generated import models
from lanes._http import AsyncTransport, Config, SyncTransport
from lanes._iter import AsyncMessageIterator, MessageIterator, _Core
from lanes._requests import Req
from lanes._retry import RetrySettings
from lanes._tx import AsyncTransaction, Transaction
from lanes._types import AckResult, AckStatus, Message, PopResult, PushResult, RenewResult

T = TypeVar("T")
QB = TypeVar("QB", bound="_QueueBase[Any]")
C = TypeVar("C")

DEFAULT_URL = "http://localhost:6632"
ErrorCallback = Callable[[BaseException], None]


def _config(
    url: str | None,
    urls: Sequence[str] | None,
    bearer_token: str | None,
    timeout: float,
    retry_attempts: int,
    retry_delay: float,
    max_retry_delay: float,
    max_429_attempts: int,
    max_retry_after: float,
    logger: logging.Logger | None,
    headers: Mapping[str, str] | None,
    pop_autopilot: bool | None,
    clock: Callable[[], float] | None,
    rng: Callable[[], float] | None,
) -> Config:
    lst = list(urls) if urls else [url or os.environ.get("LANES_URL") or DEFAULT_URL]
    cfg = Config(
        urls=[u.rstrip("/") for u in lst],
        settings=RetrySettings(
            retry_attempts=max(0, retry_attempts),
            retry_delay=retry_delay,
            max_retry_delay=max_retry_delay,
            max_429_attempts=max(0, max_429_attempts),
            max_retry_after=max_retry_after,
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
        out = [(g, dataclasses.replace(e, lease_id="")) for g, e in out]
    return out


# ---------------------------------------------------------------------------------------------
# Queue builders


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
        """Messages per pop; 0 = unset (the broker sizes it under autopilot)."""
        return self._with(batch=n or None)

    def partitions(self: QB, n: int) -> QB:
        """Partitions claimed per pop; 0 = unset (the broker sizes it under autopilot)."""
        return self._with(partitions=n or None)

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
        return self._with(idle_millis=ms)

    def renew_lease(self: QB, enabled: bool = True, interval_millis: int = 0) -> QB:
        """Lease renewal, on by default: while handlers run, the pop's lease is extended every
        ``interval_millis`` (0 = a third of ``lease_seconds`` when set, at most 10 s, else 10 s),
        so a handler slower than the lease keeps its messages. ``renew_lease(False)`` turns it
        off."""
        if interval_millis < 0:
            raise ValueError("lanes: renew_lease interval_millis must be >= 0")
        return self._with(renew_lease=enabled, renew_interval_millis=int(interval_millis))

    def each(self: QB) -> QB:
        """Handler per message (the default)."""
        return self._with(each=True)

    def auto_ack(self: QB, on: bool) -> QB:
        """Client-side ack after the handler (default True); False leaves acking to you."""
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
            self._on_error if on_error is None else on_error,
        )

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
        return P.warn_buffered(
            c._call(R.push(self._queue_name(), self._spec.partition, items)), c._cfg.logger
        )

    def pop_result(self) -> PopResult:
        """One pop with its autopilot echo; a 204 is an empty result."""
        P.validate_spec(self._spec)
        c = self._client
        return c._call(R.pop(self._spec, c._cfg.pop_autopilot, c._cfg.timeout))

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
        pops, failed acks); only an error that ends the iteration is raised."""
        P.validate_spec(self._spec)
        c = self._client
        return MessageIterator(
            self._iter_core(auto_ack, limit, idle_timeout, on_error),
            self.pop_result,
            c._ack_entries,
        )

    def _engine(self, handler: Callable[[Any], Any], pool: Any) -> Engine:
        c = self._client
        spec = self._spec
        return Engine(
            spec,
            Ops(
                pop=lambda: in_thread(self.pop_result, on_abandoned=self._release),
                ack=lambda entries: in_thread(c._ack_entries, entries),
                renew=lambda lid, s: in_thread(c._renew_one, lid, s),
                invoke=make_invoke_sync(handler, pool),
            ),
            self._on_error,
            cancellable_handlers=False,
        )

    def _release(self, res: PopResult) -> None:
        """Release with ``retry`` a pop that answered after its consumer stopped: its blocking
        request could not be cancelled, and nobody will handle what it leased."""
        entries = P.release_acks(res, self._spec)
        if not entries:
            return
        try:
            self._client._ack_entries(entries)
        except Exception as e:
            self._client._cfg.logger.warning(
                "lanes: releasing a pop answered after the stop failed: %s", e
            )

    def consume(self, handler: Callable[[Message], Any]) -> Consumer:
        """Start the consume loop (non-blocking) with a blocking per-message handler."""
        P.validate_spec(self._spec)
        cons = Consumer(lambda pool: self._engine(handler, pool), self._spec.concurrency)
        self._client._consumers.add(cons)
        return cons

    def consume_batch(self, handler: Callable[[list[Message]], Any]) -> Consumer:
        """As :meth:`consume`, the handler gets each partition's slice of a pop at once."""
        return self._with(each=False).consume(handler)  # type: ignore[arg-type]

    def run(self, handler: Callable[[Message], Any]) -> None:
        """Blocking convenience: consume until the loop ends; raise its terminal error."""
        self.consume(handler).closed()

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


class AsyncQueue(_QueueBase["AsyncLanes"]):
    """Asyncio queue builder from ``client.queue(name)``."""

    async def push(self, items: Sequence[Any]) -> list[PushResult]:
        items = P.item_list(items)
        if not items:
            return []
        c = self._client
        return P.warn_buffered(
            await c._call(R.push(self._queue_name(), self._spec.partition, items)), c._cfg.logger
        )

    async def pop_result(self) -> PopResult:
        P.validate_spec(self._spec)
        c = self._client
        return await c._call(R.pop(self._spec, c._cfg.pop_autopilot, c._cfg.timeout))

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
        """Async pull iterator; the keywords default to the builder's values, as in
        :meth:`Queue.messages`."""
        P.validate_spec(self._spec)
        return AsyncMessageIterator(
            self._iter_core(auto_ack, limit, idle_timeout, on_error),
            self.pop_result,
            self._client._ack_entries,
            asyncio.sleep,
        )

    def consume(self, handler: Callable[[Message], Any]) -> AsyncConsumer:
        """Start the consume loop as a task (non-blocking); the handler may be async or not
        (a plain function runs on the event loop, so keep it short)."""
        P.validate_spec(self._spec)
        c = self._client
        engine = Engine(
            self._spec,
            Ops(
                pop=self.pop_result,
                ack=c._ack_entries,
                renew=c._renew_one,
                invoke=make_invoke_async(handler),
            ),
            self._on_error,
            cancellable_handlers=True,
        )
        cons = AsyncConsumer(engine)
        c._consumers.add(cons)
        return cons

    def consume_batch(self, handler: Callable[[list[Message]], Any]) -> AsyncConsumer:
        return self._with(each=False).consume(handler)  # type: ignore[arg-type]

    async def run(self, handler: Callable[[Message], Any]) -> None:
        await self.consume(handler).closed()

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


# ---------------------------------------------------------------------------------------------
# Admin, KV, timers


class Admin:
    """``client.admin``: queues, consumer groups, DLQ, messages (generated models)."""

    def __init__(self, client: Lanes) -> None:
        self._c = client

    def configure_queue(
        self,
        queue: str,
        options: models.QueueOptions | Mapping[str, Any] | None = None,
        mode: Literal["merge", "replace"] | None = None,
        *,
        namespace: str | None = None,
        task: str | None = None,
    ) -> models.ConfigureResult:
        """``POST /configure``: a full replace unless ``mode="merge"``."""
        return self._c._call(R.configure(queue, options, mode, namespace, task))

    def get_queue(self, queue: str) -> models.QueueDetail:
        return self._c._call(R.get_queue(queue))

    def list_queues(
        self,
        *,
        namespace: str | None = None,
        task: str | None = None,
        limit: int | None = None,
        offset: int | None = None,
    ) -> models.QueueList:
        return self._c._call(R.list_queues(namespace, task, limit, offset))

    def delete_queue(self, queue: str) -> models.DeleteQueueResult:
        return self._c._call(R.delete_queue(queue))

    def get_queue_depth(self, queue: str, group: str | None = None) -> models.QueueDepth:
        return self._c._call(R.queue_depth(queue, group))

    def get_overview(self) -> models.Overview:
        return self._c._call(R.overview())

    def get_namespaces(self) -> models.NamespaceList:
        return self._c._call(R.namespaces())

    def get_tasks(self) -> models.TaskList:
        return self._c._call(R.tasks())

    def get_status(
        self,
        *,
        queue: str | None = None,
        namespace: str | None = None,
        task: str | None = None,
        from_: datetime | str | None = None,
        to: datetime | str | None = None,
    ) -> models.StatusOverview:
        """``GET /status``: counts, live leases and dead letters of the selected queues."""
        return self._c._call(R.status(queue, namespace, task, from_, to))

    def list_queue_status(
        self,
        *,
        queue: str | None = None,
        namespace: str | None = None,
        task: str | None = None,
        limit: int | None = None,
        offset: int | None = None,
    ) -> models.QueueStatusList:
        return self._c._call(R.list_queue_status(queue, namespace, task, limit, offset))

    def get_queue_status(self, queue: str, include_partitions: bool = False) -> models.QueueStatus:
        """Live state of one queue (404 ``NotFoundError`` when unknown)."""
        return self._c._call(R.queue_status(queue, include_partitions))

    def get_buffer_status(self) -> models.BufferStatus:
        """The broker's disk spool: pushes waiting to drain."""
        return self._c._call(R.buffer_status())

    def get_metrics(self) -> models.Metrics:
        return self._c._call(R.metrics())

    def get_maintenance_mode(self) -> models.Maintenance:
        """Push maintenance: while on, every push is spooled (``buffered``) until turned off."""
        return self._c._call(R.maintenance("push"))

    def set_maintenance_mode(self, enabled: bool) -> models.Maintenance:
        return self._c._call(R.set_maintenance("push", enabled))

    def get_pop_maintenance_mode(self) -> models.Maintenance:
        """Pop maintenance: while on, every pop answers empty at once."""
        return self._c._call(R.maintenance("pop"))

    def set_pop_maintenance_mode(self, enabled: bool) -> models.Maintenance:
        return self._c._call(R.set_maintenance("pop", enabled))

    def seek_consumer_group(
        self,
        group: str,
        queue: str,
        *,
        to_end: bool = False,
        timestamp: datetime | str | None = None,
    ) -> models.SeekQueueResult:
        """Move one group's cursor (releases its live lease, resets the retry budget)."""
        return self._c._call(R.seek(group, queue, to_end, timestamp))

    def seek_consumer_group_partition(
        self,
        group: str,
        queue: str,
        partition: str,
        *,
        to_end: bool = False,
        timestamp: datetime | str | None = None,
    ) -> models.SeekPartitionResult:
        return self._c._call(R.seek_partition(group, queue, partition, to_end, timestamp))

    def list_consumer_groups(self) -> list[models.ConsumerGroupSummary]:
        return self._c._call(R.list_groups())

    def get_consumer_group(self, group: str) -> models.ConsumerGroupDetail:
        return self._c._call(R.get_group(group))

    def lagging_consumer_groups(
        self, min_lag_seconds: int = 60
    ) -> list[models.LaggingConsumerGroup]:
        return self._c._call(R.lagging_groups(min_lag_seconds))

    def delete_consumer_group(
        self, group: str, delete_metadata: bool = True
    ) -> models.ConsumerGroupDeleteResult:
        return self._c._call(R.delete_group(group, None, delete_metadata))

    def delete_consumer_group_for_queue(
        self, group: str, queue: str, delete_metadata: bool = True
    ) -> models.ConsumerGroupDeleteResult:
        return self._c._call(R.delete_group(group, queue, delete_metadata))

    def update_subscription(
        self, group: str, timestamp: datetime | str
    ) -> models.SubscriptionUpdateResult:
        return self._c._call(R.update_subscription(group, timestamp))

    def list_dlq(
        self,
        *,
        queue: str | None = None,
        consumer_group: str | None = None,
        partition: str | None = None,
        limit: int | None = None,
        offset: int | None = None,
    ) -> models.DlqList:
        return self._c._call(R.list_dlq(queue, consumer_group, partition, limit, offset))

    def purge_dlq(self, queue: str, consumer_group: str | None = None) -> models.DlqPurgeResult:
        return self._c._call(R.purge_dlq(queue, consumer_group))

    def replay_dlq(
        self, dlq_id: str, *, queue: str | None = None, partition: str | None = None
    ) -> models.DlqReplayResult:
        return self._c._call(R.replay_dlq(dlq_id, queue, partition))

    def list_messages(
        self,
        *,
        queue: str | None = None,
        partition: str | None = None,
        namespace: str | None = None,
        task: str | None = None,
        status: str | None = None,
        limit: int | None = None,
        offset: int | None = None,
    ) -> models.MessageList:
        return self._c._call(
            R.list_messages(queue, partition, namespace, task, status, limit, offset)
        )

    def get_message(self, partition_id: str, transaction_id: str) -> models.MessageDetail:
        return self._c._call(R.get_message(partition_id, transaction_id))

    def delete_message(self, partition_id: str, transaction_id: str) -> models.DeleteMessageResult:
        return self._c._call(R.delete_message(partition_id, transaction_id))

    def retry_message(self, partition_id: str, transaction_id: str) -> models.DlqReplayResult:
        return self._c._call(R.retry_message(partition_id, transaction_id))


class AsyncAdmin:
    """Asyncio twin of :class:`Admin`."""

    def __init__(self, client: AsyncLanes) -> None:
        self._c = client

    async def configure_queue(
        self,
        queue: str,
        options: models.QueueOptions | Mapping[str, Any] | None = None,
        mode: Literal["merge", "replace"] | None = None,
        *,
        namespace: str | None = None,
        task: str | None = None,
    ) -> models.ConfigureResult:
        return await self._c._call(R.configure(queue, options, mode, namespace, task))

    async def get_queue(self, queue: str) -> models.QueueDetail:
        return await self._c._call(R.get_queue(queue))

    async def list_queues(
        self,
        *,
        namespace: str | None = None,
        task: str | None = None,
        limit: int | None = None,
        offset: int | None = None,
    ) -> models.QueueList:
        return await self._c._call(R.list_queues(namespace, task, limit, offset))

    async def delete_queue(self, queue: str) -> models.DeleteQueueResult:
        return await self._c._call(R.delete_queue(queue))

    async def get_queue_depth(self, queue: str, group: str | None = None) -> models.QueueDepth:
        return await self._c._call(R.queue_depth(queue, group))

    async def get_overview(self) -> models.Overview:
        return await self._c._call(R.overview())

    async def get_namespaces(self) -> models.NamespaceList:
        return await self._c._call(R.namespaces())

    async def get_tasks(self) -> models.TaskList:
        return await self._c._call(R.tasks())

    async def get_status(
        self,
        *,
        queue: str | None = None,
        namespace: str | None = None,
        task: str | None = None,
        from_: datetime | str | None = None,
        to: datetime | str | None = None,
    ) -> models.StatusOverview:
        """``GET /status``: counts, live leases and dead letters of the selected queues."""
        return await self._c._call(R.status(queue, namespace, task, from_, to))

    async def list_queue_status(
        self,
        *,
        queue: str | None = None,
        namespace: str | None = None,
        task: str | None = None,
        limit: int | None = None,
        offset: int | None = None,
    ) -> models.QueueStatusList:
        return await self._c._call(R.list_queue_status(queue, namespace, task, limit, offset))

    async def get_queue_status(
        self, queue: str, include_partitions: bool = False
    ) -> models.QueueStatus:
        """Live state of one queue (404 ``NotFoundError`` when unknown)."""
        return await self._c._call(R.queue_status(queue, include_partitions))

    async def get_buffer_status(self) -> models.BufferStatus:
        """The broker's disk spool: pushes waiting to drain."""
        return await self._c._call(R.buffer_status())

    async def get_metrics(self) -> models.Metrics:
        return await self._c._call(R.metrics())

    async def get_maintenance_mode(self) -> models.Maintenance:
        """Push maintenance: while on, every push is spooled (``buffered``) until turned off."""
        return await self._c._call(R.maintenance("push"))

    async def set_maintenance_mode(self, enabled: bool) -> models.Maintenance:
        return await self._c._call(R.set_maintenance("push", enabled))

    async def get_pop_maintenance_mode(self) -> models.Maintenance:
        """Pop maintenance: while on, every pop answers empty at once."""
        return await self._c._call(R.maintenance("pop"))

    async def set_pop_maintenance_mode(self, enabled: bool) -> models.Maintenance:
        return await self._c._call(R.set_maintenance("pop", enabled))

    async def seek_consumer_group(
        self,
        group: str,
        queue: str,
        *,
        to_end: bool = False,
        timestamp: datetime | str | None = None,
    ) -> models.SeekQueueResult:
        return await self._c._call(R.seek(group, queue, to_end, timestamp))

    async def seek_consumer_group_partition(
        self,
        group: str,
        queue: str,
        partition: str,
        *,
        to_end: bool = False,
        timestamp: datetime | str | None = None,
    ) -> models.SeekPartitionResult:
        return await self._c._call(R.seek_partition(group, queue, partition, to_end, timestamp))

    async def list_consumer_groups(self) -> list[models.ConsumerGroupSummary]:
        return await self._c._call(R.list_groups())

    async def get_consumer_group(self, group: str) -> models.ConsumerGroupDetail:
        return await self._c._call(R.get_group(group))

    async def lagging_consumer_groups(
        self, min_lag_seconds: int = 60
    ) -> list[models.LaggingConsumerGroup]:
        return await self._c._call(R.lagging_groups(min_lag_seconds))

    async def delete_consumer_group(
        self, group: str, delete_metadata: bool = True
    ) -> models.ConsumerGroupDeleteResult:
        return await self._c._call(R.delete_group(group, None, delete_metadata))

    async def delete_consumer_group_for_queue(
        self, group: str, queue: str, delete_metadata: bool = True
    ) -> models.ConsumerGroupDeleteResult:
        return await self._c._call(R.delete_group(group, queue, delete_metadata))

    async def update_subscription(
        self, group: str, timestamp: datetime | str
    ) -> models.SubscriptionUpdateResult:
        return await self._c._call(R.update_subscription(group, timestamp))

    async def list_dlq(
        self,
        *,
        queue: str | None = None,
        consumer_group: str | None = None,
        partition: str | None = None,
        limit: int | None = None,
        offset: int | None = None,
    ) -> models.DlqList:
        return await self._c._call(R.list_dlq(queue, consumer_group, partition, limit, offset))

    async def purge_dlq(
        self, queue: str, consumer_group: str | None = None
    ) -> models.DlqPurgeResult:
        return await self._c._call(R.purge_dlq(queue, consumer_group))

    async def replay_dlq(
        self, dlq_id: str, *, queue: str | None = None, partition: str | None = None
    ) -> models.DlqReplayResult:
        return await self._c._call(R.replay_dlq(dlq_id, queue, partition))

    async def list_messages(
        self,
        *,
        queue: str | None = None,
        partition: str | None = None,
        namespace: str | None = None,
        task: str | None = None,
        status: str | None = None,
        limit: int | None = None,
        offset: int | None = None,
    ) -> models.MessageList:
        return await self._c._call(
            R.list_messages(queue, partition, namespace, task, status, limit, offset)
        )

    async def get_message(self, partition_id: str, transaction_id: str) -> models.MessageDetail:
        return await self._c._call(R.get_message(partition_id, transaction_id))

    async def delete_message(
        self, partition_id: str, transaction_id: str
    ) -> models.DeleteMessageResult:
        return await self._c._call(R.delete_message(partition_id, transaction_id))

    async def retry_message(self, partition_id: str, transaction_id: str) -> models.DlqReplayResult:
        return await self._c._call(R.retry_message(partition_id, transaction_id))


class KV:
    """``client.kv(ns)``: transactional key/value state outside a bundle.

    Business outcomes are results, not errors: a lost condition or bound is
    ``applied=False`` with a ``reason`` (``exists``, ``version``, ``absent``, ``limit``, ``type``).
    """

    def __init__(self, client: Lanes, ns: str) -> None:
        self._c, self.ns = client, ns

    def get(self, key: str) -> models.KvResult:
        return self._c._call(R.kv_get(self.ns, key))

    def get_many(self, keys: Sequence[str]) -> models.KvResult:
        """Read several keys in one call: ``rows`` for those that exist, ``missing`` the rest."""
        return self._c._call(R.kv_one(R.kv_op("getMany", self.ns, keys=keys)))

    def get_prefix(
        self,
        prefix: str,
        *,
        after: str | None = None,
        limit: int | None = None,
        keys_only: bool | None = None,
    ) -> models.KvResult:
        """One page of the keys starting with ``prefix`` (non-empty), in key order. When
        ``truncated``, pass ``next_after`` as ``after`` for the next page."""
        op = R.kv_op(
            "getPrefix", self.ns, prefix=prefix, after=after, limit=limit, keys_only=keys_only
        )
        return self._c._call(R.kv_one(op))

    def put(
        self, key: str, value: Any, *, ttl_seconds: int | None = None, expect: int | None = None
    ) -> models.KvResult:
        """Write ``value`` (no ``ttl_seconds`` = forever). ``expect=0``: the key must not exist;
        ``expect=N``: its version must be N (else ``applied=False``)."""
        return self._c._call(R.kv_put(self.ns, key, value, ttl_seconds, expect))

    def put_if_absent(
        self, key: str, value: Any, *, ttl_seconds: int | None = None
    ) -> models.KvResult:
        """Write ``value`` only if the key does not exist (else ``applied=False``,
        ``reason="exists"`` with the current value)."""
        op = R.kv_op("putIfAbsent", self.ns, key, value=value, ttl_seconds=ttl_seconds)
        return self._c._call(R.kv_one(op))

    def incr(
        self,
        key: str,
        delta: int = 1,
        *,
        ttl_seconds: int | None = None,
        min: int | None = None,
        max: int | None = None,
    ) -> models.KvResult:
        """Add ``delta`` to a numeric key atomically (a missing key starts at 0 and gets
        ``ttl_seconds``, None = forever). Crossing ``min``/``max`` (inclusive) is not applied:
        ``applied=False, reason="limit"``."""
        op = R.kv_op("incr", self.ns, key, delta=delta, ttl_seconds=ttl_seconds, min=min, max=max)
        return self._c._call(R.kv_one(op))

    def delete(self, key: str, *, expect: int | None = None) -> models.KvResult:
        """Delete the key; with ``expect=N`` (>= 1) only if its version is N (else
        ``applied=False``, ``reason="version"`` or ``"absent"``)."""
        return self._c._call(R.kv_delete(self.ns, key, expect))

    def batch(self, ops: Sequence[Mapping[str, Any]]) -> list[models.KvResult]:
        """Several ops (built with :func:`lanes.kv_op`) in one call."""
        return self._c._call(R.kv_batch(ops))

    def list(
        self,
        *,
        prefix: str | None = None,
        after: str | None = None,
        limit: int | None = None,
        keys_only: bool | None = None,
        include_expired: bool | None = None,
    ) -> models.KvListResult:
        """A page of the namespace's keys in key order (the console route; the prefix may be
        empty and expired rows can be included). Continue with ``after=page.next_after``."""
        return self._c._call(R.kv_list(self.ns, prefix, after, limit, keys_only, include_expired))


class AsyncKV:
    """``client.kv(ns)`` on :class:`AsyncLanes`; the same methods as :class:`KV`, awaited."""

    def __init__(self, client: AsyncLanes, ns: str) -> None:
        self._c, self.ns = client, ns

    async def get(self, key: str) -> models.KvResult:
        return await self._c._call(R.kv_get(self.ns, key))

    async def get_many(self, keys: Sequence[str]) -> models.KvResult:
        return await self._c._call(R.kv_one(R.kv_op("getMany", self.ns, keys=keys)))

    async def get_prefix(
        self,
        prefix: str,
        *,
        after: str | None = None,
        limit: int | None = None,
        keys_only: bool | None = None,
    ) -> models.KvResult:
        op = R.kv_op(
            "getPrefix", self.ns, prefix=prefix, after=after, limit=limit, keys_only=keys_only
        )
        return await self._c._call(R.kv_one(op))

    async def put(
        self, key: str, value: Any, *, ttl_seconds: int | None = None, expect: int | None = None
    ) -> models.KvResult:
        return await self._c._call(R.kv_put(self.ns, key, value, ttl_seconds, expect))

    async def put_if_absent(
        self, key: str, value: Any, *, ttl_seconds: int | None = None
    ) -> models.KvResult:
        op = R.kv_op("putIfAbsent", self.ns, key, value=value, ttl_seconds=ttl_seconds)
        return await self._c._call(R.kv_one(op))

    async def incr(
        self,
        key: str,
        delta: int = 1,
        *,
        ttl_seconds: int | None = None,
        min: int | None = None,
        max: int | None = None,
    ) -> models.KvResult:
        op = R.kv_op("incr", self.ns, key, delta=delta, ttl_seconds=ttl_seconds, min=min, max=max)
        return await self._c._call(R.kv_one(op))

    async def delete(self, key: str, *, expect: int | None = None) -> models.KvResult:
        return await self._c._call(R.kv_delete(self.ns, key, expect))

    async def batch(self, ops: Sequence[Mapping[str, Any]]) -> list[models.KvResult]:
        return await self._c._call(R.kv_batch(ops))

    async def list(
        self,
        *,
        prefix: str | None = None,
        after: str | None = None,
        limit: int | None = None,
        keys_only: bool | None = None,
        include_expired: bool | None = None,
    ) -> models.KvListResult:
        return await self._c._call(
            R.kv_list(self.ns, prefix, after, limit, keys_only, include_expired)
        )


def _timer_write(
    op: Literal["schedule", "reschedule"],
    queue: str,
    key: str,
    delay_millis: int,
    payload: Any,
    partition: str | None,
    transaction_id: str | None,
) -> Req[list[models.TimerResult]]:
    """The request of a schedule or reschedule of one timer, shared by both clients."""
    return R.timers_batch(
        [
            R.timer_op(
                op,
                queue,
                key,
                delay_millis=delay_millis,
                payload=payload,
                partition=partition,
                txn=transaction_id,
            )
        ]
    )


class Timers:
    """``client.timers(queue)``: schedule a message for later delivery.

    ``partition`` is the destination partition (default ``Default``); ``transaction_id`` is the
    pushed message's id (minted as a UUIDv7 when absent; a fixed one makes firing idempotent).
    """

    def __init__(self, client: Lanes, queue: str) -> None:
        self._c, self.queue = client, queue

    def schedule(
        self,
        key: str,
        *,
        delay_millis: int,
        payload: Any = None,
        partition: str | None = None,
        transaction_id: str | None = None,
    ) -> models.TimerResult:
        """Create or replace timer ``key``."""
        req = _timer_write(
            "schedule", self.queue, key, delay_millis, payload, partition, transaction_id
        )
        return self._c._call(req)[0]

    def reschedule(
        self,
        key: str,
        *,
        delay_millis: int,
        payload: Any = None,
        partition: str | None = None,
        transaction_id: str | None = None,
    ) -> models.TimerResult:
        """Replace timer ``key`` (or create it) and reset its attempts."""
        req = _timer_write(
            "reschedule", self.queue, key, delay_millis, payload, partition, transaction_id
        )
        return self._c._call(req)[0]

    def cancel(self, key: str) -> models.TimerResult:
        return self._c._call(R.timers_batch([R.timer_op("cancel", self.queue, key)]))[0]

    def get(self, key: str) -> models.Timer:
        return self._c._call(R.timer_get(self.queue, key))

    def list(
        self, *, limit: int | None = None, after: str | None = None, prefix: str | None = None
    ) -> models.TimerList:
        """A page of the queue's timers in key order, only keys starting with ``prefix`` if
        given. Continue with ``after=page.next_after``."""
        return self._c._call(R.timer_list(self.queue, limit, after, prefix))


class AsyncTimers:
    """``client.timers(queue)`` on :class:`AsyncLanes`; the same methods as :class:`Timers`."""

    def __init__(self, client: AsyncLanes, queue: str) -> None:
        self._c, self.queue = client, queue

    async def schedule(
        self,
        key: str,
        *,
        delay_millis: int,
        payload: Any = None,
        partition: str | None = None,
        transaction_id: str | None = None,
    ) -> models.TimerResult:
        req = _timer_write(
            "schedule", self.queue, key, delay_millis, payload, partition, transaction_id
        )
        return (await self._c._call(req))[0]

    async def reschedule(
        self,
        key: str,
        *,
        delay_millis: int,
        payload: Any = None,
        partition: str | None = None,
        transaction_id: str | None = None,
    ) -> models.TimerResult:
        req = _timer_write(
            "reschedule", self.queue, key, delay_millis, payload, partition, transaction_id
        )
        return (await self._c._call(req))[0]

    async def cancel(self, key: str) -> models.TimerResult:
        return (await self._c._call(R.timers_batch([R.timer_op("cancel", self.queue, key)])))[0]

    async def get(self, key: str) -> models.Timer:
        return await self._c._call(R.timer_get(self.queue, key))

    async def list(
        self, *, limit: int | None = None, after: str | None = None, prefix: str | None = None
    ) -> models.TimerList:
        return await self._c._call(R.timer_list(self.queue, limit, after, prefix))


# ---------------------------------------------------------------------------------------------
# Clients


class Lanes:
    """Blocking Lanes client. Thread-safe; builders from :meth:`queue` are immutable values.

    ``pop_autopilot`` defaults to the environment (``LANES_SDK_POP_AUTOPILOT=off`` disables it),
    read once here. The library installs no signal handlers; call :meth:`close` (or use ``with``)
    to stop consumers started from this client and flush push buffers.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        urls: Sequence[str] | None = None,
        bearer_token: str | None = None,
        timeout: float = 30.0,
        retry_attempts: int = 2,
        retry_delay: float = 0.5,
        max_retry_delay: float = 8.0,
        max_429_attempts: int = 10,
        max_retry_after: float = 60.0,
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
            max_429_attempts, max_retry_after, logger, headers, pop_autopilot, _clock, _rng,
        )  # fmt: skip
        self._t = SyncTransport(self._cfg, http_client, _sleep)
        self._consumers: set[Consumer] = set()
        self._buffers: dict[tuple[str, str | None], PushBuffer] = {}
        self._lock = threading.Lock()
        self._closed = False  # close() began: no new buffers or buffer pushes
        self._gone = False  # close() ended: the HTTP pool is closed
        self.admin = Admin(self)

    @property
    def pop_autopilot(self) -> bool:
        """The client-wide autopilot setting resolved at construction."""
        return self._cfg.pop_autopilot

    def _call(self, req: Req[T]) -> T:
        if self._gone:
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
        return req.parse(r)

    def queue(self, name: str | None = None) -> Queue:
        return Queue(self, P.QueueSpec(queue=name))

    def health(self) -> models.Health:
        return self._call(R.health())

    def transaction(self) -> Transaction:
        return Transaction(self)

    def kv(self, ns: str) -> KV:
        return KV(self, ns)

    def kv_namespaces(self) -> models.KvNamespaceList:
        """The KV namespaces with their live key counts."""
        return self._call(R.kv_namespaces())

    def timers(self, queue: str) -> Timers:
        return Timers(self, queue)

    def _ack_entries(self, entries: list[tuple[str, P.AckEntry]]) -> list[AckResult]:
        parts = []
        for path, body, idx in P.ack_requests(entries):
            parts.append(
                (
                    idx,
                    self._call(
                        Req("POST", path, lambda r: P.parse_ack_results(r.json()), body=body)
                    ),
                )
            )
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

    def _renew_one(self, lease_id: str, seconds: int) -> RenewResult:
        return self._call(R.renew(lease_id, seconds))

    def renew(
        self, messages_or_lease_ids: Message | str | Sequence[Message | str], *, seconds: int = 60
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
            key = (queue, partition)
            b = self._buffers.get(key)
            if b is None:
                q = self.queue(queue)
                if partition:
                    q = q.partition(partition)
                b = PushBuffer(
                    q.push, opts, on_error, self._cfg.logger, f"{queue}/{partition or 'Default'}"
                )
                self._buffers[key] = b
            return b

    def flush_all(self, timeout: float | None = 30.0) -> None:
        """Flush every buffer at once; :class:`UnsentError` names the total left at ``timeout``."""
        flush_every(list(self._buffers.values()), timeout)

    def close(self, timeout: float | None = 30.0) -> None:
        """Soft-stop consumers started here, flush buffers (all at once, raising
        :class:`UnsentError` with the count left at ``timeout``), close the HTTP client.
        Afterwards buffers and every call raise :class:`ClientClosedError`. Idempotent."""
        if self._closed:
            return
        with self._lock:
            self._closed = True
        try:
            for c in list(self._consumers):
                c.stop(timeout)
            buffers = list(self._buffers.values())
            for b in buffers:
                b.refuse()
            try:
                flush_every(buffers, timeout)
            finally:
                for b in buffers:
                    b.stop()
        finally:
            self._t.close()
            self._gone = True

    def __enter__(self) -> Lanes:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class AsyncLanes:
    """Asyncio Lanes client (same options as :class:`Lanes`; ``http_client`` is an
    ``httpx.AsyncClient``). Use ``async with`` or ``await client.aclose()``."""

    def __init__(
        self,
        url: str | None = None,
        *,
        urls: Sequence[str] | None = None,
        bearer_token: str | None = None,
        timeout: float = 30.0,
        retry_attempts: int = 2,
        retry_delay: float = 0.5,
        max_retry_delay: float = 8.0,
        max_429_attempts: int = 10,
        max_retry_after: float = 60.0,
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
            max_429_attempts, max_retry_after, logger, headers, pop_autopilot, _clock, _rng,
        )  # fmt: skip
        self._t = AsyncTransport(self._cfg, http_client, _sleep)
        self._consumers: set[AsyncConsumer] = set()
        self._buffers: dict[tuple[str, str | None], AsyncPushBuffer] = {}
        self._closed = False  # close() began: no new buffers or buffer pushes
        self._gone = False  # close() ended: the HTTP pool is closed
        self.admin = AsyncAdmin(self)

    @property
    def pop_autopilot(self) -> bool:
        return self._cfg.pop_autopilot

    async def _call(self, req: Req[T]) -> T:
        if self._gone:
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
        return req.parse(r)

    def queue(self, name: str | None = None) -> AsyncQueue:
        return AsyncQueue(self, P.QueueSpec(queue=name))

    async def health(self) -> models.Health:
        return await self._call(R.health())

    def transaction(self) -> AsyncTransaction:
        return AsyncTransaction(self)

    def kv(self, ns: str) -> AsyncKV:
        return AsyncKV(self, ns)

    async def kv_namespaces(self) -> models.KvNamespaceList:
        """The KV namespaces with their live key counts."""
        return await self._call(R.kv_namespaces())

    def timers(self, queue: str) -> AsyncTimers:
        return AsyncTimers(self, queue)

    async def _ack_entries(self, entries: list[tuple[str, P.AckEntry]]) -> list[AckResult]:
        parts = []
        for path, body, idx in P.ack_requests(entries):
            req: Req[list[AckResult]] = Req(
                "POST", path, lambda r: P.parse_ack_results(r.json()), body=body
            )
            parts.append((idx, await self._call(req)))
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

    async def _renew_one(self, lease_id: str, seconds: int) -> RenewResult:
        return await self._call(R.renew(lease_id, seconds))

    async def renew(
        self, messages_or_lease_ids: Message | str | Sequence[Message | str], *, seconds: int = 60
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
        key = (queue, partition)
        b = self._buffers.get(key)
        if b is None:
            q = self.queue(queue)
            if partition:
                q = q.partition(partition)
            b = AsyncPushBuffer(
                q.push, opts, on_error, self._cfg.logger, f"{queue}/{partition or 'Default'}"
            )
            self._buffers[key] = b
        return b

    async def flush_all(self, timeout: float | None = 30.0) -> None:
        """As :meth:`Lanes.flush_all`."""
        await aflush_every(list(self._buffers.values()), timeout)

    async def aclose(self, timeout: float | None = 30.0) -> None:
        """As :meth:`Lanes.close`."""
        if self._closed:
            return
        self._closed = True
        try:
            for c in list(self._consumers):
                await c.stop(timeout)
            buffers = list(self._buffers.values())
            for b in buffers:
                await b.refuse()
            try:
                await aflush_every(buffers, timeout)
            finally:
                for b in buffers:
                    await b.stop()
        finally:
            await self._t.aclose()
            self._gone = True

    async def __aenter__(self) -> AsyncLanes:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
