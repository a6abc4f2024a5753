"""Fact models: the compiled step, and the step protocol on real Spark tables and a real
SQLite state store (oracle, maxstep, gating, leases, full refresh). The tests of the write
(oracle, redo, verify, full refresh) run on both table formats: ``fmt`` is ``parquet`` (a hidden
step partition) or ``delta`` (``INSERT INTO … REPLACE WHERE`` the step's range)."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import pytest
from click.testing import CliRunner

from compiler.cli import cli
from compiler.compile import compile_project
from compiler.errors import CompileError
from compiler.kinds.fact.plan import STEP_COLUMN, fact
from compiler.kinds.fact.steps import StepOptions, run_fact
from compiler.project import load_project
from compiler.state import open_state_store
from compiler.status import status_lines

T0 = datetime(2026, 1, 1, 0, 0, tzinfo=timezone.utc)

LINEAGE = """
sources:
  - name: events
    database: {src}
    primary_key: [id]
    position: [ts, id]
    columns:
      - {{name: id, type: bigint}}
      - {{name: k, type: int}}
      - {{name: v, type: int}}
      - {{name: ts, type: timestamp}}
  - name: dims
    database: {src}
    primary_key: [k]
    dictionary: true
  - name: payments
    database: {src}
    primary_key: [id]
    position: [ts, id]
    columns:
      - {{name: id, type: bigint}}
      - {{name: ts, type: timestamp}}
"""

FACT = """
{{{{ config(materialized='fact', maxstep=3{extra}) }}}}
SELECT e.id, e.ts, e.v * 2 AS v2, d.name
FROM {{{{ source('{src}', 'events') }}}} AS e
LEFT JOIN {{{{ source('{src}', 'dims') }}}} AS d ON d.k = e.k
"""


class Env:
    """A tiny project with its own databases, its state store and a controllable clock."""

    def __init__(self, spark, make_project, extra: str = "", more: dict | None = None, fmt: str = "parquet"):
        self.spark = spark
        tag = uuid.uuid4().hex[:8]
        self.src, self.out = f"src_{tag}", f"out_{tag}"
        files = {
            "project.yml": f"name: t\nmodels:\n  +schema: {self.out}\n  +table_format: {fmt}\n",
            "lineage/src.yml": LINEAGE.format(src=self.src),
            "models/ev.sql": FACT.format(src=self.src, extra=extra.format(src=self.src)),
            **{k: v.format(src=self.src) for k, v in (more or {}).items()},
        }
        self.root = make_project(files)
        self.project = load_project(self.root)
        self.manifest = compile_project(self.project)
        self.store = open_state_store(self.project.target().state)
        self.now = T0 + timedelta(days=1)
        self.lines: list[str] = []
        spark.sql(f"CREATE DATABASE {self.src}")
        spark.sql(f"CREATE TABLE {self.src}.events (id BIGINT, k INT, v INT, ts TIMESTAMP) USING parquet")
        spark.sql(f"CREATE TABLE {self.src}.payments (id BIGINT, ts TIMESTAMP) USING parquet")
        spark.sql(f"CREATE TABLE {self.src}.dims (k INT, name STRING) USING parquet")
        spark.sql(f"INSERT INTO {self.src}.dims VALUES (1, 'one'), (2, 'two')")

    def switch(self, fmt: str) -> None:
        """The project's models in another table format from now on (recompiled)."""
        (self.root / "project.yml").write_text(f"name: t\nmodels:\n  +schema: {self.out}\n  +table_format: {fmt}\n")
        self.project = load_project(self.root)
        self.manifest = compile_project(self.project)

    def add_events(self, first: int, count: int, minutes: int = 0) -> None:
        """Events first..first+count-1; two share each timestamp (the id breaks the tie)."""
        rows = ", ".join(f"({i}, {i % 3}, {i}, TIMESTAMP'{_ts(minutes + i // 2)}')" for i in range(first, first + count))
        self.spark.sql(f"INSERT INTO {self.src}.events VALUES {rows}")

    def run(self, model: str = "ev", **options):
        options.setdefault("clock", lambda: self.now)
        options.setdefault("lease_ttl_seconds", 60)
        return run_fact(self.spark, self.manifest, self.manifest.models[model], self.store, StepOptions(**options),
                        self.lines.append)

    def fact_rows(self, model: str = "ev") -> list[tuple]:
        relation = self.manifest.models[model].relation
        return sorted(tuple(r) for r in self.spark.table(relation).drop(STEP_COLUMN).collect())

    def oracle(self, model: str = "ev") -> list[tuple]:
        """The model's SELECT over every source row up to the committed position."""
        last = self.store.get(model).last
        if last is None:
            return []
        ts, id_ = f"TIMESTAMP'{last[0]}'", last[1]
        rows = self.spark.sql(f"SELECT q.* FROM ({self.manifest.models[model].sql}) AS q "
                              f"WHERE q.ts < {ts} OR (q.ts = {ts} AND q.id <= {id_})").collect()
        return sorted(tuple(r) for r in rows)


def _ts(minutes: int) -> str:
    return (T0 + timedelta(minutes=minutes)).strftime("%Y-%m-%d %H:%M:%S")


@pytest.fixture
def env(spark, make_project):
    return Env(spark, make_project)


@pytest.fixture(params=["parquet", "delta"])
def fmt_env(request, spark, make_project):
    """An Env on each table format."""
    return Env(spark, make_project, fmt=request.param)


def provider(env, model: str = "ev") -> str:
    from compiler.table_format import table_provider

    return table_provider(env.spark, env.manifest.models[model].relation)


# -- compile time -----------------------------------------------------------------------------
def test_step_sql_restricts_the_main_alias_to_last_next(env):
    model = env.manifest.models["ev"]
    before = model.ast.sql()
    plan = fact(env.manifest, model)
    assert model.ast.sql() == before, "the model's AST must not be modified"
    assert plan.source == f"{env.src}.events" and plan.position == ("ts", "id") and plan.maxstep == 3
    assert "e.ts > CAST(:last_ts AS TIMESTAMP)" in plan.step
    assert "e.id <= CAST(:next_id AS BIGINT)" in plan.step
    assert f"PARTITION ({STEP_COLUMN} = {{step}})" in plan.insert
    assert "LIMIT 3" in plan.next_sql and "ts < CAST(:upto AS TIMESTAMP)" in plan.next_sql
    assert fact(env.manifest, model) == plan, "deterministic"


def test_delta_step_replaces_its_range_on_the_facts_own_position_columns(make_project):
    files = {"lineage/src.yml": LINEAGE.format(src="s"),
             "models/ev.sql": FACT.format(src="s", extra=", table_format='delta', partition_by=['name']"),
             "models/no_pos.sql": "{{ config(materialized='fact', table_format='delta') }}\n"
                                  "SELECT e.id, e.v FROM {{ source('s', 'events') }} AS e"}
    manifest = compile_project(load_project(make_project(files)))
    plan = fact(manifest, manifest.models["ev"])
    assert plan.is_delta and plan.written_columns == ("ts", "id") and STEP_COLUMN not in plan.insert + plan.create[1]
    assert plan.insert.splitlines()[0] == f"INSERT INTO {manifest.models['ev'].relation} REPLACE WHERE"
    head = plan.insert.split("SELECT")[0]
    assert "ts > CAST(:last_ts AS TIMESTAMP)" in head and "id <= CAST(:next_id AS BIGINT)" in head and "e.ts" not in head
    assert plan.create[1].startswith(f"CREATE OR REPLACE TABLE {manifest.models['ev'].relation}\nUSING delta\nPARTITIONED BY (name)")
    assert ":step" not in plan.insert + (plan.stats_sql or "") and "WHERE" in plan.stats_sql
    with pytest.raises(CompileError, match=r"on Delta a step replaces its range .* ts of s.events is not in its output") as info:
        fact(manifest, manifest.models["no_pos"])
    assert info.value.problems[0].code == "fact-position" and "select e.ts unchanged" in info.value.problems[0].hint


def test_position_must_pass_through_a_view(spark, make_project):
    env = Env(spark, make_project, more={
        "models/v_ok.sql": "SELECT e.id, e.ts AS happened, e.v, e.k FROM {{{{ source('{src}', 'events') }}}} AS e",
        "models/v_bad.sql": "SELECT e.id, e.v, e.k FROM {{{{ source('{src}', 'events') }}}} AS e",
        "models/f_ok.sql": "{{{{ config(materialized='fact') }}}} SELECT o.id, o.happened FROM {{{{ ref('v_ok') }}}} AS o",
        "models/f_bad.sql": "{{{{ config(materialized='fact') }}}} SELECT o.id FROM {{{{ ref('v_bad') }}}} AS o",
    })
    plan = fact(env.manifest, env.manifest.models["f_ok"])
    assert plan.source == f"{env.src}.events" and "o.happened > CAST(:last_ts AS TIMESTAMP)" in plan.step
    with pytest.raises(CompileError, match="position column ts of .* does not pass through the view 'v_bad'"):
        fact(env.manifest, env.manifest.models["f_bad"])


def test_source_config_and_bad_sources(spark, make_project):
    env = Env(spark, make_project, more={
        "models/f_src.sql": "{{{{ config(materialized='fact', source='{src}.payments') }}}} "
                            "SELECT p.id FROM {{{{ source('{src}', 'events') }}}} AS e "
                            "JOIN {{{{ source('{src}', 'payments') }}}} AS p ON p.id = e.id",
        "models/f_dict.sql": "{{{{ config(materialized='fact') }}}} SELECT d.k FROM {{{{ source('{src}', 'dims') }}}} AS d",
    })
    plan = fact(env.manifest, env.manifest.models["f_src"])
    assert plan.source == f"{env.src}.payments" and "p.ts > CAST(:last_ts AS TIMESTAMP)" in plan.step
    with pytest.raises(CompileError, match="has no position columns"):
        fact(env.manifest, env.manifest.models["f_dict"])


# -- the step protocol ------------------------------------------------------------------------
def test_oracle_holds_after_every_step_and_maxstep_splits_the_backlog(fmt_env):
    env = fmt_env
    env.add_events(1, 10)
    for expected_steps in range(1, 5):
        result = env.run(max_steps=1)
        assert result.status == "success", result.message
        assert env.fact_rows() == env.oracle()
        assert len(env.store.steps("ev", 100)) == expected_steps
    assert env.store.get("ev").last == (_ts(5), 10)
    steps = env.store.steps("ev", 100)
    assert [s.rows for s in reversed(steps)] == [3, 3, 3, 1]
    assert steps[0].nulls == {} and steps[1].nulls == {"name": 1} and steps[0].query_id.startswith("mvflow:ev:")
    assert len(env.fact_rows()) == 10 and len(set(env.fact_rows())) == 10
    result = env.run()
    assert result.status == "success" and "caught up" in result.message and result.rows == 0
    assert provider(env) == env.manifest.models["ev"].table_format


def test_new_rows_are_added_in_later_runs_without_duplicates(env):
    env.add_events(1, 4)
    assert env.run().rows == 4
    env.add_events(5, 5, minutes=10)
    result = env.run()
    assert result.rows == 5 and "2 step(s)" in result.message
    assert env.fact_rows() == env.oracle() and len(env.fact_rows()) == 9
    assert any("step 2" in line for line in env.lines)


def test_late_and_null_position_rows_are_counted_said_and_taken_in_by_a_full_refresh(env):
    """A row arriving at or before the committed position (late) and one with a NULL position are
    never loaded by a step: the run, the state (status) and the step log say how many."""
    from compiler.status import step_status
    from compiler.verify import verify_model

    env.add_events(1, 4)  # maxstep 3: a step of 3 (its source rows counted again: ties at next) and one of 1
    assert env.run().rows == 4
    assert [s.detail for s in reversed(env.store.steps("ev"))] == [{"source_rows": 3, "covered": 3},
                                                                   {"source_rows": 1, "covered": 4}]
    env.spark.sql(f"INSERT INTO {env.src}.events VALUES (100, 1, 100, TIMESTAMP'{_ts(0)}'), (101, 1, 101, NULL)")
    env.add_events(5, 1, minutes=10)
    result = env.run()
    assert result.rows == 1 and "1 step(s)" in result.message
    said = (f"{env.src}.events: 1 row arrived late (at or before the committed position, after their step), not loaded:"
            " mvflow run --full-refresh -s ev takes them in; 1 row with a NULL in (ts, id) never loaded")
    assert result.message.endswith(said) and f"  ev: {said}" in env.lines
    assert said in status_lines(env.store.offsets(), env.now)[1]
    newest = env.store.steps("ev")[0]
    assert newest.detail == {"source_rows": 1, "covered": 6, "late": 1, "null_position": 1}
    assert step_status(newest, batch=False)["skipped"] == "1 late, 1 NULL position"
    missing = sorted(set(env.oracle()) - set(env.fact_rows()))
    assert [r[0] for r in missing] == [100] and set(env.fact_rows()) <= set(env.oracle())
    verdict = verify_model(env.spark, env.manifest, env.manifest.models["ev"], env.store)
    assert not verdict.ok and verdict.format().splitlines()[1].startswith(
        "      missing: 1 (keys 100) — rows that arrived at or before the committed position after their step (late)")
    assert said in env.run().message  # nothing moved: the last run's words stand
    env.add_events(6, 1, minutes=11)
    result = env.run()  # counted once: the next run's baseline includes it
    assert result.rows == 1 and "late" not in result.message and "1 row with a NULL in (ts, id)" in result.message
    result = env.run(full_refresh=True)
    assert result.rows == 7 and "late" not in result.message and env.fact_rows() == env.oracle()


def test_verify_finds_lost_and_duplicated_rows_and_tolerates_changed_inputs(fmt_env):
    from compiler.verify import verify_model

    env = fmt_env
    model = env.manifest.models["ev"]
    assert verify_model(env.spark, env.manifest, model, env.store).skipped.endswith("run the model first")
    env.add_events(1, 4)
    env.run()
    verdict = verify_model(env.spark, env.manifest, model, env.store)
    assert verdict.ok and (verdict.expected, verdict.actual, verdict.key) == (4, 4, ("id",))
    env.spark.sql(f"INSERT OVERWRITE TABLE {env.src}.dims VALUES (1, 'uno'), (2, 'two')")
    verdict = verify_model(env.spark, env.manifest, model, env.store)
    assert verdict.ok and verdict.different > 0, "a fact keeps what its inputs said when the step ran"
    head, different = verdict.format().splitlines()  # the OK and the count of differences say why in one line
    assert head.startswith("OK ") and different.startswith(f"      different: {verdict.different}")
    assert different.endswith("not a failure: a joined input changed after their step, and a fact keeps what its step saw")
    if model.table_format == "delta":
        env.spark.sql(f"INSERT INTO {model.relation} SELECT * FROM {model.relation} WHERE id = 1")
    else:
        step = env.spark.table(model.relation).select(STEP_COLUMN).first()[0]
        env.spark.sql(f"INSERT INTO {model.relation} SELECT id, ts, v2, name, '{step}' FROM {model.relation} WHERE id = 1")
    verdict = verify_model(env.spark, env.manifest, model, env.store)
    assert not verdict.ok and verdict.duplicate == 1 and verdict.samples["duplicate"] == ["1"]


def test_delay_holds_steps_back_and_status_says_why(spark, make_project):
    env = Env(spark, make_project, extra=", delay='10m'")
    env.add_events(1, 6)  # ts = T0, T0+1m, T0+1m, T0+2m, T0+2m, T0+3m
    env.now = T0 + timedelta(minutes=10, seconds=30)  # ready: older than T0 + 30 s
    assert env.run().rows == 1
    assert env.store.get("ev").last == (_ts(0), 1)
    env.now = T0 + timedelta(minutes=10, seconds=45)
    result = env.run()
    assert result.rows == 0
    assert "waiting for the delay of 600s: the oldest new row is 15s younger than now - delay" in result.message
    assert env.store.get("ev").seen == (_ts(3), 6)  # the newest pending row: status tells how far behind
    assert "waiting for the delay" in status_lines(env.store.offsets(), env.now)[1]
    assert "3 min" in status_lines(env.store.offsets(), env.now)[1]
    cli_out = CliRunner().invoke(cli, ["--project-dir", str(env.root), "status"])
    assert cli_out.exit_code == 0, cli_out.output
    assert "ev" in cli_out.output and "waiting for the delay of 600s" in cli_out.output
    env.now = T0 + timedelta(minutes=20)
    assert env.run().rows == 5 and env.fact_rows() == env.oracle()


def test_depends_on_a_source_holds_steps_back(spark, make_project):
    env = Env(spark, make_project, extra=", depends_on=['{src}.payments']")
    env.add_events(1, 8)  # ts = T0, T0+1m, T0+1m, T0+2m, ... T0+4m
    result = env.run()
    assert result.rows == 0 and f"waiting for {env.src}.payments (no rows yet)" in result.message
    spark.sql(f"INSERT INTO {env.src}.payments VALUES (1, TIMESTAMP'{_ts(2)}')")
    assert env.run().rows == 3  # events strictly before T0 + 2 min
    result = env.run()
    assert result.rows == 0 and f"waiting for {env.src}.payments, 0s behind (caught up to {_ts(2)})" in result.message
    spark.sql(f"INSERT INTO {env.src}.payments VALUES (2, TIMESTAMP'{_ts(60)}')")
    assert env.run().rows == 5 and env.fact_rows() == env.oracle()


def test_source_freshness_is_kept_for_the_run_and_asked_again_when_it_holds_steps_back(spark, make_project):
    env = Env(spark, make_project, extra=", depends_on=['{src}.payments']")  # maxstep 3
    env.add_events(1, 8)  # ts = T0, T0+1m, T0+1m, T0+2m, ... T0+4m
    payments = f"{env.src}.payments"
    spark.sql(f"INSERT INTO {payments} VALUES (1, TIMESTAMP'{_ts(2)}')")

    def after_first_commit(payment: str):
        done = []

        def phase(point: str) -> None:
            if point == "fact:committed" and not done:
                done.append(point)
                spark.sql(f"INSERT OVERWRITE TABLE {payments} VALUES (2, TIMESTAMP'{payment}')")
        return phase

    # payments move on during the step: the kept freshness stops the next step, so it is asked again
    result = env.run(phase=after_first_commit(_ts(60)))
    assert result.rows == 8 and "3 step(s)" in result.message and env.fact_rows() == env.oracle()

    # a freshness that went back (only a test can do that) is not seen before the next run
    env.add_events(9, 4, minutes=10)  # ts = T0+14m .. T0+16m
    result = env.run(phase=after_first_commit(_ts(15)))
    assert result.rows == 4 and "2 step(s)" in result.message


def test_unbuilt_mv_dependency_waits_until_refreshed(spark, make_project):
    env = Env(spark, make_project, extra=", depends_on=['wide']", more={
        "models/wide.sql": "{{{{ config(materialized='mv') }}}} SELECT d.k, d.name FROM {{{{ source('{src}', 'dims') }}}} AS d",
    })
    env.add_events(1, 4)
    result = env.run()
    assert result.status == "success" and result.rows == 0
    assert "waiting for wide (never refreshed)" in result.message
    assert "waiting for wide (never refreshed)" in env.store.get("ev").state
    # an MV refresh commits one topic per input, "<mv>:<input>"
    lease = env.store.acquire(f"wide:{env.src}.dims", "mv-runner", 60, env.now)
    env.store.commit(lease, (_ts(1), 0), 2, "ok", env.now)
    assert env.run().rows == 1  # ts < T0 + 1 min


def test_second_runner_is_refused_naming_the_holder(env):
    env.add_events(1, 2)
    env.store.acquire("ev", "host-a:123:abc", 60, env.now)
    result = env.run()
    assert result.status == "error" and "host-a:123:abc" in result.message and "[lease-held]" in result.message
    assert not env.spark.catalog.tableExists(env.manifest.models["ev"].relation)


def test_stale_lease_is_taken_over_and_the_old_holder_cannot_commit(fmt_env):
    env = fmt_env
    env.add_events(1, 5)
    outcome = {}

    def stall(point: str) -> None:
        # runner A stalls after writing its step; its lease (60 s) expires, runner B takes over
        if point == "fact:written" and "b" not in outcome:
            env.now += timedelta(minutes=5)
            outcome["b"] = env.run(holder="runner-b")

    result_a = env.run(holder="runner-a", phase=stall)
    assert outcome["b"].status == "success" and outcome["b"].rows == 5
    assert result_a.status == "error" and "[fenced]" in result_a.message and "taken over" in result_a.message
    assert env.fact_rows() == env.oracle() and len(env.fact_rows()) == 5
    assert env.store.get("ev").hostid == ""
    assert any("redo" in line for line in env.lines), "B redid A's planned step"


def test_full_refresh_rebuilds_and_a_table_without_offsets_or_offsets_without_a_table_are_refused(fmt_env):
    env = fmt_env
    env.add_events(1, 5)
    env.run()
    before = env.fact_rows()
    result = env.run(full_refresh=True)
    assert result.rows == 5 and env.fact_rows() == before
    env.store.reset("ev")
    result = env.run()
    assert result.status == "error" and "--full-refresh" in result.message
    assert env.fact_rows() == before
    env.run(full_refresh=True)
    offset = env.store.get("ev")
    relation = env.manifest.models["ev"].relation
    env.spark.sql(f"DROP TABLE {relation}")  # and offsets without their table: refused, nothing made
    env.add_events(6, 2)
    result = env.run()
    assert result.status == "error" and "[fact-table-missing]" in result.message and "--full-refresh" in result.message
    assert not env.spark.catalog.tableExists(relation) and env.store.get("ev").last == offset.last
    assert env.run(full_refresh=True).rows == 7 and env.fact_rows() == env.oracle()


def test_switching_a_facts_table_format_needs_a_full_refresh(env):
    env.add_events(1, 5)
    assert env.run().rows == 5 and provider(env) == "parquet"
    rows = env.fact_rows()
    env.switch("delta")
    result = env.run()
    assert result.status == "error" and "[fact-format]" in result.message and "--full-refresh" in result.message
    assert env.run(full_refresh=True).rows == 5 and provider(env) == "delta" and env.fact_rows() == rows
    env.add_events(6, 2, minutes=10)
    assert env.run().rows == 2 and env.fact_rows() == env.oracle()
    relation = env.manifest.models["ev"].relation
    versions = env.spark.sql(f"DESCRIBE HISTORY {relation}").count()
    assert env.run(full_refresh=True).rows == 7 and env.fact_rows() == env.oracle()
    assert env.spark.sql(f"DESCRIBE HISTORY {relation}").count() > versions, "replaced in place: the history stays"
    env.switch("parquet")
    assert env.run(full_refresh=True).rows == 7 and provider(env) == "parquet" and env.fact_rows() == env.oracle()


def test_compile_writes_step_and_bounds_files_deterministically(make_project):
    root = make_project({"lineage/src.yml": LINEAGE.format(src="s"), "models/ev.sql": FACT.format(src="s", extra="")})
    runner = CliRunner()
    first = runner.invoke(cli, ["--project-dir", str(root), "compile"])
    assert first.exit_code == 0, first.output
    step, bounds = (root / "target/run/ev/step.sql"), (root / "target/run/ev/bounds.sql")
    texts = step.read_text(), bounds.read_text()
    assert ":next_id" in texts[0] and f"PARTITION ({STEP_COLUMN} = {{step}})" in texts[0]
    assert "LIMIT 3" in texts[1] and ":upto" in texts[1]
    assert runner.invoke(cli, ["--project-dir", str(root), "compile"]).exit_code == 0
    assert (step.read_text(), bounds.read_text()) == texts
    manifest = (root / "target/manifest.json").read_text()
    assert '"run_path": "run/ev/"' in manifest


def test_before_and_after_hooks_run_with_each_step(spark, make_project):
    hooks = (", before=\"INSERT INTO {src}.audit SELECT 'before', :next_id\""
             ", after=\"INSERT INTO {src}.audit SELECT 'after', :next_id\"")
    env = Env(spark, make_project, extra=hooks)
    spark.sql(f"CREATE TABLE {env.src}.audit (hook STRING, next_id BIGINT) USING parquet")
    env.add_events(1, 5)
    assert env.run().rows == 5
    audit = sorted(tuple(r) for r in spark.table(f"{env.src}.audit").collect())
    assert audit == [("after", 3), ("after", 5), ("before", 3), ("before", 5)]



def test_the_full_refresh_config_overrides_the_flag(spark, make_project):
    """dbt's ``full_refresh`` config: false keeps a fact's history through ``--full-refresh``
    (run and plan), true rebuilds it at every run; another value is an error at its line."""
    env = Env(spark, make_project, extra=", full_refresh=false")
    env.add_events(1, 5)
    assert env.run(max_steps=None).rows == 5
    steps = len(env.store.steps("ev", limit=100))
    runner = CliRunner()

    def cli_run(*args: str):
        done = runner.invoke(cli, ["--project-dir", str(env.root), *args])
        assert done.exit_code == 0, done.output
        return done.output

    assert "rebuild" not in cli_run("plan", "--full-refresh", "--select", "ev")
    cli_run("run", "--full-refresh", "--select", "ev")
    assert len(env.store.steps("ev", limit=100)) == steps and env.fact_rows() == env.oracle()

    (env.root / "models/ev.sql").write_text(FACT.format(src=env.src, extra=", full_refresh=true"))
    assert "config(full_refresh=true)" in cli_run("plan", "--select", "ev")
    cli_run("run", "--select", "ev")
    assert len(env.store.steps("ev", limit=100)) > steps and env.fact_rows() == env.oracle()

    (env.root / "models/ev.sql").write_text(FACT.format(src=env.src, extra=", full_refresh='no'"))
    done = runner.invoke(cli, ["--project-dir", str(env.root), "compile"])
    assert "models/ev.sql:2: [bad-config] full_refresh must be true or false, got 'no'" in str(done.exception)
