"""Several broker URLs against a real broker (docs/retries.md §4): a URL whose connection is
refused is skipped for ``health_retry_after`` seconds, then asked again, in both clients."""

from __future__ import annotations

import asyncio
import json
import socket
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

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


def same_broker_other_host(url: str) -> str:
    """The test broker's URL with 127.0.0.1 and localhost swapped: a second URL the client tells
    apart, on the same real broker."""
    if "127.0.0.1" in url:
        return url.replace("127.0.0.1", "localhost", 1)
    assert "localhost" in url
    return url.replace("localhost", "127.0.0.1", 1)


@contextmanager
def health_fault_run(broker_url: str, health_response: dict[str, object]) -> Iterator[str]:
    """A fault script run of its own, whose first GET /health is answered as health_response;
    yields the run id for the X-Lanes-Test-Run header."""
    run = f"py-{uuid.uuid4().hex[:12]}"
    rules = [{"method": "GET", "path": "/health", "responses": [health_response]}]
    r = httpx.put(f"{broker_url}/__test/faults/{run}", content=json.dumps({"rules": rules}))
    assert r.status_code == 204, "the test broker serves no fault scripts (LANES_TEST_FAULTS)"
    try:
        yield run
    finally:
        httpx.delete(f"{broker_url}/__test/faults/{run}")


@contextmanager
def faulted_two_host_client(
    broker_url: str, health_response: dict[str, object], seen: list[str], timeout: float = 30.0
) -> Iterator[lanes.Lanes]:
    """A client of the test broker under two host names (the first answering GET /health as
    health_response) that records each attempt's host in seen, retries off, with the
    per-attempt ``timeout``."""
    with (
        health_fault_run(broker_url, health_response) as run,
        lanes.Lanes(
            urls=[broker_url, same_broker_other_host(broker_url)],
            http_client=recording(seen),
            headers={"X-Lanes-Test-Run": run},
            retry_attempts=0,
            timeout=timeout,
        ) as c,
    ):
        yield c


@pytest.mark.parametrize(
    ("fault", "skipped"),
    [
        ({"status": 408}, True),
        ({"status": 503, "headers": {"x-should-retry": "false"}}, True),
        ({"status": 409}, False),
    ],
    ids=["408", "503-x-should-retry-false", "409"],
)
def test_which_answers_skip_a_url(broker_url: str, fault: dict[str, object], skipped: bool) -> None:
    """As in Go and TS: a 408 or a 5xx marks the URL, retried or not; any other 4xx does not."""
    second = same_broker_other_host(broker_url)
    seen: list[str] = []
    with faulted_two_host_client(broker_url, fault, seen) as c:
        with pytest.raises(lanes.APIError):
            c.health()
        assert seen == [host(broker_url)]
        seen.clear()
        c.health()
        assert seen == [host(second) if skipped else host(broker_url)]


def test_skip_outlasts_a_success_in_flight(broker_url: str) -> None:
    """As in Go and TS: a success already in flight when the URL failed (a long-poll pop parked
    on an empty queue) does not end the skip early."""
    second = same_broker_other_host(broker_url)
    seen: list[str] = []
    with faulted_two_host_client(broker_url, {"status": 503}, seen) as c:
        q = c.queue(f"py-skip-outlasts-{uuid.uuid4().hex[:8]}").wait(True).timeout_millis(1000)
        with ThreadPoolExecutor(1) as pool:
            popped = pool.submit(q.pop)
            time.sleep(0.3)  # the pop is parked on the first URL
            with pytest.raises(lanes.APIError):
                c.health()
            popped.result()
        assert seen == [host(broker_url), host(broker_url)]
        seen.clear()
        c.health()
        assert seen == [host(second)], "the first URL is still skipped"


SLOW_HEALTH = {"status": 200, "delayMs": 2000, "body": {"status": "healthy"}}


def test_caller_deadline_marks_nothing(broker_url: str) -> None:
    """As in Go and TS: an attempt cut by the caller's lanes.deadline says nothing about the
    broker, so the next call goes to the same URL."""
    seen: list[str] = []
    with faulted_two_host_client(broker_url, SLOW_HEALTH, seen) as c:
        with pytest.raises(lanes.APITimeoutError), lanes.deadline(0.2):
            c.health()
        assert seen == [host(broker_url)]
        seen.clear()
        c.health()
        assert seen == [host(broker_url)], "the URL is not skipped"


def test_caller_deadline_marks_nothing_async(broker_url: str) -> None:
    seen: list[str] = []

    async def record(r: httpx.Request) -> None:
        seen.append(f"{r.url.host}:{r.url.port}")

    async def main(run: str) -> None:
        async with lanes.AsyncLanes(
            urls=[broker_url, same_broker_other_host(broker_url)],
            http_client=httpx.AsyncClient(event_hooks={"request": [record]}),
            headers={"X-Lanes-Test-Run": run},
            retry_attempts=0,
        ) as c:
            with pytest.raises(lanes.APITimeoutError), lanes.deadline(0.2):
                await c.health()
            await c.health()

    with health_fault_run(broker_url, SLOW_HEALTH) as run:
        asyncio.run(main(run))
    assert seen == [host(broker_url), host(broker_url)], "the URL is not skipped"


def test_attempt_timeout_marks_the_url(broker_url: str) -> None:
    """The per-attempt ``timeout`` is the broker being slow: the URL is skipped."""
    second = same_broker_other_host(broker_url)
    seen: list[str] = []
    with faulted_two_host_client(broker_url, SLOW_HEALTH, seen, timeout=0.2) as c:
        with pytest.raises(lanes.APITimeoutError):
            c.health()
        assert seen == [host(broker_url)]
        seen.clear()
        c.health()
        assert seen == [host(second)], "the URL is skipped"


@pytest.mark.parametrize(
    "bad",
    [
        "broker:6632",
        "localhost:6632",
        "127.0.0.1:6632",
        "//broker:6632",
        "ftp://broker:6632",
        "http://",
        "http://a,b:x",  # split on the comma: "b:x" names no broker
    ],
)
def test_broker_url_without_http_is_refused(bad: str) -> None:
    """As Go's New and the TypeScript client: refused when built, not a client whose every call
    fails with APIConnectionError."""
    with pytest.raises(ValueError, match="bad broker URL"):
        lanes.Lanes(url=bad)
    with pytest.raises(ValueError, match="bad broker URL"):
        lanes.AsyncLanes(urls=["http://127.0.0.1:1", bad])


def test_http_and_https_broker_urls_are_taken() -> None:
    for good in ["http://broker:6632", "https://broker", "HTTP://broker:6632/"]:
        lanes.Lanes(url=good).close()


@pytest.mark.parametrize("where", ["env", "url"])
def test_lanes_url_and_url_split_on_commas_into_brokers(
    broker_url: str, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """As Go's WithURL: "a,b" is two brokers to fail over between, not one URL httpx refuses."""
    dead = closed_port_url()
    listed = f" {dead} , {broker_url} "
    seen: list[str] = []
    hook = {"request": [lambda r: seen.append(f"{r.url.host}:{r.url.port}")]}
    if where == "env":
        monkeypatch.setenv("LANES_URL", listed)
    with (
        httpx.Client(event_hooks=hook) as own,
        lanes.Lanes(listed if where == "url" else None, http_client=own) as c,
    ):
        assert c.health().status == "healthy"
    assert seen == [host(dead), host(broker_url)]
