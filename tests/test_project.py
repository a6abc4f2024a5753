"""Project loading (project.yml, targets, folder defaults, files) and source declarations
(lineage/*.yml). No Spark."""

from __future__ import annotations

from pathlib import Path

import pytest

from compiler.errors import ProjectError
from compiler.project import DEFAULT_SPARK_CONF, load_project
from compiler.sources import ChangeFeed, Column, load_sources, parse_duration

ROOT = Path(__file__).resolve().parent.parent


def problems_of(call) -> list[tuple[int | None, str, str]]:
    """(line, code, message) of every problem a call raises as a ProjectError."""
    with pytest.raises(ProjectError) as info:
        call()
    return [(p.line, p.code, p.message) for p in info.value.problems]


# -- project.yml -----------------------------------------------------------------------------

def test_the_demo_project_loads(monkeypatch):
    for name in ("MVFLOW_SPARK_MASTER", "MVFLOW_DRIVER_MEMORY", "MVFLOW_WAREHOUSE", "MVFLOW_STATE"):
        monkeypatch.delenv(name, raising=False)
    project = load_project(ROOT)
    assert (project.name, project.version, project.default_target) == ("marketplace", "1.0", "local")
    assert (project.model_paths, project.macro_paths, project.lineage_paths, project.target_path) == \
        (("models",), ("macros",), ("lineage",), "target")
    assert project.vars == {"price_kind": "retail"}
    local = project.target()
    assert local.spark.master == "local[*]" and local.spark.app_name == "mvflow-demo"
    assert local.spark.conf["spark.driver.memory"] == "2g"
    assert local.spark.conf["spark.sql.shuffle.partitions"] == "8"
    assert local.spark.conf["spark.ui.enabled"] == "false"  # embedded default: no Spark UI
    assert local.spark.warehouse_dir == ROOT / ".mvflow" / "local" / "warehouse"
    assert local.spark.metastore_dir == ROOT / ".mvflow" / "local" / "metastore"
    assert local.state.path == ROOT / ".mvflow" / "local" / "state.sqlite"
    cluster = project.target("cluster")
    assert cluster.spark.master == "spark://spark-master:7077"
    assert cluster.spark.warehouse_dir == Path("/data/warehouse")
    assert cluster.state.path == Path("/data/mvflow/state.sqlite")
    assert cluster.spark.conf["spark.sql.shuffle.partitions"] == "200"


def test_env_vars_override_defaults_in_project_yml(monkeypatch):
    monkeypatch.setenv("MVFLOW_SPARK_MASTER", "local[2]")
    monkeypatch.setenv("MVFLOW_WAREHOUSE", "/elsewhere/wh")
    project = load_project(ROOT)
    assert project.target().spark.master == "local[2]"
    assert project.target("cluster").spark.warehouse_dir == Path("/elsewhere/wh")


def test_a_minimal_project_gets_the_embedded_default(make_project):
    project = load_project(make_project({"project.yml": "name: tiny\n"}))
    assert list(project.targets) == ["local"] and project.default_target == "local"
    target = project.target()
    assert target.spark.master == "local[*]" and target.spark.database == "default"
    assert dict(target.spark.conf) == DEFAULT_SPARK_CONF
    assert target.spark.warehouse_dir == project.root / ".mvflow" / "local" / "warehouse"
    assert target.state.type == "sqlite" and target.state.offsets_table == "offsets"
    assert project.version == "0" and project.vars == {}


def test_paths_targets_and_state_settings(make_project, tmp_path):
    project = load_project(make_project({"project.yml": f"""
        name: p
        paths:
          models: [models, more_models]
          target: out
        state:
          offsets_table: my_offsets
        default_target: dev
        targets:
          dev:
            spark:
              master: local[1]
              warehouse_dir: wh
              metastore_dir: {tmp_path}/ms
              conf:
                spark.sql.adaptive.enabled: false
                spark.sql.shuffle.partitions: 3
            state:
              path: state/dev.sqlite
          prod: {{}}
    """}))
    dev = project.target()
    assert project.model_paths == ("models", "more_models") and project.target_dir == project.root / "out"
    assert dev.spark.warehouse_dir == project.root / "wh" and dev.spark.metastore_dir == tmp_path / "ms"
    assert dev.spark.conf["spark.sql.adaptive.enabled"] == "false"  # YAML booleans as Spark writes them
    assert dev.spark.conf["spark.sql.shuffle.partitions"] == "3"
    assert dev.state.path == project.root / "state" / "dev.sqlite"
    assert dev.state.offsets_table == "my_offsets" and project.target("prod").state.offsets_table == "my_offsets"


def test_unknown_target_names_the_line_and_a_close_one(make_project):
    project = load_project(make_project({"project.yml": "name: p\ntargets:\n  local: {}\n  production: {}\n"}))
    with pytest.raises(ProjectError) as info:
        project.target("prodution")
    problem = info.value.problems[0]
    assert (problem.path, problem.line, problem.code) == ("project.yml", 2, "unknown-target")
    assert problem.hint == "did you mean 'production'? targets defined: local, production"


def test_all_problems_of_project_yml_are_reported_together(make_project):
    root = make_project({"project.yml": """
        name: [p]
        paths: {models: 3, modles: x}
        vars: [a]
        default_target: nope
        targets:
          local:
            sparks: {}
            spark:
              conf: [x]
    """})
    assert sorted(problems_of(lambda: load_project(root))) == sorted([
        (1, "bad-value", "'name' must be a single value, not a list"),
        (2, "unknown-key", "unknown key 'modles' in paths"),
        (2, "bad-value", "paths.models must be a folder or a list of folders"),
        (3, "bad-value", "'vars' must be a mapping (key: value lines), found a list"),
        (9, "bad-value", "target 'local' spark conf must be a mapping (key: value lines), found a list"),
        (7, "unknown-key", "unknown key 'sparks' in target 'local'"),
        (4, "unknown-target", "default_target 'nope' is not a target"),
    ])


def test_missing_name_and_non_mapping_files(make_project):
    assert problems_of(lambda: load_project(make_project({"project.yml": "version: 1\n"}))) == \
        [(1, "missing-key", "project.yml has no 'name'")]
    assert problems_of(lambda: load_project(make_project({"project.yml": "- a\n"}))) == \
        [(1, "yaml", "project.yml must be a mapping")]


def test_model_folders_that_do_not_exist(make_project):
    project = load_project(make_project({"project.yml": "name: p\n", "lineage/s.yml": "sources: []\n"}))
    assert [(p.line, p.code, p.message) for p in project.missing_model_paths()] == \
        [(1, "no-models", "paths.models: the project has no folder 'models'")]
    project = load_project(make_project({"project.yml": "name: p\npaths:\n  macros: m\n  models: models\n",
                                         "models/a.sql": "select 1 as x"}))
    assert project.missing_model_paths() == []


def test_folder_defaults_with_lines(make_project):
    project = load_project(make_project({"project.yml": """
        name: p
        models:
          +materialized: view
          +tags: [all]
          marts:
            +materialized: table
            +tags: mart
            finance:
              +schema: fin
    """}))
    assert project.defaults_with_lines("marts/finance/x.sql") == {
        "materialized": ("table", 6),
        "tags": (["all", "mart"], 7),
        "schema": ("fin", 9),
    }
    assert project.defaults_for("x.sql") == {"materialized": "view", "tags": ["all"]}
    assert project.defaults_for("other/x.sql") == {"materialized": "view", "tags": ["all"]}


def test_files_are_found_under_every_path_sorted(make_project):
    root = make_project({
        "project.yml": "name: p\npaths:\n  models: [models, extra]\n",
        "models/b.sql": "select 1 as x",
        "models/sub/a.sql": "select 1 as x",
        "models/notes.md": "not a model",
        "extra/c.sql": "select 1 as x",
        "models/docs.yml": "models: []",
    })
    project = load_project(root)
    assert [project.relative(p) for p in project.files("models", (".sql",))] == \
        ["extra/c.sql", "models/b.sql", "models/sub/a.sql"]
    assert [project.relative(p) for p in project.files("models", (".yml", ".yaml"))] == ["models/docs.yml"]
    assert project.files("macros", (".sql",)) == []  # a missing folder is no error


# -- lineage/*.yml ---------------------------------------------------------------------------

def test_the_demo_sources():
    sources = load_sources(load_project(ROOT))
    assert list(sources) == sorted(sources) and len(sources) == 7
    offers = sources["stage.offers"]
    assert (offers.change_mode, offers.position, offers.deleted) == ("position", ("updated_at", "change_id"), "is_deleted")
    assert offers.columns[0] == Column("offer_id", "bigint", "Offer id.")
    assert offers.column_types()["base_price"] == "decimal(12,2)"
    assert (offers.path, offers.line) == ("lineage/marketplace.yml", 3)
    warehouses = sources["stage.warehouses"]
    assert warehouses.change_mode == "changes"
    assert warehouses.changes == ChangeFeed("stage.warehouses_changes", ("changed_at", "change_id"))
    assert sources["stage.categories"].change_mode == "dictionary"
    orders = sources["stage.orders"]
    assert (orders.delay_seconds, orders.depends_on) == (60, ("stage.offers",))


def test_source_shorthands(make_project):
    project = load_project(make_project({"lineage/s.yml": """
        sources:
          - name: t
            database: db
            primary_key: "a, b"
            position: ts
            delay: 2h
            depends_on: db.u
          - {name: u, database: db, primary_key: [k], dictionary: true}
    """}))
    t = load_sources(project)["db.t"]
    assert (t.primary_key, t.position, t.delay_seconds, t.depends_on) == (("a", "b"), ("ts",), 7200, ("db.u",))
    assert t.column_types() is None


@pytest.mark.parametrize(
    "body, expected",
    [
        ("primary_key: [id]\n  position: [ts]\n  changes: {table: d.c, position: [p]}",
         (6, "change-mode", "source d.t must declare exactly one change mode, found 2: position, changes")),
        ("primary_key: [id]", (2, "change-mode", "source d.t must declare exactly one change mode, found 0: none")),
        ("position: [ts]", (2, "missing-key", "source d.t has no primary_key")),
        ("primary_key: [1]\n  dictionary: true", (4, "bad-value", "source d.t: primary_key must be column names, found [1]")),
        ("primary_key: [id]\n  dictionary: true\n  delay: soon",
         (6, "bad-value", "source d.t: invalid delay 'soon'")),
        ("primary_key: [id]\n  changes: {table: d.c}", (5, "missing-key", "source d.t changes has no 'position'")),
        ("primary_key: [id]\n  changes: d.c", (5, "bad-value", "source d.t: changes must be 'cdf' or a mapping with table and position, found 'd.c'")),
        ("primary_key: [id]\n  dictionary: true\n  colour: red", (6, "unknown-key", "unknown key 'colour' in source")),
        ("primary_key: [id]\n  dictionary: true\n  columns: [a]",
         (6, "bad-value", "source d.t: each column needs a name, found 'a'")),
        ("primary_key: [id]\n  dictionary: true\n  columns:\n    - {name: a, kind: int}",
         (7, "unknown-key", "unknown key 'kind' in source d.t column")),
        ("primary_key: [id]\n  dictionary: true\n  depends_on: {a: 1}",
         (6, "bad-value", "source d.t: depends_on must be a list of names")),
        ("primary_key: [id]\n  dictionary: true\n  depends_on: [d.nope]",
         (2, "unknown-source", "source d.t depends on unknown source d.nope")),
    ],
)
def test_invalid_sources(make_project, body, expected):
    project = load_project(make_project({"lineage/s.yml": "sources:\n- name: t\n  database: d\n  " + body + "\n"}))
    # file lines: 1 sources:, 2 - name: t, 3 database: d, 4.. the body; problems point at the key at fault
    found = problems_of(lambda: load_sources(project))
    assert expected in found, found


def test_a_source_declared_twice(make_project):
    project = load_project(make_project({
        "lineage/a.yml": "sources:\n  - {name: t, database: d, primary_key: [k], dictionary: true}\n",
        "lineage/b.yml": "sources:\n\n  - {name: t, database: d, primary_key: [k], dictionary: true}\n",
    }))
    with pytest.raises(ProjectError) as info:
        load_sources(project)
    problem = info.value.problems[0]
    assert (problem.path, problem.line, problem.code) == ("lineage/b.yml", 3, "duplicate-source")
    assert "first at lineage/a.yml:2" in problem.message


def test_a_lineage_file_without_sources(make_project):
    project = load_project(make_project({"lineage/a.yml": "tables: []\n", "lineage/empty.yml": ""}))
    assert problems_of(lambda: load_sources(project)) == [(1, "yaml", "a lineage file must hold 'sources:', a list of tables")]


@pytest.mark.parametrize(
    "value, seconds",
    [("30s", 30), ("10m", 600), ("2h", 7200), ("1d", 86400), (45, 45), ("0", 0), (" 5 m ", 300),
     ("soon", None), ("-5", None), ("1.5h", None), ("10 minutes", None), (None, None)],
)
def test_parse_duration(value, seconds):
    assert parse_duration(value) == seconds


# -- YAML aliases ----------------------------------------------------------------------------
def _alias_bomb(indent: str, levels: int = 8) -> str:
    """Nine aliases of nine aliases of ... (9**9 values from ~800 bytes), each level a key at ``indent``."""
    lines = [f'{indent}lol0: &lol0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"{indent}lol{i}: &lol{i} [{', '.join([f'*lol{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("path, text", [
    ("project.yml", "name: p\nvars:\n" + _alias_bomb("  ")),
    ("dbt_project.yml", "name: p\nprofile: p\nvars:\n" + _alias_bomb("  ")),
    ("lineage/stage.yml", "sources: []\nbomb:\n" + _alias_bomb("  ")),
    ("models/a.yml", "models:\n  - name: a\n    meta:\n" + _alias_bomb("      ")),
], ids=["project.yml", "dbt_project.yml", "lineage", "model docs"])
def test_a_yaml_alias_bomb_is_refused_before_it_expands(path: str, text: str, tmp_path: Path, capsys):
    import time

    from compiler.cli import main

    files = {"project.yml": "name: p\n", "models/a.sql": "select 1 as id\n", path: text}
    if path == "dbt_project.yml":
        files.pop("project.yml")
        files["profiles.yml"] = "p:\n  target: dev\n  outputs:\n    dev: {type: spark, method: session, schema: s, host: x}\n"
    for name, content in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(content)
    started = time.monotonic()

    with pytest.raises(SystemExit) as exit_info:
        main(["--project-dir", str(tmp_path), "compile"])

    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and f"{path}:" in err and "[yaml-aliases]" in err and "Traceback" not in err, err
    assert time.monotonic() - started < 10  # unbounded: 90 s and 1.2 GB
    assert not (tmp_path / "target").exists()


def test_yaml_aliases_that_repeat_a_little_are_fine(tmp_path: Path):
    (tmp_path / "project.yml").write_text("name: p\nvars:\n  base: &base {a: 1, b: [1, 2, 3]}\n"
                                          "  x: {<<: *base, c: 2}\n  y: [*base, *base]\n")
    variables = load_project(tmp_path).vars
    assert variables["x"] == {"a": 1, "b": [1, 2, 3], "c": 2} and variables["y"] == [variables["base"]] * 2
