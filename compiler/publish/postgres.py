"""A PostgreSQL serving store: the published tables, and beside them the table of what each holds
(``mvflow_published``: its MV batch, definition, fingerprint and the fencing token of the last
publisher), written in the same transaction as the rows, so a crash anywhere is redone exactly.

Every transaction of a publish first locks the table's offsets row and refuses to go on when a
publisher with a newer lease token wrote it (``Fenced``): two publishers never interleave.
Rows go in by ``COPY`` into a temporary staging table, then one ``DELETE … USING`` of the keys gone
and one ``INSERT … ON CONFLICT DO UPDATE`` per chunk; a full publish loads a fresh table, indexes
it, and swaps it in by renames in one transaction; columns added to the MV are added to the table
readers have, whose rows are then replaced in one transaction (``replace_rows``).
"""

from __future__ import annotations

from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any, Iterable, Iterator

from ..errors import Problem, RunError
from ..state import Lease
from .decisions import Published
from .schema import Column, Table, copy_value, index_name, quote

OFFSETS = "mvflow_published"
NEW = "__mvflow_new"  # the suffix of the fresh table a full publish loads


class Fenced(RunError):
    """A publisher with a newer lease wrote the published table: this one stops."""


class PostgresStore:
    def __init__(self, name: str, dsn: str):
        import psycopg  # only a project that publishes needs the driver loaded

        self.name, self._psycopg, self._dsn = name, psycopg, dsn
        with self._transaction() as db:
            db.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (OFFSETS,))  # one creator at a time
            db.execute(f"""CREATE TABLE IF NOT EXISTS {OFFSETS} (tbl TEXT PRIMARY KEY, mv TEXT NOT NULL,
                batch BIGINT NOT NULL, definition TEXT NOT NULL, fingerprint TEXT NOT NULL, token BIGINT NOT NULL,
                rows BIGINT NOT NULL, published_at TIMESTAMPTZ NOT NULL)""")
            # the topic whose lease wrote the row (a store written before it was recorded has '')
            db.execute(f"ALTER TABLE {OFFSETS} ADD COLUMN IF NOT EXISTS lease TEXT NOT NULL DEFAULT ''")

    # -- reading -------------------------------------------------------------------------
    def published(self, table: str) -> Published | None:
        """What ``schema.name`` holds (None: never published in full)."""
        with self._transaction() as db:
            row = db.execute(f"SELECT batch, definition, fingerprint, token, rows, lease FROM {OFFSETS} WHERE tbl = %s",
                             (table,)).fetchone()
        return Published(*row) if row and row[0] >= 0 else None

    def rows(self, table: Table) -> Iterator[tuple]:
        """Every row of the published table, in its columns' order, streamed (``mvflow verify``)."""
        columns = ", ".join(quote(c.name) for c in table.columns)
        with self._transaction() as db, db.cursor(name="mvflow_rows") as cursor:
            cursor.itersize = 10_000
            cursor.execute(f"SELECT {columns} FROM {table.qualified}")
            yield from cursor

    def exists(self, table: Table) -> bool:
        with self._transaction() as db:
            return db.execute("SELECT to_regclass(%s) IS NOT NULL", (table.qualified,)).fetchone()[0]

    # -- by key --------------------------------------------------------------------------
    def upsert_chunk(self, table: Table, rows: list[tuple], gone: list[tuple], lease: Lease, done: Published | None,
                     mv: str) -> None:
        """One chunk in one transaction: ``rows`` upserted, the keys ``gone`` deleted; ``done``: the
        offsets row written with them (the batch's last chunk)."""
        key = ", ".join(map(quote, table.key))
        with self._transaction() as db:
            self._fence(db, table, lease)
            db.execute(f"CREATE TEMP TABLE mvflow_stage (LIKE {table.qualified}) ON COMMIT DROP")
            self._copy(db, "mvflow_stage", table, rows)
            self._delete(db, table, gone)
            others = [c.name for c in table.columns if c.name not in table.key]
            update = (f"DO UPDATE SET {', '.join(f'{quote(c)} = EXCLUDED.{quote(c)}' for c in others)}"
                      if others else "DO NOTHING")
            db.execute(f"INSERT INTO {table.qualified} SELECT * FROM mvflow_stage ON CONFLICT ({key}) {update}")
            if done is not None:
                db.execute(f"DROP TABLE IF EXISTS {table.named(table.name + NEW)}")  # a crashed full publish's
                self._record(db, table, mv, done)

    def replace_rows(self, table: Table, added: tuple[Column, ...], rows: Iterable[tuple], lease: Lease, mv: str,
                     done: Published) -> int:
        """Every row of the MV into the table readers have, in one transaction: ``added`` columns
        first (``ALTER TABLE … ADD COLUMN``), then the keys the MV no longer holds deleted and the
        rows that differ upserted (an unchanged row is not rewritten). Returns the rows sent."""
        key = ", ".join(map(quote, table.key))
        others = [quote(c.name) for c in table.columns if c.name not in table.key]
        with self._transaction() as db:
            self._fence(db, table, lease)
            for column in added:  # nullable: the rows already there get theirs below
                db.execute(f"ALTER TABLE {table.qualified} ADD COLUMN {quote(column.name)} {column.type}")
            db.execute(f"CREATE TEMP TABLE mvflow_stage (LIKE {table.qualified}) ON COMMIT DROP")
            sent = self._copy(db, "mvflow_stage", table, rows)
            db.execute("ANALYZE mvflow_stage")
            for statement in _delete_missing(table):
                db.execute(statement)
            update = (f"DO UPDATE SET ({', '.join(others)}) = ROW({', '.join(f'EXCLUDED.{c}' for c in others)}) "
                      f"WHERE ({', '.join(f't.{c}' for c in others)}) IS DISTINCT FROM "
                      f"({', '.join(f'EXCLUDED.{c}' for c in others)})" if others else "DO NOTHING")
            db.execute(f"INSERT INTO {table.qualified} AS t SELECT * FROM mvflow_stage ON CONFLICT ({key}) {update}")
            db.execute(f"DROP TABLE IF EXISTS {table.named(table.name + NEW)}")  # a crashed full publish's
            self._record(db, table, mv, done)
        return sent

    def _delete(self, db: Any, table: Table, gone: list[tuple]) -> None:
        """The keys ``gone`` deleted: by a join with their COPY (an index lookup each); a key with a
        NULL (one group of a GROUP BY) by a statement of its own, as ``=`` never matches NULL."""
        plain = [k for k in gone if None not in k]
        if plain:
            key_types = ", ".join(f"{quote(c.name)} {c.type}" for c in table.columns if c.name in table.key)
            db.execute(f"CREATE TEMP TABLE mvflow_gone ({key_types}) ON COMMIT DROP")
            with db.cursor().copy(f"COPY mvflow_gone ({', '.join(map(quote, table.key))}) FROM STDIN") as copy:
                for row in plain:
                    copy.write_row(row)
            match = " AND ".join(f"t.{quote(k)} = g.{quote(k)}" for k in table.key)
            db.execute(f"DELETE FROM {table.qualified} AS t USING mvflow_gone AS g WHERE {match}")
        for values in (k for k in gone if None in k):
            where = " AND ".join(f"{quote(k)} IS NULL" if v is None else f"{quote(k)} = %s" for k, v in zip(table.key, values))
            db.execute(f"DELETE FROM {table.qualified} WHERE {where}", [v for v in values if v is not None])

    # -- full ----------------------------------------------------------------------------
    def create_new(self, table: Table, lease: Lease) -> None:
        with self._transaction() as db:
            self._fence(db, table, lease)
            db.execute(f"CREATE SCHEMA IF NOT EXISTS {quote(table.schema)}")
            db.execute(f"DROP TABLE IF EXISTS {table.named(table.name + NEW)}")
            db.execute(table.create_sql(table.name + NEW))

    def load_new(self, table: Table, rows: list[tuple], lease: Lease) -> None:
        with self._transaction() as db:
            self._fence(db, table, lease)
            self._copy(db, table.named(table.name + NEW), table, rows)

    def index_new(self, table: Table, indexes: tuple[tuple[str, ...], ...], lease: Lease) -> None:
        new = table.name + NEW
        with self._transaction() as db:
            self._fence(db, table, lease)
            db.execute(table.key_sql(new))
            for statement in table.index_sql(new, indexes):
                db.execute(statement)
            db.execute(f"ANALYZE {table.named(new)}")

    def swap_in(self, table: Table, indexes: tuple[tuple[str, ...], ...], lease: Lease, mv: str, done: Published) -> None:
        """The fresh table becomes the published one in one transaction: readers see the old rows
        or the new ones, never a half-built table."""
        new = table.name + NEW
        with self._transaction() as db:
            self._fence(db, table, lease)
            for statement in _grants(db, table, table.named(new)):  # what readers were granted, kept
                db.execute(statement)
            db.execute(f"DROP TABLE IF EXISTS {table.qualified}")
            db.execute(f"ALTER TABLE {table.named(new)} RENAME TO {quote(table.name)}")
            db.execute(f"ALTER TABLE {table.qualified} RENAME CONSTRAINT {quote(new + '_key')} TO {quote(table.name + '_key')}")
            for cols in indexes:
                db.execute(f"ALTER INDEX {quote(table.schema)}.{quote(index_name(new, cols))} "
                           f"RENAME TO {quote(index_name(table.name, cols))}")
            self._record(db, table, mv, done)

    # -- helpers -------------------------------------------------------------------------
    def _fence(self, db: Any, table: Table, lease: Lease) -> None:
        """Lock the table's offsets row; refuse a lease older than the one of the same topic that wrote it
        (tokens of different topics do not compare: a row written before mvflow recorded the topic has '')."""
        db.execute(f"INSERT INTO {OFFSETS} VALUES (%s, '', -1, '', '', 0, 0, %s, %s) ON CONFLICT (tbl) DO NOTHING",
                   (_name(table), datetime.now(timezone.utc), lease.topic))
        held, topic = db.execute(f"SELECT token, lease FROM {OFFSETS} WHERE tbl = %s FOR UPDATE", (_name(table),)).fetchone()
        if topic == lease.topic and held > lease.token:
            raise Fenced(Problem(f"store '{self.name}': {_name(table)} was published by a newer publisher (lease "
                                 f"'{lease.topic}', token {held} > {lease.token}): this one stops", code="fenced",
                                 hint="another runner holds the MV's lease now and publishes it; nothing to do here"))

    def _record(self, db: Any, table: Table, mv: str, done: Published) -> None:
        db.execute(f"""UPDATE {OFFSETS} SET mv = %s, batch = %s, definition = %s, fingerprint = %s, token = %s,
                       rows = (SELECT count(*) FROM {table.qualified}), published_at = %s, lease = %s WHERE tbl = %s""",
                   (mv, done.batch, done.definition, done.fingerprint, done.token, datetime.now(timezone.utc),
                    done.lease, _name(table)))

    def _copy(self, db: Any, target: str, table: Table, rows: Iterable[tuple]) -> int:
        columns = ", ".join(quote(c.name) for c in table.columns)
        sent = 0
        with db.cursor().copy(f"COPY {target} ({columns}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row([copy_value(v, c) for v, c in zip(row, table.columns)])
                sent += 1
        return sent

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        try:
            db = self._psycopg.connect(self._dsn, connect_timeout=10)
        except self._psycopg.OperationalError as exc:
            raise RunError(Problem(f"store '{self.name}': cannot connect to PostgreSQL: {_first_line(exc)}",
                                   code="store-unreachable",
                                   hint="check the store's dsn (its environment variable) and that the server runs")) \
                from None
        try:
            with db.transaction():
                yield db
        except self._psycopg.Error as exc:
            hint = ("a full publish (a rebuilt MV, changed columns, a repair) swaps a fresh table in, and views "
                    "of the store on the published table stop it: drop them, run, then create them again"
                    if isinstance(exc, self._psycopg.errors.DependentObjectsStillExist)
                    else "a NULL or repeated key in the MV's rows, or the store's permissions")
            raise RunError(Problem(f"store '{self.name}': PostgreSQL refused the publish: {_first_line(exc)}",
                                   code="store-error", hint=hint + ": nothing of this transaction was written")) from None
        finally:
            db.close()


def _grants(db: Any, table: Table, new: str) -> list[str]:
    """The GRANTs that give ``new`` the privileges others hold on the published table (its owner's
    are the owner's anyway; PUBLIC's too)."""
    rows = db.execute("""SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(r.rolname) END,
                                a.privilege_type, a.is_grantable
                         FROM pg_class AS c CROSS JOIN LATERAL aclexplode(c.relacl) AS a
                         LEFT JOIN pg_roles AS r ON r.oid = a.grantee
                         WHERE c.oid = to_regclass(%s) AND a.grantee <> c.relowner
                         ORDER BY 1, 2""", (table.qualified,)).fetchall()
    return [f"GRANT {privilege} ON {new} TO {grantee}{' WITH GRANT OPTION' if grantable else ''}"
            for grantee, privilege, grantable in rows]


def _delete_missing(table: Table) -> list[str]:
    """The rows whose key the staged rows lack deleted: by ``=`` (a hash anti-join), and where a key
    column may be NULL (a GROUP BY's NULL group), the rows with a NULL in their key by a statement
    of their own (``IS NOT DISTINCT FROM`` cannot be hashed; those rows are few).

    >>> print("\\n".join(_delete_missing(Table("public", "g", (Column("region", "text"),), ("region",)))))
    DELETE FROM "public"."g" AS t WHERE NOT EXISTS (SELECT 1 FROM mvflow_stage AS s WHERE t."region" = s."region") AND t."region" IS NOT NULL
    DELETE FROM "public"."g" AS t WHERE (t."region" IS NULL) AND NOT EXISTS (SELECT 1 FROM mvflow_stage AS s WHERE t."region" IS NOT DISTINCT FROM s."region")
    """
    keys = [quote(k) for k in table.key]
    equal = " AND ".join(f"t.{k} = s.{k}" for k in keys)
    first = f"DELETE FROM {table.qualified} AS t WHERE NOT EXISTS (SELECT 1 FROM mvflow_stage AS s WHERE {equal})"
    if not table.nullable_key:
        return [first]
    same = " AND ".join(f"t.{k} IS NOT DISTINCT FROM s.{k}" for k in keys)
    return [first + " AND " + " AND ".join(f"t.{k} IS NOT NULL" for k in keys),
            f"DELETE FROM {table.qualified} AS t WHERE ({' OR '.join(f't.{k} IS NULL' for k in keys)}) "
            f"AND NOT EXISTS (SELECT 1 FROM mvflow_stage AS s WHERE {same})"]


def _name(table: Table) -> str:
    return f"{table.schema}.{table.name}"


def _first_line(exc: Exception) -> str:
    """The driver's message without anything of the dsn (psycopg names host and port, never the password)."""
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
