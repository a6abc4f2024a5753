"""The inputs of one MV batch, each seen through its change mode (``compiler.kinds.mv.change_modes``):
what they hold now (the probe: one Spark query for all), the range of each the batch reads (its
``next`` written before the batch's work), their changes, and what each input topic keeps at the
commit. ``InputSet`` is the ``Batch`` every mode is handed.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable

from ...phases import PhaseHook
from ...state import Lease, Offset, StateStore
from .change_modes import ChangeMode, Positions, Probe, resolve
from .decisions import Seen, up_to_date
from .scope import BatchScope, union_all

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


class InputSet:
    """Every input of ``plan`` in one batch."""

    def __init__(self, scope: BatchScope, store: StateStore, leases: dict[str, Lease], now: Callable[[], datetime],
                 phase: PhaseHook):
        self.spark, self.plan, self.derived, self.scope, self.store = scope.spark, scope.plan, scope.derived, scope, store
        self.leases, self.now, self.phase = leases, now, phase
        self.modes: dict[str, ChangeMode] = {}  # per input, how its changes are seen (``resolve``)
        self.probe = Probe()
        self.ranges: dict[str, tuple[Any, Any]] = {}  # (last, next) per input of the batch, once planned
        self.redo = False  # the batch is a redo of one that crashed before its commit
        self.resume = False  # a chunked batch resumed after a crash: ranges and snapshots as planned then
        self.fingerprints: dict[str, str] | None = None  # of the snapshots taken, read with the change counts

    def resolve(self) -> None:
        """Each input's change mode, from what its table is now."""
        self.modes = resolve(self.spark, self.plan)

    def committed(self, input_id: str) -> Offset | None:
        return self.store.get(self.plan.topic(input_id))

    # -- what the inputs hold now --------------------------------------------------------
    def look(self, since_last: bool, skip: frozenset[str] = frozenset()) -> Probe:
        """What the inputs hold now, in one Spark query for all the modes that ask one (newest
        positions, fingerprints). With ``since_last`` a mode may look only past the committed
        ``last``, and a Delta input whose log says that no row changed since the last commit is not
        read at all (``Positions.unchanged``); a rebuild asks for the true newest. ``skip``: the
        inputs pinned for a probe beside the build (``probe_only``)."""
        self.probe = Probe()
        if since_last and not skip:
            skip = frozenset(input_id for input_id in self.modes if self._unchanged(input_id))
        self.probe_only(since_last, lambda input_id: input_id not in skip)
        return self.probe

    def probe_only(self, since_last: bool, which: Callable[[str], bool]) -> None:
        """The probe of the inputs ``which`` accepts, into ``self.probe``."""
        frames = []
        for n, (input_id, mode) in enumerate(self.modes.items()):
            if not which(input_id):
                continue
            offset = self.committed(input_id) if since_last else None
            frame = mode.probe(self, tuple(offset.last) if offset is not None and offset.last else None, f"p{n}")
            if frame is not None:
                frames.append(frame)
        for row in union_all(frames).collect() if frames else []:
            self.modes[row["input"]].read_probe(self, row)

    def probe_beside(self, pinned: frozenset[str], since_last: bool) -> None:
        """The probe of the ``pinned`` inputs, beside a build. An input whose log shows no row changed
        since the last commit, in the same history, is not read: its newest position is the committed
        one, also for a rebuild. ``since_last`` (a build the strategy chose, not a rebuild) looks at
        the others as a batch by key's probe does, past each committed ``last``; a rebuild reads them
        whole (a source may have been rewritten with smaller positions)."""
        pinned = frozenset(input_id for input_id in pinned if not self._unchanged(input_id))
        self.probe_only(since_last, pinned.__contains__)

    def _unchanged(self, input_id: str) -> bool:
        """A Delta position input whose log shows no row changed since the last commit (its newest
        position is then the committed ``last``: ``Positions.unchanged``)."""
        mode = self.modes[input_id]
        return isinstance(mode, Positions) and mode.unchanged(self, self.committed(input_id))

    def pin(self) -> frozenset[str]:
        """Pin each position and feed input stored as Delta to its newest version, read from its log
        (no job; not over Spark Connect): its probe reads it as of that version, so a commit can keep
        the version with the position it saw (``Positions.state``), and a build decided before the
        probe runs the probe beside it (the build reads the table later: at least that version)
        rather than first, a fixed cost the peer's one statement does not pay."""
        return frozenset(input_id for input_id, mode in self.modes.items()
                         if isinstance(mode, Positions) and mode.pin(self))

    def rebuild_reason(self) -> str | None:
        """Why an input's committed position cannot be continued from (another mode kept it, its
        table was re-created): a full build."""
        for input_id, mode in self.modes.items():
            offset = self.committed(input_id)
            reason = mode.rebuild_reason(self, offset) if offset is not None else None
            if reason:
                return reason
        return None

    def up_to_date(self) -> bool:
        """``decisions.up_to_date`` over what each input's topic committed and the probe sees now
        (each mode says what it compares: a position, a fingerprint, an upstream MV's batch)."""
        return up_to_date({input_id: self._seen(input_id, mode) for input_id, mode in self.modes.items()})

    def _seen(self, input_id: str, mode: ChangeMode) -> Seen:
        offset = self.committed(input_id)
        if offset is None or offset.last is None or offset.in_flight:
            return Seen(False, None, None)
        return mode.seen(self, offset)

    def covered(self) -> bool:
        """Whether the batch read every input up to the position the probe saw. A redo reads
        the ranges planned before its crash, so changes that landed since are still waiting."""
        for input_id, mode in self.modes.items():
            current = mode.current(self)
            if current is not None and tuple(self.ranges[input_id][1] or ()) != tuple(current):
                return False
        return True

    # -- what the batch reads ------------------------------------------------------------
    def plan_ranges(self, batch: int, fresh: bool) -> dict[str, tuple[Any, Any]]:
        """(last, next) per input (``decisions.input_range``), each ``next`` written to its topic."""
        ranges = {}
        for input_id, mode in self.modes.items():
            topic = self.plan.topic(input_id)
            offset = self.store.get(topic) or Offset(topic)
            ranges[input_id] = mode.plan_range(self, offset, batch, fresh, resume=self.resume and not fresh)
            nxt = ranges[input_id][1]
            self.store.set_next(self.leases[topic], nxt if nxt is not None else (), self.now())
        self.ranges = ranges
        return ranges

    def changes(self, batch: int, ranges: dict) -> dict[str, "DataFrame"]:
        """The changes of every input whose range moved (of a dictionary: whose fingerprint did)."""
        frames = {}
        for input_id, mode in self.modes.items():
            last, nxt = ranges[input_id]
            if tuple(last or ()) != tuple(nxt or ()):
                frames[input_id] = mode.changes(self, batch, last, nxt)
        return frames

    def build(self, batch: int) -> None:
        """What a full build takes of every input first (each dictionary's snapshot)."""
        self.fingerprints = None  # every snapshot is taken anew
        for mode in self.modes.values():
            mode.build(self, batch)

    # -- the commit ----------------------------------------------------------------------
    def fingerprint_frames(self, batch: int, ranges: dict) -> list["DataFrame"]:
        """The fingerprint of each snapshot taken for the batch, a frame each (read with the counts)."""
        frames = [mode.fingerprint_frame(self, batch, ranges[input_id][1]) for input_id, mode in self.modes.items()]
        return [frame for frame in frames if frame is not None]

    def states(self, batch: int, ranges: dict) -> dict[str, str]:
        """Each input topic's state at the commit (each mode's). A snapshot's fingerprint is computed
        from the snapshot itself, so it describes exactly what was diffed; an input whose snapshot
        was not retaken keeps the fingerprint of its last commit (see ``Snapshots.state``)."""
        if self.fingerprints is None:
            frames = self.fingerprint_frames(batch, ranges)
            self.fingerprints = {row["input"]: row["fingerprint"] for row in (union_all(frames).collect() if frames else [])}
        return {input_id: mode.state(self, self.fingerprints.get(input_id))
                for input_id, mode in self.modes.items() if input_id in ranges}

    def after_commit(self, batch: int, ranges: dict) -> None:
        """What each mode drops once the batch is committed (snapshots no later batch reads)."""
        for input_id, mode in self.modes.items():
            mode.after_commit(self, batch, *ranges[input_id])
