"""A write whose answer is lost after the broker committed it (docs/retries.md §5), through a
small in-test proxy in front of the real broker: incr, put_if_absent and a KV-only transaction
are not resent and raise OutcomeUnknownError; a plain put and a bundle with a push are."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import lanes

from .proxying import forward, send_head


class AnswerDropper:
    """Forwards to the broker; for the next ``drops`` requests it waits for the whole answer (the
    write committed), then closes the client's connection without a byte."""

    def __init__(self, broker: str) -> None:
        self.drops = 0
        self.seen = 0
        dropper = self

        class Handler(BaseHTTPRequestHandler):
            def _forward(self) -> None:
                answer = forward(self, broker)
                dropper.seen += 1
                if dropper.drops > 0:
                    dropper.drops -= 1
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                send_head(self, answer)
                self.wfile.write(answer.content)

            do_GET = do_POST = do_PUT = do_DELETE = _forward

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def drop_next(self, n: int) -> None:
        self.drops, self.seen = n, 0


@pytest.fixture
def proxy(broker_url: str) -> Iterator[AnswerDropper]:
    p = AnswerDropper(broker_url)
    yield p
    p.server.shutdown()
    p.server.server_close()


def test_lost_answer_on_writes(broker_url: str, qname: str, proxy: AnswerDropper) -> None:
    direct = lanes.Lanes(broker_url).kv(qname)
    c = lanes.Lanes(proxy.url, retry_delay=0.001)
    kv = c.kv(qname)

    proxy.drop_next(1)
    with pytest.raises(lanes.OutcomeUnknownError) as ei:
        kv.incr("counter")
    assert isinstance(ei.value.cause, lanes.APIConnectionError)
    assert proxy.seen == 1
    assert direct.get("counter").value == 1

    proxy.drop_next(1)
    with pytest.raises(lanes.OutcomeUnknownError):
        kv.put_if_absent("once", "first")
    assert direct.get("once").value == "first"

    proxy.drop_next(1)
    with pytest.raises(lanes.OutcomeUnknownError):
        c.transaction().kv_incr(qname, "tx-counter").commit()
    assert direct.get("tx-counter").value == 1

    # Idempotent: a plain put is resent and answers.
    proxy.drop_next(1)
    kv.put("plain", "v")
    assert proxy.seen == 2
    assert direct.get("plain").value == "v"

    # A push's ids make the resend of a committed bundle roll back as duplicate.
    proxy.drop_next(1)
    with pytest.raises(lanes.TransactionError) as te:
        c.transaction().queue(qname).push([1]).kv_incr(qname, "bundle-counter").commit()
    assert te.value.reason == "duplicate" and te.value.attempts == 2
    assert direct.get("bundle-counter").value == 1
