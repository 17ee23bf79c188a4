"""The client's close() (aclose()) ends the iterations made from it, and releases what an
iterator paused between two messages holds and has not handed over, before it closes the HTTP
pool (docs/consuming.md §5). Before, that release went out only at the iterator's next
``next()`` or its own close, after the pool had closed: it failed, and the messages stayed
leased for the whole lease. The same cases run in sdk-go (iterator_close_integration_test.go)
and sdk-js (iterator-close.test.ts), whose close() ends no iteration."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import httpx
import pytest

import lanes


def free_at_once(broker_url: str, qname: str) -> list[Any]:
    """What a fresh client's pop gets at once (no wait), acked so nothing stays leased."""
    with lanes.Lanes(broker_url) as c:
        got = c.queue(qname).batch(10).autopilot(False).wait(False).pop()
        if got:
            c.ack(got)
        return [m.data for m in got]


@pytest.mark.parametrize("stopped", [True, False], ids=["stopped", "not-stopped"])
def test_close_releases_what_a_paused_iterator_holds(
    broker_url: str, qname: str, stopped: bool
) -> None:
    c = lanes.Lanes(broker_url)
    c.queue(qname).push([1, 2, 3, 4, 5])
    it = c.queue(qname).batch(5).lease_seconds(60).autopilot(False).messages()
    assert [next(it).data, next(it).data] == [1, 2]  # 2 in hand, 3 to 5 not handed over
    if stopped:
        it.stop()
    c.close()
    # 1 was handled (acked completed); the message in hand and the three not handed over are
    # released, as leaving the loop releases them.
    assert free_at_once(broker_url, qname) == [2, 3, 4, 5], "left leased by the iterator"
    with pytest.raises(StopIteration):
        next(it)  # the iteration ended with the client: nothing more is handed over


def test_close_bounds_a_paused_iterators_release_by_its_timeout(
    broker_url: str, qname: str
) -> None:
    # The release close() sends for a paused iterator ran under the per-attempt timeout alone
    # (30 s by default, and its retries), outside close()'s timeout: a broker slow to answer it
    # held close(1) as long as it took.
    run = f"py-{uuid.uuid4().hex[:12]}"
    c = lanes.Lanes(broker_url, headers={"X-Lanes-Test-Run": run})
    c.queue(qname).push([1, 2, 3])
    it = c.queue(qname).batch(3).lease_seconds(60).autopilot(False).messages()
    assert next(it).data == 1
    faults = f"{broker_url}/__test/faults/{run}"
    held = [{"pass": True, "holdAnswerMs": 4000, "times": 10}]
    rules = [{"method": "POST", "path": "/api/v1/ack*", "responses": held}]
    assert httpx.put(faults, content=json.dumps({"rules": rules})).status_code == 204
    try:
        began = time.monotonic()
        c.close(timeout=1)
        took = time.monotonic() - began
        attempts = httpx.get(faults).json()["rules"][0]["attempts"]
    finally:
        httpx.delete(faults)
    assert attempts >= 1, "close() sent no release"
    assert took < 1 + 1, f"close(timeout=1) took {took:.2f} s"


def test_close_releases_nothing_handed_over_under_auto_ack_false(
    broker_url: str, qname: str
) -> None:
    # Under auto_ack(False) the messages handed over are the caller's: a release of the rest
    # would end their lease under them (docs/consuming.md §1), so close() sends none.
    c = lanes.Lanes(broker_url)
    c.queue(qname).push([1, 2, 3])
    it = c.queue(qname).batch(3).lease_seconds(60).auto_ack(False).autopilot(False).messages()
    assert next(it).data == 1
    c.close()
    assert free_at_once(broker_url, qname) == []


@pytest.mark.parametrize("stopped", [True, False], ids=["stopped", "not-stopped"])
async def test_aclose_releases_what_a_paused_iterator_holds(
    broker_url: str, qname: str, stopped: bool
) -> None:
    c = lanes.AsyncLanes(broker_url)
    await c.queue(qname).push([1, 2, 3, 4, 5])
    it = c.queue(qname).batch(5).lease_seconds(60).autopilot(False).messages()
    assert [(await it.__anext__()).data, (await it.__anext__()).data] == [1, 2]
    if stopped:
        it.stop()
    await c.aclose()
    assert free_at_once(broker_url, qname) == [2, 3, 4, 5], "left leased by the iterator"
    with pytest.raises(StopAsyncIteration):
        await it.__anext__()
