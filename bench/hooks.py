"""P2 (MV refresh, bench/p2_refresh.py) and P3 (fact step overhead, bench/p3_step.py): the hooks
``python -m bench`` calls; the plans they implement follow.

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
