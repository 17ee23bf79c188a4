"""Request descriptors: each public call is one pure ``Req`` (method, path, query, body, how to
parse the 2xx). The sync and async clients only execute them, so both build identical wires."""

from __future__ import annotations

import base64
import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Generic, Literal, TypeVar
from urllib.parse import quote, urlencode

from pydantic import BaseModel

from lanes import _protocol as P
from lanes._exceptions import (
    InvalidNameError,
    InvalidValueError,
    LanesError,
    UnexpectedAnswerError,
)
from lanes._generated import models
from lanes._http import Response
from lanes._names import check_group
from lanes._retry import kv_ops_idempotent
from lanes._types import AckResult, PopResult, PushResult, RenewResult, TransactionResult

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Req(Generic[T]):
    method: str
    path: str
    parse: Callable[[Response], T]
    query: str | None = None
    body: Any = None
    long_poll: bool = False
    timeout: float | None = None
    # A write a repeat could apply twice: resent only when the broker certainly did not apply it.
    not_idempotent: bool = False

    def answer(self, r: Response) -> T:
        """The parsed 2xx answer; a body that is not JSON, or not the route's shape, raises
        :class:`UnexpectedAnswerError` (the request may have been applied)."""
        try:
            return self.parse(r)
        except ValueError as e:  # JSON, UTF-8 and pydantic validation errors are ValueErrors
            if isinstance(e, LanesError):
                raise
            raise UnexpectedAnswerError(
                f"lanes: {self.method} {self.path}: cannot decode the answer: {e}",
                status=r.status,
                body=r.content,
            ) from e


def _seg(s: str, field: str = "name") -> str:
    """One path segment. "." and ".." are refused before sending: httpx removes such a segment,
    and the rest of the path can name another route (DELETE /consumer-groups/g/queues/.. became
    DELETE /consumer-groups/g, deleting the group on every queue)."""
    if s in (".", ".."):
        raise InvalidNameError(
            field, s, 'must not be "." or ".." (URL clients drop such path segments)', "request"
        )
    return quote(s, safe="")


def _q(**kw: Any) -> str | None:
    pairs: list[tuple[str, str]] = []
    for k, v in kw.items():
        if v is None:
            continue
        if isinstance(v, bool):
            v = "true" if v else "false"
        elif isinstance(v, datetime):
            v = _iso(v)
        pairs.append((k, str(v)))
    return urlencode(pairs) or None


def _iso(t: datetime) -> str:
    """RFC 3339 in UTC (a naive datetime is taken as UTC). Converting matters: Python writes an
    offset with seconds (``+00:00:45``), which RFC 3339 has no form for."""
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return t.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def _model(cls: type[M]) -> Callable[[Response], M]:
    def parse(r: Response) -> M:
        return cls.model_validate(r.json())

    return parse


def _list(cls: type[M]) -> Callable[[Response], list[M]]:
    def parse(r: Response) -> list[M]:
        body = r.json()
        return [cls.model_validate(x) for x in (body if isinstance(body, list) else [])]

    return parse


def _dump(m: BaseModel | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(m, BaseModel):
        return m.model_dump(by_alias=True, exclude_none=True, mode="json")
    return dict(m)


# --- message plane ---------------------------------------------------------------------------


def health() -> Req[models.Health]:
    return Req("GET", "/health", _model(models.Health))


def push(queue: str, partition: str | None, items: Sequence[Any]) -> Req[list[PushResult]]:
    def parse(r: Response) -> list[PushResult]:
        return P.parse_push_results(r.json(), len(items))

    return Req("POST", "/api/v1/push", parse, body=P.push_body(queue, partition, items))


def pop(spec: P.QueueSpec, client_autopilot: bool, client_timeout: float) -> Req[PopResult]:
    def parse(r: Response) -> PopResult:
        if r.status == 204:  # never parsed
            return PopResult(messages=[])
        return P.parse_pop(r.json(), spec)

    return Req(
        "GET",
        P.pop_path(spec),
        parse,
        query=P.pop_query(spec, client_autopilot),
        long_poll=spec.wait,
        timeout=P.pop_http_timeout(spec, client_timeout),
    )


def renew(lease_id: str, seconds: int) -> Req[RenewResult]:
    return Req(
        "POST",
        f"/api/v1/lease/{_seg(lease_id, 'lease')}/extend",
        lambda r: P.parse_renew(lease_id, r.json()),
        body={"seconds": seconds},
    )


def ack(path: str, body: dict[str, Any]) -> Req[list[AckResult]]:
    """One request of an ack (``P.ack_requests`` splits an ack into them)."""
    sent = len(body.get("acknowledgments", [body]))
    return Req("POST", path, lambda r: P.parse_ack_results(path, r.json(), sent), body=body)


def transaction(
    body: bytes, *, has_push: bool, kv: Sequence[Mapping[str, Any]]
) -> Req[TransactionResult]:
    """``body`` is the encoded bundle; ``has_push`` and ``kv`` decide whether a resend is safe."""
    # A push's ids make the resend of a committed bundle roll back as duplicate; without one, a
    # KV rider that is not idempotent could apply twice.
    return Req(
        "POST",
        "/api/v1/transaction",
        lambda r: P.check_transaction(r.json(), r.attempts),
        body=body,
        not_idempotent=not has_push and not kv_ops_idempotent(kv),
    )


# --- queues ----------------------------------------------------------------------------------


def configure(
    queue: str,
    options: models.QueueOptions | Mapping[str, Any] | None,
    mode: Literal["merge", "replace"] | None,
    namespace: str | None = None,
    task: str | None = None,
) -> Req[models.ConfigureResult]:
    body: dict[str, Any] = {"queue": queue}
    if namespace is not None:
        body["namespace"] = namespace
    if task is not None:
        body["task"] = task
    body["options"] = _dump(options) if options is not None else {}
    if mode is not None:
        body["mode"] = mode
    return Req("POST", "/api/v1/configure", _model(models.ConfigureResult), body=body)


# The page the admin calls that return a whole listing ask for, the largest the broker answers:
# every page costs the broker a fixed part (a queue status's totals, a pass over the group list's
# keys), and paging through 100,000 partitions' status took 61 s at 1,000 rows a page, 7 s at
# 10,000.
WHOLE_LISTING_PAGE = 10000


@dataclass(frozen=True)
class PagePlace:
    """Where a page of a listing starts: after the row the broker's key ``after`` names, else at
    ``offset`` (the first page: neither). An offset skips or repeats rows when rows before it
    come or go between two pages, so the broker names the next page of the group, lagging and
    one-group listings by key too (``X-Lanes-Next-After``)."""

    offset: int = 0
    after: str | None = None


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a listing the broker answers a page at a time (groups, lagging cursors,
    labels, a queue's partitions: 10,000 rows unless asked otherwise) and where the next page
    starts, ``None`` when none follows."""

    body: T
    next: PagePlace | None


@dataclass(frozen=True)
class Paged(Generic[T]):
    """A whole listing, fetched page by page from the first by the admin calls that return one,
    so a caller never gets a silently cut listing: ``page(place)`` is one page's request,
    ``merge(whole, page)`` folds a page into the listing so far (``None`` before the first)."""

    page: Callable[[PagePlace], Req[Page[T]]]
    merge: Callable[[T | None, T], T]


def check_next_page(path: str, at: PagePlace, nxt: PagePlace) -> None:
    """Refuses a next page that does not move on from the page at ``at``."""
    if nxt.after is not None:
        if nxt.after == at.after:
            raise UnexpectedAnswerError(
                f"lanes: GET {path}: a page after {at.after!r} says the next starts after it again"
            )
    elif at.after is not None:
        raise UnexpectedAnswerError(
            f"lanes: GET {path}: a truncated page asked for by key names no key for the next"
        )
    elif nxt.offset <= at.offset:
        raise UnexpectedAnswerError(
            f"lanes: GET {path}: a page at offset {at.offset} says the next starts at {nxt.offset}"
        )


def _body_paged(cls: type[M], path: str, rows: str, **query: Any) -> Paged[M]:
    """A listing whose answer carries its ``rows`` list and the page's ``truncated``,
    ``nextAfter`` and ``nextOffset`` fields: the next page is after the key when the broker gives
    one (a broker before keyed paging gives only the offset; one before paging sends neither: its
    page is the whole listing)."""

    def parser(at: PagePlace) -> Callable[[Response], Page[M]]:
        def parse(r: Response) -> Page[M]:
            m = cls.model_validate(r.json())
            if not getattr(m, "truncated", None):
                return Page(m, None)
            after, nxt = getattr(m, "next_after", None), getattr(m, "next_offset", None)
            if after or at.after is not None:
                # A page asked for by key that names none is refused by check_next_page.
                return Page(m, PagePlace(after=after or None))
            return Page(m, PagePlace(nxt) if isinstance(nxt, int) else None)

        return parse

    def merge(whole: M | None, page: M) -> M:
        if whole is None:
            return page
        more = getattr(page, rows)
        if more:
            if getattr(whole, rows) is None:
                setattr(whole, rows, [])
            getattr(whole, rows).extend(more)
        whole.truncated, whole.next_offset = page.truncated, page.next_offset  # type: ignore[attr-defined]
        if hasattr(whole, "next_after"):
            whole.next_after = page.next_after  # type: ignore[attr-defined]
        return whole

    return Paged(
        lambda at: Req(
            "GET",
            path,
            parser(at),
            query=_q(**query, limit=WHOLE_LISTING_PAGE, offset=at.offset or None, after=at.after),
        ),
        merge,
    )


# The dead-letter, message and queue listings are too long to hold whole, so they have no
# whole-listing call; the ``all_*`` walks go through them a page at a time instead, holding one
# page. Each page after the first starts after the broker's key (``nextAfter``), which rows
# replayed, pushed, consumed or deleted between two pages do not move, as they move an offset. A
# broker that names no key (one before keyed paging) is followed by offset, as the whole-listing
# calls follow it: the dead letters and messages while a page says it is truncated
# (``nextOffset``), or, from a broker before that flag, while a page is full; the queues while
# the rows so far are fewer than the page's total. An offset skips or repeats rows that come or go
# meanwhile, which such a broker leaves no way around; stopping after one page would instead lose
# the rest.

# The page size the walks ask for unless told: the broker's own default page, small enough that a
# page of message payloads stays a few MB.
WALK_PAGE = 100


@dataclass(frozen=True)
class Walk(Generic[T]):
    """A listing walked row by row: ``page(place)`` is one page's request, answering its rows and
    where the next page starts; ``start`` is where the walk starts."""

    start: PagePlace
    page: Callable[[PagePlace], Req[Page[list[T]]]]


def _walk_page(
    req: Req[M], rows_next: Callable[[M], tuple[list[T], PagePlace | None]]
) -> Req[Page[list[T]]]:
    """``req`` (one page of a listing) answering its rows and where the next page starts."""
    one = req.parse

    def parse(r: Response) -> Page[list[T]]:
        rows, nxt = rows_next(one(r))
        return Page(rows, nxt)

    return Req(req.method, req.path, parse, query=req.query, body=req.body, timeout=req.timeout)


def _truncated_next(
    m: models.DlqList | models.MessageList, at: PagePlace, limit: int
) -> PagePlace | None:
    """Where the page after a dead-letter or message page starts: the whole-listing rule when
    the page says whether it was cut (``truncated``), else (a broker before the flag, which pages
    at ``limit`` only) the offset after its rows while it is full."""
    if m.truncated is not None:
        if not m.truncated:
            return None
        if m.next_after or at.after is not None:
            # A page asked for by key that names none is refused by check_next_page.
            return PagePlace(after=m.next_after or None)
        return PagePlace(m.next_offset) if isinstance(m.next_offset, int) else None
    if at.after is not None or len(m.messages) < limit:
        return None
    return PagePlace(at.offset + len(m.messages))


def _queues_next(
    next_after: str | None, at: PagePlace, rows: int, total: int | None
) -> PagePlace | None:
    """Where the page after a queue-list page starts: after its ``nextAfter``, sent while more
    queues follow; without one (an older broker) the offset after its rows while fewer than
    ``total`` came."""
    if next_after:
        return PagePlace(after=next_after)
    if at.after is not None or rows == 0 or total is None or at.offset + rows >= total:
        return None
    return PagePlace(at.offset + rows)


def _walk_start(offset: int | None, after: str | None) -> PagePlace:
    return PagePlace(offset or 0, after or None)


def walk_dlq(
    queue: str | None,
    consumer_group: str | None,
    partition: str | None,
    from_: datetime | str | None,
    to: datetime | str | None,
    limit: int | None,
    offset: int | None,
    after: str | None,
) -> Walk[models.DlqMessage]:
    check_group("all_dlq", consumer_group)
    size = limit or WALK_PAGE

    def page(at: PagePlace) -> Req[Page[list[models.DlqMessage]]]:
        req = list_dlq(
            queue, consumer_group, partition, from_, to, size, at.offset or None, at.after
        )
        return _walk_page(req, lambda m: (m.messages, _truncated_next(m, at, size)))

    return Walk(_walk_start(offset, after), page)


def walk_messages(
    queue: str | None,
    partition: str | None,
    namespace: str | None,
    task: str | None,
    status: str | None,
    from_: datetime | str | None,
    to: datetime | str | None,
    limit: int | None,
    offset: int | None,
    after: str | None,
) -> Walk[models.MessageListItem]:
    size = limit or WALK_PAGE

    def page(at: PagePlace) -> Req[Page[list[models.MessageListItem]]]:
        req = list_messages(
            queue, partition, namespace, task, status, from_, to, size, at.offset or None, at.after
        )
        return _walk_page(req, lambda m: (m.messages, _truncated_next(m, at, size)))

    return Walk(_walk_start(offset, after), page)


def walk_queues(
    namespace: str | None,
    task: str | None,
    limit: int | None,
    offset: int | None,
    after: str | None,
) -> Walk[models.QueueSummary]:
    size = limit or WALK_PAGE

    def page(at: PagePlace) -> Req[Page[list[models.QueueSummary]]]:
        req = list_queues(namespace, task, size, at.offset or None, at.after)
        return _walk_page(
            req, lambda m: (m.queues, _queues_next(m.next_after, at, len(m.queues), m.total))
        )

    return Walk(_walk_start(offset, after), page)


def walk_queue_status(
    queue: str | None,
    namespace: str | None,
    task: str | None,
    limit: int | None,
    offset: int | None,
    after: str | None,
) -> Walk[models.QueueSummary]:
    size = limit or WALK_PAGE

    def page(at: PagePlace) -> Req[Page[list[models.QueueSummary]]]:
        req = list_queue_status(queue, namespace, task, size, at.offset or None, at.after)
        return _walk_page(
            req,
            lambda m: (
                m.queues,
                _queues_next(m.next_after, at, len(m.queues), m.pagination.total),
            ),
        )

    return Walk(_walk_start(offset, after), page)


def _header_next(path: str, r: Response) -> PagePlace | None:
    """Where the next page starts by the X-Lanes-Truncated, X-Lanes-Next-After and
    X-Lanes-Next-Offset headers of a listing answered as a bare array or keyed by queue, which
    has no room for a field: after the key when the broker gives one (a broker before keyed
    paging gives only the offset)."""
    if r.headers.get("x-lanes-truncated") != "true":
        return None
    after = r.headers.get("x-lanes-next-after", "")
    if after:
        return PagePlace(after=after)
    nxt = r.headers.get("x-lanes-next-offset", "")
    if not nxt.isdigit():
        raise UnexpectedAnswerError(
            f"lanes: GET {path}: a truncated page with X-Lanes-Next-Offset {nxt!r}",
            status=r.status,
            body=r.content,
        )
    return PagePlace(int(nxt))


def _list_paged(cls: type[M], path: str, **query: Any) -> Paged[list[M]]:
    rows = _list(cls)

    def parse(r: Response) -> Page[list[M]]:
        return Page(rows(r), _header_next(path, r))

    def merge(whole: list[M] | None, page: list[M]) -> list[M]:
        return page if whole is None else [*whole, *page]

    return Paged(
        lambda at: Req(
            "GET",
            path,
            parse,
            query=_q(**query, limit=WHOLE_LISTING_PAGE, offset=at.offset or None, after=at.after),
        ),
        merge,
    )


def get_queue(queue: str) -> Paged[models.QueueDetail]:
    path = f"/api/v1/resources/queues/{_seg(queue, 'queue')}"
    return _body_paged(models.QueueDetail, path, "partitions")


def list_queues(
    namespace: str | None,
    task: str | None,
    limit: int | None,
    offset: int | None,
    after: str | None = None,
) -> Req[models.QueueList]:
    return Req(
        "GET",
        "/api/v1/resources/queues",
        _model(models.QueueList),
        query=_q(namespace=namespace, task=task, limit=limit, offset=offset, after=after),
    )


def delete_queue(queue: str) -> Req[models.DeleteQueueResult]:
    return Req(
        "DELETE",
        f"/api/v1/resources/queues/{_seg(queue, 'queue')}",
        _model(models.DeleteQueueResult),
    )


def queue_depth(queue: str, group: str | None) -> Paged[models.QueueDepth]:
    check_group("get_queue_depth", group)
    path = f"/api/v1/resources/queues/{_seg(queue, 'queue')}/depth"
    return _body_paged(models.QueueDepth, path, "partitions", group=group)


def overview() -> Req[models.Overview]:
    return Req("GET", "/api/v1/resources/overview", _model(models.Overview))


def namespaces() -> Paged[models.NamespaceList]:
    return _body_paged(models.NamespaceList, "/api/v1/resources/namespaces", "namespaces")


def tasks() -> Paged[models.TaskList]:
    return _body_paged(models.TaskList, "/api/v1/resources/tasks", "tasks")


def status(
    queue: str | None,
    namespace: str | None,
    task: str | None,
    from_: datetime | str | None,
    to: datetime | str | None,
) -> Req[models.StatusOverview]:
    return Req(
        "GET",
        "/api/v1/status",
        _model(models.StatusOverview),
        query=_q(queue=queue, namespace=namespace, task=task, **{"from": from_}, to=to),
    )


def list_queue_status(
    queue: str | None,
    namespace: str | None,
    task: str | None,
    limit: int | None,
    offset: int | None,
    after: str | None = None,
) -> Req[models.QueueStatusList]:
    return Req(
        "GET",
        "/api/v1/status/queues",
        _model(models.QueueStatusList),
        query=_q(
            queue=queue, namespace=namespace, task=task, limit=limit, offset=offset, after=after
        ),
    )


def queue_status(queue: str, include_partitions: bool) -> Paged[models.QueueStatus]:
    path = f"/api/v1/status/queues/{_seg(queue, 'queue')}"
    return _body_paged(
        models.QueueStatus, path, "partitions", includePartitions=include_partitions or None
    )


def buffer_status() -> Req[models.BufferStatus]:
    return Req("GET", "/api/v1/status/buffers", _model(models.BufferStatus))


def metrics() -> Req[models.Metrics]:
    return Req("GET", "/metrics", _model(models.Metrics))


# Push maintenance is /system/maintenance, pop maintenance /system/maintenance/pop.
_MAINTENANCE_PATHS = {"push": "/api/v1/system/maintenance", "pop": "/api/v1/system/maintenance/pop"}


def maintenance(scope: Literal["push", "pop"]) -> Req[models.Maintenance]:
    return Req("GET", _MAINTENANCE_PATHS[scope], _model(models.Maintenance))


def set_maintenance(scope: Literal["push", "pop"], enabled: bool) -> Req[models.Maintenance]:
    return Req(
        "POST", _MAINTENANCE_PATHS[scope], _model(models.Maintenance), body={"enabled": enabled}
    )


# --- consumer groups -------------------------------------------------------------------------


def _seek_body(to_end: bool, timestamp: datetime | str | None) -> dict[str, Any]:
    if timestamp is not None:
        return {"timestamp": _iso(timestamp) if isinstance(timestamp, datetime) else timestamp}
    if not to_end:
        raise ValueError("lanes: seek needs to_end=True or a timestamp")
    return {"toEnd": True}


def seek(
    group: str, queue: str, to_end: bool, timestamp: datetime | str | None
) -> Req[models.SeekQueueResult]:
    check_group("seek_consumer_group", group, in_path=True)
    return Req(
        "POST",
        f"/api/v1/consumer-groups/{_seg(group, 'group')}/queues/{_seg(queue, 'queue')}/seek",
        _model(models.SeekQueueResult),
        body=_seek_body(to_end, timestamp),
    )


def seek_partition(
    group: str, queue: str, partition: str, to_end: bool, timestamp: datetime | str | None
) -> Req[models.SeekPartitionResult]:
    check_group("seek_consumer_group_partition", group, in_path=True)
    return Req(
        "POST",
        f"/api/v1/consumer-groups/{_seg(group, 'group')}/queues/{_seg(queue, 'queue')}"
        f"/partitions/{_seg(partition, 'partition')}/seek",
        _model(models.SeekPartitionResult),
        body=_seek_body(to_end, timestamp),
    )


def list_groups() -> Paged[list[models.ConsumerGroupSummary]]:
    return _list_paged(models.ConsumerGroupSummary, "/api/v1/consumer-groups")


def get_group(group: str) -> Paged[models.ConsumerGroupDetail]:
    check_group("get_consumer_group", group, in_path=True)
    path = f"/api/v1/consumer-groups/{_seg(group, 'group')}"
    detail = _model(models.ConsumerGroupDetail)

    def parse(r: Response) -> Page[models.ConsumerGroupDetail]:
        return Page(detail(r), _header_next(path, r))

    def merge(
        whole: models.ConsumerGroupDetail | None, page: models.ConsumerGroupDetail
    ) -> models.ConsumerGroupDetail:
        if whole is None:
            return page
        for queue, more in page.root.items():  # a queue's partitions may span two pages
            seen = whole.root.get(queue)
            if seen is None:
                whole.root[queue] = more
            else:
                seen.partitions.extend(more.partitions)
        return whole

    return Paged(
        lambda at: Req(
            "GET",
            path,
            parse,
            query=_q(limit=WHOLE_LISTING_PAGE, offset=at.offset or None, after=at.after),
        ),
        merge,
    )


def lagging_groups(min_lag_seconds: int) -> Paged[list[models.LaggingConsumerGroup]]:
    return _list_paged(
        models.LaggingConsumerGroup,
        "/api/v1/consumer-groups/lagging",
        minLagSeconds=min_lag_seconds,
    )


def delete_group(
    group: str, queue: str | None, delete_metadata: bool
) -> Req[models.ConsumerGroupDeleteResult]:
    check_group("delete_consumer_group", group, in_path=True)
    path = f"/api/v1/consumer-groups/{_seg(group, 'group')}"
    if queue is not None:
        path += f"/queues/{_seg(queue, 'queue')}"
    return Req(
        "DELETE",
        path,
        _model(models.ConsumerGroupDeleteResult),
        query=_q(deleteMetadata=delete_metadata),
    )


def update_subscription(
    group: str, timestamp: datetime | str
) -> Req[models.SubscriptionUpdateResult]:
    check_group("update_subscription", group, in_path=True)
    ts = _iso(timestamp) if isinstance(timestamp, datetime) else timestamp
    return Req(
        "POST",
        f"/api/v1/consumer-groups/{_seg(group, 'group')}/subscription",
        _model(models.SubscriptionUpdateResult),
        body={"subscriptionTimestamp": ts},
    )


# --- DLQ and messages ------------------------------------------------------------------------


def list_dlq(
    queue: str | None,
    consumer_group: str | None,
    partition: str | None,
    from_: datetime | str | None,
    to: datetime | str | None,
    limit: int | None,
    offset: int | None,
    after: str | None = None,
) -> Req[models.DlqList]:
    check_group("list_dlq", consumer_group)
    return Req(
        "GET",
        "/api/v1/dlq",
        _model(models.DlqList),
        query=_q(
            queue=queue,
            consumerGroup=consumer_group,
            partition=partition,
            **{"from": from_},
            to=to,
            limit=limit,
            offset=offset,
            after=after,
        ),
    )


def purge_dlq(queue: str, consumer_group: str | None) -> Req[models.DlqPurgeResult]:
    check_group("purge_dlq", consumer_group)
    return Req(
        "DELETE",
        "/api/v1/dlq",
        _model(models.DlqPurgeResult),
        query=_q(queue=queue, consumerGroup=consumer_group),
    )


def replay_dlq(
    dlq_id: str, queue: str | None, partition: str | None
) -> Req[models.DlqReplayResult]:
    body: dict[str, Any] = {}
    if queue is not None:
        body["queue"] = queue
    if partition is not None:
        body["partition"] = partition
    return Req(
        "POST",
        f"/api/v1/dlq/{_seg(dlq_id, 'dlq id')}/replay",
        _model(models.DlqReplayResult),
        body=body,
    )


def list_messages(
    queue: str | None,
    partition: str | None,
    namespace: str | None,
    task: str | None,
    status: str | None,
    from_: datetime | str | None,
    to: datetime | str | None,
    limit: int | None,
    offset: int | None,
    after: str | None = None,
) -> Req[models.MessageList]:
    return Req(
        "GET",
        "/api/v1/messages",
        _model(models.MessageList),
        query=_q(
            queue=queue,
            partition=partition,
            namespace=namespace,
            task=task,
            status=status,
            **{"from": from_},
            to=to,
            limit=limit,
            offset=offset,
            after=after,
        ),
    )


def _msg_path(partition_id: str, transaction_id: str) -> str:
    pid, tid = _seg(partition_id, "partitionId"), _seg(transaction_id, "transactionId")
    return f"/api/v1/messages/{pid}/{tid}"


def get_message(partition_id: str, transaction_id: str) -> Req[models.MessageDetail]:
    return Req("GET", _msg_path(partition_id, transaction_id), _model(models.MessageDetail))


def delete_message(partition_id: str, transaction_id: str) -> Req[models.DeleteMessageResult]:
    return Req(
        "DELETE", _msg_path(partition_id, transaction_id), _model(models.DeleteMessageResult)
    )


def retry_message(partition_id: str, transaction_id: str) -> Req[models.DlqReplayResult]:
    return Req(
        "POST", _msg_path(partition_id, transaction_id) + "/retry", _model(models.DlqReplayResult)
    )


# --- KV and timers ---------------------------------------------------------------------------


def kv_op(
    op: str,
    ns: str,
    key: str | None = None,
    *,
    value: Any = None,
    ttl_seconds: float | None = None,
    expect: int | None = None,
    required: bool | None = None,
    delta: int | None = None,
    keys: Sequence[str] | None = None,
    prefix: str | None = None,
    after: str | None = None,
    limit: int | None = None,
    keys_only: bool | None = None,
    min: int | None = None,
    max: int | None = None,
) -> dict[str, Any]:
    """One KV operation in wire form. Writes without ``ttl_seconds`` are ``forever``.

    ``keys`` is for ``getMany``; ``prefix``, ``after``, ``limit`` and ``keys_only`` for
    ``getPrefix``; ``delta``, ``min`` and ``max`` (inclusive bounds) for ``incr``.
    """
    if isinstance(keys, str):
        raise TypeError("kv: keys must be a sequence of keys, not one str")
    optional = {
        "key": key,
        "keys": list(keys) if keys is not None else None,
        "prefix": prefix,
        "after": after,
        "limit": limit,
        "keysOnly": keys_only,
        "min": min,
        "max": max,
        "delta": delta,
        "expect": expect,
        "required": required,
    }
    o: dict[str, Any] = {"op": op, "ns": ns}
    o.update((k, v) for k, v in optional.items() if v is not None)
    if op in ("put", "putIfAbsent"):
        o["value"] = _checked_value(f"kv {op} {key!r}", value)
    if op in ("put", "putIfAbsent", "incr"):
        o.update(_expiry(ttl_seconds))
    return o


def _expiry(ttl_seconds: float | None) -> dict[str, Any]:
    """A write's expiry, by the rule all three SDKs share: None is forever; a positive ttl is
    whole seconds, at least 1, so a sub-second one still expires; 0 or a negative ttl (a computed
    one that ran out) is sent as it is, so the broker refuses it (400) rather than keeping the key
    forever."""
    if ttl_seconds is None:
        return {"forever": True}
    if ttl_seconds > 0:
        return {"ttlSeconds": max(1, int(ttl_seconds))}
    return {"ttlSeconds": ttl_seconds}


def _batch_results(
    what: str, cls: type[models.KvBatchResult] | type[models.TimerBatchResult], sent: int
) -> Callable[[Response], Any]:
    """The parse of a batch route answering ``{"results": [...]}``, one result per operation."""

    def parse(r: Response) -> Any:
        body = r.json()
        results = cls.model_validate(body).results
        P.check_result_count(what, len(results), sent, "operations", body)
        return results

    return parse


def kv_batch(ops: Sequence[Mapping[str, Any]]) -> Req[list[models.KvResult]]:
    return Req(
        "POST",
        "/api/v1/kv",
        _batch_results("kv", models.KvBatchResult, len(ops)),
        body={"operations": [dict(o) for o in ops]},
        not_idempotent=not kv_ops_idempotent(ops),
    )


def kv_one(op: Mapping[str, Any]) -> Req[models.KvResult]:
    """One op through the batch route (the only route for getMany, getPrefix and incr)."""
    batch = kv_batch([op])
    return Req(
        batch.method,
        batch.path,
        lambda r: batch.parse(r)[0],
        body=batch.body,
        not_idempotent=batch.not_idempotent,
    )


def kv_list(
    ns: str,
    prefix: str | None,
    after: str | None,
    limit: int | None,
    keys_only: bool | None,
    include_expired: bool | None,
) -> Req[models.KvListResult]:
    body: dict[str, Any] = {"namespace": ns}
    for k, v in (
        ("prefix", prefix),
        ("after", after),
        ("limit", limit),
        ("keysOnly", keys_only),
        ("includeExpired", include_expired),
    ):
        if v is not None:
            body[k] = v
    return Req("POST", "/api/v1/resources/kv/list", _model(models.KvListResult), body=body)


def kv_namespaces() -> Paged[models.KvNamespaceList]:
    return _body_paged(models.KvNamespaceList, "/api/v1/resources/kv/namespaces", "namespaces")


def _kv_path(ns: str, key: str) -> str:
    return f"/api/v1/kv/{_seg(ns, 'namespace')}/{_seg(key, 'key')}"


def _key_routeless(ns: str, key: str) -> bool:
    """A namespace or key the key route cannot carry: httpx normalises "." and ".." path
    segments away, so the call would reach another route (a 404 or 405). Such a call goes
    through POST /api/v1/kv, as TS sends every KV call, and gets the broker's own answer."""
    return ns in (".", "..") or key in (".", "..")


def kv_get(ns: str, key: str) -> Req[models.KvResult]:
    if _key_routeless(ns, key):
        return kv_one(kv_op("get", ns, key))
    return Req("GET", _kv_path(ns, key), _model(models.KvResult))


def kv_put(
    ns: str, key: str, value: Any, ttl_seconds: float | None, expect: int | None
) -> Req[models.KvResult]:
    if _key_routeless(ns, key):
        return kv_one(kv_op("put", ns, key, value=value, ttl_seconds=ttl_seconds, expect=expect))
    body: dict[str, Any] = {"value": _checked_value(f"kv put {key!r}", value)}
    body.update(_expiry(ttl_seconds))
    if expect is not None:
        body["expect"] = expect
    return Req(
        "PUT",
        _kv_path(ns, key),
        _model(models.KvResult),
        body=body,
        not_idempotent=expect is not None,
    )


def kv_delete(ns: str, key: str, expect: int | None = None) -> Req[models.KvResult]:
    """Unconditional delete on the key route; with ``expect`` (a version, >= 1) through the batch
    route, the only one that takes the condition."""
    if expect is not None or _key_routeless(ns, key):
        return kv_one(kv_op("delete", ns, key, expect=expect))
    return Req("DELETE", _kv_path(ns, key), _model(models.KvResult))


class _NoPayload(enum.Enum):
    NO_PAYLOAD = "NO_PAYLOAD"


# A timer scheduled without a payload omits the field, so the broker fires ``{}``; an explicit
# None is sent as JSON null.
NO_PAYLOAD = _NoPayload.NO_PAYLOAD


def timer_payload(payload: Any) -> str:
    """Timer payloads travel as base64 of JSON text.

    Bytes are sent as they are and must already be JSON; anything else is JSON-encoded.
    """
    if isinstance(payload, (bytes, bytearray)):
        return base64.b64encode(bytes(payload)).decode()
    try:
        raw = P.json_bytes(payload)
    except (TypeError, ValueError, RecursionError) as e:  # UnicodeEncodeError is a ValueError
        raise InvalidValueError(f"lanes: timer payload is not JSON: {e}") from e
    return base64.b64encode(raw).decode()


def _checked_value(what: str, value: Any) -> Any:
    """``value`` when the request body can carry it as given; the body encoder would send NaN
    as invalid JSON, so it is refused here, before anything is sent."""
    try:
        P.json_bytes(value)
    except (TypeError, ValueError, RecursionError) as e:
        raise InvalidValueError(f"lanes: {what}: value is not JSON: {e}") from e
    return value


def timer_op(
    op: Literal["schedule", "reschedule", "cancel"],
    queue: str,
    key: str,
    *,
    delay_millis: int | None = None,
    payload: Any = NO_PAYLOAD,
    partition: str | None = None,
    txn: str | None = None,
) -> dict[str, Any]:
    o: dict[str, Any] = {"op": op, "queue": queue, "timerKey": key}
    if op != "cancel":
        o["delayMs"] = int(delay_millis or 0)
        if payload is not NO_PAYLOAD:
            o["payload"] = timer_payload(payload)
        o["txn"] = txn or P.uuid7()
    elif txn is not None:
        o["txn"] = txn
    if partition is not None:
        o["partition"] = partition
    return o


def timers_batch(ops: Sequence[Mapping[str, Any]]) -> Req[list[models.TimerResult]]:
    return Req(
        "POST",
        "/api/v1/timers",
        _batch_results("timers", models.TimerBatchResult, len(ops)),
        body={"operations": [dict(o) for o in ops]},
        not_idempotent=not kv_ops_idempotent(ops),
    )


def timer_get(queue: str, key: str) -> Req[models.Timer]:
    return Req(
        "GET", f"/api/v1/timers/{_seg(queue, 'queue')}/{_seg(key, 'key')}", _model(models.Timer)
    )


def timer_list(
    queue: str, limit: int | None, after: str | None, prefix: str | None = None
) -> Req[models.TimerList]:
    return Req(
        "GET",
        f"/api/v1/timers/{_seg(queue, 'queue')}",
        _model(models.TimerList),
        query=_q(limit=limit, after=after, prefix=prefix),
    )
