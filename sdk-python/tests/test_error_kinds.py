"""Each failure kind is its own exception class, against a real broker (LANES_TEST_URL): its own
400 and 404, and the statuses and slow answers its test fault scripts send (scripts/test-broker.sh
serves them when auth is off). Also ``queue(q).depth()`` and ``queue(q).dlq(g)…get()``."""

from __future__ import annotations

import datetime
import json
import math
import socket
import uuid
from collections.abc import Callable, Iterator

import httpx
import pytest

import lanes

KINDS: list[type[Exception]] = [
    lanes.BadRequestError,
    lanes.AuthenticationError,
    lanes.PermissionDeniedError,
    lanes.NotFoundError,
    lanes.ConflictError,
    lanes.PayloadTooLargeError,
    lanes.RateLimitError,
    lanes.InternalServerError,
    lanes.NotImplementedByBrokerError,
    lanes.APITimeoutError,
    lanes.APIConnectionError,
]


def kinds_of(err: BaseException) -> set[type[Exception]]:
    return {k for k in KINDS if isinstance(err, k)}


@pytest.fixture
def faults(broker_url: str) -> Iterator[tuple[str, str]]:
    """A fault-script run id on the test broker, deleted after the test."""
    run = f"py-{uuid.uuid4().hex[:12]}"
    yield broker_url, run
    httpx.delete(f"{broker_url}/__test/faults/{run}")


def script(broker_url: str, run: str, rules: list[dict[str, object]]) -> None:
    r = httpx.put(f"{broker_url}/__test/faults/{run}", content=json.dumps({"rules": rules}))
    assert r.status_code == 204, (
        "the test broker serves no fault scripts: start it with scripts/test-broker.sh"
        " (LANES_TEST_FAULTS on)"
    )


def test_the_brokers_400_and_404(broker_url: str, qname: str) -> None:
    with lanes.Lanes(broker_url, retry_attempts=0) as c:
        with pytest.raises(lanes.APIError) as bad:
            c.queue(qname).push([{"data": 1, "transaction_id": "x" * 1025}])
        assert kinds_of(bad.value) == {lanes.BadRequestError}
        assert bad.value.code == "bad_request"
        assert bad.value.message == "items[0].transactionId is longer than 1024 bytes"
        # As Go's Error() (TS's message drops the "lanes: ").
        assert str(bad.value) == (
            "lanes: 400 bad_request: items[0].transactionId is longer than 1024 bytes"
        )
        with pytest.raises(lanes.APIError) as absent:
            c.admin.get_queue(qname + "-absent")
        assert kinds_of(absent.value) == {lanes.NotFoundError}


@pytest.mark.parametrize(
    ("status", "headers", "kind"),
    [
        (400, {}, lanes.BadRequestError),
        (401, {}, lanes.AuthenticationError),
        (403, {}, lanes.PermissionDeniedError),
        (404, {}, lanes.NotFoundError),
        (409, {}, lanes.ConflictError),
        (413, {}, lanes.PayloadTooLargeError),
        (429, {"Retry-After": "3600"}, lanes.RateLimitError),
        (500, {}, lanes.InternalServerError),
        (503, {}, lanes.InternalServerError),
        (501, {}, lanes.NotImplementedByBrokerError),
    ],
)
def test_each_status_is_its_own_class(
    faults: tuple[str, str], status: int, headers: dict[str, str], kind: type[Exception]
) -> None:
    url, run = faults
    answer = {"status": status, "headers": headers}
    script(url, run, [{"method": "POST", "path": "/api/v1/push", "responses": [answer]}])
    c = lanes.Lanes(url, retry_attempts=0, max_429_attempts=0, headers={"X-Lanes-Test-Run": run})
    with c, pytest.raises(lanes.APIError) as e:
        c.queue("py-kinds").push([1])
    assert kinds_of(e.value) == {kind}
    assert e.value.status == status
    # As Go's Terminal() and TS's terminal: every 4xx but 429.
    assert e.value.terminal == (400 <= status < 500 and status != 429)


async def test_a_timed_out_attempt_is_an_api_timeout_error(faults: tuple[str, str]) -> None:
    url, run = faults
    slow = {"status": 200, "delayMs": 3000}
    script(url, run, [{"path": "/api/v1/resources/overview", "responses": [slow, slow]}])
    headers = {"X-Lanes-Test-Run": run}
    with lanes.Lanes(url, retry_attempts=0, timeout=0.2, headers=headers) as c:
        with pytest.raises(lanes.APIConnectionError) as e:
            c.admin.get_overview()
        assert kinds_of(e.value) == {lanes.APITimeoutError, lanes.APIConnectionError}
    async with lanes.AsyncLanes(url, retry_attempts=0, timeout=0.2, headers=headers) as ac:
        with pytest.raises(lanes.APITimeoutError):
            await ac.admin.get_overview()


async def test_a_timed_out_write_of_unknown_outcome_is_a_timeout(faults: tuple[str, str]) -> None:
    """A write that is not idempotent (a KV incr) whose attempt timed out is an
    OutcomeUnknownError and still an APITimeoutError, as Go's errors.Is(err, ErrTimeout) and TS's
    instanceof say."""
    url, run = faults
    slow = {"status": 200, "delayMs": 3000}
    script(url, run, [{"method": "POST", "path": "/api/v1/kv", "responses": [slow, slow]}])
    headers = {"X-Lanes-Test-Run": run}
    with lanes.Lanes(url, retry_attempts=0, timeout=0.2, headers=headers) as c:
        with pytest.raises(lanes.APITimeoutError) as e:
            c.kv("py-kinds").incr("counter")
        assert isinstance(e.value, lanes.OutcomeUnknownError)
        assert kinds_of(e.value) == {lanes.APITimeoutError, lanes.APIConnectionError}
    async with lanes.AsyncLanes(url, retry_attempts=0, timeout=0.2, headers=headers) as ac:
        with pytest.raises(lanes.OutcomeUnknownError) as unknown:
            await ac.kv("py-kinds").incr("counter")
        assert isinstance(unknown.value, lanes.APITimeoutError)
        assert isinstance(unknown.value.cause, lanes.APITimeoutError)
        assert unknown.value.attempts == 1


def test_a_refused_connection_is_not_a_timeout() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with lanes.Lanes(f"http://127.0.0.1:{port}", retry_attempts=0) as c:
        with pytest.raises(lanes.APIConnectionError) as e:
            c.admin.get_overview()
        assert kinds_of(e.value) == {lanes.APIConnectionError}
        # The broker it could not reach, as Go's ConnectionError.URL and TS's url.
        assert e.value.url == f"http://127.0.0.1:{port}"


def dead_letter_one_per_partition(c: lanes.Lanes, qname: str) -> None:
    for p in ("a", "b", "c"):
        c.queue(qname).partition(p).push([{"p": p}])
    assert c.queue(qname).group("billing").depth().pending == 3
    for _ in range(3):
        q = c.queue(qname).group("billing").subscription_mode("all").batch(1).wait(False)
        msgs = q.pop()
        assert len(msgs) == 1
        c.ack(msgs, "dlq", error="poison")


def test_queue_depth_and_dlq_builders(broker_url: str, qname: str) -> None:
    with lanes.Lanes(broker_url) as c:
        dead_letter_one_per_partition(c, qname)
        depth = c.queue(qname).group("billing").depth()
        assert (depth.pending, depth.group) == (0, "billing")
        page = c.queue(qname).group("billing").dlq().limit(2).get()
        assert len(page.messages) == 2
        assert page.messages[0].error_message == "poison"
        assert page.messages[0].consumer_group == "billing"
        assert len(c.queue(qname).dlq("billing").limit(2).offset(2).get().messages) == 1
        assert c.queue(qname).dlq("other").get().messages == []
        only_b = c.queue(qname).dlq("billing").partition("b").get().messages
        assert [m.partition for m in only_b] == ["b"]
        now = datetime.datetime.now(datetime.timezone.utc)
        hour = datetime.timedelta(hours=1)
        base = c.queue(qname).dlq("billing")
        assert base.from_(now + hour).get().messages == []
        assert len(base.from_(now - hour).to(now + hour).get().messages) == 3
        assert len(base.get().messages) == 3  # the setters returned new queries


async def test_async_queue_depth_and_dlq_builders(broker_url: str, qname: str) -> None:
    with lanes.Lanes(broker_url) as c:
        dead_letter_one_per_partition(c, qname)
    async with lanes.AsyncLanes(broker_url) as ac:
        assert (await ac.queue(qname).group("billing").depth()).pending == 0
        assert (await ac.queue(qname).depth()).pending == 3  # queue mode has popped nothing
        page = await ac.queue(qname).group("billing").dlq().limit(2).get()
        assert len(page.messages) == 2
        assert len((await ac.queue(qname).dlq("billing").partition("c").get()).messages) == 1


def test_dlq_paged_by_after_while_replayed(broker_url: str, qname: str) -> None:
    """A page's ``next_after`` does not move when the page's dead letters are replayed; an
    offset does, and the second page by offset skips the row left."""
    with lanes.Lanes(broker_url) as c:
        dead_letter_one_per_partition(c, qname)
        first = c.queue(qname).dlq("billing").limit(2).get()
        assert [m.partition for m in first.messages] == ["c", "b"]
        assert first.next_after
        for m in first.messages:
            assert c.admin.replay_dlq(m.id).result == "moved"
        assert c.admin.list_dlq(queue=qname, limit=2, offset=2).messages == []
        second = c.queue(qname).dlq("billing").limit(2).after(first.next_after).get()
        assert [m.partition for m in second.messages] == ["a"]
        assert second.truncated is False


async def test_async_dlq_paged_by_after(broker_url: str, qname: str) -> None:
    with lanes.Lanes(broker_url) as c:
        dead_letter_one_per_partition(c, qname)
    async with lanes.AsyncLanes(broker_url) as ac:
        first = await ac.admin.list_dlq(queue=qname, limit=2)
        assert first.next_after
        rest = await ac.admin.list_dlq(queue=qname, limit=2, after=first.next_after)
        assert [m.partition for m in first.messages + rest.messages] == ["c", "b", "a"]
        assert rest.next_offset is None  # a page by key names no offset


@pytest.mark.parametrize(
    "value",
    [math.nan, math.inf, b"raw", datetime.datetime(2026, 1, 1), "\ud800"],
    ids=["nan", "inf", "bytes", "datetime", "lone-surrogate"],
)
def test_a_value_json_cannot_carry_is_refused_before_sending(
    faults: tuple[str, str], qname: str, value: object
) -> None:
    """As Go's InvalidKVValueError and TS's InvalidValueError: nothing reaches the broker (the
    fault script counts every KV, timer and transaction request) and nothing is stored."""
    url, run = faults
    paths = ["/api/v1/kv*", "/api/v1/timers*", "/api/v1/transaction"]
    script(url, run, [{"path": p} for p in paths])
    with lanes.Lanes(url, headers={"X-Lanes-Test-Run": run}) as c:
        kv = c.kv(qname)
        calls: list[Callable[[], object]] = [
            lambda: kv.put("k", value),
            lambda: kv.put("k", value, expect=0),
            lambda: kv.put_if_absent("k", value),
            lambda: kv.batch([lanes.kv_op("put", qname, "k", value=value)]),
            lambda: c.transaction().kv_put(qname, "k", value).commit(),
        ]
        if not isinstance(value, bytes):  # bytes are a timer payload's JSON text, sent as given
            calls += [
                lambda: c.timers(qname).schedule("t", delay_millis=60_000, payload=value),
                lambda: c.timers(qname).batch(
                    [lanes.timer_op("schedule", qname, "t", delay_millis=60_000, payload=value)]
                ),
            ]
        for call in calls:
            with pytest.raises(lanes.InvalidValueError):
                call()
    counts = httpx.get(f"{url}/__test/faults/{run}").json()["rules"]
    assert [r["attempts"] for r in counts] == [0, 0, 0]
    with lanes.Lanes(url) as c:
        assert not c.kv(qname).get("k").found


def test_a_dot_name_in_a_path_is_refused_before_sending(broker_url: str, qname: str) -> None:
    """httpx removes a "." or ".." path segment, and what is left can name another route:
    DELETE /consumer-groups/g/queues/.. became DELETE /consumer-groups/g, which deleted the
    group on every queue. Every call that puts a name in its path refuses those two."""
    group = f"{qname}-g"
    with lanes.Lanes(broker_url, retry_attempts=0) as c:
        c.queue(qname).push([1])
        c.queue(qname).group(group).subscription_mode("all").wait(False).pop()
        calls: list[Callable[[], object]] = [
            lambda: c.admin.delete_consumer_group_for_queue(group, ".."),
            lambda: c.admin.delete_consumer_group_for_queue(group, "."),
            lambda: c.admin.delete_queue(".."),
            lambda: c.admin.get_queue_status(".."),
            lambda: c.admin.seek_consumer_group(group, "..", to_end=True),
            lambda: c.admin.delete_message("..", "t"),
            lambda: c.timers("..").get("k"),
        ]
        for call in calls:
            with pytest.raises(lanes.InvalidNameError, match=r'must not be "\." or "\.\."'):
                call()
        assert qname in c.admin.get_consumer_group(group)


def test_messages_paged_by_after_while_pushed(broker_url: str, qname: str) -> None:
    """A message pushed between two pages sorts first: the second page by offset repeats a
    row, the second page by ``next_after`` starts where the first ended."""
    with lanes.Lanes(broker_url) as c:
        for i in range(4):  # one push each: four segments, newest last
            c.queue(qname).push([{"i": i}])
        first = c.admin.list_messages(queue=qname, limit=2)
        assert [m.data for m in first.messages] == [{"i": 3}, {"i": 2}]
        assert first.next_after
        c.queue(qname).push([{"i": 4}])
        by_offset = c.admin.list_messages(queue=qname, limit=2, offset=2)
        assert [m.data for m in by_offset.messages] == [{"i": 2}, {"i": 1}]
        second = c.admin.list_messages(queue=qname, limit=2, after=first.next_after)
        assert [m.data for m in second.messages] == [{"i": 1}, {"i": 0}]
        assert second.truncated is False


def test_a_message_listing_cut_by_the_byte_budget_says_where_the_rest_starts(
    broker_url: str, qname: str
) -> None:
    """Payloads over the broker's answer byte budget (4 MiB by default, each payload counted
    twice) come one message a page: following next_offset while truncated lists every one once."""
    with lanes.Lanes(broker_url) as c:
        for i in range(3):
            c.queue(qname).push([{"data": "x" * (3 << 19), "transactionId": f"big-{i}"}])
        got: list[str] = []
        offset, pages = 0, 0
        while True:
            page = c.admin.list_messages(queue=qname, limit=10, offset=offset)
            pages += 1
            assert len(page.messages) == 1
            got.append(page.messages[0].transaction_id)
            if not page.truncated:
                assert page.next_offset is None
                break
            assert page.next_offset is not None
            offset = page.next_offset
        assert (got, pages) == (["big-2", "big-1", "big-0"], 3)


def _wide_queue(c: lanes.Lanes, qname: str, partitions: int) -> list[str]:
    """One message on each of partitions partitions of qname (a transaction carries 10,000
    operations at most)."""
    names = [f"p{i:05d}" for i in range(partitions)]
    for start in range(0, partitions, 5000):
        tx = c.transaction()
        for i, name in enumerate(names[start : start + 5000], start):
            tx.queue(qname).partition(name).push([{"data": i}])
        tx.commit()
    return names


def test_the_whole_listing_calls_follow_the_broker_pages(broker_url: str, qname: str) -> None:
    """The broker answers the group, lagging and partition listings 10,000 rows a page at most;
    the admin calls that return a whole listing follow the pages, each row once, in name order."""
    with lanes.Lanes(broker_url) as c:
        want = _wide_queue(c, qname, 10003)
        group = qname + "-g"
        c.admin.seek_consumer_group(group, qname, timestamp="1970-01-01T00:00:00Z")
        assert [p.name for p in c.admin.get_queue(qname).partitions] == want
        depth = c.admin.get_queue_depth(qname, group)
        assert ([p.partition for p in depth.partitions], depth.pending) == (want, 10003)
        status = c.admin.get_queue_status(qname, include_partitions=True)
        assert [p.name for p in status.partitions or []] == want
        cursors = c.admin.get_consumer_group(group)[qname].partitions
        assert [p.partition for p in cursors] == want
        lagging = c.admin.lagging_consumer_groups(0)
        assert [r.partition_name for r in lagging if r.consumer_group == group] == want


async def test_the_async_whole_listing_calls_follow_the_broker_pages(
    broker_url: str, qname: str
) -> None:
    with lanes.Lanes(broker_url) as c:
        want = _wide_queue(c, qname, 10003)
    group = qname + "-g"
    async with lanes.AsyncLanes(broker_url) as ac:
        await ac.admin.seek_consumer_group(group, qname, timestamp="1970-01-01T00:00:00Z")
        assert [p.name for p in (await ac.admin.get_queue(qname)).partitions] == want
        cursors = (await ac.admin.get_consumer_group(group))[qname].partitions
        assert [p.partition for p in cursors] == want
        lagging = await ac.admin.lagging_consumer_groups(0)
        assert [r.partition_name for r in lagging if r.consumer_group == group] == want
