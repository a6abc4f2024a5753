"""Leases kept alive while a step runs.

A topic's lease expires after its TTL unless renewed. Renewing only between steps would lose the
lease to another runner during any step longer than the TTL; so while a step runs, a thread
renews its leases every third of the TTL. A process that stops running (killed, or paused with
SIGSTOP) renews nothing: its leases expire, another runner takes the topics over with new
fencing tokens, and the paused process's next write is rejected (``state.FencingError``).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from datetime import datetime
from typing import Callable, Iterable, Iterator

from .state import FencingError, Lease, StateStore


@contextmanager
def kept(store: StateStore, leases: Callable[[], Iterable[Lease]], ttl_seconds: float,
         now: Callable[[], datetime]) -> Iterator[None]:
    """Renew ``leases()`` (read at every renewal: a step may take more) until the block ends."""
    stop = threading.Event()

    def renew() -> None:
        lost: set[tuple[str, int]] = set()
        while not stop.wait(ttl_seconds / 3):
            for lease in list(leases()):
                if (lease.topic, lease.token) in lost:
                    continue
                try:
                    store.renew(lease, ttl_seconds, now())
                except FencingError:  # taken over: the step's next fenced write fails and says so
                    lost.add((lease.topic, lease.token))
                except Exception:  # noqa: BLE001 - the store unreachable a moment: try again at the next renewal
                    pass

    thread = threading.Thread(target=renew, name="lease-keeper", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
