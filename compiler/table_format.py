"""Table formats: how a model's tables are stored (``table_format: delta | parquet``).

The format is chosen per target in ``project.yml`` and per model by ``config(table_format=...)``;
``Model.table_format`` holds the result. Compile-time text (the ``USING`` clause, table
properties) comes from here; what a kind does differently per format lives with the kind.
Delta Lake's jars and session settings: ``compiler.delta_jars`` and ``compiler.spark``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import DataType, StructType

DELTA, PARQUET = "delta", "parquet"
VIEW = "view"  # what table_provider says of a view

# Deletion vectors: a MERGE that touches a few rows of a file marks them instead of rewriting the
# file (measured at 1M rows, 0.1% random keys: 0.17x a rebuild with them, a full rewrite without).
DELTA_PROPERTIES = {"delta.enableDeletionVectors": "true"}


def readable_view(relation: str) -> str:
    """The statement that follows every ``CREATE … VIEW`` mvflow runs. Spark keeps in a view the SQL
    settings of the session that created it (``view.sqlConfig.*``) and applies them to every read;
    one is the session catalog, which a session with Delta Lake sets to Delta's: a Spark without
    Delta's jars (a notebook, a Thrift server, dbt) could read no view mvflow made, a parquet
    model's included. Without that setting a view is read with the reader's own catalog.

    >>> print(readable_view("marts.offers"))
    ALTER VIEW marts.offers UNSET TBLPROPERTIES IF EXISTS ('view.sqlConfig.spark.sql.catalog.spark_catalog')
    """
    return f"ALTER VIEW {relation} UNSET TBLPROPERTIES IF EXISTS ('view.sqlConfig.spark.sql.catalog.spark_catalog')"


def using(table_format: str, properties: dict[str, str] | None = None, cluster_by: tuple[str, ...] = ()) -> str:
    """The ``USING`` clause (clustering, table properties) of a ``CREATE TABLE`` in this format.

    >>> print(using("delta", DELTA_PROPERTIES, cluster_by=("shop_id",)))
    USING delta
    CLUSTER BY (shop_id)
    TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')
    >>> using("parquet")
    'USING parquet'
    """
    clause = f"USING {table_format}"
    if cluster_by:
        clause += f"\n{cluster_clause(cluster_by)}"
    if properties:
        clause += f"\n{properties_clause(properties)}"
    return clause


def properties_clause(properties: dict[str, str]) -> str:
    """The ``TBLPROPERTIES`` clause of a ``CREATE`` or an ``ALTER TABLE … SET``.

    >>> properties_clause(DELTA_PROPERTIES)
    "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')"
    """
    return "TBLPROPERTIES (" + ", ".join(f"'{k}' = '{v}'" for k, v in sorted(properties.items())) + ")"


def cluster_clause(cluster_by: tuple[str, ...]) -> str:
    """Delta liquid clustering (``CLUSTER BY``; ``NONE`` removes it): each ``OPTIMIZE`` clusters the
    files not clustered yet, and readers' filters on these columns skip files by their statistics.

    >>> cluster_clause(("shop_id", "category")), cluster_clause(())
    ('CLUSTER BY (shop_id, category)', 'CLUSTER BY NONE')
    """
    return f"CLUSTER BY ({', '.join(cluster_by)})" if cluster_by else "CLUSTER BY NONE"


def cluster_by_problems(cluster_by: tuple[str, ...], table_format: str, partition_by: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """What is wrong with a model's ``cluster_by`` beside its format and partitioning, as (message, hint).

    >>> cluster_by_problems(("a",), "delta"), len(cluster_by_problems(("a",), "parquet", ("p",)))
    ([], 1)
    """
    if not cluster_by:
        return []
    if table_format != DELTA:
        return [("cluster_by is a Delta Lake option (liquid clustering); this model's table_format is "
                 f"'{table_format}'", "set config(table_format='delta') (a format switch rebuilds the model), or remove cluster_by")]
    if partition_by:
        return [("Delta refuses a table both partitioned and clustered (partition_by and cluster_by)",
                 "keep one: cluster_by for columns readers filter by, partition_by for a few large partitions")]
    return []


def column_definitions(schema: "StructType", names: "tuple[str, ...] | list[str] | None" = None) -> str:
    """The column list of a ``CREATE TABLE`` holding ``schema``'s columns (``names`` only, in that
    order, when given), names quoted: a table made like another without a Spark job (a ``CREATE
    TABLE … AS SELECT … LIMIT 0`` runs one, ~0.1-0.2 s warm on 2 cores).

    >>> from pyspark.sql.types import StructType, StructField, LongType, DecimalType, ArrayType
    >>> schema = StructType([StructField("id", LongType()), StructField("odd `name", DecimalType(10, 2)),
    ...                      StructField("tags", ArrayType(StructType([StructField("a b", LongType())])))])
    >>> print(column_definitions(schema))
    `id` bigint, `odd ``name` decimal(10,2), `tags` array<struct<`a b`:bigint>>
    >>> column_definitions(schema, ["ID"])
    '`id` bigint'
    """
    fields = {f.name.lower(): f for f in schema.fields}
    chosen = schema.fields if names is None else [fields[n.lower()] for n in names]
    return ", ".join(f"{quoted(f.name)} {_type_ddl(f.dataType)}" for f in chosen)


def _type_ddl(data_type: "DataType") -> str:
    """A type as DDL: ``simpleString`` with struct field names quoted."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(data_type, StructType):
        return "struct<" + ",".join(f"{quoted(f.name)}:{_type_ddl(f.dataType)}" for f in data_type.fields) + ">"
    if isinstance(data_type, ArrayType):
        return f"array<{_type_ddl(data_type.elementType)}>"
    if isinstance(data_type, MapType):
        return f"map<{_type_ddl(data_type.keyType)},{_type_ddl(data_type.valueType)}>"
    return data_type.simpleString()


def quoted(name: str) -> str:
    """A column name as Spark SQL quotes it.

    >>> quoted("odd `name")
    '`odd ``name`'
    """
    return "`" + name.replace("`", "``") + "`"


def describe_table(spark: "SparkSession", relation: str) -> dict[str, str] | None:
    """``DESCRIBE TABLE EXTENDED`` as a mapping (``Type``, ``Provider``, ``View Text``…); None when missing."""
    if not spark.catalog.tableExists(relation):
        return None
    return {r.col_name: (r.data_type or "") for r in spark.sql(f"DESCRIBE TABLE EXTENDED {relation}").collect()}


def provider_of(info: dict[str, str] | None) -> str | None:
    """None for a missing table, ``view``, else the table's provider (``delta``, ``parquet``, ``hive``…)."""
    if info is None:
        return None
    return VIEW if info.get("Type", "").upper() == "VIEW" else info.get("Provider", "").lower()


def table_provider(spark: "SparkSession", relation: str) -> str | None:
    """What ``relation`` is now (see ``provider_of``)."""
    return provider_of(describe_table(spark, relation))


def is_delta_table(spark: "SparkSession", relation: str) -> bool:
    """Whether ``relation`` exists as a Delta table (not a view, not parquet)."""
    return table_provider(spark, relation) == DELTA


def table_details(spark: "SparkSession", relation: str) -> tuple[str | None, dict[str, str]]:
    """How ``relation`` is stored (``provider_of``: ``delta``, ``parquet``, ``view``…; None if it does
    not exist) and its table properties: one catalog call, no Spark job."""
    info = describe_table(spark, relation)
    return provider_of(info) or None, table_properties(info)


def table_properties(info: dict[str, str] | None) -> dict[str, str]:
    """The ``Table Properties`` of a ``describe_table`` mapping (none for a view or a missing table).

    >>> table_properties({"Table Properties": "[delta.enableChangeDataFeed=true,delta.minReaderVersion=3]"})
    {'delta.enableChangeDataFeed': 'true', 'delta.minReaderVersion': '3'}
    """
    pairs = (info or {}).get("Table Properties", "").strip("[]")
    return dict(p.split("=", 1) for p in pairs.split(",") if "=" in p) if pairs else {}


def delta_version(spark: "SparkSession", relation: str) -> int:
    """The newest committed version of a Delta table (``-1`` without history), as Delta's
    transaction log in the JVM knows it after listing the log: no Spark job, ~10 ms, where
    ``DESCRIBE HISTORY`` runs two (~0.3 s) and a batch asks it of every Delta input. ``DeltaLog``
    is Delta's internal API: should it change, the answer comes from ``DESCRIBE HISTORY``."""
    try:
        return _log_version(spark, relation)
    except Exception:  # noqa: BLE001 - the SQL below answers (or raises the user-facing error)
        return delta_commit(spark, relation)[0]


def logged_version(spark: "SparkSession", relation: str) -> tuple[int, int | None] | None:
    """The newest version of a Delta table and its commit's time (``commit_time``), read from its
    log without a Spark job; None when that cannot be known so (not a Delta table, a view, no
    history, or Spark Connect: no JVM here)."""
    try:
        version = _log_version(spark, relation)
    except Exception:  # noqa: BLE001 - not a table of Delta's, or not a classic session
        return None
    return (version, commit_time(spark, relation, version)) if version >= 0 else None


def commit_time(spark: "SparkSession", relation: str, version: int) -> int | None:
    """When commit ``version`` of a Delta table was made (its ``commitInfo`` timestamp, in ms), as the
    table's log holds it now: with the version, it names one point of one table's history. A table
    dropped and created again starts a new log, whose commit at that version, if it has one, was
    made at another time. (Its table id would not do: ``CREATE OR REPLACE`` gives a new one but keeps
    the log and its history.) None when it cannot be read: no such commit, cleaned up, no JVM."""
    try:
        info = _commit_info(spark, relation, version)
        return None if info is None else int(info.getTimestamp())
    except Exception:  # noqa: BLE001 - Delta's internal API, or a log cleaned up: cannot tell
        return None


def _commit_info(spark: "SparkSession", relation: str, version: int) -> Any:
    """Commit ``version``'s ``CommitInfo`` action, read from the table's log in the JVM (None: it has none)."""
    jvm, log = spark._jvm, _delta_log(spark, relation)  # type: ignore[attr-defined]
    commits = log.getChanges(version, version, jvm.scala.Option.empty(), True)
    while commits.hasNext():
        actions = commits.next()._2().iterator()
        while actions.hasNext():
            action = actions.next()
            if action.getClass().getSimpleName() == "CommitInfo":
                return action
    return None


# Commits read from the log before giving up on telling that none changed a row (each is a file read).
MAX_COMMITS_READ = 100
# Actions that change no row: a commit's own record, a streaming writer's transaction id, a clustering's
# domain metadata (files are judged by their ``dataChange`` flag: an OPTIMIZE's are false).
_NO_ROW_ACTIONS = frozenset({"CommitInfo", "SetTransaction", "DomainMetadata", "CheckpointMetadata"})


def rows_unchanged(spark: "SparkSession", relation: str, since: int, until: int) -> bool:
    """Whether no commit of a Delta table after version ``since`` up to ``until`` changed a row: each
    only rewrote files (``OPTIMIZE``, a purge: their files say ``dataChange = false``) or recorded
    something else (``VACUUM``'s commits), read from the log in the JVM (no Spark job). False when it
    cannot be told: a file, metadata or protocol change, a commit missing from the log, more than
    ``MAX_COMMITS_READ`` commits, or no JVM (Spark Connect)."""
    if until <= since:
        return until == since
    if until - since > MAX_COMMITS_READ:
        return False
    try:
        jvm, log = spark._jvm, _delta_log(spark, relation)  # type: ignore[attr-defined]
        commits = log.getChanges(since + 1, until, jvm.scala.Option.empty(), True)  # True: fail on a gap
        seen = []
        while commits.hasNext():
            commit = commits.next()
            seen.append(int(commit._1()))
            actions = commit._2().iterator()
            while actions.hasNext():
                action = actions.next()
                name = action.getClass().getSimpleName()
                if name in ("AddFile", "RemoveFile"):
                    if action.dataChange():
                        return False
                elif name not in _NO_ROW_ACTIONS:
                    return False
    except Exception:  # noqa: BLE001 - Delta's internal API, or a log cleaned up: cannot tell
        return False
    return seen == list(range(since + 1, until + 1))


def _log_version(spark: "SparkSession", relation: str) -> int:
    none = spark._jvm.scala.Option.empty()  # type: ignore[attr-defined]
    return int(_delta_log(spark, relation).update(False, none, none).version())


def _delta_log(spark: "SparkSession", relation: str) -> Any:
    """The table's ``DeltaLog`` in the JVM (Delta's internal API; raises without a JVM)."""
    session = spark._jsparkSession  # type: ignore[attr-defined]
    table = session.sessionState().sqlParser().parseTableIdentifier(relation)
    return spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(session, table)  # type: ignore[attr-defined]


def delta_commit(spark: "SparkSession", relation: str) -> tuple[int, dict[str, str]]:
    """The newest committed version of a Delta table and its commit's ``operationMetrics`` (a write's
    ``numOutputRows``…), in the same read of its log; ``(-1, {})`` without history. Read in the JVM
    (no Spark job, where ``DESCRIBE HISTORY`` runs two, ~0.3 s), else by ``DESCRIBE HISTORY``."""
    try:
        version = _log_version(spark, relation)
        info = _commit_info(spark, relation, version) if version >= 0 else None
        if info is not None:
            metrics, found = info.operationMetrics(), {}
            pairs = metrics.get().iterator() if metrics.isDefined() else None
            while pairs and pairs.hasNext():
                pair = pairs.next()
                found[str(pair._1())] = str(pair._2())
            return version, found
    except Exception:  # noqa: BLE001 - Delta's internal API, or no JVM (Spark Connect): the SQL answers
        pass
    row = spark.sql(f"DESCRIBE HISTORY {relation} LIMIT 1").select("version", "operationMetrics").first()
    return (int(row[0]), dict(row[1] or {})) if row is not None else (-1, {})


# A table of more files than this is counted by Spark: each footer is a few calls into the JVM.
FOOTERS_READ_MAX = 64


def parquet_rows(spark: "SparkSession", relation: str) -> int | None:
    """The rows of a parquet table summed from its files' footers, read in the JVM (no Spark job;
    a ``count()`` is two with adaptive execution). None when it cannot be told: more than
    ``FOOTERS_READ_MAX`` files, no JVM (Spark Connect), a file that is not parquet."""
    try:
        files = spark.table(relation).inputFiles()  # the table's file index, listed in the driver
        if len(files) > FOOTERS_READ_MAX:
            return None
        jvm, conf = spark._jvm, spark._jsc.hadoopConfiguration()  # type: ignore[attr-defined]
        rows = 0
        for name in files:
            source = jvm.org.apache.parquet.hadoop.util.HadoopInputFile.fromPath(jvm.org.apache.hadoop.fs.Path(name), conf)
            reader = jvm.org.apache.parquet.hadoop.ParquetFileReader.open(source)
            try:
                rows += int(reader.getRecordCount())
            finally:
                reader.close()
    except Exception:  # noqa: BLE001 - no JVM, or parquet's reader refused a file: Spark counts
        return None
    return rows
