"""P2 in one SparkSession: the cost of ``offers_wide``'s key-driven refresh against the size of
the change, with the JVM warm and no process start-up, beside a full rebuild of the same SELECT
and the dbt-spark peer's ``INSERT OVERWRITE`` (``bench/p2_dbt.py``) on the same data.

``python bench/p2_curve.py PROJECT_DIR --fractions 0.001,0.01 --runs 2``: a warm-up (one change
and refresh, untimed), then per fraction ``runs`` times: ``demo change --fraction f`` (untimed),
the refresh (``refresh_mv``, as ``mvflow run`` calls it), a full rebuild (``full_refresh``) and
the peer's statement. Prints one line per run::

    point fraction=0.001 refresh_seconds=… keys=… compacted=0 full_seconds=… dbt_seconds=…
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.p2_dbt import MODEL, insert_overwrite  # noqa: E402
from compiler import demo  # noqa: E402
from compiler.compile import compile_project  # noqa: E402
from compiler.kinds.mv.refresh import refresh_mv  # noqa: E402
from compiler.project import load_project  # noqa: E402
from compiler.spark import spark_session  # noqa: E402
from compiler.state import open_state_store  # noqa: E402

SEED = 700


def timed(call):
    started = time.monotonic()
    result = call()
    return result, time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("project", type=Path)
    parser.add_argument("--fractions", default="0.001,0.01")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--no-peers", action="store_true", help="time the refresh only (no full rebuild, no dbt)")
    args = parser.parse_args()
    project = load_project(args.project)
    manifest = compile_project(project)
    model, store = manifest.models[MODEL], open_state_store(project.target().state)
    spark = spark_session(project.target())
    refresh = lambda full=False: refresh_mv(spark, manifest, model, store, full_refresh=full)  # noqa: E731
    demo.change(spark, fraction=0.001, seed=SEED)
    refresh()  # warm-up
    for f, fraction in enumerate(float(x) for x in args.fractions.split(",")):
        for i in range(args.runs):
            demo.change(spark, fraction=fraction, seed=SEED + 1 + 100 * f + i)
            outcome, refresh_seconds = timed(refresh)
            line = (f"point fraction={fraction:g} refresh_seconds={refresh_seconds:.3f} keys={outcome.affected} "
                    f"compacted={int(outcome.compacted)} mode={outcome.mode}")
            if not args.no_peers:
                _, full_seconds = timed(lambda: refresh(full=True))
                dbt_seconds = insert_overwrite(spark, model.sql)
                line += f" full_seconds={full_seconds:.3f} dbt_seconds={dbt_seconds:.3f}"
            print(line, flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
