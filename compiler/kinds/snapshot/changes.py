"""Beyond dbt: a snapshot that reads one Delta table row by row (no join, aggregate, window or
DISTINCT) and whose ``unique_key`` are columns of that table reads only the keys the table's
Change Data Feed names since the version its last run saw, not the whole table. A key the feed
names is restaged whole (inserted, updated, deleted, or moved out of the WHERE), so the history
is the one the whole SELECT gives; a run that finds no new version does nothing. Without the
feed, or when it does not reach back to that version (vacuumed, turned on later), the snapshot
reads its whole SELECT as dbt does.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import sqlglot
from sqlglot import exp

#: what makes a SELECT more than a row-by-row reading of one table
_NOT_ROW_WISE = (exp.Join, exp.Group, exp.Having, exp.Window, exp.AggFunc, exp.Limit, exp.Lateral, exp.Explode, exp.Union)


@dataclass(frozen=True)
class KeyedSource:
    """The one table a snapshot reads row by row, and the column of it behind each key."""

    table: str
    key_columns: tuple[str, ...]  # in the order of unique_key

    def changed_keys(self, keys: tuple[str, ...], versions: tuple[int, int] | None = None) -> str:
        """The keys the table's changes in ``versions`` (first, last) touch, named as the snapshot's;
        without versions, with the markers ``:from_version`` and ``:to_version`` (``target/run/``).
        The numbers are written into the text: Spark refuses parameter markers in a view."""
        columns = ", ".join(f"{c} AS {k}" if c != k else c for c, k in zip(self.key_columns, keys))
        first, last = versions or (":from_version", ":to_version")
        return f"SELECT DISTINCT {columns}\nFROM table_changes('{self.table}', {first}, {last})"


def keyed_source(sql: str, unique_key: tuple[str, ...]) -> KeyedSource | None:
    """The table behind a snapshot's keys, when its SELECT reads one table row by row.

    >>> keyed_source("SELECT id, owner AS who FROM raw.tickets WHERE state <> 'spam'", ("id", "who"))
    KeyedSource(table='raw.tickets', key_columns=('id', 'owner'))
    >>> keyed_source("SELECT * FROM raw.tickets", ("id",))
    KeyedSource(table='raw.tickets', key_columns=('id',))
    >>> [keyed_source(q, ("id",)) for q in ("SELECT id, count(*) AS n FROM t GROUP BY id", "SELECT a.id FROM a JOIN b ON a.id = b.id",
    ...                                     "SELECT id + 1 AS id FROM t", "SELECT DISTINCT id FROM t")]
    [None, None, None, None]
    """
    try:
        tree = sqlglot.parse_one(sql, read="spark")
    except sqlglot.errors.ParseError:
        return None
    if (not isinstance(tree, exp.Select) or tree.args.get("with") or tree.args.get("distinct") or tree.find(*_NOT_ROW_WISE)
            or any(node is not tree for node in tree.find_all(exp.Select))):
        return None
    source = tree.args.get("from_")
    if source is None or not isinstance(source.this, exp.Table) or not source.this.name:
        return None
    table = ".".join(part.name for part in source.this.parts)
    star = any(isinstance(e, exp.Star) for e in tree.expressions)
    named = {e.alias_or_name.lower(): e.unalias() for e in tree.expressions if not isinstance(e, exp.Star)}
    columns = []
    for key in unique_key:
        found = named.get(key.lower())
        if isinstance(found, exp.Column):
            columns.append(found.name)
        elif found is None and star and exp.to_identifier(key).name == key:
            columns.append(key)
        else:
            return None
    return KeyedSource(table, tuple(columns))


def change_feed_on(table_info: dict[str, str] | None) -> bool:
    """Whether ``DESCRIBE TABLE EXTENDED`` shows a Delta table with its Change Data Feed on."""
    return bool(table_info) and "delta.enableChangeDataFeed=true" in table_info.get("Table Properties", "")


def seen(watch: str | None, table: str, select_sql: str) -> tuple[int, int | None] | None:
    """The version of ``table`` the snapshot's last run read (its state store watch) and when that
    version was committed (``table_format.commit_time``: a table dropped and created again has
    another commit there), if that run read the same table with the same SELECT (another SELECT
    must be compared whole).

    >>> seen(watched("raw.t", 7, "SELECT 1", 1700), "raw.t", "SELECT 1"), seen(watched("raw.t", 7, "SELECT 1"), "raw.t", "SELECT 2")
    ((7, 1700), None)
    """
    try:
        found = json.loads(watch or "")
    except ValueError:
        return None
    if not isinstance(found, dict) or found.get("table") != table or found.get("select") != _digest(select_sql):
        return None
    return int(found["version"]), found.get("commit")


def watched(table: str, version: int, select_sql: str, committed_at: int | None = None) -> str:
    """What ``seen`` reads back: the table's version a run read (and its commit's time), with the
    SELECT it read it by."""
    return json.dumps({"table": table, "version": version, "select": _digest(select_sql), "commit": committed_at})


def _digest(sql: str) -> str:
    return hashlib.sha256(sql.encode()).hexdigest()[:16]
