"""dbt packages (``compiler/dbt/packages.py``): ``mvflow deps`` installs a local package and a git
one (from a repository made here) with a lock file; their macros are called under their names,
dispatch as dbt orders it, their generic tests are read; their models and seeds are compiled with
the project's, configured and given vars as dbt does. The slow tier compares a
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


def test_a_packages_models_and_seed_are_built_configured_and_given_vars_as_dbt_does(shop, tmp_path, capsys):
    shutil.copytree(FIXTURES / "shop_utils", tmp_path / "shop_utils")
    with_package(shop, "packages:\n  - local: ../shop_utils\n")
    assert _deps(shop, capsys)[0] == 0
    manifest = compile_project(load_project(shop))
    counts, seed = manifest.models["utils_status_counts"], manifest.models["utils_statuses"]
    # the package's block (view, tags), then the project's `models: shop_utils:` (schema marts, one model
    # disabled), then the model's config() (table)
    assert (counts.relation, counts.kind.name, counts.tags) == ("shop_dev_marts.utils_status_counts", "table", ("utils",))
    assert "utils_unused" not in manifest.models
    assert (seed.relation, seed.kind.name) == ("shop_dev.utils_statuses", "seed")
    assert set(manifest.graph.predecessors("model.utils_status_counts")) == {"model.utils_statuses", "model.stg_orders"}
    assert "model.utils_status_counts" in set(manifest.graph.predecessors("model.utils_totals"))  # ref('shop_utils', ...)
    # vars: the project's scoped to the package over the package's own; its own macro by its name alone
    assert "'project' as set_by" in counts.sql and "o.status = 'placed'" in counts.sql and "'|' as separator" in counts.sql
    assert manifest.tests["unique_utils_status_counts_label"].depends_on == ("utils_status_counts",)  # its YAML is read

    for selection in ("package:shop_utils", "shop_utils"):  # dbt's package method, and a package's name
        capsys.readouterr()
        main(["--project-dir", str(shop), "ls", "-s", selection])
        assert capsys.readouterr().out.split() == ["utils_statuses", "utils_status_counts"]

    settings = shop / "dbt_project.yml"
    settings.write_text(settings.read_text().replace("vars:\n", "vars:\n  shop_utils_status: shipped\n"))
    assert "o.status = 'shipped'" in compile_project(load_project(shop)).models["utils_status_counts"].sql  # the project's
    main(["--project-dir", str(shop), "--vars", "{shop_utils_label: given}", "compile"])  # --vars over every var
    compiled = shop / "target" / "compiled" / "shop_utils" / "utils_status_counts.sql"
    assert "'given' AS set_by" in compiled.read_text()
    (shop / "macros" / "schemas.sql").write_text(
        "{% macro generate_schema_name(custom, node) %}{{ target.schema }}_{{ node.package_name }}{% endmacro %}\n")
    manifest = compile_project(load_project(shop))
    assert (manifest.models["utils_status_counts"].schema, manifest.models["order_keys"].schema) == ("shop_dev_shop_utils", "shop_dev_shop")


@pytest.mark.parametrize("sql, expected", [
    ("select {{ separator() }} as s", "undefined in template: 'separator' is undefined"),  # dbt: only the package's files
    ("select * from {{ ref('nopkg', 'utils_status_counts') }}",
     "ref('nopkg', 'utils_status_counts'): no package 'nopkg' is installed — name one of shop, shop_utils"),
    ("select * from {{ ref('shop', 'utils_status_counts') }}",
     "ref() looks for 'utils_status_counts' in the project, and it is in package 'shop_utils' — write ref('utils_status_counts')"),
])
def test_a_projects_model_reaches_a_package_only_by_its_name(shop, tmp_path, capsys, sql, expected):
    shutil.copytree(FIXTURES / "shop_utils", tmp_path / "shop_utils")
    with_package(shop, "packages:\n  - local: ../shop_utils\n")
    assert _deps(shop, capsys)[0] == 0
    (shop / "models" / "marts" / "reach.sql").write_text(sql + "\n")
    with pytest.raises(SystemExit):
        main(["--project-dir", str(shop), "compile"])
    err = capsys.readouterr().err
    assert f"models/marts/reach.sql:1: " in err and expected in err and "Traceback" not in err, err


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
