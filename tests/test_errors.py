"""The broken-project corpus (tests/broken/<case>/): every user error names its file and line,
says what is wrong and what to do, exits 2 with no traceback, and writes nothing."""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from compiler.cli import main
from compiler.errors import CompileError, MvflowError, Problem, ProblemList, ProjectError, snippet
from compiler.files import MAX_MODEL_BYTES

BROKEN = Path(__file__).parent / "broken"
CASES = sorted(p for p in BROKEN.iterdir() if p.is_dir())
PROBLEM = re.compile(r"^(?:error: )?(?P<where>\S+?): \[(?P<code>[a-z-]+)\] (?P<what>.+?) — (?P<hint>.+)$")


def _expected(case: Path) -> tuple[list[str], list[str], int | None]:
    """(command args, expected substrings, number of problems or None) of a case."""
    args, count, lines = ["compile"], None, []
    for line in (case / "expected.txt").read_text().splitlines():
        if line.startswith("# args:"):
            args = line[len("# args:"):].split()
        elif line.startswith("# problems:"):
            count = int(line[len("# problems:"):])
        elif line.strip() and not line.startswith("#"):
            lines.append(line)
    return args, lines, count


def _run(project: Path, args: list[str], capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(["--project-dir", str(project), *args])
    return exit_info.value.code, capsys.readouterr().err


def test_corpus_is_there():
    assert len(CASES) >= 25
    assert all((case / "expected.txt").is_file() for case in CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name)
def test_broken_project(case: Path, tmp_path: Path, capsys, monkeypatch):
    monkeypatch.delenv("MVFLOW_TEST_SURELY_UNSET", raising=False)
    project = shutil.copytree(case, tmp_path / case.name)
    args, expected, count = _expected(case)

    code, err = _run(project, args, capsys)

    assert code == 2, err
    assert "Traceback" not in err
    assert err.startswith("error: ")
    problems = [PROBLEM.match(line) for line in err.splitlines() if not line.startswith(" ")]
    assert problems and all(problems), f"every problem line reads 'where: [code] what — hint':\n{err}"
    for problem in problems:
        where = problem["where"]
        # a file with a line, or (for a bad command-line argument) the option at fault
        assert re.fullmatch(r"[\w./-]+\.(sql|yml):\d+(:\d+)?", where) or where.startswith("--"), where
    if count is not None:
        assert len(problems) == count, err
    for line in expected:
        assert line in err, f"{line!r} not in:\n{err}"
    assert not (project / "target").exists() and not (project / ".mvflow").exists()


def test_debug_shows_the_traceback(tmp_path: Path):
    project = shutil.copytree(BROKEN / "unknown_ref", tmp_path / "p")
    with pytest.raises(CompileError) as info:
        main(["--project-dir", str(project), "--debug", "compile"])
    assert info.value.problems[0].code == "unknown-ref"


def test_no_project_file(tmp_path: Path, capsys):
    code, err = _run(tmp_path, ["compile"], capsys)
    assert code == 2 and "[no-project]" in err and "--project-dir" in err


def test_yaml_errors_are_project_errors_and_compile_errors_are_compile_errors(tmp_path: Path):
    from compiler.compile import compile_project
    from compiler.project import load_project

    yaml_case = shutil.copytree(BROKEN / "yaml_lineage", tmp_path / "y")
    with pytest.raises(ProjectError):
        compile_project(load_project(yaml_case))
    ref_case = shutil.copytree(BROKEN / "unknown_ref", tmp_path / "r")
    with pytest.raises(CompileError):
        compile_project(load_project(ref_case))


def test_problem_format():
    assert Problem("bad", "m.sql", 3, 5, "fix it", "code").format() == "m.sql:3:5: [code] bad — fix it"
    assert Problem("bad").format() == "[error] bad"
    assert Problem("bad", "p.yml", hint="h").format() == "p.yml: [error] bad — h"


def test_problem_list_keeps_order_and_drops_duplicates():
    problems = ProblemList()
    for message in ("b", "a", "b"):
        problems.add(Problem(message, "x.sql", 1))
    with pytest.raises(CompileError) as info:
        problems.raise_if_any()
    assert [p.message for p in info.value.problems] == ["b", "a"]
    ProblemList().raise_if_any()  # nothing collected: no error


def test_snippet_at_first_and_last_line():
    assert snippet("only", 1, 1) == "    1 | only\n      | ^"
    assert snippet("a\nb", 2) == "    1 | a\n    2 | b"


def test_error_message_joins_all_problems():
    error = MvflowError([Problem("one", "a.sql", 1), Problem("two", "b.sql", 2)])
    assert str(error) == "a.sql:1: [error] one\nb.sql:2: [error] two"


@pytest.mark.parametrize("body", [
    "-- " + "x" * MAX_MODEL_BYTES + "\nselect 1 as x\n",  # the file itself
    "select {% for i in range(80000) %}{{ i }} as c{{ i }}, {% endfor %}1 as x\n",  # what it renders to
], ids=["file", "rendered"])
def test_a_huge_model_is_rejected_quickly(body: str, tmp_path: Path, capsys):
    (tmp_path / "models").mkdir()
    (tmp_path / "project.yml").write_text("name: big\n")
    (tmp_path / "models" / "big.sql").write_text(body)

    code, err = _run(tmp_path, ["compile"], capsys)

    assert code == 2 and "Traceback" not in err
    assert re.search(r"^error: models/big\.sql:1: \[too-large\] (the file is 1,\d{3},\d{3} bytes, over the limit of 1,048,576 "
                     r"|the template renders to more than 1,048,576 characters )\(1 MB\) — split the model", err), err
    assert not (tmp_path / "target").exists()


def test_project_dir_and_debug_after_the_command(tmp_path: Path, capsys):
    project = shutil.copytree(BROKEN / "unknown_ref", tmp_path / "p")
    with pytest.raises(SystemExit) as exit_info:
        main(["compile", "--project-dir", str(project)])
    assert exit_info.value.code == 2 and "models/a.sql:2: [unknown-ref]" in capsys.readouterr().err
    with pytest.raises(CompileError):
        main(["compile", "--project-dir", str(project), "--debug"])
    (project / "models" / "a.sql").write_text("select 1 as x")
    main(["ls", f"--project-dir={project}"])
    assert capsys.readouterr().out.split() == ["a", "stg_shops"]


@pytest.mark.parametrize("model, expected", [
    ("offers_wid", "error: [unknown-model] no model named 'offers_wid' — did you mean 'offers_wide'?"),
    ("nosuch", "error: [unknown-model] no model named 'nosuch' — mv models here: offers_wide"),
    ("stg_shops", "error: models/staging/stg_shops.sql:1: [not-an-mv] 'stg_shops' is a view model: explain shows what "
                  "mvflow derives for an mv — mv models here: offers_wide"),
])
def test_explain_says_what_is_wrong_with_the_model(model: str, expected: str, make_project, capsys):
    project = make_project({
        "lineage/stage.yml": "sources:\n  - {name: offers, database: stage, primary_key: [offer_id], position: [ts]}\n",
        "models/staging/stg_shops.sql": "select 1 as shop_id",
        "models/offers_wide.sql": "{{ config(materialized='mv') }}\nselect o.offer_id from {{ source('stage', 'offers') }} o",
    })
    code, err = _run(project, ["explain", model], capsys)
    assert code == 2 and err.strip() == expected
    assert not (project / "target").exists()


def test_a_failed_compile_leaves_an_earlier_target_as_it_was(tmp_path: Path, capsys):
    project = shutil.copytree(BROKEN / "fact_unsteppable", tmp_path / "p")
    fact = project / "models" / "z_fact.sql"
    broken = fact.read_text()
    fact.write_text("select c.category_id from {{ ref('a_categories') }} as c")  # a view: compiles
    main(["--project-dir", str(project), "compile"])
    before = {p: p.read_bytes() for p in (project / "target").rglob("*") if p.is_file()}
    assert project / "target" / "compiled" / "z_fact.sql" in before
    fact.write_text(broken)

    code, err = _run(project, ["compile"], capsys)

    assert code == 2 and "[fact-source]" in err
    assert {p: p.read_bytes() for p in (project / "target").rglob("*") if p.is_file()} == before


def _small_project(where: Path) -> Path:
    (where / "models").mkdir(parents=True)
    (where / "project.yml").write_text("name: small\n")
    (where / "models" / "a.sql").write_text("select 1 as x\n")
    return where


@pytest.mark.parametrize("args", [["compile", "--target", ""], ["plan", "--target", " "], ["ls", "-t", ""]],
                         ids=["compile", "plan", "ls"])
def test_an_empty_target_is_not_the_default_target(args: list[str], tmp_path: Path, capsys):
    """``--target "$TARGET"`` with the variable unset names no target: before, it meant the default one."""
    project = _small_project(tmp_path / "p")

    code, err = _run(project, args, capsys)

    assert code == 2 and "Traceback" not in err
    assert err == ("error: --target: [unknown-target] --target is empty — name a target (local), or leave --target out "
                   "for the default target 'local'\n")
    assert sorted(p.name for p in project.iterdir()) == ["models", "project.yml"]


def _pipe(project: Path, monkeypatch) -> None:
    os.mkfifo(project / "models" / "b.sql")


def _broken_link(project: Path, monkeypatch) -> None:
    (project / "models" / "b.sql").symlink_to("../gone/b.sql")


def _link_out_of_the_project(project: Path, monkeypatch) -> None:
    outside = project.parent / "elsewhere"
    outside.mkdir()
    (outside / "c.sql").write_text("select 3 as z\n")
    (project / "models" / "shared").symlink_to(outside)


def _link_loop(project: Path, monkeypatch) -> None:
    (project / "models" / "all").symlink_to("..")  # the project itself: target/ and macros/ would become models


def _unreadable_folder(project: Path, monkeypatch) -> None:
    (project / "models" / "sub").mkdir()
    (project / "models" / "sub" / "c.sql").write_text("select 3 as z\n")
    scandir = os.scandir

    def refuse(path):  # chmod 000 does not stop root, who may run the tests
        if Path(path).name == "sub":
            raise PermissionError(13, "Permission denied", str(path))
        return scandir(path)
    monkeypatch.setattr(os, "scandir", refuse)


def _unreadable_file(project: Path, monkeypatch) -> None:
    (project / "models" / "b.sql").write_text("select 2 as y\n")
    read_bytes = Path.read_bytes

    def refuse(path):
        if path.name == "b.sql":
            raise PermissionError(13, "Permission denied", str(path))
        return read_bytes(path)
    monkeypatch.setattr(Path, "read_bytes", refuse)


@pytest.mark.parametrize("make, expected", [
    (_pipe, "error: models/b.sql:1: [not-a-file] models/b.sql is a named pipe, not a file — remove it or move it out of the "
            "project's folders: mvflow reads every *.sql file there"),
    (_broken_link, "error: models/b.sql:1: [broken-link] models/b.sql is a symbolic link to ../gone/b.sql, which does not "
                   "exist — fix the link or remove it"),
    (_link_out_of_the_project, "error: models/shared: [link-outside] models/shared is a symbolic link to {outside}, outside "
                               "the project — mvflow reads only files inside the project"),
    (_link_loop, "error: models/all: [link-loop] models/all is a symbolic link to {project}, a folder that holds it — "
                 "remove the link: it leads round in a loop"),
    (_unreadable_folder, "error: models/sub: [unreadable] cannot read the folder models/sub: Permission denied — make it "
                         "readable (chmod a+rx) or move it out of the project's folders: it may hold models"),
    (_unreadable_file, "error: models/b.sql:1: [io] cannot read the file: Permission denied — make it readable (chmod a+r), "
                       "or move it out of the project's folders"),
], ids=lambda value: value.__name__.strip("_") if callable(value) else "")
def test_what_cannot_be_read_in_a_project_folder_is_an_error(make, expected: str, tmp_path: Path, capsys, monkeypatch):
    """Before, each of these was skipped without a word: a model (or a folder of them) went missing."""
    project = _small_project(tmp_path / "p")
    make(project, monkeypatch)

    code, err = _run(project, ["compile"], capsys)

    assert code == 2 and "Traceback" not in err
    assert err.startswith(expected.format(outside=(tmp_path / "elsewhere").resolve(), project=project.resolve())), err
    assert sorted(p.name for p in project.iterdir()) == ["models", "project.yml"]


def test_symbolic_links_inside_the_project_are_followed(tmp_path: Path, capsys):
    """A linked folder of models is compiled (it was skipped), once even when linked twice; an editor's
    lock file (a hidden broken link) is not a problem."""
    project = _small_project(tmp_path / "p")
    (project / "shared").mkdir()
    (project / "shared" / "c.sql").write_text("select 3 as z\n")
    (project / "models" / "shared").symlink_to("../shared")
    (project / "models" / "again").symlink_to("shared")
    (project / "models" / ".#a.sql").symlink_to("someone@host.4242:1700000000")

    main(["--project-dir", str(project), "ls", "--output", "path"])

    assert capsys.readouterr().out.split() == ["models/a.sql", "models/again/c.sql"]


class _TableNotFound(Exception):
    def getCondition(self) -> str:  # noqa: N802 - PySpark's name
        return "TABLE_OR_VIEW_NOT_FOUND"


class _NoTables:
    """A SparkSession in which no table exists (what check_sources asks of one)."""

    def table(self, name: str):
        raise _TableNotFound(name)


@pytest.mark.parametrize("demo", [False, True], ids=["own project", "demo project"])
def test_only_the_demo_project_is_told_to_run_demo_init(demo: bool, make_project):
    """``mvflow demo init`` fills the stage database with the demo's rows: advice for the demo project
    only, never for a project that merely has a missing table (even stage.orders)."""
    from compiler.compile import compile_project
    from compiler.drift import check_sources
    from compiler.errors import RunError
    from compiler.failures import Running, _missing_table_hint
    from compiler.project import load_project

    if demo:
        manifest = compile_project(load_project(Path(__file__).parent.parent))
        model = "stg_orders"
    else:
        manifest = compile_project(load_project(make_project({
            "lineage/stage.yml": "sources:\n  - {name: orders, database: stage, primary_key: [order_id], position: [ts]}\n",
            "models/a.sql": "select o.order_id from {{ source('stage', 'orders') }} as o",
        })))
        model = "a"

    with pytest.raises(RunError) as info:
        check_sources(_NoTables(), manifest, [model])
    hint = _missing_table_hint("stage.orders", Running(manifest, manifest.models[model]))

    problem = info.value.problems[0]
    assert problem.code == "table-not-found" and problem.message == "source stage.orders: the table does not exist"
    if demo:
        assert problem.hint == "create it (the demo project: run `mvflow demo init`)"
        assert hint.endswith("but its table does not exist: create it (the demo project: run `mvflow demo init`)")
    else:
        assert problem.format() == ("lineage/stage.yml:2: [table-not-found] source stage.orders: the table does not exist — "
                                    "create it, or correct the database and name the declaration gives")
        assert hint == ("source stage.orders is declared at lineage/stage.yml:2 but its table does not exist: create it, "
                        "or correct the database and name the declaration gives")


@pytest.mark.parametrize("select", [
    "select " + " + ".join(f"{i}" for i in range(350)) + " as total",
    "select\n" + "(" * 500 + "1" + ")" * 500 + " as x",
    "select " + "case when true then " * 400 + "1" + " end" * 400 + " as x",
], ids=["350-term sum", "500 nested parentheses", "400 nested CASEs"])
def test_deeply_nested_sql_compiles(select: str, tmp_path: Path, capsys):
    """Each was a RecursionError traceback (Python's 1,000 frames; depth.py)."""
    project = _small_project(tmp_path / "p")
    (project / "models" / "a.sql").write_text(select + "\n")
    limit = sys.getrecursionlimit()

    main(["--project-dir", str(project), "compile"])

    assert "compiled 1 of 1 models" in capsys.readouterr().out
    assert (project / "target" / "compiled" / "a.sql").is_file()
    assert sys.getrecursionlimit() == limit  # the room is given back


def test_a_chain_of_1800_refs_compiles(tmp_path: Path, capsys):
    """Column lineage followed the chain by recursion: a RecursionError traceback."""
    project = _small_project(tmp_path / "p")
    for i in range(1, 1800):
        (project / "models" / f"m{i}.sql").write_text(f"select x from {{{{ ref('{f'm{i - 1}' if i > 1 else 'a'}') }}}}\n")

    main(["--project-dir", str(project), "compile"])

    assert "compiled 1800 of 1800 models" in capsys.readouterr().out
    assert '"m1799": {' in (project / "target" / "lineage.json").read_text()


@pytest.mark.parametrize("select, expected", [
    ("select 1 as x,\n  " + "(" * 1001 + "1" + ")" * 1001 + " as y",
     "error: models/a.sql:2: [too-deep] parentheses nest 1,001 deep here, deeper than mvflow reads (1,000) — flatten it: "
     "move inner queries into CTEs (WITH) or models, and split long expressions into steps"),
    ("select * from " + "(select 1 as x from " * 10_000 + "range(1)" + ") as s" * 10_000,  # crashed Python, at any limit
     "error: models/a.sql:1: [too-deep] parentheses nest 10,001 deep here, deeper than mvflow reads (1,000)"),
    ("select " + "not " * 10_000 + "true as x",
     "error: models/a.sql:1: [too-deep] the SQL nests too deeply for mvflow to handle — flatten it"),
    ("select " + "case when true then " * 10_000 + "1" + " end" * 10_000 + " as x",
     "error: models/a.sql:1: [too-deep] the SQL nests too deeply for mvflow to handle — flatten it"),
], ids=["1001 parentheses", "10000 subqueries", "10000 NOTs", "10000 CASEs"])
def test_too_deeply_nested_sql_is_a_clean_error(select: str, expected: str, tmp_path: Path, capsys):
    project = _small_project(tmp_path / "p")
    (project / "models" / "a.sql").write_text(select + "\n")

    code, err = _run(project, ["compile"], capsys)

    assert code == 2 and "Traceback" not in err and err.startswith(expected), err
    assert sorted(p.name for p in project.iterdir()) == ["models", "project.yml"]


def test_a_recursion_error_anywhere_else_is_a_clean_error(tmp_path: Path, capsys, monkeypatch):
    """Where no model is at hand to name, the command still ends with a message, not a traceback."""
    import compiler.compile

    def too_deep(*args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded")
    monkeypatch.setattr(compiler.compile, "compile_project", too_deep)

    code, err = _run(_small_project(tmp_path / "p"), ["compile"], capsys)

    assert code == 2 and err == ("error: [too-deep] something in the project nests too deeply for mvflow to handle — "
                                 "flatten it: move inner queries into CTEs (WITH) or models, and split long expressions "
                                 "into steps (--debug shows where)\n")
