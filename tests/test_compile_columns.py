"""A column a source does not declare is a compile error (exit 2, the model's file and line, the
close names); where the source declares no columns it stays a run-time question for Spark.
Pure: no Spark."""

from __future__ import annotations

import json
import re
from pathlib import Path

from compiler.cli import main
from compiler.compile import compile_project
from compiler.lineage import lineage
from compiler.project import load_project

ROOT = Path(__file__).resolve().parent.parent

SOURCES = """
    sources:
      - name: shops
        database: stage
        primary_key: [shop_id]
        dictionary: true
        columns:
          - {name: shop_id, type: bigint}
          - {name: rating, type: double}
          - {name: name, type: string}
      - {name: events, database: stage, primary_key: [id], position: [id]}
"""


def _compile(project: Path, capsys) -> tuple[int, str, str]:
    try:
        main(["--project-dir", str(project), "compile"])
        code = 0
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def test_a_column_the_source_does_not_declare_fails_compile(make_project, capsys):
    project = make_project({
        "lineage/src.yml": SOURCES,
        "models/bad.sql": """
            -- shops with their rating
            select s.shop_id,
                   s.ratng
            from {{ source('stage', 'shops') }} as s
        """,
        "models/worse.sql": """
            select x.nme, x.shop_id from {{ source('stage', 'shops') }} as x where x.rating > 1
        """,
    })

    code, _, err = _compile(project, capsys)

    assert code == 2 and "Traceback" not in err
    assert ("models/bad.sql:3: [unknown-column] s.ratng: source stage.shops has no column 'ratng' — did you mean "
            "'rating'? (columns declared at lineage/src.yml:2: shop_id, rating, name)") in err
    assert "models/worse.sql:1: [unknown-column] x.nme: source stage.shops has no column 'nme' — did you mean 'name'?" in err
    assert len(re.findall(r"\[unknown-column\]", err)) == 2
    assert not (project / "target").exists()  # nothing written (artifacts write after every file is derived)


def test_columns_of_a_source_without_declared_columns_are_not_checked(make_project, capsys):
    project = make_project({
        "lineage/src.yml": SOURCES,
        "models/fine.sql": "select e.whatever, s.rating from {{ source('stage', 'events') }} as e "
                           "join {{ source('stage', 'shops') }} as s on s.shop_id = e.id",
    })

    code, out, err = _compile(project, capsys)

    assert code == 0, err
    assert "compiled 1 of 1 models" in out
    entry = json.loads((project / "target" / "lineage.json").read_text())["models"]["fine"]
    assert entry["columns"]["rating"] and "whatever" in entry["unknown"]


def test_a_declared_column_in_another_case_is_fine(make_project, capsys):
    project = make_project({"lineage/src.yml": SOURCES,
                            "models/fine.sql": "select S.Rating from {{ source('stage', 'shops') }} as S"})

    assert _compile(project, capsys)[0] == 0


def test_the_demo_and_a_generated_project_compile_with_the_check(tmp_path: Path):
    from bench.generate import generate, write_mvflow

    for where in (ROOT, write_mvflow(generate(150), tmp_path / "gen")):
        manifest = compile_project(load_project(where))
        assert len(lineage(manifest).models) == len(manifest.models)  # raises CompileError on an undeclared column
