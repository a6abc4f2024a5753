"""The SparkSession of a target: local mode with a project-local warehouse and Derby metastore
by default, any master and ``spark.*`` settings from ``project.yml``.

pyspark is imported inside functions so that ``mvflow compile`` never loads it.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import threading
import weakref
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable

from . import jvm_archive
from .errors import MvflowError, Problem, RunError
from .project import SparkSettings, Target

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_LOG4J = """\
rootLogger.level = {level}
rootLogger.appenderRef.out.ref = out
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = %d{{HH:mm:ss}} %p %c{{1}}: %m%n
{appender}
# PySpark runs as a "shell": a class that initialises logging as one (the Py4J gateway, the REPL)
# resets the root level to its own logger's unless that logger is configured, and says so on stderr.
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = {level}
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = {level}
# The Hive metastore logs expected conditions ("database already exists") as errors with traces.
logger.hms.name = org.apache.hadoop.hive.metastore.RetryingHMSHandler
logger.hms.level = off
logger.hiveobjectstore.name = org.apache.hadoop.hive.metastore.ObjectStore
logger.hiveobjectstore.level = off
"""
_CONSOLE = "appender.out.type = Console\nappender.out.target = SYSTEM_ERR"
_FILE = "appender.out.type = File\nappender.out.fileName = {path}\nappender.out.append = false"

# What the JVM itself writes to stderr at start-up whatever log4j says (the launcher adds the module).
_JVM_BANNER = ("WARNING: Using incubator modules:",)
# PySpark logs every captured SQL error with its whole Java stack trace as JSON on stderr.
_PYSPARK_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")

log = logging.getLogger("mvflow")


def spark_session(target: Target, verbose: bool | None = None, delta: bool | None = None) -> "SparkSession":
    """Start (or reuse) the SparkSession described by ``target.spark``.

    Quiet unless ``verbose`` (default: whether the ``mvflow`` logger shows debug, as ``--debug``
    sets it): Spark's log goes to ``spark.log`` beside the metastore, not to the terminal, and the
    JVM's start-up banner and PySpark's JSON error dumps are dropped; errors reach the user as
    mvflow messages (``compiler.failures``).

    Delta Lake is on when its jars are at hand (``compiler.delta_jars``); ``delta`` (default:
    whether the target's ``table_format`` is delta) makes them required: fetched if missing, and
    a clear error when they cannot be.

    A target with ``spark.remote`` (``sc://host:port``) gets a session on that Spark Connect
    server instead, no JVM here (``compiler.spark_connect``)."""
    if target.spark.remote:
        from .spark_connect import connect_session

        _quiet_pyspark_loggers(not (log.isEnabledFor(logging.DEBUG) if verbose is None else verbose))
        return connect_session(target, target.table_format == "delta" if delta is None else delta)
    if shutil.which("java") is None:
        raise RunError(Problem("Java is not installed: Spark needs Java 17 or newer",
                               hint="run ./setup.sh, or install openjdk-17-jre-headless", code="no-java"))
    from pyspark.sql import SparkSession

    verbose = log.isEnabledFor(logging.DEBUG) if verbose is None else verbose
    options = session_options(target, delta, verbose)
    _quiet_pyspark_loggers(not verbose)
    if not verbose:
        _launch_quiet_gateway(options)
    builder = SparkSession.builder
    for key, value in options.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()  # Hive's catalog unless the target's conf says otherwise (_options)
    session.sparkContext.setLogLevel(target.spark.log_level)
    if target.metastore.type != "postgres":
        check_metastore_home(session, target.spark)
    return session


_BATCHED: "weakref.WeakSet[SparkSession]" = weakref.WeakSet()  # the sessions an MV batch ran on in this process
_BATCHED_LOCK = threading.Lock()


def first_batch(session: "SparkSession") -> bool:
    """Whether no MV batch ran on ``session`` in this process before this one (from now on, one
    has). The first pays the warm-up the later ones do not: the JIT, code generation, each source's
    first log read (the bench grid's first build at 100,000 offers: 9.4 s, later ones 1.8-2.2 s).
    Every ``mvflow run`` is a process of its own, so each run's first MV batch is the first, run
    after run; ``mvflow serve`` and the bench run many batches of each MV in one process
    (``compiler.kinds.mv.strategy.explore_build``)."""
    with _BATCHED_LOCK:
        first = session not in _BATCHED
        _BATCHED.add(session)
    return first


def check_metastore_home(session: "SparkSession", settings: SparkSettings) -> None:
    """Refuse a project-local metastore whose tables live in another warehouse than the session's.

    The embedded Derby metastore keeps absolute locations: a project copied with its ``.mvflow/``
    (``cp -r``) would write new versions into the original project's tables. Its ``default``
    database lies in the warehouse it was created with, so one metastore call tells."""
    home = session.catalog.getDatabase("default").locationUri
    warehouse = session.conf.get("spark.sql.warehouse.dir")
    if same_place(home, warehouse):
        return
    where = Path(settings.metastore_dir) / "metastore_db" if settings.metastore_dir is not None else "the metastore"
    raise RunError(Problem(
        f"the metastore {where} keeps its tables in {home}, not in this target's warehouse {warehouse}: it was "
        "copied with another project, or the warehouse moved, and a run would write into those tables",
        "project.yml", code="foreign-metastore",
        hint="in a copy of a project, delete the copy's .mvflow/<target>/ folder (metastore, warehouse, state: mvflow "
             "makes them anew) or copy without .mvflow/; if the warehouse moved, set warehouse_dir back to it"))


def same_place(one: str, other: str) -> bool:
    """Whether two warehouse locations (a path or a URI) name one folder.

    >>> same_place("file:/tmp/w", "/tmp/w/"), same_place("file:/tmp/w", "/tmp/v"), same_place("s3a://b/w", "s3a://b/w/")
    (True, False, True)
    """
    from urllib.parse import urlparse

    def place(location: str) -> str:
        url = urlparse(location)
        if url.scheme in ("", "file"):
            return os.path.realpath(url.path)
        return location.rstrip("/")

    return place(one) == place(other)


def spark_log(settings: SparkSettings) -> Path | None:
    """Where a quiet session's Spark log goes (rewritten by every session start)."""
    return Path(settings.metastore_dir).parent / "spark.log" if settings.metastore_dir is not None else None


def session_options(target: Target, delta: bool | None, verbose: bool) -> dict[str, str]:
    """The settings of a local JVM's session: Delta's, mvflow's, the target's own (they win), a
    shared metastore's, and the JVM's class archive where it fits."""
    delta_options = _delta_options(target.table_format == "delta" if delta is None else delta, target.spark.master)
    options = {**delta_options, **_options(target.spark, verbose)}  # the target's own conf wins
    if target.metastore.type == "postgres":  # a shared catalog instead of Derby (compiler/metastore.py)
        from .metastore import postgres_options

        options.update(postgres_options(target.metastore, target.spark.conf))
    # The archive holds the classes of Spark's own class path: a JVM whose class path has more in
    # front (a PostgreSQL metastore's JDBC driver, the target's extraClassPath) refuses it, with a
    # warning at every start. Such a JVM starts without it.
    user_java = options.get("spark.driver.extraJavaOptions", "")
    archive = [] if options.get("spark.driver.extraClassPath") else jvm_archive.java_options(user_java)
    if archive:  # faster JVM starts (compiler/jvm_archive.py)
        options["spark.driver.extraJavaOptions"] = " ".join([*archive, *([user_java] if user_java else [])])
    return options


def _options(settings: SparkSettings, verbose: bool) -> dict[str, str]:
    """Every ``spark.*`` setting of the session, as the builder and ``spark-submit`` take them."""
    # Hive's catalog (Derby under metastore_dir, or a shared one): tables outlive the process. A
    # target's conf may say "in-memory" (definitions gone with the process: the tests' session)
    options = {"spark.master": settings.master, "spark.app.name": settings.app_name,
               "spark.sql.catalogImplementation": "hive"}
    java_options = []
    if settings.metastore_dir is not None:
        metastore = Path(settings.metastore_dir)
        metastore.mkdir(parents=True, exist_ok=True)
        log4j = metastore / "log4j2.properties"
        appender = _CONSOLE if verbose else _FILE.format(path=spark_log(settings))
        log4j.write_text(_LOG4J.format(level=settings.log_level.lower(), appender=appender))
        java_options += [f"-Dderby.system.home={metastore}", f"-Dlog4j2.configurationFile=file:{log4j}"]
        options["spark.hadoop.javax.jdo.option.ConnectionURL"] = f"jdbc:derby:;databaseName={metastore / 'metastore_db'};create=true"
    if settings.warehouse_dir is not None:
        options["spark.sql.warehouse.dir"] = str(settings.warehouse_dir)
    if not settings.master.startswith("local"):  # a cluster's executors (docs/cluster.md)
        # where the catalog says, whatever default file system an executor has; the driver's Python
        # for Python work on executors (a seed's rows): the same path on every worker
        if settings.warehouse_dir is not None:
            options["spark.sql.warehouse.dir"] = Path(settings.warehouse_dir).as_uri()
        options["spark.pyspark.python"] = sys.executable
    options.update((key, str(value)) for key, value in sorted(settings.conf.items()))
    # the target's own JVM options come after mvflow's (the last -D of a name wins) rather than
    # replacing them: without the Derby home and log4j file the metastore lands in the working
    # directory and Spark's log on the terminal
    user_java = options.get("spark.driver.extraJavaOptions", "")
    if java_options:
        options["spark.driver.extraJavaOptions"] = " ".join([*java_options, *([user_java] if user_java else [])])
    return options


def _delta_options(required: bool, master: str) -> dict[str, str]:
    from .delta_jars import JarsMissing, delta_jars, delta_session_conf

    # Every Delta write rebuilds the table's snapshot in snapshotPartitions tasks (default 50):
    # on one machine that fixed cost halved a small write when cut to the cores' count.
    local = {"spark.databricks.delta.snapshotPartitions": "2"} if master.startswith("local") else {}
    try:
        return {**delta_session_conf(delta_jars(offline=True)), **local}
    except JarsMissing:
        if not required:
            return {}
    try:
        return {**delta_session_conf(delta_jars()), **local}
    except JarsMissing as exc:
        raise RunError(Problem(str(exc), hint="run scripts/setup.sh (it fetches them), or use table_format: parquet",
                               code="no-delta-jars")) from None


def _quiet_pyspark_loggers(quiet: bool) -> None:
    from pyspark.logger import PySparkLogger

    for name in _PYSPARK_LOGGERS:
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL + 1 if quiet else logging.WARNING)


def _launch_quiet_gateway(options: dict[str, str]) -> None:
    """Start the JVM as pyspark would, but with its stderr read through ``_forward_stderr`` (from
    the start, so that a JVM that fails to start is still heard), unless this process has one."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:
        return
    conf = SparkConf(loadDefaults=False)
    for key, value in options.items():
        conf.set(key, value)
    read, write = os.pipe()
    threading.Thread(target=_forward_stderr, args=(os.fdopen(read, "rb"), sys.stderr), daemon=True,
                     name="mvflow-jvm-stderr").start()
    try:
        gateway = launch_gateway(conf, popen_kwargs={"stderr": write})
    finally:
        os.close(write)
    SparkContext._ensure_initialized(gateway=gateway)


def _forward_stderr(stream: IO[bytes], out: IO[str]) -> None:
    """Copy the JVM's stderr to ours, without its start-up banner: a crash still shows."""
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", "replace")
        if line.startswith(_JVM_BANNER):
            continue
        try:
            out.write(line)
            out.flush()
        except (OSError, ValueError):  # our stderr is gone (closed pipe, finished test capture)
            pass


class LazySession:
    """A SparkSession started on first use: a run whose models all find nothing to do from the
    state store and the files (``compiler.watch``) never pays Spark's start-up.

    ``then(session)`` runs once when the session has started, before anyone gets it (the run's
    check of the sources' schemas, ``compiler.drift``). If the start or ``then`` raises a user
    error, that error is kept as ``failure`` and raised to every caller: the run stops
    (``run_models``)."""

    def __init__(self, start: Callable[[], "SparkSession"], then: Callable[["SparkSession"], None] | None = None):
        self._start, self._then, self._session, self._lock = start, then, None, threading.Lock()
        self.failure: MvflowError | None = None

    @property
    def started(self) -> bool:
        return self._session is not None

    def session(self) -> "SparkSession":
        with self._lock:
            if self.failure is not None:
                raise self.failure
            if self._session is None:
                try:
                    session = self._start()
                    if self._then is not None:
                        self._then(session)
                except MvflowError as exc:
                    self.failure = exc
                    raise
                self._session = session
            return self._session

    def __getattr__(self, name: str) -> Any:
        return getattr(self.session(), name)
