"""dbt's unit tests (``compiler/data_tests/unit.py``): a model's SELECT on given rows (dict, csv,
sql, a fixture file), compared with the expected rows as multisets, by ``mvflow test`` without any
model built; overrides of vars and is_incremental; errors at their YAML lines."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest

from compiler.cli import main

FIXTURE = Path(__file__).parent / "fixtures" / "dbt_shop"
UNITS = """
version: 2
unit_tests:
  - name: customer_orders_counts_and_sums
    model: customer_orders
    given:
      - input: ref('stg_customers')
        rows:
          - {customer_id: 1, first_name: Ann}
          - {customer_id: 2, first_name: Bob}
      - input: ref('stg_orders')
        format: csv
        rows: |
          order_id,customer_id,order_date
          10,1,2024-01-06
          11,1,2024-02-01
      - input: ref('order_payments')
        format: sql
        rows: select 10 as order_id, cast(5.5 as decimal(10,2)) as amount
    expect:
      rows:
        - {customer_id: 1, orders: 2, first_order: 2024-01-06, lifetime_value: 5.5}
        - {customer_id: 2, orders: 0, first_order: null, lifetime_value: 0}
  - name: payments_over_the_min_amount
    model: stg_payments
    overrides:
      vars: {min_amount: 3}
    given:
      - input: source('raw', 'payments')
        fixture: two_payments
        format: csv
    expect:
      rows:
        - {payment_id: 2, amount: 4}
  - name: payments_counted_as_a_multiset
    model: stg_payments
    given:
      - input: source('raw', 'payments')
        rows: [{id: 1, amount: 2}, {id: 1, amount: 2}]
    expect:
      format: sql
      rows: select 1 as payment_id, 2 as amount
  - name: disabled_one
    model: stg_payments
    config: {enabled: false}
    given: []
    expect: {rows: [{x: 1}]}
"""


@pytest.fixture
def shop(tmp_path) -> Path:
    project = shutil.copytree(FIXTURE, tmp_path / "shop")
    (project / "models" / "marts" / "units.yml").write_text(textwrap.dedent(UNITS))
    (project / "checks" / "fixtures").mkdir()
    (project / "checks" / "fixtures" / "two_payments.csv").write_text(
        "id,order_id,payment_method,amount\n1,7,card,2\n2,7,card,4\n")
    return project


def test_unit_tests_run_on_given_rows_without_building_anything(spark, shop, capsys):
    try:
        with pytest.raises(SystemExit) as exit_:
            main(["--project-dir", str(shop), "test", "-s", "test_type:unit"])
        out = capsys.readouterr().out
        tables = [t.tableName for db in ("shop_dev", "shop_dev_marts", "shop_dev_raw") if spark.catalog.databaseExists(db)
                  for t in spark.sql(f"SHOW TABLES IN {db}").collect()]
    finally:
        for schema in ("shop_dev", "shop_dev_marts", "shop_dev_raw", "shop_dev_dbt_test__audit"):
            spark.sql(f"DROP DATABASE IF EXISTS {schema} CASCADE")
    assert exit_.value.code == 1 and "Traceback" not in out
    assert "Got 1 result, configured to fail if != 0: actual only {payment_id: 1, amount: 2.0}" in out, out
    results = {r["name"]: (r["status"], r["failures"])
               for r in json.loads((shop / "target" / "run_results.json").read_text())["results"] if r["kind"] == "test"}
    assert results == {"customer_orders_counts_and_sums": ("pass", 0), "payments_over_the_min_amount": ("pass", 0),
                       "payments_counted_as_a_multiset": ("fail", 1)}  # one copy of the row expected, two came out
    assert tables == ["run_log"]  # the project's on-run-start hook made it; no model was built or read
    sql = (shop / "target" / "run" / "tests" / "payments_counted_as_a_multiset.sql").read_text()
    assert "__unit__raw__payments" in sql and "shop_dev" not in sql


def test_in_build_a_unit_test_runs_before_its_model_and_its_failure_skips_the_model(spark, shop, capsys):
    try:
        main(["--project-dir", str(shop), "seed"])
        with pytest.raises(SystemExit) as exit_:
            main(["--project-dir", str(shop), "build", "-s", "stg_payments"])
        out = capsys.readouterr().out
        built = spark.catalog.tableExists("shop_dev.stg_payments")
    finally:
        for schema in ("shop_dev", "shop_dev_marts", "shop_dev_raw", "shop_dev_dbt_test__audit"):
            spark.sql(f"DROP DATABASE IF EXISTS {schema} CASCADE")
    assert exit_.value.code == 1 and "Traceback" not in out
    results = [r for r in json.loads((shop / "target" / "run_results.json").read_text())["results"] if r["kind"] != "hook"]
    assert out.index("START test  payments_over_the_min_amount") < out.index("SKIP  view  stg_payments"), out
    status = {r["name"]: (r["status"], r.get("message") or "") for r in results}
    assert status["payments_counted_as_a_multiset"][0] == "fail"
    assert status["stg_payments"] == ("skipped", "upstream payments_counted_as_a_multiset failed"), status
    assert not built


def test_selecting_a_model_brings_its_unit_tests_and_test_type_selects_them(shop, capsys):
    main(["--project-dir", str(shop), "ls", "-s", "test_type:unit"])  # ls lists models: none
    assert capsys.readouterr().out == ""
    from compiler.compile import compile_project
    from compiler.project import load_project
    from compiler.select import select_with_tests

    manifest = compile_project(load_project(shop))
    assert "disabled_one" not in manifest.tests
    assert [n for n in select_with_tests(manifest, ["stg_payments"]) if manifest.tests.get(n) and
            manifest.tests[n].declaration.test_type == "unit"] == ["payments_counted_as_a_multiset", "payments_over_the_min_amount"]
    assert set(select_with_tests(manifest, ["test_type:unit"])) == {
        "customer_orders_counts_and_sums", "payments_over_the_min_amount", "payments_counted_as_a_multiset"}


@pytest.mark.parametrize("units, expected", [
    ("unit_tests:\n  - name: u\n    model: nowhere\n    given: []\n    expect: {rows: [{a: 1}]}\n",
     "units.yml:4: [unit-test] unit test 'u': no SQL model 'nowhere'"),
    ("unit_tests:\n  - name: u\n    model: stg_payments\n    given: []\n    expect: {rows: [{a: 1}]}\n",
     "units.yml:3: [unit-test] unit test 'u': the model reads source('raw', 'payments'), which the test does not give"),
    ("unit_tests:\n  - name: u\n    model: stg_payments\n    given:\n      - {input: stg_orders, rows: []}\n    expect: {rows: [{a: 1}]}\n",
     "units.yml:6: [unit-test] unit test 'u': each input is ref('<model>') or source('<source>', '<table>')"),
    ("unit_tests:\n  - name: u\n    model: stg_payments\n    given:\n      - {input: \"source('raw', 'payments')\", format: xml, rows: []}\n"
     "    expect: {rows: [{a: 1}]}\n", "units.yml:6: [unit-test] unit test 'u': format 'xml' is not dict, csv or sql"),
])
def test_a_malformed_unit_test_is_an_error_at_its_line(shop, capsys, units, expected):
    (shop / "models" / "marts" / "units.yml").write_text("version: 2\n" + units)
    with pytest.raises(SystemExit) as exit_:
        main(["--project-dir", str(shop), "compile"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and f"models/marts/{expected}" in err and "Traceback" not in err, err
