"""What dbt's Jinja offers besides ``ref``/``source``/``config``/``var``: ``target``, and in a
dbt project ``execute``, ``log``, ``exceptions``, ``modules``, ``adapter.dispatch`` and
``return``. Functions that need a live connection at compile time (``run_query``) are refused
with one line."""

from __future__ import annotations

import datetime
import itertools
import json
import re
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Callable, Mapping

import jinja2
import jinja2.runtime

from ..sandbox import Modules
from .macros import Behavior, SparkColumn

if TYPE_CHECKING:
    from ..project import Project, Target


@dataclass(frozen=True)
class TargetContext:
    """``{{ target }}``: the target's name and default schema (dbt's ``target.schema``)."""

    name: str
    schema: str
    profile_name: str
    type: str = "spark"
    threads: int = 1
    database: None = None

    @property
    def target_name(self) -> str:
        return self.name

    @classmethod
    def of(cls, target: "Target | None", project: "Project") -> "TargetContext":
        if target is None:
            return cls("local", "default", project.name)
        return cls(target.name, target.spark.database, project.name)

    def __str__(self) -> str:
        return self.name


class Return(Exception):
    """``{% do return(value) %}`` inside a macro: the macro's value (see ``ReturningMacro``)."""

    def __init__(self, value: Any):
        super().__init__("return() outside a macro")
        self.value = value


class ReturningMacro(jinja2.runtime.Macro):
    """A macro whose ``return(value)`` gives ``value`` (else its rendered text), as in dbt: the
    environment's ``macro_class`` (``compiler.sandbox``), so a call between macros of one file,
    which Jinja resolves inside the file, returns too."""

    def _invoke(self, arguments: list[Any], autoescape: bool) -> Any:
        try:
            return super()._invoke(arguments, autoescape)
        except Return as done:
            return done.value


def dbt_globals(env: jinja2.Environment, flags: Mapping[str, Any] | None = None,
                search: Callable[[str | None], list[Mapping[str, Any]]] | None = None,
                warn: Callable[..., str] | None = None, log: Callable[..., str] | None = None) -> dict[str, Any]:
    """The names a dbt project's templates see besides mvflow's; ``flags``: dbt_project.yml's
    ``flags:``; ``search``: the macro tables ``adapter.dispatch`` looks in for a namespace, in order
    (default: every name the templates see); ``warn``: ``exceptions.warn``, ``log``: ``log``
    (default: silent)."""
    def dispatch(name: str, macro_namespace: str | None = None, packages: Any = None) -> Any:  # packages: dbt's, deprecated
        tables = search(macro_namespace) if search is not None else [env.globals]
        for table in tables:
            for candidate in (f"spark__{name}", f"default__{name}"):
                if candidate in table:
                    return table[candidate]
        where = f" in {macro_namespace}" if macro_namespace else ""
        raise jinja2.UndefinedError(f"adapter.dispatch('{name}'): no macro spark__{name} or default__{name}{where}")

    def refused(name: str) -> Callable[..., Any]:
        def call(*_: Any, **__: Any) -> Any:
            raise jinja2.TemplateRuntimeError(f"{name}() queries the database while compiling: mvflow compiles without Spark")
        return call

    def raise_compiler_error(message: str, node: Any = None) -> Any:
        raise jinja2.TemplateRuntimeError(message)

    def try_or_compiler_error(message: str, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - dbt's contract: any failure is the given message
            raise jinja2.TemplateRuntimeError(message) from exc

    return {
        "execute": True,
        "log": log or (lambda *args, **kwargs: ""),
        "print": lambda *args, **kwargs: "",
        "return": lambda value=None: _raise(Return(value)),
        "exceptions": SimpleNamespace(raise_compiler_error=raise_compiler_error, warn=warn or (lambda *a, **k: ""),
                                      raise_not_implemented=raise_compiler_error),
        "try_or_compiler_error": try_or_compiler_error,
        "modules": Modules(datetime=datetime, re=re, itertools=itertools),  # the sandbox's one way to a module
        "tojson": json.dumps,
        "fromjson": json.loads,
        "run_query": refused("run_query"),
        "statement": refused("statement"),
        "api": SimpleNamespace(Column=SparkColumn),
        "adapter": SimpleNamespace(dispatch=dispatch, quote=lambda name: f"`{name}`", get_relation=refused("adapter.get_relation"),
                                   type=lambda: "spark", behavior=Behavior(dict(flags or {}))),
    }


def _raise(exc: Exception) -> Any:
    raise exc
