"""dbt's macro library: the cross-database macros a dbt project calls (``dbt.date_trunc``,
``dbt.type_string()``, ``{{ dateadd('day', 1, 'x') }}`` …), read from the installed packages that
ship them rather than rewritten: dbt-adapters' global project (``default__`` implementations) and
dbt-spark's (``spark__``). ``pip install 'mvflow[dbt]'`` installs both; mvflow reads their ``.sql``
files only and never imports dbt (``scripts/setup.sh`` installs them without dbt-core).

Only the macros that render SQL text are read (``macros/utils``, dates, timestamps); those that
query the database (``dbt.get_columns_in_relation``, ``date_spine``'s interval count) reach
``run_query``/``statement``, which mvflow refuses at compile time with one line.

Lookup follows dbt: ``adapter.dispatch('x', 'dbt')`` tries ``spark__x`` then ``default__x`` among
the project's macros first, then the library's, so a project overrides one implementation by
defining it; ``dbt.x`` is always the library's own ``x``.

>>> files = library_files()
>>> [f.name for f in files if f.name == "dateadd.sql"] if files else ["dateadd.sql", "dateadd.sql"]
['dateadd.sql', 'dateadd.sql']
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jinja2

INSTALL_HINT = "install dbt's macro library: pip install 'mvflow[dbt]' (dbt-adapters and dbt-spark; scripts/setup.sh does)"
#: what is read of each package under ``dbt/include/``, in this order (Spark's after the defaults)
_READ = (
    ("global_project", ("macros/utils", "macros/etc/datetime.sql", "macros/adapters/timestamps.sql")),
    ("spark", ("macros/utils",)),
)


@cache
def library_files() -> tuple[Path, ...]:
    """The library's macro files, from the first ``sys.path`` entry that holds dbt's global
    project (empty when it is not installed). Found by path: importing dbt is not needed."""
    for entry in sys.path:
        include = Path(entry or ".") / "dbt" / "include"
        if not (include / "global_project" / "macros").is_dir():
            continue
        files: list[Path] = []
        for package, parts in _READ:
            for part in parts:
                path = include / package / part
                files += sorted(path.glob("*.sql")) if path.is_dir() else [path] if path.is_file() else []
        return tuple(files)
    return ()


#: the library's templates compiled once per process: every renderer's environment generates the same code
_CODE: dict[Path, Any] = {}


def library_code(env: jinja2.Environment, path: Path) -> Any:
    """A library file's compiled template: once per process, and from the compile cache's Jinja
    bytecode when there is one (compiling the library takes ~0.2 s)."""
    if path not in _CODE:
        source = path.read_text(encoding="utf-8")
        cache = env.bytecode_cache
        bucket = cache.get_bucket(env, path.name, str(path), source) if cache is not None else None
        if bucket is not None and bucket.code is None:
            bucket.code = env.compile(source, path.name, str(path))
            cache.set_bucket(bucket)
        _CODE[path] = bucket.code if bucket is not None else env.compile(source, path.name, str(path))
    return _CODE[path]


class MacroMissing(jinja2.UndefinedError):
    """A macro a namespace does not have, with what to do about it."""

    def __init__(self, message: str, hint: str):
        super().__init__(message)
        self.hint = hint


class Namespace:
    """A package's macros by name, as dbt offers them: ``dbt.date_trunc(...)``."""

    def __init__(self, name: str, macros: dict[str, Any], hint: str = ""):
        self._name, self._macros, self._hint = name, macros, hint

    def __getattr__(self, macro: str) -> Any:
        if macro.startswith("_"):
            raise AttributeError(macro)
        if macro in self._macros:
            return self._macros[macro]
        if not self._macros:
            raise MacroMissing(f"{self._name}.{macro}: {self._name}'s macro library is not installed", self._hint)
        raise MacroMissing(f"{self._name}.{macro}: {self._name} has no macro '{macro}'",
                           f"macros of {self._name} start with: " + ", ".join(sorted(m for m in self._macros if not m.startswith(("default__", "spark__")))[:12]) + " …")


@dataclass(frozen=True)
class Flag:
    """One of dbt's behavior flags (``adapter.behavior.<name>``): false unless the project's
    ``flags:`` sets it, as dbt's defaults for the flags its macros read."""

    setting: bool = False

    @property
    def no_warn(self) -> bool:
        return self.setting

    def __bool__(self) -> bool:
        return self.setting


class Behavior:
    """``adapter.behavior``: the project's ``flags:`` by name."""

    def __init__(self, flags: dict[str, Any]):
        self._flags = flags

    def __getattr__(self, name: str) -> Flag:
        if name.startswith("_"):
            raise AttributeError(name)
        return Flag(bool(self._flags.get(name, False)))


class SparkColumn:
    """``api.Column``: the type names dbt-spark's ``SparkColumn`` gives the type macros."""

    @staticmethod
    def translate_type(dtype: str) -> str:
        return dtype

    @staticmethod
    def numeric_type(dtype: str, precision: Any = None, scale: Any = None) -> str:
        """Spark has no ``numeric``: ``decimal``.

        >>> SparkColumn.numeric_type("numeric", 28, 6), SparkColumn.numeric_type("numeric", None, None)
        ('decimal(28,6)', 'decimal')
        """
        return "decimal" if precision is None or scale is None else f"decimal({precision},{scale})"
