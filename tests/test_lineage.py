"""Column lineage (compiler/lineage.py) on tiny projects, the demo project, the CLI, and a
generated 1,000-model project (``python tests/test_lineage.py 1000`` times it)."""

from __future__ import annotations

import dataclasses
import json
import random
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlglot import parse_one

from compiler.artifacts import write_artifacts
from compiler.cli import cli
from compiler.compile import compile_project
from compiler.lineage import ColumnRef, lineage, model_lineage
from compiler.project import load_project

ROOT = Path(__file__).resolve().parent.parent

SOURCES = """
sources:
  - name: offers
    database: stage
    primary_key: [offer_id]
    position: [updated_at]
    columns:
      - {name: offer_id, type: bigint}
      - {name: shop_id, type: bigint}
      - {name: price, type: "decimal(12,2)"}
      - {name: title, type: string}
      - {name: updated_at, type: timestamp}
  - name: shops
    database: stage
    primary_key: [shop_id]
    dictionary: true
    columns:
      - {name: shop_id, type: bigint}
      - {name: name, type: string}
      - {name: region, type: string}
      - {name: note, type: string}
  - name: blobs
    database: stage
    primary_key: [id]
    dictionary: true
"""


def _lineage(make_project, models: dict[str, str]):
    root = make_project({"lineage/s.yml": SOURCES, **{f"models/{k}.sql": v for k, v in models.items()}})
    manifest = compile_project(load_project(root))
    return manifest, lineage(manifest)


def _edges(edges) -> list[str]:
    return [f"{e.ref} {e.transform}" for e in edges]


def test_paths_through_several_models_joins_expressions_and_aliases(make_project):
    _, result = _lineage(make_project, {
        "base": "select o.offer_id as id, o.shop_id, o.price * 2 as double_price from {{ source('stage', 'offers') }} o",
        "named": """
            select b.id, s.name as shop_name, upper(s.region) as region, b.double_price
            from {{ ref('base') }} b join {{ source('stage', 'shops') }} as s on s.shop_id = b.shop_id
            where s.note is null""",
        "top": "select n.id as offer, n.shop_name as shop, n.double_price + 1 as p from {{ ref('named') }} n",
    })
    assert _edges(result.models["top"].columns["offer"]) == ["named.id copy"]
    assert _edges(result.upstream(ColumnRef("model.top", "offer"))) == ["base.id copy", "named.id copy", "stage.offers.offer_id copy"]
    assert _edges(result.upstream(ColumnRef("model.top", "p"))) == [
        "base.double_price expression", "named.double_price expression", "stage.offers.price expression"]
    assert _edges(result.source_columns(ColumnRef("model.top", "shop"))) == ["stage.shops.name copy"]
    assert _edges(result.models["named"].columns["region"]) == ["stage.shops.region expression"]
    # Filters and join keys are used, though they reach no output column.
    assert result.models["named"].uses["source.stage.shops"] == ("name", "note", "region", "shop_id")
    assert result.models["named"].uses["model.base"] == ("double_price", "id", "shop_id")
    assert _edges(result.downstream(ColumnRef("source.stage.offers", "offer_id"))) == [
        "base.id copy", "named.id copy", "top.offer copy"]
    # upper() is a string whatever it reads; decimal arithmetic is left unknown (see compiler/spark_types.py)
    assert result.models["named"].types == {"id": "bigint", "shop_name": "string", "region": "string", "double_price": None}


def test_star_is_expanded_where_the_schema_is_known(make_project):
    _, result = _lineage(make_project, {
        "s1": "select * from {{ source('stage', 'shops') }}",
        "s2": "with c as (select s.*, 1 as one from {{ ref('s1') }} s) select c.* from c",
    })
    assert list(result.models["s2"].columns) == ["shop_id", "name", "region", "note", "one"]
    assert _edges(result.upstream(ColumnRef("model.s2", "region"))) == ["s1.region copy", "stage.shops.region copy"]
    assert result.models["s2"].columns["one"] == ()
    assert result.models["s2"].unknown == {}


def test_ctes_subqueries_unions_and_aggregates(make_project):
    _, result = _lineage(make_project, {
        "agg": """
            with o as (select shop_id, price from {{ source('stage', 'offers') }})
            select d.shop_id, d.total,
                   (select max(s.name) from {{ source('stage', 'shops') }} s) as any_name
            from (select o.shop_id, sum(o.price) as total from o group by o.shop_id) d""",
        "u": """
            select offer_id as k, title as label from {{ source('stage', 'offers') }}
            union all
            select shop_id, name from {{ source('stage', 'shops') }}""",
    })
    columns = result.models["agg"].columns
    assert _edges(columns["shop_id"]) == ["stage.offers.shop_id copy"]
    assert _edges(columns["total"]) == ["stage.offers.price aggregate"]
    assert _edges(columns["any_name"]) == ["stage.shops.name aggregate"]
    assert _edges(result.models["u"].columns["label"]) == ["stage.offers.title copy", "stage.shops.name copy"]


def test_unknown_schemas_are_reported_not_guessed(make_project):
    manifest, result = _lineage(make_project, {
        "b1": "select * from {{ source('stage', 'blobs') }}",
        "b2": "select x.id, x.payload from {{ source('stage', 'blobs') }} x",
        "b3": "select id, title from {{ source('stage', 'blobs') }} x join {{ source('stage', 'offers') }} o on o.offer_id = x.id",
    })
    assert result.models["b1"].columns == {}
    assert result.models["b1"].unknown == {"*": "`*` cannot be expanded (table stage.blobs has no declared columns)"}
    assert _edges(result.models["b2"].columns["payload"]) == ["stage.blobs.payload copy"]
    assert result.models["b2"].unknown["payload"] == "table stage.blobs has no declared columns"
    # `title` is only in offers, so it resolves; `id` could be either table.
    assert _edges(result.models["b3"].columns["title"]) == ["stage.offers.title copy"]
    assert result.models["b3"].columns["id"] == ()
    assert "stage.blobs has no declared columns" in result.models["b3"].unknown["id"]


def test_the_callers_ast_is_not_modified():
    query = parse_one("select * from d.t", read="spark")
    before = query.sql()
    result = model_lineage(query, {"d": {"t": {"a": "int"}}})
    assert list(result.columns) == ["a"] and query.sql() == before


def test_demo_project_lineage_in_manifest_and_lineage_json(tmp_path):
    manifest = compile_project(load_project(ROOT))
    manifest.project = dataclasses.replace(manifest.project, target_path=str(tmp_path / "target"))
    write_artifacts(manifest)
    data = json.loads((tmp_path / "target" / "lineage.json").read_text())
    wide = data["models"]["offers_wide"]
    assert wide["columns"]["region_name"] == [{"node": "source.stage.regions", "column": "name", "transform": "copy"}]
    # The MV uses categories.category_id (a join key) and name, nothing else of the dictionary.
    assert wide["uses"]["source.stage.categories"] == ["category_id", "name"]
    enriched = data["models"]["orders_enriched"]["sources"]["region_name"]
    assert enriched == [{"node": "source.stage.regions", "column": "name", "transform": "copy"}]
    entry = json.loads((tmp_path / "target" / "manifest.json").read_text())["models"]["shop_stats"]
    assert entry["lineage"]["columns"]["avg_price"][0]["transform"] == "aggregate"


# -- column types: Spark is the oracle ---------------------------------------------------------
TYPED = """
sources:
  - name: typed
    database: stage
    primary_key: [i]
    dictionary: true
    columns:
      - {name: i, type: int}
      - {name: b, type: bigint}
      - {name: sm, type: smallint}
      - {name: x, type: double}
      - {name: f, type: float}
      - {name: m, type: "decimal(12,2)"}
      - {name: s, type: string}
      - {name: ts, type: timestamp}
      - {name: flag, type: boolean}
"""
TYPED_MODELS = {
    "agg": """select count(*) as n, count(distinct i) as nd, sum(i) as si, sum(b) as sb, sum(sm) as ssm, sum(x) as sx,
                     sum(m) as sm_, avg(i) as ai, avg(x) as ax, avg(m) as am, max(m) as mm, min(ts) as mt, max(s) as ms,
                     sum(m * 2) as s2, round(avg(x), 2) as r
              from {{ source('stage', 'typed') }}""",
    "rows": """select i, x, m, s, ts, f, i + b as ib, i * 2 as i2, i / 2 as half, i % 3 as im, f + 1 as f1, x - i as xi,
                      -i as neg, coalesce(i, 0) as ci, coalesce(m, 0) as cm, if(flag, x, 0) as ix,
                      case when i > 0 then b else i end as cb, upper(s) as us, length(s) as ls, i = 1 as eq,
                      concat(s, '-', i) as cs, substring(s, 1, 2) as ss, concat(array(i), array(b)) as ca,
                      not flag as nf, 1.50 as lit, 'a' as ls2, 7 as seven, cast(m as double) as md, m * 2 as m2,
                      m + m as mpm, abs(m) as absm, row_number() over (order by i) as rn,
                      sum(x) over (partition by s) as wx, floor(x) as fl, date(ts) as d
               from {{ source('stage', 'typed') }}""",
    "over": """with t as (select i * 2 as y, m from {{ source('stage', 'typed') }})
               select a.n + 1 as n1, a.am, r.ib, sum(t.y) over () as sy, t.m
               from {{ ref('agg') }} as a cross join {{ ref('rows') }} as r cross join t""",
}
# Columns whose type mvflow must know (the rest may be unknown, never wrong).
MUST_KNOW = {"n", "nd", "si", "sb", "ssm", "sx", "sm_", "ai", "ax", "am", "mm", "mt", "i", "x", "m", "ib", "half",
             "ci", "ix", "cb", "us", "eq", "cs", "ss", "lit", "md", "rn", "wx", "n1", "sy"}


def _spark_types(spark, manifest, database: str, sources: dict[str, list]) -> dict[str, dict[str, str]]:
    """Every model built as a view in ``database`` over empty source tables: Spark's column types."""
    from sqlglot import exp

    from compiler.parse import pretty

    spark.sql(f"CREATE DATABASE IF NOT EXISTS {database}")
    moved = {}
    for sid, columns in sources.items():
        table = f"{database}.{sid.split('.')[1]}"
        spark.sql(f"CREATE TABLE IF NOT EXISTS {table} ({', '.join(f'`{c.name}` {c.type}' for c in columns)}) USING parquet")
        moved[sid] = table
    found = {}
    for name in manifest.order():
        model = manifest.models[name]
        if model.kind.name == "seed":  # its SELECT reads the text rows of its file
            spark.sql(f"CREATE TABLE IF NOT EXISTS {database}.mvflow_seed_{name} "
                      f"({', '.join(f'`{c}` string' for c in model.columns)}) USING parquet")
            moved[f"mvflow_seed_{name}"] = f"{database}.mvflow_seed_{name}"
        moved[model.relation] = f"{database}.{name}"
        query = pretty(exp.replace_tables(model.ast, moved, dialect="spark"))
        spark.sql(f"CREATE OR REPLACE VIEW {moved[model.relation]} AS {query}")
        found[name] = {f.name: f.dataType.simpleString() for f in spark.table(moved[model.relation]).schema}
    return found


def _check_types(spark, manifest, database: str) -> dict[str, dict[str, str | None]]:
    """Lineage's types of every model, each checked against Spark's: unknown or equal."""
    derived = {name: dict(entry.types) for name, entry in lineage(manifest).models.items()}
    sources = {sid: list(s.columns) for sid, s in manifest.sources.items() if s.columns}
    actual = _spark_types(spark, manifest, database, sources)
    wrong = {(name, column): (derived[name].get(column), spark_type)
             for name, columns in actual.items() for column, spark_type in columns.items()
             if derived[name].get(column) not in (None, spark_type)}
    assert not wrong, wrong
    return derived


def test_column_types_match_what_spark_reports(spark, make_project):
    root = make_project({"lineage/s.yml": TYPED, **{f"models/{k}.sql": v for k, v in TYPED_MODELS.items()}})
    derived = _check_types(spark, compile_project(load_project(root)), f"types_{abs(hash(str(root))) % 10_000}")
    known = {column for types in derived.values() for column, t in types.items() if t}
    assert MUST_KNOW <= known, sorted(MUST_KNOW - known)
    assert (derived["agg"]["n"], derived["agg"]["si"], derived["agg"]["ax"], derived["rows"]["x"]) == \
        ("bigint", "bigint", "double", "double")
    assert (derived["agg"]["am"], derived["rows"]["m"]) == ("decimal(16,6)", "decimal(12,2)")


def test_demo_models_types_match_what_spark_reports(spark):
    manifest = compile_project(load_project(ROOT))
    derived = _check_types(spark, manifest, "types_demo")
    unknown = [(name, column) for name, types in derived.items() for column, t in types.items() if t is None]
    assert not unknown, unknown
    assert derived["stg_shops"]["rating"] == "double" and derived["shop_stats"]["offers"] == "bigint"


def test_cli_prints_upstream_and_downstream(make_project):
    root = make_project({
        "lineage/s.yml": SOURCES,
        "models/a.sql": "select o.offer_id, o.price from {{ source('stage', 'offers') }} o",
        "models/b.sql": "select a.offer_id as id, a.price * 2 as p2 from {{ ref('a') }} a",
    })
    runner = CliRunner()
    up = runner.invoke(cli, ["--project-dir", str(root), "lineage", "b.p2", "--upstream"])
    assert up.exit_code == 0, up.output
    assert up.output == textwrap.dedent("""\
        b.p2
          <- a.price (expression)
            <- stage.offers.price (copy)
        """)
    down = runner.invoke(cli, ["--project-dir", str(root), "lineage", "stage.offers.price", "--downstream"])
    assert down.exit_code == 0, down.output
    assert "-> a.price (copy)\n    -> b.p2 (expression)" in down.output
    whole = runner.invoke(cli, ["--project-dir", str(root), "lineage", "b"])
    assert "b.id" in whole.output and "b.p2" in whole.output
    missing = runner.invoke(cli, ["--project-dir", str(root), "lineage", "b.nope"])
    assert missing.exit_code != 0 and "no column 'nope'" in str(missing.exception or missing.output)


# --- a generated project for scale ---------------------------------------------------------------

GEN_COLUMNS = ["id", "c1", "c2", "c3", "c4", "c5"]


def generate_project(root: Path, models: int, sources: int = 8, seed: int = 7) -> Path:
    """A layered project of ``models`` models over ``sources`` sources: joins, expressions,
    CTEs, aggregates and ``*``, every model with the columns ``id, c1..c5``."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    (root / "project.yml").write_text("name: generated\n")
    lines = ["sources:"]
    for s in range(sources):
        lines += [f"  - name: src{s}", "    database: raw", "    primary_key: [id]", "    position: [id]",
                  "    columns:"] + [f"      - {{name: {c}, type: bigint}}" for c in GEN_COLUMNS]
    (root / "lineage").mkdir(exist_ok=True)
    (root / "lineage" / "gen.yml").write_text("\n".join(lines) + "\n")
    for i in range(models):
        pick = [f"ref('m{rng.randrange(i):04d}')" if i and rng.random() < 0.85 else f"source('raw', 'src{rng.randrange(sources)}')"
                for _ in range(2)]
        shape = i % 4
        if shape == 0:
            sql = (f"select a.id, a.c1, a.c2 + b.c2 as c2, coalesce(a.c3, b.c3) as c3, b.c4, a.c5\n"
                   f"from {{{{ {pick[0]} }}}} as a\nleft join {{{{ {pick[1]} }}}} as b on b.id = a.id\nwhere a.c1 > 0")
        elif shape == 1:
            sql = f"select * from {{{{ {pick[0]} }}}} where c5 is not null"
        elif shape == 2:
            sql = (f"with x as (select id, c1, c2, c3, c4, c5 from {{{{ {pick[0]} }}}})\n"
                   "select id, max(c1) as c1, sum(c2) as c2, min(c3) as c3, count(c4) as c4, max(c5) as c5 from x group by id")
        else:
            sql = f"select t.id, t.c1 * 2 as c1, t.c2, t.c3, t.c4, cast(t.c5 as string) as c5 from {{{{ {pick[0]} }}}} t"
        path = root / "models" / f"layer{i // 100:02d}" / f"m{i:04d}.sql"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(sql + "\n")
    return root


def test_generated_project_lineage(tmp_path):
    manifest = compile_project(load_project(generate_project(tmp_path / "gen", 60)))
    result = lineage(manifest)
    assert len(result.models) == 60
    assert all(list(m.columns) == GEN_COLUMNS and not m.unknown for m in result.models.values())
    leaves = result.source_columns(ColumnRef("model.m0059", "id"))
    assert leaves and all(e.ref.node.startswith("source.raw.src") and e.ref.column == "id" for e in leaves)


def _bench(models: int) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        root = generate_project(Path(tmp) / "gen", models)
        started = time.perf_counter()
        manifest = compile_project(load_project(root))
        compiled = time.perf_counter()
        result = lineage(manifest)
        traced = time.perf_counter()
        data = result.to_dict()
        composed = time.perf_counter()
        print(f"{models} models: compile {compiled - started:.2f}s, lineage {traced - compiled:.2f}s, "
              f"transitive + dict {composed - traced:.2f}s, {sum(len(m['columns']) for m in data['models'].values())} columns")


if __name__ == "__main__":
    _bench(int(sys.argv[1]) if len(sys.argv) > 1 else 1000)
