"""A cold mvflow session with and without the JVM's class archive (``compiler.jvm_archive``).

    python -m bench.jvm_archive            # 3 rounds, alternating; each start its own process

Each process starts a session as mvflow does (Delta on, Hive's catalog in a temporary folder),
writes a Delta table and runs a GROUP BY over it, and stops. Printed: the medians of the session's
start and of the whole, and their ratio (with / without).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_ONE = """
import sys, tempfile, time
from pathlib import Path
t0 = time.perf_counter()
from compiler import jvm_archive
if sys.argv[1] == "without":
    jvm_archive.archive_path = lambda dest=None: Path("/nonexistent/archive.jsa")
from compiler.project import DEFAULT_SPARK_CONF, SparkSettings, StateSettings, Target
from compiler.spark import spark_session
base = Path(tempfile.mkdtemp())
target = Target(name="t", spark=SparkSettings(master="local[2]", app_name="bench", warehouse_dir=base / "wh",
                metastore_dir=base / "ms", conf=dict(DEFAULT_SPARK_CONF)), state=StateSettings(path=base / "s.sqlite"))
spark = spark_session(target, delta=True)
t1 = time.perf_counter()
spark.sql("CREATE TABLE t USING delta AS SELECT id, id % 3 AS k FROM range(100)")
spark.sql("SELECT k, count(*) FROM t GROUP BY k").collect()
spark.stop()
print(t1 - t0, time.perf_counter() - t0)
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.jvm_archive", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    from compiler.jvm_archive import archive_path

    if not archive_path().is_file():
        print(f"no archive at {archive_path()}: run python -m compiler.jvm_archive first", file=sys.stderr)
        return 2
    times: dict[str, list[tuple[float, float]]] = {"without": [], "with": []}
    for _ in range(args.rounds):
        for case in times:
            out = subprocess.run([sys.executable, "-c", _ONE, case], capture_output=True, text=True, cwd=ROOT, check=True)
            start, total = map(float, out.stdout.split()[-2:])
            times[case].append((start, total))
            print(f"  {case:8s} session {start:5.1f} s  session + first queries {total:5.1f} s", flush=True)
    median = {case: (statistics.median(s for s, _ in t), statistics.median(w for _, w in t)) for case, t in times.items()}
    for case, (start, total) in median.items():
        print(f"{case:8s} median: session {start:.1f} s, with its first queries {total:.1f} s")
    print(f"ratio with/without: session {median['with'][0] / median['without'][0]:.2f}, "
          f"with its first queries {median['with'][1] / median['without'][1]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
