"""Several broker URLs against a real broker (docs/retries.md §4): a URL whose connection is
refused is skipped for ``health_retry_after`` seconds, then asked again, in both clients."""

from __future__ import annotations

import asyncio
import socket
import time

import httpx
import pytest

import lanes


def closed_port_url() -> str:
    """A local URL nobody listens on: connecting to it is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def host(url: str) -> str:
    return url.split("://", 1)[1].rstrip("/")


def recording(seen: list[str]) -> httpx.Client:
    """An HTTP client that notes the host of every attempt in ``seen``, then sends it for real."""
    return httpx.Client(
        event_hooks={"request": [lambda r: seen.append(f"{r.url.host}:{r.url.port}")]}
    )


@pytest.mark.parametrize(
    ("after", "retried"), [(0.2, True), (None, False)], ids=["configured-0.2s", "default-5s"]
)
def test_failing_url_skipped_then_retried(
    broker_url: str, after: float | None, retried: bool
) -> None:
    dead = closed_port_url()
    seen: list[str] = []
    hc = recording(seen)
    urls = [dead, broker_url]
    client = (
        lanes.Lanes(urls=urls, http_client=hc)
        if after is None
        else lanes.Lanes(urls=urls, http_client=hc, health_retry_after=after)
    )
    with client as c:
        c.health()
        assert seen == [host(dead), host(broker_url)], "the first call fails over"
        seen.clear()
        c.health()
        assert seen == [host(broker_url)], "the failing URL is skipped"
        seen.clear()
        time.sleep(0.4)
        c.health()
        if retried:
            assert seen == [host(dead), host(broker_url)], "asked again once the time passed"
        else:
            assert seen == [host(broker_url)], "still skipped inside the default 5 s"


def test_failing_url_skipped_then_retried_async(broker_url: str) -> None:
    dead = closed_port_url()
    seen: list[str] = []

    async def record(r: httpx.Request) -> None:
        seen.append(f"{r.url.host}:{r.url.port}")

    async def main() -> None:
        hc = httpx.AsyncClient(event_hooks={"request": [record]})
        urls = [dead, broker_url]
        async with lanes.AsyncLanes(urls=urls, http_client=hc, health_retry_after=0.2) as c:
            await c.health()
            await c.health()
            await asyncio.sleep(0.4)
            await c.health()

    asyncio.run(main())
    d, b = host(dead), host(broker_url)
    assert seen == [d, b, b, d, b]


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_bad_health_retry_after_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="health_retry_after must be a non-negative number"):
        lanes.Lanes(urls=["http://127.0.0.1:1", "http://127.0.0.1:2"], health_retry_after=bad)
