"""Conformance adapter for the Python SDK: the blocking ``lanes.Lanes`` client, or with
``--async`` its asyncio twin ``lanes.AsyncLanes``.

Cases arrive as JSON Lines on stdin; each step runs through the public API of ``lanes``
(never raw HTTP); one result line per case goes to stdout. Protocol: docs/conformance.md.
Run it with the sdk-python venv: ``sdk-python/.venv/bin/python adapter.py [--async]``.

The steps are written once, as coroutines run under ``asyncio``: each awaits what the SDK call
returns (:func:`awaited`), which is the result itself from ``Lanes`` and a coroutine to await
from ``AsyncLanes``. What cannot be written once (the consume handler, a background step, a
timer) is each client's :class:`Blocking` or :class:`Asyncio` driver.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import inspect
import itertools
import json
import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from datetime import datetime, timezone
from typing import Any, TypeAlias, TypeVar

import httpx

import lanes
from lanes import (
    AckError,
    APIConnectionError,
    APIError,
    APITimeoutError,
    ClientClosedError,
    ConsumerStoppedError,
    HandlerError,
    InvalidItemError,
    Item,
    OutcomeUnknownError,
    PushError,
    TransactionError,
)

T = TypeVar("T")
Client: TypeAlias = lanes.Lanes | lanes.AsyncLanes


async def awaited(v: Awaitable[T] | T) -> T:
    """What an SDK call gave: its result (Lanes), or the awaited coroutine (AsyncLanes)."""
    if inspect.isawaitable(v):
        return await v
    return v


# The end of a walk or an iteration, as next_row gives it.
END = object()


async def next_row(rows: Iterator[Any] | AsyncIterator[Any]) -> Any:
    """The next row of a blocking or an async iterator, or END."""
    if isinstance(rows, AsyncIterator):
        try:
            return await rows.__anext__()
        except StopAsyncIteration:
            return END
    return next(rows, END)


async def poll(consumer: Any, until: float, reached: Callable[[], bool] = lambda: False) -> None:
    """Wait for the consumer's end, the monotonic time until or reached(): the consumer of
    either client moves on threads or tasks of its own, with nothing this could await."""
    while not reached() and not consumer.done and time.monotonic() < until:  # noqa: ASYNC110
        await asyncio.sleep(0.005)


@contextlib.asynccontextmanager
async def closing(it: Any) -> AsyncIterator[None]:
    """``with it`` for the blocking pull iterator, ``async with it`` for the async one."""
    if hasattr(it, "__aenter__"):
        async with it:
            yield
    else:
        with it:
            yield


def handler_failure(f: dict[str, Any]) -> Exception:
    """The error a scripted handler failure raises: a plain one, or the SDK's own error for want
    of a broker (connection: APIConnectionError; status: an APIError of that status)."""
    text = "handler failure (scripted)"
    if f.get("connection"):
        return APIConnectionError(text)
    if f.get("status", 0) > 0:
        return APIError(f["status"], text, code="scripted")
    return RuntimeError(text)


def err_kind(err: BaseException) -> dict[str, Any]:
    if isinstance(err, HandlerError):
        ids = [m.transaction_id for m in err.messages]
        return {"kind": "handler", "transactionIds": ids, "message": str(err)}
    if isinstance(err, OutcomeUnknownError):
        # The kind of the last attempt's failure; timeout as the error itself reports it.
        cause = err_kind(err.cause)
        cause.pop("timeout", None)
        if isinstance(err, APITimeoutError):
            cause["timeout"] = True
        return {**cause, "outcomeUnknown": True, "attempts": err.attempts, "message": str(err)}
    if isinstance(err, lanes.UnsentError):
        return {"kind": "unsent", "unsent": err.unsent, "message": str(err)}
    if isinstance(err, ClientClosedError):
        return {"kind": "client_closed", "message": str(err)}
    if isinstance(err, InvalidItemError):
        return {"kind": "invalid_item", "index": err.index, "message": str(err)}
    if isinstance(err, PushError):
        return {"kind": "push", "message": str(err)}
    if isinstance(err, AckError):
        return {"kind": "ack", "message": str(err)}
    if isinstance(err, TransactionError):
        out: dict[str, Any] = {
            "kind": "transaction",
            "reason": getattr(err, "reason", "") or "",
            "message": str(err),
        }
        if err.kv_reason:
            out["kvReason"] = err.kv_reason
        if err.failed_index is not None:
            out["failedIndex"] = err.failed_index
        return out
    if isinstance(err, APIError):
        kind = {
            429: "rate_limited",
            403: "forbidden",
            413: "payload_too_large",
            404: "not_found",
            501: "not_implemented",
        }.get(err.status, "api")
        out = {
            "kind": kind,
            "status": err.status,
            "code": err.code,
            "message": err.message,
            "terminal": err.terminal,
            "attempts": err.attempts,
        }
        if err.retry_after is not None:
            out["retryAfterMs"] = round(err.retry_after * 1000)
        return out
    if isinstance(err, APIConnectionError):
        conn: dict[str, Any] = {"kind": "connection", "message": str(err), "attempts": err.attempts}
        if isinstance(err, APITimeoutError):
            conn["timeout"] = True
        return conn
    return {
        "kind": "other",
        "message": "".join(traceback.format_exception_only(type(err), err)).strip(),
    }


# What the caller's HTTP client (client option callerTransport) adds to each request it carries:
# how many it has carried, that one included, so a case sees that every request and retry went
# through it.
CALLER_TRANSPORT_HEADER = "X-Lanes-Caller-Transport"


def stamping_http_client(client_type: type[Client]) -> httpx.Client | httpx.AsyncClient:
    """The caller's own httpx client for ``http_client``, of the kind the client type takes."""
    carried = itertools.count(1)

    def stamp(r: httpx.Request) -> None:
        r.headers[CALLER_TRANSPORT_HEADER] = str(next(carried))

    async def stamp_async(r: httpx.Request) -> None:
        stamp(r)

    if client_type is lanes.AsyncLanes:
        return httpx.AsyncClient(event_hooks={"request": [stamp_async]})
    return httpx.Client(event_hooks={"request": [stamp]})


class RecordingHandler(logging.Handler):
    """The handler of a client built with captureLogs: keeps each record's level and message
    (formatted with its arguments), for the logs step."""

    LEVELS = ("debug", "info", "warn", "error")

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[dict[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        level = (
            "error"
            if record.levelno >= logging.ERROR
            else "warn"
            if record.levelno >= logging.WARNING
            else "info"
            if record.levelno >= logging.INFO
            else "debug"
        )
        self.records.append({"level": level, "message": record.getMessage()})


def recording_logger(run: str) -> tuple[logging.Logger, RecordingHandler]:
    """A logger of the case's own (not "lanes", which other cases' clients share)."""
    logger = logging.getLogger(f"conformance.{run}")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    handler = RecordingHandler()
    logger.addHandler(handler)
    return logger, handler


def new_client(
    c: dict[str, Any],
    client_type: type[Client],
    http_client: httpx.Client | httpx.AsyncClient | None = None,
    logger: logging.Logger | None = None,
) -> Client:
    o = c.get("client") or {}
    kw: dict[str, Any] = {"headers": {**(c.get("headers") or {}), **(o.get("headers") or {})}}
    # headersInOrder: one key each, in order (a name in two letter cases is two keys).
    for name, value in o.get("headersInOrder") or []:
        kw["headers"][name] = value
    if http_client is not None:
        kw["http_client"] = http_client
    if logger is not None:
        kw["logger"] = logger
    if "bearerToken" in o:
        kw["bearer_token"] = o["bearerToken"]
    if "bearerTokenFunc" in o:
        # The tokens are prefix1, prefix2, ... one per call, so a case sees when the SDK asked.
        calls = itertools.count(1)
        kw["bearer_token"] = lambda: f"{o['bearerTokenFunc']}{next(calls)}"
    # urls replaces the case's url with several brokers in order (the runner put the case's
    # url in place of "${url}").
    if o.get("urls"):
        kw["urls"] = o["urls"]
    if "healthRetryAfterMs" in o:
        kw["health_retry_after"] = o["healthRetryAfterMs"] / 1000
    if "retryAttempts" in o:
        kw["retry_attempts"] = o["retryAttempts"]
    if "retryDelayMs" in o:
        kw["retry_delay"] = o["retryDelayMs"] / 1000
    if "maxRetryDelayMs" in o:
        kw["max_retry_delay"] = o["maxRetryDelayMs"] / 1000
    if "max429Attempts" in o:
        kw["max_429_attempts"] = o["max429Attempts"]
    if "maxRetryAfterMs" in o:
        kw["max_retry_after"] = o["maxRetryAfterMs"] / 1000
    if "timeoutMs" in o:
        kw["timeout"] = o["timeoutMs"] / 1000
    if "popAutopilot" in o:
        kw["pop_autopilot"] = o["popAutopilot"]
    # Environment read by the constructor (LANES_SDK_POP_AUTOPILOT) is set around it only.
    saved = {k: os.environ.get(k) for k in (o.get("env") or {})}
    os.environ.update(o.get("env") or {})
    try:
        return client_type(None if o.get("urls") else c["url"], **kw)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def builder(client: Client, a: dict[str, Any]) -> Any:
    q = client.queue(a.get("queue"))
    if a.get("namespace"):
        q = q.namespace(a["namespace"])
    if a.get("task"):
        q = q.task(a["task"])
    if "partition" in a:
        q = q.partition(a["partition"])
    if a.get("group"):
        q = q.group(a["group"])
    if a.get("subscriptionMode"):
        q = q.subscription_mode(a["subscriptionMode"])
    if a.get("subscriptionFrom"):
        q = q.subscription_from(a["subscriptionFrom"])
    if a.get("batch", 0) > 0:
        q = q.batch(a["batch"])
    if a.get("partitions", 0) > 0:
        q = q.partitions(a["partitions"])
    if "autopilot" in a:
        q = q.autopilot(a["autopilot"])
    if "wait" in a:
        q = q.wait(a["wait"])
    if "timeoutMs" in a:
        q = q.timeout_millis(a["timeoutMs"])
    if a.get("leaseSeconds", 0) > 0:
        q = q.lease_seconds(a["leaseSeconds"])
    if "serverAutoAck" in a:
        q = q.server_auto_ack(a["serverAutoAck"])
    return q


def loop_settings(q: Any, a: dict[str, Any]) -> Any:
    """The settings the consume and iterate steps share."""
    if a.get("limit", 0) > 0:
        q = q.limit(a["limit"])
    if a.get("idleMs", 0) > 0:
        q = q.idle_millis(a["idleMs"])
    if "autoAck" in a:
        q = q.auto_ack(a["autoAck"])
    return q


def items(lst: list[dict[str, Any]] | None) -> list[Item]:
    # notJSON: data JSON has no form for, which a case cannot write.
    return [
        Item(
            data={"amount": float("nan")} if it.get("notJSON") else it.get("data"),
            transaction_id=it.get("transactionId") or None,
            trace_id=it.get("traceId") or None,
        )
        for it in lst or []
    ]


def push_items(res: Any) -> list[dict[str, Any]]:
    return [
        {"status": r.status, "messageId": r.message_id, "transactionId": r.transaction_id}
        for r in res
    ]


def pop_summary(pr: Any) -> dict[str, Any]:
    ms = pr.messages
    echo = None
    if pr.autopilot is not None:
        echo = {"partitions": pr.autopilot.partitions, "batch": pr.autopilot.batch}
    return {
        "count": len(ms),
        "data": [m.data for m in ms],
        "partitions": [m.partition for m in ms],
        "transactionIds": [m.transaction_id for m in ms],
        "messageIds": [m.id for m in ms],
        "traceIds": [m.trace_id or None for m in ms],
        "leases": len({m.lease_id for m in ms if m.lease_id}),
        "autopilot": echo,
    }


def wire(v: Any) -> Any:
    """An SDK result (pydantic models, lists or dicts of them) in wire names (openapi.yaml)."""
    if isinstance(v, list):
        return [wire(x) for x in v]
    if isinstance(v, dict):
        return {k: wire(x) for k, x in v.items()}
    if hasattr(v, "model_dump"):
        return v.model_dump(mode="json", by_alias=True, exclude_none=True)
    return v


# How far a walk is read past its error: anything there already fails the step, and a walk that
# never ends must not hang the case.
PEEK_AFTER_ERROR = 5


class OpenWalk:
    """A walk a step started, pulled one row at a time (``kept`` sees each one handed over), so a
    step can pause it between two pages (the SDK asks for a page only when the rows before are
    used up) and a walkResume step take the rest."""

    def __init__(
        self, rows: Iterator[Any] | AsyncIterator[Any], kept: Callable[[Any], None]
    ) -> None:
        self._rows = rows
        self._kept = kept
        self._ended = False

    async def take(self, n: int) -> dict[str, Any]:
        """Up to n more rows (0 = the rest) as a walk step's result, with the error the walk
        ended on and afterError, what it yielded after that error."""
        got: list[Any] = []
        out: dict[str, Any] = {}
        while not self._ended and (not n or len(got) < n):
            try:
                row = await next_row(self._rows)
            except lanes.LanesError as e:
                self._ended = True
                out["error"] = err_kind(e)
                after = await self._yielded_after_error()
                if after:
                    out["afterError"] = after
                continue
            if row is END:
                self._ended = True
            else:
                got.append(row)
                self._kept(row)
        return {**out, "count": len(got), "rows": wire(got)}

    async def _yielded_after_error(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for _ in range(PEEK_AFTER_ERROR):
            try:
                row = await next_row(self._rows)
            except lanes.LanesError as e:
                out.append({"error": err_kind(e)})
                continue
            if row is END:
                break
            out.append({"row": wire(row)})
        return out

    async def stop(self) -> None:
        close = getattr(self._rows, "aclose", None) or getattr(self._rows, "close", None)
        if close is not None:
            await awaited(close())


async def wire_result(v: Any) -> dict[str, Any]:
    """A step's result: what an SDK call gave (awaited for AsyncLanes) in wire field names,
    which must be one JSON object."""
    out = wire(await awaited(v))
    if not isinstance(out, dict):
        raise TypeError(f"step result is a {type(out).__name__}, want a JSON object")
    return out


def group_names(names: list[str], prefix: str) -> list[str]:
    """The names that start with prefix (other cases' groups share the broker), sorted."""
    return sorted({n for n in names if n.startswith(prefix)})


def pick(a: dict[str, Any], *keys: str) -> dict[str, Any]:
    """The named step arguments that are set (an unset knob keeps the SDK's default)."""
    return {k: a[k] for k in keys if a.get(k) not in (None, "")}


def prefixed(result: dict[str, Any], key: str, field: str, prefix: str) -> dict[str, Any]:
    """result with its list under key kept to the entries whose field starts with prefix
    (other cases share the broker), sorted by that field."""
    rows = [r for r in result.get(key) or [] if str(r.get(field, "")).startswith(prefix)]
    return {**result, key: sorted(rows, key=lambda r: str(r.get(field, "")))}


def maintenance_scope(a: dict[str, Any]) -> str:
    scope = a.get("scope")
    if scope not in ("push", "pop"):
        raise ValueError(f"maintenance scope {scope!r}: want push or pop")
    return str(scope)


def expiry_seconds(o: dict[str, Any]) -> int | None:
    """ttlSeconds of a wire op; None (the SDK's forever) when it has none."""
    return o.get("ttlSeconds") or None


def timer_payload(o: dict[str, Any]) -> dict[str, Any]:
    """A case's timer ``data`` as the payload keyword; absent, the SDK sends no payload."""
    return {"payload": o["data"]} if "data" in o else {}


async def push_within(buf: Any, batch: list[Any], timeout_ms: int | None) -> bool:
    """Push into the buffer, waiting for room at most timeout_ms (None = no bound): the
    blocking buffer's ``timeout=``, which ends in a plain LanesError, or for AsyncLanes
    ``asyncio.wait_for`` around the push. False when the bound ended it (nothing queued)."""
    if not timeout_ms:
        await awaited(buf.push(batch))
        return True
    if isinstance(buf, lanes.AsyncPushBuffer):
        try:
            await asyncio.wait_for(buf.push(batch), timeout_ms / 1000)
        except asyncio.TimeoutError:
            return False
        return True
    try:
        buf.push(batch, timeout=timeout_ms / 1000)
    except lanes.LanesError as e:
        if type(e) is not lanes.LanesError:
            raise
        return False
    return True


def timer_place(o: dict[str, Any]) -> dict[str, Any]:
    """A case's timer ``partition`` and ``transactionId`` as keywords, only those it gives."""
    return {
        k: o[n]
        for k, n in (("partition", "partition"), ("transaction_id", "transactionId"))
        if n in o
    }


def tx_kv(tx: Any, o: dict[str, Any]) -> Any:
    """Add one wire-shaped KV op to a transaction through the builder's kv_* methods, passing
    every field the step gives (the SDK refuses one its method does not take)."""
    kw = {k: o[k] for k in ("expect", "required", "min", "max") if k in o}
    if o["op"] == "put":
        return tx.kv_put(o["ns"], o["key"], o.get("value"), ttl_seconds=expiry_seconds(o), **kw)
    if o["op"] == "putIfAbsent":
        return tx.kv_put_if_absent(
            o["ns"], o["key"], o.get("value"), ttl_seconds=expiry_seconds(o), **kw
        )
    if o["op"] == "delete":
        return tx.kv_delete(o["ns"], o["key"], **kw)
    if o["op"] == "incr":
        return tx.kv_incr(o["ns"], o["key"], o.get("delta", 1), ttl_seconds=expiry_seconds(o), **kw)
    raise ValueError(f"transaction kv op {o['op']} is not mapped")


def ack_rows(results: Any) -> list[dict[str, Any]]:
    """An ack's AckResults in wire names; ``dropped`` only when set, as the broker sends it."""
    return [
        {
            "index": r.index,
            "transactionId": r.transaction_id,
            "success": r.success,
            "error": r.error,
            "leaseReleased": r.lease_released,
            "dlq": r.dlq,
            "noop": r.noop,
        }
        | ({"dropped": True} if r.dropped else {})
        for r in results
    ]


def success_list(results: Any) -> list[bool]:
    """An ack's or a renewal's per-message success flags."""
    return [r.success for r in results]


def canonical(v: Any) -> str:
    return json.dumps(v, separators=(",", ":"), sort_keys=True)


class CaseState:
    def __init__(self, client: Client, driver: Driver) -> None:
        self.client = client
        self.driver = driver
        self.saved: dict[str, list[Any]] = {}
        self.dlq: dict[str, list[Any]] = {}
        # the messages a message walk handed over, by its save name
        self.walked: dict[str, list[Any]] = {}
        # a listing page's nextAfter, by the save name of its step
        self.pages: dict[str, str | None] = {}
        self.marks: dict[str, datetime] = {}
        # walks a step paused, by its save name, for walkResume
        self.walks: dict[str, OpenWalk] = {}
        # the records of the client's logger with captureLogs, else None
        self.logged: RecordingHandler | None = None

    def after(self, a: dict[str, Any]) -> dict[str, Any]:
        """The page's place: the raw key after, or afterPage, the nextAfter of a page an earlier
        step saved (a key is opaque, so a case cannot write one)."""
        if not a.get("afterPage"):
            return pick(a, "after")
        nxt = self.pages.get(a["afterPage"])
        if not nxt:
            raise ValueError(f"no saved page {a['afterPage']!r} with a nextAfter")
        return {"after": nxt}

    def messages(self, name: str, indices: list[int] | None = None) -> list[Any]:
        if name not in self.saved:
            raise ValueError(f"no saved messages {name!r}")
        ms = self.saved[name]
        if indices is None:
            return ms
        for i in indices:
            # Python would take a negative index from the end; the other adapters refuse it.
            if not 0 <= i < len(ms):
                raise ValueError(f"saved messages {name!r} have no index {i}")
        return [ms[i] for i in indices]

    async def walk(
        self,
        rows: Iterator[Any] | AsyncIterator[Any],
        a: dict[str, Any],
        kept: Callable[[Any], None] = lambda _: None,
    ) -> dict[str, Any]:
        """A walk step: every row, or with pauseAfter the first rows, the walk left open under
        save for a walkResume step."""
        save = a.get("save")
        if save and save in self.walks:
            raise ValueError(f"a walk is already saved as {save!r}")
        w = OpenWalk(rows, kept)
        if save:
            self.walks[save] = w
        try:
            return await w.take(a.get("pauseAfter") or 0)
        finally:
            if not save:
                await w.stop()

    async def step(self, op: str, a: dict[str, Any]) -> dict[str, Any]:
        """Run one step through its op_<name> method (every op of docs/conformance.md has one)."""
        fn = getattr(self, "op_" + op, None)
        if fn is None:
            return {"unsupported": op}
        try:
            result: dict[str, Any] = await fn(self.client, a)
            return result
        except lanes.LanesError as e:
            return {"error": err_kind(e)}

    # Queue-plane steps: they answer SDK errors themselves, with the partial results the SDK
    # reports; any other exception is an adapter bug (adapterError), as in Go.

    async def op_push(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        # deadlineMs is the caller's deadline for the call: lanes.deadline around it.
        bound = (
            lanes.deadline(a["deadlineMs"] / 1000)
            if a.get("deadlineMs")
            else contextlib.nullcontext()
        )
        try:
            with bound:
                pushed = await awaited(builder(c, a).push(items(a.get("items"))))
                return {"items": push_items(pushed)}
        except PushError as e:
            return {"items": push_items(e.results), "error": err_kind(e)}
        except lanes.LanesError as e:
            return {"error": err_kind(e)}

    async def op_bufferPush(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        """Push the items into the client's push buffer for the queue and partition, then flush
        it (the flush interval is long, so only that flush sends); report the error callback's
        calls (onError: the error, or a DroppedError's cause; dropped: the transaction ids of
        the items dropped) and the client's buffer stats after the flush."""
        on_error: list[Any] = []
        dropped: list[Any] = []

        def report(err: BaseException) -> None:
            if isinstance(err, lanes.DroppedError):
                on_error.append(err_kind(err.cause))
                dropped.extend(it.transaction_id for it in err.items)
            else:
                on_error.append(err_kind(err))

        opts: dict[str, Any] = {"time_millis": 60000, "on_error": report}
        if "messageCount" in a:
            opts["message_count"] = a["messageCount"]
        if "retryDelayMs" in a:
            opts["retry_delay_millis"] = a["retryDelayMs"]
        if "maxSize" in a:
            opts["max_size"] = a["maxSize"]
        out: dict[str, Any] = {}
        try:
            buf = builder(c, a).buffer(**opts)
            if await push_within(buf, items(a.get("items")), a.get("pushTimeoutMs")):
                await awaited(buf.flush((a.get("flushTimeoutMs") or 10000) / 1000))
            else:
                out["pushTimedOut"] = True  # nothing queued; the step does not flush
        except lanes.LanesError as e:
            out["error"] = err_kind(e)
        stats = c.buffer_stats()
        return {
            **out,
            "onError": on_error,
            "dropped": dropped,
            "stats": {
                "activeBuffers": stats.active_buffers,
                "totalBufferedMessages": stats.total_buffered_messages,
                "flushesPerformed": stats.flushes_performed,
            },
        }

    async def op_pop(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        try:
            pr = await awaited(builder(c, a).pop_result())
        except lanes.LanesError as e:
            return {"error": err_kind(e)}
        if a.get("save"):
            self.saved[a["save"]] = pr.messages
        return pop_summary(pr)

    async def op_ack(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        ms = self.messages(a["messages"], a.get("indices"))
        if a.get("transactionId"):
            # Another message under the saved messages' lease.
            ms = [dataclasses.replace(m, transaction_id=a["transactionId"]) for m in ms]
        try:
            res = await awaited(
                c.ack(
                    ms,
                    a["status"],
                    group=a.get("group") or None,
                    error=a.get("error") or None,
                    without_lease=bool(a.get("withoutLease")),
                )
            )
            return {"success": success_list(res), "results": ack_rows(res)}
        except AckError as e:
            return {
                "success": success_list(e.results),
                "results": ack_rows(e.results),
                "error": err_kind(e),
            }
        except lanes.LanesError as e:
            return {"error": err_kind(e)}

    async def op_renew(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        try:
            res = await awaited(c.renew(self.messages(a["messages"]), seconds=a.get("seconds", 60)))
            return {"success": success_list(res)}
        except lanes.LanesError as e:
            return {"error": err_kind(e)}

    async def op_transaction(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        try:
            tx = self.build_transaction(c.transaction(), a.get("ops") or [])
        except lanes.LanesError as e:
            return {"ok": False, "error": err_kind(e)}  # a refusal while building: nothing sent
        try:
            res = await awaited(tx.commit())
            out = {"ok": True}
            if res.kv:
                out["kv"] = wire(res.kv)
            return out
        except lanes.LanesError as e:
            return {"ok": False, "error": err_kind(e)}

    def build_transaction(self, tx: Any, ops: list[dict[str, Any]]) -> Any:
        """Add the step's ops to the transaction through the builder's own calls."""
        for o in ops:
            if "push" in o:
                p = o["push"]
                tq = tx.queue(p["queue"])
                if "partition" in p:
                    tq = tq.partition(p["partition"])
                tx = tq.push(items(p.get("items")))
            elif "ack" in o:
                k = o["ack"]
                [m] = self.messages(k["messages"], [k["index"]])
                tx = tx.ack(
                    m,
                    k["status"],
                    consumer_group=k.get("group") or None,
                    error=k.get("error") or None,
                    **({"without_lease": True} if k.get("withoutLease") else {}),
                )
            elif "kv" in o:
                tx = tx_kv(tx, o["kv"])
            elif "timer" in o:
                t = o["timer"]
                tx = tx.timer_schedule(
                    t["queue"], t["key"], delay_millis=t.get("delayMs", 0), **timer_payload(t)
                )
            elif "cancelTimer" in o:
                tx = tx.timer_cancel(o["cancelTimer"]["queue"], o["cancelTimer"]["key"])
            else:
                raise ValueError("transaction op needs push, ack, kv, timer or cancelTimer")
        return tx

    async def op_configure(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        try:
            await awaited(
                c.admin.configure_queue(
                    a["queue"],
                    a.get("options") or {},
                    namespace=a.get("namespace") or None,
                    task=a.get("task") or None,
                )
            )
            return {"ok": True}
        except lanes.LanesError as e:
            return {"ok": False, "error": err_kind(e)}

    async def op_seek(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        kw: dict[str, Any] = {}
        if a.get("toEnd"):
            kw["to_end"] = True
        else:
            kw["timestamp"] = self.marks[a["mark"]]
        try:
            if "partition" in a:
                await awaited(
                    c.admin.seek_consumer_group_partition(
                        a["group"], a["queue"], a["partition"], **kw
                    )
                )
            else:
                await awaited(c.admin.seek_consumer_group(a["group"], a["queue"], **kw))
            return {"ok": True}
        except lanes.LanesError as e:
            return {"ok": False, "error": err_kind(e)}

    async def op_mark(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        self.marks[a["name"]] = datetime.now(timezone.utc)
        return {"ok": True}

    async def op_logs(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        """The records the client's logger got so far, at the step's level or above."""
        if self.logged is None:
            raise ValueError("logs: the case's client has no captureLogs")
        levels = RecordingHandler.LEVELS
        least = a.get("level", "debug")
        if least not in levels:
            raise ValueError(f"logs: level {least!r}, want debug, info, warn or error")
        keep = levels[levels.index(least) :]
        return {"records": [r for r in self.logged.records if r["level"] in keep]}

    async def op_close(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        """Close the client in the middle of the case (the case's end closes it again, which
        is safe), so the steps after it run on a closed client."""
        try:
            await self.driver.close(c)
        except lanes.LanesError as e:
            return {"ok": False, "error": err_kind(e)}
        return {"ok": True}

    async def op_sleep(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(a.get("ms", 0) / 1000)
        return {}

    async def op_dlq(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        page = {**pick(a, "limit", "offset"), **self.after(a)}
        try:
            lst = await awaited(
                c.admin.list_dlq(
                    queue=a.get("queue"), consumer_group=a.get("group") or None, **page
                )
            )
        except lanes.LanesError as e:
            return {"error": err_kind(e)}
        if a.get("save"):
            self.dlq[a["save"]] = list(lst.messages or [])
            self.pages[a["save"]] = lst.next_after
        data = [m.data for m in (lst.messages or [])]
        return {
            "count": len(data),
            "data": data,
            "rows": wire(list(lst.messages or [])),
            "truncated": lst.truncated,
            "nextAfter": lst.next_after,
        }

    async def op_dlqAll(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        rows = c.admin.all_dlq(
            queue=a.get("queue"), consumer_group=a.get("group") or None, **pick(a, "limit")
        )
        # save also keeps the dead letters handed over, in walk order, for dlqReplay
        kept: list[Any] = []
        if a.get("save"):
            self.dlq[a["save"]] = kept
        return await self.walk(rows, a, kept.append)

    async def op_walkResume(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        """The rest of a paused walk's rows (pauseAfter: that many more)."""
        w = self.walks.get(a.get("walk", ""))
        if w is None:
            raise ValueError(f"no walk saved as {a.get('walk')!r}")
        return await w.take(a.get("pauseAfter") or 0)

    async def op_consume(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        """The consume loop with the scripted handler (the driver's: def or async def) until
        the step's stop, or until it ends on its own; cut at maxMs (timedOut)."""
        q = loop_settings(builder(c, a), a)
        if a.get("concurrency", 0) > 0:
            q = q.concurrency(a["concurrency"])
        if a.get("renewEveryMs", 0) > 0:
            q = q.renew_lease(True, a["renewEveryMs"])
        if a.get("softStopTimeoutMs", 0) > 0:
            q = q.soft_stop_timeout_millis(a["softStopTimeoutMs"])
        if a.get("reportHandlerErrors"):
            q = q.report_handler_errors(True)
        script = HandlerScript(a.get("handler") or {})
        started: list[Any] = []  # the consumer, for a handler that honours its hard stop
        q = q.on_error(script.report)
        handler = self.driver.handler(script, c, started)
        consumer = q.consume_batch(handler) if script.batch else q.consume(handler)
        started.append(consumer)
        out: dict[str, Any] = {}
        max_s = (a.get("maxMs") or 20000) / 1000
        deadline = time.monotonic() + max_s
        stop_after = a.get("stopAfterMs", 0)
        if a.get("stopWhenHandled", 0) > 0:
            # Stop relative to the handler's progress, not to the start (robust under load).
            await poll(consumer, deadline, lambda: len(script.handled) >= a["stopWhenHandled"])
            stop_after = max(stop_after, 1)
        if stop_after > 0:
            stop_at = time.monotonic() + stop_after / 1000
            await poll(consumer, stop_at)
            if not consumer.done:
                t0 = time.monotonic()
                try:
                    if a.get("stop") == "hard":
                        await awaited(consumer.stop_and_cancel(max_s))
                    else:
                        await awaited(consumer.stop(max_s))
                except Exception as e:
                    out["stopError"] = err_kind(e)
                out["stopMs"] = int((time.monotonic() - t0) * 1000)
        await poll(consumer, deadline)
        if not consumer.done:
            out["timedOut"] = True
            with contextlib.suppress(Exception):
                await awaited(consumer.stop_and_cancel(5))
        out.update(script.record())
        if consumer.error is not None:
            out["error"] = err_kind(consumer.error)
        return out

    async def op_iterate(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        """The pull iterator until it ends on its own (limit, idle, a terminal error) or the
        body breaks at message ``break`` (1-based); at maxMs ``stop()`` ends it (timedOut)."""
        q = loop_settings(builder(c, a), a)
        on_error: list[Any] = []
        q = q.on_error(lambda err: on_error.append(err_kind(err)))
        handled: list[Any] = []
        by_partition: dict[str, list[Any]] = {}
        out: dict[str, Any] = {}
        it = q.messages()
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            it.stop()

        cancel_expiry = self.driver.call_later((a.get("maxMs") or 20000) / 1000, expire)
        try:
            # Leaving the block closes the iterator: the release of what was not handled.
            async with closing(it):
                while (m := await next_row(it)) is not END:
                    handled.append(m.data)
                    by_partition.setdefault(m.partition, []).append(m.data)
                    if len(handled) == a.get("break"):
                        break
        except lanes.LanesError as e:
            out["error"] = err_kind(e)
        finally:
            cancel_expiry()
        if expired.is_set():
            out["timedOut"] = True
        return {**out, "handled": handled, "byPartition": by_partition, "onError": on_error}

    # KV, timer, DLQ, message and consumer-group steps: each answers the SDK's result in wire
    # field names; SDK errors become the step's error, anything else is an adapter error.

    async def op_kvGet(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        return await wire_result(c.kv(a["ns"]).get(a["key"]))

    async def op_kvPut(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        # ifAbsent: put_if_absent; expect: a conditional put (0 = the key must not exist).
        kv = c.kv(a["ns"])
        if a.get("ifAbsent"):
            return await wire_result(
                kv.put_if_absent(a["key"], a.get("value"), ttl_seconds=a.get("ttlSeconds"))
            )
        expect = {"expect": a["expect"]} if "expect" in a else {}
        return await wire_result(
            kv.put(a["key"], a.get("value"), ttl_seconds=a.get("ttlSeconds"), **expect)
        )

    async def op_kvDelete(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        expect = {"expect": a["expect"]} if "expect" in a else {}
        return await wire_result(c.kv(a["ns"]).delete(a["key"], **expect))

    async def op_kvIncr(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        bounds = {k: a[k] for k in ("min", "max") if k in a}
        return await wire_result(
            c.kv(a["ns"]).incr(
                a["key"], a.get("delta", 1), ttl_seconds=a.get("ttlSeconds"), **bounds
            )
        )

    async def op_kvBatch(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        ops = a.get("ops") or []
        ns = ops[0]["ns"] if ops else ""
        return {"results": wire(await awaited(c.kv(ns).batch(ops)))}

    async def op_timerSchedule(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        return await wire_result(
            c.timers(a["queue"]).schedule(
                a["key"],
                delay_millis=a.get("delayMs", 0),
                **timer_payload(a),
                **timer_place(a),
            )
        )

    async def op_timerReschedule(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        return await wire_result(
            c.timers(a["queue"]).reschedule(
                a["key"], delay_millis=a.get("delayMs", 0), **timer_payload(a), **timer_place(a)
            )
        )

    async def op_timerBatch(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        # Each op through lanes.timer_op, sent in one timers(q).batch call.
        ops = [
            lanes.timer_op(o["op"], o["queue"], o["key"])
            if o["op"] == "cancel"
            else lanes.timer_op(
                o["op"],
                o["queue"],
                o["key"],
                delay_millis=o.get("delayMs", 0),
                **timer_payload(o),
                **timer_place(o),
            )
            for o in a.get("ops") or []
        ]
        queue = a["ops"][0]["queue"] if a.get("ops") else ""
        return {"results": wire(await awaited(c.timers(queue).batch(ops)))}

    async def op_timerGet(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        return await wire_result(c.timers(a["queue"]).get(a["key"]))

    async def op_timerCancel(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        return await wire_result(c.timers(a["queue"]).cancel(a["key"]))

    async def op_timerList(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        return await wire_result(
            c.timers(a["queue"]).list(
                limit=a.get("limit") or None,
                after=a.get("after") or None,
                prefix=a.get("prefix") or None,
            )
        )

    async def op_dlqReplay(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        dlq_id = self.dlq[a["dlq"]][a.get("index", 0)].id if a.get("dlq") else a["id"]
        return await wire_result(
            c.admin.replay_dlq(dlq_id, queue=a.get("queue"), partition=a.get("partition"))
        )

    async def op_dlqPurge(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        return await wire_result(c.admin.purge_dlq(a["queue"], a.get("group") or None))

    def address(self, a: dict[str, Any]) -> tuple[str, str]:
        """A message step's target: a saved message (messages + index), a message a message walk
        handed over (walk + index, in walk order), or raw ids."""
        if a.get("walk"):
            rows, i = self.walked.get(a["walk"], []), a.get("index", 0)
            if not 0 <= i < len(rows):
                raise ValueError(f"no message {a['walk']}[{i}] handed over by a message walk")
            return rows[i].partition_id, rows[i].transaction_id
        if not a.get("messages"):
            return a["partitionId"], a["transactionId"]
        [m] = self.messages(a["messages"], [a.get("index", 0)])
        return m.partition_id, m.transaction_id

    async def op_messageGet(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        return await wire_result(c.admin.get_message(*self.address(a)))

    async def op_messageDelete(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        return await wire_result(c.admin.delete_message(*self.address(a)))

    async def op_messageRetry(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        return await wire_result(c.admin.retry_message(*self.address(a)))

    async def op_groups(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        return {
            "names": group_names(
                [g.name for g in await awaited(c.admin.list_consumer_groups())],
                a.get("prefix", ""),
            )
        }

    async def op_groupDelete(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        meta = a.get("deleteMetadata", True)
        if a.get("queue"):
            return await wire_result(
                c.admin.delete_consumer_group_for_queue(a["group"], a["queue"], meta)
            )
        return await wire_result(c.admin.delete_consumer_group(a["group"], meta))

    async def op_lagging(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        rows = await awaited(c.admin.lagging_consumer_groups(a.get("minLagSeconds", 0)))
        return {"names": group_names([r.consumer_group for r in rows], a.get("prefix", ""))}

    # Queue, listing, status, system, consumer-group detail and KV listing steps.

    async def op_queueGet(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        return await wire_result(c.admin.get_queue(a["queue"]))

    async def op_queueDelete(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        return await wire_result(c.admin.delete_queue(a["queue"]))

    async def op_queues(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        page = {**pick(a, "namespace", "task", "limit", "offset"), **self.after(a)}
        lst = await awaited(c.admin.list_queues(**page))
        if a.get("save"):
            self.pages[a["save"]] = lst.next_after
        return await wire_result(lst)

    async def op_queuesAll(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        return await self.walk(c.admin.all_queues(**pick(a, "namespace", "task", "limit")), a)

    async def op_depth(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        return await wire_result(c.admin.get_queue_depth(a["queue"], a.get("group") or None))

    async def op_overview(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        return await wire_result(c.admin.get_overview())

    async def op_namespaces(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        return prefixed(
            await wire_result(c.admin.get_namespaces()),
            "namespaces",
            "namespace",
            a.get("prefix", ""),
        )

    async def op_tasks(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        return prefixed(
            await wire_result(c.admin.get_tasks()), "tasks", "task", a.get("prefix", "")
        )

    async def op_status(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        return await wire_result(c.admin.get_status(**pick(a, "queue", "namespace", "task")))

    async def op_queueStatuses(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        page = {**pick(a, "queue", "namespace", "task", "limit", "offset"), **self.after(a)}
        lst = await awaited(c.admin.list_queue_status(**page))
        if a.get("save"):
            self.pages[a["save"]] = lst.next_after
        return await wire_result(lst)

    async def op_queueStatusesAll(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        return await self.walk(
            c.admin.all_queue_status(**pick(a, "queue", "namespace", "task", "limit")), a
        )

    async def op_queueStatus(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        return await wire_result(
            c.admin.get_queue_status(a["queue"], a.get("includePartitions", False))
        )

    async def op_bufferStatus(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        return await wire_result(c.admin.get_buffer_status())

    async def op_metrics(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        return await wire_result(c.admin.get_metrics())

    async def op_health(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        return await wire_result(c.health())

    async def op_maintenance(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        scope = maintenance_scope(a)
        if scope == "push":
            return await wire_result(c.admin.get_maintenance_mode())
        return await wire_result(c.admin.get_pop_maintenance_mode())

    async def op_setMaintenance(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        scope = maintenance_scope(a)
        if scope == "push":
            return await wire_result(c.admin.set_maintenance_mode(a["enabled"]))
        return await wire_result(c.admin.set_pop_maintenance_mode(a["enabled"]))

    async def op_messages(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        page = {**pick(a, "queue", "partition", "status", "limit", "offset"), **self.after(a)}
        lst = await awaited(c.admin.list_messages(**page))
        if a.get("save"):
            self.pages[a["save"]] = lst.next_after
        return await wire_result(lst)

    async def op_messagesAll(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        rows = c.admin.all_messages(**pick(a, "queue", "partition", "status", "limit"))
        # save also keeps the messages handed over, in walk order, for the message steps' walk
        # address
        kept: list[Any] = []
        if a.get("save"):
            self.walked[a["save"]] = kept
        return await self.walk(rows, a, kept.append)

    async def op_group(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        return await wire_result(c.admin.get_consumer_group(a["group"]))

    async def op_subscription(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        return await wire_result(c.admin.update_subscription(a["group"], self.marks[a["mark"]]))

    async def op_kvList(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        kw = pick(a, "prefix", "after", "limit")
        kw.update(
            keys_only=a.get("keysOnly", False), include_expired=a.get("includeExpired", False)
        )
        return await wire_result(c.kv(a["ns"]).list(**kw))

    async def op_kvNamespaces(self, c: Client, a: dict[str, Any]) -> dict[str, Any]:
        return prefixed(
            await wire_result(c.kv_namespaces()), "namespaces", "namespace", a.get("prefix", "")
        )


class HandlerScript:
    """The consume step's scripted handler (docs/conformance.md, ``consume``): what it records,
    how long it sleeps, when it fails and what it acks. Each driver's handler runs it."""

    def __init__(self, h: dict[str, Any]) -> None:
        self._lock = threading.Lock()  # the blocking client runs handlers on several threads
        self.handled: list[Any] = []
        self._by_partition: dict[str, list[Any]] = {}
        self._on_error: list[Any] = []
        self._sleep_ms = h.get("sleepMs", 0)
        self._first_sleep_ms = h.get("firstSleepMs", 0)
        self.honour_cancel = bool(h.get("honourCancel"))
        self._ack = h.get("ack")
        # A batch handler (consume_batch) gets each partition slice in one call.
        self.batch = bool(h.get("batch"))
        self._batches: list[list[Any]] = []
        self._fail_left: dict[str, int] = {}
        self._fail_as: dict[str, dict[str, Any]] = {}
        for f in h.get("fail") or []:
            k = canonical(f.get("data"))
            self._fail_left[k] = self._fail_left.get(k, 0) + max(f.get("times", 1), 1)
            self._fail_as[k] = f

    def messages(self, arg: Any) -> list[Any]:
        """The messages of one handler call: its one message, or a batch handler's slice."""
        return list(arg) if self.batch else [arg]

    def begin(self, ms: list[Any]) -> tuple[float, dict[str, Any] | None]:
        """Record a handler call: the seconds it sleeps, and the failure it raises after (a
        batch fails whole when a fail entry matches any of its messages)."""
        with self._lock:
            first = not self.handled
            fail = None
            for m in ms:
                key = canonical(m.data)
                self.handled.append(m.data)
                self._by_partition.setdefault(m.partition, []).append(m.data)
                if self._fail_left.get(key, 0) > 0:
                    self._fail_left[key] -= 1
                    fail = self._fail_as[key]
            if self.batch:
                self._batches.append([m.data for m in ms])
            ms_sleep = (
                self._first_sleep_ms if first and self._first_sleep_ms > 0 else self._sleep_ms
            )
        return ms_sleep / 1000, fail

    def end(self, client: Client, ms: list[Any], fail: dict[str, Any] | None) -> Any:
        """Raise the scripted failure, or ack as scripted: what the ack call gave (a coroutine
        from AsyncLanes), None without an ack."""
        if fail is not None:
            raise handler_failure(fail)
        if not self._ack:
            return None
        return client.ack(ms if self.batch else ms[0], self._ack)

    def report(self, err: BaseException) -> None:
        """The consumer's error callback."""
        with self._lock:
            self._on_error.append(err_kind(err))

    def record(self) -> dict[str, Any]:
        with self._lock:
            out = {
                "handled": list(self.handled),
                "byPartition": {k: list(v) for k, v in self._by_partition.items()},
                "onError": list(self._on_error),
            }
            if self.batch:
                out["batches"] = [list(b) for b in self._batches]
            return out


class Blocking:
    """Runs lanes.Lanes: its calls block, so a step makes them in turn on the case's event loop,
    and its consumer calls plain (def) handlers on its own threads."""

    client_type = lanes.Lanes

    @staticmethod
    async def close(client: Any) -> None:
        client.close(5)

    @staticmethod
    def background(step: Callable[[], Coroutine[Any, Any, None]]) -> Awaitable[None]:
        """Start a step on a thread of its own (the case's loop is held by the blocking calls of
        the steps after it); awaiting what this returns joins it."""
        t = threading.Thread(target=asyncio.run, args=(step(),), daemon=True)
        t.start()
        return asyncio.to_thread(t.join)

    @staticmethod
    def call_later(seconds: float, fn: Callable[[], None]) -> Callable[[], None]:
        """Call fn in seconds from a timer thread (the loop may be held by a blocking call);
        returns the cancel."""
        timer = threading.Timer(seconds, fn)
        timer.start()
        return timer.cancel

    @staticmethod
    def handler(script: HandlerScript, client: Any, started: list[Any]) -> Callable[[Any], None]:
        def handle(arg: Any) -> None:
            ms = script.messages(arg)
            sleep_s, fail = script.begin(ms)
            if sleep_s > 0:
                if script.honour_cancel:
                    while not started:  # the first call may come before consume() returned
                        time.sleep(0.001)
                    if started[0].cancel_event.wait(sleep_s):
                        raise ConsumerStoppedError("handler cancelled by a hard stop")
                else:
                    time.sleep(sleep_s)
            script.end(client, ms, fail)

        return handle


class Asyncio:
    """Runs lanes.AsyncLanes: its calls, background steps and async def handlers all run on
    the case's event loop."""

    client_type = lanes.AsyncLanes

    @staticmethod
    async def close(client: Any) -> None:
        await client.aclose(5)

    @staticmethod
    def background(step: Callable[[], Coroutine[Any, Any, None]]) -> Awaitable[None]:
        return asyncio.ensure_future(step())

    @staticmethod
    def call_later(seconds: float, fn: Callable[[], None]) -> Callable[[], None]:
        return asyncio.get_running_loop().call_later(seconds, fn).cancel

    @staticmethod
    def handler(
        script: HandlerScript, client: Any, started: list[Any]
    ) -> Callable[[Any], Awaitable[None]]:
        async def handle(arg: Any) -> None:
            ms = script.messages(arg)
            sleep_s, fail = script.begin(ms)
            if sleep_s > 0:
                # A hard stop cancels an async handler at its await, honourCancel or not: the
                # CancelledError raised here is AsyncLanes' stop cancellation.
                await asyncio.sleep(sleep_s)
            await awaited(script.end(client, ms, fail))

        return handle


Driver: TypeAlias = type[Blocking] | type[Asyncio]


async def run_case(c: dict[str, Any], driver: Driver) -> list[dict[str, Any]]:
    own_http = None
    if (c.get("client") or {}).get("callerTransport"):
        own_http = stamping_http_client(driver.client_type)
    logged: RecordingHandler | None = None
    logger = None
    if (c.get("client") or {}).get("captureLogs"):
        logger, logged = recording_logger(c.get("run") or "")
    client = new_client(c, driver.client_type, own_http, logger)
    st = CaseState(client, driver)
    st.logged = logged
    steps: list[dict[str, Any]] = [{"id": s["id"]} for s in c["steps"]]
    background: list[Awaitable[None]] = []

    async def run_step(i: int, t0: float, after_s: float = 0) -> None:
        if after_s > 0:
            await asyncio.sleep(after_s)
        s = c["steps"][i]
        try:
            result = await st.step(s["op"], s.get("args") or {}) or {}
        except Exception:
            result = {"adapterError": traceback.format_exc()}
        result["elapsedMs"] = int((time.monotonic() - t0) * 1000)
        steps[i]["result"] = result

    try:
        for i, s in enumerate(c["steps"]):
            t0 = time.monotonic()
            if s.get("background"):
                # A push only (no saved state shared): starts afterMs from now, joined at the end.
                after_s = s["background"].get("afterMs", 0) / 1000
                background.append(driver.background(functools.partial(run_step, i, t0, after_s)))
            else:
                await run_step(i, t0)
        for b in background:
            await b
        for w in st.walks.values():
            await w.stop()
    finally:
        with contextlib.suppress(Exception):
            await driver.close(client)
        if logger is not None and logged is not None:
            logger.removeHandler(logged)
        # The caller's HTTP client stays the caller's to close.
        if isinstance(own_http, httpx.AsyncClient):
            await own_http.aclose()
        elif own_http is not None:
            own_http.close()
    return steps


def main() -> None:
    driver: Driver = Asyncio if "--async" in sys.argv[1:] else Blocking
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            c = json.loads(line)
        except ValueError as e:
            print(json.dumps({"error": f"bad case line: {e}"}), flush=True)
            continue
        try:
            # A loop per case, as a program of its own: it ends with the case's client.
            out: dict[str, Any] = {"case": c.get("case"), "steps": asyncio.run(run_case(c, driver))}
        except Exception:
            out = {"case": c.get("case"), "steps": [], "error": traceback.format_exc()}
        print(json.dumps(out, default=str), flush=True)


if __name__ == "__main__":
    main()
