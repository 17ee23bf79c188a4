"""Transaction bundles (docs/sdk-design.md §5): the body is built once here; ``Transaction`` and
``AsyncTransaction`` only differ in ``commit``. Operations are kept encoded, so a pushed payload
is encoded once, by the item check, like a direct push."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from lanes import _protocol as P
from lanes import _requests as R
from lanes._exceptions import EmptyTransactionError, LanesError
from lanes._http import encode_json
from lanes._types import AckStatus, Message, TransactionResult

if TYPE_CHECKING:
    from lanes._client import AsyncLanes, Lanes

TB = TypeVar("TB", bound="_TxBase")


class TxQueue(Generic[TB]):
    """``transaction().queue(q)[.partition(p)].push(items)``; ``push`` returns the bundle."""

    def __init__(self, tx: TB, queue: str, partition: str | None = None) -> None:
        self._tx, self._queue, self._partition = tx, queue, partition

    def partition(self, name: str) -> TxQueue[TB]:
        return TxQueue(self._tx, self._queue, name)

    def push(self, items: Sequence[Any]) -> TB:
        op = P.push_operation(self._queue, self._partition, items)
        if op is not None:
            self._tx._ops.append(op)
            self._tx._has_push = True
        return self._tx


class _TxBase:
    """Accumulates one bundle. Unlike queue builders, a transaction is a mutable collector."""

    def __init__(self) -> None:
        self._ops: list[bytes] = []  # each operation's JSON, in the order added
        self._has_push = False
        self._leases: dict[str, None] = {}
        self._kv: list[dict[str, Any]] = []
        self._timers: list[dict[str, Any]] = []

    def queue(self: TB, name: str) -> TxQueue[TB]:
        return TxQueue(self, name)

    def ack(
        self: TB,
        messages: Message | Sequence[Message],
        status: AckStatus = "completed",
        *,
        group: str | None = None,
        error: str | None = None,
        consumer_group: str | None = None,
        without_lease: bool = False,
    ) -> TB:
        """Ack leased messages in the bundle; their lease ids go to ``requiredLeases``.
        ``group`` names the consumer group as in ``client.ack``; ``consumer_group`` is accepted
        as an alias (the wire's ``consumerGroup``), and giving both is an error.
        ``without_lease=True`` raises :class:`LanesError`: a transaction ack has no lease-less
        form (the broker gives it the cursor's live lease), as Go's and TypeScript's refuse it."""
        if without_lease:
            raise LanesError("lanes: a transaction ack cannot be lease-less (without_lease)")
        if group is not None and consumer_group is not None and group != consumer_group:
            raise ValueError("lanes: ack takes group or consumer_group, not both")
        group = group if group is not None else consumer_group
        msgs = [messages] if isinstance(messages, Message) else list(messages)
        for m in msgs:
            e = P.ack_entry(m, status, error)
            op: dict[str, Any] = {
                "type": "ack",
                "transactionId": e.transaction_id,
                "partitionId": e.partition_id,
                "status": e.status,
                "consumerGroup": P.group_of(m, group),
            }
            if e.lease_id:
                op["leaseId"] = e.lease_id
                self._leases.setdefault(e.lease_id, None)
            if error is not None:
                op["error"] = error
            self._ops.append(encode_json(op))
        return self

    def kv_put(
        self: TB,
        ns: str,
        key: str,
        value: Any,
        *,
        ttl_seconds: float | None = None,
        expect: int | None = None,
        required: bool | None = None,
    ) -> TB:
        """Write a key in the same commit (no ``ttl_seconds`` = forever)."""
        self._kv.append(
            R.kv_op(
                "put",
                ns,
                key,
                value=value,
                ttl_seconds=ttl_seconds,
                expect=expect,
                required=required,
            )
        )
        return self

    def kv_put_if_absent(
        self: TB,
        ns: str,
        key: str,
        value: Any,
        *,
        ttl_seconds: float | None = None,
        required: bool = False,
    ) -> TB:
        """Write a key that is absent. By default (the wire's) a present key is left as it is
        and the bundle commits; ``required=True`` makes it an idempotency gate: a present key
        rolls the bundle back with ``reason == "kv_precondition"``."""
        self._kv.append(
            R.kv_op(
                "putIfAbsent",
                ns,
                key,
                value=value,
                ttl_seconds=ttl_seconds,
                required=required or None,
            )
        )
        return self

    def kv_delete(
        self: TB,
        ns: str,
        key: str,
        *,
        expect: int | None = None,
        required: bool | None = None,
    ) -> TB:
        """Delete a key in the same commit. ``expect=N``: only at version N; ``required=True``
        turns a lost ``expect`` into a rollback with ``reason == "kv_precondition"``."""
        self._kv.append(R.kv_op("delete", ns, key, expect=expect, required=required))
        return self

    def kv_incr(
        self: TB,
        ns: str,
        key: str,
        delta: int = 1,
        *,
        ttl_seconds: float | None = None,
        min: int | None = None,
        max: int | None = None,
        required: bool | None = None,
    ) -> TB:
        """Add ``delta`` to a numeric key (created at 0) in the same commit. ``min``/``max`` are
        inclusive bounds (crossing one leaves the key unapplied with ``reason == "limit"``);
        ``required=True`` turns that into a rollback with ``reason == "kv_precondition"``."""
        self._kv.append(
            R.kv_op(
                "incr",
                ns,
                key,
                delta=delta,
                ttl_seconds=ttl_seconds,
                min=min,
                max=max,
                required=required,
            )
        )
        return self

    def timer_schedule(
        self: TB,
        queue: str,
        key: str,
        *,
        delay_millis: int,
        payload: Any = R.NO_PAYLOAD,
        partition: str | None = None,
        op: Literal["schedule", "reschedule"] = "schedule",
    ) -> TB:
        self._timers.append(
            R.timer_op(
                op, queue, key, delay_millis=delay_millis, payload=payload, partition=partition
            )
        )
        return self

    def kv_get(self: TB, ns: str, key: str) -> TB:
        """Read a key inside the bundle, after the riders before it (the result is in
        ``commit().kv``), as Go's ``KV(lanes.KVGet(...))`` and TS's ``tx.kv.get`` do."""
        self._kv.append(R.kv_op("get", ns, key))
        return self

    def timer_cancel(self: TB, queue: str, key: str) -> TB:
        self._timers.append(R.timer_op("cancel", queue, key))
        return self

    def body(self) -> bytes:
        """The encoded wire body (``requiredLeases``, ``kv`` and ``timers`` are top-level, only
        when non-empty)."""
        if not (self._ops or self._kv or self._timers):
            raise EmptyTransactionError("lanes: transaction has no operations to commit")
        body = b'{"operations":[' + b",".join(self._ops) + b"]"
        for name, value in (
            ("requiredLeases", list(self._leases)),
            ("kv", self._kv),
            ("timers", self._timers),
        ):
            if value:
                body += b',"' + name.encode() + b'":' + encode_json(value)
        return body + b"}"

    def _request(self) -> R.Req[TransactionResult]:
        return R.transaction(self.body(), has_push=self._has_push, kv=self._kv)


class Transaction(_TxBase):
    """Sync bundle: ``client.transaction().queue("out").push([...]).ack(msg).commit()``."""

    def __init__(self, client: Lanes) -> None:
        super().__init__()
        self._client = client

    def commit(self) -> TransactionResult:
        """Send the bundle; raise :class:`TransactionError` (with ``reason``) on rollback."""
        return self._client._call(self._request())


class AsyncTransaction(_TxBase):
    """Asyncio twin of :class:`Transaction`."""

    def __init__(self, client: AsyncLanes) -> None:
        super().__init__()
        self._client = client

    async def commit(self) -> TransactionResult:
        return await self._client._call(self._request())
