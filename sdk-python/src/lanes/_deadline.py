"""A deadline over every SDK call made inside a ``with`` block, like a Go context deadline
(docs/retries.md §3). It lives in a context variable, so it follows the code that runs inside the
block, sync or async, and no call signature has to carry it."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["current_deadline", "deadline"]

_DEADLINE: ContextVar[float | None] = ContextVar("lanes_deadline", default=None)


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Bound every SDK call inside the block to ``seconds`` from now (nested: the earlier wins).

    A retry whose wait would pass the deadline is not attempted: the call raises its last real
    error at once (a 503 stays an :class:`~lanes.InternalServerError`, a 429 a
    :class:`~lanes.RateLimitError`). An attempt still running at the deadline is cut there and
    raises :class:`~lanes.APITimeoutError` (an :class:`~lanes.APIConnectionError`). Start
    long-lived consumers outside the block: they would inherit it. ``asyncio`` cancellation
    (``wait_for``, ``timeout``) is a cancellation instead and raises ``CancelledError`` /
    ``TimeoutError``.
    """
    if math.isnan(seconds) or seconds < 0:
        raise ValueError(f"lanes.deadline: seconds must be >= 0, got {seconds}")
    at = time.time() + seconds
    outer = _DEADLINE.get()
    token = _DEADLINE.set(at if outer is None else min(outer, at))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def current_deadline() -> float | None:
    """The enclosing :func:`deadline` as epoch seconds, or None."""
    return _DEADLINE.get()
