"""Message-plane types (hand-written, docs/sdk-design.md §0); admin payloads come from
``lanes._generated.models``."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, TypeVar, overload

from pydantic import TypeAdapter

from lanes._generated import models

__all__ = [
    "AckResult",
    "AckStatus",
    "AutopilotEcho",
    "Item",
    "Message",
    "PopResult",
    "PushResult",
    "PushStatus",
    "RenewResult",
    "TransactionResult",
]

AckStatus = Literal["completed", "failed", "retry", "dlq"]
"""Ack statuses; the broker treats unknown strings as ``failed``, the SDK refuses them."""

ACK_STATUSES: frozenset[str] = frozenset({"completed", "failed", "retry", "dlq"})

PushStatus = Literal["queued", "duplicate", "buffered", "failed"]

TransactionResult = models.TransactionResult
"""The broker's answer to ``POST /api/v1/transaction`` (generated model)."""

QUEUE_MODE = "__QUEUE_MODE__"

T = TypeVar("T")


@functools.lru_cache(maxsize=256)
def _adapter(data_type: Any) -> TypeAdapter[Any]:
    """One TypeAdapter per type: building its validator costs far more than a validation."""
    return TypeAdapter(data_type)


@dataclass(frozen=True)
class Item:
    """One message to push. ``transaction_id`` is the dedup key (a UUIDv7 is minted when None);
    derive it from the work (an upstream event id) to make retries across restarts idempotent."""

    data: Any
    transaction_id: str | None = None
    trace_id: str | None = None


def _ts(v: Any) -> datetime | None:
    if not isinstance(v, str) or not v:
        return None
    try:
        return datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError:
        return None


@dataclass(eq=False)
class Message:
    """A leased message. ``lease_id``, ``partition_id``, ``consumer_group`` and
    ``transaction_id`` make it addressable by ``ack``, ``renew`` and ``transaction().ack``.
    ``queue`` comes from the builder (``""`` on discovery pops)."""

    id: str
    transaction_id: str
    data: Any
    partition_id: str
    partition: str
    lease_id: str
    consumer_group: str
    queue: str = ""
    trace_id: str | None = None
    producer_sub: str | None = None
    created_at: datetime | None = None
    _acked: bool = field(default=False, repr=False)

    @overload
    def decode(self, data_type: type[T]) -> T: ...
    @overload
    def decode(self, data_type: Any) -> Any: ...  # a type form such as Annotated[...]

    def decode(self, data_type: Any) -> Any:
        """``data`` validated as ``data_type`` (a pydantic model, a dataclass, a TypedDict,
        ``list[int]``, …) with pydantic's default (lax) validation, as Go's ``m.Decode(&v)``;
        raises ``pydantic.ValidationError`` when it does not fit. ``data`` is left as it came."""
        try:
            adapter = _adapter(data_type)
        except TypeError:  # an unhashable type (say, Annotated with a list): not cached
            adapter = TypeAdapter(data_type)
        return adapter.validate_python(self.data)

    @classmethod
    def from_wire(cls, m: dict[str, Any], queue: str) -> Message:
        return cls._from_wire(m, queue, _ts(m.get("createdAt")))

    @classmethod
    def _from_wire(cls, m: dict[str, Any], queue: str, created_at: datetime | None) -> Message:
        """``from_wire`` with ``createdAt`` already read (a pop's messages share it per push)."""
        get = m.get
        # Positional, in the fields' order: keyword arguments more than double the cost.
        return cls(
            str(get("id", "")),
            str(get("transactionId", "")),
            get("data"),
            str(get("partitionId", "")),
            str(get("partition", "")),
            str(get("leaseId") or ""),
            str(get("consumerGroup") or QUEUE_MODE),
            queue,
            get("traceId"),
            get("producerSub"),
            created_at,
        )


@dataclass(frozen=True)
class AutopilotEcho:
    """The sizes the broker chose when the pop engaged autopilot."""

    partitions: int
    batch: int
    wait_ms: int | None = None


@dataclass(frozen=True)
class PopResult:
    """One pop: the leased messages plus the broker's echo (empty on a 204)."""

    messages: list[Message]
    lease_id: str = ""
    consumer_group: str = ""
    partitions_claimed: int = 0
    autopilot: AutopilotEcho | None = None
    # The lease's length (the pop's lease_seconds, else the queue's leaseTime) and its end on the
    # database's clock, which may differ from this machine's: count from lease_seconds to compare
    # with now. None with server auto-ack, or from a broker that does not send them.
    lease_seconds: int | None = None
    lease_expires_at: datetime | None = None


@dataclass(frozen=True)
class PushResult:
    """One item's verdict: ``queued``, ``duplicate`` (nothing written, original id),
    ``buffered`` (on the broker's disk spool) or ``failed`` (stored nowhere)."""

    index: int
    message_id: str
    transaction_id: str
    queue: str
    status: str
    error: str | None = None


@dataclass(frozen=True)
class AckResult:
    """One ack's result; ``success`` False means the instruction was not executed."""

    index: int
    transaction_id: str
    success: bool
    error: str | None = None
    lease_released: bool = False
    dlq: bool = False
    noop: bool = False
    dropped: bool = False


@dataclass(frozen=True)
class RenewResult:
    """One lease extension."""

    lease_id: str
    success: bool
    renewed: int
    new_expires_at: datetime | None = None
