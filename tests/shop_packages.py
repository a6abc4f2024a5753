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


def with_package(project: Path, packages: str) -> Path:
    """The shop project with ``packages`` (packages.yml's text), a model keyed by the package's macro
    and the package's generic test on it."""
    (project / "packages.yml").write_text(textwrap.dedent(packages))
    (project / "models" / "marts" / "order_keys.sql").write_text(KEYED)
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
