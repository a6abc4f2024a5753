"""Which Spark action ran which jobs: every DataFrame action, ``spark.sql`` statement, table read
and temp view of a block, with the jobs it ran, attributed to the nearest ``compiler`` frame.

    with job_calls(spark) as calls:
        ...
    print(calls.table())

Each attributed call is bracketed by ``bench.jobs``' sentinel (one extra job per call, not
counted), so run it only to find where jobs come from, not to time anything.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_ROOT = "compiler"


class Calls:
    def __init__(self) -> None:
        self.rows: list[tuple[str, str, int]] = []  # (where, what, jobs)

    def table(self) -> str:
        lines = [f"  {n:3d}  {where:42s} {what}" for where, what, n in self.rows if n]
        return "\n".join(lines) + f"\n  {sum(n for *_, n in self.rows):3d}  total"


def _where() -> str:
    frame = sys._getframe(2)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module.startswith(_ROOT + "."):
            return f"{module.split('.')[-1]}.{frame.f_code.co_name}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


def _what(name: str, args: tuple) -> str:
    text = next((a for a in args if isinstance(a, str)), "")
    first = next((line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("--")), "")
    return f"{name} {first[:60]}".strip()


@contextmanager
def job_calls(spark: "SparkSession") -> Iterator[Calls]:
    from pyspark.sql import Catalog, DataFrameReader, SparkSession
    from pyspark.sql.classic.dataframe import DataFrame

    from bench.jobs import _sentinel

    calls, depth = Calls(), {"n": 0}
    patched: list[tuple[Any, str, Callable]] = []

    def wrap(owner: Any, name: str) -> None:
        original = getattr(owner, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            if depth["n"]:
                return original(*args, **kwargs)
            depth["n"] += 1
            try:
                before = max(_sentinel(spark))
                try:
                    return original(*args, **kwargs)
                finally:
                    calls.rows.append((_where(), _what(f"{owner.__name__}.{name}", args[1:]),
                                       min(_sentinel(spark)) - before - 1))
            finally:
                depth["n"] -= 1

        patched.append((owner, name, original))
        setattr(owner, name, counted)

    for owner, names in ((SparkSession, ("sql",)), (DataFrame, ("collect", "count", "first", "localCheckpoint",
                                                                 "createOrReplaceTempView", "toPandas")),
                         (DataFrameReader, ("table",)), (Catalog, ("tableExists", "getTable", "dropTempView"))):
        for name in names:
            wrap(owner, name)
    try:
        yield calls
    finally:
        for owner, name, original in reversed(patched):
            setattr(owner, name, original)
