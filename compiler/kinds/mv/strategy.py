"""How an MV batch is applied: by key, by key in resumable chunks, or by a full build.

Pure: the MV's config (``MvKind``), what the batch knows (changed keys per input, affected MV
keys, MV rows), the MV's recorded batches (``Run``) and ``now`` in; a ``Decision`` out, with
the estimate of each strategy and the reason in words. The refresh (``compiler.kinds.mv.refresh``)
gathers the figures and executes what is decided.

The cost model (``cost_model``) fits, by medians over the MV's recent batches (Theil–Sen: of three
batches or more, one timed on a loaded machine moves no estimate), ``fixed + per key × keys`` to its key-driven
refreshes and ``fixed + per row × rows`` to its full builds. With one batch of a kind, or none,
it uses priors:

- one build, or refreshes of one size only: no fixed cost (the seconds spread over the rows or
  keys). A single refresh cannot tell its fixed cost from its cost per key; splitting it by a prior
  once read a slow first refresh of 281,156 keys at 10M rows as 60 s of fixed cost, so every later
  batch of 47,000 keys was built in full (62 s) instead of refreshed (~35 s), and a choice of full
  builds is never measured again by key. Spread over its keys, an error leans to a refresh by
  key, whose seconds then give the fit its second point;
- no refresh: a refresh costs what a build costs fixed, and a key ``1 / fanout_threshold`` rows
  of a build (so with no history the old fan-out guard's break-even holds: 0.2 → a key costs 5 rows);
- refreshes of several sizes: a key costs at most that prior (the excess of a steeper fit is fixed
  cost). A refresh's seconds are mostly its scans, and batches of different sizes differ in which
  inputs changed, so a slope fitted through a narrow range of sizes can be steep: at 10M rows,
  three refreshes of 12,531–48,563 keys (22–40 s) fitted 0.41 ms/key, 45 rows of a build, and
  a batch of 469,445 keys was estimated at 212 s and built in full (77 s) where by key took 37 s;
- no build recorded (a state store older than this history): the fan-out guard decides.

A chunked batch of ``n`` chunks counts as ``n`` refreshes of ``keys / n`` keys each; a chunk
after the first is estimated at ``CHUNK_FIXED_SHARE`` of a refresh's fixed cost (the changed and
affected keys are found once per batch, not per chunk).

Three decision points per batch, each cheaper to reach than the next: ``before_changes`` (the
probe saw changes; a model whose refresh by key costs more than a full build even for one key,
a small MV, builds without finding any key, and so does one whose main input's changed keys,
counted by the probe, already cost more by key than a full build), ``before_keys`` (the
changed-key counts are known: a change clearly wider than a full build's break-even goes straight
to a full build, without finding the affected keys) and ``after_keys`` (the affected keys are
known: the old fan-out guard, now cost-based). At the last two, what the batch has spent is spent
either way: what is left of it by key is weighed against a build, from the phases the step log
keeps (the affected keys' query by the changed keys it reads, ``Run.keys_query``; the write by the
keys it writes, ``Run.after_keys``). A batch the estimates give to a full build still goes by key while by key is
measured too few times, or has not been measured for a while (``explore_by_key``): full builds are
measured whenever chosen, by key only when chosen, so without it one slow batch by key would keep
the MV on full builds for good. ``not_due_until`` is ``min_interval``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Mapping, Sequence

from ...phases import phase_spans
from ...state import StepLogRow
from . import MvKind

INCREMENTAL, CHUNKED, FULL = "incremental", "chunked", "full"
COMPACTION = "compaction"  # not a strategy: the step-log row of a compaction that followed a batch
HISTORY = 10  # recorded batches of each kind the cost model fits
# Exploration (``explore_by_key``): a batch the estimates give to a full build goes by key instead
# while fewer than MEASURED batches by key are recorded, or after EXPLORE_AFTER full builds in a
# row, if by key is estimated at most EXPLORE_RATIO × the build and the change is not wide. Full
# builds are measured every time they are chosen; by key is not, so one slow batch by key (a
# loaded machine: est. 308 s against a 78 s build, for a batch that took 30 s) kept every later
# batch a full build.
MEASURED, EXPLORE_AFTER, EXPLORE_RATIO = 3, 10, 8.0
CHUNK_FIXED_SHARE = 0.5
MAX_CHUNKS = 64


@dataclass(frozen=True)
class Run:
    """One recorded batch of the MV (from the step log): how it was applied, how long it took,
    how many MV keys it refreshed (a build: every row) and how many rows the MV held."""

    strategy: str
    seconds: float
    keys: int
    rows: int
    chunks: int = 1
    #: seconds after its affected keys were found (its write and commit; None: not recorded)
    after_keys: float | None = None
    #: the changed keys of its inputs, and the seconds its affected keys' query took once they were
    #: found (None: not recorded)
    changed: int | None = None
    keys_query: float | None = None


@dataclass(frozen=True)
class CostModel:
    """``refresh_fixed + per_key × keys`` and ``build_fixed + per_row × rows`` (None: unknown),
    with where each came from in words."""

    refresh_fixed: float | None
    per_key: float | None
    build_fixed: float | None
    per_row: float | None
    refresh_from: str
    build_from: str
    refreshes: int = 0  # recorded refreshes by key the fit used (0: the refresh costs are a prior)
    #: seconds of the compaction that follows every batch by key of a small MV (0: none follows)
    compaction: float = 0.0
    #: ``write_fixed + write_per_key × keys``: what a batch by key costs once its affected keys are
    #: found (None: no recorded batch says)
    write_fixed: float | None = None
    write_per_key: float | None = None
    #: ``query_fixed + per_changed × changed keys``: the affected keys' query, by the changed keys it
    #: reads (None: no recorded batch says)
    query_fixed: float | None = None
    per_changed: float | None = None

    def incremental(self, keys: int, found: bool = False) -> float | None:
        """A batch by key of ``keys`` keys; ``found``: only what is left once they are found."""
        fixed, per_key = self._by_key(found)
        if fixed is None or per_key is None:
            return None
        return fixed + per_key * keys + self.compaction

    def chunked(self, keys: int, chunks: int, found: bool = False) -> float | None:
        one = self.incremental(keys, found)
        return None if one is None else one + (chunks - 1) * CHUNK_FIXED_SHARE * (self._by_key(found)[0] or 0.0)

    def _by_key(self, found: bool) -> tuple[float | None, float | None]:
        return (self.write_fixed, self.write_per_key) if found else (self.refresh_fixed, self.per_key)

    def after_changes(self, changed: int, keys: int) -> float | None:
        """What is left of a batch by key once its ``changed`` keys are found: the affected keys'
        query and the write of ``keys`` keys."""
        write = self.incremental(keys, found=True)
        if write is None or self.query_fixed is None or self.per_changed is None:
            return None
        return self.query_fixed + self.per_changed * changed + write

    def full(self, rows: int) -> float | None:
        if self.build_fixed is None or self.per_row is None:
            return None
        return self.build_fixed + self.per_row * rows


@dataclass(frozen=True)
class Decision:
    """A strategy (None: not decided yet), the estimates behind it and the reason in words."""

    strategy: str | None
    reason: str
    keys: int | None = None  # affected MV keys (a lower bound before they are known)
    rows: int = 0
    estimates: dict[str, float | None] = field(default_factory=dict)
    chunks: int = 1

    def words(self) -> str:
        """``incremental: est. 1.9 s vs full 8.7 s (607 keys of 100,000 rows)``."""
        if self.strategy is None:
            return f"undecided: {self.reason}"
        name = f"{FULL} build" if self.strategy == FULL else self.strategy
        if self.strategy == CHUNKED:
            name += f" ({self.chunks} chunks)"
        own = self.estimates.get(self.strategy)
        others = [f"{k} {_seconds(self.estimates[k])}" for k in (FULL, INCREMENTAL, CHUNKED)
                  if k != self.strategy and self.estimates.get(k) is not None]
        text = name + (f": est. {_seconds(own)}" if own is not None else "")
        text += (" vs " + ", ".join(others) if own is not None else ": est. " + ", ".join(others)) if others else ""
        if self.keys is not None:
            text += f" ({self.keys:,} keys of {self.rows:,} rows)"
        return text

    def to_dict(self) -> dict:
        return {"strategy": self.strategy, "reason": self.reason, "keys": self.keys, "rows": self.rows,
                "chunks": self.chunks, "estimates": {k: None if v is None else round(v, 3) for k, v in self.estimates.items()}}


def runs(steps: Sequence[StepLogRow]) -> list[Run]:
    """The step log rows of an MV's batches as the cost model reads them (rows an older mvflow
    wrote, without a strategy, and batches that refreshed nothing are left out).

    >>> from datetime import datetime, timezone
    >>> row = StepLogRow("wide", datetime(2026, 1, 1, tzinfo=timezone.utc), 607, seconds=1.9, strategy="incremental",
    ...                  detail={"keys": 607, "rows": 100_000, "chunks": 1, "changed": 700,
    ...                          "phases": {"mv:changed-keys": 0.9, "mv:affected-keys": 1.2}})
    >>> runs([row, StepLogRow("wide", row.ts, 3)])
    [Run(strategy='incremental', seconds=1.9, keys=607, rows=100000, chunks=1, after_keys=0.7, changed=700, keys_query=0.3)]
    """
    found = []
    for step in steps:
        keys, rows = step.detail.get("keys"), step.detail.get("rows")
        if step.strategy == COMPACTION and isinstance(rows, int) and rows > 0 and step.seconds > 0:
            found.append(Run(COMPACTION, step.seconds, 0, rows))
        elif step.strategy == FULL and isinstance(keys, int) and isinstance(rows, int) and keys > 0 and step.seconds > 0:
            found.append(Run(FULL, step.seconds, keys, rows))
        elif step.strategy and isinstance(keys, int) and isinstance(rows, int) and keys > 0 and step.seconds > 0:
            phases = step.detail.get("phases") or {}
            changed = step.detail.get("changed")
            found.append(Run(step.strategy, step.seconds, keys, rows, int(step.detail.get("chunks") or 1),
                             _span(phases.get("mv:affected-keys"), step.seconds),
                             changed if isinstance(changed, int) and changed > 0 else None,
                             _span(phases.get("mv:changed-keys"), phases.get("mv:affected-keys"))))
    return found


def _span(start: object, end: object) -> float | None:
    """Seconds from one recorded point of a batch to a later one (None: either not recorded)."""
    numbers = isinstance(start, (int, float)) and isinstance(end, (int, float))
    return round(end - start, 3) if numbers and start <= end else None


def compaction_reason(kind: MvKind, base_rows: int, delta_rows: int) -> str | None:
    """Why the batch just committed is followed by a compaction (None: it is not). A small MV is
    compacted after every batch: its readers then read a plain table (the merge-on-read view cost a
    reader 1.3-4.6x a plain table at 100,000 rows, a fixed ~0.2 s a query; rewriting 100,000 rows
    costs about a second). A larger one when its delta passes ``compact_threshold`` of its rows.

    >>> compaction_reason(MvKind(), 50_000, 40)
    'a small MV (50,000 rows, compact_below_rows 100,000): compacted after every batch'
    >>> compaction_reason(MvKind(), 1_000_000, 40) is None, compaction_reason(MvKind(), 50_000, 0) is None
    (True, True)
    >>> compaction_reason(MvKind(compact_below_rows=0), 1_000_000, 150_000)
    'the delta (150,000 rows) passed compact_threshold 0.1 of 1,000,000 rows'
    """
    if delta_rows <= 0:
        return None
    if compacts_every_batch(kind, base_rows):
        return f"a small MV ({base_rows:,} rows, compact_below_rows {kind.compact_below_rows:,}): compacted after every batch"
    if delta_rows > kind.compact_threshold * max(base_rows, 1):
        return f"the delta ({delta_rows:,} rows) passed compact_threshold {kind.compact_threshold:g} of {base_rows:,} rows"
    return None


def compacts_every_batch(kind: MvKind, rows: int) -> bool:
    return rows <= kind.compact_below_rows


def _model(kind: MvKind, history: Sequence[Run], rows: int) -> CostModel:
    """The cost model of a batch of an MV of ``rows`` rows: by key pays the compaction that follows."""
    return cost_model(history, kind.fanout_threshold, rows if compacts_every_batch(kind, rows) else 0)


def cost_model(history: Sequence[Run], fanout_threshold: float = 0.2, compacted_rows: int = 0) -> CostModel:
    """Fit the MV's costs to its recorded batches (newest first; ``HISTORY`` of each kind).
    ``compacted_rows``: the rows a compaction after each batch by key rewrites, at the median cost
    per row of the recorded compactions (none recorded: not counted; a build's cost per row, the
    only prior at hand, is ~10x a compaction's and would keep a small MV from ever being refreshed by key).

    >>> runs = [Run("incremental", 2.0, 1_000, 100_000), Run("incremental", 3.0, 11_000, 100_000),
    ...         Run("full", 9.0, 100_000, 100_000), Run("full", 5.0, 50_000, 50_000)]
    >>> m = cost_model(runs)
    >>> round(m.refresh_fixed, 2), round(m.per_key * 1000, 3), round(m.build_fixed, 2), round(m.per_row * 1000, 3)
    (1.9, 0.1, 1.0, 0.08)
    >>> m.refresh_from, m.build_from
    ('2 refreshes', '2 builds')
    >>> round(cost_model(runs + [Run(COMPACTION, 0.5, 0, 100_000)], compacted_rows=100_000).incremental(1_000), 2)
    2.5
    >>> prior = cost_model([Run("full", 10.0, 100_000, 100_000)])
    >>> prior.incremental(20_000) == prior.full(100_000), prior.refresh_from
    (True, 'no refresh yet: prior, a key costs 1/0.2 rows of a build')
    >>> cost_model([]).full(10) is None
    True
    >>> ten_m = [Run("incremental", 40.3, 48_563, 8_644_485), Run("incremental", 33.6, 47_373, 8_644_485),
    ...          Run("incremental", 22.4, 12_531, 8_644_485), Run("full", 78.5, 8_644_485, 8_644_485)]
    >>> m = cost_model(ten_m)
    >>> round(m.refresh_fixed, 1), round(m.per_key * 1000, 4), m.refresh_from
    (31.4, 0.0454, '3 refreshes, a key at most 1/0.2 rows of a build')
    """
    builds = [(r.rows, r.seconds) for r in history if r.strategy == FULL and r.rows > 0][:HISTORY]
    keyed = [(r.keys / max(r.chunks, 1), r.seconds / max(r.chunks, 1)) for r in history
             if r.strategy in (INCREMENTAL, CHUNKED) and r.keys > 0][:HISTORY]
    build_fixed = per_row = None
    build_from = "no full build recorded"
    if builds:
        build_fixed, per_row = _fit(builds, prior_slope=None)
        build_from = _count(len(builds), "build")
    prior_key = per_row / max(fanout_threshold, 1e-9) if per_row is not None else None
    if keyed:
        refresh_fixed, per_key = _fit(keyed, prior_slope=None)
        refresh_from = _count(len(keyed), "refresh")
        if prior_key is not None and per_key > prior_key and len({x for x, _ in keyed}) > 1:
            refresh_fixed, per_key = _fixed_for(keyed, prior_key), prior_key
            refresh_from += f", a key at most 1/{fanout_threshold:g} rows of a build"
    elif build_fixed is not None:
        refresh_fixed, per_key = build_fixed, prior_key
        refresh_from = f"no refresh yet: prior, a key costs 1/{fanout_threshold:g} rows of a build"
    else:
        refresh_fixed = per_key = None
        refresh_from = "no refresh recorded"
    compacted = [r.seconds / r.rows for r in history if r.strategy == COMPACTION][:HISTORY]
    compaction = _median(compacted) * compacted_rows if compacted else 0.0
    written = [(r.keys / max(r.chunks, 1), r.after_keys / max(r.chunks, 1)) for r in history
               if r.strategy in (INCREMENTAL, CHUNKED) and r.keys > 0 and r.after_keys is not None][:HISTORY]
    write_fixed, write_per_key = _fit(written, prior_slope=None) if written else (None, None)
    if write_per_key is not None and per_key is not None and write_per_key > per_key:  # no steeper than the whole
        write_fixed, write_per_key = _fixed_for(written, per_key), per_key
    queried = [(r.changed, r.keys_query) for r in history
               if r.strategy in (INCREMENTAL, CHUNKED) and r.changed and r.keys_query is not None][:HISTORY]
    query_fixed, per_changed = _fit(queried, prior_slope=None) if queried else (None, None)
    return CostModel(refresh_fixed, per_key, build_fixed, per_row, refresh_from, build_from, len(keyed), compaction,
                     write_fixed, write_per_key, query_fixed, per_changed)


def _fixed_for(points: list[tuple[float, float]], slope: float) -> float:
    """The fixed cost of ``y = fixed + slope × x``: the median of what each point leaves, at least 0."""
    return max(0.0, _median([y - slope * x for x, y in points]))


def before_changes(kind: MvKind, rows: int, history: Sequence[Run], probed_main_keys: int = 0) -> Decision:
    """The first decision point: no key is known yet (the refresh asks it before the probe too, with
    no ``probed_main_keys``: its first two rules need nothing the probe finds). ``config(strategy=
    'full')`` builds; ``auto`` builds when the cost model says a refresh of a single key costs more
    than a full build (its fixed cost alone: the probe, the key queries and the write's jobs
    outweigh rebuilding a small MV), so a small MV pays neither the changed nor the affected keys.
    Its refresh estimate then stays as last measured until the MV grows past the break-even.
    ``probed_main_keys``, the changed keys the probe counted in a main input kept by ``position``,
    is a lower bound of the affected keys: ``before_keys`` decides on it before any key query (at
    10M rows with 10% changed, finding the changed keys first cost 25 s of a 58 s build).

    >>> runs = [Run("full", 3.0, 10_000, 10_000), Run("incremental", 5.0, 20, 10_000), Run("incremental", 6.0, 200, 10_000),
    ...         Run("incremental", 5.5, 100, 10_000)]
    >>> before_changes(MvKind(), 10_000, runs).words()
    'full build: est. 3.0 s vs incremental 5.4 s'
    >>> before_changes(MvKind(), 10_000, runs[:3]).reason  # two batches by key: too few to trust
    'decided on the changed keys'
    >>> before_changes(MvKind(), 1_000_000, runs).strategy is None  # 1M rows: est. 300 s
    True
    >>> before_changes(MvKind(strategy="full"), 10, []).reason
    "config(strategy='full')"
    >>> before_changes(MvKind(), 10_000, runs[:2]).strategy is None  # one refresh: its fixed cost is unknown
    True
    >>> before_changes(MvKind(), 1_000_000, runs, probed_main_keys=900_000).words()
    'full build: est. 300 s vs incremental 1355 s (900,000 keys of 1,000,000 rows)'
    >>> before_changes(MvKind(), 1_000_000, runs, probed_main_keys=1_000).strategy is None
    True
    """
    model = _model(kind, history, rows)
    full = model.full(rows)
    if kind.strategy == FULL:
        return Decision(FULL, "config(strategy='full')", None, rows, {FULL: full})
    one = model.incremental(1)
    if (kind.strategy == "auto" and full is not None and one is not None and one > full and model.refreshes
            and not explore_by_key(history)):
        return Decision(FULL, f"a refresh by key costs more than a full build of {rows:,} rows", None, rows,
                        {FULL: full, INCREMENTAL: one})
    if probed_main_keys:
        return before_keys(kind, {"main": probed_main_keys}, ["main"], rows, history)
    return Decision(None, "decided on the changed keys")


def before_keys(kind: MvKind, changed: Mapping[str, int], main_inputs: Sequence[str], rows: int,
                history: Sequence[Run], spent: float = 0.0) -> Decision:
    """The second decision point: the changed keys per input are known, the affected MV keys not
    yet, ``spent`` seconds into the batch. Every changed key of a main input is an affected key, so
    their count is a lower bound: when even that many keys cost more by key than a full build,
    build at once. As at ``after_keys``, the seconds spent are spent either way: where recorded
    batches say what their affected keys' query cost per changed key it reads (``Run.keys_query``)
    and what their write cost, by key is ``spent`` plus both, a build ``spent`` plus a build.

    >>> runs = [Run("full", 8.7, 100_000, 100_000), Run("incremental", 1.9, 607, 100_000),
    ...         Run("incremental", 2.5, 5_000, 100_000)]
    >>> before_keys(MvKind(), {"d.offers": 60_000, "d.shops": 3}, ["d.offers"], 100_000, runs).words()
    'full build: est. 8.7 s vs incremental 10.0 s (60,000 keys of 100,000 rows)'
    >>> before_keys(MvKind(), {"d.offers": 600}, ["d.offers"], 100_000, runs).strategy is None
    True
    >>> timed = [Run("full", 8.0, 100_000, 100_000)] + [Run("incremental", 4.0 + w + q, k, 100_000, after_keys=w,
    ...          changed=k, keys_query=q) for k, w, q in ((8_000, 2.1, 1.8), (12_000, 2.9, 2.2), (16_000, 3.7, 2.6))]
    >>> before_keys(MvKind(), {"main": 12_000}, ["main"], 100_000, timed).words()  # whole batches: 9.1 s
    'full build: est. 8.0 s vs incremental 9.1 s (12,000 keys of 100,000 rows)'
    >>> before_keys(MvKind(), {"main": 12_000}, ["main"], 100_000, timed, spent=4.0).strategy is None  # 4 + 5.1 s
    True
    """
    lower = max([changed.get(i, 0) for i in main_inputs] or [0])
    if kind.strategy != "auto":
        return Decision(None, f"config(strategy={kind.strategy!r}): decided on the affected keys")
    model = _model(kind, history, rows)
    left = model.after_changes(sum(changed.values()), lower) if spent > 0 else None
    spent = spent if left is not None else 0.0
    full, keyed = _plus(spent, model.full(rows)), _plus(spent, left if left is not None else model.incremental(lower))
    estimates = {INCREMENTAL: keyed, FULL: full}
    narrow = lower <= kind.fanout_threshold * max(rows, 1)
    if full is not None and keyed is not None and full < keyed and not (narrow and explore_by_key(history)):
        return Decision(FULL, f"at least {lower:,} affected keys (changed main keys): a full build is cheaper",
                        lower, rows, estimates)
    if full is None and lower > kind.fanout_threshold * max(rows, 1):
        return Decision(FULL, f"fan-out guard ({model.build_from}): at least {lower:,} affected keys > "
                              f"{kind.fanout_threshold:g} × {rows:,} rows", lower, rows, estimates)
    return Decision(None, f"at least {lower:,} affected keys: by key unless the affected keys say otherwise", lower, rows)


def after_keys(kind: MvKind, affected: int, rows: int, history: Sequence[Run], spent: float = 0.0) -> Decision:
    """The third decision point: the affected MV keys are known, ``spent`` seconds into the batch.

    ``auto`` takes the cheaper estimate of a full build and a refresh by key; by key, a wide
    change (more than ``fanout_threshold`` of the rows, or more than ``chunk_keys`` keys) goes in
    resumable chunks. With no full build recorded, the fan-out guard alone decides. The seconds
    spent finding the keys are spent whichever way the batch goes: where recorded batches say what
    their write cost (``Run.after_keys``), by key is estimated as ``spent`` plus that write, and a
    build as ``spent`` plus a build; without them, as whole batches.

    >>> runs = [Run("full", 8.7, 100_000, 100_000), Run("incremental", 1.9, 607, 100_000),
    ...         Run("incremental", 2.5, 5_000, 100_000)]
    >>> after_keys(MvKind(), 607, 100_000, runs).words()
    'incremental: est. 1.9 s vs full 8.7 s (607 keys of 100,000 rows)'
    >>> after_keys(MvKind(), 40_000, 100_000, runs).words()
    'chunked (2 chunks): est. 8.2 s vs full 8.7 s, incremental 7.3 s (40,000 keys of 100,000 rows)'
    >>> after_keys(MvKind(), 90_000, 100_000, runs).strategy
    'full'
    >>> after_keys(MvKind(strategy="incremental"), 90_000, 100_000, runs).strategy
    'incremental'
    >>> after_keys(MvKind(), 30_000, 100_000, []).reason
    'fan-out guard (no full build recorded): 30,000 affected keys > 0.2 × 100,000 rows'
    >>> ten_m = [Run("incremental", 40.3, 48_563, 8_644_485), Run("incremental", 33.6, 47_373, 8_644_485),
    ...          Run("incremental", 22.4, 12_531, 8_644_485), Run("full", 78.5, 8_644_485, 8_644_485)]
    >>> after_keys(MvKind(), 469_445, 8_644_485, ten_m).words()  # measured: by key 37 s, full 77 s
    'incremental: est. 52.8 s vs full 78.5 s (469,445 keys of 8,644,485 rows)'
    >>> slow_keys = [Run("full", 3.0, 10_000, 10_000)] + [Run("incremental", s, k, 10_000, after_keys=w)
    ...             for s, k, w in ((4.0, 100, 0.8), (4.4, 300, 1.0), (4.2, 200, 0.9))]
    >>> after_keys(MvKind(), 200, 10_000, slow_keys, spent=3.3).words()  # the keys' 3.3 s are spent: 0.9 s left
    'incremental: est. 4.2 s vs full 6.3 s (200 keys of 10,000 rows)'
    >>> after_keys(MvKind(), 200, 10_000, slow_keys).strategy  # the whole batch against a build
    'full'
    """
    model = _model(kind, history, rows)
    found = spent > 0 and model.write_per_key is not None
    spent = spent if found else 0.0
    chunks = chunk_count(affected, kind.chunk_keys)
    full, one = _plus(spent, model.full(rows)), _plus(spent, model.incremental(affected, found))
    estimates = {INCREMENTAL: one, FULL: full}
    wide = affected > kind.fanout_threshold * max(rows, 1)
    share = f"{affected / max(rows, 1):.0%} of the rows"

    def decided(strategy: str, reason: str) -> Decision:
        n = chunks if strategy == CHUNKED else 1
        if strategy == CHUNKED:
            estimates[CHUNKED] = _plus(spent, model.chunked(affected, n, found))
        return Decision(strategy, reason, affected, rows, {strategy: estimates.pop(strategy, None), **estimates}, n)

    if kind.strategy != "auto":
        return decided(kind.strategy, f"config(strategy={kind.strategy!r})")
    if full is None:
        if wide:
            return decided(FULL, f"fan-out guard ({model.build_from}): {affected:,} affected keys > "
                                 f"{kind.fanout_threshold:g} × {rows:,} rows")
        return decided(INCREMENTAL, f"by key ({model.build_from}: no full build estimate)")
    in_chunks = wide or affected > kind.chunk_keys
    keyed = _plus(spent, model.chunked(affected, chunks, found)) if in_chunks else one
    if keyed is not None and full < keyed:
        exploring = explore_by_key(history)
        if exploring and not in_chunks and keyed <= EXPLORE_RATIO * full:
            return decided(INCREMENTAL, f"exploring: {exploring} (a full build est. cheaper)")
        return decided(FULL, "a full build is estimated cheaper than by key")
    if in_chunks:
        return decided(CHUNKED, f"a wide change ({share}): by key in {chunks} resumable chunks")
    if not model.refreshes:
        return decided(INCREMENTAL, "by key is estimated cheaper than a full build (a prior: no batch by key measured yet)")
    return decided(INCREMENTAL, "by key is estimated cheaper than a full build")


def explore_by_key(history: Sequence[Run]) -> str | None:
    """Why the next batch the estimates give to a full build should go by key (``EXPLORE_RATIO``
    and a narrow change permitting), in words; None when by key's estimate stands. ``history`` is
    newest first; with no batch by key recorded, the estimate is a prior, not a measurement.

    >>> build, key = Run(FULL, 9.0, 100, 100), Run(INCREMENTAL, 60.0, 5, 100)
    >>> explore_by_key([build, key, build])
    'by key measured once, too few to trust (3 wanted)'
    >>> explore_by_key([build, key, key, key, build]) is None
    True
    >>> explore_by_key([build] * 10 + [key] * 3)
    '10 full builds since the last batch by key'
    >>> explore_by_key([build]) is None
    True
    """
    batches = [run for run in history if run.strategy != COMPACTION]
    keyed = sum(1 for run in batches if run.strategy != FULL)
    if not keyed:
        return None
    if keyed < MEASURED:
        return f"by key measured {'once' if keyed == 1 else f'{keyed} times'}, too few to trust ({MEASURED} wanted)"
    streak = next(i for i, run in enumerate(batches) if run.strategy != FULL)
    return f"{streak} full builds since the last batch by key" if streak >= EXPLORE_AFTER else None


def chunk_count(keys: int, chunk_keys: int) -> int:
    """Chunks of a chunked batch: at least 2, about ``chunk_keys`` keys each, at most ``MAX_CHUNKS``
    and never more than there are keys.

    >>> chunk_count(40_000, 500_000), chunk_count(4_000_000, 500_000), chunk_count(1, 2), chunk_count(10**9, 1)
    (2, 8, 1, 64)
    """
    return max(1, min(keys, MAX_CHUNKS, max(2, math.ceil(keys / max(chunk_keys, 1)))))


def not_due_until(now: datetime, last_batch: datetime | None, min_interval_seconds: int) -> datetime | None:
    """When the MV is due again if ``min_interval`` says it is not due at ``now`` (else None).

    >>> last = datetime(2026, 1, 1, 10, 22, 5, tzinfo=timezone.utc)
    >>> not_due_until(datetime(2026, 1, 1, 10, 25, tzinfo=timezone.utc), last, 600)
    datetime.datetime(2026, 1, 1, 10, 32, 5, tzinfo=datetime.timezone.utc)
    >>> not_due_until(datetime(2026, 1, 1, 10, 40, tzinfo=timezone.utc), last, 600) is None
    True
    """
    if not min_interval_seconds or last_batch is None:
        return None
    due = last_batch + timedelta(seconds=min_interval_seconds)
    return due if now < due else None


def not_due_words(until: datetime, min_interval_seconds: int) -> str:
    """
    >>> not_due_words(datetime(2026, 1, 1, 10, 32, 5, tzinfo=timezone.utc), 600)
    'not due until 10:32:05 UTC (min_interval 10m)'
    """
    return f"not due until {until.astimezone(timezone.utc):%H:%M:%S} UTC (min_interval {duration_words(min_interval_seconds)})"


def duration_words(seconds: int) -> str:
    """
    >>> duration_words(600), duration_words(90), duration_words(7200), duration_words(0)
    ('10m', '90s', '2h', 'none')
    """
    if not seconds:
        return "none"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def explain_lines(kind: MvKind, history: Sequence[Run], rows: int | None) -> list[str]:
    """What ``mvflow explain`` says of the strategy: the config, and with recorded batches the
    fitted costs and today's break-even.

    >>> runs = [Run("full", 8.7, 100_000, 100_000), Run("incremental", 1.9, 607, 100_000)]
    >>> print("\\n".join(explain_lines(MvKind(min_interval_seconds=600, compact_below_rows=0), runs, 100_000)))
      strategy: auto (fanout_threshold 0.2, chunk_keys 500,000, min_interval 10m, compact_below_rows 0)
      cost model: by key 0 s + 3.13 ms/key (1 refresh); full build 0 s + 0.087 ms/row (1 build)
      now: a full build of 100,000 rows est. 8.7 s; by key is cheaper below 2,779 affected keys
    >>> print(explain_lines(MvKind(), runs + [Run(COMPACTION, 0.9, 0, 100_000)], 100_000)[1])
      cost model: by key 0 s + 3.13 ms/key (1 refresh) + its compaction 0.9 s; full build 0 s + 0.087 ms/row (1 build)
    >>> timed = Run("incremental", 1.9, 607, 100_000, after_keys=0.6, changed=700, keys_query=0.3)
    >>> print(explain_lines(MvKind(), [timed], 100_000)[1])
      cost model: by key 0 s + 3.13 ms/key (1 refresh: its affected keys' query 0 s + 0.429 ms/changed key, its write 0 s + 0.988 ms/key); full build: no full build recorded
    """
    lines = [f"  strategy: {kind.strategy} (fanout_threshold {kind.fanout_threshold:g}, chunk_keys {kind.chunk_keys:,}, "
             f"min_interval {duration_words(kind.min_interval_seconds)}, compact_below_rows {kind.compact_below_rows:,})"]
    if not history:
        return lines + ["  cost model: no batch recorded yet"]
    m = _model(kind, history, rows or 0)
    split = ([f"its affected keys' query {_seconds(m.query_fixed)} + {_rate(m.per_changed, 'changed key')}"]
             if m.query_fixed is not None and m.per_changed is not None else [])
    if m.write_per_key is not None and m.write_fixed is not None:
        split.append(f"its write {_seconds(m.write_fixed)} + {_rate(m.write_per_key, 'key')}")
    source = m.refresh_from + (": " + ", ".join(split) if split else "")
    keyed = (f"by key {_seconds(m.refresh_fixed)} + {_rate(m.per_key, 'key')} ({source})"
             if m.per_key is not None and m.refresh_fixed is not None else f"by key: {source}")
    if m.compaction:
        keyed += f" + its compaction {_seconds(m.compaction)}"
    built = (f"full build {_seconds(m.build_fixed)} + {_rate(m.per_row, 'row')} ({m.build_from})"
             if m.per_row is not None and m.build_fixed is not None else f"full build: {m.build_from}")
    lines.append(f"  cost model: {keyed}; {built}")
    full = m.full(rows) if rows is not None else None
    if full is not None and m.per_key and m.refresh_fixed is not None:
        even = max(0, int((full - m.refresh_fixed - m.compaction) / m.per_key))
        lines.append(f"  now: a full build of {rows:,} rows est. {_seconds(full)}; by key is cheaper below {even:,} affected keys")
    return lines


def cost_lines(steps: Sequence[StepLogRow], last: int = 10) -> list[str]:
    """What ``mvflow explain --costs`` adds: the batches the cost model reads, each with its cost per
    key (per row for a build), and the last ``last`` decisions, estimated against actual seconds and
    split by phase (``steps`` newest first, as the step log returns them).

    >>> from datetime import datetime, timezone
    >>> at = datetime(2026, 11, 29, 10, 22, 5, tzinfo=timezone.utc)
    >>> steps = [StepLogRow("wide", at, 607, next=(7,), seconds=2.3, strategy="incremental",
    ...                     detail={"keys": 607, "rows": 100_000, "estimates": {"incremental": 1.9, "full": 8.7},
    ...                             "reason": "by key is estimated cheaper than a full build",
    ...                             "phases": {"mv:probed": 0.4, "mv:changed-keys": 0.9, "mv:committed": 2.3}}),
    ...          StepLogRow("wide", at, 100_000, next=(6,), seconds=8.7, strategy="full",
    ...                     detail={"keys": 100_000, "rows": 100_000, "reason": "first run"})]
    >>> print("\\n".join(cost_lines(steps)))
      cost model inputs (newest first; the last 10 of each kind):
        incremental      607 keys of 100,000 rows   2.3 s    3.79 ms/key
        full                         100,000 rows   8.7 s   0.087 ms/row
      last decisions (newest first): estimated vs actual
        2026-11-29 10:22:05 UTC  batch 7  incremental  est. 1.9 s  actual 2.3 s (1.21x)  by key is estimated cheaper than a full build
          phases: probed 0.4 s, changed-keys 0.5 s, committed 1.4 s
        2026-11-29 10:22:05 UTC  batch 6  full  est. ?  actual 8.7 s  first run
    """
    found = runs(steps)
    if not found:
        return ["  cost model inputs: no batch recorded yet"]
    lines = [f"  cost model inputs (newest first; the last {HISTORY} of each kind):"]
    kept = {FULL: 0, COMPACTION: 0, "keyed": 0}
    for run in found:
        kind = run.strategy if run.strategy in kept else "keyed"
        kept[kind] += 1
        if kept[kind] > HISTORY:
            continue
        by_row = kind != "keyed"
        size = f"{run.rows:,} rows" if by_row else f"{run.keys:,} keys of {run.rows:,} rows"
        rate = _rate(run.seconds / max(run.rows if by_row else run.keys, 1), "row" if by_row else "key")
        lines.append(f"    {run.strategy:<12} {size:>28} {_seconds(run.seconds):>7} {rate:>14}")
    lines.append("  last decisions (newest first): estimated vs actual")
    for step in [s for s in steps if s.strategy and s.strategy != COMPACTION][:last]:
        estimate = (step.detail.get("estimates") or {}).get(step.strategy)
        ratio = f" ({step.seconds / estimate:.2f}x)" if estimate else ""
        batch = f"batch {step.next[0]}  " if step.next else ""
        lines.append(f"    {step.ts.astimezone(timezone.utc):%Y-%m-%d %H:%M:%S} UTC  {batch}{step.strategy}  est. "
                     f"{_seconds(estimate)}  actual {_seconds(step.seconds)}{ratio}  {step.detail.get('reason', '')}".rstrip())
        if step.detail.get("phases"):
            lines.append("      phases: " + ", ".join(f"{name} {_seconds(seconds)}"
                                                      for name, seconds in phase_spans(step.detail["phases"])))
    return lines


def _fit(points: list[tuple[float, float]], prior_slope: float | None) -> tuple[float, float]:
    """``y = fixed + slope × x`` by Theil–Sen: the median of the slopes between pairs of points,
    the fixed cost the median of what each point leaves; both at least 0. Medians, not least
    squares: one batch timed on a loaded machine moves neither (of three or more batches). With
    one distinct x, the prior slope (none: no fixed cost, the median seconds spread over x).

    >>> _fit([(100, 2.0), (200, 3.0), (300, 4.0), (400, 5.0), (500, 40.0)], None)  # the last: a loaded machine
    (1.0, 0.01)
    >>> _fit([(100, 2.0), (100, 9.0), (100, 3.0)], None)
    (0.0, 0.03)
    """
    xs = [x for x, _ in points]
    slopes = [(y2 - y1) / (x2 - x1) for i, (x1, y1) in enumerate(points) for x2, y2 in points[i + 1:] if x2 != x1]
    if not slopes:
        slope = prior_slope if prior_slope is not None else _median([y for _, y in points]) / max(_median(xs), 1)
    else:
        slope = max(0.0, _median(slopes))
    fixed = _median([y - slope * x for x, y in points])
    if fixed < 0:  # noise: no negative fixed cost, the median slope through the origin instead
        fixed, slope = 0.0, _median([y / max(x, 1) for x, y in points])
    return fixed, slope


def _plus(spent: float, estimate: float | None) -> float | None:
    return None if estimate is None else spent + estimate


def _median(values: Sequence[float]) -> float:
    """
    >>> _median([3.0, 1.0, 2.0]), _median([1.0, 4.0])
    (2.0, 2.5)
    """
    ordered, middle = sorted(values), len(values) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "es" if what.endswith("sh") else "s")


def _rate(seconds: float, unit: str) -> str:
    """
    >>> _rate(0.0000435, "key"), _rate(2.5, "row")
    ('0.0435 ms/key', '2.5 s/row')
    """
    return f"{seconds:.3g} s/{unit}" if seconds >= 1 else f"{seconds * 1000:.3g} ms/{unit}"


def _seconds(value: float | None) -> str:
    """
    >>> _seconds(None), _seconds(0.02), _seconds(0), _seconds(3.14), _seconds(693.2)
    ('?', '< 0.1 s', '0 s', '3.1 s', '693 s')
    """
    if value is None:
        return "?"
    if 0 < value < 0.05:  # a prior's estimate for a few keys: not "0.0 s"
        return "< 0.1 s"
    return f"{value:.0f} s" if value >= 100 or value == 0 else f"{value:.1f} s"
