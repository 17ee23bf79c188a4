"""Reading ack answers: ``parse_ack_results`` builds its results without the dataclass
``__init__`` and ``merge_ack_results`` keeps them when their index is already right, so these
pin the values, types and equality against results built the ordinary way."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

import lanes
from lanes import _protocol as P
from lanes._types import AckResult

BATCH = "/api/v1/ack/batch"

ANSWER: list[dict[str, Any]] = [
    {"index": 0, "transactionId": "t0", "success": True, "error": None, "leaseReleased": True},
    {"index": 1, "transactionId": "t1", "success": True, "noop": True},
    {"index": 2, "transactionId": "t2", "success": True, "dlq": True, "leaseReleased": False},
    {"index": 3, "transactionId": "t3", "success": True, "dropped": True},
    {"index": 4, "transactionId": "t4", "success": False, "error": "lease expired"},
    {"transactionId": "t5", "success": 1, "dlq": 0},  # no index: its place; truthy non-bools
]

WANT = [
    AckResult(index=0, transaction_id="t0", success=True, lease_released=True),
    AckResult(index=1, transaction_id="t1", success=True, noop=True),
    AckResult(index=2, transaction_id="t2", success=True, dlq=True),
    AckResult(index=3, transaction_id="t3", success=True, dropped=True),
    AckResult(index=4, transaction_id="t4", success=False, error="lease expired"),
    AckResult(index=5, transaction_id="t5", success=True),
]


def test_parsed_ack_results_equal_those_built_by_the_dataclass() -> None:
    got = P.parse_ack_results(BATCH, ANSWER, len(ANSWER))
    assert got == WANT
    assert [repr(r) for r in got] == [repr(r) for r in WANT]
    assert [hash(r) for r in got] == [hash(r) for r in WANT]
    for r in got:
        assert type(r) is AckResult
        assert vars(r).keys() == {f.name for f in dataclasses.fields(AckResult)}
        assert all(type(getattr(r, f)) is bool for f in ("success", "dlq", "noop", "dropped"))
        with pytest.raises(dataclasses.FrozenInstanceError):
            r.success = False  # type: ignore[misc]


def test_an_earlier_brokers_single_object_is_read_as_one_result() -> None:
    got = P.parse_ack_results(P.ACK_ONE_PATH, {"transactionId": "a", "success": True}, 1)
    assert got == [AckResult(index=0, transaction_id="a", success=True)]


def test_merged_results_carry_the_callers_order_and_raise_for_the_failed() -> None:
    # Two requests (two groups): the caller's items 0, 2 and 4 went in one, 1 and 3 in the other.
    first = P.parse_ack_results(BATCH, [ANSWER[0], ANSWER[1], ANSWER[4]], 3)
    second = P.parse_ack_results(BATCH, [ANSWER[2], ANSWER[3]], 2)
    with pytest.raises(lanes.AckError) as ei:
        P.merge_ack_results(5, [([0, 2, 4], first), ([1, 3], second)])
    assert ei.value.results == [
        dataclasses.replace(WANT[0], index=0),
        dataclasses.replace(WANT[2], index=1),
        dataclasses.replace(WANT[1], index=2),
        dataclasses.replace(WANT[3], index=3),
        dataclasses.replace(WANT[4], index=4),
    ]
    assert [(e.index, e.transaction_id, e.message) for e in ei.value.items] == [
        (4, "t4", "lease expired")
    ]


def test_merged_results_of_one_request_are_its_results() -> None:
    ok = P.parse_ack_results(BATCH, ANSWER[:4], 4)
    assert P.merge_ack_results(4, [([0, 1, 2, 3], ok)]) == WANT[:4]
