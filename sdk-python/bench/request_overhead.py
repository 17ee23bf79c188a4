"""What one request costs the client, layer by layer, blocking against asyncio.

Sends ``--n`` keep-alive ``GET /health`` requests to a real broker per variant and reports the
process's CPU time per request (user + sys, ``resource.getrusage``), in alternating rounds:

  raw-sync      a blocking socket: write the request, read the answer (the floor)
  raw-async     the same over asyncio streams
  httpx-sync    a bare ``httpx.Client``
  httpx-async   a bare ``httpx.AsyncClient``
  lanes-sync    ``Lanes.health()``
  lanes-async   ``AsyncLanes.health()``

The SDK's share is lanes-* minus httpx-*; what asyncio costs by itself is raw-async minus raw-sync.

  LANES_TEST_PORT=8610 scripts/test-broker.sh start
  cd sdk-python && PYTHONPATH=src .venv/bin/python bench/request_overhead.py \\
      --url http://127.0.0.1:8610 --n 3000 --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import socket
import statistics
from collections.abc import Callable
from urllib.parse import urlsplit

import httpx

import lanes


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def content_length(head: bytes) -> int:
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    raise ValueError("answer without Content-Length")


def raw_sync(url: str, n: int) -> float:
    u = urlsplit(url)
    request = f"GET /health HTTP/1.1\r\nHost: {u.netloc}\r\n\r\n".encode()
    with socket.create_connection((u.hostname, u.port or 80)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = b""

        def one() -> None:
            nonlocal buf
            s.sendall(request)
            while b"\r\n\r\n" not in buf:
                buf += s.recv(65536)
            head, _, buf = buf.partition(b"\r\n\r\n")
            length = content_length(head)
            while len(buf) < length:
                buf += s.recv(65536)
            buf = buf[length:]

        one()
        t0 = cpu_seconds()
        for _ in range(n):
            one()
        return cpu_seconds() - t0


async def raw_async(url: str, n: int) -> float:
    u = urlsplit(url)
    request = f"GET /health HTTP/1.1\r\nHost: {u.netloc}\r\n\r\n".encode()
    reader, writer = await asyncio.open_connection(u.hostname, u.port or 80)

    async def one() -> None:
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(content_length(head))

    try:
        await one()
        t0 = cpu_seconds()
        for _ in range(n):
            await one()
        return cpu_seconds() - t0
    finally:
        writer.close()


def httpx_sync(url: str, n: int) -> float:
    with httpx.Client() as c:
        c.get(url + "/health")
        t0 = cpu_seconds()
        for _ in range(n):
            c.get(url + "/health")
        return cpu_seconds() - t0


async def httpx_async(url: str, n: int) -> float:
    async with httpx.AsyncClient() as c:
        await c.get(url + "/health")
        t0 = cpu_seconds()
        for _ in range(n):
            await c.get(url + "/health")
        return cpu_seconds() - t0


def lanes_sync(url: str, n: int) -> float:
    with lanes.Lanes(url) as c:
        c.health()
        t0 = cpu_seconds()
        for _ in range(n):
            c.health()
        return cpu_seconds() - t0


async def lanes_async(url: str, n: int) -> float:
    async with lanes.AsyncLanes(url) as c:
        await c.health()
        t0 = cpu_seconds()
        for _ in range(n):
            await c.health()
        return cpu_seconds() - t0


VARIANTS: dict[str, Callable[[str, int], float]] = {
    "raw-sync": raw_sync,
    "raw-async": lambda url, n: asyncio.run(raw_async(url, n)),
    "httpx-sync": httpx_sync,
    "httpx-async": lambda url, n: asyncio.run(httpx_async(url, n)),
    "lanes-sync": lanes_sync,
    "lanes-async": lambda url, n: asyncio.run(lanes_async(url, n)),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--url", default=os.environ.get("LANES_TEST_URL") or os.environ.get("LANES_URL")
    )
    ap.add_argument("--n", type=int, default=3000, help="requests per round and variant")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    if not args.url:
        raise SystemExit("--url (or LANES_TEST_URL / LANES_URL) is required")
    url = args.url.rstrip("/")

    names = list(VARIANTS)
    cpu: dict[str, list[float]] = {v: [] for v in names}
    for r in range(args.rounds):
        # Alternate the order each round, so no variant always runs first.
        for v in names if r % 2 == 0 else reversed(names):
            cpu[v].append(VARIANTS[v](url, args.n) / args.n * 1e6)
    med = {v: statistics.median(cpu[v]) for v in names}
    print(f"n={args.n} rounds={args.rounds}; µs of CPU per request, median (min-max)")
    for v in names:
        print(f"  {v:12s} {med[v]:6.1f} ({min(cpu[v]):.1f}-{max(cpu[v]):.1f})")
    print("asyncio - blocking:")
    for layer in ("raw", "httpx", "lanes"):
        print(f"  {layer:6s} {med[layer + '-async'] - med[layer + '-sync']:+6.1f}")
    print("the SDK over bare httpx:")
    for mode in ("sync", "async"):
        print(f"  {mode:6s} {med['lanes-' + mode] - med['httpx-' + mode]:+6.1f}")


if __name__ == "__main__":
    main()
