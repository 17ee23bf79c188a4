"""Seed the fuzz run's broker with data the generated requests can find (stdlib only).

Usage: LANES_FUZZ_URL=http://127.0.0.1:6634 LANES_FUZZ_TOKEN=... \
       python3 tools/fuzz/seed.py SEED_FILE

Without it every operation that needs something to exist (a queue's partition, a consumer
group's cursor, a dead letter, a message, a KV key) answers 404 to nearly every case and the
run never gets past the lookup. SEED_FILE receives what hooks.py hands to the generated
requests: the fixed names below and the ids the broker minted (partition ids, dead-letter ids).
"""

import json
import os
import sys
import urllib.request
from typing import Any

QUEUE = "fuzz-orders"
DLQ_QUEUE = "fuzz-dead"
NAMESPACE = "fuzz-ns"
TASK = "fuzz-task"
GROUP = "fuzz-group"
PARTITIONS = ["p-0", "p-1", "p-2"]
KV_NAMESPACE = "fuzz-kv"
MESSAGES_PER_PARTITION = 20
# A replay, a retry or a delete uses its dead letter up: enough for each to find one.
DEAD_LETTERS = 90
KV_KEYS = 10


def call(method: str, path: str, body: object | None = None) -> Any:
    url = os.environ["LANES_FUZZ_URL"].rstrip("/") + path
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Authorization", "Bearer " + os.environ["LANES_FUZZ_TOKEN"])
    if data is not None:
        request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=30) as response:
        text = response.read()
        return json.loads(text) if text else None


def push(queue: str, partition: str, count: int, prefix: str) -> None:
    items = [
        {
            "queue": queue,
            "partition": partition,
            "payload": {"n": i, "kind": "fuzz-seed"},
            "transactionId": f"{prefix}-{i}",
        }
        for i in range(count)
    ]
    results = call("POST", "/api/v1/push", {"items": items})
    assert isinstance(results, list)
    bad = [r for r in results if r.get("status") != "queued"]
    if bad:
        sys.exit(f"seed: push to {queue}/{partition} not queued: {bad[:3]}")


def main() -> None:
    for queue in (QUEUE, DLQ_QUEUE):
        call(
            "POST",
            "/api/v1/configure",
            {"queue": queue, "namespace": NAMESPACE, "task": TASK},
        )
    total = MESSAGES_PER_PARTITION * len(PARTITIONS)
    for partition in PARTITIONS:
        push(QUEUE, partition, MESSAGES_PER_PARTITION, f"fuzz-tx-{partition}")
    # The group's first pop creates it and its cursors; its lease stays unacked on purpose, so
    # lease extension and acks have live messages to address.
    popped = call(
        "GET",
        f"/api/v1/pop/queue/{QUEUE}/partition/{PARTITIONS[0]}?batch=5&wait=false"
        f"&consumerGroup={GROUP}&subscriptionMode=all",
    )
    if not popped or not popped.get("messages"):
        sys.exit(f"seed: the group's pop from {QUEUE} returned nothing: {popped}")

    messages = call("GET", f"/api/v1/messages?queue={QUEUE}&limit=1000")
    assert isinstance(messages, dict)
    live = [
        {"partitionId": m["partitionId"], "transactionId": m["transactionId"]}
        for m in messages["messages"]
    ]
    if len(live) != total:
        sys.exit(f"seed: expected {total} messages in {QUEUE}, got {len(live)}")

    # Dead letters: only the head of a partition is dead-lettered, so pop one at a time and ack
    # each with status `dlq`.
    push(DLQ_QUEUE, "Default", DEAD_LETTERS, "fuzz-dead")
    for _ in range(DEAD_LETTERS):
        popped = call("GET", f"/api/v1/pop/queue/{DLQ_QUEUE}/partition/Default?batch=1&wait=false")
        if not popped or len(popped.get("messages", [])) != 1:
            sys.exit(f"seed: pop from {DLQ_QUEUE} returned {popped}")
        m = popped["messages"][0]
        ack = {
            "transactionId": m["transactionId"],
            "partitionId": m["partitionId"],
            "leaseId": m["leaseId"],
            "status": "dlq",
            "error": "seeded dead letter",
        }
        call("POST", "/api/v1/ack", ack)
    listed = call("GET", f"/api/v1/dlq?queue={DLQ_QUEUE}&limit=1000")
    if not isinstance(listed, dict) or len(listed.get("messages", [])) != DEAD_LETTERS:
        sys.exit(f"seed: expected {DEAD_LETTERS} dead letters in {DLQ_QUEUE}, got {listed}")
    dead = [
        {"id": m["id"], "partitionId": m["partitionId"], "transactionId": m["transactionId"]}
        for m in listed["messages"]
    ]

    for i in range(KV_KEYS):
        call("PUT", f"/api/v1/kv/{KV_NAMESPACE}/key-{i}", {"value": {"n": i}, "forever": True})

    seed = {
        "queue": QUEUE,
        "partitions": PARTITIONS,
        "namespace": NAMESPACE,
        "task": TASK,
        "group": GROUP,
        "kvNamespace": KV_NAMESPACE,
        "messages": live,
        "deadLetters": dead,
    }
    with open(sys.argv[1], "w", encoding="utf-8") as out:
        json.dump(seed, out, indent=1)

    print(
        f"seed: {QUEUE} ({total} messages in {len(PARTITIONS)} partitions, group {GROUP}), "
        f"{DEAD_LETTERS} dead letters from {DLQ_QUEUE}, {KV_KEYS} keys in KV namespace {KV_NAMESPACE}"
    )


if __name__ == "__main__":
    main()
