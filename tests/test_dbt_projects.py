"""A dbt-core project, unmodified, run by dbt itself and by mvflow on the same local Spark
(pyspark 4.2.0 and Delta 4.4.0 in both): every relation compared row for row and every test
verdict (status and failures), after a first `seed && run && test` and again after a seed file
grew (incremental models then take their incremental path).

dbt runs in bench's own venv (``bench/peers.py``; CI installs it the first time, a few minutes),
in one process of its own (``tests/dbt_session.py``: every command through dbt's programmatic entry
point, one SparkSession) with its own warehouse and metastore, which then dumps its relations as JSON. The project is ``tests/fixtures/dbt_shop`` (seeds, sources, views, tables, one
of them in jaffle_shop's `customers` shape, ephemeral and incremental models with
append/insert_overwrite/merge, hooks, generic, custom and singular tests, store_failures, docs
blocks, dbt's cross-database macros), with a git package (tests/shop_packages.py) whose macro keys
one model and whose generic test checks it, and whose own model and seed the project configures,
gives vars and reads; its marts are also run as mvs.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from compiler.cli import main
from compiler.compile import compile_project
from compiler.project import load_project

sys.path.insert(0, str(Path(__file__).parent))  # the tests use --import-mode=importlib
from shop_packages import package_repository, with_package  # noqa: E402

FIXTURE = Path(__file__).parent / "fixtures" / "dbt_shop"
SCHEMAS = ("shop_dev", "shop_dev_raw", "shop_dev_marts", "shop_dev_dbt_test__audit", "shop_dev_history")
NEW_ORDER = "8,2,2024-03-20,placed\n"
#: raw_tickets in the second pass: 1 updated, 2 with another owner, 3 deleted, 4 given a state, 5 new
TICKETS = ("id,owner,state,updated_at\n1,ann,closed,2024-01-02 10:00:00\n2,bea,open,2024-01-01 09:00:00\n"
           "4,dee,open,2024-01-03 09:00:00\n5,eve,open,2024-01-03 09:00:00\n")


def dbt_conf(work: Path) -> dict[str, str]:
    """dbt's session: Delta, its own warehouse, and the settings for a few rows every mvflow process
    of the tests has (``processes.TINY_CONF``): the mvflow processes of a profile read them too."""
    from compiler.delta_jars import delta_jars, delta_session_conf
    from processes import TINY_CONF

    return {**delta_session_conf(delta_jars()), "spark.sql.warehouse.dir": str(work / "warehouse"),
            "spark.driver.memory": "1g", "spark.ui.enabled": "false", "spark.sql.session.timeZone": "UTC", **TINY_CONF}


@pytest.fixture(scope="module")
def dbt_side(tmp_path_factory) -> dict:
    """dbt's verdicts after each pass and its relations at the end."""
    from bench.peers import dbt_executable

    dbt = dbt_executable()
    work = tmp_path_factory.mktemp("dbt")
    project = work / "project"
    shutil.copytree(FIXTURE, project)
    with_package(project, f"packages:\n  - git: {package_repository(work / 'repo')}\n    revision: v1\n")
    conf = dbt_conf(work)
    profiles = work / "profiles"
    profiles.mkdir()
    output = {"type": "spark", "method": "session", "host": "NA", "schema": "shop_dev", "server_side_parameters": conf}
    (profiles / "profiles.yml").write_text(json.dumps({"shop": {"target": "dev", "outputs": {"dev": output}}}))

    target = project / "target"
    steps = [{"dbt": ["deps"], "must_pass": True}]
    for grow in (False, True):
        if grow:
            steps.append({"append": str(project / "data" / "raw_orders.csv"), "text": NEW_ORDER})
            steps.append({"write": str(project / "data" / "raw_tickets.csv"), "text": TICKETS})
        steps += [{"dbt": ["seed"], "must_pass": True}, {"dbt": ["snapshot"], "must_pass": True}, {"dbt": ["run"], "must_pass": True},
                  {"dbt": ["test"], "results": f"test{int(grow)}", "file": str(target / "run_results.json")}]
    steps.append({"dbt": ["source", "freshness"], "results": "freshness", "file": str(target / "sources.json")})
    plan, out = work / "plan.json", work / "out.json"
    plan.write_text(json.dumps({"flags": ["--profiles-dir", str(profiles), "--project-dir", str(project)],
                                "conf": conf, "schemas": SCHEMAS, "steps": steps}))
    done = subprocess.run([str(dbt.parent / "python"), str(Path(__file__).parent / "dbt_session.py"), str(plan), str(out)],
                          cwd=work, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    side = json.loads(out.read_text())
    return {"verdicts": [dbt_verdicts(side["test0"]), dbt_verdicts(side["test1"])], "relations": side["relations"],
            "freshness_exit": side["exits"][-1],
            "freshness": {r["unique_id"].split(".", 2)[2]: r["status"] for r in side["freshness"]["results"]}}


def dbt_verdicts(run_results: dict) -> dict[str, tuple[str, int]]:
    """Test name → (status, failures) from dbt's run_results.json (unique_id: test.<project>.<name>[.<hash>],
    unit_test.<project>.<model>.<name>)."""
    results = run_results["results"]
    verdicts = {r["unique_id"].split(".")[2]: (r["status"], r["failures"]) for r in results if r["unique_id"].startswith("test.")}
    return verdicts | {r["unique_id"].split(".")[3]: (r["status"], r["failures"] or 0)
                       for r in results if r["unique_id"].startswith("unit_test.")}


def mvflow_verdicts(path: Path) -> dict[str, tuple[str, int]]:
    results = json.loads(path.read_text())["results"]
    return {r["name"]: (r["status"], r["failures"]) for r in results if r["kind"] == "test"}


def relations(spark) -> dict:
    found = {}
    for schema in SCHEMAS:
        if not spark.catalog.databaseExists(schema):
            continue
        for table in spark.sql(f"SHOW TABLES IN {schema}").collect():
            if "__mvflow_" in table.tableName:  # the physical slots behind a table model's view
                continue
            frame = spark.table(f"{schema}.{table.tableName}")
            found[f"{schema}.{table.tableName}"] = {"columns": frame.columns,
                                                    "rows": [[None if v is None else str(v) for v in r] for r in frame.collect()]}
    return found


def _exit_code(command) -> int:
    try:
        command()
    except SystemExit as exc:
        return int(exc.code)
    return 0


def without_run_times(relation: dict) -> dict:
    """A snapshot's times of the run (``current_timestamp()``: every time after 2025 but dbt_valid_to_current's)
    as NOW, and the ids hashed from them (a version stamped with the run's time) as ID: the two tools
    ran at different times."""
    def now(value: str | None) -> bool:
        return value is not None and "2025" <= value < "9999" and value[4:5] == "-"

    if "dbt_scd_id" not in relation["columns"]:
        return relation
    scd = relation["columns"].index("dbt_scd_id")
    rows = []
    for row in relation["rows"]:
        stamped = any(now(value) for column, value in zip(relation["columns"], row) if column in ("dbt_valid_from", "dbt_updated_at"))
        rows.append(["ID" if stamped and i == scd else "NOW" if now(value) else value for i, value in enumerate(row)])
    return {"columns": relation["columns"], "rows": rows}


def comparable(relation: dict) -> tuple[list[str], list[tuple]]:
    """Columns in order of name, rows sorted: where the two tools may order them differently."""
    order = sorted(range(len(relation["columns"])), key=lambda i: relation["columns"][i])
    rows = sorted((tuple(row[i] for i in order) for row in relation["rows"]), key=repr)
    return [relation["columns"][i] for i in order], rows


@pytest.mark.slow
def test_a_dbt_project_gives_dbts_tables_and_verdicts(spark, tmp_path, dbt_side, capsys):
    project = tmp_path / "project"
    shutil.copytree(FIXTURE, project)
    with_package(project, f"packages:\n  - git: {package_repository(tmp_path / 'repo')}\n    revision: v1\n")
    verdicts = []
    try:
        main(["--project-dir", str(project), "deps"])
        for grow in (False, True):
            if grow:
                with (project / "data" / "raw_orders.csv").open("a") as handle:
                    handle.write(NEW_ORDER)
                (project / "data" / "raw_tickets.csv").write_text(TICKETS)
            for command in ("seed", "snapshot", "run", "test"):  # each exits only on a failure (a warning is none)
                main(["--project-dir", str(project), command])
            verdicts.append(mvflow_verdicts(project / "target" / "run_results.json"))
        out, err = capsys.readouterr()
        assert "Traceback" not in out + err

        code = _exit_code(lambda: main(["--project-dir", str(project), "source", "freshness"]))
        ours = json.loads((project / "target" / "sources.json").read_text())["results"]
        names = {s.id: s.ref_name for s in compile_project(load_project(project)).sources.values()}
        assert {names[r["source"]]: r["status"] for r in ours} == dbt_side["freshness"] == {"raw.orders": "pass"}
        assert code == dbt_side["freshness_exit"] == 0

        assert verdicts == dbt_side["verdicts"] and len(verdicts[0]) == 22
        assert verdicts[0]["customer_orders_counts_and_sums"] == ("pass", 0)  # a unit test
        assert verdicts[0]["relationships_stg_orders_customer_id__customer_id__ref_stg_customers_"] == ("warn", 1)
        ours, theirs = relations(spark), dbt_side["relations"]
        assert set(ours) == set(theirs)
        assert {"shop_dev.run_log", "shop_dev_raw.raw_stores", "shop_dev_marts.order_status", "shop_dev_marts.daily_orders",
                "shop_dev_marts.order_dates", "shop_dev_marts.order_keys",
                "shop_dev_dbt_test__audit.relationships_stg_orders_96411fe0c89b49c3f4da955dfd358ba0"} <= set(theirs)
        assert {"shop_dev_history.tickets_history", "shop_dev_history.ticket_states", "shop_dev_history.tickets_since"} <= set(theirs)
        assert {"shop_dev.utils_statuses", "shop_dev_marts.utils_status_counts", "shop_dev_marts.utils_totals"} <= set(theirs)
        assert not any("utils_unused" in name for name in theirs)  # the package's model the project disables
        for name in sorted(theirs):
            assert comparable(without_run_times(ours[name])) == comparable(without_run_times(theirs[name])), name
        assert len(theirs["shop_dev_marts.order_events"]["rows"]) == 8  # the incremental pass appended one row

        shown = capsys.readouterr()
        main(["--project-dir", str(project), "show", "--inline", "select count(*) as n from {{ ref('order_payments') }}"])
        assert "|  7 |" in capsys.readouterr().out  # an ephemeral model read inline: 7 orders have payments
        assert "Traceback" not in shown.out + shown.err
    finally:
        for schema in SCHEMAS:
            spark.sql(f"DROP DATABASE IF EXISTS {schema} CASCADE")



@pytest.mark.slow
def test_dbt_reads_and_continues_what_mvflow_built(tmp_path, dbt_side):
    """Issue 31 item 9: mvflow builds the project (seeds, snapshots, models) into a warehouse and
    metastore the profile names; dbt pointed at the same ones then tests mvflow's tables with the
    verdicts mvflow gave, and takes the next snapshots on mvflow's snapshot tables: the histories
    dbt-spark itself made over the same two states of the seed."""
    from bench.peers import dbt_executable
    from processes import mvflow

    project = shutil.copytree(FIXTURE, tmp_path / "project")
    conf = {**dbt_conf(tmp_path), "spark.hadoop.javax.jdo.option.ConnectionURL":
            f"jdbc:derby:;databaseName={tmp_path / 'metastore_db'};create=true"}
    output = {"type": "spark", "method": "session", "host": "NA", "schema": "shop_dev", "server_side_parameters": conf}
    (project / "profiles.yml").write_text(json.dumps({"shop": {"target": "dev", "outputs": {"dev": output}}}))
    mvflow(project, "build")  # seeds, snapshots, models and tests, in one process
    ours = mvflow_verdicts(project / "target" / "run_results.json")
    (project / "data" / "raw_tickets.csv").write_text(TICKETS)  # the next state, for dbt's snapshot (no test reads it)
    mvflow(project, "seed", "-s", "raw_tickets")  # dbt refuses to seed over it: on parquet, mvflow's table is a view

    target = project / "target"
    steps = [{"dbt": ["test"], "results": "test", "file": str(target / "run_results.json")},
             {"dbt": ["snapshot"], "must_pass": True}]
    plan, out = tmp_path / "plan.json", tmp_path / "out.json"
    plan.write_text(json.dumps({"flags": ["--profiles-dir", str(project), "--project-dir", str(project)], "conf": conf,
                                "schemas": ["shop_dev_history"], "steps": steps}))
    dbt = dbt_executable()
    done = subprocess.run([str(dbt.parent / "python"), str(Path(__file__).parent / "dbt_session.py"), str(plan), str(out)],
                          cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    theirs = json.loads(out.read_text())
    without_package = {name: verdict for name, verdict in dbt_side["verdicts"][0].items()
                       if not name.startswith("shop_utils") and "utils_status_counts" not in name}
    assert dbt_verdicts(theirs["test"]) == ours == without_package
    for name in ("tickets_history", "ticket_states", "tickets_since"):
        relation = f"shop_dev_history.{name}"
        assert comparable(without_run_times(theirs["relations"][relation])) == \
            comparable(without_run_times(dbt_side["relations"][relation])), name


@pytest.mark.slow  # 45 s of CLI runs; the fast tier refreshes these shapes in tests/test_mv_dbt_style.py
def test_its_marts_made_mvs_and_nothing_else_changed_refresh_by_key(spark, tmp_path, capsys):
    """The project with `+materialized: mv` on its marts folder: customer_orders (a GROUP BY over staging
    views, joined to the ephemeral order_payments, which aggregates) and customer_totals (jaffle_shop's
    customers: aggregate CTEs joined back by customer) build; a new order and an edited payment
    refresh the groups and customers they reach, and verify recomputes each SELECT as written. The
    seeds are keyed by the unique and not_null tests of the staging views that rename them."""
    project = tmp_path / "project"
    shutil.copytree(FIXTURE, project)
    settings = project / "dbt_project.yml"
    settings.write_text(settings.read_text().replace("+materialized: table", "+materialized: mv"))
    payments = project / "data" / "raw_payments.csv"
    marts = "customer_orders customer_totals"  # their lifted aggregates come along
    try:
        for command in ("seed", "run"):
            main(["--project-dir", str(project), command])
        assert "\n1,1,credit_card,10.00\n" in payments.read_text()
        payments.write_text(payments.read_text().replace("\n1,1,credit_card,10.00\n", "\n1,1,credit_card,12.00\n"))
        with (project / "data" / "raw_orders.csv").open("a") as handle:
            handle.write(NEW_ORDER)  # customer 2's
        main(["--project-dir", str(project), "seed"])
        capsys.readouterr()
        main(["--project-dir", str(project), "run", "-s", marts])
        out = capsys.readouterr().out
        for model, refreshed in (("customer_orders__p", "1 keys refreshed (changed: raw_payments 1)"),
                                 ("customer_orders", "2 keys refreshed (changed: customer_orders__p 1, raw_orders 1)"),
                                 ("customer_totals__orders_per_customer", "1 keys refreshed (changed: raw_orders 1)"),
                                 ("customer_totals__paid_per_customer", "1 keys refreshed")):
            assert re.search(rf"OK +mv +{model} .*: {re.escape(refreshed)}", out), (model, out)
        main(["--project-dir", str(project), "verify", "-s", marts])
        out = capsys.readouterr().out
        assert sorted(re.findall(r"^OK +(\w+) ", out, re.M)) == [
            "customer_orders", "customer_orders__p", "customer_totals", "customer_totals__orders_per_customer",
            "customer_totals__paid_per_customer"], out
        assert "Traceback" not in out
    finally:
        for schema in SCHEMAS:
            spark.sql(f"DROP DATABASE IF EXISTS {schema} CASCADE")


def test_build_loads_a_seed_before_what_reads_it_as_a_source():
    """The fixture's sources are its seeds' tables (as jaffle_shop's): `mvflow build` on an empty
    warehouse loads them before the models reading them, and does not stop on their absence
    (the slow test above builds it so)."""
    from compiler.run import _selected_dag

    manifest = compile_project(load_project(FIXTURE))
    selected = [name for name, model in manifest.models.items() if model.kind.name != "ephemeral"]
    dag = _selected_dag(manifest, selected)
    assert dag.has_edge("raw_orders", "stg_orders") and dag.has_edge("raw_payments", "stg_payments")
    assert not dag.has_edge("raw_orders", "stg_payments")


def test_the_fixture_compiles_as_dbt_names_and_configures_it(tmp_path):
    project = tmp_path / "project"
    shutil.copytree(FIXTURE, project)
    manifest = compile_project(load_project(project))

    kinds = {name: (m.kind.name, m.relation) for name, m in manifest.models.items()}
    assert kinds["stg_orders"] == ("view", "shop_dev.stg_orders")
    assert kinds["customer_orders"] == ("table", "shop_dev_marts.customer_orders")  # marts: +materialized, +schema
    assert kinds["order_payments"][0] == "ephemeral" and kinds["raw_orders"] == ("seed", "shop_dev_raw.raw_orders")
    assert manifest.models["raw_stores"].kind.delimiter == ";"  # a level named after the seed
    assert manifest.models["order_status"].table_format == "delta"  # file_format
    assert manifest.models["customer_orders"].config["after"] == [
        "INSERT INTO shop_dev.run_log VALUES ('built customer_orders')"]  # rendered with this and target
    assert "__dbt__cte__order_payments" in manifest.models["customer_orders"].select_sql
    assert "max(order_date)" in manifest.models["order_events"].incremental_sql.lower()
    assert "max(order_date)" not in manifest.models["order_events"].select_sql.lower()
    assert manifest.models["stg_customers"].description.startswith("One row per customer of the **Jaffle** shop")
    assert manifest.sources["shop_dev_raw.raw_orders"].ref_name == "raw.orders"
    assert "source_unique_raw_orders_id" in manifest.tests
    ci = compile_project(load_project(project), "ci")
    assert ci.models["customer_orders"].relation == "shop_ci_marts.customer_orders"


@pytest.mark.parametrize("change, expected", [
    (lambda p: (p / "profiles.yml").write_text("shop:\n  target: dev\n  outputs:\n    dev: {type: spark, method: thrift, schema: s}\n"),
     "profiles.yml:4: [dbt-unsupported] target 'dev': method 'thrift' is not supported: mvflow runs Spark itself"),
    (lambda p: (p / "profiles.yml").unlink(),
     "[no-profile] no profiles.yml for profile 'shop'"),
    (lambda p: (p / "models" / "marts" / "order_status.sql").write_text(
        "{{ config(materialized='incremental', incremental_strategy='merge', unique_key='order_id') }}\nselect 1 as order_id\n"),
     "models/marts/order_status.sql:1: [bad-config] incremental_strategy 'merge' needs the delta table format"),
    (lambda p: (p / "models" / "staging" / "schema.yml").write_text(
        (p / "models" / "staging" / "schema.yml").read_text().replace('doc("customers")', 'doc("clients")')),
     "models/staging/schema.yml:5: [jinja-undefined] undefined in template: doc('clients'): no docs block named 'clients'"),
])
def test_dbt_project_errors_are_one_line(tmp_path, capsys, monkeypatch, change, expected):
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.dbt/profiles.yml of the machine's
    monkeypatch.delenv("DBT_PROFILES_DIR", raising=False)
    project = tmp_path / "project"
    shutil.copytree(FIXTURE, project)
    change(project)
    assert _exit_code(lambda: main(["--project-dir", str(project), "compile"])) == 2
    out, err = capsys.readouterr()
    assert expected in err and "Traceback" not in out + err


def test_unsupported_dbt_features_are_one_warning_each(tmp_path, capsys):
    project = tmp_path / "project"
    shutil.copytree(FIXTURE, project)
    (project / "models" / "py_model.py").write_text("def model(dbt, session):\n    return None\n")
    main(["--project-dir", str(project), "compile"])
    err = capsys.readouterr().err
    assert "warning: models/py_model.py:1: [dbt-unsupported] Python models are not supported" in err


def test_dbts_other_yaml_keys_are_accepted_as_dbt_accepts_them(tmp_path, capsys):
    project = tmp_path / "project"
    shutil.copytree(FIXTURE, project)
    (project / "models" / "marts" / "semantics.yml").write_text(textwrap.dedent("""
        version: 2
        models:
          - name: order_dates
            meta: {owner: "@ana"}
            time_spine: {standard_granularity_column: order_month}
            columns:
              - name: order_id
                data_type: int
                constraints: [{type: not_null}]
                meta: {pii: false}
              - {name: order_month, data_type: timestamp, granularity: month}
        semantic_models:
          - {name: orders, model: "ref('order_dates')"}
        metrics:
          - {name: order_count, type: simple, type_params: {measure: orders}}
        saved_queries:
          - {name: q, query_params: {metrics: [order_count]}}
        exposures:
          - {name: dash, type: dashboard, owner: {name: Ana}, depends_on: ["ref('order_dates')"]}
    """))
    assert _exit_code(lambda: main(["--project-dir", str(project), "compile"])) == 0
    err = capsys.readouterr().err
    for key in ("semantic_models", "metrics", "saved_queries"):
        assert err.count(f"[dbt-unsupported] '{key}' is not supported by mvflow: ignored") == 1, err
    assert "exposure" not in err and "error" not in err  # read for the docs site (tests/test_docs.py)


def test_docs_of_missing_columns_warn_and_the_overview_block_heads_the_docs(tmp_path, capsys):
    """As dbt: docs of a column the model does not output are accepted (jaffle_shop documents
    ``total_order_amount``, which its ``customers`` does not output), and ``__overview__`` is the
    docs site's front page."""
    project = tmp_path / "project"
    shutil.copytree(FIXTURE, project)
    schema = project / "models" / "marts" / "schema.yml"
    schema.write_text(schema.read_text().replace(
        "      - name: customer_id\n        tests: [unique, not_null]\n",
        "      - name: customer_id\n        tests: [unique, not_null]\n      - name: total_order_amount\n"
        "        description: not an output column\n", 1))
    (project / "docs" / "front.md").write_text("{% docs __overview__ %}\nThe **shop**.\n{% enddocs %}\n")
    assert _exit_code(lambda: main(["--project-dir", str(project), "docs", "generate"])) == 0
    err = capsys.readouterr().err
    assert ("warning: models/marts/schema.yml:9: [unknown-column] model 'customer_orders' docs describe column "
            "'total_order_amount', which the model does not output") in err
    manifest = json.loads((project / "target" / "manifest.json").read_text())
    assert manifest["project"]["overview"] == "The **shop**."
    assert "The **shop**." in (project / "target" / "docs" / "data.js").read_text()


def test_vars_on_the_command_line_override_the_projects(tmp_path):
    project = tmp_path / "project"
    shutil.copytree(FIXTURE, project)
    main(["--project-dir", str(project), "compile", "--vars", "{min_amount: 10}"])
    assert "amount >= 10" in (project / "target" / "compiled" / "staging" / "stg_payments.sql").read_text()
    main(["--project-dir", str(project), "compile"])
    assert "amount >= 0" in (project / "target" / "compiled" / "staging" / "stg_payments.sql").read_text()


def test_jinja_in_dbt_project_yml_configs_is_rendered_as_dbt_renders_it(tmp_path, capsys):
    """jaffle-shop's ``seeds: +enabled: "{{ var('load_source_data', false) }}"``: folder configs are
    rendered with vars and target to values (``False``, not the text ``"False"``); a bad value is an
    error at its line of dbt_project.yml."""
    project = tmp_path / "project"
    shutil.copytree(FIXTURE, project)
    settings = project / "dbt_project.yml"
    settings.write_text(settings.read_text()
                        .replace("      +quote_columns: true\n", "      +quote_columns: true\n      +enabled: \"{{ var('stores', false) }}\"\n")
                        .replace("    +severity: error\n", "    +severity: \"{{ 'warn' if target.name == 'ci' else 'error' }}\"\n"))
    assert "raw_stores" not in compile_project(load_project(project)).models
    loaded = load_project(project)
    with_stores = replace(loaded, vars={**loaded.vars, "stores": True})
    assert "raw_stores" in compile_project(with_stores).models
    unique = "source_unique_raw_orders_id"
    assert compile_project(with_stores).tests[unique].config.severity == "error"
    assert compile_project(with_stores, "ci").tests[unique].config.severity == "warn"
    settings.write_text(settings.read_text().replace("var('stores', false)", "var('stores', false) ~ '!'"))
    assert _exit_code(lambda: main(["--project-dir", str(project), "compile"])) == 2
    err = capsys.readouterr().err
    assert "dbt_project.yml:32: [bad-config] enabled must be true or false, got 'False!'" in err and "Traceback" not in err


def test_generate_schema_name_is_given_the_node_dbt_gives_it(tmp_path):
    """jaffle-shop's macro: seeds in the schema they name, other custom schemas only in prod; the
    node says what it is (seed, model, test), its fqn and its file."""
    project = tmp_path / "project"
    shutil.copytree(FIXTURE, project)
    (project / "macros" / "schemas.sql").write_text(textwrap.dedent("""
        {% macro generate_schema_name(custom_schema_name, node) %}
            {%- if node.resource_type == 'seed' -%} {{ custom_schema_name | trim }}
            {%- elif node.resource_type == 'test' -%} {{ target.schema }}_{{ node.resource_type }}s
            {%- elif custom_schema_name is none or target.name != 'ci' -%} {{ target.schema }}
            {%- else -%} {{ node.fqn[1] }}_{{ node.original_file_path.split('/')[-1][:-4] }}_{{ custom_schema_name | trim }}
            {%- endif -%}
        {% endmacro %}
    """))
    dev, ci = (compile_project(load_project(project), target) for target in ("dev", "ci"))
    assert dev.models["raw_orders"].relation == ci.models["raw_orders"].relation == "raw.raw_orders"
    assert dev.models["customer_orders"].relation == "shop_dev.customer_orders"
    assert ci.models["customer_orders"].relation == "marts_customer_orders_marts.customer_orders"
    assert ci.models["stg_orders"].relation == "shop_ci.stg_orders"
    assert {t.config.schema for t in dev.tests.values() if t.declaration.test_type != "unit"} == {"shop_dev_tests"}


def test_the_dbt_commands_a_dbt_user_types_work_or_say_what_to_use(tmp_path, capsys):
    project = tmp_path / "project"
    shutil.copytree(FIXTURE, project)
    settings = project / "dbt_project.yml"
    settings.write_text(settings.read_text() + "clean-targets: [target, dbt_packages]\n")
    assert _exit_code(lambda: main(["--project-dir", str(project), "parse"])) == 0
    assert "parsed 18 models, 19 tests, 2 sources" in capsys.readouterr().out and not (project / "target").exists()
    main(["--project-dir", str(project), "ls"])
    listed = capsys.readouterr().out
    main(["--project-dir", str(project), "list"])
    assert capsys.readouterr().out == listed and "customer_orders" in listed
    main(["--project-dir", str(project), "debug"])
    out = capsys.readouterr().out
    assert "project: shop" in out and "target: dev" in out and "dbt's macro library: " in out
    main(["--project-dir", str(project), "compile"])
    (project / "dbt_packages" / "p").mkdir(parents=True)
    capsys.readouterr()
    main(["--project-dir", str(project), "clean"])
    assert capsys.readouterr().out.strip() == "removed target, dbt_packages"
    assert not (project / "target").exists() and not (project / "dbt_packages").exists() and (project / "models").is_dir()
    settings.write_text(settings.read_text().replace("[target, dbt_packages]", "[target, ../elsewhere]"))
    (tmp_path / "elsewhere").mkdir()
    assert _exit_code(lambda: main(["--project-dir", str(project), "clean"])) == 2
    assert "clean-targets: '../elsewhere' is not a folder inside the project" in capsys.readouterr().err
    assert (tmp_path / "elsewhere").is_dir()
    main(["--project-dir", str(project), "deps"])
    assert capsys.readouterr().out.strip() == "no packages to install (packages.yml or dependencies.yml lists none)"
    for command in (["retry"], ["run-operation", "grant", "--args", "{a: 1}"]):
        assert _exit_code(lambda: main(["--project-dir", str(project), *command])) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: mvflow {command[0]}: ") and err.count("\n") == 1 and "Traceback" not in err
