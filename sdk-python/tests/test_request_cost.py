"""What a request costs the client once it is warm, against a real broker: no import is tried on
the way. A module missing from sys.modules is looked up on every attempt (Python does not cache a
failed import): httpcore's ``import sniffio`` inside every lock setup cost AsyncLanes about
0.2 ms of CPU per request where sniffio was not installed (docs/benchmarks.md)."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from importlib.machinery import ModuleSpec
from types import ModuleType

import lanes


class ImportSpy:
    """A meta path finder that finds nothing and notes every module Python looked for."""

    def __init__(self) -> None:
        self.looked_for: list[str] = []

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        self.looked_for.append(name)
        return None


@contextmanager
def imports_tried() -> Iterator[list[str]]:
    spy = ImportSpy()
    sys.meta_path.insert(0, spy)
    try:
        yield spy.looked_for
    finally:
        sys.meta_path.remove(spy)


ITEMS = [{"data": {"i": i}} for i in range(10)]


def test_a_warm_blocking_push_pop_and_ack_try_no_import(broker_url: str, qname: str) -> None:
    with lanes.Lanes(broker_url) as c:
        q = c.queue(qname).wait(False).batch(10)
        q.push(ITEMS)
        c.ack(q.pop())  # warm: the connection is open, lazy imports are done
        with imports_tried() as looked_for:
            for _ in range(3):
                q.push(ITEMS)
                c.ack(q.pop())
                c.health()
    assert looked_for == []


async def test_a_warm_async_push_pop_and_ack_try_no_import(broker_url: str, qname: str) -> None:
    async with lanes.AsyncLanes(broker_url) as c:
        q = c.queue(qname).wait(False).batch(10)
        await q.push(ITEMS)
        await c.ack(await q.pop())
        with imports_tried() as looked_for:
            for _ in range(3):
                await q.push(ITEMS)
                await c.ack(await q.pop())
                await c.health()
    assert looked_for == []
