"""``client.timers(queue)``: messages pushed later (``Lanes`` and ``AsyncLanes``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from lanes import _requests as R
from lanes._generated import models
from lanes._requests import Req

if TYPE_CHECKING:
    from lanes._client import AsyncLanes, Lanes


def _timer_write(
    op: Literal["schedule", "reschedule"],
    queue: str,
    key: str,
    delay_millis: int,
    payload: Any,
    partition: str | None,
    transaction_id: str | None,
) -> Req[list[models.TimerResult]]:
    """The request of a schedule or reschedule of one timer, shared by both clients."""
    return R.timers_batch(
        [
            timer_op(
                op,
                queue,
                key,
                delay_millis=delay_millis,
                payload=payload,
                partition=partition,
                transaction_id=transaction_id,
            )
        ]
    )


def timer_op(
    op: Literal["schedule", "reschedule", "cancel"],
    queue: str,
    key: str,
    *,
    delay_millis: int | None = None,
    payload: Any = R.NO_PAYLOAD,
    partition: str | None = None,
    transaction_id: str | None = None,
) -> dict[str, Any]:
    """One timer operation for :meth:`Timers.batch`, any queue, as Go's ``lanes.TimerSchedule``
    builds one. A schedule's ``transaction_id`` is minted here when absent, so a resend after a
    lost answer fires the timer once."""
    return R.timer_op(
        op,
        queue,
        key,
        delay_millis=delay_millis,
        payload=payload,
        partition=partition,
        txn=transaction_id,
    )


class Timers:
    """``client.timers(queue)``: schedule a message for later delivery.

    ``partition`` is the destination partition (default ``Default``); ``transaction_id`` is the
    pushed message's id (minted as a UUIDv7 when absent; a fixed one makes firing idempotent).
    Without ``payload`` the timer fires ``{}``; ``payload=None`` fires JSON null.
    """

    def __init__(self, client: Lanes, queue: str) -> None:
        self._c, self.queue = client, queue

    def schedule(
        self,
        key: str,
        *,
        delay_millis: int,
        payload: Any = R.NO_PAYLOAD,
        partition: str | None = None,
        transaction_id: str | None = None,
    ) -> models.TimerResult:
        """Create or replace timer ``key``."""
        req = _timer_write(
            "schedule", self.queue, key, delay_millis, payload, partition, transaction_id
        )
        return self._c._call(req)[0]

    def reschedule(
        self,
        key: str,
        *,
        delay_millis: int,
        payload: Any = R.NO_PAYLOAD,
        partition: str | None = None,
        transaction_id: str | None = None,
    ) -> models.TimerResult:
        """Replace timer ``key`` (or create it) and reset its attempts."""
        req = _timer_write(
            "reschedule", self.queue, key, delay_millis, payload, partition, transaction_id
        )
        return self._c._call(req)[0]

    def batch(self, ops: Sequence[Mapping[str, Any]]) -> list[models.TimerResult]:
        """Several ops (built with :func:`lanes.timer_op`) in one call, results in order."""
        return self._c._call(R.timers_batch(ops))

    def cancel(self, key: str) -> models.TimerResult:
        return self._c._call(R.timers_batch([R.timer_op("cancel", self.queue, key)]))[0]

    def get(self, key: str) -> models.Timer:
        return self._c._call(R.timer_get(self.queue, key))

    def list(
        self, *, limit: int | None = None, after: str | None = None, prefix: str | None = None
    ) -> models.TimerList:
        """A page of the queue's timers in key order, only keys starting with ``prefix`` if
        given. Continue with ``after=page.next_after``."""
        return self._c._call(R.timer_list(self.queue, limit, after, prefix))


class AsyncTimers:
    """``client.timers(queue)`` on :class:`AsyncLanes`; the same methods as :class:`Timers`."""

    def __init__(self, client: AsyncLanes, queue: str) -> None:
        self._c, self.queue = client, queue

    async def schedule(
        self,
        key: str,
        *,
        delay_millis: int,
        payload: Any = R.NO_PAYLOAD,
        partition: str | None = None,
        transaction_id: str | None = None,
    ) -> models.TimerResult:
        req = _timer_write(
            "schedule", self.queue, key, delay_millis, payload, partition, transaction_id
        )
        return (await self._c._call(req))[0]

    async def reschedule(
        self,
        key: str,
        *,
        delay_millis: int,
        payload: Any = R.NO_PAYLOAD,
        partition: str | None = None,
        transaction_id: str | None = None,
    ) -> models.TimerResult:
        req = _timer_write(
            "reschedule", self.queue, key, delay_millis, payload, partition, transaction_id
        )
        return (await self._c._call(req))[0]

    async def batch(self, ops: Sequence[Mapping[str, Any]]) -> list[models.TimerResult]:
        return await self._c._call(R.timers_batch(ops))

    async def cancel(self, key: str) -> models.TimerResult:
        return (await self._c._call(R.timers_batch([R.timer_op("cancel", self.queue, key)])))[0]

    async def get(self, key: str) -> models.Timer:
        return await self._c._call(R.timer_get(self.queue, key))

    async def list(
        self, *, limit: int | None = None, after: str | None = None, prefix: str | None = None
    ) -> models.TimerList:
        return await self._c._call(R.timer_list(self.queue, limit, after, prefix))
