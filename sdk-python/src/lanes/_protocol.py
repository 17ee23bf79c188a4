"""Pure wire rules shared by the sync and async clients: item normalisation, pop query assembly
(docs/consuming.md §2), ack bodies and batching, result checking. No I/O here."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import secrets
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from datetime import time as clock_time
from typing import Any, Literal, NamedTuple
from urllib.parse import quote, quote_plus

from lanes._exceptions import (
    AckError,
    InvalidItemError,
    ItemError,
    PushError,
    TransactionError,
    UnexpectedAnswerError,
)
from lanes._names import check_group, check_names
from lanes._types import (
    ACK_STATUSES,
    QUEUE_MODE,
    AckResult,
    AutopilotEcho,
    Item,
    Message,
    PopResult,
    PushResult,
    RenewResult,
    TransactionResult,
    _ts,
)

AUTOPILOT_ENV = "LANES_SDK_POP_AUTOPILOT"
_OFF_VALUES = frozenset({"off", "false", "0", "no", "disabled"})
DEFAULT_POP_TIMEOUT_MS = 30_000
AUTOPILOT_BATCH = 100  # the broker's automatic batch (http-api-v1.md, "Pop autopilot")
LONG_POLL_SLACK = 5.0
EMPTY_POLL_PAUSE = 0.1
FAST_EMPTY_PAUSE_MAX = 2.0

_new_object = object.__new__
_NOT_READ = object()


def autopilot_from_env(environ: Mapping[str, str] | None = None) -> bool:
    """False when ``LANES_SDK_POP_AUTOPILOT`` is off/false/0/no/disabled (trimmed, any case)."""
    env = os.environ if environ is None else environ
    return env.get(AUTOPILOT_ENV, "").strip().lower() not in _OFF_VALUES


def uuid7() -> str:
    """A UUIDv7 string: 48-bit Unix milliseconds, version 7, variant 10, random bits."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(secrets.token_bytes(10), "big")
    v = (ms & ((1 << 48) - 1)) << 80
    v |= 0x7 << 76
    v |= ((rand >> 62) & 0xFFF) << 64
    v |= 0b10 << 62
    v |= rand & ((1 << 62) - 1)
    h = f"{v:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


# ---------------------------------------------------------------------------------------------
# Producing

_ITEM_KEYS = frozenset(
    {"data", "payload", "transaction_id", "transactionId", "trace_id", "traceId"}
)


def item_list(items: Any) -> list[Any]:
    """The items of one push, from any iterable but a ``str``, ``bytes`` or mapping: those
    would become one message per character, byte or key (the TypeScript SDK refuses them too)."""
    if isinstance(items, (str, bytes, bytearray, Mapping)) or not isinstance(items, Iterable):
        raise InvalidItemError(None, f"want a list of items, got {type(items).__name__}")
    return list(items)


def _optional_id(index: int, name: str, v: Any) -> str | None:
    """An id is a ``str`` or absent (None, ""); anything else is refused, never converted, so
    the same item pushed from Python and TypeScript carries the same id."""
    if v is None or v == "":
        return None
    if not isinstance(v, str):
        raise InvalidItemError(index, f"{name} must be a str, got {type(v).__name__} {v!r}")
    try:
        v.encode()
    except UnicodeEncodeError as e:
        raise InvalidItemError(index, f"{name} is not valid UTF-8: {e}") from e
    return v


def _not_json(value: Any) -> Any:
    """The encoder's refusal of a value ``json`` has no form for, naming what to send instead
    for the types an application most often hands over (the payload must be JSON as given)."""
    kind = type(value).__name__
    if callable(getattr(value, "model_dump", None)):
        fix = f'push {kind}.model_dump(mode="json")'
    elif dataclasses.is_dataclass(value):
        fix = f"push dataclasses.asdict({kind})"
    elif isinstance(value, (date, clock_time)):
        fix = f"push {kind}.isoformat()"
    else:
        raise TypeError(f"Object of type {kind} is not JSON serializable")
    raise TypeError(f"Object of type {kind} is not JSON serializable: {fix}")


# One encoder for every item: json.dumps with options builds a new encoder per call.
_ITEM_ENCODER = json.JSONEncoder(
    separators=(",", ":"), allow_nan=False, ensure_ascii=False, default=_not_json
)


def json_bytes(value: Any) -> bytes:
    """``value`` as JSON exactly as the broker will store it, else TypeError/ValueError (NaN,
    infinity, a lone surrogate, a type ``json`` cannot encode)."""
    return _ITEM_ENCODER.encode(value).encode()


def _payload_json(index: int, payload: Any) -> bytes:
    """The payload's JSON, or :class:`InvalidItemError` for a payload ``json`` cannot send
    exactly as the broker would store it."""
    if isinstance(payload, (bytes, bytearray)):
        raise InvalidItemError(index, "bytes are not JSON (decode text, or send base64)")
    try:
        return json_bytes(payload)
    except (TypeError, ValueError, RecursionError) as e:  # UnicodeEncodeError is a ValueError
        raise InvalidItemError(index, f"payload is not JSON: {e}") from e


class CheckedItem(NamedTuple):
    """A push item that passed the checks, as it will be stored. ``payload_json`` is the
    encoding the check made, reused for the request body so no payload is encoded twice."""

    payload: Any
    payload_json: bytes
    transaction_id: str
    trace_id: str | None

    def as_item(self) -> Item:
        return Item(data=self.payload, transaction_id=self.transaction_id, trace_id=self.trace_id)


def check_item(item: Any, index: int = 0) -> CheckedItem:
    """Push item number ``index``, checked; a missing transaction id is minted (UUIDv7) once, here.

    Accepts :class:`Item`, an envelope dict (``data`` or ``payload`` plus optional
    ``transaction_id``/``transactionId``/``trace_id``/``traceId``, and no other key), or a bare
    JSON value (any other dict is a bare value, stored whole). Raises :class:`InvalidItemError`
    for an item that would not be stored as given.
    """
    if isinstance(item, CheckedItem):
        return item
    payload, tid, trace = item, None, None
    if isinstance(item, Item):
        payload, tid, trace = item.data, item.transaction_id, item.trace_id
    elif (
        isinstance(item, dict)
        and ("data" in item or "payload" in item)
        and _ITEM_KEYS.issuperset(item)
    ):
        if "data" in item and "payload" in item:
            raise InvalidItemError(index, "has both data and payload (use one)")
        payload = item["payload"] if "payload" in item else item["data"]
        tid = item.get("transaction_id", item.get("transactionId"))
        trace = item.get("trace_id", item.get("traceId"))
    payload_json = _payload_json(index, payload)
    return CheckedItem(
        payload,
        payload_json,
        _optional_id(index, "transaction_id", tid) or uuid7(),
        _optional_id(index, "trace_id", trace),
    )


def check_items(items: Iterable[Any]) -> list[CheckedItem]:
    return [check_item(it, i) for i, it in enumerate(item_list(items))]


def push_items(queue: str, partition: str | None, items: Iterable[Any]) -> list[dict[str, Any]]:
    """The wire items of a push as dicts: the reference the encoded items are tested against."""
    wire: list[dict[str, Any]] = []
    for c in check_items(items):
        w: dict[str, Any] = {"queue": queue}
        if partition:
            w["partition"] = partition
        w["payload"] = c.payload
        w["transactionId"] = c.transaction_id
        if c.trace_id:
            w["traceId"] = c.trace_id
        wire.append(w)
    return wire


def encoded_push_items(queue: str, partition: str | None, items: Iterable[Any]) -> bytes:
    """The JSON array ``push_items(...)`` encodes to, built from each item's checked encoding
    instead of encoding every payload a second time; a push and a transaction push share it."""
    head = b'{"queue":' + json_bytes(queue)
    if partition:
        head += b',"partition":' + json_bytes(partition)
    head += b',"payload":'
    parts = []
    for c in check_items(items):
        part = head + c.payload_json + b',"transactionId":' + json_bytes(c.transaction_id)
        if c.trace_id:
            part += b',"traceId":' + json_bytes(c.trace_id)
        parts.append(part + b"}")
    return b"[" + b",".join(parts) + b"]"


def push_body(queue: str, partition: str | None, items: Iterable[Any]) -> bytes:
    """``POST /api/v1/push`` body: ``{"items": push_items(...)}`` with each payload encoded once."""
    return b'{"items":' + encoded_push_items(queue, partition, items) + b"}"


def push_operation(queue: str, partition: str | None, items: Iterable[Any]) -> bytes | None:
    """A transaction's ``{"type":"push","items":[...]}`` operation with each payload encoded
    once, or None when there are no items (an empty push adds nothing to the bundle)."""
    encoded = encoded_push_items(queue, partition, items)
    if encoded == b"[]":
        return None
    return b'{"type":"push","items":' + encoded + b"}"


def warn_buffered(results: list[PushResult], logger: logging.Logger) -> list[PushResult]:
    """Log items the broker put on its disk spool (docs/sdk-design.md §2): stored, not yet in
    PostgreSQL."""
    buffered = [r for r in results if r.status == "buffered"]
    if buffered:
        logger.warning(
            "lanes: %d push item(s) buffered on the broker's disk spool (PostgreSQL "
            "unreachable or push maintenance on); they drain later (queue %s)",
            len(buffered),
            buffered[0].queue,
        )
    return results


def check_result_count(what: str, got: int, want: int, unit: str, body: Any) -> None:
    """Raise :class:`UnexpectedAnswerError` when a 2xx answer holds ``got`` results for ``want``
    items or operations sent (not a failed item: the request may have been applied)."""
    if got != want:
        raise UnexpectedAnswerError(
            f"lanes: {what}: broker answered {got} results for {want} {unit}", body=body
        )


def parse_push_results(body: Any, sent: int) -> list[PushResult]:
    """The results of a push of ``sent`` items; an answer without one result per item raises
    :class:`UnexpectedAnswerError`."""
    rows = body if isinstance(body, list) else []
    results = [
        PushResult(
            index=int(r.get("index", i)),
            message_id=str(r.get("message_id", "")),
            transaction_id=str(r.get("transaction_id", "")),
            queue=str(r.get("queueName", "")),
            status=str(r.get("status", "")),
            error=r.get("error"),
        )
        for i, r in enumerate(rows)
        if isinstance(r, dict)
    ]
    check_result_count("push", len(results), sent, "items", body)
    return results


def check_push_results(results: list[PushResult]) -> list[PushResult]:
    """Raise :class:`PushError` (carrying every result) when any item is ``failed``."""
    bad = [
        ItemError(r.index, r.transaction_id, r.status, r.error or "failed")
        for r in results
        if r.status == "failed"
    ]
    if bad:
        raise PushError(bad, results)
    return results


# ---------------------------------------------------------------------------------------------
# Popping


@dataclass(frozen=True)
class QueueSpec:
    """Everything a queue builder has been told. ``batch``/``partitions`` None = unset."""

    queue: str | None = None
    partition: str | None = None
    namespace: str | None = None
    task: str | None = None
    group: str | None = None
    subscription_mode: str | None = None
    subscription_from: str | None = None
    batch: int | None = None
    partitions: int | None = None
    autopilot: bool | None = None
    wait: bool = True
    timeout_millis: int = DEFAULT_POP_TIMEOUT_MS
    lease_seconds: int | None = None
    server_auto_ack: bool | None = None
    max_batch: int | None = None
    """Caps the batch sent (set by :func:`auto_ack_pop_cap`, never by the user)."""
    # consume loop knobs
    concurrency: int = 1
    limit: int = 0
    idle_millis: int = 0
    renew_lease: bool = True
    renew_interval_millis: int = 0  # 0 = the default of renew_every
    each: bool = True
    auto_ack: bool = True
    soft_stop_timeout_millis: int = 0
    report_handler_errors: bool = False

    @property
    def parks(self) -> bool:
        """The broker holds a pop until a message arrives; timeout 0 answers at once, so a
        loop pauses between empty pops as without wait."""
        return self.wait and self.timeout_millis > 0


def _b(v: bool) -> str:
    return "true" if v else "false"


def pop_path(spec: QueueSpec) -> str:
    if spec.queue:
        q = quote(spec.queue, safe="")
        if spec.partition:
            return f"/api/v1/pop/queue/{q}/partition/{quote(spec.partition, safe='')}"
        return f"/api/v1/pop/queue/{q}"
    return "/api/v1/pop"


def _autopilot_off(spec: QueueSpec, client_autopilot: bool) -> bool:
    return (spec.autopilot is False) or (spec.autopilot is None and not client_autopilot)


def pop_batch(spec: QueueSpec, client_autopilot: bool) -> int:
    """The batch a pop of ``spec`` takes: its batch when set, else the automatic one under
    autopilot, else 1."""
    if spec.batch:
        return spec.batch
    return 1 if _autopilot_off(spec, client_autopilot) else AUTOPILOT_BATCH


def pop_query(spec: QueueSpec, client_autopilot: bool) -> str:
    """The pop query string, parameters in the exact order of docs/consuming.md §2.

    ``client_autopilot`` is the client's setting (``pop_autopilot=`` or the environment, read
    once at construction); an explicit ``.autopilot(...)`` on the builder outranks it.
    """
    partition_route = bool(spec.queue and spec.partition)
    batch = spec.batch or None
    parts = None if partition_route else (spec.partitions or None)
    off = _autopilot_off(spec, client_autopilot)
    engaged = not off and (batch is None or (not partition_route and parts is None))
    if spec.max_batch:
        batch = min(pop_batch(spec, client_autopilot), spec.max_batch)
    p: list[tuple[str, str]] = []
    if engaged:
        p.append(("autopilot", "true"))
        if batch is not None:
            p.append(("batch", str(batch)))
    elif off:
        p.append(("batch", str(batch if batch is not None else 1)))
    else:
        p.append(("batch", str(batch)))
    p.append(("wait", _b(spec.wait)))
    p.append(("timeout", str(int(spec.timeout_millis))))
    if spec.group:
        p.append(("consumerGroup", spec.group))
    if parts is not None and (not off or parts > 1):
        p.append(("partitions", str(parts)))
    if spec.lease_seconds:
        p.append(("leaseSeconds", str(spec.lease_seconds)))
    if spec.subscription_mode:
        p.append(("subscriptionMode", spec.subscription_mode))
    if spec.subscription_from:
        p.append(("subscriptionFrom", spec.subscription_from))
    if spec.server_auto_ack is not None:
        p.append(("autoAck", _b(spec.server_auto_ack)))
    if not spec.queue:
        if spec.namespace:
            p.append(("namespace", spec.namespace))
        if spec.task:
            p.append(("task", spec.task))
    return "&".join(f"{k}={quote_plus(v)}" for k, v in p)


def pop_http_timeout(spec: QueueSpec, client_timeout: float) -> float:
    """A long-poll attempt waits ``timeout + 5 s`` so the broker answers first."""
    if spec.wait:
        return spec.timeout_millis / 1000.0 + LONG_POLL_SLACK
    return client_timeout


def fast_empty_pause(consecutive: int) -> float:
    """Pause after the ``consecutive``-th long poll in a row that answered empty in under a tenth
    of its timeout (a proxy or a broker that does not park): 100 ms doubling, at most 2 s."""
    return min(EMPTY_POLL_PAUSE * 2.0 ** max(consecutive - 1, 0), FAST_EMPTY_PAUSE_MAX)


def auto_ack_pop_cap(spec: QueueSpec, left: int) -> QueueSpec:
    """The spec of a pop under server auto-ack with ``left`` messages to go before the loop's
    limit: its batch capped at that, since messages it commits beyond the limit could never be
    handed to anyone. An unset batch stays the one the pop would take (1 without autopilot, else
    the automatic 100), so a large limit neither replaces it nor exceeds the broker's bound.
    Unchanged without server auto-ack."""
    if not spec.server_auto_ack:
        return spec
    return dataclasses.replace(spec, max_batch=left)


def cut_long_poll(spec: QueueSpec, idle_left: float) -> QueueSpec:
    """The spec of a pop sent with ``idle_left`` seconds of idle time left: its long-poll
    timeout cut to that time, rounded up to whole milliseconds (the wire's unit, so never 0,
    which would not wait at all), so an idle timeout shorter than the long poll ends the loop at
    its deadline, not when the long poll runs out (docs/consuming.md §3). Unchanged for a pop
    that does not park, or with no idle timeout (``idle_left`` infinite)."""
    if not spec.parks or idle_left == math.inf:
        return spec
    cut = max(1, math.ceil(idle_left * 1000))
    if cut >= spec.timeout_millis:
        return spec
    return dataclasses.replace(spec, timeout_millis=cut)


def validate_spec(spec: QueueSpec) -> None:
    """Raise before a pop, consume or iterator sends anything with a builder the broker would
    refuse (a bad name: InvalidNameError, naming the ``pop``)."""
    if not spec.queue and not (spec.namespace or spec.task):
        raise ValueError("lanes: a queue name or a namespace/task is required")
    if spec.partition and not spec.queue:
        raise ValueError("lanes: partition() needs a queue")
    check_group("pop", spec.group)
    if spec.queue:
        check_names("pop", spec.queue, spec.partition)
    if not 1 <= spec.concurrency <= 10_000:
        raise ValueError("lanes: concurrency must be between 1 and 10000")


def parse_pop(body: Any, spec: QueueSpec) -> PopResult:
    if not isinstance(body, dict):
        return PopResult(messages=[])
    queue = spec.queue or ""
    msgs: list[Message] = []
    created_wire: Any = _NOT_READ
    created_at = None
    for m in body.get("messages") or []:
        if not isinstance(m, dict):
            continue
        # The messages of one push share their createdAt: each distinct one is parsed once.
        if m.get("createdAt") != created_wire:
            created_wire = m.get("createdAt")
            created_at = _ts(created_wire)
        msgs.append(Message._from_wire(m, queue, created_at))
    ap = body.get("autopilot")
    echo = None
    if isinstance(ap, dict):
        wm = ap.get("waitMs")
        echo = AutopilotEcho(
            partitions=int(ap.get("partitions", 0)),
            batch=int(ap.get("batch", 0)),
            wait_ms=int(wm) if isinstance(wm, (int, float)) else None,
        )
    lease_seconds = body.get("leaseSeconds")
    if not isinstance(lease_seconds, int) or isinstance(lease_seconds, bool) or lease_seconds < 1:
        lease_seconds = None
    return PopResult(
        messages=msgs,
        lease_id=str(body.get("leaseId") or ""),
        consumer_group=str(body.get("consumerGroup") or ""),
        partitions_claimed=int(body.get("partitionsClaimed") or 0),
        autopilot=echo,
        lease_seconds=lease_seconds,
        lease_expires_at=_ts(body.get("leaseExpiresAt")),
    )


def empty_poll_pause(echo: AutopilotEcho | None) -> float:
    """Pause after an empty non-waiting poll: the broker's ``waitMs`` advice when above 0, else
    100 ms. The broker echoes only on a 200, where ``waitMs`` is 0, so 0 means "no advice", not
    "do not pause" (as in Go and TS)."""
    if echo is not None and echo.wait_ms is not None and echo.wait_ms > 0:
        return echo.wait_ms / 1000.0
    return EMPTY_POLL_PAUSE


# ---------------------------------------------------------------------------------------------
# Acks and leases


class AckEntry(NamedTuple):
    """One ack to send: the message's address plus the status. A tuple: a frozen dataclass
    took twice as long to build, once per acked message."""

    transaction_id: str
    partition_id: str
    lease_id: str
    status: str
    error: str | None = None


def ack_entry(msg: Message, status: str, error: str | None = None) -> AckEntry:
    if status not in ACK_STATUSES:
        raise ValueError(f"lanes: ack status {status!r} is not one of completed/failed/retry/dlq")
    if not msg.transaction_id or not msg.partition_id:
        raise ValueError("lanes: ack needs a message with transaction_id and partition_id")
    return AckEntry(msg.transaction_id, msg.partition_id, msg.lease_id, status, error)


def _wire_entry(e: AckEntry) -> dict[str, Any]:
    w: dict[str, Any] = {"transactionId": e.transaction_id, "partitionId": e.partition_id}
    w["status"] = e.status
    if e.lease_id:
        w["leaseId"] = e.lease_id
    if e.error is not None:
        w["error"] = e.error
    return w


ACK_ONE_PATH = "/api/v1/ack"


def loop_acks(entries: list[tuple[str, AckEntry]]) -> list[tuple[str, AckEntry]]:
    """The smallest list of acks with the broker effect of ``entries``, a consume loop's or
    iterator's acks of one pop (docs/sdk-design.md, "Loop acks"). An ack is an offset commit, so
    per (partition, lease, group) the ``completed`` acks before the first nack collapse into the
    last of them; the nacks and anything after them go as they are. A partition whose acks name a
    transaction id twice goes whole: the broker resolves the k-th mention of an id to its k-th
    copy in the lease's span, so dropping a mention could move the offset an ack names."""
    prefix: dict[tuple[str, str, str], list[int]] = {}
    nacked: set[tuple[str, str, str]] = set()
    ids: dict[tuple[str, str, str], set[str]] = {}
    repeat: set[tuple[str, str, str]] = set()
    for i, (g, e) in enumerate(entries):
        k = (e.partition_id, e.lease_id, g)
        seen = ids.setdefault(k, set())
        if e.transaction_id in seen:
            repeat.add(k)
        seen.add(e.transaction_id)
        if e.status != "completed":
            nacked.add(k)
        elif k not in nacked:
            prefix.setdefault(k, []).append(i)
    drop = {i for k, idx in prefix.items() if k not in repeat for i in idx[:-1]}
    if not drop:
        return entries
    return [pair for i, pair in enumerate(entries) if i not in drop]


def ack_requests(
    entries: Sequence[tuple[str, AckEntry]],
) -> list[tuple[str, dict[str, Any], list[int]]]:
    """Split ``(group, entry)`` pairs into requests: one group → one call; a single entry →
    ``/api/v1/ack``, several → ``/api/v1/ack/batch``. Returns (path, body, original indexes)."""
    by_group: dict[str, list[int]] = {}
    for i, (g, _) in enumerate(entries):
        by_group.setdefault(g, []).append(i)
    out: list[tuple[str, dict[str, Any], list[int]]] = []
    for g, idx in by_group.items():
        if len(idx) == 1:
            body = _wire_entry(entries[idx[0]][1])
            body["consumerGroup"] = g
            out.append((ACK_ONE_PATH, body, idx))
        else:
            out.append(
                (
                    "/api/v1/ack/batch",
                    {
                        "consumerGroup": g,
                        "acknowledgments": [_wire_entry(entries[i][1]) for i in idx],
                    },
                    idx,
                )
            )
    return out


def parse_ack_results(path: str, body: Any, sent: int) -> list[AckResult]:
    """The results of one ack request of ``sent`` items: both routes answer an array of results
    (openapi.yaml), and brokers before that answered ``POST /api/v1/ack`` with the one result
    object alone, which is read too; any other shape or count is an
    :class:`UnexpectedAnswerError`."""
    earlier_single = path == ACK_ONE_PATH and isinstance(body, dict)
    if not earlier_single and not isinstance(body, list):
        raise UnexpectedAnswerError(
            f"lanes: ack: {path} answered {type(body).__name__}, want an array of results",
            body=body,
        )
    rows = [body] if earlier_single else body
    results: list[AckResult] = []
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            continue
        # A frozen dataclass's __init__ sets each field through object.__setattr__, which took
        # about half of the reading of an answer; the fields go into the instance's dict at once.
        result = _new_object(AckResult)
        result.__dict__.update(
            index=int(r.get("index", i)),
            transaction_id=str(r.get("transactionId", "")),
            success=bool(r.get("success")),
            error=r.get("error"),
            lease_released=bool(r.get("leaseReleased")),
            dlq=bool(r.get("dlq")),
            noop=bool(r.get("noop")),
            dropped=bool(r.get("dropped")),
        )
        results.append(result)
    check_result_count("ack", len(results), sent, "items", body)
    return results


def merge_ack_results(
    n: int, parts: Sequence[tuple[list[int], list[AckResult]]]
) -> list[AckResult]:
    """Put per-request results back in the caller's order, each indexed by its place there, and
    raise :class:`AckError` when any item answered ``success: false``."""
    out: list[AckResult | None] = [None] * n
    for idx, results in parts:
        for i, r in zip(idx, results, strict=True):
            out[i] = r if r.index == i else dataclasses.replace(r, index=i)
    final = [r for r in out if r is not None]
    bad = [
        ItemError(r.index, r.transaction_id, "ack", r.error or "not executed")
        for r in final
        if not r.success
    ]
    if bad:
        raise AckError(bad, final)
    return final


def group_of(msg: Message, group: str | None) -> str:
    """The consumer group an ack of ``msg`` names: ``group``, else the message's own; one of only
    white space is refused (InvalidNameError) before anything is sent."""
    named = group or msg.consumer_group
    check_group("ack", named)
    return named or QUEUE_MODE


def renew_seconds(seconds: int | float | None) -> int:
    """Whole seconds, rounded up as in TS (1.5 s of lease is 2, not 1); 0 or below is the
    broker's default 60, as Go sends none, not a 1 s lease."""
    return max(1, math.ceil(seconds)) if seconds is not None and seconds > 0 else 60


def parse_renew(lease_id: str, body: Any) -> RenewResult:
    b = body if isinstance(body, dict) else {}
    return RenewResult(
        lease_id=str(b.get("leaseId") or lease_id),
        success=bool(b.get("success")),
        renewed=int(b.get("renewed") or 0),
        new_expires_at=_ts(b.get("newExpiresAt")),
    )


def lease_ids(items: Iterable[Message | str]) -> list[str]:
    """Distinct lease ids, first-seen order (messages with no lease are skipped)."""
    seen: dict[str, None] = {}
    for it in items:
        lid = it if isinstance(it, str) else it.lease_id
        if lid:
            seen.setdefault(lid, None)
    return list(seen)


# ---------------------------------------------------------------------------------------------
# Consume loop planning (docs/consuming.md §3): one plan, run by the sync and async engines.


def by_partition(msgs: Sequence[Message]) -> list[list[Message]]:
    """Messages grouped by partition id, keeping the broker's order in each group."""
    groups: dict[str, list[Message]] = {}
    for m in msgs:
        groups.setdefault(m.partition_id, []).append(m)
    return list(groups.values())


Outcome = tuple[Message, Literal["completed", "failed", "retry"], str | None]


def batch_acks(
    outcomes: Sequence[Outcome], unhandled: Sequence[Sequence[Message]], auto_ack: bool
) -> list[tuple[str, AckEntry]]:
    """The acks a worker sends after one pop: handled messages by outcome, and for each partition
    with messages not handed to the handler because of a stop or the limit, its first unhandled
    message as ``retry`` (budget-free release). Without ``auto_ack`` only the releases of
    partitions of which nothing was handed over: the handler owns what it was handed and may not
    have acked it, and a ``retry`` below an unacked message would release that one too."""
    entries: list[tuple[str, AckEntry]] = []
    handed_from = {m.partition_id for m, _, _ in outcomes}
    if auto_ack:
        for m, st, err in outcomes:
            entries.append(
                (group_of(m, None), AckEntry(m.transaction_id, m.partition_id, m.lease_id, st, err))
            )
    for rest in unhandled:
        if rest and (auto_ack or rest[0].partition_id not in handed_from):
            m = rest[0]
            entries.append(
                (group_of(m, None), AckEntry(m.transaction_id, m.partition_id, m.lease_id, "retry"))
            )
    return entries


DEFAULT_RENEW_EVERY_MS = 10_000
"""The longest renewal interval, and the one used when a renewal answer names no expiry: well
inside the queues' default leases (300 s, 60 s for push-created queues)."""

RENEW_UNKNOWN_LEASE_AFTER_S = 1.0
"""When a pop whose lease length the consumer does not know is first renewed: early enough for
short leases. The broker never shortens a lease, so the answer's expiry is the pop's own lease
when that is longer."""

MIN_RENEW_EVERY_S = 0.5
"""The shortest interval a learned lease is renewed at."""


def release_acks(res: PopResult, spec: QueueSpec) -> list[tuple[str, AckEntry]]:
    """The ``retry`` acks that release every message of a pop nobody will handle (the first of
    each partition; the rest follow it), or none when the pop holds no lease."""
    if spec.server_auto_ack or not res.lease_id:
        return []
    return batch_acks([], by_partition(res.messages), auto_ack=True)


def pop_lease_seconds(spec: QueueSpec, res: PopResult) -> int | None:
    """The lease length a consume loop or iterator counts with for a pop: the one its answer
    names, else ``lease_seconds`` (None: unknown). The length, not the answer's
    ``lease_expires_at``, which is on the database's clock."""
    return res.lease_seconds or spec.lease_seconds


def renew_every(spec: QueueSpec, lease_seconds: int | None) -> float | None:
    """Seconds between renewals of a running pop's lease, or None when renewal is off: the
    interval given to ``renew_lease``, else a third of the pop's lease (:func:`pop_lease_seconds`,
    at most 10 s), else 0: the lease is unknown and :func:`renew_every_for_expiry` learns it from
    the first renewal, as in Go and TypeScript."""
    if not spec.renew_lease:
        return None
    if spec.renew_interval_millis > 0:
        return spec.renew_interval_millis / 1000.0
    if lease_seconds:
        return min(lease_seconds * 1000 / 3, DEFAULT_RENEW_EVERY_MS) / 1000.0
    return 0.0


def renew_every_for_expiry(popped_at: datetime, expires_at: datetime | None) -> float:
    """The renewal interval for a lease expiring at ``expires_at``, taken at ``popped_at`` (when
    the pop answer arrived, so the length is never overestimated): a third of it within
    0.5-10 s; 10 s without an expiry."""
    if expires_at is None:
        return DEFAULT_RENEW_EVERY_MS / 1000.0
    if expires_at.tzinfo is None:  # the broker writes UTC; a naive time could not be compared
        expires_at = expires_at.replace(tzinfo=timezone.utc)
    third = (expires_at - popped_at).total_seconds() / 3
    return min(max(third, MIN_RENEW_EVERY_S), DEFAULT_RENEW_EVERY_MS / 1000.0)


def renewal_extension(every: float) -> int:
    """How far one renewal extends the lease: max(2 x interval, 1 s), in whole seconds."""
    return max(1, math.ceil(2 * every))


class RenewalSchedule:
    """When a pop's lease is renewed and for how long, shared by the consume loop and the
    iterators: every ``every`` s (:func:`renew_every`); when that is 0 (the lease is unknown),
    first 1 s after the pop, then at a third of the lease the first renewal's answer shows."""

    def __init__(self, every: float, popped_at: datetime) -> None:
        self.every = every
        self.popped_at = popped_at
        self.next_in = every or RENEW_UNKNOWN_LEASE_AFTER_S
        self.expires_at: datetime | None = None  # the latest expiry an applied renewal gives

    def extension(self) -> int:
        return renewal_extension(self.next_in)

    def after(self, r: RenewResult, sent_at: datetime, seconds: int) -> bool:
        """Take the answer of a renewal sent at ``sent_at`` asking for ``seconds``; False when
        the lease was not renewed (renewal ends). The lease now lasts at least until
        ``sent_at + seconds`` (the broker extends to its now + seconds, and its now is later);
        not until the answer's ``new_expires_at``, which is on the database's clock."""
        if not r.success:
            return False
        renewed_to = sent_at + timedelta(seconds=seconds)
        if self.expires_at is None or renewed_to > self.expires_at:
            self.expires_at = renewed_to
        if not self.every:
            self.every = renew_every_for_expiry(self.popped_at, r.new_expires_at)
        self.next_in = self.every
        return True


# The lease a consume loop or iterator assumes for a pop of an older broker, whose answer names no
# lease, when lease_seconds does not either: the shortest default lease (push-created queues).
FALLBACK_LEASE_S = 60.0
# How long before the lease's expiry a consume loop or iterator stops resending a failed ack: its
# last attempt still has time to land.
ACK_RESEND_MARGIN_S = 1.0
# How long an iterator that is left (break, an exception, close(), the limit, the idle timeout,
# stop()) goes on resending a failed ack: leaving should not block for the rest of the lease. The
# first call always runs to its end under the client's retry policy; no resend starts later.
LEAVE_ACK_BUDGET_S = 5.0


def lease_expiry(
    lease_seconds: int | None, popped_at: datetime, schedule: RenewalSchedule | None
) -> datetime:
    """The latest expiry a consume loop or iterator knows for a pop's lease: its length
    (:func:`pop_lease_seconds`, else FALLBACK_LEASE_S) from the pop's answer, or a later one an
    applied renewal gives (:meth:`RenewalSchedule.after`)."""
    at = popped_at + timedelta(seconds=lease_seconds or FALLBACK_LEASE_S)
    if schedule is not None and schedule.expires_at is not None and schedule.expires_at > at:
        return schedule.expires_at
    return at


def loop_error_backoff(consecutive: int) -> float:
    """Error backoff of the consume loop: ``min(1 s * 2^k, 30 s)``."""
    return min(1.0 * (2.0 ** max(consecutive - 1, 0)), 30.0)


# ---------------------------------------------------------------------------------------------
# Transactions


def check_transaction(body: Any, attempts: int) -> TransactionResult:
    res = TransactionResult.model_validate(body)
    if not res.success:
        raise TransactionError(res, attempts)
    return res
