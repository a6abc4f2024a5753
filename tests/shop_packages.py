"""The shop_utils package (tests/fixtures/shop_utils) as dbt and mvflow install it: from a git
repository made in the test, into a copy of the dbt_shop project that uses it."""

from __future__ import annotations

import shutil
import subprocess
import textwrap
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"
KEYED = "select {{ shop_utils.surrogate_key(['order_id', 'status']) }} as order_key, order_id from {{ ref('stg_orders') }}\n"


def git(*args: str, cwd: Path) -> str:
    done = subprocess.run(["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args], cwd=cwd,
                          capture_output=True, text=True, check=True)
    return done.stdout.strip()


def package_repository(where: Path) -> Path:
    """The fixture package as a git repository with tag v1."""
    repo = shutil.copytree(FIXTURES / "shop_utils", where)
    git("init", "-q", cwd=repo)
    git("add", "-A", cwd=repo)
    git("commit", "-qm", "v1", cwd=repo)
    git("tag", "v1", cwd=repo)
    return repo


#: the project's settings for the package: its models in the marts schema, one disabled, a var of its set
PACKAGE_SETTINGS = (("vars:\n", "vars:\n  shop_utils: {shop_utils_label: project}\n"),
                    ("models:\n", "models:\n  shop_utils:\n    +schema: marts\n    utils_unused:\n      +enabled: false\n"))


def with_package(project: Path, packages: str) -> Path:
    """The shop project with ``packages`` (packages.yml's text), a model keyed by the package's macro
    and the package's generic test on it, settings for the package's models, and a model that reads
    one of them (``ref('shop_utils', 'utils_status_counts')``)."""
    (project / "packages.yml").write_text(textwrap.dedent(packages))
    settings = project / "dbt_project.yml"
    text = settings.read_text()
    for anchor, replacement in PACKAGE_SETTINGS:
        assert text.count(anchor) == 1, f"dbt_project.yml no longer has one {anchor!r}"
        text = text.replace(anchor, replacement)
    settings.write_text(text)
    (project / "models" / "marts" / "order_keys.sql").write_text(KEYED)
    (project / "models" / "marts" / "utils_totals.sql").write_text(
        "select sum(orders) as orders, max(set_by) as set_by from {{ ref('shop_utils', 'utils_status_counts') }}\n")
    (project / "models" / "marts" / "order_keys.yml").write_text(textwrap.dedent("""
        version: 2
        models:
          - name: order_keys
            columns:
              - name: order_id
                data_tests:
                  - shop_utils.at_least: {value: 1}
    """))
    return project
