"""The bench's one command: ``python -m bench [--only P1,P4] [--quick] [--runs N] [--no-dbt]``.

Prints one table of figures (medians of several runs, min–max, ratios measured side by side in
the same run), the tables of the grid (P2), P5 and F1, and a met/missed line per target, and saves
them with the raw samples to ``bench/.work/results.{md,json}``. Everything at its default sizes
takes hours (F1 alone: 1M offers, then a 30-minute stream); ``--only`` picks figures.

Figures: P1 compile; P2 the grid of refresh strategies against the peer (``bench/grid.py``);
P2dbt the refresh against dbt-spark run by dbt (``bench/p2_refresh.py``); P3 a fact step; P4 a
no-op run, P4b included; P5 readers of an MV; F1 freshness under a stream.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import hooks, p1_compile, p4_noop  # noqa: E402
from bench.peers import WORK  # noqa: E402
from bench.report import Report  # noqa: E402

FIGURES = ("P1", "P2", "P2DBT", "P3", "P4", "P5", "F1")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=",".join(FIGURES), help="figures to run, e.g. P1,P4 (default: all)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes and 1 run each: checks the harness, not speed")
    parser.add_argument("--runs", type=int, default=None, help="runs of each command (default 5; 1 with --quick)")
    parser.add_argument("--sizes", default=None, help="P1 model counts for mvflow (default 100,1000,5000)")
    parser.add_argument("--dbt-size", type=int, default=None, help="P1 model count for the dbt comparison (default 1000)")
    parser.add_argument("--p2-scale", type=float, default=None, help="P2 demo scale (default 10; 0.1 with --quick)")
    parser.add_argument("--p2-curve-scales", default="",
                        help="P2: further demo scales for the refresh curve against table size, e.g. 1,10")
    parser.add_argument("--p2-curve-fractions", default=None,
                        help="P2: changed shares on the curve (default 0.001,0.01,0.05; the first two are also "
                             "compared in own processes)")
    parser.add_argument("--p2-curve-runs", type=int, default=None, help="P2: runs per point of the curve (default 2)")
    parser.add_argument("--p3-scale", type=float, default=None,
                        help="P3 demo scale (default: a backlog of full 50,000-order steps, 21.25 for 3 runs)")
    parser.add_argument("--grid-sizes", default=None, help="P2 grid: offers per size (default 10000,100000)")
    parser.add_argument("--p5-sizes", default=None, help="P5: offers per size (default 100000)")
    parser.add_argument("--no-dbt", action="store_true", help="skip the dbt peer (no dbt venv is set up)")
    parser.add_argument("--out", type=Path, default=WORK, help="where results.md/json go")
    args = parser.parse_args(argv)
    args.only = [f.strip().upper() for f in args.only.split(",") if f.strip()]
    unknown = sorted(set(args.only) - set(FIGURES))
    if unknown:
        parser.error(f"unknown figure {', '.join(unknown)}: choose from {', '.join(FIGURES)}")
    return args


def main(argv: list[str] | None = None) -> Report:
    args = parse_args(argv)
    runs = args.runs or (1 if args.quick else 5)
    sizes = tuple(int(s) for s in args.sizes.split(",")) if args.sizes else ((10,) if args.quick else (100, 1000, 5000))
    dbt_size = None if args.no_dbt else (args.dbt_size or (100 if args.quick else 1000))
    report = Report(command="python -m bench " + " ".join(argv if argv is not None else sys.argv[1:]))
    if "P1" in args.only:
        p1_compile.run(p1_compile.Options(sizes=sizes, dbt_size=dbt_size, runs=runs), report)
    if "P2" in args.only:
        hooks.grid(args, report)
    if "P2DBT" in args.only:
        hooks.p2(args, report)
    if "P3" in args.only:
        hooks.p3(args, report)
    if "P4" in args.only:
        p4_noop.run(p4_noop.Options(runs=runs, scale=0.1 if args.quick else 1.0), report)
    if "P5" in args.only:
        hooks.p5(args, report)
    if "F1" in args.only:
        hooks.f1(args, report)
    print()
    print(report.markdown())
    print(f"saved to {report.save(args.out)}")
    return report


if __name__ == "__main__":
    main()
