"""The hooks ``python -m bench`` calls for the figures measured outside ``bench/run.py``: P2 (the
grid, bench/grid.py; the dbt-spark comparison, bench/p2_refresh.py), P3 (fact step overhead,
bench/p3_step.py), P5 (readers of an MV, bench/grid.py) and F1 (freshness under a stream,
bench/f1_stream.py). The plans of P2 (dbt) and P3 follow.

P2 plan: demo at the largest scale that runs in minutes (try scale 100 = 1M offers, driver
memory 2g); after ``mvflow demo change --fraction 0.001`` and ``0.01``, time ``mvflow run -s
offers_wide`` (key-driven refresh) against ``--full-refresh`` (a full rebuild of the same SELECT)
and a hand-written dbt-spark incremental of the model on parquet (``insert_overwrite`` by a
partition of changed keys), each on a copy of the same data; then refresh time against change
size and against table size.
P3 plan: one fact step of the demo's ``orders_enriched`` (bounds, offsets, idempotent write,
commit, step log) against a bare ``INSERT INTO … SELECT`` of the same position range.
"""

from __future__ import annotations

from .report import Report


def p2(options, report: Report, echo=print) -> None:
    from . import p2_refresh

    quick = getattr(options, "quick", False)
    scale = getattr(options, "p2_scale", None) or (0.1 if quick else 10.0)
    runs = 1 if quick else (getattr(options, "runs", None) or 3)
    curve_scales = tuple(float(s) for s in (getattr(options, "p2_curve_scales", "") or "").split(",") if s.strip())
    fractions = (0.01, 0.1) if quick else (0.001, 0.01, 0.05)  # a tiny demo needs big shares to change anything
    if getattr(options, "p2_curve_fractions", None):
        fractions = tuple(float(f) for f in options.p2_curve_fractions.split(",") if f.strip())
    curve_runs = 1 if quick else (getattr(options, "p2_curve_runs", None) or 2)
    p2_refresh.run(p2_refresh.Options(runs=runs, scale=scale, fractions=fractions[:2], curve_fractions=fractions,
                                      curve_scales=curve_scales, curve_runs=curve_runs), report, echo)


def p3(options, report: Report, echo=print) -> None:
    from . import p3_step

    quick = getattr(options, "quick", False)
    runs = 1 if quick else (getattr(options, "runs", None) or 3)
    scale = getattr(options, "p3_scale", None)  # None: a backlog of full maxstep steps
    p3_step.run(p3_step.Options(runs=runs, scale=scale, maxstep=500 if quick else p3_step.MAXSTEP), report, echo)


def grid(options, report: Report, echo=print) -> None:
    """P2: the grid of refresh strategies against the peer (its tables and a verdict per size)."""
    quick = getattr(options, "quick", False)
    sizes = getattr(options, "grid_sizes", None) or ("1000" if quick else "10000,100000")
    selection = ["--shares", "0.01", "--patterns", "random", "--formats", "parquet"] if quick else []
    _grid(["--sizes", sizes, "--no-p5", *selection], options, report, echo)


def p5(options, report: Report, echo=print) -> None:
    """P5: the reader query on an MV after 0, 1 and 10 batches against a plain table of its rows."""
    quick = getattr(options, "quick", False)
    sizes = getattr(options, "p5_sizes", None) or ("1000" if quick else "100000")
    runs = ["--p5-runs", "1", "--formats", "parquet"] if quick else []
    _grid(["--sizes", sizes, "--no-grid", "--strategies", "incremental", *runs], options, report, echo)


def _grid(argv: list[str], options, report: Report, echo) -> None:
    from . import grid as grid_bench

    out = getattr(options, "out", None)
    for result in grid_bench.main([*argv, *(["--out", str(out), "--work", str(out / "grid")] if out else [])], echo):
        report.sections.append(grid_bench.render(result))
        report.verdicts.extend(grid_bench.verdicts(result))


def f1(options, report: Report, echo=print) -> None:
    """F1: change → MV-row latency while ``mvflow serve`` follows a stream (default: the issue's 1M
    offers, 100 changes/s, 30 minutes; ``--quick``: 1,000 offers for a minute)."""
    from dataclasses import replace

    from . import f1_stream

    quick = getattr(options, "quick", False)
    settings = f1_stream.Options(scale=0.1, rate=10, minutes=1) if quick else f1_stream.Options()
    out = getattr(options, "out", None)
    settings = replace(settings, out=out / "f1") if out else settings
    results = f1_stream.run(settings, echo)
    report.sections.append(f"### F1 at scale {settings.scale:g}\n\n{f1_stream.table(results)}\n")
    report.verdicts += [f"F1 {r.mv}: p95 {r.p95 if r.p95 is None else round(r.p95, 1)} s, backlog growth "
                        f"{r.growth:+.1f} batches (target p95 ≤ {f1_stream.TARGET_P95:g} s, no growth): {r.verdict}"
                        for r in results]
