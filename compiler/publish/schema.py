"""The published table's schema from the MV's (pure): Spark types mapped to PostgreSQL's, the
MV's unique key as primary key, the declared indexes, and the value conversions COPY needs.

>>> from pyspark.sql.types import StructType, StructField, LongType, StringType, DecimalType
>>> t = Table("public", "offers", (Column("offer_id", "bigint", nullable=False), Column("price", "numeric(12,2)")),
...           ("offer_id",))
>>> print(t.create_sql("offers__new"))
CREATE TABLE "public"."offers__new" (
  "offer_id" bigint NOT NULL,
  "price" numeric(12,2)
)
>>> print(t.key_sql("offers__new"))
ALTER TABLE "public"."offers__new" ADD CONSTRAINT "offers__new_key" PRIMARY KEY ("offer_id")
>>> pg_type(DecimalType(12, 2)), pg_type(StringType())
('numeric(12,2)', 'text')
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql.types import DataType, StructType


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # PostgreSQL's
    json: bool = False  # a struct or map (or an array of them): stored as jsonb
    nullable: bool = True


@dataclass(frozen=True)
class Table:
    schema: str
    name: str
    columns: tuple[Column, ...]
    key: tuple[str, ...]

    @property
    def qualified(self) -> str:
        return f"{quote(self.schema)}.{quote(self.name)}"

    def named(self, name: str) -> str:
        return f"{quote(self.schema)}.{quote(name)}"

    def create_sql(self, name: str) -> str:
        """The table without its key: a fresh table is loaded first and keyed after (``key_sql``)."""
        lines = [f"  {quote(c.name)} {c.type}{'' if c.nullable else ' NOT NULL'}" for c in self.columns]
        return f"CREATE TABLE {self.named(name)} (\n" + ",\n".join(lines) + "\n)"

    @property
    def nullable_key(self) -> bool:
        """A key column may hold NULL (a GROUP BY of a left-joined column: NULL is one group)."""
        return any(c.nullable for c in self.columns if c.name in self.key)

    def key_sql(self, name: str) -> str:
        """The MV's unique key as the primary key; where Spark says a key column may be NULL, a
        unique constraint in which NULLs are one value, as in Spark's GROUP BY (PostgreSQL 15+).

        >>> print(Table("public", "g", (Column("region", "text"),), ("region",)).key_sql("g"))
        ALTER TABLE "public"."g" ADD CONSTRAINT "g_key" UNIQUE NULLS NOT DISTINCT ("region")
        """
        kind = "UNIQUE NULLS NOT DISTINCT" if self.nullable_key else "PRIMARY KEY"
        return f"ALTER TABLE {self.named(name)} ADD CONSTRAINT {quote(name + '_key')} {kind} ({', '.join(map(quote, self.key))})"

    def index_sql(self, name: str, indexes: tuple[tuple[str, ...], ...]) -> list[str]:
        """``CREATE INDEX`` per declared index of table ``name``, each named ``index_name(name, cols)``
        (a swap renames them after the published table).

        >>> Table("public", "o", (Column("a", "text"),), ("a",)).index_sql("o__new", (("a",),))
        ['CREATE INDEX "o__new__a" ON "public"."o__new" ("a")']
        """
        return [f"CREATE INDEX {quote(index_name(name, cols))} ON {self.named(name)} ({', '.join(map(quote, cols))})"
                for cols in indexes]

    @property
    def fingerprint(self) -> str:
        """What a published table must match to be published into by key: its columns, types and
        key, as JSON (``added_columns`` reads it back).

        >>> Table("public", "o", (Column("id", "bigint", nullable=False),), ("id",)).fingerprint
        '{"columns": [["id", "bigint", false]], "key": ["id"]}'
        """
        return json.dumps({"columns": [[c.name, c.type, c.nullable] for c in self.columns], "key": list(self.key)})

    def added_columns(self, fingerprint: str) -> tuple[Column, ...] | None:
        """The columns this table adds to the one ``fingerprint`` describes, when it only adds some:
        the same key, every column there with its type and a NULL allowed wherever it was (None:
        anything else, a store written before fingerprints were readable included).

        >>> old = Table("public", "o", (Column("id", "bigint", nullable=False), Column("a", "text")), ("id",))
        >>> new = Table("public", "o", (*old.columns[:1], Column("b", "date"), old.columns[1]), ("id",))
        >>> [c.name for c in new.added_columns(old.fingerprint)]
        ['b']
        >>> Table("public", "o", (old.columns[0], Column("a", "integer")), ("id",)).added_columns(old.fingerprint) is None
        True
        """
        try:
            old = json.loads(fingerprint)
            columns = {name: (kind, nullable) for name, kind, nullable in old["columns"]}
            key = old["key"]
        except (ValueError, TypeError, KeyError):
            return None
        mine = {c.name: c for c in self.columns}
        if key != list(self.key) or any(name not in mine or mine[name].type != kind or mine[name].nullable and not nullable
                                        for name, (kind, nullable) in columns.items()):
            return None
        return tuple(c for c in self.columns if c.name not in columns)


def index_name(table: str, columns: tuple[str, ...]) -> str:
    return f"{table}__{'_'.join(columns)}"


def quote(name: str) -> str:
    """A PostgreSQL identifier, quoted (names come from the MV's columns and the config's checked names).

    >>> quote('shop_id'), quote('we"ird')
    ('"shop_id"', '"we""ird"')
    """
    return '"' + name.replace('"', '""') + '"'


def table_of(schema: "StructType", qualified: str, key: tuple[str, ...]) -> Table:
    """The published table of rows of Spark ``schema``, named ``qualified`` (``name`` or ``schema.name``)."""
    pg_schema, _, name = qualified.rpartition(".")
    columns = tuple(Column(f.name, pg_type(f.dataType), _is_json(f.dataType), f.nullable) for f in schema.fields)
    return Table(pg_schema or "public", name, columns, key)


def pg_type(spark_type: "DataType") -> str:
    """PostgreSQL's type for a Spark type: timestamps with time zone (Spark's ``timestamp`` is an
    instant), decimals kept exact, arrays of scalars as arrays, structs and maps as ``jsonb``.

    >>> from pyspark.sql.types import (ArrayType, BooleanType, ByteType, DateType, DoubleType, IntegerType,
    ...     MapType, StringType, TimestampNTZType, TimestampType)
    >>> [pg_type(t) for t in (IntegerType(), ByteType(), DoubleType(), BooleanType(), DateType(), TimestampType(),
    ...                       TimestampNTZType(), ArrayType(StringType()), MapType(StringType(), IntegerType()))]
    ['integer', 'smallint', 'double precision', 'boolean', 'date', 'timestamptz', 'timestamp', 'text[]', 'jsonb']
    """
    from pyspark.sql import types as T

    if isinstance(spark_type, T.ArrayType):
        inner = spark_type.elementType
        return "jsonb" if _is_json(inner) or isinstance(inner, T.ArrayType) else f"{pg_type(inner)}[]"
    if isinstance(spark_type, T.DecimalType):
        return f"numeric({spark_type.precision},{spark_type.scale})"
    if _is_json(spark_type):
        return "jsonb"
    simple = {T.StringType: "text", T.VarcharType: "text", T.CharType: "text", T.LongType: "bigint",
              T.IntegerType: "integer", T.ShortType: "smallint", T.ByteType: "smallint", T.BooleanType: "boolean",
              T.DoubleType: "double precision", T.FloatType: "real", T.DateType: "date", T.TimestampType: "timestamptz",
              T.TimestampNTZType: "timestamp", T.BinaryType: "bytea", T.NullType: "text"}
    for cls, name in simple.items():
        if isinstance(spark_type, cls):
            return name
    return "text"  # intervals and the rest: their text


def _is_json(spark_type: "DataType") -> bool:
    from pyspark.sql import types as T

    if isinstance(spark_type, T.ArrayType):
        return _is_json(spark_type.elementType) or isinstance(spark_type.elementType, T.ArrayType)
    return isinstance(spark_type, (T.StructType, T.MapType))


def copy_value(value: Any, column: Column) -> Any:
    """A Spark value as COPY writes it: structs, maps and nested arrays as JSON text; an instant
    (PySpark gives it as a naive datetime in the process's local time zone) with its zone, so
    that the server's time zone setting cannot shift it.

    >>> from pyspark.sql import Row
    >>> copy_value(Row(a=1, b=[2]), Column("c", "jsonb", True)), copy_value(None, Column("c", "jsonb", True))
    ('{"a": 1, "b": [2]}', None)
    >>> copy_value(datetime(2026, 1, 2, 3, 4), Column("t", "timestamptz")).tzinfo is not None
    True
    """
    if value is None:
        return None
    if column.json:
        return json.dumps(_plain(value), default=str, sort_keys=False)
    if column.type == "timestamptz" and isinstance(value, datetime) and value.tzinfo is None:
        return value.astimezone()
    return value


def _plain(value: Any) -> Any:
    from pyspark.sql import Row

    if isinstance(value, Row):
        return {k: _plain(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
