"""Lease renewal of one pop while its messages are being handled, for the consume loop and the
asyncio iterator (a task) and the blocking iterator (a daemon thread, so a slow loop body between
two ``next()`` calls keeps its lease). When and for how long:
:class:`lanes._protocol.RenewalSchedule`."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable

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
) -> None:
    """Renew until cancelled, ``settled()`` says every message was acked or released, or the
    broker answers ``success: false`` (reported). A failed call is reported and retried at the
    next tick."""
    while True:
        await asyncio.sleep(schedule.next_in)
        if settled():
            return
        try:
            r = await renew(lease_id, schedule.extension())
        except Exception as e:
            report(e, OP)
            continue
        if not schedule.after(r):
            report(_not_renewed(lease_id), OP)
            return


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
                try:
                    r = self._renew(self._lease_id, self._schedule.extension())
                except Exception as e:
                    if self._stopped.is_set():
                        return  # the iterator closed (and maybe its client) meanwhile
                    self._report(e, OP)
                    continue
                if not self._schedule.after(r):
                    self._report(_not_renewed(self._lease_id), OP)
                    return
        finally:
            self._stopped.set()
