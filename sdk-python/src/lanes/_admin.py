"""``client.admin``: queues, consumer groups, DLQ and messages, for ``Lanes`` and ``AsyncLanes``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from lanes import _requests as R
from lanes._generated import models

if TYPE_CHECKING:
    from lanes._client import AsyncLanes, Lanes

T = TypeVar("T")


def whole_listing(client: Lanes, paged: R.Paged[T]) -> T:
    """Every page of a listing the broker pages, from the first, folded into one."""
    whole: T | None = None
    at = R.PagePlace()
    while True:
        req = paged.page(at)
        page = client._call(req)
        whole = paged.merge(whole, page.body)
        if page.next is None:
            return whole
        R.check_next_page(req.path, at, page.next)
        at = page.next


async def async_whole_listing(client: AsyncLanes, paged: R.Paged[T]) -> T:
    """Asyncio twin of :func:`whole_listing`."""
    whole: T | None = None
    at = R.PagePlace()
    while True:
        req = paged.page(at)
        page = await client._call(req)
        whole = paged.merge(whole, page.body)
        if page.next is None:
            return whole
        R.check_next_page(req.path, at, page.next)
        at = page.next


def walk(client: Lanes, w: R.Walk[T]) -> Iterator[T]:
    """The rows of a listing, page after page from ``w.start``: leaving the loop asks for no
    further page; a page's error is raised once and ends the walk."""
    at = w.start
    while True:
        req = w.page(at)
        page = client._call(req)
        yield from page.body
        if page.next is None:
            return
        R.check_next_page(req.path, at, page.next)
        at = page.next


async def async_walk(client: AsyncLanes, w: R.Walk[T]) -> AsyncIterator[T]:
    """Asyncio twin of :func:`walk`."""
    at = w.start
    while True:
        req = w.page(at)
        page = await client._call(req)
        for row in page.body:
            yield row
        if page.next is None:
            return
        R.check_next_page(req.path, at, page.next)
        at = page.next


class Admin:
    """``client.admin``: queues, consumer groups, DLQ, messages (generated models)."""

    def __init__(self, client: Lanes) -> None:
        self._c = client

    def _whole(self, paged: R.Paged[T]) -> T:
        return whole_listing(self._c, paged)

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
        return self._whole(R.get_queue(queue))

    def list_queues(
        self,
        *,
        namespace: str | None = None,
        task: str | None = None,
        limit: int | None = None,
        offset: int | None = None,
        after: str | None = None,
    ) -> models.QueueList:
        """One page of queues by name; page with ``after`` (the page's ``next_after``), which
        queues created or deleted between two pages do not shift, as they shift an ``offset``."""
        return self._c._call(R.list_queues(namespace, task, limit, offset, after))

    def all_queues(
        self,
        *,
        namespace: str | None = None,
        task: str | None = None,
        limit: int | None = None,
        offset: int | None = None,
        after: str | None = None,
    ) -> Iterator[models.QueueSummary]:
        """Every queue the filters select, by name, page by page (``limit`` rows a page, default
        100): ``for q in client.admin.all_queues(namespace="billing")``. Queues created or
        deleted meanwhile move no queue of the rest; leaving the loop asks for no further page;
        a page's error is raised once and ends the walk."""
        return walk(self._c, R.walk_queues(namespace, task, limit, offset, after))

    def delete_queue(self, queue: str) -> models.DeleteQueueResult:
        return self._c._call(R.delete_queue(queue))

    def get_queue_depth(self, queue: str, group: str | None = None) -> models.QueueDepth:
        return self._whole(R.queue_depth(queue, group))

    def get_overview(self) -> models.Overview:
        return self._c._call(R.overview())

    def get_namespaces(self) -> models.NamespaceList:
        return self._whole(R.namespaces())

    def get_tasks(self) -> models.TaskList:
        return self._whole(R.tasks())

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
        after: str | None = None,
    ) -> models.QueueStatusList:
        """One page of queues with message counters, paged as ``list_queues``."""
        return self._c._call(R.list_queue_status(queue, namespace, task, limit, offset, after))

    def all_queue_status(
        self,
        *,
        queue: str | None = None,
        namespace: str | None = None,
        task: str | None = None,
        limit: int | None = None,
        offset: int | None = None,
        after: str | None = None,
    ) -> Iterator[models.QueueSummary]:
        """Every queue the filters select with its message counters, page by page as
        ``all_queues``."""
        return walk(self._c, R.walk_queue_status(queue, namespace, task, limit, offset, after))

    def get_queue_status(self, queue: str, include_partitions: bool = False) -> models.QueueStatus:
        """Live state of one queue (404 ``NotFoundError`` when unknown)."""
        return self._whole(R.queue_status(queue, include_partitions))

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
        return self._whole(R.list_groups())

    def get_consumer_group(self, group: str) -> dict[str, models.ConsumerGroupQueue]:
        """The group's cursors keyed by queue name (a dict, as Go's map and TS's Record)."""
        return self._whole(R.get_group(group)).root

    def lagging_consumer_groups(
        self, min_lag_seconds: int = 60
    ) -> list[models.LaggingConsumerGroup]:
        return self._whole(R.lagging_groups(min_lag_seconds))

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
        from_: datetime | str | None = None,
        to: datetime | str | None = None,
        limit: int | None = None,
        offset: int | None = None,
        after: str | None = None,
    ) -> models.DlqList:
        """``GET /dlq``: dead letters, newest first; ``from_``/``to`` bound when they failed.

        Page with ``after=page.next_after`` (not with ``offset``): dead letters replayed or
        filed between two pages move an offset, not the key.
        """
        return self._c._call(
            R.list_dlq(queue, consumer_group, partition, from_, to, limit, offset, after)
        )

    def all_dlq(
        self,
        *,
        queue: str | None = None,
        consumer_group: str | None = None,
        partition: str | None = None,
        from_: datetime | str | None = None,
        to: datetime | str | None = None,
        limit: int | None = None,
        offset: int | None = None,
        after: str | None = None,
    ) -> Iterator[models.DlqMessage]:
        """Every dead letter the filters select, newest failure first, page by page as
        ``all_queues``: dead letters replayed, deleted or filed meanwhile move no row of the
        rest."""
        return walk(
            self._c,
            R.walk_dlq(queue, consumer_group, partition, from_, to, limit, offset, after),
        )

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
        from_: datetime | str | None = None,
        to: datetime | str | None = None,
        limit: int | None = None,
        offset: int | None = None,
        after: str | None = None,
    ) -> models.MessageList:
        """``GET /messages``: ``from_`` (default an hour ago) and ``to`` bound ``createdAt``.

        Page with ``after=page.next_after`` (not with ``offset``): messages pushed or consumed
        between two pages move an offset, not the key.
        """
        return self._c._call(
            R.list_messages(
                queue, partition, namespace, task, status, from_, to, limit, offset, after
            )
        )

    def all_messages(
        self,
        *,
        queue: str | None = None,
        partition: str | None = None,
        namespace: str | None = None,
        task: str | None = None,
        status: str | None = None,
        from_: datetime | str | None = None,
        to: datetime | str | None = None,
        limit: int | None = None,
        offset: int | None = None,
        after: str | None = None,
    ) -> Iterator[models.MessageListItem]:
        """Every message the filters select, newest first, page by page as ``all_dlq``; a page
        the broker's answer byte budget cut short is continued after its last message, and
        messages pushed meanwhile sort before the walk's place and are not listed."""
        return walk(
            self._c,
            R.walk_messages(
                queue, partition, namespace, task, status, from_, to, limit, offset, after
            ),
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

    async def _whole(self, paged: R.Paged[T]) -> T:
        return await async_whole_listing(self._c, paged)

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
        return await self._whole(R.get_queue(queue))

    async def list_queues(
        self,
        *,
        namespace: str | None = None,
        task: str | None = None,
        limit: int | None = None,
        offset: int | None = None,
        after: str | None = None,
    ) -> models.QueueList:
        """One page of queues by name; page with ``after`` (the page's ``next_after``), which
        queues created or deleted between two pages do not shift, as they shift an ``offset``."""
        return await self._c._call(R.list_queues(namespace, task, limit, offset, after))

    def all_queues(
        self,
        *,
        namespace: str | None = None,
        task: str | None = None,
        limit: int | None = None,
        offset: int | None = None,
        after: str | None = None,
    ) -> AsyncIterator[models.QueueSummary]:
        """Every queue the filters select, by name, page by page (``limit`` rows a page, default
        100): ``async for q in client.admin.all_queues(namespace="billing")``. Queues created or
        deleted meanwhile move no queue of the rest; leaving the loop asks for no further page;
        a page's error is raised once and ends the walk."""
        return async_walk(self._c, R.walk_queues(namespace, task, limit, offset, after))

    async def delete_queue(self, queue: str) -> models.DeleteQueueResult:
        return await self._c._call(R.delete_queue(queue))

    async def get_queue_depth(self, queue: str, group: str | None = None) -> models.QueueDepth:
        return await self._whole(R.queue_depth(queue, group))

    async def get_overview(self) -> models.Overview:
        return await self._c._call(R.overview())

    async def get_namespaces(self) -> models.NamespaceList:
        return await self._whole(R.namespaces())

    async def get_tasks(self) -> models.TaskList:
        return await self._whole(R.tasks())

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
        after: str | None = None,
    ) -> models.QueueStatusList:
        """One page of queues with message counters, paged as ``list_queues``."""
        return await self._c._call(
            R.list_queue_status(queue, namespace, task, limit, offset, after)
        )

    def all_queue_status(
        self,
        *,
        queue: str | None = None,
        namespace: str | None = None,
        task: str | None = None,
        limit: int | None = None,
        offset: int | None = None,
        after: str | None = None,
    ) -> AsyncIterator[models.QueueSummary]:
        """Every queue the filters select with its message counters, page by page as
        ``all_queues``."""
        return async_walk(
            self._c, R.walk_queue_status(queue, namespace, task, limit, offset, after)
        )

    async def get_queue_status(
        self, queue: str, include_partitions: bool = False
    ) -> models.QueueStatus:
        """Live state of one queue (404 ``NotFoundError`` when unknown)."""
        return await self._whole(R.queue_status(queue, include_partitions))

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
        return await self._whole(R.list_groups())

    async def get_consumer_group(self, group: str) -> dict[str, models.ConsumerGroupQueue]:
        """The group's cursors keyed by queue name (a dict, as Go's map and TS's Record)."""
        return (await self._whole(R.get_group(group))).root

    async def lagging_consumer_groups(
        self, min_lag_seconds: int = 60
    ) -> list[models.LaggingConsumerGroup]:
        return await self._whole(R.lagging_groups(min_lag_seconds))

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
        from_: datetime | str | None = None,
        to: datetime | str | None = None,
        limit: int | None = None,
        offset: int | None = None,
        after: str | None = None,
    ) -> models.DlqList:
        """``GET /dlq``: dead letters, newest first; ``from_``/``to`` bound when they failed.

        Page with ``after=page.next_after`` (not with ``offset``): dead letters replayed or
        filed between two pages move an offset, not the key.
        """
        return await self._c._call(
            R.list_dlq(queue, consumer_group, partition, from_, to, limit, offset, after)
        )

    def all_dlq(
        self,
        *,
        queue: str | None = None,
        consumer_group: str | None = None,
        partition: str | None = None,
        from_: datetime | str | None = None,
        to: datetime | str | None = None,
        limit: int | None = None,
        offset: int | None = None,
        after: str | None = None,
    ) -> AsyncIterator[models.DlqMessage]:
        """Every dead letter the filters select, newest failure first, page by page as
        ``all_queues``: dead letters replayed, deleted or filed meanwhile move no row of the
        rest."""
        return async_walk(
            self._c,
            R.walk_dlq(queue, consumer_group, partition, from_, to, limit, offset, after),
        )

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
        from_: datetime | str | None = None,
        to: datetime | str | None = None,
        limit: int | None = None,
        offset: int | None = None,
        after: str | None = None,
    ) -> models.MessageList:
        """``GET /messages``: ``from_`` (default an hour ago) and ``to`` bound ``createdAt``.

        Page with ``after=page.next_after`` (not with ``offset``): messages pushed or consumed
        between two pages move an offset, not the key.
        """
        return await self._c._call(
            R.list_messages(
                queue, partition, namespace, task, status, from_, to, limit, offset, after
            )
        )

    def all_messages(
        self,
        *,
        queue: str | None = None,
        partition: str | None = None,
        namespace: str | None = None,
        task: str | None = None,
        status: str | None = None,
        from_: datetime | str | None = None,
        to: datetime | str | None = None,
        limit: int | None = None,
        offset: int | None = None,
        after: str | None = None,
    ) -> AsyncIterator[models.MessageListItem]:
        """Every message the filters select, newest first, page by page as ``all_dlq``; a page
        the broker's answer byte budget cut short is continued after its last message, and
        messages pushed meanwhile sort before the walk's place and are not listed."""
        return async_walk(
            self._c,
            R.walk_messages(
                queue, partition, namespace, task, status, from_, to, limit, offset, after
            ),
        )

    async def get_message(self, partition_id: str, transaction_id: str) -> models.MessageDetail:
        return await self._c._call(R.get_message(partition_id, transaction_id))

    async def delete_message(
        self, partition_id: str, transaction_id: str
    ) -> models.DeleteMessageResult:
        return await self._c._call(R.delete_message(partition_id, transaction_id))

    async def retry_message(self, partition_id: str, transaction_id: str) -> models.DlqReplayResult:
        return await self._c._call(R.retry_message(partition_id, transaction_id))
