"""Many consumers on one client: the SDK's own connection pools have no cap, so every long poll
waits at once, as with the Go and TypeScript clients."""

from __future__ import annotations

import asyncio
import threading
import time

import lanes

# More concurrent long polls than httpx's default pool allows (100 connections).
_POLLS = 130
_WAIT_MS = 3000
# Capped at 100 connections, 30 polls start only as others end: they end after two waits.
_BOUND = 1.8 * _WAIT_MS / 1000


def test_more_long_polls_than_httpx_pools_by_default_wait_at_once(
    broker_url: str, qname: str
) -> None:
    client = lanes.Lanes(broker_url, retry_attempts=1, timeout=30)
    ended: list[float] = []

    def poll() -> None:
        assert q.pop() == []
        ended.append(time.monotonic())

    try:
        q = client.queue(qname).wait(True).timeout_millis(_WAIT_MS).autopilot(False)
        q.push([{"data": {"n": 0}}])  # the queue exists, then holds nothing
        assert len(q.wait(False).pop()) == 1
        start = time.monotonic()
        threads = [threading.Thread(target=poll) for _ in range(_POLLS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        client.close()
    assert len(ended) == _POLLS
    took = max(ended) - start
    assert took < _BOUND, f"{_POLLS} long polls of {_WAIT_MS} ms took {took:.2f} s"


def test_more_long_polls_than_httpx_pools_by_default_wait_at_once_async(
    broker_url: str, qname: str
) -> None:
    async def run() -> float:
        client = lanes.AsyncLanes(broker_url, retry_attempts=1, timeout=30)
        try:
            q = client.queue(qname).wait(True).timeout_millis(_WAIT_MS).autopilot(False)
            await q.push([{"data": {"n": 0}}])
            assert len(await q.wait(False).pop()) == 1
            start = time.monotonic()
            results = await asyncio.gather(*(q.pop() for _ in range(_POLLS)))
            assert results == [[]] * _POLLS
            return time.monotonic() - start
        finally:
            await client.aclose()

    took = asyncio.run(run())
    assert took < _BOUND, f"{_POLLS} long polls of {_WAIT_MS} ms took {took:.2f} s"
