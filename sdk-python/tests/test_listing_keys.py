"""The group and lagging listings span every group on the broker: the whole-listing calls follow
the broker's key, which groups gaining or losing rows between two pages do not shift, and from a
broker that gives no key, the offset. A queue's partition listings (detail, depth, status) follow
the nextAfter of their answers the same way."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import quote

import httpx
import pytest

import lanes

PARTITIONS = ["p0", "p1", "p2", "p3", "p4", "p5"]


@dataclass
class SmallPages:
    """Asks the group-wide listings for pages of ``limit`` rows until two pages after the first
    that holds ``marker``, after which it calls ``between`` once; so a few rows take several
    pages, and the rest (the other tests' rows) come in the SDK's own pages."""

    drop_after: bool  # strip X-Lanes-Next-After, as a broker before keyed paging sends none
    path: str = "/api/v1/consumer-groups"  # the listings' path prefix
    limit: str = "4"
    small: int = 3
    marker: bytes = b""
    between: Callable[[], None] | None = None
    keyed: list[str] = field(default_factory=list)

    def ask(self, request: httpx.Request) -> bool:
        if not request.url.path.startswith(self.path):
            return False
        if self.between is not None or self.small > 0:
            self.small -= 1
            request.url = request.url.copy_set_param("limit", self.limit)
        if "after" in request.url.params:
            self.keyed.append(request.url.params["after"])
        return True

    def answer(self, request: httpx.Request, resp: httpx.Response, body: bytes) -> httpx.Response:
        headers = httpx.Headers(resp.headers)
        for name in ("content-encoding", "content-length", "transfer-encoding"):
            headers.pop(name, None)
        if self.drop_after:
            headers.pop("x-lanes-next-after", None)
        if self.between is not None and self.marker in body:
            self.between()
            self.between, self.small = None, 2
        return httpx.Response(resp.status_code, headers=headers, content=body, request=request)


class Pager(Protocol):
    def ask(self, request: httpx.Request) -> bool: ...

    def answer(
        self, request: httpx.Request, resp: httpx.Response, body: bytes
    ) -> httpx.Response: ...


class _Sync(httpx.BaseTransport):
    def __init__(self, pages: Pager) -> None:
        self.pages, self.inner = pages, httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if not self.pages.ask(request):
            return self.inner.handle_request(request)
        resp = self.inner.handle_request(request)
        body = resp.read()
        resp.close()
        return self.pages.answer(request, resp, body)

    def close(self) -> None:
        self.inner.close()


class _Async(httpx.AsyncBaseTransport):
    def __init__(self, pages: Pager) -> None:
        self.pages, self.inner = pages, httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if not self.pages.ask(request):
            return await self.inner.handle_async_request(request)
        resp = await self.inner.handle_async_request(request)
        body = await resp.aread()
        await resp.aclose()
        return self.pages.answer(request, resp, body)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _two_groups(c: lanes.Lanes, broker_url: str, qname: str) -> tuple[str, str, Callable[[], None]]:
    """Groups early and later (names starting "0-", so they sort before the other tests' groups,
    on the first pages) on every partition of qname, each a message behind, and a call that
    deletes early."""
    tx = c.transaction()
    for i, p in enumerate(PARTITIONS):
        tx.queue(qname).partition(p).push([{"data": i}])
    tx.commit()
    early, later = f"0-{qname}-a", f"0-{qname}-b"
    for g in (early, later):
        c.admin.seek_consumer_group(g, qname, timestamp="1970-01-01T00:00:00Z")

    def delete_early() -> None:
        r = httpx.delete(f"{broker_url}/api/v1/consumer-groups/{quote(early, safe='')}")
        assert r.status_code == 200

    return early, later, delete_early


def _arm(pages: SmallPages, marker: str, delete_early: Callable[[], None], limit: str) -> None:
    if not pages.drop_after:
        pages.limit, pages.marker, pages.between = limit, marker.encode(), delete_early
    else:
        pages.small = 3


@pytest.mark.parametrize("drop_after", [False, True], ids=["by key", "older broker, by offset"])
def test_the_group_wide_listings_follow_the_key_while_an_earlier_group_loses_its_rows(
    broker_url: str, qname: str, drop_after: bool
) -> None:
    pages = SmallPages(drop_after)
    with lanes.Lanes(broker_url) as c:
        early, later, delete_early = _two_groups(c, broker_url, qname)
        try:
            with lanes.Lanes(broker_url, http_client=httpx.Client(transport=_Sync(pages))) as paged:
                _arm(pages, f'"consumer_group":{json.dumps(early)}', delete_early, "4")
                lagging = paged.admin.lagging_consumer_groups(0)
                assert [
                    r.partition_name for r in lagging if r.consumer_group == later
                ] == PARTITIONS
                if drop_after:
                    delete_early()
                else:  # a row of the group list each, one row a page
                    c.admin.seek_consumer_group(early, qname, timestamp="1970-01-01T00:00:00Z")
                _arm(pages, f'"name":{json.dumps(early)}', delete_early, "1")
                names = [g.name for g in paged.admin.list_consumer_groups()]
                assert [n for n in names if n.startswith(f"0-{qname}")] == (
                    [later] if drop_after else [early, later]
                )
                assert bool(pages.keyed) is not drop_after
        finally:  # the next run's groups sort after these, which would take its first pages
            for g in (early, later):
                c.admin.delete_consumer_group(g)


@pytest.mark.parametrize("drop_after", [False, True], ids=["by key", "older broker, by offset"])
async def test_the_async_group_wide_listings_follow_the_key(
    broker_url: str, qname: str, drop_after: bool
) -> None:
    pages = SmallPages(drop_after)
    with lanes.Lanes(broker_url) as c:
        early, later, delete_early = _two_groups(c, broker_url, qname)
        try:
            client = httpx.AsyncClient(transport=_Async(pages))
            async with lanes.AsyncLanes(broker_url, http_client=client) as paged:
                _arm(pages, f'"consumer_group":{json.dumps(early)}', delete_early, "4")
                lagging = await paged.admin.lagging_consumer_groups(0)
                assert [
                    r.partition_name for r in lagging if r.consumer_group == later
                ] == PARTITIONS
                if drop_after:
                    delete_early()
                else:
                    c.admin.seek_consumer_group(early, qname, timestamp="1970-01-01T00:00:00Z")
                _arm(pages, f'"name":{json.dumps(early)}', delete_early, "1")
                names = [g.name for g in await paged.admin.list_consumer_groups()]
                assert [n for n in names if n.startswith(f"0-{qname}")] == (
                    [later] if drop_after else [early, later]
                )
                assert bool(pages.keyed) is not drop_after
        finally:
            for g in (early, later):
                c.admin.delete_consumer_group(g)


QUEUE_PARTITIONS = [f"p{i}" for i in range(10)]


@dataclass
class PartitionPages:
    """Asks one queue's partition listings for pages of 4 rows and calls ``between`` after the
    first page of each; ``drop_after`` strips nextAfter, as a broker before keyed paging sends
    none."""

    queue: str
    between: Callable[[], None]
    drop_after: bool
    keyed: list[str] = field(default_factory=list)
    first: bool = False

    def ask(self, request: httpx.Request) -> bool:
        if f"/queues/{self.queue}" not in request.url.path:
            return False
        request.url = request.url.copy_set_param("limit", "4")
        params = request.url.params
        self.first = "after" not in params and "offset" not in params
        if "after" in params:
            self.keyed.append(params["after"])
        return True

    def answer(self, request: httpx.Request, resp: httpx.Response, body: bytes) -> httpx.Response:
        headers = httpx.Headers(resp.headers)
        for name in ("content-encoding", "content-length", "transfer-encoding"):
            headers.pop(name, None)
        doc = json.loads(body)
        if self.drop_after:
            doc.pop("nextAfter", None)
        if self.first:
            self.between()
        return httpx.Response(resp.status_code, headers=headers, json=doc, request=request)


def _wide_queue(c: lanes.Lanes, qname: str) -> Callable[[], None]:
    """Partitions p0..p9 of qname, and a call that pushes to a new partition sorting before
    them ("0-new-N"), which moves every one of them a place."""
    tx = c.transaction()
    for i, p in enumerate(QUEUE_PARTITIONS):
        tx.queue(qname).partition(p).push([{"data": i}])
    tx.commit()
    created = [0]

    def create_early() -> None:
        created[0] += 1
        c.queue(qname).partition(f"0-new-{created[0]}").push([{"data": created[0]}])

    return create_early


def _check_partitions(names: list[str], drop_after: bool) -> None:
    listed = [n for n in names if n.startswith("p")]
    if drop_after:  # from an older broker the first page's last row comes again on the second
        assert len(listed) == len(QUEUE_PARTITIONS) + 1, listed
        listed = list(dict.fromkeys(listed))
    assert listed == QUEUE_PARTITIONS


@pytest.mark.parametrize("drop_after", [False, True], ids=["by key", "older broker, by offset"])
def test_the_queue_partition_listings_follow_the_key_while_a_partition_is_created(
    broker_url: str, qname: str, drop_after: bool
) -> None:
    with lanes.Lanes(broker_url) as c:
        pages = PartitionPages(qname, _wide_queue(c, qname), drop_after)
        with lanes.Lanes(broker_url, http_client=httpx.Client(transport=_Sync(pages))) as paged:
            _check_partitions([p.name for p in paged.admin.get_queue(qname).partitions], drop_after)
            depth = paged.admin.get_queue_depth(qname)
            _check_partitions([p.partition for p in depth.partitions], drop_after)
            status = paged.admin.get_queue_status(qname, include_partitions=True)
            _check_partitions([p.name for p in status.partitions or []], drop_after)
            assert status.truncated is False and status.next_after is None
    assert bool(pages.keyed) is not drop_after


@pytest.mark.parametrize("drop_after", [False, True], ids=["by key", "older broker, by offset"])
async def test_the_async_queue_partition_listings_follow_the_key(
    broker_url: str, qname: str, drop_after: bool
) -> None:
    with lanes.Lanes(broker_url) as c:
        pages = PartitionPages(qname, _wide_queue(c, qname), drop_after)
        client = httpx.AsyncClient(transport=_Async(pages))
        async with lanes.AsyncLanes(broker_url, http_client=client) as paged:
            detail = await paged.admin.get_queue(qname)
            _check_partitions([p.name for p in detail.partitions], drop_after)
            depth = await paged.admin.get_queue_depth(qname)
            _check_partitions([p.partition for p in depth.partitions], drop_after)
            status = await paged.admin.get_queue_status(qname, include_partitions=True)
            _check_partitions([p.name for p in status.partitions or []], drop_after)
    assert bool(pages.keyed) is not drop_after


LABEL_LISTINGS = {
    "namespaces": "/api/v1/resources/namespaces",
    "tasks": "/api/v1/resources/tasks",
    "kv namespaces": "/api/v1/resources/kv/namespaces",
}


def _labels(c: lanes.Lanes, qname: str, listing: str) -> tuple[list[str], Callable[[], None]]:
    """Three labels of the listing (names starting "0-", so they sort before the other tests'
    labels, on the first pages), and a call that removes the first (its queue or its key)."""
    prefix = f"0-{qname}-"
    labels = [f"{prefix}a", f"{prefix}b", f"{prefix}c"]
    for i, label in enumerate(labels):
        if listing == "kv namespaces":
            c.kv(label).put("k", i)
        elif listing == "tasks":
            c.admin.configure_queue(f"{qname}-{i}", task=label)
        else:
            c.admin.configure_queue(f"{qname}-{i}", namespace=label)

    def remove_first() -> None:
        if listing == "kv namespaces":
            c.kv(labels[0]).delete("k")
        else:
            c.admin.delete_queue(f"{qname}-0")

    return labels, remove_first


def _listed(c: lanes.Lanes, listing: str) -> list[str]:
    if listing == "namespaces":
        return [n.namespace for n in c.admin.get_namespaces().namespaces]
    if listing == "tasks":
        return [t.task for t in c.admin.get_tasks().tasks]
    return [n.namespace or "" for n in c.kv_namespaces().namespaces]


@pytest.mark.parametrize("listing", list(LABEL_LISTINGS))
def test_the_label_listings_follow_the_key_while_an_earlier_label_goes(
    broker_url: str, qname: str, listing: str
) -> None:
    with lanes.Lanes(broker_url) as c:
        labels, remove_first = _labels(c, qname, listing)
        pages = SmallPages(False, path=LABEL_LISTINGS[listing], limit="1", small=0)
        pages.marker, pages.between = json.dumps(labels[0]).encode(), remove_first
        with lanes.Lanes(broker_url, http_client=httpx.Client(transport=_Sync(pages))) as paged:
            listed = [n for n in _listed(paged, listing) if n.startswith(f"0-{qname}-")]
        assert listed == labels
        assert pages.keyed


def test_the_queue_lists_page_by_key_while_an_earlier_queue_is_deleted(
    broker_url: str, qname: str
) -> None:
    namespace = f"{qname}-ns"
    queues = [f"{qname}-a", f"{qname}-b", f"{qname}-c"]
    with lanes.Lanes(broker_url) as c:
        for q in queues:
            c.admin.configure_queue(q, namespace=namespace)
        first = c.admin.list_queues(namespace=namespace, limit=1)
        first_status = c.admin.list_queue_status(namespace=namespace, limit=1)
        assert [q.name for q in first.queues] == queues[:1]
        c.admin.delete_queue(queues[0])
        # By offset 1 the next page would be the third queue: the second is the one it skips.
        second = c.admin.list_queues(namespace=namespace, limit=1, after=first.next_after)
        assert [q.name for q in second.queues] == queues[1:2] and second.total == 2
        second_status = c.admin.list_queue_status(
            namespace=namespace, limit=1, after=first_status.next_after
        )
        assert [q.name for q in second_status.queues] == queues[1:2]
        last = c.admin.list_queues(namespace=namespace, limit=1, after=second.next_after)
        assert [q.name for q in last.queues] == queues[2:] and last.next_after is None


async def test_the_async_queue_lists_page_by_key(broker_url: str, qname: str) -> None:
    namespace = f"{qname}-ns"
    queues = [f"{qname}-a", f"{qname}-b"]
    async with lanes.AsyncLanes(broker_url) as c:
        for q in queues:
            await c.admin.configure_queue(q, namespace=namespace)
        first = await c.admin.list_queue_status(namespace=namespace, limit=1)
        await c.admin.delete_queue(queues[0])
        second = await c.admin.list_queues(namespace=namespace, limit=1, after=first.next_after)
        assert [q.name for q in second.queues] == queues[1:] and second.next_after is None
