"""Shared fixtures. Integration tests need a real broker at LANES_TEST_URL (``make test`` starts
one); without it they fail loudly instead of skipping."""

from __future__ import annotations

import os
import uuid

import pytest


@pytest.fixture
def broker_url() -> str:
    url = os.environ.get("LANES_TEST_URL")
    if not url:
        pytest.fail("LANES_TEST_URL is not set: run `make test`, or start a broker and export it")
    return url


@pytest.fixture
def qname(request: pytest.FixtureRequest) -> str:
    base = request.node.name.replace("[", "-").replace("]", "").replace("_", "-")[:40]
    return f"py-{base}-{uuid.uuid4().hex[:8]}"
