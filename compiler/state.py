"""The state store: offsets per topic (with a lease and a fencing token) and the step log.

A *topic* is a fact model or one MV input. Its offsets row holds ``last`` (committed
position) and ``next`` (the position the current step runs up to): ``next`` is written
before the work and copied to ``last`` after it, and that copy is the commit (seed 004).

Only one runner works on a topic at a time. ``acquire`` takes a lease that expires after a
TTL and increments the topic's fencing token; every write (``set_next``, ``set_state``,
``commit``) checks that the token it carries is still the topic's current one, so a runner
whose lease expired and was taken over cannot write over the new holder.

``StateStore`` is the interface every backend implements (``tests/test_state.py`` is its
contract suite); ``SqliteStateStore`` is the embedded default: one SQLite file, WAL, every
write in a ``BEGIN IMMEDIATE`` transaction; ``state_postgres.PostgresStateStore`` is shared by
runners on several hosts. Times are timezone-aware datetimes passed in
by the caller (no clock in here). Positions are tuples of JSON values (timestamps as ISO
strings); the caller converts them.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sqlite3
import uuid
from abc import ABC, abstractmethod
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterator, Sequence

from .errors import Problem, RunError
from .project import StateSettings

Position = tuple  # JSON-serialisable values: timestamps as ISO strings, ints, strings

BACKENDS = ("sqlite", "postgres")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Offset:
    """One topic's row: ``last`` committed, ``next`` planned, and who holds it."""

    topic: str
    last: Position | None = None
    next: Position | None = None
    rows: int = 0
    run: datetime | None = None
    consumer: str = ""
    state: str = ""
    hostid: str = ""
    lease_expires: datetime | None = None
    fence: int = 0
    seen: Position | None = None  # the newest position the source held when the runner last looked

    @property
    def in_flight(self) -> bool:
        """A step was planned (``next`` written) but not committed: it must be redone as is."""
        return self.next is not None and self.next != self.last

    def held_at(self, now: datetime) -> bool:
        """Whether a live lease holds the topic at ``now``."""
        return bool(self.hostid) and self.lease_expires is not None and self.lease_expires > now


@dataclass(frozen=True)
class Lease:
    """A runner's right to write one topic; ``token`` is the fencing token."""

    topic: str
    holder: str
    token: int
    expires_at: datetime


@dataclass(frozen=True)
class Commit:
    """One topic's commit inside ``commit_many``."""

    lease: Lease
    next: Position
    rows: int
    state: str
    now: datetime


@dataclass(frozen=True)
class Claim:
    """A process's exclusive hold on something wider than a topic (e.g. ``target:local``):
    who (``host:pid:random``), running which command, since when, until when unless renewed."""

    name: str
    holder: str
    command: str
    since: datetime
    expires_at: datetime


@dataclass(frozen=True)
class Runner:
    """A ``mvflow serve`` process (seed 000's ``mv_runners``): who, since when, its last heartbeat,
    and the job it works on now (``""``: idle)."""

    id: str  # host:pid:random, as leases name their holder
    command: str
    started: datetime
    heartbeat: datetime
    doing: str = ""
    doing_since: datetime | None = None

    def alive_at(self, now: datetime, ttl_seconds: float) -> bool:
        return self.heartbeat + timedelta(seconds=ttl_seconds) > now and not holder_is_gone(self.id)


@dataclass(frozen=True)
class Assignment:
    """A job (a model) handed to a runner by the coordinator whose lease had fencing ``token``."""

    job: str
    runner: str
    token: int
    since: datetime


@dataclass(frozen=True)
class CatalogVersion:
    """One entry of a model's catalog (``compiler.catalog``): version N of what it produces, the
    entry as JSON, whether the change from N-1 was breaking, and since when it is active."""

    model: str
    version: int
    entry: str
    breaking: bool
    active_at: datetime


@dataclass(frozen=True)
class StepLogRow:
    """One step: what it covered, what it wrote, how late it was."""

    topic: str
    ts: datetime
    rows: int
    last: Position | None = None
    next: Position | None = None
    min_pos: Position | None = None
    max_pos: Position | None = None
    max_lag_seconds: float | None = None
    nulls: dict[str, int] = field(default_factory=dict)
    query_id: str = ""
    seconds: float = 0.0
    consumer: str = ""
    strategy: str = ""  # an MV batch: incremental | chunked | full (``compiler.kinds.mv.strategy``)
    detail: dict = field(default_factory=dict)  # an MV batch: affected keys, MV rows, chunks, estimates
    token: int = 0  # the fencing token of the lease the step was written under


class LeaseHeld(RunError):
    """Another live runner holds the topic."""

    def __init__(self, topic: str, holder: str, expires_at: datetime | None):
        until = expires_at.isoformat(timespec="seconds") if expires_at else "?"
        super().__init__(Problem(
            f"topic '{topic}' is being processed by {holder} (lease until {until})",
            hint="wait for that runner to finish; if it died, its lease expires at that time and the next run takes over",
            code="lease-held",
        ))
        self.topic, self.holder, self.expires_at = topic, holder, expires_at


class FencingError(RunError):
    """A write carried a fencing token that is no longer the topic's current one."""

    def __init__(self, topic: str, token: int, current: int, holder: str):
        now_held = f", held by {holder}" if holder else ""
        super().__init__(Problem(
            f"topic '{topic}': this runner's lease (token {token}) was taken over (now token {current}{now_held}); "
            "its write is rejected",
            hint="the lease expired while the step ran: the new holder redoes the step; raise the lease TTL if steps are slow",
            code="fenced",
        ))
        self.topic, self.token, self.current = topic, token, current


class StateStore(ABC):
    """Offsets, leases and the step log. Every method is one atomic operation."""

    @abstractmethod
    def get(self, topic: str) -> Offset | None: ...

    @abstractmethod
    def offsets(self) -> list[Offset]:
        """All topics, sorted by name."""

    @abstractmethod
    def acquire(self, topic: str, holder: str, ttl_seconds: float, now: datetime) -> Lease:
        """Take the topic's lease (new token); LeaseHeld if another holder's lease is live."""

    @abstractmethod
    def renew(self, lease: Lease, ttl_seconds: float, now: datetime) -> Lease:
        """Extend a lease still current (FencingError if it was taken over)."""

    @abstractmethod
    def release(self, lease: Lease) -> None:
        """Give the lease up; a no-op if it was already taken over."""

    @abstractmethod
    def set_next(self, lease: Lease, next: Position, now: datetime) -> None:
        """Write the planned ``next`` position (fenced)."""

    @abstractmethod
    def set_state(self, lease: Lease, state: str, now: datetime, seen: Position | None = None) -> None:
        """Write the free-text state, e.g. why the topic waits, and (if given) the newest
        position the source held when the runner looked (fenced)."""

    @abstractmethod
    def commit(self, lease: Lease, next: Position, rows: int, state: str, now: datetime) -> None:
        """``last = next = next`` plus rows, run time and state (fenced: FencingError)."""

    @abstractmethod
    def commit_many(self, commits: Sequence[Commit]) -> None:
        """Several commits in one transaction: all or none."""

    @abstractmethod
    def reset(self, topic: str) -> None:
        """Forget the topic's positions (``--full-refresh``); the lease and token stay."""

    @abstractmethod
    def log_step(self, row: StepLogRow) -> None: ...

    @abstractmethod
    def get_watch(self, topic: str) -> str | None:
        """The topic's recorded watch (``compiler.watch``), if any."""

    @abstractmethod
    def put_watch(self, topic: str, watch: str) -> None:
        """Record what the topic's inputs looked like when it last had nothing to do."""

    @abstractmethod
    def steps(self, topic: str, limit: int = 20) -> list[StepLogRow]:
        """The topic's latest step log rows, newest first."""

    @abstractmethod
    def claim(self, name: str, holder: str, command: str, ttl_seconds: float, now: datetime) -> Claim:
        """Take ``name`` for ``holder``; the live claim of another holder is returned unchanged
        instead (the caller tells who holds it). A holder that is a dead process of this host
        (``holder_is_gone``) or whose claim expired is taken over."""

    @abstractmethod
    def renew_claim(self, claim: Claim, ttl_seconds: float, now: datetime) -> Claim | None:
        """Extend a claim still held by its holder (None: it was taken over)."""

    @abstractmethod
    def release_claim(self, claim: Claim) -> None:
        """Give the claim up; a no-op if another holder took it over."""

    @abstractmethod
    def claims(self) -> list[Claim]:
        """Every recorded claim, live or not, sorted by name."""

    @abstractmethod
    def heartbeat(self, runner: str, command: str, now: datetime, doing: str) -> None:
        """Record that ``runner`` lives (registering it if new or dropped) and what it works on."""

    @abstractmethod
    def leave(self, runner: str) -> None:
        """Remove a stopping runner (its assignments stay until the coordinator hands them on)."""

    @abstractmethod
    def runners(self) -> list[Runner]:
        """Every registered runner, live or not, sorted by id."""

    @abstractmethod
    def assign(self, lease: Lease, assignments: dict[str, str], gone: Sequence[str], now: datetime) -> None:
        """The coordinator's write (fenced by its lease): drop the ``gone`` runners, then make the
        assignments ``{job: runner}`` exactly these (unchanged ones keep their token and time)."""

    @abstractmethod
    def assignments(self) -> list[Assignment]:
        """Every job's assignment, sorted by job."""


    # -- the catalog (``compiler.catalog``: seed 002's update log) -------------------------
    @abstractmethod
    def append_version(self, version: CatalogVersion) -> bool:
        """Append ``version`` if it is the model's next one (compare-and-set on the version number):
        False if version N is taken or N-1 is missing (a concurrent writer won: re-read and retry)."""

    @abstractmethod
    def versions(self, model: str | None = None) -> list[CatalogVersion]:
        """Every recorded version (of ``model``), by model then version."""


def open_state_store(settings: StateSettings) -> StateStore:
    """The state store a target names: ``sqlite`` (a file) or ``postgres`` (``dsn``, shared by hosts)."""
    if settings.type not in BACKENDS:
        raise RunError(Problem(f"unknown state store type '{settings.type}'", "project.yml",
                               hint="state types supported: " + ", ".join(BACKENDS), code="unknown-state-type"))
    if settings.type == "postgres":
        if not settings.dsn:
            raise RunError(Problem("the target's postgres state store has no dsn", "project.yml", code="no-state-dsn",
                                   hint="set targets.<name>.state.dsn: postgresql://user@host:5432/database"))
        from .state_postgres import PostgresStateStore

        return PostgresStateStore(settings.dsn, settings.offsets_table, settings.step_log_table)
    if settings.path is None:
        raise RunError(Problem("the target's state store has no path", "project.yml",
                               hint="set targets.<name>.state.path", code="no-state-path"))
    return SqliteStateStore(Path(settings.path), settings.offsets_table, settings.step_log_table)


def valid_table_names(*names: str) -> None:
    """State table names come from project.yml and go into SQL: identifiers only."""
    for name in names:
        if not _IDENTIFIER.match(name):
            raise RunError(Problem(f"invalid state table name {name!r}", "project.yml",
                                   hint="use letters, digits and _", code="bad-value"))


def default_holder() -> str:
    """A holder name unique to this process: ``host:pid:random``."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def holder_is_gone(holder: str) -> bool:
    """Whether a ``host:pid:…`` holder is a process of this host that no longer runs.

    A runner killed with -9 cannot release its lease; on the same host its lease is taken over
    at once instead of after the lease expires. Holders on other hosts wait for expiry.

    >>> holder_is_gone(default_holder()), holder_is_gone("runner-a")
    (False, False)
    """
    host, _, rest = holder.partition(":")
    pid = rest.split(":", 1)[0]
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def encode_position(position: Position | None) -> str | None:
    """Positions are stored as JSON arrays.

    >>> encode_position(("2024-01-01T00:00:00", 7))
    '["2024-01-01T00:00:00", 7]'
    """
    return None if position is None else json.dumps(list(position))


def decode_position(text: str | None) -> Position | None:
    """
    >>> decode_position('["2024-01-01T00:00:00", 7]')
    ('2024-01-01T00:00:00', 7)
    """
    return None if text is None else tuple(json.loads(text))


class SqlStateStore(StateStore):
    """The statements both SQL backends run; a backend gives its connections and its dialect.

    ``_write()`` yields one transaction (committed at the end of the block, rolled back when it
    raises) whose ``execute(sql, args)`` takes ``?`` markers; ``_locked`` reads a topic's row so
    that no other writer changes it before the transaction ends; times go in through ``_time`` and
    come out through ``_parse_time`` (SQLite keeps ISO text, PostgreSQL ``timestamptz``).
    """

    offsets_table: str
    step_log_table: str
    watch_table: str
    claims_table: str
    runners_table: str
    assignments_table: str
    catalog_table: str
    _for_update = ""  # what locks a row read in a transaction (SQLite's BEGIN IMMEDIATE locks the file)

    @abstractmethod
    def _write(self) -> Any: ...

    @abstractmethod
    def _read(self, sql: str, args: tuple = ()) -> list[Any]: ...

    @abstractmethod
    def _time(self, value: datetime | None) -> Any: ...

    @abstractmethod
    def _parse_time(self, value: Any) -> datetime | None: ...

    def _name_tables(self, offsets_table: str, step_log_table: str) -> None:
        """The tables' names: the others are named after the offsets, so stores sharing a database stay apart."""
        valid_table_names(offsets_table, step_log_table)
        self.offsets_table, self.step_log_table = offsets_table, step_log_table
        self.watch_table, self.claims_table = f"{offsets_table}_watch", f"{offsets_table}_claims"
        self.runners_table, self.assignments_table = f"{offsets_table}_runners", f"{offsets_table}_assignments"
        self.catalog_table = f"{offsets_table}_catalog"

    def _serialize(self, db: Any, key: str) -> None:
        """Make concurrent transactions on ``key`` wait for each other (a no-op where every write does)."""

    def _locked(self, db: Any, topic: str) -> Any:
        return db.execute(f"SELECT * FROM {self.offsets_table} WHERE topic = ?{self._for_update}", (topic,)).fetchone()

    # -- reads ---------------------------------------------------------------------------
    def get(self, topic: str) -> Offset | None:
        rows = self._read(f"SELECT * FROM {self.offsets_table} WHERE topic = ?", (topic,))
        return self._offset(rows[0]) if rows else None

    def offsets(self) -> list[Offset]:
        return [self._offset(r) for r in self._read(f"SELECT * FROM {self.offsets_table} ORDER BY topic")]

    def steps(self, topic: str, limit: int = 20) -> list[StepLogRow]:
        rows = self._read(f"SELECT * FROM {self.step_log_table} WHERE topic = ? ORDER BY id DESC LIMIT ?", (topic, limit))
        return [self._step(r) for r in rows]

    # -- leases --------------------------------------------------------------------------
    def acquire(self, topic: str, holder: str, ttl_seconds: float, now: datetime) -> Lease:
        with self._write() as db:
            db.execute(f"INSERT INTO {self.offsets_table} (topic) VALUES (?) ON CONFLICT (topic) DO NOTHING", (topic,))
            current = self._offset(self._locked(db, topic))
            if current.held_at(now) and current.hostid != holder and not holder_is_gone(current.hostid):
                raise LeaseHeld(topic, current.hostid, current.lease_expires)
            lease = Lease(topic, holder, current.fence + 1, now + timedelta(seconds=ttl_seconds))
            db.execute(f"UPDATE {self.offsets_table} SET hostid = ?, lease_expires = ?, fence = ? WHERE topic = ?",
                       (holder, self._time(lease.expires_at), lease.token, topic))
            return lease

    def renew(self, lease: Lease, ttl_seconds: float, now: datetime) -> Lease:
        renewed = Lease(lease.topic, lease.holder, lease.token, now + timedelta(seconds=ttl_seconds))
        with self._write() as db:
            self._check(db, lease)
            db.execute(f"UPDATE {self.offsets_table} SET lease_expires = ? WHERE topic = ?",
                       (self._time(renewed.expires_at), lease.topic))
        return renewed

    def release(self, lease: Lease) -> None:
        with self._write() as db:
            db.execute(f"UPDATE {self.offsets_table} SET hostid = '', lease_expires = NULL WHERE topic = ? AND fence = ?",
                       (lease.topic, lease.token))

    # -- fenced writes -------------------------------------------------------------------
    def set_next(self, lease: Lease, next: Position, now: datetime) -> None:
        with self._write() as db:
            self._check(db, lease)
            db.execute(f"UPDATE {self.offsets_table} SET next = ?, run = ?, consumer = ? WHERE topic = ?",
                       (encode_position(next), self._time(now), lease.holder, lease.topic))

    def set_state(self, lease: Lease, state: str, now: datetime, seen: Position | None = None) -> None:
        with self._write() as db:
            self._check(db, lease)
            db.execute(f"UPDATE {self.offsets_table} SET state = ?, run = ?, seen = COALESCE(?, seen) WHERE topic = ?",
                       (state, self._time(now), encode_position(seen), lease.topic))

    def commit(self, lease: Lease, next: Position, rows: int, state: str, now: datetime) -> None:
        self.commit_many([Commit(lease, next, rows, state, now)])

    def commit_many(self, commits: Sequence[Commit]) -> None:
        with self._write() as db:
            for item in sorted(commits, key=lambda c: c.lease.topic):  # one lock order: no deadlock between runners
                self._check(db, item.lease)
                db.execute(
                    f"UPDATE {self.offsets_table} SET last = ?, next = ?, rows = ?, state = ?, run = ?, consumer = ? WHERE topic = ?",
                    (encode_position(item.next), encode_position(item.next), item.rows, item.state, self._time(item.now),
                     item.lease.holder, item.lease.topic),
                )

    def reset(self, topic: str) -> None:
        with self._write() as db:
            db.execute(f"UPDATE {self.offsets_table} SET last = NULL, next = NULL, rows = 0, state = 'reset' WHERE topic = ?",
                       (topic,))
            db.execute(f"DELETE FROM {self.watch_table} WHERE topic = ?", (topic,))

    def get_watch(self, topic: str) -> str | None:
        rows = self._read(f"SELECT watch FROM {self.watch_table} WHERE topic = ?", (topic,))
        return rows[0]["watch"] if rows else None

    def put_watch(self, topic: str, watch: str) -> None:
        with self._write() as db:
            db.execute(f"INSERT INTO {self.watch_table} (topic, watch) VALUES (?, ?) "
                       "ON CONFLICT (topic) DO UPDATE SET watch = excluded.watch", (topic, watch))

    def log_step(self, row: StepLogRow) -> None:
        with self._write() as db:
            db.execute(
                f"INSERT INTO {self.step_log_table} (topic, ts, rows, last, next, min_pos, max_pos, max_lag_seconds, "
                "nulls, query_id, seconds, consumer, strategy, detail, token) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (row.topic, self._time(row.ts), row.rows, encode_position(row.last), encode_position(row.next),
                 encode_position(row.min_pos), encode_position(row.max_pos), row.max_lag_seconds,
                 json.dumps(row.nulls, sort_keys=True), row.query_id, row.seconds, row.consumer, row.strategy,
                 json.dumps(row.detail, sort_keys=True), row.token),
            )

    # -- claims --------------------------------------------------------------------------
    def claim(self, name: str, holder: str, command: str, ttl_seconds: float, now: datetime) -> Claim:
        with self._write() as db:
            self._serialize(db, f"{self.claims_table}:{name}")
            row = db.execute(f"SELECT * FROM {self.claims_table} WHERE name = ?", (name,)).fetchone()
            if row is not None:
                current = self._claim(row)
                if current.holder != holder and current.expires_at > now and not holder_is_gone(current.holder):
                    return current
            mine = Claim(name, holder, command, now, now + timedelta(seconds=ttl_seconds))
            db.execute(f"INSERT INTO {self.claims_table} (name, holder, command, since, expires) VALUES (?, ?, ?, ?, ?) "
                       "ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, command = excluded.command, "
                       "since = excluded.since, expires = excluded.expires",
                       (name, holder, command, self._time(mine.since), self._time(mine.expires_at)))
            return mine

    def renew_claim(self, claim: Claim, ttl_seconds: float, now: datetime) -> Claim | None:
        renewed = Claim(claim.name, claim.holder, claim.command, claim.since, now + timedelta(seconds=ttl_seconds))
        with self._write() as db:
            done = db.execute(f"UPDATE {self.claims_table} SET expires = ? WHERE name = ? AND holder = ?",
                              (self._time(renewed.expires_at), claim.name, claim.holder)).rowcount
        return renewed if done else None

    def release_claim(self, claim: Claim) -> None:
        with self._write() as db:
            db.execute(f"DELETE FROM {self.claims_table} WHERE name = ? AND holder = ?", (claim.name, claim.holder))

    def claims(self) -> list[Claim]:
        return [self._claim(r) for r in self._read(f"SELECT * FROM {self.claims_table} ORDER BY name")]

    # -- runners (``mvflow serve``) ------------------------------------------------------
    def heartbeat(self, runner: str, command: str, now: datetime, doing: str) -> None:
        with self._write() as db:
            row = db.execute(f"SELECT doing, doing_since FROM {self.runners_table} WHERE id = ?", (runner,)).fetchone()
            since = (row["doing_since"] if row is not None and row["doing"] == doing else self._time(now)) if doing else None
            db.execute(f"INSERT INTO {self.runners_table} (id, command, started, heartbeat, doing, doing_since) "
                       "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET heartbeat = excluded.heartbeat, "
                       "doing = excluded.doing, doing_since = excluded.doing_since",
                       (runner, command, self._time(now), self._time(now), doing, since))

    def leave(self, runner: str) -> None:
        with self._write() as db:
            db.execute(f"DELETE FROM {self.runners_table} WHERE id = ?", (runner,))

    def runners(self) -> list[Runner]:
        return [Runner(r["id"], r["command"], self._parse_time(r["started"]), self._parse_time(r["heartbeat"]),
                       r["doing"], self._parse_time(r["doing_since"]))
                for r in self._read(f"SELECT * FROM {self.runners_table} ORDER BY id")]

    def assign(self, lease: Lease, assignments: dict[str, str], gone: Sequence[str], now: datetime) -> None:
        with self._write() as db:
            self._check(db, lease)
            for runner in gone:
                db.execute(f"DELETE FROM {self.runners_table} WHERE id = ?", (runner,))
            current = {r["job"]: r["runner"] for r in db.execute(f"SELECT job, runner FROM {self.assignments_table}").fetchall()}
            for job in sorted(set(current) - set(assignments)):
                db.execute(f"DELETE FROM {self.assignments_table} WHERE job = ?", (job,))
            for job, runner in sorted(assignments.items()):
                if current.get(job) != runner:
                    db.execute(f"INSERT INTO {self.assignments_table} (job, runner, token, since) VALUES (?, ?, ?, ?) "
                               "ON CONFLICT (job) DO UPDATE SET runner = excluded.runner, token = excluded.token, "
                               "since = excluded.since", (job, runner, lease.token, self._time(now)))

    def assignments(self) -> list[Assignment]:
        return [Assignment(r["job"], r["runner"], r["token"], self._parse_time(r["since"]))
                for r in self._read(f"SELECT * FROM {self.assignments_table} ORDER BY job")]

    def append_version(self, version: CatalogVersion) -> bool:
        with self._write() as db:
            self._serialize(db, f"catalog:{version.model}")
            appended = db.execute(
                f"INSERT INTO {self.catalog_table} (model, version, entry, breaking, active_at) SELECT ?, ?, ?, ?, ? "
                f"WHERE (SELECT COALESCE(MAX(version), 0) FROM {self.catalog_table} WHERE model = ?) = ? "
                "ON CONFLICT (model, version) DO NOTHING",
                (version.model, version.version, version.entry, version.breaking, self._time(version.active_at),
                 version.model, version.version - 1))
            return appended.rowcount == 1

    def versions(self, model: str | None = None) -> list[CatalogVersion]:
        where, args = ("WHERE model = ?", (model,)) if model is not None else ("", ())
        rows = self._read(f"SELECT * FROM {self.catalog_table} {where} ORDER BY model, version", args)
        return [CatalogVersion(r["model"], r["version"], r["entry"], bool(r["breaking"]), self._parse_time(r["active_at"]))
                for r in rows]

    def _check(self, db: Any, lease: Lease) -> None:
        row = self._locked(db, lease.topic)
        if row is None or row["fence"] != lease.token or row["hostid"] != lease.holder:
            raise FencingError(lease.topic, lease.token, row["fence"] if row else 0, row["hostid"] if row else "")

    # -- rows ----------------------------------------------------------------------------
    def _offset(self, row: Any) -> Offset:
        return Offset(
            topic=row["topic"], last=decode_position(row["last"]), next=decode_position(row["next"]), rows=row["rows"],
            run=self._parse_time(row["run"]), consumer=row["consumer"], state=row["state"], hostid=row["hostid"],
            lease_expires=self._parse_time(row["lease_expires"]), fence=row["fence"], seen=decode_position(row["seen"]),
        )

    def _claim(self, row: Any) -> Claim:
        return Claim(row["name"], row["holder"], row["command"], self._parse_time(row["since"]),
                     self._parse_time(row["expires"]))

    def _step(self, row: Any) -> StepLogRow:
        return StepLogRow(
            topic=row["topic"], ts=self._parse_time(row["ts"]), rows=row["rows"], last=decode_position(row["last"]),
            next=decode_position(row["next"]), min_pos=decode_position(row["min_pos"]),
            max_pos=decode_position(row["max_pos"]), max_lag_seconds=row["max_lag_seconds"],
            nulls=json.loads(row["nulls"]), query_id=row["query_id"], seconds=row["seconds"], consumer=row["consumer"],
            strategy=row["strategy"], detail=json.loads(row["detail"] or "{}"), token=row["token"],
        )


def aware(value: datetime) -> datetime:
    """State store times are timezone-aware (a naive one is a caller's bug)."""
    if value.tzinfo is None:
        raise ValueError("state store times must be timezone-aware")
    return value


class SqliteStateStore(SqlStateStore):
    """The embedded default: one SQLite file, WAL journal, ``BEGIN IMMEDIATE`` writes.

    A connection per operation, so one store is safe to share between threads and many
    processes may open the same file.
    """

    def __init__(self, path: Path, offsets_table: str = "offsets", step_log_table: str = "step_log"):
        self._name_tables(offsets_table, step_log_table)
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._write() as db:
            db.execute(f"""CREATE TABLE IF NOT EXISTS {offsets_table} (
                topic TEXT PRIMARY KEY, last TEXT, next TEXT, rows INTEGER NOT NULL DEFAULT 0, run TEXT,
                consumer TEXT NOT NULL DEFAULT '', state TEXT NOT NULL DEFAULT '', hostid TEXT NOT NULL DEFAULT '',
                lease_expires TEXT, fence INTEGER NOT NULL DEFAULT 0, seen TEXT)""")
            columns = {row["name"] for row in db.execute(f"PRAGMA table_info({offsets_table})")}
            if "seen" not in columns:  # a state store written by an older mvflow
                db.execute(f"ALTER TABLE {offsets_table} ADD COLUMN seen TEXT")
            db.execute(f"""CREATE TABLE IF NOT EXISTS {step_log_table} (
                id INTEGER PRIMARY KEY AUTOINCREMENT, topic TEXT NOT NULL, ts TEXT NOT NULL, rows INTEGER NOT NULL,
                last TEXT, next TEXT, min_pos TEXT, max_pos TEXT, max_lag_seconds REAL, nulls TEXT NOT NULL,
                query_id TEXT NOT NULL, seconds REAL NOT NULL, consumer TEXT NOT NULL,
                strategy TEXT NOT NULL DEFAULT '', detail TEXT NOT NULL DEFAULT '{{}}', token INTEGER NOT NULL DEFAULT 0)""")
            logged = {row["name"] for row in db.execute(f"PRAGMA table_info({step_log_table})")}
            added = {"strategy": "TEXT NOT NULL DEFAULT ''", "detail": "TEXT NOT NULL DEFAULT '{}'", "token": "INTEGER NOT NULL DEFAULT 0"}
            for column, declared in added.items():  # a state store written by an older mvflow
                if column not in logged:
                    db.execute(f"ALTER TABLE {step_log_table} ADD COLUMN {column} {declared}")
            db.execute(f"CREATE INDEX IF NOT EXISTS {step_log_table}_topic ON {step_log_table} (topic, id)")
            db.execute(f"CREATE TABLE IF NOT EXISTS {self.watch_table} (topic TEXT PRIMARY KEY, watch TEXT NOT NULL)")
            db.execute(f"""CREATE TABLE IF NOT EXISTS {self.claims_table} (name TEXT PRIMARY KEY, holder TEXT NOT NULL,
                command TEXT NOT NULL, since TEXT NOT NULL, expires TEXT NOT NULL)""")
            db.execute(f"""CREATE TABLE IF NOT EXISTS {self.runners_table} (id TEXT PRIMARY KEY, command TEXT NOT NULL,
                started TEXT NOT NULL, heartbeat TEXT NOT NULL, doing TEXT NOT NULL DEFAULT '', doing_since TEXT)""")
            db.execute(f"""CREATE TABLE IF NOT EXISTS {self.assignments_table} (job TEXT PRIMARY KEY, runner TEXT NOT NULL,
                token INTEGER NOT NULL, since TEXT NOT NULL)""")
            db.execute(f"""CREATE TABLE IF NOT EXISTS {self.catalog_table} (model TEXT NOT NULL, version INTEGER NOT NULL,
                entry TEXT NOT NULL, breaking INTEGER NOT NULL, active_at TEXT NOT NULL, PRIMARY KEY (model, version))""")

    # -- connections ---------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        db.row_factory = sqlite3.Row
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        return db

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        db = self._connect()
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        finally:
            db.close()

    def _read(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
        db = self._connect()
        try:
            return db.execute(sql, args).fetchall()
        finally:
            db.close()

    def _time(self, value: datetime | None) -> str | None:
        return None if value is None else aware(value).astimezone(timezone.utc).isoformat(timespec="microseconds")

    def _parse_time(self, value: str | None) -> datetime | None:
        return None if value is None else datetime.fromisoformat(value)
