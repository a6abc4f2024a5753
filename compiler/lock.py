"""One mvflow process at a time on a target whose Hive metastore is embedded Derby.

Derby admits a single process: a second Spark process on the same metastore fails after long
retries with thousands of lines of ``XSDB6`` traces, without naming who holds it. So every
command that would start Spark (``run``, ``verify``, ``demo``) first takes the target's claim
in the state store (``target:<name>``) — before it reads or writes anything else — and a
second process is refused with the holder's command, pid, host and start time. A holder
killed with -9 on this host is taken over at once; one on another host when its claim expires
(a heartbeat thread renews it while the command runs). Targets with a shared metastore take
no claim: their topics' own leases keep runners apart.
"""

from __future__ import annotations

import shlex
import sys
import threading
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Callable, Iterator

from .errors import Problem, RunError
from .project import Target
from .state import Claim, StateStore, default_holder
from .status import claim_words

TTL_SECONDS = 60.0


class ClaimHeld(RunError):
    """Another live process holds the target."""

    exit_code = 1

    def __init__(self, claim: Claim, now: datetime, what: str, hint: str):
        super().__init__(Problem(f"{what} is in use by {claim_words(claim, now)}", hint=hint, code="lease-held"))
        self.claim = claim


def exclusive(target: Target) -> bool:
    """Whether the target's metastore is the embedded Derby database (one process at a time)."""
    conf = target.spark.conf
    shared = "spark.hadoop.javax.jdo.option.ConnectionURL" in conf or any("metastore.uris" in k for k in conf) \
        or target.metastore.type != "derby"  # metastore: {type: postgres, dsn: ...} (compiler/metastore.py)
    return target.spark.metastore_dir is not None and not shared


@contextmanager
def target_lock(store: StateStore, target: Target, command: str | None = None,
                now: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
                ttl_seconds: float = TTL_SECONDS) -> Iterator[Claim | None]:
    """Hold the target's claim for the block (ClaimHeld if another live process has it)."""
    if not exclusive(target):
        yield None
        return
    command = command or "mvflow " + shlex.join(sys.argv[1:])
    holder = default_holder()
    claim = store.claim(f"target:{target.name}", holder, command, ttl_seconds, now())
    if claim.holder != holder:
        raise ClaimHeld(claim, now(), f"target '{target.name}'",
                        "its embedded Derby metastore admits one process at a time: wait for it to finish "
                        "(a killed holder on this host is taken over at once), or give the target a shared metastore")
    stop = threading.Event()
    beat = threading.Thread(target=_heartbeat, args=(store, claim, ttl_seconds, now, stop), daemon=True)
    beat.start()
    try:
        yield claim
    finally:
        stop.set()
        beat.join()
        store.release_claim(claim)


def _heartbeat(store: StateStore, claim: Claim, ttl_seconds: float, now, stop: threading.Event) -> None:
    while not stop.wait(ttl_seconds / 3):
        if store.renew_claim(claim, ttl_seconds, now()) is None:
            return  # taken over (this process was paused past the TTL): the topics' fencing tokens protect the data
