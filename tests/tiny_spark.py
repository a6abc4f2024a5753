"""Spark settings for the tests' tables of a few rows: the test session's, and every mvflow process's
the tests start (``processes.TINY_CONF``)."""

# Runtime settings for tables of a few rows (measured on a Delta MV's build, refresh and verify,
# bench-free: ~30% less wall than Spark's defaults). Adaptive execution only adds jobs there (each
# shuffle stage its own: 29 jobs a batch against 23); generating and JIT-compiling a whole stage's
# code for every new query costs more than interpreting a few rows (the JVM's CPU went to its
# compilers). Nor generated projections (INTERPRETED): the MV shape, refresh and Delta source modules
# took 515 s against 623 in the test session (2026-11-29, one run after the other); the executors of a
# CLI `run --select offers_wide` spent ~40% of their CPU generating and compiling them (Java Flight
# Recorder, 2026-12-01: a run 29-30 s against 33-35, a `demo change` 36-43 s against 45-49,
# alternating). The cluster test (test_serve_cluster) and the demo generate code, as users' runs do.
INTERPRETED = {"spark.sql.codegen.factoryMode": "NO_CODEGEN"}
TINY_DATA = {
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.codegen.wholeStage": "false",
    **INTERPRETED,
}


def rows_frame(spark, rows: list[tuple], schema: str):
    """A frame of a few Python rows, as a ``VALUES`` list the JVM reads itself: ``createDataFrame``
    ships pickled rows to Python workers (27% more wall per small table write, measured side by side)."""
    if not rows:
        return spark.createDataFrame([], schema)
    return spark.sql(values_sql(rows, schema))


def values_sql(rows: list[tuple], schema: str) -> str:
    """The rows as a SELECT of typed columns.

    >>> from decimal import Decimal; import datetime as dt
    >>> print(values_sql([(1, "it's", Decimal("2.50"), dt.datetime(2024, 1, 1), None, True)],
    ...                  "id BIGINT, t STRING, p DECIMAL(12,2), ts TIMESTAMP, n INT, b BOOLEAN"))
    SELECT CAST(id AS BIGINT) AS id, CAST(t AS STRING) AS t, CAST(p AS DECIMAL(12,2)) AS p, CAST(ts AS TIMESTAMP) AS ts, CAST(n AS INT) AS n, CAST(b AS BOOLEAN) AS b FROM VALUES (1, 'it\\'s', 2.50, TIMESTAMP'2024-01-01 00:00:00', NULL, TRUE) AS v(id, t, p, ts, n, b)
    """
    columns = [field.split(None, 1) for field in _fields(schema)]
    select = ", ".join(f"CAST({name} AS {kind}) AS {name}" for name, kind in columns)
    values = ", ".join("(" + ", ".join(_literal(v) for v in row) + ")" for row in rows)
    return f"SELECT {select} FROM VALUES {values} AS v({', '.join(name for name, _ in columns)})"


def _fields(schema: str) -> list[str]:
    """``a INT, p DECIMAL(12,2)`` split at the commas outside parentheses."""
    fields, depth, current = [], 0, ""
    for char in schema:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            fields.append(current.strip())
            current = ""
        else:
            current += char
    return [*fields, current.strip()]


def _literal(value) -> str:
    import datetime as dt
    from decimal import Decimal

    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, (int, float, Decimal)):
        return str(value)
    if isinstance(value, dt.datetime):
        return f"TIMESTAMP'{value.isoformat(sep=' ')}'"
    if isinstance(value, dt.date):
        return f"DATE'{value.isoformat()}'"
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"
