"""The consume loop, the message iterators and a producer ride through a broker SIGKILL and a
PostgreSQL restart.

The broker and the cluster are the test's own (scripts/fault-broker.sh): the shared test broker
and ``make test``'s cluster serve other tests meanwhile, so they cannot be killed."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import socket
import subprocess
import threading
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

import lanes

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "fault-broker.sh"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class FaultBroker:
    def __init__(self) -> None:
        port, pg_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.env = {
            **os.environ,
            "LANES_FAULT_DIR": f"/tmp/lanes-fault-py-{port}-{os.getpid()}",
            "LANES_FAULT_PORT": str(port),
            "LANES_FAULT_PG_PORT": str(pg_port),
        }

    def run(self, action: str) -> None:
        done = subprocess.run(
            ["bash", str(SCRIPT), action], env=self.env, capture_output=True, text=True
        )
        assert done.returncode == 0, f"fault-broker.sh {action}: {done.stdout}{done.stderr}"


@pytest.fixture
def fault_broker() -> Iterator[FaultBroker]:
    fb = FaultBroker()
    try:
        fb.run("start")
        yield fb
    finally:
        fb.run("stop")


@pytest.fixture
def closing() -> Iterator[list[lanes.Lanes]]:
    """Clients closed when the test ends, passed or failed, so no consumer outlives it."""
    clients: list[lanes.Lanes] = []
    yield clients
    for c in clients:
        with contextlib.suppress(Exception):
            c.close(timeout=5)


@pytest.fixture
async def aclosing() -> AsyncIterator[list[lanes.AsyncLanes]]:
    clients: list[lanes.AsyncLanes] = []
    yield clients
    for c in clients:
        with contextlib.suppress(Exception):
            await c.aclose(timeout=5)


class LoopWarnings(logging.Handler):
    """A consume loop's or iterator's warnings ("lanes: consume: <op>: <error>", "lanes:
    messages: <op>: <error>") and when each came."""

    def __init__(self, loop: str = "consume") -> None:
        super().__init__(logging.WARNING)
        self.loop = loop
        self.records: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((time.monotonic(), record.getMessage()))

    def count(self, op: str) -> int:
        prefix = f"lanes: {self.loop}: {op}:"
        return sum(msg.startswith(prefix) for _, msg in list(self.records))

    def ack_failed_between(self, start: float, end: float) -> bool:
        return any(
            start <= at <= end and msg.startswith(f"lanes: {self.loop}: ack:")
            for at, msg in list(self.records)
        )


def warned_logger(warnings: LoopWarnings) -> logging.Logger:
    log = logging.getLogger(f"lanes.test.faults.{id(warnings)}")
    log.addHandler(warnings)
    log.propagate = False
    return log


def wait_until(done: Callable[[], object], what: str, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"waited {timeout} s for {what}"
        time.sleep(0.02)


async def async_wait_until(done: Callable[[], object], what: str, timeout: float = 15) -> None:
    for _ in range(int(timeout / 0.02)):
        if done():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"waited {timeout} s for {what}")


def test_consumer_and_producer_ride_through_broker_kill_and_postgres_restart(
    fault_broker: FaultBroker, closing: list[lanes.Lanes]
) -> None:
    queue, plain_n, buffered_n, partitions = "sdkfaults-py", 300, 150, 4
    warnings = LoopWarnings()
    log = logging.getLogger(f"lanes.test.faults.{id(warnings)}")
    log.addHandler(warnings)
    log.propagate = False
    producer = lanes.Lanes(fault_broker.url)
    consumer_client = lanes.Lanes(fault_broker.url, logger=log)
    closing += [producer, consumer_client]

    handled: dict[str, list[float]] = defaultdict(list)
    order: dict[str, list[str]] = defaultdict(list)
    handled_lock = threading.Lock()

    def handler(m: lanes.Message) -> None:
        with handled_lock:
            record(m, handled, order)
        time.sleep(0.005)  # some work, so a backlog builds and pops carry batches

    q = consumer_client.queue(queue).concurrency(2).lease_seconds(10)
    consumer = q.consume(handler)

    # The iterator reads the same messages through a group of its own, on a client of its own so
    # its warnings are told apart from the loop's; a short long poll lets stop() end it soon.
    iter_warnings = LoopWarnings("messages")
    iter_client = lanes.Lanes(fault_broker.url, logger=warned_logger(iter_warnings))
    closing.append(iter_client)
    iter_view = iter_client.queue(queue).group("iter").subscription_mode("all")
    it = iter_view.lease_seconds(10).timeout_millis(1000).messages()
    iter_handled: dict[str, list[float]] = defaultdict(list)
    iter_order: dict[str, list[str]] = defaultdict(list)
    iter_end: list[str] = []  # how the iterator ended, once it has

    def iterate() -> None:
        try:
            with it:
                for m in it:
                    with handled_lock:
                        record(m, iter_handled, iter_order)
                    time.sleep(0.005)
            iter_end.append("returned")
        except BaseException as e:
            iter_end.append(f"raised {e!r}")

    iterating = threading.Thread(target=iterate, daemon=True)
    iterating.start()

    told: dict[str, str] = {}
    push_errors: list[str] = []
    buffer_errors: list[BaseException] = []
    pushed = threading.Semaphore(0)
    # The buffered producer goes at the plain one's pace, an item per push call (answered or
    # failed): on a slow machine it would otherwise be done before the broker goes down, and
    # no buffer flush would fail.
    buffer_turns = threading.Semaphore(0)
    stop = threading.Event()

    def push_plain() -> None:
        # An application resends an item the SDK did not report stored, with the same id.
        for i in range(plain_n):
            txn = f"py-{i:03d}"
            part = producer.queue(queue).partition(f"p{i % partitions}")
            while not stop.is_set():
                buffer_turns.release()
                try:
                    res = part.push([{"transaction_id": txn, "data": {"i": i}}])
                    told[txn] = res[0].status
                    break
                except lanes.LanesError as e:
                    push_errors.append(repr(e))
                    time.sleep(0.05)
            pushed.release()
            time.sleep(0.005)

    buf = (
        producer.queue(queue)
        .partition("buffered")
        .buffer(message_count=10, time_millis=20, on_error=buffer_errors.append)
    )

    def push_buffered() -> None:
        for i in range(buffered_n):
            while not buffer_turns.acquire(timeout=0.1):
                if stop.is_set():
                    return
            buf.push([{"transaction_id": f"py-buf-{i:03d}", "data": {"i": i}}])
            time.sleep(0.01)

    threads = [threading.Thread(target=push_plain), threading.Thread(target=push_buffered)]
    for t in threads:
        t.start()
    try:
        for _ in range(plain_n // 3):
            assert pushed.acquire(timeout=20)
        fault_broker.run("kill")
        time.sleep(1)
        # Down until both loops met the outage past the SDK's own retries, so their recovery runs:
        # a worker resending a failed ack pops nothing meanwhile, so its failed ack counts too.
        wait_until(
            lambda: (
                warnings.count("pop") + warnings.count("ack") > 0
                and iter_warnings.count("pop") + iter_warnings.count("ack") > 0
                and push_errors
                and buffer_errors
            ),
            "a failed pop or ack (loop and iterator), push and buffer flush reported while the"
            " broker is down",
        )
        fault_broker.run("start")
        for _ in range(plain_n // 3):
            assert pushed.acquire(timeout=20)
        buffered = list(told.values()).count("buffered")
        fault_broker.run("stop-pg")
        wait_until(
            lambda: list(told.values()).count("buffered") > buffered,
            "a push answered buffered while PostgreSQL is down",
        )
        fault_broker.run("start-pg")
        for t in threads:
            t.join(timeout=30)
            assert not t.is_alive(), "a producer hangs"
    finally:
        stop.set()
    # The buffer holds what it could not send yet; close sends it (or raises UnsentError).
    producer.close(timeout=20)
    for i in range(buffered_n):
        told[f"py-buf-{i:03d}"] = "in the push buffer"
    assert len(told) == plain_n + buffered_n

    # Done when every stored message was handled and the broker holds nothing uncommitted: a
    # message whose ack failed has then come back after its lease and been acked.
    def settled(handled: dict[str, list[float]], view: lanes.Queue) -> bool:
        with handled_lock:
            if any(txn not in handled for txn in told):
                return False
        try:
            return view.depth().pending == 0
        except lanes.LanesError:
            return False

    def both_settled() -> bool:
        return settled(handled, consumer_client.queue(queue)) and settled(iter_handled, iter_view)

    deadline = time.monotonic() + 25
    while not both_settled() and time.monotonic() < deadline and not consumer.done and not iter_end:
        time.sleep(0.05)
    assert not consumer.done, f"the consume loop ended on its own: {consumer.error!r}"
    assert not iter_end, f"the iterator ended on its own: {iter_end}"
    consumer.stop(timeout=10)
    assert consumer.error is None
    consumer_client.close()
    it.stop()
    iterating.join(timeout=10)
    assert iter_end == ["returned"], "the iterator's end on stop()"

    print(f"push errors {push_errors}; buffer errors {buffer_errors}")
    check_outcome("consume loop", told, handled, order, warnings, buffer_errors)
    check_outcome("iterator", told, iter_handled, iter_order, iter_warnings, buffer_errors)


def record(
    m: lanes.Message,
    handled: dict[str, list[float]],
    order: dict[str, list[str]],
) -> None:
    """Notes a handling, and each partition's first handlings in order."""
    if m.transaction_id not in handled:
        order[m.partition_id].append(m.transaction_id)
    handled[m.transaction_id].append(time.monotonic())


def check_outcome(
    who: str,
    told: dict[str, str],
    handled: dict[str, list[float]],
    order: dict[str, list[str]],
    warnings: LoopWarnings,
    buffer_errors: list[BaseException],
) -> None:
    """Every push reported stored was handled, nothing else was, each partition in push order
    (the producers push one item at a time, so ids ascend), and a message handled again had an
    ack failure reported in between."""
    missing = sorted(txn for txn in told if txn not in handled)
    unknown = sorted(txn for txn in handled if txn not in told)
    unexplained = [
        txn
        for txn, times in handled.items()
        for first, again in itertools.pairwise(times)
        if not warnings.ack_failed_between(first, again)
    ]
    redelivered = sum(len(times) - 1 for times in handled.values())
    statuses: dict[str, int] = defaultdict(int)
    for status in told.values():
        statuses[status] += 1
    print(
        f"{who}: stored {len(told)} {dict(statuses)}, handled {len(handled)} distinct, "
        f"{redelivered} redelivered; warnings {[m for _, m in warnings.records]}"
    )
    assert missing == [], f"{who}: stored but never handled"
    assert unknown == [], f"{who}: handled but never pushed"
    out_of_order = [
        f"{a} before {b}" for txns in order.values() for a, b in itertools.pairwise(txns) if b < a
    ]
    assert out_of_order == [], f"{who}: a partition's messages handled out of push order"
    assert unexplained == [], f"{who}: handled again though no ack failure was reported in between"
    # A failed ack is resent until it lands (the broker is back well inside the 10 s
    # lease), so no message is handled twice; before, each failed ack gave its pop back.
    assert redelivered == 0, f"{who}: handled twice: a failed ack was not resent until it landed"
    assert not [e for e in buffer_errors if isinstance(e, lanes.DroppedError)]


async def test_async_consumer_and_producer_ride_through_broker_kill_and_postgres_restart(
    fault_broker: FaultBroker, aclosing: list[lanes.AsyncLanes]
) -> None:
    queue, plain_n, buffered_n, partitions = "sdkfaults-py-async", 300, 150, 4
    warnings = LoopWarnings()
    log = logging.getLogger(f"lanes.test.faults.{id(warnings)}")
    log.addHandler(warnings)
    log.propagate = False
    producer = lanes.AsyncLanes(fault_broker.url)
    consumer_client = lanes.AsyncLanes(fault_broker.url, logger=log)
    aclosing += [producer, consumer_client]

    handled: dict[str, list[float]] = defaultdict(list)
    order: dict[str, list[str]] = defaultdict(list)

    async def handler(m: lanes.Message) -> None:
        record(m, handled, order)
        await asyncio.sleep(0.005)  # some work, so a backlog builds and pops carry batches

    q = consumer_client.queue(queue).concurrency(2).lease_seconds(10)
    consumer = q.consume(handler)

    # The iterator reads the same messages through a group of its own, on a client of its own.
    iter_warnings = LoopWarnings("messages")
    iter_client = lanes.AsyncLanes(fault_broker.url, logger=warned_logger(iter_warnings))
    aclosing.append(iter_client)
    iter_view = iter_client.queue(queue).group("iter").subscription_mode("all")
    iter_handled: dict[str, list[float]] = defaultdict(list)
    iter_order: dict[str, list[str]] = defaultdict(list)

    async def iterate() -> None:
        async with iter_view.lease_seconds(10).messages() as it:
            async for m in it:
                record(m, iter_handled, iter_order)
                await asyncio.sleep(0.005)

    iterating = asyncio.ensure_future(iterate())

    told: dict[str, str] = {}
    push_errors: list[str] = []
    buffer_errors: list[BaseException] = []
    a_third, two_thirds = asyncio.Event(), asyncio.Event()
    # The buffered producer goes at the plain one's pace, as in the blocking test.
    buffer_turns = asyncio.Semaphore(0)

    async def push_plain() -> None:
        for i in range(plain_n):
            txn = f"py-{i:03d}"
            part = producer.queue(queue).partition(f"p{i % partitions}")
            while True:
                buffer_turns.release()
                try:
                    res = await part.push([{"transaction_id": txn, "data": {"i": i}}])
                    told[txn] = res[0].status
                    break
                except lanes.LanesError as e:
                    push_errors.append(repr(e))
                    await asyncio.sleep(0.05)
            if i + 1 == plain_n // 3:
                a_third.set()
            if i + 1 == 2 * plain_n // 3:
                two_thirds.set()
            await asyncio.sleep(0.005)

    buf = (
        producer.queue(queue)
        .partition("buffered")
        .buffer(message_count=10, time_millis=20, on_error=buffer_errors.append)
    )

    async def push_buffered() -> None:
        for i in range(buffered_n):
            await buffer_turns.acquire()
            await buf.push([{"transaction_id": f"py-buf-{i:03d}", "data": {"i": i}}])
            await asyncio.sleep(0.01)

    producers = asyncio.gather(push_plain(), push_buffered())
    await asyncio.wait_for(a_third.wait(), 20)
    await asyncio.to_thread(fault_broker.run, "kill")
    await asyncio.sleep(1)
    await async_wait_until(
        lambda: (
            warnings.count("pop") + warnings.count("ack") > 0
            and iter_warnings.count("pop") + iter_warnings.count("ack") > 0
            and push_errors
            and buffer_errors
        ),
        "a failed pop or ack (loop and iterator), push and buffer flush reported while the broker"
        " is down",
    )
    await asyncio.to_thread(fault_broker.run, "start")
    await asyncio.wait_for(two_thirds.wait(), 20)
    buffered = list(told.values()).count("buffered")
    await asyncio.to_thread(fault_broker.run, "stop-pg")
    await async_wait_until(
        lambda: list(told.values()).count("buffered") > buffered,
        "a push answered buffered while PostgreSQL is down",
    )
    await asyncio.to_thread(fault_broker.run, "start-pg")
    await asyncio.wait_for(producers, 30)
    await producer.aclose(timeout=20)
    for i in range(buffered_n):
        told[f"py-buf-{i:03d}"] = "in the push buffer"
    assert len(told) == plain_n + buffered_n

    async def settled(handled: dict[str, list[float]], view: lanes.AsyncQueue) -> bool:
        if any(txn not in handled for txn in told):
            return False
        try:
            return (await view.depth()).pending == 0
        except lanes.LanesError:
            return False

    for _ in range(500):  # 25 s
        if consumer.done or iterating.done():
            break
        if await settled(handled, consumer_client.queue(queue)) and await settled(
            iter_handled, iter_view
        ):
            break
        await asyncio.sleep(0.05)
    assert not consumer.done, f"the consume loop ended on its own: {consumer.error!r}"
    assert not iterating.done(), f"the iterator ended on its own: {iterating!r}"
    await consumer.stop(timeout=10)
    assert consumer.error is None
    await consumer_client.aclose()
    iterating.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await iterating

    print(f"push errors {push_errors}; buffer errors {buffer_errors}")
    check_outcome("consume loop", told, handled, order, warnings, buffer_errors)
    check_outcome("iterator", told, iter_handled, iter_order, iter_warnings, buffer_errors)
