"""The names docs/sdk-design.md's tables give the Python SDK, for ``Lanes`` and ``AsyncLanes``
alike. A name removed or renamed fails here, so the tables cannot drift from the code silently; a
row added to a table gets its names added here (sdk-go/surface_test.go and
sdk-js/test/unit/surface.test.ts hold the same rows for Go and TS)."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

import lanes

# §1: client options (keywords of both constructors) and client methods.
CLIENT_KWARGS = [
    "url", "urls", "bearer_token", "timeout", "retry_attempts", "retry_delay", "max_retry_delay",
    "max_429_attempts", "max_retry_after", "health_retry_after", "logger", "http_client", "headers",
    "pop_autopilot",
]  # fmt: skip

# Methods (and the keywords the tables name) per class, sync then async.
CLIENT = {
    "queue": [], "transaction": [], "kv": [], "kv_namespaces": [], "timers": [], "health": [],
    "ack": ["group", "error", "without_lease"], "renew": ["seconds"], "flush_all": [],
    "buffer_stats": [],
}  # fmt: skip
QUEUE = {
    # §2 producing
    "partition": [], "push": [],
    "buffer": ["message_count", "time_millis", "max_size", "retry_delay_millis", "on_error"],
    # §3 consuming
    "namespace": [], "task": [], "group": [], "subscription_mode": [], "subscription_from": [],
    "batch": [], "partitions": [], "autopilot": [], "wait": [], "timeout_millis": [],
    "lease_seconds": [], "server_auto_ack": [], "concurrency": [], "limit": [], "idle_millis": [],
    "renew_lease": [], "each": [], "auto_ack": [], "on_error": [], "soft_stop_timeout_millis": [],
    "report_handler_errors": [], "pop": [], "pop_result": [], "consume": [], "consume_batch": [],
    "run": [], "messages": [],
    # §6 admin through the builder
    "configure": [], "delete": [], "depth": [], "dlq": [],
}  # fmt: skip
DLQ_QUERY: dict[str, list[str]] = {
    "partition": [],
    "limit": [],
    "offset": [],
    "after": [],
    "from_": [],
    "to": [],
    "get": [],
    "all": [],
}
CONSUMER: dict[str, list[str]] = {
    "stop": [],
    "stop_and_cancel": [],
    "closed": [],
    "done": [],
    "error": [],
}
TRANSACTION = {
    "queue": [], "ack": ["group", "consumer_group"], "commit": [],
    "kv_put": ["ttl_seconds", "required"], "kv_put_if_absent": ["ttl_seconds", "required"],
    "kv_delete": ["expect", "required"], "kv_incr": ["ttl_seconds", "min", "max", "required"],
    "kv_get": [], "timer_schedule": ["delay_millis", "payload"], "timer_cancel": [],
}  # fmt: skip
ADMIN = {
    "configure_queue": [], "get_queue": [], "delete_queue": [],
    "list_queues": ["namespace", "task", "limit", "offset"], "get_queue_depth": ["group"],
    "seek_consumer_group": ["to_end", "timestamp"], "seek_consumer_group_partition": [],
    "list_consumer_groups": [], "get_consumer_group": [],
    "lagging_consumer_groups": ["min_lag_seconds"], "delete_consumer_group": [],
    "delete_consumer_group_for_queue": [], "update_subscription": [],
    "list_dlq": ["queue", "consumer_group", "partition", "from_", "to", "limit", "offset", "after"],
    "purge_dlq": [], "replay_dlq": ["queue", "partition"],
    "list_messages": [
        "queue", "partition", "namespace", "task", "status", "from_", "to", "limit", "offset",
        "after",
    ],
    "get_message": [], "delete_message": [], "retry_message": [],
    "get_overview": [], "get_namespaces": [], "get_tasks": [],
    "get_status": ["queue", "namespace", "task", "from_", "to"], "list_queue_status": [],
    "get_queue_status": ["include_partitions"], "get_buffer_status": [], "get_metrics": [],
    "get_maintenance_mode": [], "set_maintenance_mode": [], "get_pop_maintenance_mode": [],
    "set_pop_maintenance_mode": [],
    "all_queues": ["namespace", "task", "limit", "offset", "after"],
    "all_queue_status": ["queue", "namespace", "task", "limit", "offset", "after"],
    "all_dlq": ["queue", "consumer_group", "partition", "from_", "to", "limit", "offset", "after"],
    "all_messages": [
        "queue", "partition", "namespace", "task", "status", "from_", "to", "limit", "offset",
        "after",
    ],
}  # fmt: skip
KV = {
    "get": [], "put": ["ttl_seconds", "expect"], "put_if_absent": ["ttl_seconds"],
    "get_many": [], "get_prefix": ["after", "limit", "keys_only"],
    "incr": ["delta", "ttl_seconds", "min", "max"], "delete": ["expect"], "batch": [],
    "list": ["prefix", "after", "limit", "keys_only", "include_expired"],
}  # fmt: skip
TIMERS = {
    "schedule": ["delay_millis", "payload", "partition", "transaction_id"],
    "reschedule": ["delay_millis"], "cancel": [], "get": [], "list": ["limit", "after", "prefix"],
    "batch": [],
}  # fmt: skip

PAIRS: list[tuple[type[Any], type[Any], dict[str, list[str]]]] = [
    (lanes.Lanes, lanes.AsyncLanes, CLIENT),
    (lanes.Queue, lanes.AsyncQueue, QUEUE),
    (lanes.DlqQuery, lanes.AsyncDlqQuery, DLQ_QUERY),
    (lanes.Consumer, lanes.AsyncConsumer, CONSUMER),
    (lanes.Transaction, lanes.AsyncTransaction, TRANSACTION),
    (lanes.Admin, lanes.AsyncAdmin, ADMIN),
    (lanes.KV, lanes.AsyncKV, KV),
    (lanes.Timers, lanes.AsyncTimers, TIMERS),
]

# §7: every error class, under LanesError; the per-status kinds under APIError.
STATUS_KINDS = [
    "BadRequestError", "AuthenticationError", "PermissionDeniedError", "NotFoundError",
    "ConflictError", "PayloadTooLargeError", "RateLimitError", "InternalServerError",
    "NotImplementedByBrokerError",
]  # fmt: skip
OTHER_ERRORS = [
    "APIError", "APIConnectionError", "APITimeoutError", "OutcomeUnknownError",
    "UnexpectedAnswerError", "PushError", "AckError", "TransactionError", "InvalidItemError",
    "InvalidNameError", "InvalidValueError", "ClientClosedError", "UnsentError", "DroppedError",
    "EmptyTransactionError", "ConsumerStoppedError", "AutoAckDroppedError", "HandlerError",
]  # fmt: skip
# Module-level helpers and types the tables name.
MODULE = ["Item", "PushResult", "Message", "PopResult", "AckResult", "RenewResult", "deadline",
          "kv_op", "timer_op", "ConsumerStopped"]  # fmt: skip


def keywords(fn: Any) -> set[str]:
    return set(inspect.signature(fn).parameters)


@pytest.mark.parametrize("cls", [lanes.Lanes, lanes.AsyncLanes])
def test_client_options(cls: type[Any]) -> None:
    assert set(CLIENT_KWARGS) <= keywords(cls.__init__)


@pytest.mark.parametrize(("sync", "async_", "names"), PAIRS, ids=[p[0].__name__ for p in PAIRS])
def test_each_table_row_exists_in_both_clients(
    sync: type[Any], async_: type[Any], names: dict[str, list[str]]
) -> None:
    for cls in (sync, async_):
        for name, kws in names.items():
            assert hasattr(cls, name), f"{cls.__name__}.{name}"
            member = inspect.getattr_static(cls, name)
            if kws and callable(member):
                missing = set(kws) - keywords(getattr(cls, name))
                assert not missing, f"{cls.__name__}.{name} lacks {sorted(missing)}"


async def test_admin_and_close() -> None:
    with lanes.Lanes("http://127.0.0.1:1") as c:
        assert isinstance(c.admin, lanes.Admin)
    async with lanes.AsyncLanes("http://127.0.0.1:1") as ac:
        assert isinstance(ac.admin, lanes.AsyncAdmin)
    assert inspect.iscoroutinefunction(lanes.AsyncLanes.aclose)


def test_error_tree() -> None:
    for name in STATUS_KINDS:
        assert issubclass(getattr(lanes, name), lanes.APIError), name
    for name in STATUS_KINDS + OTHER_ERRORS:
        cls = getattr(lanes, name)
        assert issubclass(cls, lanes.LanesError), name
        assert name.endswith("Error")
    assert issubclass(lanes.APITimeoutError, lanes.APIConnectionError)
    assert lanes.ConsumerStopped is lanes.ConsumerStoppedError


def test_module_names() -> None:
    for name in MODULE:
        assert hasattr(lanes, name), name


@pytest.mark.parametrize("cls", [lanes.Lanes, lanes.AsyncLanes])
def test_builder_setters_return_a_new_builder_and_leave_the_base_as_it_was(
    cls: type[Any],
) -> None:
    """docs/sdk-design.md §0: builders are immutable values, so a base builder can be shared."""
    c = cls("http://127.0.0.1:1")
    base = c.queue("orders")
    before = repr(base._spec)
    knobs: dict[str, Any] = {
        "partition": "p", "group": "g", "subscription_mode": "new", "subscription_from": "now",
        "batch": 5, "partitions": 2, "autopilot": False, "wait": False, "timeout_millis": 100,
        "lease_seconds": 3, "server_auto_ack": True, "concurrency": 3, "limit": 4,
        "idle_millis": 5, "auto_ack": False, "soft_stop_timeout_millis": 7,
        "report_handler_errors": True, "namespace": "n", "task": "t", "renew_lease": False,
        "on_error": lambda e: None,
    }  # fmt: skip
    for name, value in knobs.items():
        assert getattr(base, name)(value) is not base, name
    assert repr(base._spec) == before
    dlq = base.dlq("g")
    assert dlq.limit(3) is not dlq
