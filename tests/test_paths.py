"""Names that become paths under target/ (compiler/paths.py): a bad name is a user error at its
line, and nothing lands outside target/, through a name or through a symbolic link."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from compiler.cli import main


def _project(root: Path, files: dict[str, str]) -> Path:
    for name, text in {"project.yml": "name: p\n", "models/a.sql": "select 1 as id\n", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def _compile(project: Path, capsys, *args: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(["--project-dir", str(project), *(args or ["compile"])])
    return exit_info.value.code, capsys.readouterr().err


@pytest.mark.parametrize("name", ["../../../../x", "/tmp/x", "a/b", "..", "x y", "t" * 201])
def test_a_test_name_that_is_not_a_plain_name_is_refused(name: str, tmp_path: Path, capsys):
    project = _project(tmp_path / "p", {"models/docs.yml": f"models:\n  - name: a\n    columns:\n      - name: id\n"
                                                           f"        tests:\n          - not_null: {{name: '{name}'}}\n"})
    code, err = _compile(project, capsys)
    assert code == 2 and "models/docs.yml:6: [bad-name] test name '" in err and "Traceback" not in err, err
    assert not (project / "target").exists() and not (tmp_path / "x.sql").exists()


def test_a_singular_test_file_with_a_bad_name_is_refused(tmp_path: Path, capsys):
    project = _project(tmp_path / "p", {"tests/no-rows.sql": "select * from {{ ref('a') }} where id < 0\n"})
    code, err = _compile(project, capsys)
    assert code == 2 and "tests/no-rows.sql:1: [bad-name] test name 'no-rows'" in err and "rename the file" in err, err


def test_a_long_generated_test_name_writes_its_short_name(tmp_path: Path):
    values = ", ".join(f"value_{i:03}_abcdefghij" for i in range(40))  # dbt's name: over 600 characters
    project = _project(tmp_path / "p", {"models/docs.yml": f"models:\n  - name: a\n    columns:\n      - name: id\n"
                                                           f"        tests:\n          - accepted_values: {{values: [{values}]}}\n"})
    main(["--project-dir", str(project), "compile"])
    [written] = (project / "target" / "compiled" / "tests").iterdir()
    assert re.fullmatch(r"accepted_values_a_[0-9a-f]{32}\.sql", written.name), written.name


@pytest.mark.parametrize("link", ["compiled", "run/a.sql", "manifest.json"])
def test_a_symbolic_link_inside_target_leading_out_is_refused(link: str, tmp_path: Path, capsys):
    project = _project(tmp_path / "p", {})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (project / "target" / link).parent.mkdir(parents=True, exist_ok=True)
    (project / "target" / link).symlink_to(elsewhere / Path(link).name)
    before = sorted((project / "target").rglob("*"))
    code, err = _compile(project, capsys)
    assert code == 2 and "[unsafe-path]" in err and "leads outside it" in err and "Traceback" not in err, err
    assert list(elsewhere.iterdir()) == [] and sorted((project / "target").rglob("*")) == before
