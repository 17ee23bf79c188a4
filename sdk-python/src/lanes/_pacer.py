"""The pacing of a pop loop, shared by the consume engine (``_consumer``) and the message
iterators (``_iter``), blocking and asyncio alike (docs/consuming.md §3 and §4): which failed pops
are waited out and for how long, and the pause after an empty answer. The callers pop and wait."""

from __future__ import annotations

from collections.abc import Callable

from lanes import _protocol as P
from lanes._exceptions import APIConnectionError, APIError, RateLimitError
from lanes._types import AutopilotEcho, PopResult


def transient(e: BaseException) -> bool:
    """Errors a loop waits out: network failures, 429 and 5xx except 501 (a proxy, or a broker
    build without the route: it will not fix itself, so it is terminal). A 408 that outlived the
    retry policy is a 4xx like the others: terminal, as in Go and TS."""
    if isinstance(e, APIConnectionError):
        return True
    if isinstance(e, APIError):
        return e.status == 429 or (e.status >= 500 and e.status != 501)
    return False


class PollPacer:
    """One loop's pacing state: consecutive failed pops and the last autopilot echo."""

    def __init__(self, parks: bool, report: Callable[[Exception, float], None]) -> None:
        self.parks = parks
        self.report = report  # hears of each failed pop waited out, with the pause before the next
        self.errors = 0  # consecutive failed pops waited out (429s aside)
        self.last_echo: AutopilotEcho | None = None

    def after_error(self, err: Exception) -> float | None:
        """Seconds to wait before popping again after a failed pop (reported first): the 429's
        hint (or 1 s), else the loop backoff. None for an error that ends the loop (403, 413,
        other 4xx, 501), which is not reported here."""
        if isinstance(err, RateLimitError):
            pause = err.retry_after if err.retry_after is not None else 1.0
        elif transient(err):
            self.errors += 1
            pause = P.loop_error_backoff(self.errors)
        else:
            return None
        self.report(err, pause)
        return pause

    def after_answer(self, res: PopResult) -> float:
        """Seconds to wait before popping again after an answer: none when it holds messages or
        the pop parks, else the broker's waitMs advice (or 100 ms)."""
        self.errors = 0
        if res.autopilot is not None:
            self.last_echo = res.autopilot
        if res.messages or self.parks:
            return 0.0
        return P.empty_poll_pause(res.autopilot or self.last_echo)
