"""Derived SQL of mv models, checked against fixture files (like sqlglot's optimizer fixtures):
``tests/fixtures/mv/key_queries.sql`` holds cases of model SQL → expected derived query and
``key_queries__invalid.sql`` models that must fail with a given code and line; a case's
``# view: d.v AS SELECT …`` lines declare the views its SQL reads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import sqlglot

from compiler.errors import CompileError
from compiler.kinds.mv.derive import derive, explain
from compiler.kinds.mv.analyze import CODES, plan_from_sql

FIXTURES = Path(__file__).parent / "fixtures" / "mv"


def load_cases(name: str) -> list[dict]:
    """Cases of a fixture file: ``# key: value`` lines, then ``;``-ended SQL statements."""
    cases, meta, defaults, statements, buffer = [], {}, {}, [], []
    for line in (FIXTURES / name).read_text().splitlines() + [""]:
        if line.startswith("--"):
            continue
        match = re.match(r"^# (\w+): (.*)$", line)
        if match and match.group(1) == "view":  # ``# view: d.v AS SELECT …``, one line per view
            relation, sql = re.match(r"^([\w.]+) AS (.*)$", match.group(2).strip()).groups()
            meta.setdefault("views", {})[relation] = sql
            continue
        if match:
            (meta if statements or buffer or meta or cases else defaults)[match.group(1)] = match.group(2).strip()
            if match.group(1) in ("title", "code"):
                meta[match.group(1)] = match.group(2).strip()
            continue
        if line.strip():
            buffer.append(line)
            if line.rstrip().endswith(";"):
                statements.append("\n".join(buffer).rstrip().rstrip(";"))
                buffer = []
        elif statements:
            cases.append({**defaults, **meta, "sql": statements})
            meta, statements = {}, []
    return cases


def parse_sources(text: str) -> dict[str, tuple]:
    """``d.t=position(id)``; alternate unique keys after semicolons: ``d.t=position(id;a_id;x,y)``."""
    found = {}
    for item in text.split():
        table, mode, keys = re.match(r"^([\w.]+)=(\w+)\(([\w,;]*)\)$", item).groups()
        key, *unique = [tuple(k for k in part.split(",") if k) for part in keys.split(";")]
        found[table] = (mode, key, tuple(unique))
    return found


def _plan(case: dict):
    unique_key = tuple(case["unique_key"].split(",")) if case.get("unique_key") else ()
    columns = {t: tuple(c.split(",")) for t, c in (i.split("=") for i in case.get("columns", "").split())}
    return plan_from_sql(case["sql"][0], parse_sources(case["sources"]), unique_key=unique_key, columns=columns,
                         table_format=case.get("table_format", "parquet"), views=case.get("views"))


def _normal(sql: str) -> str:
    return sqlglot.transpile(sql, read="spark", write="spark")[0]


VALID = load_cases("key_queries.sql")
INVALID = load_cases("key_queries__invalid.sql")


@pytest.mark.parametrize("case", VALID, ids=[c["title"] for c in VALID])
def test_derived_sql(case):
    derived = derive(_plan(case))
    assert _normal(derived[case["derive"]]) == _normal(case["sql"][1])


@pytest.mark.parametrize("case", INVALID, ids=[f"{c['code']}:{c['sql'][0][:40]}" for c in INVALID])
def test_invalid_models_fail_with_code(case):
    with pytest.raises(CompileError) as info:
        _plan(case)
    problem = info.value.problems[0]
    assert problem.code == case["code"], info.value
    assert problem.code in CODES and problem.path == "models/mv.sql" and problem.hint
    if case.get("line"):
        assert problem.line == int(case["line"])


def test_fixture_files_cover_every_code():
    assert {c["code"] for c in INVALID} == set(CODES)


def test_input_ast_is_not_modified():
    from compiler.kinds.mv.analyze import analyze
    from compiler.kinds.mv.analyze.report import Report
    from compiler.parse import parse_select

    ast = parse_select("SELECT id FROM d.o AS o", "m.sql")
    before = repr(ast)
    analyze(Report("mv", "m.sql", 0), "db.mv", ast, {"d.o": _source()}, ())
    assert repr(ast) == before


def _source():
    from compiler.kinds.mv.inputs import Input

    return Input("d.o", "d.o", "position", ("id",), None, position=("v",))


def test_derived_sql_is_deterministic_and_explained():
    case = next(c for c in VALID if c["title"].startswith("two hops"))
    first, second = derive(_plan(case)), derive(_plan(case))
    assert first.queries == second.queries
    text = explain(_plan(case))
    assert "new state: walk the joins back" in text and "hidden key columns: _mvflow_k_s_id, _mvflow_k_w_id" in text


def test_literal_join_is_a_warning():
    case = next(c for c in VALID if c["title"].startswith("joined only by a literal"))
    assert [w.code for w in _plan(case).warnings] == ["mv-literal-join"]


def test_demo_project_mv_compiles_with_file_lines(tmp_path):
    from compiler.compile import compile_project
    from compiler.project import load_project

    root = Path(__file__).parent.parent
    manifest = compile_project(load_project(root))
    assert "offers_wide" in manifest.models


def test_compile_reports_mv_errors_at_file_lines(make_project):
    from compiler.compile import compile_project
    from compiler.project import load_project

    root = make_project({
        "lineage/s.yml": """
            sources:
              - {name: o, database: d, primary_key: [id], position: [v]}
              - {name: s, database: d, primary_key: [id], position: [v]}
        """,
        "models/bad.sql": """
            {{ config(materialized='mv') }}
            SELECT o.id, s.name
            FROM {{ source('d', 'o') }} AS o
            RIGHT JOIN {{ source('d', 's') }} AS s ON s.id = o.s_id
        """,
    })
    with pytest.raises(CompileError) as info:
        compile_project(load_project(root))
    problem = info.value.problems[0]
    assert (problem.path, problem.line, problem.code) == ("models/bad.sql", 4, "mv-join-kind")


def test_an_mv_publishes_its_keys_only_when_an_mv_reads_it(make_project):
    from compiler.compile import compile_project
    from compiler.kinds.mv.analyze import mv_plan
    from compiler.project import load_project

    root = make_project({
        "lineage/s.yml": "sources:\n  - {name: o, database: d, primary_key: [id], position: [v]}\n",
        "models/wide.sql": "{{ config(materialized='mv') }}\nSELECT o.id, o.x FROM {{ source('d', 'o') }} AS o\n",
        "models/stacked.sql": "{{ config(materialized='mv') }}\nSELECT w.id, w.x FROM {{ ref('wide') }} AS w\n",
        "models/plain.sql": "{{ config(materialized='table') }}\nSELECT w.id FROM {{ ref('stacked') }} AS w\n",
    })
    manifest = compile_project(load_project(root))
    assert mv_plan(manifest.models["wide"], manifest).consumers == ("stacked",)  # `stacked` reads its batches
    assert not mv_plan(manifest.models["stacked"], manifest).consumers  # a table rebuilds from it whole


def test_a_stated_unique_key_that_names_the_grain_is_kept():
    """One-to-many joins widen an unstated key; a stated one must already hold the joined rows' keys."""
    sources = parse_sources("d.o=position(id) d.s=position(id)")
    sql = "SELECT o.id, s.id AS shop_id, s.name FROM d.o AS o LEFT JOIN d.s AS s ON s.owner_id = o.id"
    assert plan_from_sql(sql, sources, unique_key=("id", "shop_id")).key == ("id", "shop_id")
    assert plan_from_sql(sql, sources).key == ("id", "shop_id")
    with pytest.raises(CompileError) as error:
        plan_from_sql(sql, sources, unique_key=("id",))
    assert error.value.problems[0].hint.endswith("or state the grain: add shop_id to unique_key")


def test_an_mv_cannot_read_an_mv_whose_key_it_cannot_see(make_project):
    """Readers of an MV see its SELECT's columns only: an MV that does not select the grain of its
    one-to-many join has no key another MV could read it by, and compile says what to select."""
    from compiler.compile import compile_project
    from compiler.project import load_project

    root = make_project({
        "lineage/s.yml": "sources:\n  - {name: o, database: d, primary_key: [id], position: [v]}\n"
                         "  - {name: t, database: d, primary_key: [id], position: [v]}\n",
        "models/tags.sql": "{{ config(materialized='mv') }}\nSELECT o.id, t.text FROM {{ source('d', 'o') }} AS o\n"
                           "LEFT JOIN {{ source('d', 't') }} AS t ON t.offer_id = o.id\n",
        "models/counted.sql": "{{ config(materialized='mv') }}\nSELECT g.id, g.text FROM {{ ref('tags') }} AS g\n",
    })
    with pytest.raises(CompileError) as error:
        compile_project(load_project(root))
    problem = error.value.problems[0]
    assert problem.path == "models/counted.sql" and problem.code == "mv-unmappable-input"
    assert "model 'tags' keys its rows by what its SELECT does not select (_mvflow_k_t_id" in problem.message


def test_an_input_table_or_seed_is_keyed_by_what_the_project_declares(make_project):
    """unique_key first, then dbt's primary_key constraint, then a column tested unique and not_null;
    explain says which."""
    from compiler.compile import compile_project
    from compiler.kinds.mv.analyze import mv_plan
    from compiler.project import load_project

    root = make_project({
        "lineage/s.yml": "sources:\n  - {name: o, database: d, primary_key: [id], position: [v]}\n",
        "seeds/shops.csv": "code,region,name\na,n,Alpha\n",
        "seeds/shops.yml": "seeds:\n  - name: shops\n    constraints:\n      - {type: primary_key, columns: [code, region]}\n"
                           "    columns:\n      - name: name\n        tests: [unique, not_null]\n",
        "models/cats.sql": "{{ config(materialized='table') }}\nSELECT 1 AS id, 'x' AS name\n",
        "models/cats.yml": "models:\n  - name: cats\n    columns:\n      - name: id\n        constraints: [{type: primary_key}]\n",
        "models/wide.sql": "{{ config(materialized='mv') }}\nSELECT o.id, s.name, c.name AS cat FROM {{ source('d', 'o') }} AS o\n"
                           "LEFT JOIN {{ ref('shops') }} AS s ON s.code = o.code AND s.region = o.region\n"
                           "LEFT JOIN {{ ref('cats') }} AS c ON c.id = o.cat_id\n",
    })
    manifest = compile_project(load_project(root))
    inputs = mv_plan(manifest.models["wide"], manifest).inputs
    assert (inputs["shops"].key, inputs["shops"].key_from) == (("code", "region"), "constraints primary_key at seeds/shops.yml:4")
    assert (inputs["cats"].key, inputs["cats"].key_from) == (("id",), "constraints primary_key at models/cats.yml:5")
    assert inputs["d.o"].key_from == "primary_key at lineage/s.yml:2"


def test_a_seed_is_keyed_by_what_a_view_renaming_it_declares(make_project):
    """dbt projects test unique and not_null on the staging view (stg_customers.customer_id), not on
    the seed it renames: that keys the seed, unless the view filters (it says nothing of the rows it
    leaves out)."""
    from compiler.compile import compile_project
    from compiler.kinds.mv.analyze import mv_plan
    from compiler.project import load_project

    def project(where: str):
        return make_project({
            "seeds/raw_customers.csv": "id,name\n1,Ann\n",
            "models/stg_customers.sql": "{{ config(materialized='view') }}\nwith source as (select * from "
                                        "{{ ref('raw_customers') }}) select id as customer_id, upper(name) as name from "
                                        f"source{where}\n",
            "models/stg_customers.yml": "models:\n  - name: stg_customers\n    columns:\n      - name: customer_id\n"
                                        "        tests: [unique, not_null]\n",
            "models/customers.sql": "{{ config(materialized='mv') }}\nselect c.customer_id, c.name from "
                                    "{{ ref('stg_customers') }} as c\n",
        })

    manifest = compile_project(load_project(project("")))
    seed = mv_plan(manifest.models["customers"], manifest).inputs["raw_customers"]
    assert seed.key == ("id",) and seed.key_from == (
        "tests unique and not_null of column customer_id at models/stg_customers.yml:5 on the view stg_customers, "
        "which selects raw_customers.id as customer_id")
    with pytest.raises(CompileError) as error:
        compile_project(load_project(project(" where name <> 'x'")))
    assert error.value.problems[0].code == "mv-no-key"


def test_an_incremental_model_is_keyed_by_its_unique_key_only_when_it_merges_by_it(make_project):
    from compiler.compile import compile_project
    from compiler.kinds.mv.analyze import mv_plan
    from compiler.project import load_project

    def project(strategy: str):
        return make_project({
            "lineage/s.yml": "sources:\n  - {name: o, database: d, primary_key: [id], position: [v]}\n",
            "models/cats.sql": f"{{{{ config(materialized='incremental', incremental_strategy='{strategy}', "
                               "unique_key='id', table_format='delta') }}\nSELECT 1 AS id, 'x' AS name\n",
            "models/wide.sql": "{{ config(materialized='mv') }}\nSELECT o.id, c.name FROM {{ source('d', 'o') }} AS o\n"
                               "LEFT JOIN {{ ref('cats') }} AS c ON c.id = o.cat_id\n",
        })

    from compiler.kinds.mv.refresh import watch_spec

    manifest = compile_project(load_project(project("merge")))
    plan = mv_plan(manifest.models["wide"], manifest)
    assert plan.inputs["cats"].key == ("id",)
    # its rows are in one table under its name (a table model's parquet slots could be left over)
    assert manifest.models["cats"].relation in watch_spec(plan, "x").tables
    with pytest.raises(CompileError) as error:
        compile_project(load_project(project("append")))  # an appended row may repeat a key
    assert [(p.path, p.line, p.code) for p in error.value.problems] == [("models/wide.sql", 3, "mv-no-key")]


def test_a_full_join_is_refused_with_the_union_that_replaces_it():
    sources = parse_sources("d.a=position(id) d.b=position(id)")
    with pytest.raises(CompileError) as error:
        plan_from_sql("SELECT a.id, b.id AS b_id, a.x, b.y FROM d.a AS a FULL OUTER JOIN d.b AS b ON b.id = a.id", sources)
    problem = error.value.problems[0]
    assert problem.code == "mv-join-kind" and "no main table whose key they keep" in problem.message
    assert "UNION ALL of a LEFT JOIN from each side" in problem.hint
    written = ("SELECT 'a' AS side, a.id, a.x, b.y FROM d.a AS a LEFT JOIN d.b AS b ON b.id = a.id UNION ALL "
               "SELECT 'b' AS side, b.id, NULL AS x, b.y FROM d.b AS b LEFT JOIN d.a AS a ON a.id = b.id WHERE a.id IS NULL")
    assert plan_from_sql(written, sources).key == ("side", "id")  # as the hint says
