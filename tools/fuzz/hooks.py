"""Schemathesis hooks of the fuzz run: valid requests that reach the handlers.

scripts/fuzz-api.sh loads this file (SCHEMATHESIS_HOOKS) after tools/fuzz/seed.py wrote what it
seeded to LANES_FUZZ_SEED_FILE. Only cases schemathesis generates as valid ("positive") are
touched; the invalid ones it generates to be refused go out as generated.

Two kinds of change, per operation:
- Rules that OpenAPI 3.0 cannot state (or that the spec leaves to the broker to keep its error
  codes), documented in openapi.yaml: a discovery pop needs `namespace` or `task`, a seek needs
  `toEnd:true` or a `timestamp`, configure and the KV listing need a name that is not blank and
  configure takes no key that is not an option, a replay's destination is not blank when given.
  Without them nearly every valid case is refused with a 400 before the handler does anything.
- Every other valid case of an operation that needs existing data is pointed at the seeded data
  (a queue with partitions and a consumer group, messages, dead letters, KV keys), so it gets past
  the 404; the rest keep their generated names and still test the lookup.
After the calls, push and pop maintenance are switched off again when a case turned one on
(`after_call` below).
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections import Counter
from collections.abc import Callable
from typing import Any

import schemathesis
from schemathesis import GenerationMode

# Configure writes options, so its valid cases get a queue of their own, not a seeded one.
CONFIGURE_QUEUE = "fuzz-configured"

_seed: dict[str, Any] | None = None
# How many valid cases each operation has had, to point every other one at the seeded data.
_seen: Counter[str] = Counter()
# Replay, retry and delete use their dead letter up: each takes the next one.
_used: Counter[str] = Counter()


def seed() -> dict[str, Any]:
    global _seed
    if _seed is None:
        with open(os.environ["LANES_FUZZ_SEED_FILE"], encoding="utf-8") as source:
            _seed = json.load(source)
    return _seed


def blank(value: object) -> bool:
    # The broker refuses a name that holds only white space as it refuses an empty one.
    return not isinstance(value, str) or not value.strip()


def take(kind: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    index = min(_used[kind], len(items) - 1)
    _used[kind] += 1
    return items[index]


def pop_discover(case: Any, seeded: bool) -> None:
    # Containers are copied, never changed in place: schemathesis builds its next cases from them.
    query = dict(case.query or {})
    if seeded:
        query["namespace"] = seed()["namespace"]
    elif blank(query.get("namespace")) and blank(query.get("task")):
        query["task"] = seed()["task"]
    case.query = query


def seek(case: Any, seeded: bool) -> None:
    body = dict(case.body) if isinstance(case.body, dict) else {}
    if body.get("toEnd") is not True and "timestamp" not in body:
        body["toEnd"] = True
    case.body = body
    if seeded:
        data = seed()
        path = {**case.path_parameters, "group": data["group"], "queue": data["queue"]}
        if "partition" in path:
            partitions = data["partitions"]
            path["partition"] = partitions[_seen["seek-partition"] % len(partitions)]
            _seen["seek-partition"] += 1
        case.path_parameters = path


def configure(case: Any, seeded: bool) -> None:
    if not isinstance(case.body, dict):
        return
    schemas = case.operation.schema.raw_schema["components"]["schemas"]
    fields = schemas["ConfigureRequest"]["properties"]
    # A key that is not an option answers `invalid_option`, which the spec cannot state: its
    # QueueOptions allows unknown keys so that the broker, not the validator, answers them.
    # Inside `options`, `namespace` and `task` are options too.
    options = schemas["QueueOptions"]["properties"].keys() | {"namespace", "task"}
    if isinstance(case.body.get("options"), dict):
        body = {
            **case.body,
            "options": {k: v for k, v in case.body["options"].items() if k in options},
        }
    else:
        # Without an options object the other top-level keys are options.
        body = {k: v for k, v in case.body.items() if k in fields}
    if blank(body.get("queue")):
        body["queue"] = CONFIGURE_QUEUE
    case.body = body


def list_kv_keys(case: Any, seeded: bool) -> None:
    if isinstance(case.body, dict) and (seeded or blank(case.body.get("namespace"))):
        case.body = {**case.body, "namespace": seed()["kvNamespace"]}


def dead_letters(use: str) -> list[dict[str, Any]]:
    # Replay, retry and delete each use a dead letter up: each gets a third of them.
    dead = seed()["deadLetters"]
    third = len(dead) // 3
    start = ["replay", "retry", "delete"].index(use) * third
    return dead[start : start + third]


def replay_dlq(case: Any, seeded: bool) -> None:
    if isinstance(case.body, dict):
        # Absent means "where it came from"; blank is refused.
        case.body = {
            k: v for k, v in case.body.items() if k not in ("queue", "partition") or not blank(v)
        }
    if seeded:
        case.path_parameters = {
            **case.path_parameters,
            "id": take("replay", dead_letters("replay"))["id"],
        }


def message_address(use: str) -> Callable[[Any, bool], None]:
    def apply(case: Any, seeded: bool) -> None:
        if not seeded:
            return
        if use == "get":
            live = seed()["messages"]
            target = live[_seen["get-message"] % len(live)]
            _seen["get-message"] += 1
        else:
            target = take(use, dead_letters(use))
        case.path_parameters = {
            **case.path_parameters,
            "partitionId": target["partitionId"],
            "transactionId": target["transactionId"],
        }

    return apply


SHAPERS: dict[str, Callable[[Any, bool], None]] = {
    "popDiscover": pop_discover,
    "seekQueue": seek,
    "seekPartition": seek,
    "configure": configure,
    "listKvKeys": list_kv_keys,
    "replayDlq": replay_dlq,
    "getMessage": message_address("get"),
    "deleteMessage": message_address("delete"),
    "retryMessage": message_address("retry"),
}


# Only these operations: a case hook slows generation down for every operation it applies to
# (GET /api/v1/kv/{ns}/{key} took 80 s instead of 2 s under a hook that changed nothing).
@schemathesis.hook.apply_to(operation_id=list(SHAPERS))
def map_case(context: Any, case: Any) -> Any:
    operation_id = case.operation.definition.raw.get("operationId")
    shaper = SHAPERS[operation_id]
    if case.meta is None or case.meta.generation.mode is not GenerationMode.POSITIVE:
        return case
    seeded = _seen[operation_id] % 2 == 0
    _seen[operation_id] += 1
    shaper(case, seeded)
    return case


# Push and pop maintenance are switches of the whole broker: left on, they answer every later
# replay, retry and pushing transaction with a documented 503 (which fails `not_a_server_error`)
# and every pop with a 204, whatever operation happens to run next. A case that turned one on
# has its answer checked as usual; then it is turned off again.
MAINTENANCE_SWITCHES = {"setPushMaintenance", "setPopMaintenance"}


@schemathesis.hook
def after_call(context: Any, case: Any, response: Any) -> None:
    if case.operation.definition.raw.get("operationId") not in MAINTENANCE_SWITCHES:
        return
    if response.status_code != 200:
        return
    try:
        enabled = response.json().get("enabled")
    except (ValueError, AttributeError):
        return
    if enabled is not True:
        return
    url = os.environ["LANES_FUZZ_URL"].rstrip("/") + case.operation.path
    request = urllib.request.Request(url, data=b'{"enabled":false}', method="POST")
    request.add_header("Authorization", "Bearer " + os.environ["LANES_FUZZ_TOKEN"])
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=10) as answer:
        answer.read()
