"""Delta Lake's JVM jars, fetched once from Maven Central into ``.mvflow/jars/``.

The ``delta-spark`` pip package holds only Python code; the session needs
``io.delta:delta-spark_2.13:<v>`` and ``io.delta:delta-storage:<v>`` on ``spark.jars``.
This fetches exactly those two jars from Maven Central with ``compiler.maven`` (sha1-checked,
written atomically into ``.mvflow/jars/`` of the mvflow checkout; git-ignored; ``~/.cache/mvflow/jars``
for an installed mvflow; ``MVFLOW_JARS`` overrides).
``scripts/setup.sh`` calls it. A second call finds the files and touches no network: offline starts
work. Offline and missing: one line on stderr, exit 2.


    python -m compiler.delta_jars                 # fetch (or find) the jars, print spark.jars
    python -m compiler.delta_jars --check         # no network: exit 2 when a jar is missing

Why not ``spark.jars.packages`` (Spark's Ivy resolver)? It works here too (see the spike
report), but it resolves delta-spark's whole compile closure: 33 jars, 87 MB, among them
hadoop-client-runtime 3.4.2, parquet 1.16.0, jackson 2.13.5 and log4j-core beside Spark's own
copies, plus the Unity Catalog client and Delta Kernel, which a Hive-catalog Delta session
does not load. Two jars (about 10 MB) are enough for everything the spike exercised.
The Maven route works too: ``mvn -B -Dmaven.repo.local=<dir> dependency:copy
-Dartifact=io.delta:delta-spark_2.13:4.4.0 -DoutputDirectory=.mvflow/jars`` (and the same for
``io.delta:delta-storage:4.4.0``; Debian's ``maven`` package, 25 s the first time).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .maven import DEFAULT_DIR, Artifact, ArtifactMissing, fetch

DELTA_VERSION = "4.4.0"  # pip delta-spark 4.4.1 has no jars on Maven Central (404): pin 4.4.0
SCALA = "2.13"

DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}
# Spark >= 4.1 binds parameter markers in the parser; DeltaSqlParser does not forward them
# (delta-io/delta#7640, apache/spark#58932): with the extension on, every spark.sql(q, args=...)
# fails with UNBOUND_SQL_PARAMETER. The legacy analyzer binding brings them back, except inside
# CREATE VIEW (PARAMETER_MARKER_IN_UNEXPECTED_STATEMENT): mvflow's views over IDENTIFIER(:x) must
# then be rendered with the names inlined.
PARAMETER_WORKAROUND = {"spark.sql.legacy.parameterSubstitution.constantsOnly": "true"}


JarsMissing = ArtifactMissing  # the fetch is compiler.maven's, shared with the PostgreSQL metastore's files


def coordinates(version: str = DELTA_VERSION) -> list[tuple[str, str, str]]:
    return [("io.delta", f"delta-spark_{SCALA}", version), ("io.delta", "delta-storage", version)]


def delta_jars(dest: Path = DEFAULT_DIR, version: str = DELTA_VERSION, offline: bool = False,
               timeout: float = 60.0) -> list[Path]:
    """The jar paths, fetched into ``dest`` on first use (``compiler.maven``). Raises JarsMissing
    (one clear line) when a jar is not there and Maven Central cannot be reached (or ``offline``)."""
    return [fetch(Artifact(group, artifact, v), dest, offline=offline, timeout=timeout, what="Delta jar",
                  remedy="run `python -m compiler.delta_jars` once online")
            for group, artifact, v in coordinates(version)]


def delta_session_conf(jars: list[Path]) -> dict[str, str]:
    """The session settings that turn Delta on (static: before the session starts)."""
    return {"spark.jars": ",".join(str(p) for p in jars), **DELTA_CONF, **PARAMETER_WORKAROUND}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compiler.delta_jars", description=__doc__.split("\n")[0])
    parser.add_argument("--dest", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--version", default=DELTA_VERSION)
    parser.add_argument("--check", action="store_true", help="never use the network")
    args = parser.parse_args(argv)
    try:
        jars = delta_jars(args.dest, args.version, offline=args.check)
    except JarsMissing as exc:
        print(f"mvflow: {exc}", file=sys.stderr)
        return 2
    print(",".join(str(p) for p in jars))
    return 0


if __name__ == "__main__":
    sys.exit(main())
