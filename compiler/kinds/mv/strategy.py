"""How an MV batch is applied: by key, by key in resumable chunks, or by a full build.

Pure: the MV's config (``MvKind``), what the batch knows (changed keys per input, affected MV
keys, MV rows), the MV's recorded batches (``Run``) and ``now`` in; a ``Decision`` out, with
the estimate of each strategy and the reason in words. The refresh (``compiler.kinds.mv.refresh``)
gathers the figures and executes what is decided.

The estimates are the cost model's (``compiler.kinds.mv.costs``), fitted to the MV's step log.

Three decision points per batch, each cheaper to reach than the next: ``before_changes`` (the
probe saw changes; a model whose refresh by key costs more than a full build even for one key,
a small MV, builds without finding any key, and so does one whose main input's changed keys,
counted by the probe, already cost more by key than a full build, and one where finding the keys
and writing as many as recent batches found costs more than the build: ``CostModel.by_key_floor``,
the keys found again after ``EXPLORE_AFTER`` batches without; a build that finds no key makes the
MVs reading this one rebuild, so their builds count on its side), ``before_keys`` (the
changed-key counts are known: a change clearly wider than a full build's break-even goes straight
to a full build, without finding the affected keys) and ``after_keys`` (the affected keys are
known: the old fan-out guard, now cost-based). At the last two, what the batch has spent is spent
either way: what is left of it by key is weighed against a build, from the phases the step log
keeps (the affected keys' query by the changed keys it reads, ``Run.keys_query``; the write by the
keys it writes, ``Run.after_keys``), or, where no batch recorded them, a whole batch by key, which
costs at least what is spent. A batch the estimates give to a full build still goes by key while by key is
measured too few times, or has not been measured for a while (``explore_by_key``): full builds are
measured whenever chosen, by key only when chosen, so without it one slow batch by key would keep
the MV on full builds for good. The other way round, a batch that is not the first MV batch of its
process builds while every recorded build ran in such a first batch (``explore_build``): a build
that paid the process's warm-up would keep it by key for good. ``not_due_until`` is ``min_interval``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Mapping, Sequence

from . import MvKind
from .costs import CHUNKED, COMPACTION, FULL, INCREMENTAL, CostModel, Run, cost_model, rate_words, seconds_words

# Exploration (``explore_by_key``): a batch the estimates give to a full build goes by key instead
# while fewer than MEASURED batches by key are recorded, or after EXPLORE_AFTER full builds in a
# row, if by key is estimated at most EXPLORE_RATIO × the build and the change is not wide. Full
# builds are measured every time they are chosen; by key is not, so one slow batch by key (a
# loaded machine: est. 308 s against a 78 s build, for a batch that took 30 s) kept every later
# batch a full build. A batch that builds before any key query because finding the keys costs more
# (``before_changes``) finds them again after EXPLORE_AFTER batches without, measuring that again.
MEASURED, EXPLORE_AFTER, EXPLORE_RATIO = 3, 10, 8.0
MAX_CHUNKS = 64


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
        others = [f"{k} {seconds_words(self.estimates[k])}" for k in (FULL, INCREMENTAL, CHUNKED)
                  if k != self.strategy and self.estimates.get(k) is not None]
        text = name + (f": est. {seconds_words(own)}" if own is not None else "")
        text += (" vs " + ", ".join(others) if own is not None else ": est. " + ", ".join(others)) if others else ""
        if self.keys is not None:
            text += f" ({self.keys:,} keys of {self.rows:,} rows)"
        return text

    def to_dict(self) -> dict:
        return {"strategy": self.strategy, "reason": self.reason, "keys": self.keys, "rows": self.rows,
                "chunks": self.chunks, "estimates": {k: None if v is None else round(v, 3) for k, v in self.estimates.items()}}


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


def _model(kind: MvKind, history: Sequence[Run], rows: int, cold: bool = False) -> CostModel:
    """The cost model of a batch of an MV of ``rows`` rows (``cold``: the first of its process): by
    key pays the compaction that follows."""
    return cost_model(history, kind.fanout_threshold, rows if compacts_every_batch(kind, rows) else 0, cold)


def before_changes(kind: MvKind, rows: int, history: Sequence[Run], probed_main_keys: int = 0,
                   readers: float = 0.0, cold: bool = False) -> Decision:
    """The first decision point: no key is known yet (the refresh asks it before the probe too, with
    no ``probed_main_keys``: its first two rules need nothing the probe finds). ``config(strategy=
    'full')`` builds; ``auto`` builds when the cost model says a refresh of a single key costs more
    than a full build (its fixed cost alone: the probe, the key queries and the write's jobs
    outweigh rebuilding a small MV), so a small MV pays neither the changed nor the affected keys.
    Its refresh estimate then stays as last measured until the MV grows past the break-even.
    ``probed_main_keys``, the changed keys the probe counted in a main input kept by ``position``,
    is a lower bound of the affected keys: ``before_keys`` decides on it before any key query (at
    10M rows with 10% changed, finding the changed keys first cost 25 s of a 58 s build). Where two
    recent batches or more found their keys, a batch by key costs at least what they spent finding
    them and the write of as many keys (``CostModel.by_key_floor``): more than a build, it builds
    (the demo at 182 rows: finding 5 s and writing 3 s against a 5.9 s build), until
    ``EXPLORE_AFTER`` batches went by without finding them. A build before its keys are found
    publishes none, so the MVs that read this one rebuild too: ``readers``, their builds' estimated
    seconds, count on the build's side of both rules (a switched build publishes the keys it found).

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
    >>> before_changes(MvKind(), 10_000, runs, readers=4.0).strategy is None  # with its readers' builds: 7 s
    True
    >>> before_changes(MvKind(), 1_000_000, runs, probed_main_keys=900_000).words()
    'full build: est. 300 s vs incremental 1355 s (900,000 keys of 1,000,000 rows)'
    >>> before_changes(MvKind(), 1_000_000, runs, probed_main_keys=1_000).strategy is None
    True
    """
    model = _model(kind, history, rows, cold)
    full = model.full(rows)
    if kind.strategy == FULL:
        return Decision(FULL, "config(strategy='full')", None, rows, {FULL: full})
    one = model.incremental(1)
    built = None if full is None else full + readers  # what building without the keys costs, its readers' rebuilds too
    also = f" and its readers' rebuilds ({readers:.1f} s)" if readers else ""
    if (kind.strategy == "auto" and built is not None and one is not None and one > built and model.refreshes
            and not explore_by_key(history)):
        return Decision(FULL, f"a refresh by key costs more than a full build of {rows:,} rows{also}", None, rows,
                        {FULL: full, INCREMENTAL: one})
    keys = max(model.found_keys or 0, probed_main_keys)
    floor = model.by_key_floor(keys)
    if kind.strategy == "auto" and built is not None and floor is not None and floor >= built and model.since_found < EXPLORE_AFTER:
        return Decision(FULL, f"finding the keys and writing them costs more than a full build of {rows:,} rows{also} "
                              f"(as recent batches did: {keys:,} keys)", None, rows, {FULL: full, INCREMENTAL: floor})
    if probed_main_keys:
        return before_keys(kind, {"main": probed_main_keys}, ["main"], rows, history, cold=cold)
    return Decision(None, "decided on the changed keys")


def before_keys(kind: MvKind, changed: Mapping[str, int], main_inputs: Sequence[str], rows: int,
                history: Sequence[Run], spent: float = 0.0, cold: bool = False) -> Decision:
    """The second decision point: the changed keys per input are known, the affected MV keys not
    yet, ``spent`` seconds into the batch. Every changed key of a main input is an affected key, so
    their count is a lower bound: when even that many keys cost more by key than a full build,
    build at once. As at ``after_keys``, the seconds spent are spent either way: a build is
    ``spent`` plus a build; where recorded batches say what their affected keys' query cost per
    changed key it reads (``Run.keys_query``) and what their write cost, by key is ``spent`` plus
    both, else a whole batch by key, at least ``spent``.

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
    model = _model(kind, history, rows, cold)
    left = model.after_changes(sum(changed.values()), lower) if spent > 0 else None
    full = _plus(spent, model.full(rows))
    keyed = _at_least(spent, left if left is not None else model.incremental(lower), left is not None)
    estimates = {INCREMENTAL: keyed, FULL: full}
    narrow = lower <= kind.fanout_threshold * max(rows, 1)
    if full is not None and keyed is not None and full < keyed and not (narrow and explore_by_key(history)):
        return Decision(FULL, f"at least {lower:,} affected keys (changed main keys): a full build is cheaper",
                        lower, rows, estimates)
    if full is None and lower > kind.fanout_threshold * max(rows, 1):
        return Decision(FULL, f"fan-out guard ({model.build_from}): at least {lower:,} affected keys > "
                              f"{kind.fanout_threshold:g} × {rows:,} rows", lower, rows, estimates)
    return Decision(None, f"at least {lower:,} affected keys: by key unless the affected keys say otherwise", lower, rows)


def after_keys(kind: MvKind, affected: int, rows: int, history: Sequence[Run], spent: float = 0.0,
               cold: bool = False, switch_publishes: bool = True) -> Decision:
    """The third decision point: the affected MV keys are known, ``spent`` seconds into the batch.

    ``auto`` takes the cheaper estimate of a full build and a refresh by key; by key, a wide
    change (more than ``fanout_threshold`` of the rows, or more than ``chunk_keys`` keys) goes in
    resumable chunks. With no full build recorded, the fan-out guard alone decides. The seconds
    spent finding the keys are spent whichever way the batch goes: a build is ``spent`` plus a
    build, and where recorded batches say what their write cost (``Run.after_keys``), by key is
    ``spent`` plus that write; without them, a whole batch by key, at least ``spent`` (the demo at
    182 rows, one build recorded: 8.7 s spent finding 37 keys, est. 6.7 s for a whole batch by key by
    the prior, so by key, which measures its write, against 8.7 + 5.9 s switched to a build).
    A batch that is not ``cold`` (the first MV batch of its process) builds instead of going by key
    while every recorded build was cold (``explore_build``), if the build publishes the keys found
    (``switch_publishes``) and is estimated at most ``EXPLORE_RATIO`` × by key.

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
    >>> cold_build = [Run(INCREMENTAL, 4.0, 500, 86_000) for _ in range(3)] + [Run(FULL, 9.4, 86_000, 86_000, cold=True)]
    >>> after_keys(MvKind(), 500, 86_000, cold_build, spent=1.5).reason
    'exploring: every build recorded ran cold (1 build, the first MV batch of its process) (by key est. cheaper)'
    >>> after_keys(MvKind(), 500, 86_000, cold_build, spent=1.5, cold=True).reason  # a cold batch: the estimate stands
    'by key is estimated cheaper than a full build'
    >>> after_keys(MvKind(), 500, 86_000, cold_build, spent=1.5, switch_publishes=False).strategy  # its readers would rebuild
    'incremental'
    """
    model = _model(kind, history, rows, cold)
    found = spent > 0 and model.write_per_key is not None
    chunks = chunk_count(affected, kind.chunk_keys)
    full, one = _plus(spent, model.full(rows)), _at_least(spent, model.incremental(affected, found), found)
    estimates = {INCREMENTAL: one, FULL: full}
    wide = affected > kind.fanout_threshold * max(rows, 1)
    share = f"{affected / max(rows, 1):.0%} of the rows"

    def decided(strategy: str, reason: str) -> Decision:
        n = chunks if strategy == CHUNKED else 1
        if strategy == CHUNKED:
            estimates[CHUNKED] = _at_least(spent, model.chunked(affected, n, found), found)
        return Decision(strategy, reason, affected, rows, {strategy: estimates.pop(strategy, None), **estimates}, n)

    if kind.strategy != "auto":
        return decided(kind.strategy, f"config(strategy={kind.strategy!r})")
    if full is None:
        if wide:
            return decided(FULL, f"fan-out guard ({model.build_from}): {affected:,} affected keys > "
                                 f"{kind.fanout_threshold:g} × {rows:,} rows")
        return decided(INCREMENTAL, f"by key ({model.build_from}: no full build estimate)")
    in_chunks = wide or affected > kind.chunk_keys
    keyed = _at_least(spent, model.chunked(affected, chunks, found), found) if in_chunks else one
    if keyed is not None and full < keyed:
        exploring = explore_by_key(history)
        if exploring and not in_chunks and keyed <= EXPLORE_RATIO * full:
            return decided(INCREMENTAL, f"exploring: {exploring} (a full build est. cheaper)")
        return decided(FULL, "a full build is estimated cheaper than by key")
    warming = explore_build(history, cold) if switch_publishes else None
    if warming and keyed is not None and full <= EXPLORE_RATIO * keyed:
        return decided(FULL, f"exploring: {warming} (by key est. cheaper)")
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


def explore_build(history: Sequence[Run], cold: bool) -> str | None:
    """Why a batch that is not ``cold`` and that the estimates give to by key should build (``EXPLORE_RATIO``
    permitting), in words; None when the build's estimate stands. A build is measured only when chosen,
    and the first MV batch of a process pays the warm-up later ones do not (JIT, code generation,
    each source's first log read): the grid's first build at 100,000 offers took 9.4 s, later ones
    1.8-2.2 s, and on that one estimate every batch went by key at 4-8 s. Once a warm build is
    recorded, a warm batch is estimated from warm builds alone (``cost_model``).

    >>> explore_build([Run(FULL, 9.4, 100, 100, cold=True)], cold=False)
    'every build recorded ran cold (1 build, the first MV batch of its process)'
    >>> explore_build([Run(FULL, 9.4, 100, 100, cold=True)], cold=True) is None
    True
    >>> explore_build([Run(FULL, 2.0, 100, 100), Run(FULL, 9.4, 100, 100, cold=True)], cold=False) is None
    True
    """
    builds = [run for run in history if run.strategy == FULL]
    if cold or not builds or any(not run.cold for run in builds):
        return None
    return f"every build recorded ran cold ({len(builds)} build{'' if len(builds) == 1 else 's'}, the first MV batch of its process)"


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


def explain_lines(kind: MvKind, history: Sequence[Run], rows: int | None, readers: float = 0.0) -> list[str]:
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
    >>> small = [Run(FULL, 5.9, 182, 182, finding=5.0, affected=37), Run(INCREMENTAL, 11.7, 37, 182, after_keys=3.0, finding=5.2)]
    >>> print(explain_lines(MvKind(), small, 182)[-1])
      finding the keys: 5.0 s as recent batches did (37 keys); by key with their write at least 8.0 s: more than a build, so batches build before any key query, for 10 more
    >>> print(explain_lines(MvKind(), small, 182, readers=4.0)[-1])
      finding the keys: 5.0 s as recent batches did (37 keys); by key with their write at least 8.0 s: less than a build and its readers' rebuilds (9.9 s), so batches find their keys
    """
    lines = [f"  strategy: {kind.strategy} (fanout_threshold {kind.fanout_threshold:g}, chunk_keys {kind.chunk_keys:,}, "
             f"min_interval {duration_words(kind.min_interval_seconds)}, compact_below_rows {kind.compact_below_rows:,})"]
    if not history:
        return lines + ["  cost model: no batch recorded yet"]
    m = _model(kind, history, rows or 0)
    split = ([f"its affected keys' query {seconds_words(m.query_fixed)} + {rate_words(m.per_changed, 'changed key')}"]
             if m.query_fixed is not None and m.per_changed is not None else [])
    if m.write_per_key is not None and m.write_fixed is not None:
        split.append(f"its write {seconds_words(m.write_fixed)} + {rate_words(m.write_per_key, 'key')}")
    source = m.refresh_from + (": " + ", ".join(split) if split else "")
    keyed = (f"by key {seconds_words(m.refresh_fixed)} + {rate_words(m.per_key, 'key')} ({source})"
             if m.per_key is not None and m.refresh_fixed is not None else f"by key: {source}")
    if m.compaction:
        keyed += f" + its compaction {seconds_words(m.compaction)}"
    built = (f"full build {seconds_words(m.build_fixed)} + {rate_words(m.per_row, 'row')} ({m.build_from})"
             if m.per_row is not None and m.build_fixed is not None else f"full build: {m.build_from}")
    lines.append(f"  cost model: {keyed}; {built}")
    full = m.full(rows) if rows is not None else None
    if full is not None and m.per_key and m.refresh_fixed is not None:
        even = max(0, int((full - m.refresh_fixed - m.compaction) / m.per_key))
        lines.append(f"  now: a full build of {rows:,} rows est. {seconds_words(full)}; by key is cheaper below {even:,} affected keys")
    floor = m.by_key_floor(m.found_keys or 0)
    if floor is not None and m.finding is not None:
        line = (f"  finding the keys: {seconds_words(m.finding)} as recent batches did ({m.found_keys:,} keys); "
                f"by key with their write at least {seconds_words(floor)}")
        if full is not None and floor >= full + readers:
            line += (f": more than a build, so batches build before any key query, for {EXPLORE_AFTER - m.since_found} more"
                     if m.since_found < EXPLORE_AFTER else ": more than a build; the next batch finds its keys again")
        elif full is not None and floor >= full:
            line += f": less than a build and its readers' rebuilds ({seconds_words(full + readers)}), so batches find their keys"
        lines.append(line)
    return lines


def _plus(spent: float, estimate: float | None) -> float | None:
    return None if estimate is None else spent + estimate


def _at_least(spent: float, estimate: float | None, left: bool) -> float | None:
    """A batch by key ``spent`` seconds in: ``spent`` plus the ``estimate`` of what is ``left``, or
    the estimate of a whole batch, which costs at least what is spent."""
    return _plus(spent, estimate) if left else None if estimate is None else max(spent, estimate)
