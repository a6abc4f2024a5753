"""``config(publish={...})`` of an mv or a table: where its rows are published (pure).

    publish: {to: app, table: offers_wide, indexes: [[country, retail_price], [title]]}

``to`` names a store of the target (``project.yml``: ``targets: {<t>: {stores: {app: {type:
postgres, dsn: ...}}}}``), ``table`` the published table (default: the model's name; ``schema.table``
allowed), ``indexes`` the indexes created beside its primary key (the MV's unique key, a table's
``unique_key``), each a column or a list of columns; ``chunk_rows`` the rows of one transaction of
a batch's publish.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import Problem
from ..kinds.base import KindError
from ..sources import IDENTIFIER

if TYPE_CHECKING:
    from ..manifest import Manifest, Model
    from ..project import Target

_KEYS = ("to", "table", "indexes", "chunk_rows")
_EXAMPLE = "e.g. publish={'to': 'app', 'table': 'offers_wide', 'indexes': [['country', 'retail_price']]}"


@dataclass(frozen=True)
class PublishSpec:
    to: str
    table: str = ""  # empty: the model's name
    indexes: tuple[tuple[str, ...], ...] = ()
    chunk_rows: int = 50_000

    def table_for(self, model_name: str) -> str:
        return self.table or model_name

    def to_dict(self) -> dict[str, Any]:
        return {"to": self.to, "table": self.table, "indexes": [list(i) for i in self.indexes],
                "chunk_rows": self.chunk_rows}


def parse_publish(value: Any) -> PublishSpec:
    """The ``publish`` config value as a spec; a bad one raises ``KindError`` (its hint says what to write).

    >>> parse_publish({"to": "app", "indexes": ["country", ["shop_id", "price"]]})
    PublishSpec(to='app', table='', indexes=(('country',), ('shop_id', 'price')), chunk_rows=50000)
    >>> parse_publish({"to": "app", "table": "serving.offers"}).table
    'serving.offers'
    >>> parse_publish({"to": "app", "indexes": [["a; DROP TABLE x"]]})
    Traceback (most recent call last):
    ...
    compiler.kinds.base.KindError: publish indexes: 'a; DROP TABLE x' is not a plain column name
    """
    if not isinstance(value, dict):
        raise _error(f"publish must be a mapping, got {value!r}")
    unknown = sorted(set(value) - set(_KEYS))
    if unknown:
        raise _error(f"publish has unknown key(s) {', '.join(map(str, unknown))}", "valid keys: " + ", ".join(_KEYS))
    to = value.get("to")
    if not isinstance(to, str) or not IDENTIFIER.fullmatch(to):
        raise _error(f"publish needs 'to', the name of a store of the target, got {to!r}")
    table = value.get("table", "")
    if not isinstance(table, str) or (table and not all(IDENTIFIER.fullmatch(p) for p in table.split("."))) \
            or table.count(".") > 1:
        raise _error(f"publish table must be a name or schema.name, got {table!r}")
    chunk_rows = value.get("chunk_rows", PublishSpec.chunk_rows)
    if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, int) or chunk_rows <= 0:
        raise _error(f"publish chunk_rows must be a positive number, got {chunk_rows!r}")
    return PublishSpec(to, table, _indexes(value.get("indexes", ())), chunk_rows)


def _indexes(value: Any) -> tuple[tuple[str, ...], ...]:
    if not isinstance(value, (list, tuple)):
        raise _error(f"publish indexes must be a list of columns or of lists of columns, got {value!r}")
    found = []
    for index in value:
        columns = (index,) if isinstance(index, str) else tuple(index) if isinstance(index, (list, tuple)) else ()
        if not columns:
            raise _error(f"publish indexes: {index!r} is not a column or a list of columns")
        for column in columns:
            if not isinstance(column, str) or not IDENTIFIER.fullmatch(column):
                raise _error(f"publish indexes: {column!r} is not a plain column name")
        found.append(columns)
    return tuple(found)


def _error(message: str, hint: str = _EXAMPLE) -> KindError:
    return KindError(message, hint, "bad-publish", "publish")


def publish_problems(model: "Model", key: tuple[str, ...], target: "Target") -> list[Problem]:
    """What ``compile`` checks of a model's ``publish``: its store is declared by the target, its
    indexes name output columns, and its rows have a ``key`` (the published table's primary key:
    an mv's unique key among its columns, a table's ``unique_key``)."""
    spec: PublishSpec = model.kind.publish
    line = model.config_lines.get("publish", 1)
    kind = f"{model.kind.name} '{model.name}'"
    found = []
    if spec.to not in target.stores:
        found.append(Problem(f"{kind}: publish names store '{spec.to}', which target '{target.name}' does not "
                             "declare", model.path, line, code="unknown-store",
                             hint=f"declare it in project.yml: targets: {{{target.name}: {{stores: {{{spec.to}: "
                                  "{type: postgres, dsn: \"{{ env_var('APP_DSN') }}\"}}}}}"
                             + (f" (declared: {', '.join(sorted(target.stores))})" if target.stores else "")))
    outputs = {c.lower() for c in model.columns or ()}
    for column in sorted({c for index in spec.indexes for c in index if outputs and c.lower() not in outputs}):
        found.append(Problem(f"{kind}: publish indexes name column '{column}', which the {model.kind.name} does not output",
                             model.path, line, code="bad-publish", hint="its columns: " + ", ".join(model.columns or ())))
    missing = [k for k in key if outputs and k.lower() not in outputs]
    if not key or missing:
        found.append(Problem(f"{kind} cannot be published: " + (
            f"its unique_key names column(s) {', '.join(missing)}, which it does not output" if missing
            else "its rows have no unique key among its columns"), model.path, line, code="bad-publish",
            hint="select the columns of the MV's key (the grain of its one-to-many join)" if model.kind.name == "mv"
            else "declare the key of its rows: config(unique_key='id')"))
    return found


def check_published_tables(manifest: "Manifest") -> None:
    """``compile``'s checks of every table model's ``publish`` (an mv's are ``check_mvs``'s)."""
    from ..errors import CompileError

    target = manifest.project.target(manifest.target)
    problems = [p for m in manifest.models.values() if m.kind.name == "table" and m.kind.publish is not None
                for p in publish_problems(m, m.kind.unique_key, target)]
    if problems:
        raise CompileError(problems)
