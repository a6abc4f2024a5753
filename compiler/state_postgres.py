"""The PostgreSQL state store (``state: {type: postgres, dsn: ...}``): offsets, leases with fencing
tokens, the step log, watches and claims in one database that several runners on several hosts
share (issue 16; seed 000's coordinator and runners build on it).

The statements are ``state.SqlStateStore``'s, as SQLite's are (``tests/test_state.py`` runs one
contract suite on both). Every operation is one transaction on its own connection; a fenced write
first locks the topic's row (``SELECT … FOR UPDATE``), so the token it checks cannot change before it
writes: two runners never commit one topic. Taking a lease locks the row the same way (a new
topic's row is inserted first, ``ON CONFLICT DO NOTHING``, so that racing runners all find one row).
"""

from __future__ import annotations

from contextlib import contextmanager
from datetime import datetime
from typing import Any, Iterator

from .errors import Problem, RunError
from .state import SqlStateStore, aware


class PostgresStateStore(SqlStateStore):
    """One PostgreSQL database (``dsn``: ``postgresql://user@host:port/db``), shared by runners."""

    _for_update = " FOR UPDATE"

    def __init__(self, dsn: str, offsets_table: str = "offsets", step_log_table: str = "step_log"):
        import psycopg  # only a target with a postgres state store needs the driver loaded

        self._name_tables(offsets_table, step_log_table)
        self._psycopg = psycopg
        self.dsn = dsn
        with self._write() as db:
            self._serialize(db, offsets_table)  # one creator at a time
            db.execute(f"""CREATE TABLE IF NOT EXISTS {offsets_table} (
                topic TEXT PRIMARY KEY, last TEXT, next TEXT, rows BIGINT NOT NULL DEFAULT 0, run TIMESTAMPTZ,
                consumer TEXT NOT NULL DEFAULT '', state TEXT NOT NULL DEFAULT '', hostid TEXT NOT NULL DEFAULT '',
                lease_expires TIMESTAMPTZ, fence BIGINT NOT NULL DEFAULT 0, seen TEXT)""")
            db.execute(f"""CREATE TABLE IF NOT EXISTS {step_log_table} (
                id BIGSERIAL PRIMARY KEY, topic TEXT NOT NULL, ts TIMESTAMPTZ NOT NULL, rows BIGINT NOT NULL,
                last TEXT, next TEXT, min_pos TEXT, max_pos TEXT, max_lag_seconds DOUBLE PRECISION, nulls TEXT NOT NULL,
                query_id TEXT NOT NULL, seconds DOUBLE PRECISION NOT NULL, consumer TEXT NOT NULL,
                strategy TEXT NOT NULL DEFAULT '', detail TEXT NOT NULL DEFAULT '{{}}', token BIGINT NOT NULL DEFAULT 0)""")
            db.execute(f"ALTER TABLE {step_log_table} ADD COLUMN IF NOT EXISTS token BIGINT NOT NULL DEFAULT 0")
            db.execute(f"CREATE INDEX IF NOT EXISTS {step_log_table}_topic ON {step_log_table} (topic, id)")
            db.execute(f"CREATE TABLE IF NOT EXISTS {self.watch_table} (topic TEXT PRIMARY KEY, watch TEXT NOT NULL)")
            db.execute(f"""CREATE TABLE IF NOT EXISTS {self.claims_table} (name TEXT PRIMARY KEY, holder TEXT NOT NULL,
                command TEXT NOT NULL, since TIMESTAMPTZ NOT NULL, expires TIMESTAMPTZ NOT NULL)""")
            db.execute(f"""CREATE TABLE IF NOT EXISTS {self.runners_table} (id TEXT PRIMARY KEY, command TEXT NOT NULL,
                started TIMESTAMPTZ NOT NULL, heartbeat TIMESTAMPTZ NOT NULL, doing TEXT NOT NULL DEFAULT '',
                doing_since TIMESTAMPTZ)""")
            db.execute(f"""CREATE TABLE IF NOT EXISTS {self.assignments_table} (job TEXT PRIMARY KEY, runner TEXT NOT NULL,
                token BIGINT NOT NULL, since TIMESTAMPTZ NOT NULL)""")
            db.execute(f"""CREATE TABLE IF NOT EXISTS {self.catalog_table} (model TEXT NOT NULL, version BIGINT NOT NULL,
                entry TEXT NOT NULL, breaking BOOLEAN NOT NULL, active_at TIMESTAMPTZ NOT NULL, PRIMARY KEY (model, version))""")

    # -- connections ---------------------------------------------------------------------
    def _connect(self) -> Any:
        try:
            return self._psycopg.connect(self.dsn, row_factory=self._psycopg.rows.dict_row, connect_timeout=10)
        except self._psycopg.OperationalError as exc:
            raise RunError(Problem(f"cannot connect to the PostgreSQL state store: {str(exc).strip().splitlines()[0]}",
                                   "project.yml", code="state-unreachable",
                                   hint="check the target's state.dsn (host, port, user, database) and that the server runs")) from None

    @contextmanager
    def _write(self) -> Iterator["_Qmark"]:
        with self._connect() as db:  # psycopg's connection context commits or rolls back, then closes
            yield _Qmark(db)

    def _read(self, sql: str, args: tuple = ()) -> list[dict]:
        with self._connect() as db:
            return _Qmark(db).execute(sql, args).fetchall()

    def _serialize(self, db: "_Qmark", key: str) -> None:
        db.execute("SELECT pg_advisory_xact_lock(hashtext(?))", (key,))

    def _time(self, value: datetime | None) -> datetime | None:
        return None if value is None else aware(value)

    def _parse_time(self, value: datetime | None) -> datetime | None:
        return value


class _Qmark:
    """A connection whose ``execute`` takes the ``?`` markers the shared statements are written with."""

    def __init__(self, connection: Any):
        self.connection = connection

    def execute(self, sql: str, args: tuple = ()) -> Any:
        return self.connection.execute(sql.replace("?", "%s"), args)
