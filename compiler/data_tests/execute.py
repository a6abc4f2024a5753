"""Running a data test on Spark: count its failing rows, judge them, keep them if asked.

The query that runs (``target/run/tests/<name>.sql``) counts the failing rows and evaluates
``warn_if`` / ``error_if`` in SQL, as dbt does; the verdict is then ``verdict``'s, a pure
function of those figures and the test's severity.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from ..kinds.statements import Statement, execute, timed

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..manifest import Manifest
    from ..run import Result, RunOptions
    from ..state import StateStore
    from .compile import DataTest
    from .declare import TestConfig

#: statuses of a test's result (dbt's): the failing rows were none, or judged a warning or a failure
PASS, WARN, FAIL = "pass", "warn", "fail"


@dataclass(frozen=True)
class TestKind:
    """What the runner asks of a test, as it asks a model's kind."""

    name: ClassVar[str] = "test"
    run_folder: ClassVar[bool] = False
    is_incremental: ClassVar[bool] = False

    def runner(self, options: "RunOptions"):
        return lambda spark, manifest, test: run_test(spark, manifest, test, options.store)

    def statements(self, test: "DataTest") -> list[Statement]:
        if not test.config.store_failures:
            return []
        schema = test.relation.partition(".")[0]
        return [
            Statement("make sure the audit schema exists", f"CREATE DATABASE IF NOT EXISTS {schema}"),
            Statement("clear the failing rows of the last run", f"DROP TABLE IF EXISTS {test.relation}"),
            Statement("keep the failing rows (store_failures)", f"CREATE TABLE {test.relation} USING parquet AS\n{_limited(test)}"),
        ]

    def count_query(self, test: "DataTest") -> str:
        rows = f"SELECT * FROM {test.relation}" if test.config.store_failures else _limited(test)
        calc = test.config.fail_calc
        indented = "\n".join("  " + line if line else line for line in rows.rstrip().splitlines())
        return (f"SELECT\n  {calc} AS failures,\n  {calc} {test.config.warn_if} AS should_warn,\n"
                f"  {calc} {test.config.error_if} AS should_error\nFROM (\n{indented}\n) AS mvflow_test")

    def run_files(self, manifest: "Manifest", test: "DataTest") -> dict[str, str]:
        declared = test.declaration
        what = "singular test" if declared.is_singular else f"{declared.test_type} on {declared.attached_to}" + (
            f".{declared.column}" if declared.column else "")
        lines = [f"-- mvflow test: {test.name} ({what}) from {test.path}:{declared.line}",
                 f"-- severity {test.config.severity}: " + (f"fails when {test.config.fail_calc} {test.config.error_if}"
                                                          if test.config.severity == "error" else
                                                          f"warns when {test.config.fail_calc} {test.config.warn_if}")]
        if test.config.scope == "batch":
            lines.append(f"-- scope batch: only what {declared.attached_to}'s last batch wrote (the markers come from "
                         "its last entry in the step log)")
        for item in self.statements(test):
            lines += ["", f"-- {item.purpose}", item.sql.rstrip() + ";"]
        lines += ["", "-- count the failing rows", self.count_query(test) + ";"]
        return {f"{test.name}.sql": "\n".join(lines) + "\n"}


TEST_KIND = TestKind()


def _limited(test: "DataTest") -> str:
    return test.sql.rstrip() + (f"\nLIMIT {test.config.limit}" if test.config.limit is not None else "")


def run_test(spark: "SparkSession", manifest: "Manifest", test: "DataTest", store: "StateStore | None" = None) -> "Result":
    from ..failures import running_statement

    def check(result: "Result") -> None:
        params = _scope_parameters(manifest, test, store)
        execute(spark, test.kind.statements(test), params)
        query = test.kind.count_query(test)
        running_statement(query, "count the failing rows")
        row = spark.sql(query, args={k: v for k, v in params.items() if f":{k}" in query} or None).collect()[0]
        result.failures = int(row["failures"] or 0)
        result.status, result.message = verdict(result.failures, bool(row["should_warn"]), bool(row["should_error"]), test.config)
        if result.failures and test.declaration.test_type == "unit":  # which rows differ: one more job, on a failure only
            result.message += ": " + differences(spark.sql(f"SELECT * FROM (\n{test.sql}) AS diff LIMIT {SHOWN}").collect())

    return timed(test, check)


SHOWN = 5  # differing rows a failed unit test shows


def differences(rows: list) -> str:
    """A unit test's differing rows, as its failure message shows them.

    >>> differences([{"diff": "actual only", "id": "1", "n": "2"}, {"diff": "expected only", "id": "1", "n": None}])
    'actual only {id: 1, n: 2}; expected only {id: 1, n: null}'
    """
    shown = []
    for row in rows:
        values = {k: v for k, v in (row.asDict() if hasattr(row, "asDict") else row).items() if k != "diff"}
        shown.append(f"{row['diff']} {{" + ", ".join(f"{k}: {'null' if v is None else v}" for k, v in values.items()) + "}")
    return "; ".join(shown)


def _scope_parameters(manifest: "Manifest", test: "DataTest", store: "StateStore | None") -> dict:
    """A batch-scoped test's markers: the model's last batch (``scope.py``)."""
    if test.config.scope != "batch":
        return {}
    from ..state import open_state_store
    from .scope import parameters

    return parameters(manifest, manifest.models[test.attached_to],
                      store or open_state_store(manifest.project.target(manifest.target).state))


def verdict(failures: int, should_warn: bool, should_error: bool, config: "TestConfig") -> tuple[str, str]:
    """The test's status and message from its counted failures (dbt's rule: a test of severity
    ``error`` fails when ``error_if`` holds, else any test warns when ``warn_if`` holds).

    >>> from compiler.data_tests.declare import TestConfig
    >>> verdict(3, True, True, TestConfig())
    ('fail', 'Got 3 results, configured to fail if != 0')
    >>> verdict(3, True, True, TestConfig(severity="warn"))
    ('warn', 'Got 3 results, configured to warn if != 0')
    >>> verdict(5, True, False, TestConfig(error_if=">10"))
    ('warn', 'Got 5 results, configured to warn if != 0')
    >>> verdict(0, False, False, TestConfig())
    ('pass', '')
    """
    got = f"Got {failures} result{'' if failures == 1 else 's'}"
    if config.severity == "error" and should_error:
        return FAIL, f"{got}, configured to fail if {config.error_if}"
    if should_warn:
        return WARN, f"{got}, configured to warn if {config.warn_if}"
    return PASS, ""
