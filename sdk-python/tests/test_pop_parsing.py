"""Reading a pop's messages: ``Message.from_wire`` builds them positionally and ``parse_pop``
parses each distinct ``createdAt`` once, so these pin every field against a message built by
keyword from the same wire object."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone
from typing import Any

from lanes import _protocol as P
from lanes._types import QUEUE_MODE, Message

FIRST_PUSH = "2026-12-07T15:58:12.354305Z"
SECOND_PUSH = "2026-12-07T15:58:13.000001+00:00"


def wire(i: int, created_at: Any) -> dict[str, Any]:
    return {
        "id": f"m{i}",
        "transactionId": f"t{i}",
        "data": {"i": i},
        "partitionId": "p-id",
        "partition": "Default",
        "leaseId": "L",
        "consumerGroup": "g",
        "traceId": f"trace{i}",
        "producerSub": "sub",
        "createdAt": created_at,
    }


def by_keyword(i: int, created_at: datetime | None) -> Message:
    return Message(
        id=f"m{i}",
        transaction_id=f"t{i}",
        data={"i": i},
        partition_id="p-id",
        partition="Default",
        lease_id="L",
        consumer_group="g",
        queue="q",
        trace_id=f"trace{i}",
        producer_sub="sub",
        created_at=created_at,
    )


def fields_of(m: Message) -> dict[str, Any]:
    return {f.name: getattr(m, f.name) for f in dataclasses.fields(Message)}


def test_from_wire_sets_every_field_as_keyword_construction_does() -> None:
    got = Message.from_wire(wire(0, FIRST_PUSH), "q")
    want = by_keyword(0, datetime(2026, 12, 7, 15, 58, 12, 354305, tzinfo=timezone.utc))
    assert fields_of(got) == fields_of(want)
    assert repr(got) == repr(want)


def test_from_wire_defaults_of_a_message_with_only_its_address() -> None:
    got = Message.from_wire({"transactionId": "t", "partitionId": "p", "leaseId": None}, "")
    assert (got.id, got.lease_id, got.consumer_group, got.created_at) == ("", "", QUEUE_MODE, None)
    assert (got.data, got.trace_id, got.producer_sub, got._acked) == (None, None, None, False)


def test_each_popped_message_carries_its_own_created_at() -> None:
    stamps = [FIRST_PUSH, FIRST_PUSH, SECOND_PUSH, None, "not a time", 17, FIRST_PUSH]
    body = {"messages": [wire(i, s) for i, s in enumerate(stamps)], "leaseId": "L"}
    got = P.parse_pop(body, P.QueueSpec(queue="q")).messages
    assert [fields_of(m) for m in got] == [
        fields_of(Message.from_wire(wire(i, s), "q")) for i, s in enumerate(stamps)
    ]
    assert [m.created_at for m in got] == [
        datetime(2026, 12, 7, 15, 58, 12, 354305, tzinfo=timezone.utc),
        datetime(2026, 12, 7, 15, 58, 12, 354305, tzinfo=timezone.utc),
        datetime(2026, 12, 7, 15, 58, 13, 1, tzinfo=timezone.utc),
        None,
        None,
        None,
        datetime(2026, 12, 7, 15, 58, 12, 354305, tzinfo=timezone.utc),
    ]
