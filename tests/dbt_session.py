"""dbt's side of the differential test (``test_dbt_projects.py``), run by the python of the dbt venv
(``bench/peers.py``): every dbt command of a plan in this one process, through dbt's programmatic
entry point, so dbt-spark's ``session`` method keeps one SparkSession for all of them — one JVM
start instead of one per command (nine commands took 200 s as processes). The relations of the
given schemas are then dumped from that session.

    python tests/dbt_session.py PLAN.json OUT.json

PLAN: ``{"flags": [...], "conf": {...}, "schemas": [...], "steps": [...]}``, a step either
``{"dbt": [args], "must_pass": bool, "results": "key"}`` (``results``: keep its run_results.json or
sources.json under that key), ``{"append": path, "text": "..."}`` or ``{"write": path, "text": "..."}``. OUT: ``{"exits": [...],
"<key>": <json>, ..., "relations": {schema.table: {"columns", "rows"}}}``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(plan_path: str, out_path: str) -> None:
    from dbt.cli.main import dbtRunner
    from pyspark.sql import SparkSession

    plan = json.loads(Path(plan_path).read_text())
    runner, out = dbtRunner(), {"exits": []}
    for step in plan["steps"]:
        if "append" in step or "write" in step:
            with open(step.get("append") or step["write"], "a" if "append" in step else "w") as handle:
                handle.write(step["text"])
            continue
        result = runner.invoke([*step["dbt"], *plan["flags"]])
        out["exits"].append(0 if result.success else 1)
        if step.get("must_pass") and not result.success:
            errors = [f"{r.node.name}: {r.message}" for r in getattr(result.result, "results", None) or []
                      if str(r.status) in ("error", "fail")]
            raise SystemExit(f"dbt {' '.join(step['dbt'])} failed: {result.exception or errors}")
        if "results" in step:
            out[step["results"]] = json.loads(Path(step["file"]).read_text())
    builder = SparkSession.builder
    for key, value in plan["conf"].items():
        builder = builder.config(key, value)
    spark = builder.enableHiveSupport().getOrCreate()  # dbt's own session
    out["relations"] = {}
    for schema in plan["schemas"]:
        if spark.catalog.databaseExists(schema):
            for table in spark.catalog.listTables(schema):
                if table.isTemporary:  # dbt's __dbt_tmp views of this session: a process of their own would not see them
                    continue
                frame = spark.table(f"{schema}.{table.name}")
                out["relations"][f"{schema}.{table.name}"] = {
                    "columns": frame.columns, "rows": [[None if v is None else str(v) for v in r] for r in frame.collect()]}
    Path(out_path).write_text(json.dumps(out))


if __name__ == "__main__":
    main(*sys.argv[1:])
