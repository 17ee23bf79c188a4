"""The one retry policy (docs/retries.md), as pure functions.

Nothing here performs I/O or reads a clock: callers pass the time (``now``, epoch seconds), the
random draw and the counters, so a table test with a frozen clock covers the whole policy. The
sync and async transports both drive :class:`CallState`, so their behaviour cannot drift apart.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "CallState",
    "Decision",
    "Endpoints",
    "RetrySettings",
    "backoff",
    "decide",
    "kv_ops_idempotent",
    "parse_hint",
]

RETRYABLE_STATUSES = frozenset({408, 500, 502, 503, 504})
HEALTH_RETRY_AFTER = 5.0
"""Default seconds a broker URL is skipped after a network failure, a 408 or a 5xx on it."""


@dataclass(frozen=True)
class RetrySettings:
    """Client retry settings (docs/retries.md §1). Durations are seconds."""

    retry_attempts: int = 2
    retry_delay: float = 0.5
    max_retry_delay: float = 8.0
    max_429_attempts: int = 10
    max_retry_after: float = 60.0
    health_retry_after: float = HEALTH_RETRY_AFTER


@dataclass(frozen=True)
class Decision:
    """What to do after one attempt.

    ``retry`` False means stop: return the 2xx (``reason == "ok"``) or raise the error.
    ``budget`` names the counter a retry spends. ``retry_after`` is the valid server hint, kept
    for the error raised when the policy gives up. ``failover`` asks for the next broker URL.
    ``outcome_unknown`` says a write that is not idempotent failed after it was sent: it is not
    retried and the caller cannot know whether the broker applied it.
    """

    retry: bool
    reason: str
    delay: float = 0.0
    budget: Literal["429", "transient"] | None = None
    retry_after: float | None = None
    failover: bool = False
    terminal: bool = False
    outcome_unknown: bool = False


_DECIMAL = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)")
"""The seconds (or milliseconds) form of a hint: digits with an optional fraction; float() alone
would also take "1e3", "1_0", "inf" and "nan"."""
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_MONTH = "|".join(_MONTHS)
# The three HTTP-date forms of RFC 9110 §5.6.7, case-sensitive, always GMT.
# email.utils.parsedate_to_datetime would also read other zones, dates without a weekday or a
# zone, and lower case.
_IMF_FIXDATE = re.compile(
    rf"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), ([0-9]{{2}}) ({_MONTH}) ([0-9]{{4}}) "
    r"([0-9]{2}):([0-9]{2}):([0-9]{2}) GMT"
)
_RFC850_DATE = re.compile(
    r"(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday), "
    rf"([0-9]{{2}})-({_MONTH})-([0-9]{{2}}) ([0-9]{{2}}):([0-9]{{2}}):([0-9]{{2}}) GMT"
)
_ASCTIME_DATE = re.compile(
    rf"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) ({_MONTH}) ([0-9]{{2}}| [0-9]) "
    r"([0-9]{2}):([0-9]{2}):([0-9]{2}) ([0-9]{4})"
)
_MAX_HINT = 1e9
"""A hint of 10^9 s (about 31 years) or more is out of range, as in the Go SDK."""


def _valid_hint(v: float) -> float | None:
    """A usable hint: finite, above 0 and in range. A 0 (or a date of now) is no hint, so the
    computed backoff applies rather than an immediate retry (docs/retries.md §3)."""
    return v if 0 < v < _MAX_HINT else None


def _parse_http_date(value: str) -> float | None:
    """An HTTP-date as epoch seconds. The weekday is not checked against the date (it is
    redundant); a two-digit RFC 850 year below 69 is 20yy, else 19yy."""
    if m := _IMF_FIXDATE.fullmatch(value):
        day, month, year, hh, mm, ss = m.groups()
    elif m := _RFC850_DATE.fullmatch(value):
        day, month, year, hh, mm, ss = m.groups()
        year = ("20" if year < "69" else "19") + year
    elif m := _ASCTIME_DATE.fullmatch(value):
        month, day, hh, mm, ss, year = m.groups()
    else:
        return None
    fields = (int(year), _MONTHS.index(month) + 1, int(day), int(hh), int(mm), int(ss))
    try:
        when = datetime.datetime(*fields, tzinfo=datetime.timezone.utc)
    except ValueError:  # a day, hour, minute or second out of range
        return None
    return when.timestamp()


def parse_hint(headers: Mapping[str, str], now: float) -> float | None:
    """Server delay hint in seconds: ``retry-after-ms``, then ``Retry-After`` as seconds, then as
    an HTTP-date relative to ``now``, with the grammar every SDK shares (docs/retries.md §3).
    Zero, negative, out of range or unparseable, and dates now or in the past → None."""
    ms = headers.get("retry-after-ms", "").strip()
    if _DECIMAL.fullmatch(ms):
        v = _valid_hint(float(ms) / 1000.0)
        if v is not None:
            return v
    ra = headers.get("retry-after")
    if ra is None:
        return None
    ra = ra.strip()
    if _DECIMAL.fullmatch(ra):
        return _valid_hint(float(ra))
    at = _parse_http_date(ra)
    return None if at is None else _valid_hint(at - now)


def backoff(settings: RetrySettings, n: int, rand: float) -> float:
    """Computed backoff for the ``n``-th retry (0-based) with subtractive jitter of up to 25 %."""
    base = min(settings.retry_delay * (2.0**n), settings.max_retry_delay)
    return base * (1.0 - 0.25 * rand)


def _lower(headers: Mapping[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


def decide(
    settings: RetrySettings,
    *,
    status: int | None,
    headers: Mapping[str, str] | None = None,
    long_poll: bool = False,
    retries_429: int = 0,
    retries_transient: int = 0,
    now: float = 0.0,
    rand: float = 0.0,
    deadline: float | None = None,
    not_idempotent: bool = False,
    not_sent: bool = False,
) -> Decision:
    """Decide after one attempt (docs/retries.md §2). ``status`` None = no response (network).

    ``deadline`` is an absolute time on the same clock as ``now``; a retry whose sleep would end
    after it is not taken. ``not_idempotent`` marks a write a repeat could apply twice
    (:func:`kv_ops_idempotent`); ``not_sent`` says a network failure happened while connecting,
    so the request never left.
    """
    h = _lower(headers or {})
    if status is not None and 200 <= status < 300:
        return Decision(retry=False, reason="ok")
    hint = parse_hint(h, now) if status is not None else None
    if status in (403, 413):
        return Decision(retry=False, reason=f"status={status} terminal", terminal=True)
    should = h.get("x-should-retry", "").strip().lower()
    if should == "false":
        return Decision(
            retry=False, reason=f"status={status} x-should-retry=false", retry_after=hint
        )

    def transient(reason: str) -> Decision:
        if retries_transient >= settings.retry_attempts:
            return Decision(retry=False, reason=f"{reason} retries exhausted", retry_after=hint)
        if hint is not None and hint <= settings.max_retry_after:
            delay = hint
        else:
            delay = backoff(settings, retries_transient, rand)
        return _bounded(
            Decision(
                retry=True,
                reason=reason,
                delay=delay,
                budget="transient",
                retry_after=hint,
                failover=True,
            ),
            now,
            deadline,
        )

    if should == "true":
        return transient(f"status={status} x-should-retry=true")
    if status == 429:
        if hint is not None and hint > settings.max_retry_after:
            return Decision(
                retry=False, reason="status=429 retry-after above cap", retry_after=hint
            )
        if not long_poll and retries_429 >= settings.max_429_attempts:
            return Decision(retry=False, reason="status=429 retries exhausted", retry_after=hint)
        delay = hint if hint is not None else backoff(settings, retries_429, rand)
        return _bounded(
            Decision(retry=True, reason="status=429", delay=delay, budget="429", retry_after=hint),
            now,
            deadline,
        )
    if status is None or status in RETRYABLE_STATUSES:
        what = "network error" if status is None else f"status={status}"
        # Only 429, x-should-retry: true and a failed connect prove the broker did not apply it.
        if not_idempotent and not (status is None and not_sent):
            return Decision(
                retry=False,
                reason=f"{what} after the request was sent; outcome unknown, not idempotent",
                retry_after=hint,
                outcome_unknown=True,
            )
        return transient(what)
    return Decision(retry=False, reason=f"status={status}", retry_after=hint)


def _bounded(d: Decision, now: float, deadline: float | None) -> Decision:
    if deadline is not None and now + d.delay > deadline:
        return Decision(
            retry=False, reason=d.reason + " (deadline before retry)", retry_after=d.retry_after
        )
    return d


@dataclass
class Endpoints:
    """Broker URLs in the order given, with an unhealthy mark per URL (docs/retries.md §4)."""

    urls: Sequence[str]
    health_retry_after: float = HEALTH_RETRY_AFTER
    unhealthy_until: dict[str, float] = field(default_factory=dict)

    def pick(
        self, now: float, skip: frozenset[str] = frozenset(), tried: frozenset[str] = frozenset()
    ) -> str:
        """The first URL not in ``skip`` that is healthy and not in ``tried`` (the URLs this call
        asked already); else healthy; else not tried; else any; else the first. A retry thus
        asks every URL once before it asks one again, as in Go and TS."""
        for want_healthy, want_untried in ((True, True), (True, False), (False, True)):
            for u in self.urls:
                if u in skip or (want_untried and u in tried):
                    continue
                if not want_healthy or self.unhealthy_until.get(u, 0.0) <= now:
                    return u
        for u in self.urls:
            if u not in skip:
                return u
        return self.urls[0]

    def mark_unhealthy(self, url: str, now: float) -> None:
        if len(self.urls) > 1:
            self.unhealthy_until[url] = now + self.health_retry_after


class CallState:
    """Retry bookkeeping for one logical call; the transports only do the I/O and the sleeping."""

    def __init__(
        self,
        settings: RetrySettings,
        endpoints: Endpoints,
        *,
        long_poll: bool,
        clock: Callable[[], float],
        rng: Callable[[], float],
        deadline: float | None = None,
        not_idempotent: bool = False,
    ) -> None:
        self.settings = settings
        self.not_idempotent = not_idempotent
        self.endpoints = endpoints
        self.long_poll = long_poll
        self.clock = clock
        self.rng = rng
        self.deadline = deadline
        self.retries_429 = 0
        self.retries_transient = 0
        self.tried: set[str] = set()
        self.cut_at_deadline = False  # the transport's: the current attempt ends at the deadline
        self.url = endpoints.pick(clock())
        self.tried.add(self.url)

    @property
    def attempts(self) -> int:
        """Attempts made so far (after :meth:`after` was called for the last one)."""
        return 1 + self.retries_429 + self.retries_transient

    def retry_count_header(self) -> str:
        return str(self.retries_429 + self.retries_transient)

    def after(
        self,
        status: int | None,
        headers: Mapping[str, str] | None,
        *,
        not_sent: bool = False,
        by_deadline: bool = False,
    ) -> Decision:
        """Decide after an attempt, and move to the next URL / spend the budget when retrying.
        ``by_deadline`` says the caller's deadline ended the attempt: that says nothing about the
        broker, so its URL is not marked (as a Go context deadline)."""
        now = self.clock()
        d = decide(
            self.settings,
            status=status,
            headers=headers,
            long_poll=self.long_poll,
            retries_429=self.retries_429,
            retries_transient=self.retries_transient,
            now=now,
            rand=self.rng(),
            deadline=self.deadline,
            not_idempotent=self.not_idempotent,
            not_sent=not_sent,
        )
        failed = status is None or status == 408 or status >= 500
        if failed and not by_deadline:
            self.endpoints.mark_unhealthy(self.url, now)
        if not d.retry:
            return d
        if d.budget == "429":
            self.retries_429 += 1
        else:
            self.retries_transient += 1
        if d.failover and len(self.endpoints.urls) > 1:
            nxt = self.endpoints.pick(now, skip=frozenset({self.url}), tried=frozenset(self.tried))
            if nxt != self.url and nxt not in self.tried:
                # A broker not yet tried in this call is asked at once.
                d = Decision(
                    retry=True,
                    reason=d.reason + f" failover to {nxt}",
                    delay=0.0,
                    budget=d.budget,
                    retry_after=d.retry_after,
                    failover=True,
                )
            self.url = nxt
            self.tried.add(nxt)
        return d


def kv_ops_idempotent(ops: Sequence[Mapping[str, object]]) -> bool:
    """Whether KV ops end in the same state however often they land, so a request holding them
    may be resent after a lost answer: reads, and puts and deletes without ``expect``. An incr, a
    putIfAbsent or a conditional write may apply twice (docs/retries.md §5)."""
    return all(o.get("op") not in ("incr", "putIfAbsent") and o.get("expect") is None for o in ops)
