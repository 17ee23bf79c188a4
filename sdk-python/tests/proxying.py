"""Pieces of the in-test HTTP proxies that stand between an SDK and the real test broker."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler

import httpx


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
