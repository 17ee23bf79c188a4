"""The pacing and error policy of a pop loop, shared by the consume engine (``_consumer``) and the
message iterators (``_iter``), blocking and asyncio alike (docs/consuming.md §3 and §4): which
failed pops are waited out and for how long, the pause after an empty answer, which failed acks
end the loop and which are resent, and where the errors a loop goes on after are reported. The
callers pop, ack and wait."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from datetime import datetime, timezone

from lanes import _protocol as P
from lanes._exceptions import APIConnectionError, APIError, RateLimitError, UnexpectedAnswerError
from lanes._types import AutopilotEcho, PopResult

ErrorCallback = Callable[[BaseException], None]


def transient(e: BaseException) -> bool:
    """Errors a loop waits out: network failures, 429 and 5xx except 501 (a proxy, or a broker
    build without the route: it will not fix itself, so it is terminal). A 408 that outlived the
    retry policy is a 4xx like the others: terminal, as in Go and TS."""
    if _for_want_of_a_broker(e):
        return True
    return isinstance(e, APIError) and e.status >= 500 and e.status != 501


_STATUSES_FOR_WANT_OF_A_BROKER = (429, 502, 503, 504)


def _for_want_of_a_broker(e: BaseException) -> bool:
    """Whether e itself is the SDK's error for want of a broker (see broker_unavailable)."""
    if isinstance(e, APIConnectionError):
        return True
    return isinstance(e, APIError) and e.status in _STATUSES_FOR_WANT_OF_A_BROKER


def broker_unavailable(e: BaseException) -> bool:
    """Whether e is, or wraps (``raise ... from``), the SDK's own error for want of a broker: no
    answer after the retries (:class:`APIConnectionError`: refused, reset, DNS, timeout), or a
    502, 503, 504 or 429 :class:`APIError`. A handler failing with it has its message released
    with ``retry``, which spends no retry, so an outage dead-letters no sound message
    (docs/consuming.md §3 step 5). Not a 500 nor another 4xx: a message can cause those."""
    seen = 0
    cause: BaseException | None = e
    while cause is not None and seen < 16:  # bounded: a cause chain can loop
        if _for_want_of_a_broker(cause):
            return True
        cause = cause.__cause__
        seen += 1
    return False


def rate_limited_pause(e: BaseException) -> float | None:
    """When the SDK's error for want of a broker that e is or wraps (see broker_unavailable) is
    a 429: the wait before the next pop, as after a pop's own 429 (:meth:`PollPacer.
    after_error`): its Retry-After hint, or 1 s without one. None for any other error."""
    seen = 0
    cause: BaseException | None = e
    while cause is not None and seen < 16:
        if _for_want_of_a_broker(cause):
            if isinstance(cause, APIError) and cause.status == 429:
                return cause.retry_after if cause.retry_after is not None else 1.0
            return None
        cause = cause.__cause__
        seen += 1
    return None


def ack_error_ends_loop(e: BaseException) -> bool:
    """A failed ack that ends the consumer or iterator, as the same answer to a pop would: 403,
    413, any other 4xx but 408, 409 and 429, and 501. Anything else (network, 5xx, per-item
    ``AckError``) is reported and the loop goes on: the consume loop and the iterators resend a
    network failure, 429 or 5xx while the lease lasts (:class:`AckResend`); otherwise the
    messages redeliver after their lease."""
    if not isinstance(e, APIError):
        return False
    return e.status == 501 or (400 <= e.status < 500 and e.status not in (408, 409, 429))


class AckResend:
    """The resending of one pop's failed ack call, for the consume engine and the iterators alike
    (docs/consuming.md §4): a call that failed for want of a broker (network failure, 429, 5xx
    but 501) is resent after the loop's error backoff (a 429: after its hint) until it lands, or
    until the next attempt would come within ``ACK_RESEND_MARGIN_S`` of the lease's expiry. A
    lost ack would hold the partition until the lease expires and redeliver the whole pop; a
    resend is safe, since every item names the pop's lease: a ``completed`` the broker already
    applied answers ``noop``, and a nack it applied released the lease, so its resend is refused,
    changing nothing. No resend starts after ``until`` (``time.monotonic()``; an iterator's
    leave). The callers send, report and wait (a hard stop cuts the wait short)."""

    def __init__(self, expires_at: datetime, until: float | None = None) -> None:
        self.expires_at = expires_at  # the latest expiry known for the pop's lease
        self.until = until
        self.failures = 0  # failed calls so far, 429s aside (as the pop's backoff counts them)

    def after_error(self, err: Exception) -> float | None:
        """Seconds to wait before resending after a failed call that does not end the loop;
        None when it is not resent: not a broker failure (a 408, 409, an unusable answer), or
        the lease ends first (its messages redeliver after it)."""
        if isinstance(err, RateLimitError):
            wait = err.retry_after if err.retry_after is not None else 1.0
        elif transient(err):
            self.failures += 1
            wait = P.loop_error_backoff(self.failures)
        else:
            return None
        left = (self.expires_at - datetime.now(timezone.utc)).total_seconds()
        if left < wait + P.ACK_RESEND_MARGIN_S:
            return None
        if self.until is not None and time.monotonic() + wait > self.until:
            return None  # the leave's budget ends first: the pop redelivers after its lease
        return wait


class ErrorReporter:
    """Where a loop's errors go: the ``on_error`` callback when set (a broken callback must not
    end the loop), else one warning line on the client's logger (``lanes`` by default)."""

    def __init__(self, on_error: ErrorCallback | None, logger: logging.Logger, loop: str) -> None:
        self.on_error = on_error
        self.logger = logger
        self.loop = loop  # "consume" or "messages", named in the log line

    def __call__(self, err: BaseException, op: str) -> None:
        if self.on_error is None:
            self.logger.warning("lanes: %s: %s: %s", self.loop, op, err)
            return
        with contextlib.suppress(Exception):
            self.on_error(err)


class PollPacer:
    """One loop's pacing state: consecutive failed pops, consecutive fast-empty long polls and
    the last autopilot echo. Call :meth:`popping` right before each pop."""

    def __init__(
        self,
        spec: P.QueueSpec,
        report: Callable[[Exception, float], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.parks = spec.parks
        self.timeout_millis = spec.timeout_millis
        # A long poll answering empty sooner than this did not park (docs/consuming.md §3 step 2).
        self.fast_empty_under = spec.timeout_millis / 1000.0 / 10
        self.report = report  # hears of each failed pop waited out, with the pause before the next
        self.clock = clock
        self.errors = 0  # consecutive failed pops waited out (429s aside)
        self.fast_empties = 0  # consecutive long polls that answered empty without waiting
        self.last_echo: AutopilotEcho | None = None
        self._pop_started = 0.0

    def popping(self, timeout_millis: int | None = None) -> None:
        """A pop starts, with the long-poll timeout it sends (None: the builder's; less when an
        idle timeout cut it, :func:`lanes._protocol.cut_long_poll`)."""
        sent = self.timeout_millis if timeout_millis is None else timeout_millis
        self.fast_empty_under = sent / 1000.0 / 10
        self._pop_started = self.clock()

    def after_error(self, err: Exception) -> float | None:
        """Seconds to wait before popping again after a failed pop (reported first): the 429's
        hint (or 1 s), else the loop backoff (network, 5xx, an answer the SDK cannot use). None
        for an error that ends the loop (403, 413, other 4xx, 501), which is not reported here."""
        if isinstance(err, RateLimitError):
            pause = err.retry_after if err.retry_after is not None else 1.0
        elif transient(err) or isinstance(err, UnexpectedAnswerError):
            # A 2xx the SDK cannot use (a proxy's page) is waited out like a 5xx, as in Go and TS.
            self.errors += 1
            pause = P.loop_error_backoff(self.errors)
        else:
            return None
        self.report(err, pause)
        return pause

    def after_answer(self, res: PopResult) -> float:
        """Seconds to wait before popping again after an answer: none when it holds messages or
        a long poll waited, 100 ms doubling to 2 s while long polls answer empty in under a tenth
        of their timeout, else (no long poll) the broker's waitMs advice (or 100 ms)."""
        self.errors = 0
        if res.autopilot is not None:
            self.last_echo = res.autopilot
        if res.messages:
            self.fast_empties = 0
            return 0.0
        if not self.parks:
            return P.empty_poll_pause(res.autopilot or self.last_echo)
        if self.clock() - self._pop_started >= self.fast_empty_under:
            self.fast_empties = 0
            return 0.0
        self.fast_empties += 1
        return P.fast_empty_pause(self.fast_empties)
