"""The exception tree (docs/sdk-design.md §7, docs/retries.md §7)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lanes._types import AckResult, Item, Message, PushResult, TransactionResult

__all__ = [
    "APIConnectionError",
    "APIError",
    "APITimeoutError",
    "AckError",
    "AuthenticationError",
    "AutoAckDroppedError",
    "BadRequestError",
    "ClientClosedError",
    "ConflictError",
    "ConsumerStopped",
    "ConsumerStoppedError",
    "DroppedError",
    "EmptyTransactionError",
    "HandlerError",
    "InternalServerError",
    "InvalidItemError",
    "InvalidNameError",
    "InvalidValueError",
    "ItemError",
    "LanesError",
    "NotFoundError",
    "NotImplementedByBrokerError",
    "OutcomeUnknownError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "PushError",
    "RateLimitError",
    "TransactionError",
    "UnexpectedAnswerError",
    "UnsentError",
]


class LanesError(Exception):
    """Base class of every error the SDK raises."""


class APIError(LanesError):
    """A non-2xx answer after the retry policy gave up.

    ``code`` is the stable snake_case code from the body (``""`` when the body is not JSON),
    ``retry_after`` the server's delay hint in seconds, ``attempts`` the attempts made.
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str = "",
        retry_after: float | None = None,
        body: bytes = b"",
        attempts: int = 1,
    ) -> None:
        # The text of Go's APIError.Error(), so logs of both read alike.
        super().__init__(f"lanes: {status}{f' {code}' if code else ''}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after
        self.body = body
        self.attempts = attempts

    @property
    def terminal(self) -> bool:
        """Every 4xx but 429: the call will not succeed as it is sent, and a consume loop ends
        on it (Go's ``APIError.Terminal()``, TS's ``terminal``; docs/consuming.md §4)."""
        return 400 <= self.status < 500 and self.status != 429


class BadRequestError(APIError):
    """400: the broker refused the request as malformed or invalid (``code`` says which rule).
    Not retried; nothing was applied."""


class ConflictError(APIError):
    """409. Retried only when the answer carries ``x-should-retry: true``."""


class InternalServerError(APIError):
    """A 5xx other than 501 that outlived the retries (501 is
    :class:`NotImplementedByBrokerError`: a missing route, not a failure that may pass)."""


class RateLimitError(APIError):
    """429: the hint was above ``max_retry_after`` or the 429 budget was spent."""


class AuthenticationError(APIError):
    """401: the bearer token is missing, invalid or expired. Not retried; a consumer ends on it."""


class PermissionDeniedError(APIError):
    """403 (terminal)."""


class PayloadTooLargeError(APIError):
    """413 (terminal)."""


class NotFoundError(APIError):
    """404."""


class NotImplementedByBrokerError(APIError):
    """A 501 answer: a proxy, or a broker build without the route."""


class APIConnectionError(LanesError):
    """No response after the retries (connection refused, reset, DNS, timeout). ``url`` is the
    broker URL of the last attempt (Go's ``ConnectionError.URL``, TS's ``url``)."""

    def __init__(self, message: str, *, attempts: int = 1, url: str = "") -> None:
        super().__init__(message)
        self.attempts = attempts
        self.url = url


class APITimeoutError(APIConnectionError):
    """The last attempt timed out (``timeout``, or the ``deadline`` it was cut to) before the
    broker answered."""


class OutcomeUnknownError(LanesError):
    """A write that is not safe to repeat (a KV incr, put_if_absent or conditional write; a KV
    batch or transaction holding one and no push) failed after it was sent: a timeout, a reset, a
    408 or 5xx. The broker may have applied it, so the SDK did not resend it; read the state to
    find out (docs/retries.md §5). ``cause`` (also ``__cause__``) is the last attempt's
    :class:`APIError` or :class:`APIConnectionError`. When that attempt timed out, the error is
    also an :class:`APITimeoutError` (and :class:`APIConnectionError`), as in Go and TS: an
    ``except APITimeoutError`` catches it."""

    def __new__(cls, cause: APIError | APIConnectionError, *, attempts: int) -> OutcomeUnknownError:
        if cls is OutcomeUnknownError and isinstance(cause, APITimeoutError):
            cls = _TimedOutOutcomeUnknownError
        return super().__new__(cls, cause)

    def __init__(self, cause: APIError | APIConnectionError, *, attempts: int) -> None:
        super().__init__(
            f"lanes: outcome unknown (not retried, the write is not idempotent): {cause}"
        )
        self.cause = cause
        self.attempts = attempts


class _TimedOutOutcomeUnknownError(OutcomeUnknownError, APITimeoutError):
    """An OutcomeUnknownError whose last attempt timed out."""


class UnexpectedAnswerError(LanesError):
    """The broker answered 2xx with a body the SDK cannot use: not JSON (or not the route's
    shape), or another number of results than the request had items or operations (a proxy or a
    broker of another version in the way). The request may have been applied, so it is not a
    :class:`PushError`: pushing the same items again (same transaction ids) deduplicates.

    ``status`` is the HTTP status of an answer that cannot be decoded (0 for a count mismatch);
    ``body`` is the raw bytes of an answer that cannot be decoded, else the decoded answer.
    """

    def __init__(self, message: str, *, status: int = 0, body: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


_BY_STATUS: dict[int, type[APIError]] = {
    400: BadRequestError,
    409: ConflictError,
    429: RateLimitError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    413: PayloadTooLargeError,
    404: NotFoundError,
    501: NotImplementedByBrokerError,
}


def api_error_from(
    status: int,
    reason_phrase: str,
    body: bytes,
    *,
    retry_after: float | None,
    attempts: int,
) -> APIError:
    """Build the typed error for a non-2xx answer; never matches on the human text."""
    code, message = "", reason_phrase or f"HTTP {status}"
    try:
        parsed: Any = json.loads(body) if body else None
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        c, e = parsed.get("code"), parsed.get("error")
        if isinstance(c, str):
            code = c
        if isinstance(e, str) and e:
            message = e
    cls = _BY_STATUS.get(status, InternalServerError if status >= 500 else APIError)
    return cls(status, message, code=code, retry_after=retry_after, body=body, attempts=attempts)


@dataclass(frozen=True)
class ItemError:
    """One failed item of a push or an ack."""

    index: int
    transaction_id: str
    status: str
    message: str


class PushError(LanesError):
    """At least one pushed item came back ``failed``; ``results`` holds every item's verdict."""

    def __init__(self, items: Sequence[ItemError], results: Sequence[PushResult]) -> None:
        super().__init__(
            f"lanes: {len(items)} of {len(results)} pushed items failed"
            + (f": {items[0].message}" if items else "")
        )
        self.items = list(items)
        self.results = list(results)


class InvalidItemError(LanesError, TypeError):
    """A push (direct, buffered or in a transaction) got something it cannot send as given: a
    payload ``json`` cannot encode exactly (``bytes``, a ``datetime``, NaN or infinity, a lone
    surrogate, a cycle), a ``transaction_id``/``trace_id`` that is not a ``str``, an item with
    both ``data`` and ``payload``, or a ``str``/``bytes``/mapping instead of a list of items.
    ``index`` is the item's position (None for the items argument). Nothing was sent or buffered.
    """

    def __init__(self, index: int | None, reason: str) -> None:
        where = "items" if index is None else f"item #{index}"
        super().__init__(f"lanes: push {where}: {reason}")
        self.index = index


class InvalidValueError(LanesError, TypeError):
    """A KV value (direct, in a batch or a transaction rider) or a timer payload that ``json``
    cannot send as given (NaN or infinity, ``bytes`` as a KV value, a ``datetime``, a lone
    surrogate, a cycle). Nothing was sent. Go's ``InvalidKVValueError``, TS's
    ``InvalidValueError``."""


class InvalidNameError(LanesError, ValueError):
    """``buffer()``, a pop, ``consume()`` or ``messages()`` got a queue or partition name the
    broker refuses (empty, ``"."`` or ``".."``, a NUL character, not encodable as UTF-8, over 512
    bytes), and sent nothing: such a buffer could only drop what it holds, and an HTTP client
    would send such a pop to another route. Every call that takes a consumer group raises it
    for a group name of only white space (and, where the route names the group, an empty one),
    and every call that puts a name in its URL path for ``"."`` or ``".."``.
    ``field`` is ``"queue"``, ``"partition"``, ``"group"`` (or the path's other name: ``"key"``,
    ``"namespace"``, ...), ``value`` the name."""

    def __init__(self, field: str, value: str, reason: str, op: str = "buffer") -> None:
        super().__init__(f"lanes: {op}: {field} name {value!r} {reason}")
        self.field = field
        self.value = value


class ClientClosedError(LanesError):
    """The client was closed: its buffers take no new pushes, and the sync/async client's
    HTTP pool is gone, so direct calls raise this too. From the start of ``close()`` /
    ``aclose()``, ``consume()`` and ``messages()`` raise it: the close stops only the consumers
    and iterators made before it."""


class UnsentError(LanesError, TimeoutError):
    """``flush``/``flush_all``/``close`` ran out of time with ``unsent`` buffered items left."""

    def __init__(self, unsent: int) -> None:
        super().__init__(f"lanes: {unsent} buffered items unsent")
        self.unsent = unsent


class DroppedError(LanesError):
    """What a buffer's ``on_error`` gets when it gives up on ``items`` (:class:`Item`, ids
    kept): the broker refused each alone (400, 413) or the batch with 403. One flush reports
    all its dropped items in one DroppedError; ``cause`` is the broker's answer to the first
    (an :class:`APIError`)."""

    def __init__(self, items: Sequence[Item], cause: BaseException) -> None:
        super().__init__(f"lanes: push buffer dropped {len(items)} item(s): {cause}")
        self.items = list(items)
        self.cause = cause
        self.__cause__ = cause


class AutoAckDroppedError(LanesError):
    """What ``on_error`` gets (else a warning log) when ``count`` messages popped under server
    auto-ack were never handed to the handler or the iterator's caller (a hard stop, a
    cancelled consumer, an iterator left early): the broker committed them at the pop, so they
    are not redelivered."""

    def __init__(self, count: int, why: str) -> None:
        super().__init__(
            f"lanes: {count} message(s) popped under server auto-ack were dropped unhandled "
            f"({why}); the broker committed them, so they are not redelivered"
        )
        self.count = count


def failure_text(exc: BaseException) -> str:
    """A handler exception's text: ``str(exc)``, as Go's ``err.Error()`` and TS's
    ``error.message`` (a failed ack carries it, so the DLQ reads the same from all three SDKs);
    its type name when it has none."""
    return str(exc) or type(exc).__name__


# The transaction ids a HandlerError's text names at most, so a large batch's line stays
# readable; its ``messages`` hold them all.
_MAX_NAMED_TRANSACTIONS = 5


class HandlerError(LanesError):
    """What ``on_error`` gets, under ``report_handler_errors(True)``, when a handler raises:
    ``messages`` are the messages it was given (the one message of ``consume``, the partition
    slice of ``consume_batch``) and ``cause`` (also ``__cause__``) is its exception. ``str()``
    names the transaction ids, queue and partition, never a payload; the message's ``failed``
    ack (and its dead letter's ``errorMessage``) carries the handler's own text."""

    def __init__(self, messages: Sequence[Message], cause: BaseException) -> None:
        super().__init__(f"lanes: handler failed on {_describe(messages)}: {failure_text(cause)}")
        self.messages = list(messages)
        self.cause = cause
        self.__cause__ = cause


def _describe(messages: Sequence[Message]) -> str:
    """Messages named by transaction id, queue and partition (one partition's, as a batch
    slice is), as Go's HandlerError names them."""
    if not messages:
        return "no message"
    named = ", ".join(m.transaction_id for m in messages[:_MAX_NAMED_TRANSACTIONS])
    if len(messages) > _MAX_NAMED_TRANSACTIONS:
        named += f" and {len(messages) - _MAX_NAMED_TRANSACTIONS} more"
    first = messages[0]
    q, p = (json.dumps(n, ensure_ascii=False) for n in (first.queue, first.partition))
    where = f"(queue {q}, partition {p})"
    if len(messages) == 1:
        return f"transaction {named} {where}"
    return f"{len(messages)} messages, transactions {named} {where}"


class AckError(LanesError):
    """At least one ack answered ``success: false``; ``results`` holds every item's result."""

    def __init__(self, items: Sequence[ItemError], results: Sequence[AckResult]) -> None:
        super().__init__(
            f"lanes: {len(items)} of {len(results)} acks were not executed"
            + (f": {items[0].message}" if items else "")
        )
        self.items = list(items)
        self.results = list(results)


class TransactionError(LanesError):
    """The broker rolled the bundle back (``success: false``); nothing was committed.

    ``reason`` is the closed taxonomy (``duplicate``, ``ack_rejected``, ``kv_precondition``, …).
    ``attempts > 1`` with ``reason == "duplicate"`` means an earlier attempt probably committed.
    """

    def __init__(self, result: TransactionResult, attempts: int) -> None:
        super().__init__(f"lanes: transaction rolled back ({result.reason}): {result.error}")
        self.reason = result.reason
        self.message = result.error
        self.attempts = attempts
        self.result = result
        self.failed_index = result.failed_index
        self.kv_reason = result.kv_reason
        self.version = result.version
        self.value = result.value


class EmptyTransactionError(LanesError):
    """``commit()`` on a bundle with nothing in it; no request is sent."""


class ConsumerStoppedError(LanesError):
    """The consumer was stopped; raised into nothing, used as a cancellation cause and by
    iterators used after ``close()``."""


# The name before the Error suffix, kept so code written against it still works.
ConsumerStopped = ConsumerStoppedError
