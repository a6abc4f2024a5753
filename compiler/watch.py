"""Telling that an ``mv`` or ``fact`` model has nothing to do without starting Spark (and a
``table`` or ``view`` model: ``compiler.kinds.unchanged``).

When a run leaves an incremental model with nothing pending, its runner records a *watch* in
the state store: a listing (names, sizes, modification times) of the files under every table
whose change could give the model work, the positions of the topics it waits on, a hash of its
SQL and, for a fact waiting on its delay, the time its oldest pending row becomes ready. The next
run compares them first: if all are as recorded, the model is up to date and its runner returns
before touching Spark, so a run with nothing to do does not even start a SparkSession.

A Delta table is a directory too: each commit adds a file under its ``_delta_log/``, so any
write (a MERGE, an OPTIMIZE, a VACUUM) changes the listing; a commit that changes no rows only
costs a needless look by Spark.

The listing is taken *before* the run reads the data, so a change that lands while it runs
shows up as a different listing next time. Anything the check cannot see answers "don't know",
and the runner asks Spark as before: a table that is not a directory on this machine's file
system (``s3a://``, ``hdfs://``), a view that is not a project model, no recorded watch. Not
seen: a table dropped and re-created *elsewhere* outside mvflow while its old files stay
(an external table moved with ``SET LOCATION``), a view dropped outside mvflow (a view has no
files; the tables under it are watched); ``run --full-refresh`` never uses the watch. The model's
own tables are listed too, after the run: one dropped outside mvflow (its files gone) is not up to
date (``dropped`` names them for ``mvflow plan``)."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

from .state import StateStore, encode_position

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class Spec:
    """What a model's progress depends on: its topic, tables, other topics, SQL."""

    topic: str
    sql: str  # a hash of everything compiled that decides the model's work
    tables: tuple[str, ...]
    topics: tuple[str, ...] = ()  # exact topic names (upstream facts, MV inputs of MVs)
    prefixes: tuple[str, ...] = ()  # every topic starting with one of these (an MV's input topics)
    offset: bool = True  # the topic has an offset whose position the watch records (a table or view has none)
    own: tuple[str, ...] = ()  # the tables holding the model's own rows, listed as the run left them


@dataclass
class Watch:
    """The recorded picture; ``ready_at`` (UTC, naive ISO) is when time alone may make work."""

    last: str | None
    sql: str
    tables: dict[str, list[str]] = field(default_factory=dict)  # relation → [location, listing hash]
    topics: dict[str, str | None] = field(default_factory=dict)
    ready_at: str | None = None

    def dump(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def parse(cls, text: str | None) -> "Watch | None":
        try:
            data = json.loads(text) if text else None
            return cls(**data) if isinstance(data, dict) else None
        except (TypeError, ValueError):
            return None


def sql_hash(*parts: str) -> str:
    """
    >>> sql_hash("SELECT 1") == sql_hash("SELECT 1") != sql_hash("SELECT 2")
    True
    """
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def is_idle(store: StateStore, spec: Spec, now: datetime) -> Watch | None:
    """The recorded watch if nothing the model depends on moved since it was recorded, else None."""
    watch = Watch.parse(store.get_watch(spec.topic))
    offset = store.get(spec.topic) if spec.offset else None
    if watch is None or spec.offset and (offset is None or offset.in_flight or _encoded(offset.last) != watch.last):
        return None
    if watch.sql != spec.sql or sorted(watch.tables) != sorted({*spec.tables, *spec.own}):
        return None
    if watch.ready_at is not None and _utc_naive(now) >= datetime.fromisoformat(watch.ready_at):
        return None
    if _topic_positions(store, spec) != watch.topics:
        return None
    return watch if all(listing(location) == seen for location, seen in watch.tables.values()) else None


def dropped(store: StateStore, spec: Spec) -> list[str]:
    """The model's own tables that the recorded watch listed with files and that have none now
    (dropped outside mvflow, or their warehouse folder deleted): no Spark asked."""
    watch = Watch.parse(store.get_watch(spec.topic))
    if watch is None:
        return []
    return [relation for relation in spec.own if relation in watch.tables
            and watch.tables[relation][1] != "missing" and listing(watch.tables[relation][0]) == "missing"]


@dataclass(frozen=True)
class Observed:
    """What the inputs looked like before a run read them; ``None`` tables: cannot be watched."""

    tables: dict[str, list[str]] | None
    topics: dict[str, str | None]


def observe(spark: "SparkSession", store: StateStore, spec: Spec) -> Observed:
    """List every table's files (locations from the catalog) and read the topics, before the run."""
    return Observed(_listings(spark, spec.tables), _topic_positions(store, spec))


def _listings(spark: "SparkSession", relations: tuple[str, ...], own: bool = False) -> dict[str, list[str]] | None:
    tables: dict[str, list[str]] = {}
    for relation in relations:
        location = local_location(spark, relation, own)
        if location is None and own and not spark.catalog.tableExists(relation):
            location = ""  # not made yet, nor its database: its offset moves when it is
        if location is None:
            return None
        tables[relation] = [location, listing(location)]
    return tables


def record(spark: "SparkSession", store: StateStore, spec: Spec, observed: Observed, ready_at: datetime | None = None) -> None:
    """Record the watch after a run left the model with nothing to do: its inputs as ``observed``
    saw them before the run, its own tables as the run left them (a table dropped or a warehouse
    deleted outside mvflow then shows as moved, and the next run builds it again)."""
    own = _listings(spark, spec.own, own=True)
    if observed.tables is None or own is None:
        return
    offset = store.get(spec.topic) if spec.offset else None
    if spec.offset and (offset is None or offset.in_flight):
        return
    when = _utc_naive(ready_at).isoformat() if ready_at is not None else None
    last = _encoded(offset.last) if offset is not None else None
    store.put_watch(spec.topic, Watch(last, spec.sql, {**observed.tables, **own}, observed.topics, when).dump())


def local_location(spark: "SparkSession", relation: str, own: bool = False) -> str | None:
    """The directory holding a table's files, if it is on this machine's file system (never over
    Spark Connect: a ``file:`` location is on the server's machine, which may not be this one).
    ``own``: a table the model makes, which mvflow makes without a location (``_managed_location``)."""
    from .spark_connect import is_connect

    if is_connect(spark):
        return None
    try:
        exists, location = _catalog_location(spark, relation)
    except Exception:  # noqa: BLE001 - not in the session catalog's terms: DESCRIBE answers
        exists, location = _described_location(spark, relation)
    if not exists:
        return _managed_location(spark, relation, own)
    return _local_path(location) if location else None


def _catalog_location(spark: "SparkSession", relation: str) -> tuple[bool, str | None]:
    """Whether the table exists and its location (None: a view), from the session catalog in the
    JVM: ~13 ms (a few py4j calls), where ``DESCRIBE TABLE EXTENDED`` took ~40 ms; a run watches every
    input and output twice."""
    session = spark._jsparkSession  # type: ignore[attr-defined]
    table = session.sessionState().sqlParser().parseTableIdentifier(relation)
    catalog = session.sessionState().catalog()
    if not catalog.tableExists(table):
        return False, None
    metadata = catalog.getTableMetadata(table)
    uri = metadata.storage().locationUri()
    if metadata.tableType().name() == "VIEW" or not uri.isDefined():
        return True, None
    return True, uri.get().toString()


def _described_location(spark: "SparkSession", relation: str) -> tuple[bool, str | None]:
    if not spark.catalog.tableExists(relation):
        return False, None
    rows = spark.sql(f"DESCRIBE TABLE EXTENDED {relation}").collect()
    details = {row["col_name"]: row["data_type"] for row in rows}
    return True, None if details.get("Type") == "VIEW" else details.get("Location") or None


def _managed_location(spark: "SparkSession", relation: str, own: bool = False) -> str | None:
    """Where one of mvflow's own tables that does not exist yet (a parquet table model's second
    slot, a fact before its first step: made without a location) will keep its files: in its
    database's folder, which lists as ``missing`` until it is made (``own``, and no database yet
    either: ``""``, which lists as ``missing``; the model's offset moves when it is made). Any other
    missing table cannot be watched."""
    database, _, table = relation.rpartition(".")
    if not (own or "__mvflow_" in table) or not database:
        return None
    if not spark.catalog.databaseExists(database):
        return "" if own else None
    rows = spark.sql(f"DESCRIBE DATABASE {database}").collect()
    location = _local_path(next((r[1] for r in rows if r[0] == "Location"), ""))
    return f"{location.rstrip('/')}/{table.lower()}" if location else None


def _local_path(location: str) -> str | None:
    url = urlparse(location)
    return unquote(url.path) if location and url.scheme in ("", "file") else None


def listing(location: str) -> str:
    """A hash of every file under ``location``: relative path, size, modification time.

    >>> import tempfile; d = tempfile.mkdtemp()
    >>> before = listing(d); _ = Path(d, "part-0.parquet").write_text("x")
    >>> before == listing(d), listing(d) == listing(d)
    (False, True)
    """
    digest = hashlib.sha256()
    root = Path(location)
    if not location or not root.is_dir():
        return "missing"
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            path = Path(folder, name)
            try:
                stat = path.stat()
            except FileNotFoundError:  # removed while listing: the listing differs anyway
                continue
            digest.update(f"{path.relative_to(root)}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:24]


def _topic_positions(store: StateStore, spec: Spec) -> dict[str, str | None]:
    return {o.topic: _encoded(o.last) + "|" + _encoded(o.next) for o in store.offsets()
            if o.topic in spec.topics or any(o.topic.startswith(prefix) for prefix in spec.prefixes)}


def _encoded(position) -> str:
    return encode_position(position) or ""


def _utc_naive(value: datetime) -> datetime:
    return value.astimezone(timezone.utc).replace(tzinfo=None) if value.tzinfo else value
