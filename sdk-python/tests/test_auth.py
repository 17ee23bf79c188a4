"""Bearer tokens against a real broker with JWT auth on (LANES_TEST_AUTH_URL, started by ``make
test`` with the HS256 secret LANES_TEST_JWT_SECRET): the token is sent, a refused one raises a typed
error after one request, and a consumer the broker refuses ends instead of polling on."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

import lanes


@pytest.fixture
def auth_broker() -> tuple[str, str]:
    url, secret = os.environ.get("LANES_TEST_AUTH_URL"), os.environ.get("LANES_TEST_JWT_SECRET")
    if not url or not secret:
        pytest.skip(
            "LANES_TEST_AUTH_URL and LANES_TEST_JWT_SECRET are not set: "
            "`make test` starts a broker with auth on"
        )
    return url, secret


def hs256(secret: str, role: str, sub: str | None = None) -> str:
    """A token for ``role`` (subject ``sub``), valid for an hour."""

    def enc(v: object) -> str:
        return base64.urlsafe_b64encode(json.dumps(v).encode()).rstrip(b"=").decode()

    now = int(time.time())
    signing = (
        enc({"alg": "HS256", "typ": "JWT"})
        + "."
        + enc({"sub": sub or f"sdk-python-{role}", "role": role, "iat": now, "exp": now + 3600})
    )
    mac = hmac.new(secret.encode(), signing.encode(), hashlib.sha256).digest()
    return signing + "." + base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


class Counted:
    """A client whose HTTP requests are counted."""

    def __init__(self, url: str, token: str | Callable[[], str] | None) -> None:
        self.requests = 0
        http = httpx.Client(event_hooks={"request": [self._count]})
        self.client = lanes.Lanes(url, bearer_token=token, http_client=http)

    def _count(self, _: httpx.Request) -> None:
        self.requests += 1


@pytest.fixture
def counted(auth_broker: tuple[str, str]) -> Iterator[list[Counted]]:
    made: list[Counted] = []
    yield made
    for c in made:
        c.client.close()


def test_token_sent_and_refusals_are_typed_and_not_retried(
    auth_broker: tuple[str, str], counted: list[Counted], qname: str
) -> None:
    url, secret = auth_broker

    def client(token: str | None) -> Counted:
        counted.append(Counted(url, token))
        return counted[-1]

    rw = client(hs256(secret, "read-write"))
    assert rw.client.queue(qname).push([{"n": 1}])[0].status == "queued"

    for name, token in {
        "no token": None,
        "wrong key": hs256("not-the-secret-not-the-secret-0123", "admin"),
    }.items():
        c = client(token)
        with pytest.raises(lanes.AuthenticationError) as refused:
            c.client.queue(qname).push([{"n": 2}])
        assert refused.value.status == 401 and refused.value.code == "unauthorized", name
        assert c.requests == 1, f"{name}: a 401 is not retried"

    ro = client(hs256(secret, "read-only"))
    with pytest.raises(lanes.PermissionDeniedError) as forbidden:
        ro.client.queue(qname).push([{"n": 3}])
    assert forbidden.value.code == "forbidden"
    assert ro.requests == 1, "a 403 is not retried"

    for token, kind in (
        (None, lanes.AuthenticationError),
        (hs256(secret, "read-only"), lanes.PermissionDeniedError),
    ):
        c = client(token)
        consumer = c.client.queue(qname).consume(lambda m: None)
        with pytest.raises(kind):
            consumer.closed(timeout=10)
        assert c.requests <= 2, "the consumer ended instead of polling on"


async def test_async_client_refusals_are_typed(auth_broker: tuple[str, str], qname: str) -> None:
    url, secret = auth_broker
    async with lanes.AsyncLanes(url, bearer_token=hs256(secret, "read-write")) as ok:
        assert (await ok.queue(qname).push([{"n": 1}]))[0].status == "queued"
    async with lanes.AsyncLanes(url) as anonymous:
        with pytest.raises(lanes.AuthenticationError):
            await anonymous.queue(qname).push([{"n": 2}])
    async with lanes.AsyncLanes(url, bearer_token=hs256(secret, "write-only")) as writer:
        with pytest.raises(lanes.PermissionDeniedError):
            await writer.queue(qname).pop()


def test_a_bearer_token_callable_is_asked_before_every_call(
    auth_broker: tuple[str, str], counted: list[Counted], qname: str
) -> None:
    url, secret = auth_broker
    asked = 0

    def token() -> str:
        nonlocal asked
        asked += 1
        if asked == 3:
            raise ConnectionError("identity provider unreachable")
        return hs256(secret, "read-write", f"rotated-{asked}")

    c = Counted(url, token)
    counted.append(c)
    c.client.queue(qname).push([{"n": 1}])
    c.client.queue(qname).push([{"n": 2}])
    with pytest.raises(ConnectionError, match="identity provider unreachable"):
        c.client.queue(qname).push([{"n": 3}])
    assert c.requests == 2, "a call whose token callable failed sends nothing"
    popped = c.client.queue(qname).autopilot(False).batch(10).wait(False).pop()
    assert [m.producer_sub for m in popped] == ["rotated-1", "rotated-2"]


async def test_async_client_takes_a_sync_or_async_bearer_token_callable(
    auth_broker: tuple[str, str], qname: str
) -> None:
    url, secret = auth_broker
    async with lanes.AsyncLanes(
        url, bearer_token=lambda: hs256(secret, "read-write", "async-sub")
    ) as c:
        await c.queue(qname).push([{"n": 1}])
        popped = await c.queue(qname).autopilot(False).wait(False).pop()
    assert [m.producer_sub for m in popped] == ["async-sub"]

    async def renewed() -> str:
        return hs256(secret, "read-write", "async-fn-sub")

    async with lanes.AsyncLanes(url, bearer_token=renewed) as c:
        await c.queue(qname + "-async").push([{"n": 2}])
        popped = await c.queue(qname + "-async").autopilot(False).wait(False).pop()
    assert [m.producer_sub for m in popped] == ["async-fn-sub"]

    async def never_awaited() -> str:
        return "x"

    sync = lanes.Lanes(url, bearer_token=never_awaited)  # type: ignore[arg-type]
    with sync, pytest.raises(TypeError, match="needs AsyncLanes"):
        sync.queue(qname).push([{"n": 3}])
