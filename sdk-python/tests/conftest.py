"""Shared fixtures. Integration tests need a real broker at LANES_TEST_URL (``make test`` starts
one); without it they fail loudly instead of skipping."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

import lanes


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


@contextmanager
def skip_if_501(feature: str) -> Iterator[None]:
    """Skip ONLY when the broker answers 501 not_implemented for this route."""
    try:
        yield
    except lanes.NotImplementedByBrokerError:
        pytest.skip(f"broker answers 501 not_implemented for {feature} (route not built yet)")
