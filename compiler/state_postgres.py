"""The PostgreSQL state store (``state: {type: postgres, dsn: ...}``): offsets, leases with fencing
tokens, the step log, watches and claims in one database that several runners on several hosts
share (issue 16; seed 000's coordinator and runners build on it).

The same contract as ``SqliteStateStore`` (``tests/test_state.py`` runs one suite on both).
Every operation is one transaction on its own connection; a fenced write first locks the topic's
row (``SELECT … FOR UPDATE``), so the token it checks cannot change before it writes: two runners
never commit one topic. Taking a lease locks the row the same way (a new topic's row is inserted
first, ``ON CONFLICT DO NOTHING``, so that racing runners all find one row to lock).
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any, Iterator, Sequence

from .errors import Problem, RunError
from .state import (
    Claim,
    Commit,
    FencingError,
    Lease,
    LeaseHeld,
    Offset,
    Position,
    StateStore,
    StepLogRow,
    decode_position,
    encode_position,
    holder_is_gone,
    valid_table_names,
)


class PostgresStateStore(StateStore):
    """One PostgreSQL database (``dsn``: ``postgresql://user@host:port/db``), shared by runners."""

    def __init__(self, dsn: str, offsets_table: str = "offsets", step_log_table: str = "step_log"):
        import psycopg  # only a target with a postgres state store needs the driver loaded

        valid_table_names(offsets_table, step_log_table)
        self._psycopg = psycopg
        self.dsn = dsn
        self.offsets_table, self.step_log_table = offsets_table, step_log_table
        self.watch_table, self.claims_table = f"{offsets_table}_watch", f"{offsets_table}_claims"
        with self._write() as db:
            db.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (offsets_table,))  # one creator at a time
            db.execute(f"""CREATE TABLE IF NOT EXISTS {offsets_table} (
                topic TEXT PRIMARY KEY, last TEXT, next TEXT, rows BIGINT NOT NULL DEFAULT 0, run TIMESTAMPTZ,
                consumer TEXT NOT NULL DEFAULT '', state TEXT NOT NULL DEFAULT '', hostid TEXT NOT NULL DEFAULT '',
                lease_expires TIMESTAMPTZ, fence BIGINT NOT NULL DEFAULT 0, seen TEXT)""")
            db.execute(f"""CREATE TABLE IF NOT EXISTS {step_log_table} (
                id BIGSERIAL PRIMARY KEY, topic TEXT NOT NULL, ts TIMESTAMPTZ NOT NULL, rows BIGINT NOT NULL,
                last TEXT, next TEXT, min_pos TEXT, max_pos TEXT, max_lag_seconds DOUBLE PRECISION, nulls TEXT NOT NULL,
                query_id TEXT NOT NULL, seconds DOUBLE PRECISION NOT NULL, consumer TEXT NOT NULL,
                strategy TEXT NOT NULL DEFAULT '', detail TEXT NOT NULL DEFAULT '{{}}')""")
            db.execute(f"CREATE INDEX IF NOT EXISTS {step_log_table}_topic ON {step_log_table} (topic, id)")
            db.execute(f"CREATE TABLE IF NOT EXISTS {self.watch_table} (topic TEXT PRIMARY KEY, watch TEXT NOT NULL)")
            db.execute(f"""CREATE TABLE IF NOT EXISTS {self.claims_table} (name TEXT PRIMARY KEY, holder TEXT NOT NULL,
                command TEXT NOT NULL, since TIMESTAMPTZ NOT NULL, expires TIMESTAMPTZ NOT NULL)""")

    # -- connections ---------------------------------------------------------------------
    def _connect(self) -> Any:
        try:
            return self._psycopg.connect(self.dsn, row_factory=self._psycopg.rows.dict_row, connect_timeout=10)
        except self._psycopg.OperationalError as exc:
            raise RunError(Problem(f"cannot connect to the PostgreSQL state store: {str(exc).strip().splitlines()[0]}",
                                   "project.yml", code="state-unreachable",
                                   hint="check the target's state.dsn (host, port, user, database) and that the server runs")) from None

    @contextmanager
    def _write(self) -> Iterator[Any]:
        """One transaction: committed when the block ends, rolled back when it raises."""
        with self._connect() as db:  # psycopg's connection context commits or rolls back, then closes
            yield db

    def _read(self, sql: str, args: tuple = ()) -> list[dict]:
        with self._connect() as db:
            return db.execute(sql, args).fetchall()

    def _locked(self, db: Any, topic: str) -> dict | None:
        return db.execute(f"SELECT * FROM {self.offsets_table} WHERE topic = %s FOR UPDATE", (topic,)).fetchone()

    # -- reads ---------------------------------------------------------------------------
    def get(self, topic: str) -> Offset | None:
        rows = self._read(f"SELECT * FROM {self.offsets_table} WHERE topic = %s", (topic,))
        return _offset(rows[0]) if rows else None

    def offsets(self) -> list[Offset]:
        return [_offset(r) for r in self._read(f"SELECT * FROM {self.offsets_table} ORDER BY topic")]

    def steps(self, topic: str, limit: int = 20) -> list[StepLogRow]:
        rows = self._read(f"SELECT * FROM {self.step_log_table} WHERE topic = %s ORDER BY id DESC LIMIT %s", (topic, limit))
        return [_step(r) for r in rows]

    # -- leases --------------------------------------------------------------------------
    def acquire(self, topic: str, holder: str, ttl_seconds: float, now: datetime) -> Lease:
        _aware(now)
        with self._write() as db:
            db.execute(f"INSERT INTO {self.offsets_table} (topic) VALUES (%s) ON CONFLICT (topic) DO NOTHING", (topic,))
            current = _offset(self._locked(db, topic))
            if current.held_at(now) and current.hostid != holder and not holder_is_gone(current.hostid):
                raise LeaseHeld(topic, current.hostid, current.lease_expires)
            lease = Lease(topic, holder, current.fence + 1, now + timedelta(seconds=ttl_seconds))
            db.execute(f"UPDATE {self.offsets_table} SET hostid = %s, lease_expires = %s, fence = %s WHERE topic = %s",
                       (holder, lease.expires_at, lease.token, topic))
            return lease

    def renew(self, lease: Lease, ttl_seconds: float, now: datetime) -> Lease:
        renewed = Lease(lease.topic, lease.holder, lease.token, _aware(now) + timedelta(seconds=ttl_seconds))
        with self._write() as db:
            self._check(db, lease)
            db.execute(f"UPDATE {self.offsets_table} SET lease_expires = %s WHERE topic = %s", (renewed.expires_at, lease.topic))
        return renewed

    def release(self, lease: Lease) -> None:
        with self._write() as db:
            db.execute(f"UPDATE {self.offsets_table} SET hostid = '', lease_expires = NULL WHERE topic = %s AND fence = %s",
                       (lease.topic, lease.token))

    # -- fenced writes -------------------------------------------------------------------
    def set_next(self, lease: Lease, next: Position, now: datetime) -> None:
        with self._write() as db:
            self._check(db, lease)
            db.execute(f"UPDATE {self.offsets_table} SET next = %s, run = %s, consumer = %s WHERE topic = %s",
                       (encode_position(next), _aware(now), lease.holder, lease.topic))

    def set_state(self, lease: Lease, state: str, now: datetime, seen: Position | None = None) -> None:
        with self._write() as db:
            self._check(db, lease)
            db.execute(f"UPDATE {self.offsets_table} SET state = %s, run = %s, seen = COALESCE(%s, seen) WHERE topic = %s",
                       (state, _aware(now), encode_position(seen), lease.topic))

    def commit(self, lease: Lease, next: Position, rows: int, state: str, now: datetime) -> None:
        self.commit_many([Commit(lease, next, rows, state, now)])

    def commit_many(self, commits: Sequence[Commit]) -> None:
        with self._write() as db:
            for item in sorted(commits, key=lambda c: c.lease.topic):  # one lock order: no deadlock between runners
                self._check(db, item.lease)
                db.execute(f"UPDATE {self.offsets_table} SET last = %s, next = %s, rows = %s, state = %s, run = %s, "
                           "consumer = %s WHERE topic = %s",
                           (encode_position(item.next), encode_position(item.next), item.rows, item.state, _aware(item.now),
                            item.lease.holder, item.lease.topic))

    def reset(self, topic: str) -> None:
        with self._write() as db:
            db.execute(f"UPDATE {self.offsets_table} SET last = NULL, next = NULL, rows = 0, state = 'reset' WHERE topic = %s",
                       (topic,))
            db.execute(f"DELETE FROM {self.watch_table} WHERE topic = %s", (topic,))

    def get_watch(self, topic: str) -> str | None:
        rows = self._read(f"SELECT watch FROM {self.watch_table} WHERE topic = %s", (topic,))
        return rows[0]["watch"] if rows else None

    def put_watch(self, topic: str, watch: str) -> None:
        with self._write() as db:
            db.execute(f"INSERT INTO {self.watch_table} (topic, watch) VALUES (%s, %s) "
                       "ON CONFLICT (topic) DO UPDATE SET watch = excluded.watch", (topic, watch))

    def log_step(self, row: StepLogRow) -> None:
        with self._write() as db:
            db.execute(
                f"INSERT INTO {self.step_log_table} (topic, ts, rows, last, next, min_pos, max_pos, max_lag_seconds, "
                "nulls, query_id, seconds, consumer, strategy, detail) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (row.topic, _aware(row.ts), row.rows, encode_position(row.last), encode_position(row.next),
                 encode_position(row.min_pos), encode_position(row.max_pos), row.max_lag_seconds,
                 json.dumps(row.nulls, sort_keys=True), row.query_id, row.seconds, row.consumer, row.strategy,
                 json.dumps(row.detail, sort_keys=True)),
            )

    # -- claims --------------------------------------------------------------------------
    def claim(self, name: str, holder: str, command: str, ttl_seconds: float, now: datetime) -> Claim:
        _aware(now)
        with self._write() as db:
            db.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"{self.claims_table}:{name}",))
            row = db.execute(f"SELECT * FROM {self.claims_table} WHERE name = %s", (name,)).fetchone()
            if row is not None:
                current = _claim(row)
                if current.holder != holder and current.expires_at > now and not holder_is_gone(current.holder):
                    return current
            mine = Claim(name, holder, command, now, now + timedelta(seconds=ttl_seconds))
            db.execute(f"INSERT INTO {self.claims_table} (name, holder, command, since, expires) VALUES (%s, %s, %s, %s, %s) "
                       "ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, command = excluded.command, "
                       "since = excluded.since, expires = excluded.expires",
                       (name, holder, command, mine.since, mine.expires_at))
            return mine

    def renew_claim(self, claim: Claim, ttl_seconds: float, now: datetime) -> Claim | None:
        renewed = Claim(claim.name, claim.holder, claim.command, claim.since, _aware(now) + timedelta(seconds=ttl_seconds))
        with self._write() as db:
            done = db.execute(f"UPDATE {self.claims_table} SET expires = %s WHERE name = %s AND holder = %s",
                              (renewed.expires_at, claim.name, claim.holder)).rowcount
        return renewed if done else None

    def release_claim(self, claim: Claim) -> None:
        with self._write() as db:
            db.execute(f"DELETE FROM {self.claims_table} WHERE name = %s AND holder = %s", (claim.name, claim.holder))

    def claims(self) -> list[Claim]:
        return [_claim(r) for r in self._read(f"SELECT * FROM {self.claims_table} ORDER BY name")]

    def _check(self, db: Any, lease: Lease) -> None:
        row = self._locked(db, lease.topic)
        if row is None or row["fence"] != lease.token or row["hostid"] != lease.holder:
            raise FencingError(lease.topic, lease.token, row["fence"] if row else 0, row["hostid"] if row else "")


def _aware(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError("state store times must be timezone-aware")
    return value


def _offset(row: dict) -> Offset:
    return Offset(
        topic=row["topic"], last=decode_position(row["last"]), next=decode_position(row["next"]), rows=row["rows"],
        run=row["run"], consumer=row["consumer"], state=row["state"], hostid=row["hostid"],
        lease_expires=row["lease_expires"], fence=row["fence"], seen=decode_position(row["seen"]),
    )


def _claim(row: dict) -> Claim:
    return Claim(row["name"], row["holder"], row["command"], row["since"], row["expires"])


def _step(row: dict) -> StepLogRow:
    return StepLogRow(
        topic=row["topic"], ts=row["ts"], rows=row["rows"], last=decode_position(row["last"]),
        next=decode_position(row["next"]), min_pos=decode_position(row["min_pos"]),
        max_pos=decode_position(row["max_pos"]), max_lag_seconds=row["max_lag_seconds"],
        nulls=json.loads(row["nulls"]), query_id=row["query_id"], seconds=row["seconds"], consumer=row["consumer"],
        strategy=row["strategy"], detail=json.loads(row["detail"] or "{}"),
    )
