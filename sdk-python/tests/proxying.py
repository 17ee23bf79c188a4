"""Pieces of the in-test HTTP proxies that stand between an SDK and the real test broker."""

from __future__ import annotations

import asyncio
import contextlib
import queue
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler

import httpx

import lanes


def forward(handler: BaseHTTPRequestHandler, broker: str) -> httpx.Response:
    """Sends the request the handler received on to broker and returns the broker's answer."""
    length = int(handler.headers.get("Content-Length") or 0)
    body = handler.rfile.read(length) if length else None
    headers = {k: v for k, v in handler.headers.items() if k.lower() != "host"}
    return httpx.request(handler.command, broker + handler.path, content=body, headers=headers)


def send_head(handler: BaseHTTPRequestHandler, answer: httpx.Response) -> None:
    """Writes the answer's status, content type and length back to the client."""
    handler.send_response(answer.status_code)
    handler.send_header("Content-Type", answer.headers.get("content-type", ""))
    handler.send_header("Content-Length", str(len(answer.content)))
    handler.end_headers()


class SlowAnswerProxy:
    """A TCP proxy to the broker that passes each answer's bytes on ``delay`` seconds after
    the broker wrote them (so an answer the broker sent can still be in flight when the client
    acts), and passes a client's half-close on to the broker at once (unless ``deaf``: then
    the broker never hears of it, as behind a proxy that ignores half-closes)."""

    deaf = False

    def __init__(self, broker: str, delay: float) -> None:
        host, port = broker.removeprefix("http://").rsplit(":", 1)
        self._broker = (host, int(port))
        self._delay = delay
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            broker = socket.create_connection(self._broker)
            threading.Thread(target=self._requests, args=(client, broker), daemon=True).start()
            threading.Thread(target=self._answers, args=(broker, client), daemon=True).start()

    def _requests(self, client: socket.socket, broker: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := client.recv(65536):
                broker.sendall(data)
            if not self.deaf:
                broker.shutdown(socket.SHUT_WR)

    def _answers(self, broker: socket.socket, client: socket.socket) -> None:
        chunks: queue.SimpleQueue[tuple[float, bytes]] = queue.SimpleQueue()

        def send_late() -> None:
            with contextlib.suppress(OSError):
                while True:
                    at, data = chunks.get()
                    time.sleep(max(0.0, at - time.monotonic()))
                    if not data:
                        client.shutdown(socket.SHUT_WR)
                        return
                    client.sendall(data)

        threading.Thread(target=send_late, daemon=True).start()
        data = b"x"
        while data:
            try:
                data = broker.recv(65536)
            except OSError:
                data = b""
            chunks.put((time.monotonic() + self._delay, data))


async def stop_an_async_iterator_with_an_answer_on_its_way(
    c: lanes.AsyncLanes, broker_url: str, qname: str
) -> asyncio.Future[list[object]]:
    """Iterates qname through c (behind a SlowAnswerProxy), lets its long poll park, pushes a
    message through the broker directly and stops the iterator 0.2 s later, when the broker wrote
    the answer and the proxy holds it. Returns the task collecting what the iteration yields."""
    it = c.queue(qname).lease_seconds(60).timeout_millis(20000).messages()

    async def iterate() -> list[object]:
        return [m.data async for m in it]

    task = asyncio.ensure_future(iterate())
    await asyncio.sleep(1.0)  # the long poll is parked on the broker
    async with lanes.AsyncLanes(broker_url) as pusher:
        await pusher.queue(qname).push(["late"])
    await asyncio.sleep(0.2)  # the broker wrote the answer; the proxy holds it
    it.stop()
    return task
