"""Smoke test for the test wiring.

`make test` starts a broker and exports LANES_TEST_URL; without it the broker
test is skipped.
"""

import os

import httpx
import pytest

import lanes

TEST_URL = os.environ.get("LANES_TEST_URL")


def test_package_imports() -> None:
    assert lanes.DEFAULT_URL == "http://localhost:6632"
    assert lanes.models is not None


@pytest.mark.skipif(not TEST_URL, reason="LANES_TEST_URL not set (run via `make test`)")
def test_broker_health() -> None:
    resp = httpx.get(f"{TEST_URL}/health", timeout=10.0)
    assert resp.status_code == 200
