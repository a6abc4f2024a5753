"""A target's Hive metastore on PostgreSQL: one catalog that several mvflow processes (and other Spark
jobs) share (``metastore: {type: postgres, dsn: postgresql://user@host:5432/db}``; issue 16).

Spark's built-in Hive 2.3 client keeps the catalog through DataNucleus over JDBC. Before a session
starts, mvflow makes sure of three things, with no step left to the user:

1. **The schema exists.** Left to DataNucleus (``datanucleus.schema.autoCreateAll``), tables are
   created lazily inside the first statement that needs them, and on PostgreSQL the first
   ``CREATE TABLE … AS SELECT`` then waits forever: one connection runs ``ALTER TABLE "TBL_PRIVS" ADD
   CONSTRAINT … REFERENCES "TBLS"`` and waits for the other, idle in its transaction after writing
   ``TBLS`` (seen in pg_stat_activity, still waiting after 4 minutes). So mvflow creates the whole Hive 2.3 schema up front from
   Hive's own PostgreSQL scripts — ``hive-schema-1.2.0`` and its upgrades to 2.3.0, the path Hive's
   ``schematool`` takes (Hive publishes no single 2.3.0 script on Maven Central; the scripts come in
   ``org.apache.hive:hive-standalone-metastore:3.1.3:src.tar.gz``, 2.4 MB, fetched once). They run in
   one transaction under an advisory lock, so that two processes starting on an empty database
   never race (the second waits, then finds the schema). Spark then starts with
   ``datanucleus.schema.autoCreateAll=false`` and ``hive.metastore.schema.verification=true``:
   DataNucleus never issues DDL, and a database holding another Hive version's schema is refused
   (by mvflow first, with a clear message).
2. **The JDBC driver is on the driver's classpath**: ``org.postgresql:postgresql`` from Maven
   Central (``compiler.maven``: sha1-checked, cached beside the Delta jars) on
   ``spark.driver.extraClassPath`` (the built-in Hive client loads classes from the application's
   class loader; Spark's ``spark.sql.hive.metastore.sharedPrefixes`` already lists ``org.postgresql``
   for an isolated one).
3. **Clear errors**, as ``RunError``: a dsn mvflow cannot read, a server it cannot reach, a file it
   cannot fetch, a database holding another schema.

A password in the dsn is handed to Spark's conf (``javax.jdo.option.ConnectionPassword``), which local
users may see in the JVM's command line; a ``~/.pgpass`` file serves both psycopg and the JDBC driver
instead. The tables go in the database's ``public`` schema (Hive's scripts set that search path).
"""

from __future__ import annotations

import os
import re
import sys
import tarfile
import time
from pathlib import Path
from typing import Any, Mapping

from .errors import Problem, RunError
from .maven import Artifact, ArtifactMissing, fetch
from .project import MetastoreSettings

DRIVER = Artifact("org.postgresql", "postgresql", "42.7.14")
HIVE_SCRIPTS = Artifact("org.apache.hive", "hive-standalone-metastore", "3.1.3", "-src.tar.gz")
SCHEMA_VERSION = "2.3.0"  # what Spark's built-in Hive client (2.3.x) reads and verifies
# Hive's own path to the 2.3.0 schema on PostgreSQL (its upgrade.order.postgres), in the scripts' folder
SCRIPTS = ("hive-schema-1.2.0", "upgrade-1.2.0-to-2.0.0", "upgrade-2.0.0-to-2.1.0", "upgrade-2.1.0-to-2.2.0",
           "upgrade-2.2.0-to-2.3.0")
_SCRIPTS_DIR = "src/main/sql/postgres"
_LOCK_KEY = "mvflow:hive-metastore-schema"
_JDBC_PARAMS = ("sslmode", "sslrootcert", "sslcert", "sslkey")  # libpq names the JDBC driver reads alike


def postgres_options(settings: MetastoreSettings, conf: Mapping[str, str] | None = None,
                     jars_dir: Path | None = None) -> dict[str, str]:
    """The session settings that put the Hive metastore on ``settings.dsn``: the schema is made
    sure of first (created on an empty database), the JDBC driver fetched. ``conf``: the target's
    own ``spark.*`` settings (its ``spark.driver.extraClassPath`` is kept, after the driver)."""
    jdbc = jdbc_settings(settings.dsn or "")
    ensure_schema(settings.dsn or "", jars_dir)
    try:
        driver = fetch(DRIVER, jars_dir, what="PostgreSQL JDBC driver", remedy="run mvflow once online")
    except ArtifactMissing as exc:
        raise RunError(Problem(str(exc), "project.yml", code="no-jdbc-driver",
                               hint="the target's postgres metastore needs the driver jar once; mvflow keeps it")) from None
    conf = conf or {}
    options = {
        **{f"spark.hadoop.javax.jdo.option.{key}": value for key, value in jdbc.items()},
        "spark.hadoop.datanucleus.schema.autoCreateAll": "false",  # never DDL from DataNucleus (it can hang)
        "spark.hadoop.hive.metastore.schema.verification": "true",
    }
    options = {key: value for key, value in options.items() if key not in conf}  # the target's own conf wins
    options["spark.driver.extraClassPath"] = os.pathsep.join(p for p in (str(driver), conf.get("spark.driver.extraClassPath")) if p)
    return options


def jdbc_settings(dsn: str) -> dict[str, str]:
    """``ConnectionURL``, ``ConnectionDriverName``, ``ConnectionUserName`` (and ``ConnectionPassword``)
    for a libpq dsn (``postgresql://user@host:5432/db`` or ``host=… dbname=…``)."""
    from psycopg.conninfo import conninfo_to_dict
    from psycopg import ProgrammingError

    scheme = dsn.partition("://")[0] if "://" in dsn else None
    if scheme is not None and scheme not in ("postgresql", "postgres"):
        raise _bad_dsn(dsn, f"a {scheme}:// URL is not a PostgreSQL one")
    try:
        parts = conninfo_to_dict(dsn) if dsn.strip() else {}
    except ProgrammingError as exc:
        raise _bad_dsn(dsn, str(exc).strip().splitlines()[0]) from None
    host, port, dbname = str(parts.get("host") or ""), str(parts.get("port") or "5432"), str(parts.get("dbname") or "")
    if not host or not dbname:
        raise _bad_dsn(dsn, "it names no " + ("host" if not host else "database"))
    if host.startswith("/") or "," in host:
        raise _bad_dsn(dsn, f"host '{host}': the JDBC driver needs one TCP host (no Unix socket, no host list)")
    if not port.isdigit():
        raise _bad_dsn(dsn, f"port '{port}' is not a number")
    params = "&".join(f"{key}={parts[key]}" for key in _JDBC_PARAMS if parts.get(key))
    url = f"jdbc:postgresql://{f'[{host}]' if ':' in host else host}:{port}/{dbname}" + (f"?{params}" if params else "")
    settings = {"ConnectionURL": url, "ConnectionDriverName": "org.postgresql.Driver"}
    if parts.get("user"):
        settings["ConnectionUserName"] = str(parts["user"])
    if parts.get("password"):
        settings["ConnectionPassword"] = str(parts["password"])
    return settings


def ensure_schema(dsn: str, jars_dir: Path | None = None, timeout: float = 10.0) -> float | None:
    """Make sure the database holds Hive's 2.3.0 metastore schema; create it when the database has
    none. Returns the seconds creating it took, or None when it was there. One transaction under an
    advisory lock: a second process waits, then finds the schema."""
    connection = _connect(dsn, timeout)
    with connection:  # commits (or rolls back) and closes
        connection.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (_LOCK_KEY,))
        found = _schema_version(connection)
        if found == SCHEMA_VERSION:
            return None
        if found is not None:
            raise RunError(Problem(f"the metastore database {_where(dsn)} holds {found}, not the Hive {SCHEMA_VERSION} "
                                   "schema Spark's built-in Hive client reads", "project.yml", code="metastore-schema",
                                   hint="give the target an empty database of its own (mvflow creates the schema), "
                                        "or reach that catalog through its metastore service (spark.hadoop.hive.metastore.uris)"))
        scripts = _scripts(jars_dir)
        started = time.monotonic()
        for script in scripts:
            connection.execute(script)
        seconds = time.monotonic() - started
    print(f"mvflow: created the Hive {SCHEMA_VERSION} metastore schema in {_where(dsn)} ({seconds:.2f} s)", file=sys.stderr)
    return seconds


def _connect(dsn: str, timeout: float) -> Any:
    """A connection to the metastore database; the database is created when the server lacks it
    and the user may create databases."""
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    try:
        try:
            return psycopg.connect(dsn, connect_timeout=int(timeout))
        except psycopg.OperationalError as exc:
            dbname = conninfo_to_dict(dsn).get("dbname")
            if f'database "{dbname}" does not exist' not in str(exc):
                raise
        with psycopg.connect(make_conninfo(dsn, dbname="postgres"), connect_timeout=int(timeout), autocommit=True) as admin:
            try:
                admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
            except (psycopg.errors.DuplicateDatabase, psycopg.errors.UniqueViolation):
                pass  # another process made it first
        return psycopg.connect(dsn, connect_timeout=int(timeout))
    except psycopg.OperationalError as exc:
        raise RunError(Problem(f"cannot connect to the PostgreSQL metastore: {str(exc).strip().splitlines()[0]}",
                               "project.yml", code="metastore-unreachable",
                               hint="check the target's metastore.dsn (host, port, user, database) and that the server runs")) from None
    except psycopg.errors.InsufficientPrivilege as exc:
        raise RunError(Problem(f"the metastore database does not exist and cannot be created: {str(exc).strip().splitlines()[0]}",
                               "project.yml", code="metastore-unreachable",
                               hint="create it once (createdb <name>), or name one that exists in metastore.dsn")) from None
    except psycopg.ProgrammingError as exc:
        raise _bad_dsn(dsn, str(exc).strip().splitlines()[0]) from None


def _schema_version(connection: Any) -> str | None:
    """'2.3.0' (the VERSION row), None for a database without Hive's tables, else a description."""
    version, dbs = connection.execute("""SELECT to_regclass('public."VERSION"') IS NOT NULL,
                                                to_regclass('public."DBS"') IS NOT NULL""").fetchone()
    if not version:
        return "Hive tables without a VERSION table" if dbs else None
    row = connection.execute('SELECT "SCHEMA_VERSION" FROM public."VERSION"').fetchone()
    if row is None:
        return "Hive tables without a schema version (made by DataNucleus' autoCreateAll?)"
    return row[0] if row[0] == SCHEMA_VERSION else f"the Hive {row[0]} schema"


def _scripts(jars_dir: Path | None) -> list[str]:
    """The SQL of ``SCRIPTS``, in order, from Hive's scripts archive (fetched once)."""
    try:
        archive = fetch(HIVE_SCRIPTS, jars_dir, what="Hive's metastore scripts", remedy="run mvflow once online")
    except ArtifactMissing as exc:
        raise RunError(Problem(str(exc), "project.yml", code="no-metastore-scripts",
                               hint="an empty metastore database gets Hive's schema from these scripts, once")) from None
    texts = {}
    try:
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                name = member.name.rsplit("/", 1)[-1].removesuffix(".postgres.sql")
                if member.isfile() and _SCRIPTS_DIR in member.name and name in SCRIPTS:
                    texts[name] = tar.extractfile(member).read().decode("utf-8")
    except (tarfile.TarError, OSError) as exc:
        raise RunError(Problem(f"cannot read {archive}: {exc}", code="no-metastore-scripts",
                               hint="delete the file: mvflow fetches it again")) from None
    missing = [name for name in SCRIPTS if name not in texts]
    if missing:
        raise RunError(Problem(f"{archive} lacks {', '.join(missing)}.postgres.sql", code="no-metastore-scripts",
                               hint="delete the file: mvflow fetches it again"))
    return [texts[name] for name in SCRIPTS]


def _where(dsn: str) -> str:
    """The dsn without its password, for messages."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        parts = conninfo_to_dict(dsn)
        return f"{parts.get('dbname', '?')} on {parts.get('host', '?')}:{parts.get('port', 5432)}"
    except Exception:  # noqa: BLE001 - only for a message
        return "the metastore database"


def _bad_dsn(dsn: str, why: str) -> RunError:
    shown = re.sub(r"password\s*=\s*\S+", "password=***", re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", dsn))
    return RunError(Problem(f"the target's metastore dsn {shown!r} cannot be used: {why}", "project.yml", code="bad-metastore-dsn",
                            hint="write metastore: {type: postgres, dsn: postgresql://user@host:5432/database}"))
