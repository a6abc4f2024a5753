"""The coordinator: one runner at a time, elected through the state store, hands the jobs out.

Any runner may become coordinator: it takes the ``serve:coordinator`` lease (a topic lease like
any other, with a fencing token). The holder renews it on every tick; when it dies or pauses,
the lease expires (at once if it was killed on this host: ``state.holder_is_gone``) and the next
runner to try wins it with a higher token. Every write the coordinator makes is fenced by that
token, so a deposed coordinator that wakes up cannot overwrite its successor's assignments.

A tick (seed 000's MvCoordinator): forget the runners whose heartbeat is older than the TTL,
then balance the jobs over the live ones (``assign.balance``) and write what changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Sequence

from ..state import FencingError, Lease, LeaseHeld, StateStore
from .assign import balance

COORDINATOR = "serve:coordinator"


@dataclass
class Coordinator:
    store: StateStore
    me: str
    ttl_seconds: float
    lease: Lease | None = None

    def tick(self, jobs: Sequence[str], now: datetime) -> bool:
        """Hold (or try to win) the coordinator's lease and, when held, coordinate; whether held."""
        try:
            self.lease = (self.store.renew(self.lease, self.ttl_seconds, now) if self.lease is not None
                          else self.store.acquire(COORDINATOR, self.me, self.ttl_seconds, now))
        except (LeaseHeld, FencingError):
            self.lease = None
            return False
        runners = self.store.runners()
        live = [r.id for r in runners if r.alive_at(now, self.ttl_seconds)]
        gone = [r.id for r in runners if r.id not in live]
        current = {a.job: a.runner for a in self.store.assignments()}
        wanted = balance(jobs, live, current)
        if wanted != current or gone:
            try:
                self.store.assign(self.lease, wanted, gone, now)
            except FencingError:  # deposed between the renewal and the write
                self.lease = None
                return False
        return True

    def resign(self) -> None:
        """Give the lease up (a stopping runner): the next runner's tick takes over at once."""
        if self.lease is not None:
            self.store.release(self.lease)
            self.lease = None
