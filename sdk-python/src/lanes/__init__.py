"""Python client for Lanes, a partitioned message queue on PostgreSQL.

``Lanes`` is the blocking client, ``AsyncLanes`` its asyncio twin; both share one
implementation of the wire rules (retries, pop autopilot, ack batching). Wire models for admin
payloads are generated from ``openapi.yaml`` and exposed as ``lanes.models``.
"""

from lanes import models
from lanes._admin import Admin, AsyncAdmin
from lanes._buffer import AsyncPushBuffer, BufferStats, PushBuffer
from lanes._client import DEFAULT_URL, AsyncLanes, Lanes
from lanes._consumer import AsyncConsumer, Consumer
from lanes._deadline import deadline
from lanes._exceptions import (
    AckError,
    APIConnectionError,
    APIError,
    APITimeoutError,
    AuthenticationError,
    AutoAckDroppedError,
    BadRequestError,
    ClientClosedError,
    ConflictError,
    ConsumerStopped,
    ConsumerStoppedError,
    DroppedError,
    EmptyTransactionError,
    HandlerError,
    InternalServerError,
    InvalidItemError,
    InvalidNameError,
    InvalidValueError,
    ItemError,
    LanesError,
    NotFoundError,
    NotImplementedByBrokerError,
    OutcomeUnknownError,
    PayloadTooLargeError,
    PermissionDeniedError,
    PushError,
    RateLimitError,
    TransactionError,
    UnexpectedAnswerError,
    UnsentError,
)
from lanes._iter import AsyncMessageIterator, MessageIterator
from lanes._kv import KV, AsyncKV
from lanes._protocol import uuid7
from lanes._queue import AsyncDlqQuery, AsyncQueue, DlqQuery, Queue
from lanes._requests import kv_op
from lanes._timers import AsyncTimers, Timers, timer_op
from lanes._tx import AsyncTransaction, Transaction
from lanes._types import (
    AckResult,
    AckStatus,
    AutopilotEcho,
    Item,
    Message,
    PopResult,
    PushResult,
    RenewResult,
    TransactionResult,
)

__all__ = [
    "DEFAULT_URL",
    "KV",
    "APIConnectionError",
    "APIError",
    "APITimeoutError",
    "AckError",
    "AckResult",
    "AckStatus",
    "Admin",
    "AsyncAdmin",
    "AsyncConsumer",
    "AsyncDlqQuery",
    "AsyncKV",
    "AsyncLanes",
    "AsyncMessageIterator",
    "AsyncPushBuffer",
    "AsyncQueue",
    "AsyncTimers",
    "AsyncTransaction",
    "AuthenticationError",
    "AutoAckDroppedError",
    "AutopilotEcho",
    "BadRequestError",
    "BufferStats",
    "ClientClosedError",
    "ConflictError",
    "Consumer",
    "ConsumerStopped",
    "ConsumerStoppedError",
    "DlqQuery",
    "DroppedError",
    "EmptyTransactionError",
    "HandlerError",
    "InternalServerError",
    "InvalidItemError",
    "InvalidNameError",
    "InvalidValueError",
    "Item",
    "ItemError",
    "Lanes",
    "LanesError",
    "Message",
    "MessageIterator",
    "NotFoundError",
    "NotImplementedByBrokerError",
    "OutcomeUnknownError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "PopResult",
    "PushBuffer",
    "PushError",
    "PushResult",
    "Queue",
    "RateLimitError",
    "RenewResult",
    "Timers",
    "Transaction",
    "TransactionError",
    "TransactionResult",
    "UnexpectedAnswerError",
    "UnsentError",
    "deadline",
    "kv_op",
    "models",
    "timer_op",
    "uuid7",
]
