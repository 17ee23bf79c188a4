"""The ``all_*`` walks go through the dead letters, messages and queue lists page by page by the
broker's key, so rows replayed, pushed or deleted between two pages move no row of the rest; from
a broker that names no key they follow the offset."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

import lanes
from lanes import models
from tests.test_listing_keys import _Async, _Sync


@dataclass
class WalkSpy:
    """Counts the requests to ``path``, sends a malformed ``after`` on request number
    ``bad_after_at`` (a real 400 from the broker) and, to play a broker before keyed paging,
    drops the answers' nextAfter (``drop_key``) and truncated (``drop_truncated``) fields."""

    path: str
    bad_after_at: int = 0
    drop_key: bool = False
    drop_truncated: bool = False
    requests: int = 0
    keyed: list[str] = field(default_factory=list)

    def ask(self, request: httpx.Request) -> bool:
        if request.url.path != self.path:
            return False
        self.requests += 1
        if "after" in request.url.params:
            self.keyed.append(request.url.params["after"])
        if self.requests == self.bad_after_at:
            request.url = request.url.copy_set_param("after", "not-a-key")
        return True

    def answer(self, request: httpx.Request, resp: httpx.Response, body: bytes) -> httpx.Response:
        headers = httpx.Headers(resp.headers)
        for name in ("content-encoding", "content-length", "transfer-encoding"):
            headers.pop(name, None)
        if resp.status_code == 200 and (self.drop_key or self.drop_truncated):
            doc = json.loads(body)
            if self.drop_key:
                doc.pop("nextAfter", None)
            if self.drop_truncated:
                doc.pop("truncated", None)
                doc.pop("nextOffset", None)
            body = json.dumps(doc).encode()
        return httpx.Response(resp.status_code, headers=headers, content=body, request=request)


def spied(broker_url: str, spy: WalkSpy) -> lanes.Lanes:
    return lanes.Lanes(broker_url, http_client=httpx.Client(transport=_Sync(spy)), retry_attempts=0)


def file_dead_letters(c: lanes.Lanes, qname: str, n: int) -> list[str]:
    """Files n dead letters on qname, one failure each; their data newest first."""
    data = [f"d{i}" for i in range(n)]
    c.queue(qname).push([{"data": d} for d in data])
    for _ in range(n):
        c.ack(c.queue(qname).batch(1).wait(False).pop(), "dlq", error="poison")
    return data[::-1]


def configure_queues(c: lanes.Lanes, namespace: str, prefix: str, n: int) -> list[str]:
    names = [f"{prefix}-{i}" for i in range(n)]
    for name in names:
        c.admin.configure_queue(name, namespace=namespace)
    return names


def data(rows: Iterator[Any]) -> list[Any]:
    return [r.data for r in rows]


def test_the_walks_give_every_row_once_in_order(broker_url: str, qname: str) -> None:
    with lanes.Lanes(broker_url) as c:
        want = file_dead_letters(c, qname, 7)
        spy = WalkSpy("/api/v1/dlq")
        with spied(broker_url, spy) as s:
            assert data(s.queue(qname).dlq().limit(3).all()) == want
            assert (spy.requests, len(spy.keyed)) == (3, 2)
            assert data(s.admin.all_dlq(queue=qname, limit=2)) == want
            assert data(s.queue(qname).dlq().partition("other").all()) == []
            assert data(s.queue(qname).dlq().all()) == want
        one = c.admin.list_messages(queue=qname, limit=1000).messages
        assert len(one) == 7
        walked = c.admin.all_messages(queue=qname, limit=2)
        assert [m.transaction_id for m in walked] == [m.transaction_id for m in one]


def test_the_dead_letter_walk_follows_the_key_while_rows_are_replayed_and_deleted(
    broker_url: str, qname: str
) -> None:
    with lanes.Lanes(broker_url) as c:
        every = file_dead_letters(c, qname, 8)
        rows = {m.data: m for m in c.admin.list_dlq(queue=qname, limit=1000).messages}
        gone = rows[every[5]]
        got = []
        for m in c.queue(qname).dlq().limit(3).all():
            got.append(m.data)
            if len(got) == 3:  # the first page is done: replay it, delete a row of a later page
                for d in got:
                    c.admin.replay_dlq(rows[d].id)
                c.admin.delete_message(gone.partition_id, gone.transaction_id)
        assert got == every[:5] + every[6:]


def test_the_message_walk_follows_the_key_while_messages_are_pushed(
    broker_url: str, qname: str
) -> None:
    with lanes.Lanes(broker_url) as c:
        for i in range(7):  # seven segments, newest last
            c.queue(qname).push([{"data": f"m{i}"}])
        got = []
        for m in c.admin.all_messages(queue=qname, limit=3):
            got.append(m.data)
            if len(got) in (3, 6):
                c.queue(qname).push([{"data": f"late{len(got)}"}])
        assert got == [f"m{i}" for i in range(6, -1, -1)]


def test_the_message_walk_continues_a_page_the_byte_budget_cut(broker_url: str, qname: str) -> None:
    big = "x" * (1200 * 1024)  # counted twice in a message listing: three such pass 4 MiB
    with lanes.Lanes(broker_url) as c:
        for i in range(4):
            c.queue(qname).push([{"data": big, "transaction_id": f"big{i}"}])
        first = c.admin.list_messages(queue=qname, limit=100)
        assert len(first.messages) < 4 and first.truncated
        walked = [m.transaction_id for m in c.admin.all_messages(queue=qname)]
        assert walked == ["big3", "big2", "big1", "big0"]


def test_the_queue_walks_follow_the_key_while_queues_come_and_go(
    broker_url: str, qname: str
) -> None:
    namespace = f"{qname}-ns"
    with lanes.Lanes(broker_url) as c:
        names = configure_queues(c, namespace, f"{qname}-q", 7)
        try:
            walks: dict[str, Callable[[], Iterator[models.QueueSummary]]] = {
                "queues": lambda: c.admin.all_queues(namespace=namespace, limit=3),
                "status": lambda: c.admin.all_queue_status(namespace=namespace, limit=3),
            }
            for walk in walks.values():
                assert [q.name for q in walk()] == names
            for name, walk in walks.items():
                want = [q.name for q in walk()]
                got: list[str] = []
                for q in walk():
                    got.append(q.name)
                    if len(got) == 3:  # two listed queues go, one sorting before the place comes
                        for done in got[:2]:
                            c.admin.delete_queue(done)
                        names += configure_queues(c, namespace, f"{qname}-a-{name}", 1)
                assert got == want
        finally:
            for name in names:
                c.admin.delete_queue(name)


def test_a_walk_stops_on_break_and_raises_a_page_error_once(broker_url: str, qname: str) -> None:
    with lanes.Lanes(broker_url) as c:
        want = file_dead_letters(c, qname, 5)
    spy = WalkSpy("/api/v1/dlq")
    with spied(broker_url, spy) as s:
        for _ in s.queue(qname).dlq().limit(2).all():
            break
        for m in s.queue(qname).dlq().limit(2).all():
            if m.data == want[1]:  # the first page's last row
                break
    assert spy.requests == 2

    failing = WalkSpy("/api/v1/dlq", bad_after_at=2)
    with spied(broker_url, failing) as s:
        walk = s.queue(qname).dlq().limit(2).all()
        got = []
        with pytest.raises(lanes.BadRequestError):
            for m in walk:
                got.append(m.data)
        assert got == want[:2]
        assert list(walk) == []  # ended: no second error, no further request
    assert failing.requests == 2


def test_the_walks_follow_the_offset_from_a_broker_without_keys(
    broker_url: str, qname: str
) -> None:
    with lanes.Lanes(broker_url) as c:
        want = file_dead_letters(c, qname, 7)
        for spy in (
            WalkSpy("/api/v1/dlq", drop_key=True),
            WalkSpy("/api/v1/dlq", drop_key=True, drop_truncated=True),
        ):
            with spied(broker_url, spy) as s:
                assert data(s.queue(qname).dlq().limit(3).all()) == want
            assert (spy.requests, spy.keyed) == (3, [])
        exact = WalkSpy("/api/v1/dlq", drop_key=True, drop_truncated=True)
        with spied(broker_url, exact) as s:
            assert data(s.queue(qname).dlq().limit(7).all()) == want
        assert exact.requests == 2  # a full last page takes one more, empty, page

        namespace = f"{qname}-ns"
        names = configure_queues(c, namespace, f"{qname}-q", 5)
        try:
            spy = WalkSpy("/api/v1/resources/queues", drop_key=True)
            with spied(broker_url, spy) as s:
                assert [q.name for q in s.admin.all_queues(namespace=namespace, limit=2)] == names
            assert (spy.requests, spy.keyed) == (3, [])
        finally:
            for name in names:
                c.admin.delete_queue(name)


async def _adata(rows: AsyncIterator[Any]) -> list[Any]:
    return [r.data async for r in rows]


async def test_the_async_walks_give_every_row_once_and_stop_on_break(
    broker_url: str, qname: str
) -> None:
    with lanes.Lanes(broker_url) as c:
        want = file_dead_letters(c, qname, 7)
        for i in range(5):
            c.queue(f"{qname}-m").push([{"data": f"m{i}"}])
        namespace = f"{qname}-ns"
        names = configure_queues(c, namespace, f"{qname}-q", 5)
    spy = WalkSpy("/api/v1/dlq")
    client = httpx.AsyncClient(transport=_Async(spy))
    try:
        async with lanes.AsyncLanes(broker_url, http_client=client) as a:
            assert await _adata(a.queue(qname).dlq().limit(3).all()) == want
            assert (spy.requests, len(spy.keyed)) == (3, 2)
            assert await _adata(a.admin.all_dlq(queue=qname, limit=2)) == want
            messages = a.admin.all_messages(queue=f"{qname}-m", limit=2)
            assert await _adata(messages) == [f"m{i}" for i in range(4, -1, -1)]
            queues: list[models.QueueSummary] = [
                q async for q in a.admin.all_queues(namespace=namespace, limit=2)
            ]
            assert [q.name for q in queues] == names
            status = a.admin.all_queue_status(namespace=namespace, limit=2)
            assert [q.name async for q in status] == names
            spy.requests = 0
            async for _ in a.queue(qname).dlq().limit(2).all():
                break
            assert spy.requests == 1
    finally:
        with lanes.Lanes(broker_url) as c:
            for name in names:
                c.admin.delete_queue(name)
