"""Python client for Lanes, a partitioned message queue on PostgreSQL.

Placeholder: the SDK replaces this module with the fluent client. For now it
exposes the wire models generated from openapi.yaml as ``lanes.models``.
"""

from lanes._generated import models

__all__ = ["DEFAULT_URL", "models"]

DEFAULT_URL = "http://localhost:6632"
"""Default broker URL of a local ``make run``."""
