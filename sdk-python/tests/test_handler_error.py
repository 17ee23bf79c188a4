"""A reported handler failure names the message(s) it was about (a HandlerError); the failed
ack keeps the handler's own text, so the dead letter reads as before."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Iterator

import pytest

import lanes


class NegativeAmountError(ValueError):
    pass


@pytest.fixture
def sync_client(broker_url: str) -> Iterator[lanes.Lanes]:
    with lanes.Lanes(broker_url, retry_attempts=1, timeout=10) as c:
        yield c


@pytest.fixture
async def async_client(broker_url: str) -> AsyncIterator[lanes.AsyncLanes]:
    async with lanes.AsyncLanes(broker_url, retry_attempts=1, timeout=10) as c:
        yield c


def _check_one(errors: list[BaseException], qname: str) -> None:
    assert len(errors) == 1, errors
    err = errors[0]
    assert isinstance(err, lanes.HandlerError) and isinstance(err, lanes.LanesError)
    assert isinstance(err.__cause__, NegativeAmountError) and err.cause is err.__cause__
    assert [(m.transaction_id, m.partition, m.queue) for m in err.messages] == [
        ("pay-7", "acct-7", qname)
    ]
    assert err.messages[0].partition_id
    assert str(err) == (
        f'lanes: handler failed on transaction pay-7 (queue "{qname}", partition "acct-7"): '
        "negative amount"
    )


def test_sync_handler_error_names_its_message(sync_client: lanes.Lanes, qname: str) -> None:
    sync_client.queue(qname).configure({"retryLimit": 0})
    sync_client.queue(qname).partition("acct-7").push(
        [{"transaction_id": "pay-7", "data": {"amount": -5}}]
    )
    errors: list[BaseException] = []

    def handle(m: lanes.Message) -> None:
        raise NegativeAmountError("negative amount")

    q = sync_client.queue(qname).wait(False).limit(1).report_handler_errors(True)
    q.on_error(errors.append).consume(handle).closed(timeout=20)
    _check_one(errors, qname)
    dlq = sync_client.admin.list_dlq(queue=qname).messages
    assert [d.error_message for d in dlq] == ["negative amount"]


async def _push_one_order(client: lanes.AsyncLanes, qname: str) -> None:
    """One order, pay-7 on partition acct-7, of a queue whose failures dead-letter at once."""
    await client.queue(qname).configure({"retryLimit": 0})
    await (
        client.queue(qname)
        .partition("acct-7")
        .push([{"transaction_id": "pay-7", "data": {"amount": -5}}])
    )


async def test_async_handler_error_names_its_message(
    async_client: lanes.AsyncLanes, qname: str
) -> None:
    await _push_one_order(async_client, qname)
    errors: list[BaseException] = []

    async def handle(m: lanes.Message) -> None:
        raise NegativeAmountError("negative amount")

    q = async_client.queue(qname).wait(False).limit(1).report_handler_errors(True)
    await asyncio.wait_for(q.on_error(errors.append).run(handle), 20)
    _check_one(errors, qname)
    dlq = (await async_client.admin.list_dlq(queue=qname)).messages
    assert [d.error_message for d in dlq] == ["negative amount"]


def test_batch_handler_error_carries_its_slice(sync_client: lanes.Lanes, qname: str) -> None:
    sync_client.queue(qname).configure({"retryLimit": 0})
    ids = [f"bulk-{i}" for i in range(7)]
    sync_client.queue(qname).partition("acct-9").push(
        [{"transaction_id": t, "data": i} for i, t in enumerate(ids)]
    )
    errors: list[BaseException] = []

    def handle(ms: list[lanes.Message]) -> None:
        raise RuntimeError("ledger closed")

    q = sync_client.queue(qname).wait(False).batch(10).limit(7).report_handler_errors(True)
    q.on_error(errors.append).consume_batch(handle).closed(timeout=20)
    assert len(errors) == 1, errors
    err = errors[0]
    assert isinstance(err, lanes.HandlerError) and isinstance(err.__cause__, RuntimeError)
    assert [m.transaction_id for m in err.messages] == ids
    assert str(err) == (
        "lanes: handler failed on 7 messages, transactions bulk-0, bulk-1, bulk-2, bulk-3, "
        f'bulk-4 and 2 more (queue "{qname}", partition "acct-9"): ledger closed'
    )
    dlq = sync_client.admin.list_dlq(queue=qname).messages
    assert [d.error_message for d in dlq] == ["ledger closed"]


async def test_plain_handler_returning_an_awaitable_names_its_message(
    async_client: lanes.AsyncLanes, qname: str
) -> None:
    """AsyncLanes awaits what a plain (def) handler returns; its failure is reported as an
    async handler's is, naming the message."""
    await _push_one_order(async_client, qname)
    errors: list[BaseException] = []

    async def settle(m: lanes.Message) -> None:
        raise NegativeAmountError("negative amount")

    def handle(m: lanes.Message) -> Awaitable[None]:
        return settle(m)

    q = async_client.queue(qname).wait(False).limit(1).report_handler_errors(True)
    await asyncio.wait_for(q.on_error(errors.append).run(handle), 20)
    _check_one(errors, qname)
    dlq = (await async_client.admin.list_dlq(queue=qname)).messages
    assert [d.error_message for d in dlq] == ["negative amount"]
