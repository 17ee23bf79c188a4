"""The retry table of docs/retries.md §8: the pure policy with a frozen clock, then the sync and
async transports over httpx.MockTransport (no broker needed)."""

from __future__ import annotations

import datetime
import email.utils
import time
from collections.abc import Callable

import httpx
import pytest

import lanes
from lanes._retry import RetrySettings, backoff, decide, kv_ops_idempotent, parse_hint

NOW = 1_800_000_000.0
S = RetrySettings()


def test_hint_parsing() -> None:
    assert parse_hint({"retry-after-ms": "250"}, NOW) == 0.25
    assert parse_hint({"retry-after": "1.5"}, NOW) == 1.5
    rfc1123 = email.utils.formatdate(NOW + 3, usegmt=True)
    assert parse_hint({"retry-after": rfc1123}, NOW) == pytest.approx(3.0)
    rfc850 = "Friday, 15-Jan-27 08:00:03 GMT"
    base = email.utils.parsedate_to_datetime("Fri, 15 Jan 2027 08:00:00 GMT").timestamp()
    assert parse_hint({"retry-after": rfc850}, base) == pytest.approx(3.0)
    for bad in ("0", "0.0", "-1", "NaN", "soon", "inf"):
        assert parse_hint({"retry-after": bad}, NOW) is None
    assert parse_hint({"retry-after-ms": "0"}, NOW) is None
    assert parse_hint({"retry-after": email.utils.formatdate(NOW, usegmt=True)}, NOW) is None
    past = email.utils.formatdate(NOW - 60, usegmt=True)
    assert parse_hint({"retry-after": past}, NOW) is None


# The hint grammar of docs/retries.md §3; sdk-go (TestParseRetryHint) and sdk-js ("retry hint
# grammar shared by the SDKs") run the same table.
GRAMMAR_NOW = datetime.datetime(2026, 12, 4, 23, 59, tzinfo=datetime.timezone.utc).timestamp()
GRAMMAR = [
    ("1.5", "", 1.5),
    (" 2 ", "", 2.0),
    ("+5", "", 5.0),
    (".5", "", 0.5),
    ("1.", "", 1.0),
    ("999999999", "", 999999999.0),
    ("0", "", None),
    ("-1", "", None),
    ("1000000000", "", None),
    ("NaN", "", None),
    ("Infinity", "", None),
    ("inf", "", None),
    ("1e3", "", None),
    ("0x1p4", "", None),
    ("1_0", "", None),
    ("30 seconds", "", None),
    ("soon", "", None),
    ("", "", None),
    ("5", "250", 0.25),
    ("5", "0", 5.0),
    ("5", "1e3", 5.0),
    ("", "2.5", 0.0025),
    # The three HTTP-date forms, GMT; the weekday is not checked.
    ("Sat, 05 Dec 2026 00:00:00 GMT", "", 60.0),
    ("Saturday, 05-Dec-26 00:00:00 GMT", "", 60.0),
    ("Sat Dec  5 00:00:00 2026", "", 60.0),
    ("Sat Dec 05 00:00:00 2026", "", 60.0),
    ("Sun, 05 Dec 2026 00:00:00 GMT", "", 60.0),
    ("Monday, 05-Dec-50 00:00:00 GMT", "", 757382460.0),  # 50 is 2050
    ("Fri, 04 Dec 2026 23:59:00 GMT", "", None),  # now
    ("Fri, 04 Dec 2026 23:58:00 GMT", "", None),  # past
    ("Thursday, 01-Jan-70 00:00:00 GMT", "", None),  # 70 is 1970
    # Anything else is no hint.
    ("Sat, 05 Dec 2026 00:00:00 UTC", "", None),
    ("Sat, 05 Dec 2026 00:00:00 +0000", "", None),
    ("Saturday, 05-Dec-26 00:00:00 EST", "", None),
    ("Sat, 05 Dec 2026 00:00:00", "", None),
    ("05 Dec 2026 00:00:00 GMT", "", None),
    ("sat, 05 dec 2026 00:00:00 gmt", "", None),
    ("Sat, 5 Dec 2026 00:00:00 GMT", "", None),
    ("Sat Dec 5 00:00:00 2026", "", None),
    ("Sat, 31 Feb 2027 00:00:00 GMT", "", None),
    ("Sat, 05 Dec 2026 24:00:00 GMT", "", None),
    ("Sat, 05 Dec 2026 00:00:60 GMT", "", None),
    ("2026-12-05T00:00:00Z", "", None),
    ("2026-12-05", "", None),
    ("Dec 2026", "", None),
]


@pytest.mark.parametrize(("retry_after", "retry_after_ms", "want"), GRAMMAR)
def test_parse_hint_grammar(retry_after: str, retry_after_ms: str, want: float | None) -> None:
    headers = {}
    if retry_after:
        headers["retry-after"] = retry_after
    if retry_after_ms:
        headers["retry-after-ms"] = retry_after_ms
    assert parse_hint(headers, GRAMMAR_NOW) == want


def test_asctime_hint_is_gmt_whatever_the_local_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        asctime = time.strftime("%a %b %e %H:%M:%S %Y", time.gmtime(NOW + 3))
        assert parse_hint({"retry-after": asctime}, NOW) == pytest.approx(3.0)
    finally:
        monkeypatch.undo()
        time.tzset()


@pytest.mark.parametrize(
    ("status", "headers", "kw", "retry", "delay"),
    [
        (429, {"Retry-After": "1"}, {}, True, 1.0),
        (429, {"retry-after-ms": "250"}, {}, True, 0.25),
        (429, {"Retry-After": "1.5"}, {}, True, 1.5),
        (429, {"Retry-After": "-1"}, {}, True, 0.5),
        (429, {"Retry-After": "0"}, {}, True, 0.5),
        (429, {"retry-after-ms": "0"}, {"retries_429": 1}, True, 1.0),
        (503, {"Retry-After": "0"}, {}, True, 0.5),
        (429, {"Retry-After": "NaN"}, {}, True, 0.5),
        (429, {"Retry-After": "soon"}, {}, True, 0.5),
        (429, {"Retry-After": "3600"}, {}, False, 0.0),
        (429, {}, {"retries_429": 10}, False, 0.0),
        (429, {}, {"retries_429": 50, "long_poll": True}, True, None),
        (503, {}, {}, True, 0.5),
        (503, {}, {"retries_transient": 1}, True, 1.0),
        (503, {}, {"retries_transient": 2}, False, 0.0),
        (503, {"x-should-retry": "false"}, {}, False, 0.0),
        (409, {"x-should-retry": "true"}, {}, True, 0.5),
        (400, {}, {}, False, 0.0),
        (404, {}, {}, False, 0.0),
        (409, {}, {}, False, 0.0),
        (501, {}, {}, False, 0.0),
        (403, {"x-should-retry": "true"}, {}, False, 0.0),
        (413, {"x-should-retry": "true"}, {}, False, 0.0),
        (None, {}, {}, True, 0.5),
        (503, {"Retry-After": "1"}, {"deadline": NOW + 0.1}, False, 0.0),
    ],
)
def test_decision_table(
    status: int | None,
    headers: dict[str, str],
    kw: dict[str, object],
    retry: bool,
    delay: float | None,
) -> None:
    d = decide(S, status=status, headers=headers, now=NOW, rand=0.0, **kw)  # type: ignore[arg-type]
    assert d.retry is retry, d
    if retry and delay is not None:
        assert d.delay == pytest.approx(delay)


def test_terminal_flag_and_hint_kept() -> None:
    d = decide(S, status=403, now=NOW)
    assert d.terminal and not d.retry
    d = decide(S, status=429, headers={"Retry-After": "3600"}, now=NOW)
    assert d.retry_after == 3600.0


def test_jitter() -> None:
    assert backoff(S, 3, 0.999999) == pytest.approx(4.0 * 0.75, rel=1e-4)
    assert backoff(S, 10, 0.0) == 8.0


# --- transports --------------------------------------------------------------------------------


def scripted(
    answers: list[httpx.Response],
) -> tuple[httpx.MockTransport, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        a = answers[min(len(seen) - 1, len(answers) - 1)]
        return httpx.Response(a.status_code, headers=a.headers, content=a.content)

    return httpx.MockTransport(handler), seen


PUSH_OK = httpx.Response(
    201,
    json=[
        {"index": 0, "message_id": "m", "transaction_id": "t", "queueName": "q", "status": "queued"}
    ],
)


def sync_client(t: httpx.MockTransport, slept: list[float], **kw: object) -> lanes.Lanes:
    return lanes.Lanes(
        "http://broker",
        http_client=httpx.Client(transport=t),
        _sleep=slept.append,
        _clock=lambda: NOW,
        _rng=lambda: 0.0,
        **kw,  # type: ignore[arg-type]
    )


def async_client(t: httpx.MockTransport, slept: list[float], **kw: object) -> lanes.AsyncLanes:
    async def sleep(d: float) -> None:
        slept.append(d)

    return lanes.AsyncLanes(
        "http://broker",
        http_client=httpx.AsyncClient(transport=t),
        _sleep=sleep,
        _clock=lambda: NOW,
        _rng=lambda: 0.0,
        **kw,  # type: ignore[arg-type]
    )


def r429(after: str = "1") -> httpx.Response:
    return httpx.Response(
        429, headers={"Retry-After": after}, json={"error": "busy", "code": "overloaded"}
    )


def test_sync_429_twice_then_ok() -> None:
    t, seen = scripted([r429(), r429(), PUSH_OK])
    slept: list[float] = []
    c = sync_client(t, slept)
    res = c.queue("q").push([{"data": 1}])
    assert res[0].status == "queued"
    assert len(seen) == 3 and slept == [1.0, 1.0]
    assert [r.headers["X-Retry-Count"] for r in seen] == ["0", "1", "2"]
    # the transaction id minted before the first attempt is resent unchanged
    assert len({r.content for r in seen}) == 1


async def test_async_429_twice_then_ok() -> None:
    t, seen = scripted([r429(), r429(), PUSH_OK])
    slept: list[float] = []
    c = async_client(t, slept)
    res = await c.queue("q").push([{"data": 1}])
    assert res[0].status == "queued" and len(seen) == 3 and slept == [1.0, 1.0]


def test_sync_429_bounded_on_push() -> None:
    t, seen = scripted([r429()])
    slept: list[float] = []
    c = sync_client(t, slept, max_429_attempts=3)
    with pytest.raises(lanes.RateLimitError) as ei:
        c.queue("q").push([1])
    assert len(seen) == 4 and ei.value.code == "overloaded" and ei.value.retry_after == 1.0


def test_sync_429_above_cap_raises_without_sleeping() -> None:
    t, seen = scripted([r429("3600")])
    slept: list[float] = []
    c = sync_client(t, slept)
    with pytest.raises(lanes.RateLimitError) as ei:
        c.queue("q").push([1])
    assert len(seen) == 1 and slept == [] and ei.value.retry_after == 3600.0


def test_sync_429_http_date_is_read_against_the_clock() -> None:
    ahead = email.utils.formatdate(NOW + 2, usegmt=True)
    t, seen = scripted([r429(ahead), PUSH_OK])
    slept: list[float] = []
    sync_client(t, slept).queue("q").push([1])
    assert len(seen) == 2 and slept == [2.0]

    far = email.utils.formatdate(NOW + 3600, usegmt=True)
    t, seen = scripted([r429(far)])
    slept = []
    with pytest.raises(lanes.RateLimitError) as ei:
        sync_client(t, slept).queue("q").push([1])
    assert len(seen) == 1 and slept == [] and ei.value.retry_after == 3600.0

    past = email.utils.formatdate(NOW - 60, usegmt=True)
    t, seen = scripted([r429(past), PUSH_OK])
    slept = []
    sync_client(t, slept).queue("q").push([1])
    assert len(seen) == 2 and slept == [0.5]  # no hint: the computed backoff


def test_sync_429_unbounded_on_long_poll() -> None:
    t, seen = scripted([r429()] * 50 + [httpx.Response(204)])
    slept: list[float] = []
    c = sync_client(t, slept, max_429_attempts=2)
    assert c.queue("q").pop() == []
    assert len(seen) == 51


async def test_async_429_unbounded_on_long_poll() -> None:
    t, seen = scripted([r429()] * 50 + [httpx.Response(204)])
    slept: list[float] = []
    c = async_client(t, slept, max_429_attempts=2)
    assert await c.queue("q").pop() == []
    assert len(seen) == 51


def test_sync_503_backoff_and_exhaustion() -> None:
    t, seen = scripted([httpx.Response(503), httpx.Response(503), PUSH_OK])
    slept: list[float] = []
    sync_client(t, slept).queue("q").push([1])
    assert slept == [0.5, 1.0]
    t, seen = scripted([httpx.Response(503)])
    slept = []
    with pytest.raises(lanes.APIError) as ei:
        sync_client(t, slept).queue("q").push([1])
    assert ei.value.status == 503 and len(seen) == 3 and ei.value.attempts == 3


@pytest.mark.parametrize(
    ("status", "exc"),
    [
        (400, lanes.BadRequestError),
        (403, lanes.PermissionDeniedError),
        (404, lanes.NotFoundError),
        (409, lanes.ConflictError),
        (413, lanes.PayloadTooLargeError),
        (501, lanes.NotImplementedByBrokerError),
    ],
)
def test_sync_4xx_single_attempt(status: int, exc: type[lanes.APIError]) -> None:
    t, seen = scripted(
        [
            httpx.Response(
                status,
                headers={"x-should-retry": "true"} if status in (403, 413) else {},
                json={"error": "no", "code": "c"},
            )
        ]
    )
    slept: list[float] = []
    with pytest.raises(exc) as ei:
        sync_client(t, slept).queue("q").push([1])
    assert len(seen) == 1 and type(ei.value) is exc and ei.value.code == "c"


def test_non_json_error_body() -> None:
    t, _ = scripted([httpx.Response(413, content=b"<html>too big</html>")])
    with pytest.raises(lanes.PayloadTooLargeError) as ei:
        sync_client(t, []).queue("q").push([1])
    assert ei.value.code == "" and ei.value.terminal


def test_failover_to_second_url_without_delay() -> None:
    seen: list[str] = []

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(str(req.url.host))
        if req.url.host == "a":
            raise httpx.ConnectError("refused", request=req)
        return PUSH_OK

    slept: list[float] = []
    c = lanes.Lanes(
        urls=["http://a", "http://b"],
        http_client=httpx.Client(transport=httpx.MockTransport(handler)),
        _sleep=slept.append,
    )
    c.queue("q").push([1])
    assert seen == ["a", "b"] and slept == []


def test_network_error_exhausted_is_connection_error() -> None:
    def handler(req: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=req)

    slept: list[float] = []
    c = sync_client(httpx.MockTransport(handler), slept)
    with pytest.raises(lanes.APIConnectionError) as ei:
        c.health()
    assert ei.value.attempts == 3 and len(slept) == 2


def test_204_is_never_parsed() -> None:
    # A 204 with garbage would explode if anything tried to decode it.
    t, _ = scripted([httpx.Response(204, content=b"\x00not json")])
    assert sync_client(t, []).queue("q").pop_result().messages == []


NotUsed = Callable[[], None]


# --- writes that are not idempotent (docs/retries.md §5) ----------------------------------------


@pytest.mark.parametrize("status", [None, 408, 500, 503])
def test_not_idempotent_ambiguous_failure_is_outcome_unknown(status: int | None) -> None:
    d = decide(S, status=status, now=NOW, not_idempotent=True)
    assert not d.retry and d.outcome_unknown


def test_not_idempotent_retried_only_when_not_applied() -> None:
    assert decide(S, status=None, now=NOW, not_idempotent=True, not_sent=True).retry
    assert decide(S, status=429, now=NOW, not_idempotent=True).retry
    should = {"x-should-retry": "true"}
    assert decide(S, status=503, headers=should, now=NOW, not_idempotent=True).retry
    d = decide(S, status=400, now=NOW, not_idempotent=True)
    assert not d.retry and not d.outcome_unknown


def test_kv_ops_idempotent() -> None:
    assert kv_ops_idempotent([{"op": "get"}, {"op": "put"}, {"op": "delete"}])
    for op in ({"op": "incr"}, {"op": "putIfAbsent"}, {"op": "put", "expect": 0}):
        assert not kv_ops_idempotent([{"op": "get"}, op])


KV_INCR_OK = httpx.Response(
    200, json={"results": [{"index": 0, "op": "incr", "applied": True, "value": 1, "version": 1}]}
)


def failing(
    exc: Exception, then: httpx.Response
) -> tuple[httpx.MockTransport, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        if len(seen) == 1:
            raise exc
        return then

    return httpx.MockTransport(handler), seen


def test_sync_incr_retried_after_failed_connect_not_after_read_timeout() -> None:
    t, seen = failing(httpx.ConnectError("refused"), KV_INCR_OK)
    c = sync_client(t, [])
    assert c.kv("ns").incr("k").value == 1
    assert len(seen) == 2
    t, seen = failing(httpx.ReadTimeout("slow"), KV_INCR_OK)
    c = sync_client(t, [])
    with pytest.raises(lanes.OutcomeUnknownError) as ei:
        c.kv("ns").incr("k")
    assert len(seen) == 1 and isinstance(ei.value.cause, lanes.APIConnectionError)
    # a plain put is idempotent: retried
    t, seen = failing(httpx.ReadTimeout("slow"), httpx.Response(200, json={"applied": True}))
    sync_client(t, []).kv("ns").put("k", 1)
    assert len(seen) == 2


async def test_async_incr_503_is_outcome_unknown() -> None:
    t, seen = scripted([httpx.Response(503, json={"error": "x", "code": "unavailable"})])
    c = async_client(t, [])
    with pytest.raises(lanes.OutcomeUnknownError) as ei:
        await c.kv("ns").incr("k")
    assert len(seen) == 1
    assert isinstance(ei.value.cause, lanes.APIError) and ei.value.cause.status == 503


# --- lanes.deadline (docs/retries.md §3) --------------------------------------------------------


def test_sync_deadline_returns_the_last_real_error_at_once() -> None:
    r503 = httpx.Response(
        503, headers={"Retry-After": "1"}, json={"error": "busy", "code": "unavailable"}
    )
    t, seen = scripted([r503, r429("5")])
    slept: list[float] = []
    c = lanes.Lanes("http://broker", http_client=httpx.Client(transport=t), _sleep=slept.append)
    with lanes.deadline(0.1), pytest.raises(lanes.APIError) as ei:
        c.queue("q").push([1])
    assert ei.value.status == 503 and len(seen) == 1 and slept == []
    with lanes.deadline(1.0), pytest.raises(lanes.RateLimitError) as rl:
        c.queue("q").push([1])
    assert rl.value.retry_after == 5.0 and len(seen) == 2 and slept == []


async def test_async_deadline_nested_earlier_wins() -> None:
    t, seen = scripted([r429("5")])
    slept: list[float] = []

    async def sleep(d: float) -> None:
        slept.append(d)

    c = lanes.AsyncLanes("http://broker", http_client=httpx.AsyncClient(transport=t), _sleep=sleep)
    with lanes.deadline(1.0), lanes.deadline(60.0), pytest.raises(lanes.RateLimitError):
        await c.queue("q").push([1])
    assert len(seen) == 1 and slept == []


def test_deadline_cuts_the_attempt_timeout() -> None:
    timeouts: list[object] = []

    def handler(req: httpx.Request) -> httpx.Response:
        timeouts.append(req.extensions["timeout"]["read"])
        return PUSH_OK

    c = lanes.Lanes(
        "http://broker", http_client=httpx.Client(transport=httpx.MockTransport(handler))
    )
    with lanes.deadline(2.0):
        c.queue("q").push([1])
    c.queue("q").push([1])
    assert 1.5 < timeouts[0] <= 2.0 and timeouts[1] == 30.0  # type: ignore[operator]
