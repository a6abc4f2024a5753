"""The SparkSession of a target: local mode with a project-local warehouse and Derby metastore
by default, any master and ``spark.*`` settings from ``project.yml``.

pyspark is imported inside functions so that ``mvflow compile`` never loads it.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from .errors import Problem, RunError
from .project import Target

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_LOG4J = """\
rootLogger.level = {level}
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{HH:mm:ss}} %p %c{{1}}: %m%n
# PySpark runs as a "shell": Spark then resets the root level to this logger's and says so.
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = {level}
# The Hive metastore logs expected conditions ("database already exists") as errors with traces.
logger.hms.name = org.apache.hadoop.hive.metastore.RetryingHMSHandler
logger.hms.level = off
logger.hiveobjectstore.name = org.apache.hadoop.hive.metastore.ObjectStore
logger.hiveobjectstore.level = off
"""


def spark_session(target: Target) -> "SparkSession":
    """Start (or reuse) the SparkSession described by ``target.spark``."""
    if shutil.which("java") is None:
        raise RunError(Problem("Java is not installed: Spark needs Java 17 or newer",
                               hint="run ./setup.sh, or install openjdk-17-jre-headless", code="no-java"))
    from pyspark.sql import SparkSession

    settings = target.spark
    builder = SparkSession.builder.master(settings.master).appName(settings.app_name)
    java_options = []
    if settings.metastore_dir is not None:
        metastore = Path(settings.metastore_dir)
        metastore.mkdir(parents=True, exist_ok=True)
        log4j = metastore / "log4j2.properties"
        log4j.write_text(_LOG4J.format(level=settings.log_level.lower()))
        java_options += [f"-Dderby.system.home={metastore}", f"-Dlog4j2.configurationFile=file:{log4j}"]
        builder = builder.config("spark.hadoop.javax.jdo.option.ConnectionURL",
                                 f"jdbc:derby:;databaseName={metastore / 'metastore_db'};create=true")
    if settings.warehouse_dir is not None:
        builder = builder.config("spark.sql.warehouse.dir", str(settings.warehouse_dir))
    if java_options:
        builder = builder.config("spark.driver.extraJavaOptions", " ".join(java_options))
    for key, value in sorted(settings.conf.items()):
        builder = builder.config(key, value)
    session = builder.enableHiveSupport().getOrCreate()
    session.sparkContext.setLogLevel(settings.log_level)
    return session


class LazySession:
    """A SparkSession started on first use: a run whose models all find nothing to do from the
    state store and the files (``compiler.watch``) never pays Spark's start-up."""

    def __init__(self, start: Callable[[], "SparkSession"]):
        self._start, self._session, self._lock = start, None, threading.Lock()

    @property
    def started(self) -> bool:
        return self._session is not None

    def session(self) -> "SparkSession":
        with self._lock:
            if self._session is None:
                self._session = self._start()
            return self._session

    def __getattr__(self, name: str) -> Any:
        return getattr(self.session(), name)
