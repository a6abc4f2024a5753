"""Data tests and seeds on the shared local SparkSession, through the CLI: `mvflow seed`, `mvflow
test` and `mvflow build` (a failing test skips what is downstream of its model), the verdicts of
generic, custom generic and singular tests with severity, where, warn_if/error_if, limit and
store_failures, seed types and reloads, and bad declarations as clear errors.

Each test gets its own database (``t_dt_<tag>``).
"""

from __future__ import annotations

import json
import uuid
from datetime import date

import pytest

from compiler.cli import main

SEED = """\
id,name,joined,score,active
10,Ann,2024-01-31,1.5,true
20,"Bob, Jr.",,null,False
30,Cy,2024-02-01,2,
"""

ORDERS = """
    {{ config(materialized='table') }}
    SELECT * FROM VALUES
      (1, 'placed', 10, 5), (2, 'shipped', 20, 7), (3, 'lost', NULL, 1), (3, 'placed', 40, 2)
      AS t(order_id, status, customer_id, amount)
"""

SCHEMA = """
    models:
      - name: orders
        columns:
          - name: order_id
            tests: [unique, not_null]
          - name: status
            data_tests:
              - accepted_values: {values: [placed, shipped], config: {severity: warn}}
              - accepted_values: {name: status_known, values: [placed, shipped, lost]}
          - name: customer_id
            tests:
              - relationships: {to: ref('customers'), field: id, store_failures: true}
              - not_null: {where: "status <> 'lost'"}
              - not_null: {name: customer_not_null_anywhere, config: {error_if: '>5'}}
          - name: amount
            tests:
              - at_least: {arguments: {minimum: 6}, limit: 1}
    seeds:
      - name: customers
        config: {column_types: {id: int}}
        columns:
          - name: id
            tests: [unique]
"""

AT_LEAST = """
    {% test at_least(model, column_name, minimum) %}
    SELECT {{ column_name }} FROM {{ model }} WHERE {{ column_name }} < {{ minimum }}
    {% endtest %}
"""


@pytest.fixture
def project(spark, make_project):
    database = f"t_dt_{uuid.uuid4().hex[:8]}"
    root = make_project({
        "project.yml": f"name: t_dt\nmodels: {{+schema: {database}}}\nseeds: {{+schema: {database}}}\n",
        "seeds/customers.csv": SEED,
        "models/orders.sql": ORDERS,
        "models/schema.yml": SCHEMA,
        "tests/generic/at_least.sql": AT_LEAST,
        "tests/no_huge_orders.sql": "SELECT * FROM {{ ref('orders') }} WHERE amount > 100",
    })
    yield root, database
    spark.sql(f"DROP DATABASE IF EXISTS {database} CASCADE")
    spark.sql("DROP DATABASE IF EXISTS test_audit CASCADE")


def cli(root, *args, capsys) -> tuple[int, str, str]:
    try:
        main(["--project-dir", str(root), *args])
        code = 0
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def results(root) -> dict[str, tuple[str, int | None]]:
    data = json.loads((root / "target" / "run_results.json").read_text())
    return {r["name"]: (r["status"], r["failures"]) for r in data["results"]}


def test_build_gives_each_test_dbts_verdict(spark, project, capsys):
    root, database = project
    code, out, err = cli(root, "build", capsys=capsys)

    assert code == 1, out + err  # three tests fail
    assert results(root) == {
        "customers": ("success", None),
        "orders": ("success", None),
        "unique_customers_id": ("pass", 0),
        "unique_orders_order_id": ("fail", 1),  # one duplicated value
        "not_null_orders_order_id": ("pass", 0),
        "accepted_values_orders_status__placed__shipped": ("warn", 1),  # severity warn: one value outside
        "status_known": ("pass", 0),
        "relationships_orders_customer_id__id__ref_customers_": ("fail", 1),  # 40 is no customer
        "not_null_orders_customer_id": ("pass", 0),  # where: the lost order is not tested
        "customer_not_null_anywhere": ("warn", 1),  # error_if >5: one failure only warns
        "at_least_orders_amount__6": ("fail", 1),  # three rows below 6, limit 1 counts one
        "no_huge_orders": ("pass", 0),
    }
    assert "2 ok, 0 failed, 0 skipped; tests: 5 passed, 2 warned, 3 failed\n" in out
    ids = {r["unique_id"] for r in json.loads((root / "target" / "run_results.json").read_text())["results"]}
    assert {"seed.t_dt.customers", "model.t_dt.orders", "test.t_dt.unique_orders_order_id"} <= ids  # dbt's names too
    # store_failures keeps the failing rows in test_audit.<test name>
    kept = spark.table("test_audit.relationships_orders_customer_id__id__ref_customers_").collect()
    assert [tuple(r) for r in kept] == [(40,)]
    # the seed's types are dbt's (id overridden to int) and its NULLs are NULL
    assert [(f.name, f.dataType.simpleString()) for f in spark.table(f"{database}.customers").schema] == [
        ("id", "int"), ("name", "string"), ("joined", "date"), ("score", "double"), ("active", "boolean")]
    rows = sorted(tuple(r) for r in spark.table(f"{database}.customers").collect())
    assert rows == [(10, "Ann", date(2024, 1, 31), 1.5, True), (20, "Bob, Jr.", None, None, False),
                    (30, "Cy", date(2024, 2, 1), 2.0, None)]
    for noise in ("Traceback", "at org.apache"):
        assert noise not in out + err


def test_a_failing_test_skips_the_models_downstream_of_its_model(spark, project, capsys):
    root, database = project
    (root / "models" / "big_orders.sql").write_text("SELECT * FROM {{ ref('orders') }} WHERE amount > 4\n")
    (root / "models" / "more.yml").write_text("models:\n  - name: big_orders\n    columns:\n      - {name: order_id, tests: [not_null]}\n")
    code, out, _ = cli(root, "build", "--select", "orders+", capsys=capsys)

    assert code == 1
    found = results(root)
    assert found["big_orders"] == ("skipped", None) and found["not_null_big_orders_order_id"] == ("skipped", None)
    assert "upstream " in out and "customers" not in found  # the seed was not selected (its test on orders came along)
    assert found["relationships_orders_customer_id__id__ref_customers_"][0] in ("fail", "error")

    # once the tests of orders pass (severity warn for the failing ones), its descendants are built
    (root / "project.yml").write_text(f"name: t_dt\nmodels: {{+schema: {database}}}\nseeds: {{+schema: {database}}}\n"
                                      "tests: {+severity: warn}\n")
    code, out, _ = cli(root, "build", capsys=capsys)
    assert code == 0, out
    assert results(root)["big_orders"] == ("success", None)
    assert sorted(r.order_id for r in spark.table(f"{database}.big_orders").collect()) == [1, 2]


def test_test_runs_the_tests_of_the_selected_models_and_seed_loads_idempotently(spark, project, capsys):
    root, database = project
    assert cli(root, "seed", capsys=capsys)[0] == 0
    assert cli(root, "seed", capsys=capsys)[0] == 0  # again: the same rows, not twice as many
    assert spark.table(f"{database}.customers").count() == 3
    assert cli(root, "run", capsys=capsys)[0] == 0
    assert set(results(root)) == {"orders"}  # run builds models, not seeds

    (root / "seeds" / "customers.csv").write_text("id,name,joined,score,active\n40,Di,2024-03-01,1,true\n")
    assert cli(root, "seed", "--select", "customers", capsys=capsys)[0] == 0
    assert [tuple(r) for r in spark.table(f"{database}.customers").collect()] == [(40, "Di", date(2024, 3, 1), 1.0, True)]
    # the tests that read the seed: its own, and the relationship from orders (dbt's eager selection)
    code, out, _ = cli(root, "test", "--select", "customers", capsys=capsys)
    assert code == 1, out
    assert results(root) == {"unique_customers_id": ("pass", 0), "relationships_orders_customer_id__id__ref_customers_": ("fail", 2)}
    code, out, _ = cli(root, "test", "--select", "customers", "--exclude", "relationships_*", capsys=capsys)
    assert code == 0 and results(root) == {"unique_customers_id": ("pass", 0)}, out
    code, out, _ = cli(root, "test", "--select", "unique_orders_order_id", capsys=capsys)
    assert code == 1 and results(root) == {"unique_orders_order_id": ("fail", 1)}


def test_a_run_time_error_of_a_yaml_test_points_at_its_declaration(spark, project, capsys):
    root, _ = project
    code, out, _ = cli(root, "test", "--select", "unique_orders_order_id", capsys=capsys)  # orders is not built
    assert code == 1 and results(root) == {"unique_orders_order_id": ("error", None)}
    assert "models/schema.yml:5: [table-not-found] table " in out and "build it first" in out


@pytest.mark.parametrize("files, expected", [
    ({"models/schema.yml": "models:\n  - name: orders\n    columns:\n      - name: order_id\n        tests: [uniqe]\n"},
     "models/schema.yml:5: [unknown-test] unknown test 'uniqe' — did you mean 'unique'?"),
    ({"models/schema.yml": "models:\n  - name: orders\n    tests:\n      - not_null: {column_name: x, severity: fatal}\n"},
     "models/schema.yml:4: [bad-test] severity 'fatal' is not error or warn"),
    ({"models/schema.yml": "models:\n  - name: orders\n    columns:\n      - name: customer_id\n        tests:\n"
                           "          - relationships: {to: ref('clients'), field: id}\n"},
     "models/schema.yml:6: [unknown-ref] test 'relationships_orders_customer_id__id__ref_clients_': ref('clients'): no such model or seed"),
    ({"seeds/customers.csv": "id,name\n1,a\n2,b,c\n"},
     "seeds/customers.csv:3: [bad-seed] this row has 3 values, the header 2 columns"),
    ({"tests/bad.sql": "SELECT * FROM {{ ref('nope') }}"},
     "tests/bad.sql:1: [unknown-ref] test 'bad': ref('nope'): no such model or seed"),
])
def test_bad_tests_and_seeds_are_clear_errors(make_project, capsys, files, expected):
    root = make_project({"models/orders.sql": ORDERS, "seeds/customers.csv": SEED, **files})
    code, out, err = cli(root, "compile", capsys=capsys)
    assert code == 2
    assert expected in err
    assert "Traceback" not in out + err


def test_source_freshness_from_positions_and_show(spark, project, capsys):
    root, database = project
    spark.sql(f"CREATE DATABASE {database}")
    spark.sql(f"CREATE TABLE {database}.events USING parquet AS SELECT 1L AS id, current_timestamp() - INTERVAL 2 HOURS AS ts")
    spark.sql(f"CREATE TABLE {database}.old_events USING parquet AS SELECT 1L AS id, TIMESTAMP '2020-01-01 00:00:00' AS ts")
    (root / "lineage").mkdir()
    (root / "lineage" / "events.yml").write_text(
        "sources:\n"
        f"  - {{name: events, database: {database}, primary_key: [id], position: [ts, id],\n"
        "     freshness: {warn_after: {count: 1, period: hour}, error_after: {count: 1, period: day}}}\n"
        f"  - {{name: old_events, database: {database}, primary_key: [id], position: [ts, id]}}\n")
    code, out, _ = cli(root, "source", "freshness", "--select", f"{database}.events", capsys=capsys)
    assert code == 0 and f"WARN  {database}.events" in out, out  # two hours old: past warn_after, within error_after
    found = json.loads((root / "target" / "sources.json").read_text())["results"]
    assert [(r["source"], r["status"]) for r in found] == [(f"{database}.events", "warn")]
    assert 7000 < found[0]["age_seconds"] < 7400

    code, out, _ = cli(root, "source", "freshness", capsys=capsys)
    assert code == 0 and f"PASS  {database}.old_events" in out  # no freshness rule: its age is said, nothing judged

    (root / "lineage" / "events.yml").write_text((root / "lineage" / "events.yml").read_text().replace("count: 1, period: day", "count: 30, period: minute"))
    code, out, _ = cli(root, "source", "freshness", "--select", "*.events", capsys=capsys)
    assert code == 1 and f"ERROR {database}.events" in out

    assert cli(root, "seed", capsys=capsys)[0] == 0
    code, out, _ = cli(root, "show", "--inline", "select name from {{ ref('customers') }} where id = 20", capsys=capsys)
    assert code == 0 and "| Bob, Jr. |" in out, out
    code, out, _ = cli(root, "show", "--select", "orders", "--limit", "2", capsys=capsys)
    assert code == 0 and "Previewing model orders (2 rows):" in out and "| order_id |" in out
    assert not spark.catalog.tableExists(f"{database}.orders")  # show wrote nothing


@pytest.mark.parametrize("fmt", ["parquet", "delta"])
def test_a_batch_scoped_test_reads_only_what_the_last_batch_of_an_mv_or_a_fact_wrote(spark, make_project, capsys, fmt):
    database = f"t_dt_{uuid.uuid4().hex[:8]}"
    checks = "[{accepted_values: {values: [ok], name: NAME_all}}, {accepted_values: {values: [ok], name: NAME_batch, scope: batch}}]"
    root = make_project({
        "project.yml": f"name: t_dt\nmodels: {{+schema: {database}, +table_format: {fmt}}}\n",
        "lineage/events.yml": f"sources:\n  - {{name: events, database: {database}, primary_key: [id], position: [ts, id],\n"
                              "     columns: [{name: id, type: bigint}, {name: v, type: string}, {name: ts, type: timestamp}]}\n",
        "models/events_mv.sql": f"{{{{ config(materialized='mv', strategy='incremental') }}}}\nSELECT e.id, e.v FROM {{{{ source('{database}', 'events') }}}} AS e",
        "models/events_fact.sql": f"{{{{ config(materialized='fact') }}}}\nSELECT e.id, e.ts, e.v FROM {{{{ source('{database}', 'events') }}}} AS e",
        "models/schema.yml": "models:\n"
                             f"  - {{name: events_mv, columns: [{{name: v, tests: {checks.replace('NAME', 'mv')}}}]}}\n"
                             f"  - {{name: events_fact, columns: [{{name: v, tests: {checks.replace('NAME', 'fact')}}}]}}\n",
    })
    spark.sql(f"CREATE DATABASE {database}")
    try:
        spark.sql(f"CREATE TABLE {database}.events (id BIGINT, v STRING, ts TIMESTAMP) USING parquet")
        spark.sql(f"INSERT INTO {database}.events VALUES (1, 'bad', TIMESTAMP '2026-01-01 00:00:00'), "
                  "(2, 'ok', TIMESTAMP '2026-01-01 00:01:00')")
        code, out, _ = cli(root, "build", capsys=capsys)
        assert code == 1, out  # the first batch wrote every row: both kinds of test see the bad one
        assert results(root) | {} == {"events_fact": ("success", None), "events_mv": ("success", None),
                                      "fact_all": ("fail", 1), "fact_batch": ("fail", 1), "mv_all": ("fail", 1), "mv_batch": ("fail", 1)}
        assert "-- scope batch: only what events_mv's last batch wrote" in (root / "target/run/tests/mv_batch.sql").read_text()

        spark.sql(f"INSERT INTO {database}.events VALUES (3, 'ok', TIMESTAMP '2026-01-01 00:02:00')")
        assert cli(root, "run", capsys=capsys)[0] == 0
        code, out, _ = cli(root, "test", capsys=capsys)
        assert code == 1
        # the second batch (the MV's refresh by key, the fact's step) wrote row 3 only (a full build would write all)
        assert results(root) == {"fact_all": ("fail", 1), "fact_batch": ("pass", 0), "mv_all": ("fail", 1), "mv_batch": ("pass", 0)}
    finally:
        spark.sql(f"DROP DATABASE IF EXISTS {database} CASCADE")


def test_scope_batch_needs_an_mv_or_a_fact(make_project, capsys):
    root = make_project({"models/orders.sql": ORDERS,
                         "models/schema.yml": "models:\n  - name: orders\n    columns:\n      - name: order_id\n"
                                              "        tests: [{unique: {scope: batch}}]\n"})
    code, _, err = cli(root, "compile", capsys=capsys)
    assert code == 2 and "models/schema.yml:5: [bad-test] test 'unique_orders_order_id': scope: batch needs an mv or fact model, " \
                         "'orders' is a table" in err
