"""Spark Connect targets: ``spark: {remote: sc://host:port}`` sends every statement to a Spark
Connect server through PySpark's Connect client (``pyspark[connect]``: grpcio, pandas, pyarrow…);
no JVM starts in the mvflow process.

The server owns what a classic driver takes from the target: its master, warehouse, metastore,
jars (Delta Lake) and every static setting. mvflow sends the target's ``conf`` to its session,
and the server keeps those it may change at run time (``spark.sql.*``, Delta's ``spark.databricks.*``);
the others are the server's own (logged with ``--debug``).

What mvflow takes from the classic API, and what it does over Connect:

- ``sparkContext.setLogLevel``: not called (the server's log is the server's);
- ``sparkContext.cancelAllJobs`` (Ctrl-C stops a run): ``interruptAll`` (``cancel_all_jobs``);
- ``sparkContext.setJobGroup`` (a fact step's jobs, its query id in the step log): a tag (``tag_jobs``);
- the JVM side of an ``Observation`` (a fact step's row and null counts, seen while it writes):
  the metrics the response carried, else the step's rows are counted from the table (``observed``);
- ``sparkContext.getConf`` (an MV batch puts back the broadcast and adaptive settings the
  target chose): the session's values when it started (``launch_conf``);
- ``_jvm``/``_jsparkSession`` (a Delta table's version from its log, ``compiler.table_format``):
  ``DESCRIBE HISTORY`` answers;
- file listings of the tables (``compiler.watch``): the files are the server's, maybe on another
  machine, so every run asks Spark whether an input moved.

Checked when the session starts, as one clear error each: the server answers; it binds SQL
parameter markers (``spark.sql(query, args=...)``, which every generated statement uses: Delta
4.4's SQL parser drops them and over Connect the in-process workaround does not apply, see
``compiler.delta_jars``); it loads Delta Lake when the target's tables are Delta.
"""

from __future__ import annotations

import logging
import socket
import threading
import warnings
import weakref
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import urlparse

from .errors import Problem, RunError
from .project import Target

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("mvflow")

DEFAULT_PORT = 15002  # Spark Connect's
DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
_LAUNCH: dict[int, dict[str, str]] = {}  # id(session) → its settings when it started
_LOCK = threading.Lock()
# SparkContext → its conf (fixed once it started): ``getConf()`` copies every setting through py4j,
# ~60 calls, and each MV batch asked it twice
_CONTEXT_CONF: "weakref.WeakKeyDictionary[Any, dict[str, str]]" = weakref.WeakKeyDictionary()


def connect_session(target: Target, delta: bool) -> "SparkSession":
    """A session on the target's Spark Connect server, checked (see the module's doc)."""
    url = str(target.spark.remote)
    _client_installed(target, url)
    _reachable(target, url)
    from pyspark.sql import SparkSession

    session = SparkSession.builder.remote(url).getOrCreate()
    refused = []
    for key, value in sorted(target.spark.conf.items()):
        try:
            session.conf.set(key, str(value))
        except Exception:  # noqa: BLE001 - CANNOT_MODIFY_CONFIG: a static setting, the server's own
            refused.append(key)
    if refused:
        log.debug("the Spark Connect server at %s keeps its own %s", url, ", ".join(refused))
    _binds_parameters(session, url)
    if delta and DELTA_EXTENSION not in (session.conf.get("spark.sql.extensions", None) or ""):
        raise RunError(Problem(
            f"the Spark Connect server at {url} does not load Delta Lake, and target '{target.name}' stores Delta tables",
            hint="use table_format: parquet, or a server started with Delta's jars and extension whose parser binds "
                 "parameter markers (Delta 4.4 on Spark 4.2 does not: docs/cluster.md)",
            code="connect-no-delta"))
    with _LOCK:
        _LAUNCH[id(session)] = dict(session.conf.getAll)
    return session


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` (or the session a ``LazySession`` started) talks to a Spark Connect server."""
    spark = _unwrap(spark)
    return type(spark).__module__.startswith("pyspark.sql.connect")


def launch_conf(spark: Any, key: str, default: str) -> str:
    """The session's setting as the target made it, not as a batch in another thread switched it
    since: the SparkContext's conf (classic) or the value read when the Connect session started."""
    spark = _unwrap(spark)
    if is_connect(spark):
        with _LOCK:
            return _LAUNCH.get(id(spark), {}).get(key, default)
    context = spark.sparkContext
    with _LOCK:
        conf = _CONTEXT_CONF.get(context)
        if conf is None:
            conf = _CONTEXT_CONF[context] = dict(context.getConf().getAll())
    return conf.get(key, default)


def cancel_all_jobs(spark: Any) -> None:
    """Cancel every job the session runs (Ctrl-C): the SparkContext's, or the Connect session's operations."""
    spark = _unwrap(spark)
    if is_connect(spark):
        spark.interruptAll()
    else:
        spark.sparkContext.cancelAllJobs()


def tag_jobs(spark: Any, group: str, description: str) -> Callable[[], None]:
    """Mark the jobs this thread starts from now on with ``group`` (the classic job group, a Spark
    Connect tag: what a fact step logs as its query id); returns what ends it."""
    spark = _unwrap(spark)
    if is_connect(spark):
        tag = group.replace(",", ";")  # a tag holds no comma
        spark.addTag(tag)
        return lambda: spark.removeTag(tag)
    spark.sparkContext.setJobGroup(group, description, interruptOnCancel=False)
    return lambda: spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)


def observed(observation: Any) -> dict[str, Any] | None:
    """An ``Observation``'s metrics if Spark delivered them, without waiting: the classic one
    completes in the JVM when the command returns; a Spark Connect one is filled from the response
    (a command's may carry none)."""
    java = getattr(observation, "_jo", None)
    if java is not None:
        return observation.get if java.future().isCompleted() else None
    return getattr(observation, "_result", None) or None


def _unwrap(spark: Any) -> Any:
    from .spark import LazySession

    return spark.session() if isinstance(spark, LazySession) else spark


def _client_installed(target: Target, url: str) -> None:
    try:
        with warnings.catch_warnings():  # pandas 3: "PySpark does not yet fully support pandas >= 3.0.0"
            warnings.simplefilter("ignore")
            import pyspark.sql.connect.session  # noqa: F401 - checks grpcio, pandas, pyarrow, zstandard…
    except ImportError as exc:
        import pyspark

        raise RunError(Problem(
            f"target '{target.name}' uses Spark Connect ({url}), and PySpark's Connect client is not installed: "
            f"{str(exc).splitlines()[0]}",
            hint=f'pip install "pyspark[connect]=={pyspark.__version__}" (or mvflow\'s extra: pip install -e ".[connect]")',
            code="no-spark-connect")) from None


def _reachable(target: Target, url: str) -> None:
    """Fail at once when nothing listens (the client itself retries for minutes)."""
    parsed = urlparse(url.split(";", 1)[0].replace("sc://", "http://", 1))
    host, port = parsed.hostname or "localhost", parsed.port or DEFAULT_PORT
    try:
        socket.create_connection((host, port), timeout=10).close()
    except OSError as exc:
        raise RunError(Problem(
            f"cannot reach the Spark Connect server of target '{target.name}' at {host}:{port} ({exc.strerror or exc})",
            hint="start it (Spark's sbin/start-connect-server.sh, or spark-submit --class "
                 "org.apache.spark.sql.connect.service.SparkConnectServer), or fix spark.remote in project.yml",
            code="connect-unreachable")) from None


def _binds_parameters(session: "SparkSession", url: str) -> None:
    try:
        session.sql("SELECT :mvflow_probe AS probe", args={"mvflow_probe": 1}).collect()
    except Exception as exc:  # noqa: BLE001 - any other failure is the server's to tell
        if "UNBOUND_SQL_PARAMETER" not in str(exc):
            raise
        delta = DELTA_EXTENSION in (session.conf.get("spark.sql.extensions", None) or "")
        raise RunError(Problem(
            f"the Spark Connect server at {url} does not bind SQL parameter markers, and every statement mvflow "
            "runs binds its positions and keys by name" + (
                f": its {DELTA_EXTENSION} (Delta Lake 4.4 on Spark 4.2) parses SQL without them (delta-io/delta#7640), "
                "and Spark Connect has no analyzer-side binding to fall back on" if delta else ""),
            hint="use a server whose parser binds them: without the Delta extension (table_format: parquet), "
                 "or a Delta release with the fix; or run the target as a classic driver (master: instead of remote:)",
            code="connect-parameters")) from None
