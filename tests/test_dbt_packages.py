"""dbt packages (``compiler/dbt/packages.py``): ``mvflow deps`` installs a local package and a git
one (from a repository made here) with a lock file; their macros are called under their names,
dispatch as dbt orders it, their generic tests are read. The slow tier compares a
project using the git package with dbt itself (tests/test_dbt_projects.py)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import yaml

from compiler.cli import main
from compiler.compile import compile_project
from compiler.project import load_project

sys.path.insert(0, str(Path(__file__).parent))  # the tests use --import-mode=importlib
from shop_packages import git, package_repository, with_package  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def shop(tmp_path) -> Path:
    return shutil.copytree(FIXTURES / "dbt_shop", tmp_path / "shop")


def _deps(project: Path, capsys) -> tuple[int, str]:
    try:
        main(["--project-dir", str(project), "deps"])
        code = 0
    except SystemExit as exc:
        code = int(exc.code)
    out, err = capsys.readouterr()
    return code, out + err


def test_a_local_package_is_installed_and_its_macros_and_tests_are_read(shop, tmp_path, capsys):
    shutil.copytree(FIXTURES / "shop_utils", tmp_path / "shop_utils")
    with_package(shop, "packages:\n  - local: ../shop_utils\n")
    with pytest.raises(SystemExit):
        main(["--project-dir", str(shop), "compile"])
    assert "packages.yml:1: [deps-missing] packages.yml lists 1 package(s), 0 installed in dbt_packages/ — run `mvflow deps`" \
        in capsys.readouterr().err
    code, out = _deps(shop, capsys)
    assert code == 0 and "installed shop_utils (local ../shop_utils)" in out
    manifest = compile_project(load_project(shop))
    sql = manifest.models["order_keys"].sql
    assert "md5(concat_ws('|', coalesce(cast(order_id as string), '_null_'), coalesce(cast(status as string)" in sql, sql
    test = manifest.tests["shop_utils_at_least_order_keys_order_id__1"]
    assert "where order_id < 1" in test.sql


def test_a_git_package_is_locked_to_its_commit_and_dispatch_follows_dbts_order(shop, tmp_path, capsys):
    repo = package_repository(tmp_path / "repo")
    v1 = git("rev-parse", "HEAD", cwd=repo)
    with_package(shop, f"packages:\n  - git: {repo}\n    revision: main\n")
    git("branch", "-M", "main", cwd=repo)
    assert _deps(shop, capsys)[0] == 0
    lock = yaml.safe_load((shop / "package-lock.yml").read_text())
    assert lock["packages"] == [{"git": str(repo), "name": "shop_utils", "revision": v1}]
    (repo / "macros" / "keys.sql").write_text((repo / "macros" / "keys.sql").read_text().replace("md5(", "sha1("))
    git("commit", "-qam", "v2", cwd=repo)
    assert _deps(shop, capsys)[0] == 0  # packages.yml unchanged: the locked commit, not main's new one
    assert "md5(" in compile_project(load_project(shop)).models["order_keys"].sql
    (shop / "packages.yml").write_text(f"packages:\n  - git: {repo}\n    revision: main  # moved on\n")
    assert _deps(shop, capsys)[0] == 0  # packages.yml changed: resolved again
    assert "sha1(" in compile_project(load_project(shop)).models["order_keys"].sql

    # the project's own implementation comes first for a package's namespace; `dispatch:` reorders
    (shop / "macros" / "keys.sql").write_text("{% macro default__surrogate_key(fields) %}xxhash64({{ fields | join(', ') }}){% endmacro %}\n")
    assert "xxhash64(order_id, status)" in compile_project(load_project(shop)).models["order_keys"].sql
    settings = shop / "dbt_project.yml"
    settings.write_text(settings.read_text() + "dispatch:\n  - macro_namespace: shop_utils\n    search_order: [shop_utils, shop]\n")
    assert "sha1(" in compile_project(load_project(shop)).models["order_keys"].sql


@pytest.mark.parametrize("packages, expected", [
    ("packages:\n  - package: dbt-labs/dbt_utils\n    version: 1.3.0\n",
     "packages.yml:2: [deps-hub] package 'dbt-labs/dbt_utils' is a dbt Hub package — dbt Hub packages are fetched from hub.getdbt.com"),
    ("packages:\n  - git: /nowhere/repo\n", "packages.yml:2: [deps-git] git clone of '/nowhere/repo' failed: "),
    ("packages:\n  - local: ../missing\n", "packages.yml:2: [deps-local] local package '../missing' has no dbt_project.yml"),
    ("packages:\n  - local: .\n", "packages.yml:2: [deps-local] local package '.' is the project or holds it"),
    ("packages:\n  - tarball: x\n", "packages.yml:2: [yaml] a package entry needs 'local:', 'git:' or 'package:'"),
])
def test_a_package_that_cannot_be_installed_is_one_line_and_installs_nothing(shop, capsys, packages, expected):
    (shop / "packages.yml").write_text(packages)
    code, out = _deps(shop, capsys)
    assert code == 2 and expected in out and "Traceback" not in out, out
    assert not (shop / "dbt_packages").exists() and not (shop / "package-lock.yml").exists()


def test_an_unknown_package_test_or_namespace_says_what_to_do(shop, capsys):
    (shop / "models" / "marts" / "order_keys.yml").write_text(
        "version: 2\nmodels:\n  - name: order_dates\n    data_tests: [{dbt_utils.expression_is_true: {expression: 'order_id >= 0'}}]\n")
    with pytest.raises(SystemExit):
        main(["--project-dir", str(shop), "compile"])
    err = capsys.readouterr().err
    assert "unknown test 'dbt_utils.expression_is_true' — no package 'dbt_utils' is installed: list it in packages.yml" in err
