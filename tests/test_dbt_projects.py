"""A dbt-core project, unmodified, run by dbt itself and by mvflow on the same local Spark
(pyspark 4.2.0 and Delta 4.4.0 in both): every relation compared row for row and every test
verdict (status and failures), after a first `seed && run && test` and again after a seed file
grew (incremental models then take their incremental path).

dbt runs in bench's own venv (``bench/peers.py``; CI installs it the first time, a few minutes),
in its own processes with its own warehouse and metastore; a small script in that venv dumps its
relations as JSON. The project is ``tests/fixtures/dbt_shop`` (seeds, sources, views, tables,
ephemeral and incremental models with append/insert_overwrite/merge, hooks, generic, custom and
singular tests, store_failures, docs blocks).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from compiler.cli import main

FIXTURE = Path(__file__).parent / "fixtures" / "dbt_shop"
SCHEMAS = ("shop_dev", "shop_dev_raw", "shop_dev_marts", "shop_dev_dbt_test__audit")
NEW_ORDER = "8,2,2024-03-20,placed\n"

DUMP = textwrap.dedent("""
    import json, sys
    from pyspark.sql import SparkSession
    conf, schemas, out = json.loads(sys.argv[1]), sys.argv[2].split(","), sys.argv[3]
    builder = SparkSession.builder.master("local[2]")
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.enableHiveSupport().getOrCreate()
    dump = {}
    for schema in schemas:
        if not spark.catalog.databaseExists(schema):
            continue
        for table in spark.catalog.listTables(schema):
            frame = spark.table(f"{schema}.{table.name}")
            dump[f"{schema}.{table.name}"] = {"columns": frame.columns,
                                              "rows": [[None if v is None else str(v) for v in r] for r in frame.collect()]}
    json.dump(dump, open(out, "w"))
""")


def dbt_conf(work: Path) -> dict[str, str]:
    from compiler.delta_jars import delta_jars, delta_session_conf

    return {**delta_session_conf(delta_jars()), "spark.sql.warehouse.dir": str(work / "warehouse"),
            "spark.driver.memory": "1g", "spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false",
            "spark.sql.session.timeZone": "UTC"}


@pytest.fixture(scope="module")
def dbt_side(tmp_path_factory) -> dict:
    """dbt's verdicts after each pass and its relations at the end."""
    from bench.peers import dbt_executable

    dbt = dbt_executable()
    work = tmp_path_factory.mktemp("dbt")
    project = work / "project"
    shutil.copytree(FIXTURE, project)
    conf = dbt_conf(work)
    profiles = work / "profiles"
    profiles.mkdir()
    output = {"type": "spark", "method": "session", "host": "NA", "schema": "shop_dev", "server_side_parameters": conf}
    (profiles / "profiles.yml").write_text(json.dumps({"shop": {"target": "dev", "outputs": {"dev": output}}}))

    def dbt_command(*args: str) -> None:
        done = subprocess.run([str(dbt), *args, "--profiles-dir", str(profiles), "--project-dir", str(project)],
                              cwd=work, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]

    verdicts = []
    for grow in (False, True):
        if grow:
            with (project / "data" / "raw_orders.csv").open("a") as handle:
                handle.write(NEW_ORDER)
        for command in ("seed", "run"):
            dbt_command(command)
        subprocess.run([str(dbt), "test", "--profiles-dir", str(profiles), "--project-dir", str(project)], cwd=work,
                       capture_output=True, text=True)
        verdicts.append(dbt_verdicts(project / "target" / "run_results.json"))
    out = work / "dump.json"
    python = dbt.parent / "python"
    done = subprocess.run([str(python), "-c", DUMP, json.dumps(conf), ",".join(SCHEMAS), str(out)], cwd=work,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return {"verdicts": verdicts, "relations": json.loads(out.read_text())}


def dbt_verdicts(path: Path) -> dict[str, tuple[str, int]]:
    """Test name → (status, failures) from dbt's run_results.json (unique_id: test.<project>.<name>[.<hash>])."""
    results = json.loads(path.read_text())["results"]
    return {r["unique_id"].split(".")[2]: (r["status"], r["failures"]) for r in results if r["unique_id"].startswith("test.")}


def mvflow_verdicts(path: Path) -> dict[str, tuple[str, int]]:
    results = json.loads(path.read_text())["results"]
    return {r["name"]: (r["status"], r["failures"]) for r in results if r["kind"] == "test"}


def relations(spark) -> dict:
    found = {}
    for schema in SCHEMAS:
        if not spark.catalog.databaseExists(schema):
            continue
        for table in spark.catalog.listTables(schema):
            if "__mvflow_" in table.name:  # the physical slots behind a table model's view
                continue
            frame = spark.table(f"{schema}.{table.name}")
            found[f"{schema}.{table.name}"] = {"columns": frame.columns,
                                               "rows": [[None if v is None else str(v) for v in r] for r in frame.collect()]}
    return found


def comparable(relation: dict) -> tuple[list[str], list[tuple]]:
    """Columns in order of name, rows sorted: where the two tools may order them differently."""
    order = sorted(range(len(relation["columns"])), key=lambda i: relation["columns"][i])
    rows = sorted((tuple(row[i] for i in order) for row in relation["rows"]), key=repr)
    return [relation["columns"][i] for i in order], rows


def test_a_dbt_project_gives_dbts_tables_and_verdicts(spark, tmp_path, dbt_side, capsys):
    project = tmp_path / "project"
    shutil.copytree(FIXTURE, project)
    verdicts = []
    try:
        for grow in (False, True):
            if grow:
                with (project / "data" / "raw_orders.csv").open("a") as handle:
                    handle.write(NEW_ORDER)
            for command in ("seed", "run", "test"):  # each exits only on a failure (a warning is none)
                main(["--project-dir", str(project), command])
            verdicts.append(mvflow_verdicts(project / "target" / "run_results.json"))
        out, err = capsys.readouterr()
        assert "Traceback" not in out + err

        assert verdicts == dbt_side["verdicts"] and len(verdicts[0]) == 16
        assert verdicts[0]["relationships_stg_orders_customer_id__customer_id__ref_stg_customers_"] == ("warn", 1)
        ours, theirs = relations(spark), dbt_side["relations"]
        assert set(ours) == set(theirs)
        assert {"shop_dev.run_log", "shop_dev_raw.raw_stores", "shop_dev_marts.order_status", "shop_dev_marts.daily_orders",
                "shop_dev_dbt_test__audit.relationships_stg_orders_96411fe0c89b49c3f4da955dfd358ba0"} <= set(theirs)
        for name in sorted(theirs):
            assert comparable(ours[name]) == comparable(theirs[name]), name
        assert len(theirs["shop_dev_marts.order_events"]["rows"]) == 8  # the incremental pass appended one row
    finally:
        for schema in SCHEMAS:
            spark.sql(f"DROP DATABASE IF EXISTS {schema} CASCADE")

