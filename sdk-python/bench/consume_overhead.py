"""What the consume loop costs the client per message, next to a hand-written pop + ack loop.

Fills a queue on a real broker with ``--n`` messages over ``--partitions`` partitions, then
drains it with one variant and reports the Python process's CPU time per message
(``time.process_time()``: every thread of this process, not wall time, so other work on the
machine does not count). The variants run in alternating rounds, each on a fresh queue:

  pop          the blocking client: ``q.pop()`` of ``--batch``, a no-op per message, one ack
               of the batch, until all are acked
  consume      the blocking client's consumer: ``q.consume(handler)`` with a no-op handler
  async-pop    as ``pop`` with AsyncLanes
  async-consume  AsyncLanes's consumer with an ``async def`` no-op handler

Only draining is timed (not filling). Run against a broker of your own, for example:

  LANES_TEST_PORT=8604 scripts/test-broker.sh start
  cd sdk-python && PYTHONPATH=src .venv/bin/python bench/consume_overhead.py \\
      --url http://127.0.0.1:8604 --n 20000 --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import threading
import time
import uuid
from collections.abc import Callable

import lanes

GROUP = "bench"
VARIANTS = ("pop", "consume", "async-pop", "async-consume")


def fill(client: lanes.Lanes, queue: str, n: int, partitions: int) -> None:
    chunk = 1000
    for start in range(0, n, chunk):
        items = [{"data": {"i": i}} for i in range(start, min(n, start + chunk))]
        client.queue(queue).partition(f"p{start // chunk % partitions}").push(items)


def builder(client: lanes.Lanes | lanes.AsyncLanes, queue: str, batch: int) -> lanes.Queue:
    return (
        client.queue(queue)  # type: ignore[return-value]
        .group(GROUP)
        .subscription_mode("all")
        .batch(batch)
        .timeout_millis(1000)
    )


def drain_pop(client: lanes.Lanes, queue: str, n: int, batch: int) -> None:
    q = builder(client, queue, batch)
    done = 0
    while done < n:
        messages = q.pop()
        for m in messages:
            noop(m)
        if messages:
            client.ack(messages)
        done += len(messages)


def drain_consume(client: lanes.Lanes, queue: str, n: int, batch: int) -> None:
    handled = 0
    all_handled = threading.Event()

    def handle(m: lanes.Message) -> None:
        nonlocal handled
        handled += 1
        if handled == n:
            all_handled.set()

    consumer = builder(client, queue, batch).consume(handle)
    all_handled.wait()
    consumer.stop()  # acks the last pop's messages before it returns
    consumer.closed()


async def adrain_pop(client: lanes.AsyncLanes, queue: str, n: int, batch: int) -> None:
    q = builder(client, queue, batch)
    done = 0
    while done < n:
        messages = await q.pop()  # type: ignore[misc]
        for m in messages:
            noop(m)
        if messages:
            await client.ack(messages)
        done += len(messages)


async def adrain_consume(client: lanes.AsyncLanes, queue: str, n: int, batch: int) -> None:
    handled = 0
    all_handled = asyncio.Event()

    async def handle(m: lanes.Message) -> None:
        nonlocal handled
        handled += 1
        if handled == n:
            all_handled.set()

    consumer = builder(client, queue, batch).consume(handle)  # type: ignore[arg-type]
    await all_handled.wait()
    await consumer.stop()  # type: ignore[misc]
    await consumer.closed()  # type: ignore[misc]


def noop(m: lanes.Message) -> None:
    pass


def run_variant(variant: str, url: str, queue: str, n: int, batch: int) -> float:
    """Drain ``queue`` with ``variant``; return the CPU seconds it took."""
    if variant.startswith("async-"):
        drain = adrain_pop if variant == "async-pop" else adrain_consume

        async def timed() -> float:
            async with lanes.AsyncLanes(url) as client:
                t0 = time.process_time()
                await drain(client, queue, n, batch)
                return time.process_time() - t0

        return asyncio.run(timed())
    with lanes.Lanes(url) as client:
        sync_drain: Callable[[lanes.Lanes, str, int, int], None] = (
            drain_pop if variant == "pop" else drain_consume
        )
        t0 = time.process_time()
        sync_drain(client, queue, n, batch)
        return time.process_time() - t0


def left_in(url: str, queue: str) -> int:
    with lanes.Lanes(url) as client:
        depth = client.queue(queue).group(GROUP).depth()
        return int(depth.pending)


def context_switches() -> int:
    """The process's voluntary context switches so far: each time one of its threads waited (for
    an answer, or for another thread). Preemptions by other work are left out."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw


def one_round(variant: str, args: argparse.Namespace) -> tuple[float, float, float]:
    """Fill a fresh queue and drain it; return (CPU µs per message, wall seconds, voluntary
    context switches per pop)."""
    queue = f"bench-{variant}-{uuid.uuid4().hex[:8]}"
    with lanes.Lanes(args.url) as client:
        fill(client, queue, args.n, args.partitions)
    wall0, switches0 = time.monotonic(), context_switches()
    cpu = run_variant(variant, args.url, queue, args.n, args.batch)
    wall, switches = time.monotonic() - wall0, context_switches() - switches0
    left = left_in(args.url, queue)
    if left:
        raise SystemExit(f"{variant}: {left} messages left unacked in {queue}")
    with lanes.Lanes(args.url) as client:
        client.queue(queue).delete()
    return cpu / args.n * 1e6, wall, switches / (args.n / args.batch)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--url", default=os.environ.get("LANES_TEST_URL") or os.environ.get("LANES_URL")
    )
    ap.add_argument("--n", type=int, default=20000, help="messages per round and variant")
    ap.add_argument("--batch", type=int, default=100, help="messages per pop")
    ap.add_argument("--partitions", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    args = ap.parse_args()
    if not args.url:
        raise SystemExit("--url (or LANES_TEST_URL / LANES_URL) is required")

    variants = args.variants.split(",")
    cpu: dict[str, list[float]] = {v: [] for v in variants}
    print(f"n={args.n} batch={args.batch} partitions={args.partitions} rounds={args.rounds}")
    for r in range(args.rounds):
        # Alternate the order each round, so no variant always runs first.
        for v in variants if r % 2 == 0 else reversed(variants):
            us, wall, switches = one_round(v, args)
            cpu[v].append(us)
            print(
                f"round {r + 1} {v:14s} {us:6.1f} µs CPU/msg  {args.n / wall:8.0f} msg/s"
                f"  {switches:5.1f} waits/pop"
            )
    # Other work on the machine moves every variant's CPU per message by 10-20 % from round to
    # round; the gap between two variants of the same round moves much less.
    first = variants[0]
    print(f"\nCPU µs/msg: median (min-max); the gap to {first}: median of the rounds' gaps")
    for v in variants:
        gaps = [a - b for a, b in zip(cpu[v], cpu[first], strict=True)]
        print(
            f"  {v:14s} {statistics.median(cpu[v]):6.1f} ({min(cpu[v]):.1f}-{max(cpu[v]):.1f})"
            f"  gap {statistics.median(gaps):+5.1f} ({min(gaps):+.1f} to {max(gaps):+.1f})"
        )


if __name__ == "__main__":
    main()
