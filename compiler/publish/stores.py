"""The serving stores a target declares (``project.yml``)::

    targets:
      prod:
        stores:
          app: {type: postgres, dsn: "{{ env_var('APP_DSN') }}"}

A store's dsn holds a secret: it is kept as written and rendered only when a publish connects
(``compile`` and ``docs`` never need the variable set), and it is never printed, written to
``target/`` or shown in the docs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import Problem, RunError

if TYPE_CHECKING:
    from ..project import Target
    from .postgres import PostgresStore

STORE_TYPES = ("postgres",)
STORE_KEYS = {"type", "dsn"}


@dataclass(frozen=True)
class StoreSettings:
    name: str
    type: str
    dsn_template: str = field(repr=False)  # as written in project.yml: ``{{ env_var(...) }}``, rendered at connect time
    line: int = 0

    def __repr__(self) -> str:  # never the dsn
        return f"StoreSettings(name={self.name!r}, type={self.type!r})"


def store_problems(name: str, raw: Any, target: str, file: str, line: int) -> list[Problem]:
    """Problems of one ``stores:`` entry of a target."""
    where = f"target '{target}' store '{name}'"
    if not isinstance(raw, dict):
        return [Problem(f"{where} must be a mapping", file, line, code="bad-config",
                        hint="e.g. app: {type: postgres, dsn: \"{{ env_var('APP_DSN') }}\"}")]
    problems = [Problem(f"{where}: unknown key '{key}'", file, line, code="bad-config",
                        hint="valid keys: " + ", ".join(sorted(STORE_KEYS))) for key in sorted(set(raw) - STORE_KEYS)]
    if str(raw.get("type", "")).strip().lower() not in STORE_TYPES:
        problems.append(Problem(f"{where}: type {raw.get('type')!r} is not a store type", file, line, code="bad-config",
                                hint="write type: postgres"))
    dsn = raw.get("dsn")
    if not isinstance(dsn, str) or not dsn.strip():
        problems.append(Problem(f"{where} needs a dsn", file, line, code="bad-config",
                                hint="dsn: \"{{ env_var('APP_DSN') }}\" (a secret: only from an environment variable)"))
    elif "{{" not in dsn and ("password=" in dsn or ("@" in dsn and ":" in dsn.split("@")[0].split("//")[-1])):
        problems.append(Problem(f"{where}: the dsn holds a password written in project.yml", file, line,
                                code="secret-in-project", hint="write dsn: \"{{ env_var('APP_DSN') }}\" and set APP_DSN "
                                "where mvflow runs"))
    return problems


def open_store(target: "Target", name: str) -> "PostgresStore":
    from ..project import render_value
    from .postgres import PostgresStore

    settings = target.stores.get(name)
    if settings is None:
        raise RunError(Problem(f"target '{target.name}' declares no store '{name}'", code="unknown-store",
                               hint="declare it under the target's stores: in project.yml"))
    dsn = render_value(settings.dsn_template, f"store '{name}' dsn")
    return PostgresStore(name, dsn)
