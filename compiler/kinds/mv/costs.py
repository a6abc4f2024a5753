"""The cost model of an MV's batches: what each strategy has cost, fitted to the MV's step log.

Pure: the step log's rows of the MV (``runs``) in, a ``CostModel`` out; ``compiler.kinds.mv.strategy``
decides with it, ``mvflow explain --costs`` prints its inputs and the last decisions (``cost_lines``).

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

Where the step log keeps a batch's phases (``compiler.phases.PhaseClock``), two parts of a batch by
key are fitted apart: its write once its affected keys were found (``Run.after_keys``), by the keys
it writes, and its affected keys' query (``Run.keys_query``), by the changed keys it reads. The
decisions weigh what is left of a batch with them, the seconds already spent being spent either way.
A build is counted from its decision on (``_build_seconds``: a batch that found its keys and then
built spent the finding either way). What recent batches spent finding their keys, by key or
before they switched to a build (``Run.finding``), and how many they found, are ``robust``: with
the write's fit they say what a batch by key costs at least (``CostModel.by_key_floor``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timezone
from typing import Sequence

from ...phases import phase_spans
from ...state import StepLogRow

INCREMENTAL, CHUNKED, FULL = "incremental", "chunked", "full"
COMPACTION = "compaction"  # not a strategy: the step-log row of a compaction that followed a batch
HISTORY = 10  # recorded batches of each kind the cost model fits
CHUNK_FIXED_SHARE = 0.5


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
    #: seconds from its probe to its affected keys found (None: it did not find them), and for a
    #: build that switched once they were found, how many it found
    finding: float | None = None
    affected: int | None = None
    #: the first MV batch of its process (``compiler.spark.first_batch``): it paid the warm-up
    cold: bool = False


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
    #: what recent batches spent finding their changed and affected keys, and how many affected keys
    #: they found (``robust``; None: fewer than two batches found them), and how many batches went
    #: by since the newest of them
    finding: float | None = None
    found_keys: int | None = None
    since_found: int = 0

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

    def by_key_floor(self, keys: int) -> float | None:
        """What a batch by key of about ``keys`` keys costs at least after its probe: finding its keys,
        as recent batches did, and their write (0 while no write is recorded). None: not known."""
        if self.finding is None:
            return None
        write = self.incremental(keys, found=True)
        return self.finding + (write if write is not None else 0.0)

    def full(self, rows: int) -> float | None:
        if self.build_fixed is None or self.per_row is None:
            return None
        return self.build_fixed + self.per_row * rows


def runs(steps: Sequence[StepLogRow]) -> list[Run]:
    """The step log rows of an MV's batches as the cost model reads them (rows an older mvflow
    wrote, without a strategy, and batches that refreshed nothing are left out).

    >>> from datetime import datetime, timezone
    >>> row = StepLogRow("wide", datetime(2026, 1, 1, tzinfo=timezone.utc), 607, seconds=1.9, strategy="incremental",
    ...                  detail={"keys": 607, "rows": 100_000, "chunks": 1, "changed": 700,
    ...                          "phases": {"mv:changed-keys": 0.9, "mv:affected-keys": 1.2}, "cold": True})
    >>> runs([row, StepLogRow("wide", row.ts, 3)])
    [Run(strategy='incremental', seconds=1.9, keys=607, rows=100000, chunks=1, after_keys=0.7, changed=700, keys_query=0.3, finding=None, affected=None, cold=True)]
    >>> switched = {"keys": 182, "rows": 182, "phases": {"mv:probed": 3.7, "mv:affected-keys": 8.7, "mv:fanout-guard": 8.7}}
    >>> [(r.seconds, r.finding, r.affected) for r in runs([StepLogRow("wide", row.ts, 182, seconds=14.6, strategy="full",
    ...                                                                  detail=d) for d in ({**switched, "affected": 37}, switched)])]
    [(5.9, 5.0, 37), (5.9, None, None)]
    """
    found = []
    for step in steps:
        keys, rows = step.detail.get("keys"), step.detail.get("rows")
        if step.strategy == COMPACTION and isinstance(rows, int) and rows > 0 and step.seconds > 0:
            found.append(Run(COMPACTION, step.seconds, 0, rows))
        elif step.strategy and isinstance(keys, int) and isinstance(rows, int) and keys > 0 and step.seconds > 0:
            phases, cold = step.detail.get("phases") or {}, bool(step.detail.get("cold"))
            finding = _span(phases.get("mv:probed"), phases.get("mv:affected-keys"))
            if step.strategy == FULL:  # what finding its keys took, with how many (a step log of before: neither)
                affected = step.detail.get("affected")
                known = isinstance(affected, int) and finding is not None
                found.append(Run(FULL, _build_seconds(step.seconds, phases), keys, rows,
                                 finding=finding if known else None, affected=affected if known else None, cold=cold))
                continue
            changed = step.detail.get("changed")
            found.append(Run(step.strategy, step.seconds, keys, rows, int(step.detail.get("chunks") or 1),
                             _span(phases.get("mv:affected-keys"), step.seconds),
                             changed if isinstance(changed, int) and changed > 0 else None,
                             _span(phases.get("mv:changed-keys"), phases.get("mv:affected-keys")), finding, cold=cold))
    return found


def _build_seconds(seconds: float, phases: dict) -> float:
    """A build's seconds from its decision on: a batch that found its keys before it switched to a
    build spent that time either way (counted in, the build of 182 rows that followed 8.7 s of
    probe and key queries was recorded at 14.6 s, twice the 6.9 s of the build before it).

    >>> _build_seconds(14.6, {"mv:probed": 3.7, "mv:affected-keys": 8.7, "mv:fanout-guard": 8.7}), _build_seconds(6.9, {})
    (5.9, 6.9)
    """
    span = _span(phases.get("mv:fanout-guard", phases.get("mv:probed")), seconds)
    return span if span else seconds


def _span(start: object, end: object) -> float | None:
    """Seconds from one recorded point of a batch to a later one (None: either not recorded)."""
    numbers = isinstance(start, (int, float)) and isinstance(end, (int, float))
    return round(end - start, 3) if numbers and start <= end else None


def cost_model(history: Sequence[Run], fanout_threshold: float = 0.2, compacted_rows: int = 0,
               cold: bool = False) -> CostModel:
    """Fit the MV's costs to its recorded batches (newest first; ``HISTORY`` of each kind), for a
    batch that is ``cold`` (the first MV batch of its process) or not: its builds from the builds of
    its warmth where any are recorded (the first build in a warm process cost 4-5x the later ones:
    ``strategy.explore_build``).
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
    >>> warmed = [Run("full", 2.0, 86_000, 86_000), Run("full", 9.4, 86_000, 86_000, cold=True)]
    >>> cost_model(warmed).full(86_000), cost_model(warmed, cold=True).full(86_000), cost_model(warmed[1:]).full(86_000)
    (2.0, 9.4, 9.4)
    >>> cost_model(warmed).build_from
    '1 build (1 cold left out)'
    """
    built = [r for r in history if r.strategy == FULL and r.rows > 0]
    alike = [r for r in built if r.cold == cold]
    builds = [(r.rows, r.seconds) for r in alike or built][:HISTORY]
    keyed = [(r.keys / max(r.chunks, 1), r.seconds / max(r.chunks, 1)) for r in history
             if r.strategy in (INCREMENTAL, CHUNKED) and r.keys > 0][:HISTORY]
    build_fixed = per_row = None
    build_from = "no full build recorded"
    if builds:
        build_fixed, per_row = _fit(builds, prior_slope=None)
        build_from = _count(len(builds), "build") + (f" ({len(built) - len(alike)} {'warm' if cold else 'cold'} left out)"
                                                       if alike and len(alike) < len(built) else "")
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
    batches = [r for r in history if r.strategy != COMPACTION]
    searched = [r for r in batches if r.finding is not None][:HISTORY]
    enough = len(searched) >= 2
    return CostModel(refresh_fixed, per_key, build_fixed, per_row, refresh_from, build_from, len(keyed), compaction,
                     write_fixed, write_per_key, query_fixed, per_changed,
                     robust([r.finding for r in searched]) if enough else None,
                     round(robust([r.affected if r.strategy == FULL else r.keys for r in searched])) if enough else None,
                     batches.index(searched[0]) if searched else len(batches))


def robust(values: Sequence[float]) -> float:
    """Of a few measurements, the least (a loaded machine only makes a batch slower); of three or
    more, the median.

    >>> robust([9.0, 5.0]), robust([9.0, 5.0, 6.0, 30.0])
    (5.0, 7.5)
    """
    return min(values) if len(values) < 3 else _median(values)


def _fixed_for(points: list[tuple[float, float]], slope: float) -> float:
    """The fixed cost of ``y = fixed + slope × x``: the median of what each point leaves, at least 0."""
    return max(0.0, _median([y - slope * x for x, y in points]))


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
    ...          StepLogRow("wide", at, 100_000, next=(6,), seconds=9.6, strategy="full",
    ...                     detail={"keys": 100_000, "rows": 100_000, "affected": 30_000, "reason": "cheaper", "cold": True,
    ...                             "phases": {"mv:probed": 0.4, "mv:affected-keys": 1.3, "mv:fanout-guard": 1.3}})]
    >>> print("\\n".join(cost_lines(steps)))
      cost model inputs (newest first; the last 10 of each kind):
        incremental      607 keys of 100,000 rows   2.3 s    3.79 ms/key
        full                         100,000 rows   8.3 s   0.083 ms/row  after finding 30,000 keys in 0.9 s  cold (the first MV batch of its process)
      last decisions (newest first): estimated vs actual
        2026-11-29 10:22:05 UTC  batch 7  incremental  est. 1.9 s  actual 2.3 s (1.21x)  by key is estimated cheaper than a full build
          phases: probed 0.4 s, changed-keys 0.5 s, committed 1.4 s
        2026-11-29 10:22:05 UTC  batch 6  full  est. ?  actual 9.6 s  cheaper
          phases: probed 0.4 s, affected-keys 0.9 s, fanout-guard 0 s
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
        rate = rate_words(run.seconds / max(run.rows if by_row else run.keys, 1), "row" if by_row else "key")
        found_keys = ""
        if run.finding is not None:  # a build's seconds count from its decision: after its keys, if it found them
            found_keys = (f"  after finding {run.affected:,} keys in {seconds_words(run.finding)}" if kind == FULL
                          else f"  finding its keys {seconds_words(run.finding)}")
        cold = "  cold (the first MV batch of its process)" if run.cold else ""
        lines.append(f"    {run.strategy:<12} {size:>28} {seconds_words(run.seconds):>7} {rate:>14}{found_keys}{cold}")
    lines.append("  last decisions (newest first): estimated vs actual")
    for step in [s for s in steps if s.strategy and s.strategy != COMPACTION][:last]:
        estimate = (step.detail.get("estimates") or {}).get(step.strategy)
        ratio = f" ({step.seconds / estimate:.2f}x)" if estimate else ""
        batch = f"batch {step.next[0]}  " if step.next else ""
        lines.append(f"    {step.ts.astimezone(timezone.utc):%Y-%m-%d %H:%M:%S} UTC  {batch}{step.strategy}  est. "
                     f"{seconds_words(estimate)}  actual {seconds_words(step.seconds)}{ratio}  {step.detail.get('reason', '')}".rstrip())
        if step.detail.get("phases"):
            lines.append("      phases: " + ", ".join(f"{name} {seconds_words(seconds)}"
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


def _median(values: Sequence[float]) -> float:
    """
    >>> _median([3.0, 1.0, 2.0]), _median([1.0, 4.0])
    (2.0, 2.5)
    """
    ordered, middle = sorted(values), len(values) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "es" if what.endswith("sh") else "s")


def rate_words(seconds: float, unit: str) -> str:
    """
    >>> rate_words(0.0000435, "key"), rate_words(2.5, "row")
    ('0.0435 ms/key', '2.5 s/row')
    """
    return f"{seconds:.3g} s/{unit}" if seconds >= 1 else f"{seconds * 1000:.3g} ms/{unit}"


def seconds_words(value: float | None) -> str:
    """
    >>> seconds_words(None), seconds_words(0.02), seconds_words(0), seconds_words(3.14), seconds_words(693.2)
    ('?', '< 0.1 s', '0 s', '3.1 s', '693 s')
    """
    if value is None:
        return "?"
    if 0 < value < 0.05:  # a prior's estimate for a few keys: not "0.0 s"
        return "< 0.1 s"
    return f"{value:.0f} s" if value >= 100 or value == 0 else f"{value:.1f} s"
