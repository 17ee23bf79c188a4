"""Lease renewal of one pop while its messages are being handled, for the consume loop and the
asyncio iterator (a task) and the blocking iterator (a daemon thread, so a slow loop body between
two ``next()`` calls keeps its lease). When and for how long:
:class:`lanes._protocol.RenewalSchedule`."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone

from lanes._protocol import RenewalSchedule
from lanes._types import RenewResult

Report = Callable[[BaseException, str], None]
OP = "renew lease"


def _not_renewed(lease_id: str) -> RuntimeError:
    return RuntimeError(f"lanes: lease {lease_id} was not renewed")


async def renew_lease_async(
    lease_id: str,
    schedule: RenewalSchedule,
    renew: Callable[[str, int], Awaitable[RenewResult]],
    report: Report,
    settled: Callable[[], bool] = lambda: False,
    *,
    due: bool = False,
) -> None:
    """Renew until cancelled, ``settled()`` says every message was acked or released, or the
    broker answers ``success: false`` (reported). A failed call is reported and retried at the
    next tick, unless the messages were settled meanwhile (the acks may have released the lease
    under it). ``due``: the first renewal is due now (its wait was spent on a timer)."""
    while True:
        if not due:
            await asyncio.sleep(schedule.next_in)
        due = False
        if settled():
            return
        seconds, sent_at = schedule.extension(), datetime.now(timezone.utc)
        try:
            r = await renew(lease_id, seconds)
        except Exception as e:
            if settled():
                return
            report(e, OP)
            continue
        if settled():
            return
        if not schedule.after(r, sent_at, seconds):
            report(_not_renewed(lease_id), OP)
            return


class LeaseRenewalTimer:
    """:func:`renew_lease_async` for one pop of a consume loop, on the running event loop: a
    timer until the first renewal is due, and a task only then. Most pops are handled before
    that, and a timer set and cancelled costs a fraction of a task started and cancelled.
    :meth:`settle` (from any thread) stops it before the pop's acks go out; :meth:`cancel` (on
    the loop) ends it."""

    def __init__(
        self,
        lease_id: str,
        schedule: RenewalSchedule,
        renew: Callable[[str, int], Awaitable[RenewResult]],
        report: Report,
    ) -> None:
        self._task: asyncio.Task[None] | None = None
        self._settled = False
        self._timer = asyncio.get_running_loop().call_later(
            schedule.next_in, self._start, lease_id, schedule, renew, report
        )

    def _start(
        self,
        lease_id: str,
        schedule: RenewalSchedule,
        renew: Callable[[str, int], Awaitable[RenewResult]],
        report: Report,
    ) -> None:
        self._task = asyncio.ensure_future(
            renew_lease_async(lease_id, schedule, renew, report, self._is_settled, due=True)
        )

    def _is_settled(self) -> bool:
        return self._settled

    def settle(self) -> None:
        self._settled = True

    def cancel(self) -> None:
        self._timer.cancel()
        if self._task is not None:
            self._task.cancel()


class LeaseRenewalThread:
    """:func:`renew_lease_async` for blocking code, in a daemon thread; :meth:`stop` ends it."""

    def __init__(
        self,
        lease_id: str,
        schedule: RenewalSchedule,
        renew: Callable[[str, int], RenewResult],
        report: Report,
        settled: Callable[[], bool],
    ) -> None:
        self._lease_id, self._schedule, self._renew = lease_id, schedule, renew
        self._report, self._settled = report, settled
        self._stopped = threading.Event()
        threading.Thread(target=self._run, name="lanes-renew", daemon=True).start()

    @property
    def running(self) -> bool:
        return not self._stopped.is_set()

    def stop(self) -> None:
        self._stopped.set()

    def _run(self) -> None:
        try:
            while not self._stopped.wait(self._schedule.next_in):
                if self._settled():
                    return
                seconds, sent_at = self._schedule.extension(), datetime.now(timezone.utc)
                try:
                    r = self._renew(self._lease_id, seconds)
                except Exception as e:
                    if self._stopped.is_set():
                        return  # the iterator closed (and maybe its client) meanwhile
                    self._report(e, OP)
                    continue
                if not self._schedule.after(r, sent_at, seconds):
                    self._report(_not_renewed(self._lease_id), OP)
                    return
        finally:
            self._stopped.set()
