"""The ``seed`` kind: a CSV file of the project (``seeds/**/*.csv``) loaded into a table.

Compile reads the file to name and type its columns the way dbt-spark does: a column whose
every value is an integer is ``bigint``, a number ``double``, then ``date`` (``2024-01-31``),
``timestamp`` (``2024-01-31 10:00:00`` or ISO 8601), ``boolean`` (``true``/``false``), else
``string``; empty and ``null`` are NULL. ``column_types`` overrides a column's type (its
values are then cast from the text). The seed's SELECT casts the columns of a temporary view
``mvflow_seed_<name>`` that the runner fills with the file's rows, as text; the table is then
built like a ``table`` model's (``mvflow seed`` replaces it whole: loading is idempotent).
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Iterator

from ..errors import CompileError, Problem
from ..sources import IDENTIFIER
from .base import ModelRunner
from .table import TableKind, run_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..manifest import Manifest, Model
    from ..run import Result, RunOptions

#: A seed larger than this is refused: its rows pass through Python (seeds are small reference data).
MAX_SEED_BYTES = 64 * 1024 * 1024
_NULLS = ("", "null")
_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
_ISO_DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}(:?\d{2})?)?$")


@dataclass(frozen=True)
class SeedKind(TableKind):
    """A CSV file loaded into a table (built as a ``table`` model is)."""

    name: ClassVar[str] = "seed"
    not_config: ClassVar[frozenset[str]] = frozenset({"publish"})  # `mvflow seed` loads it: nothing publishes it
    column_types: tuple[tuple[str, str], ...] = ()  # (column, Spark SQL type) pairs overriding the inferred types
    quote_columns: bool = False  # accepted for dbt projects: Spark names are quoted where they need it anyway
    delimiter: str = ","

    def runner(self, options: "RunOptions") -> ModelRunner:
        return run_seed

    def next_run(self, manifest, model, store, now) -> tuple[str, str]:
        return "nothing", "`mvflow seed` and `mvflow build` load seeds; unchanged since its active version"

    def run_files(self, manifest: "Manifest", model: "Model") -> dict[str, str]:
        files = super().run_files(manifest, model)
        note = (f"-- {seed_view(model)}: a temporary view of the rows of {model.path} as text, filled by mvflow "
                f"(delimiter {self.delimiter!r})\n")
        return {name: text.replace("\n", "\n" + note, 1) for name, text in files.items()}


@dataclass(frozen=True)
class SeedFile:
    """A seed's header, the Spark type of each column and its rows (text, None for NULL)."""

    columns: tuple[str, ...]
    types: tuple[str, ...]
    rows: list[tuple[str | None, ...]]


def seed_view(model: "Model") -> str:
    return f"mvflow_seed_{model.name}"


def seed_select(model_name: str, seed: SeedFile) -> str:
    """The seed's SELECT: its columns cast from the text of ``mvflow_seed_<name>``.

    >>> seed_select("countries", SeedFile(("id", "name"), ("bigint", "string"), []))
    'SELECT\\n  CAST(id AS BIGINT) AS id,\\n  CAST(name AS STRING) AS name\\nFROM mvflow_seed_countries'
    """
    items = []
    for column, type_ in zip(seed.columns, seed.types):
        name = column if IDENTIFIER.fullmatch(column) else f"`{column.replace('`', '``')}`"
        items.append(f"CAST({name} AS {type_.upper()}) AS {name}")  # strings too: every column says its type
    return "SELECT\n  " + ",\n  ".join(items) + f"\nFROM mvflow_seed_{model_name}"


def read_seed(path: Path, display: str, delimiter: str = ",", column_types: dict | None = None) -> SeedFile:
    """Parse a seed file; a malformed file is a CompileError at its line."""
    if path.stat().st_size > MAX_SEED_BYTES:
        raise CompileError(Problem(f"the seed is larger than {MAX_SEED_BYTES // 2**20} MB", display, 1, code="seed-too-large",
                                   hint="load data this large as a source table; seeds are small reference data"))
    overrides = {str(k).lower(): str(v) for k, v in (column_types or {}).items()}
    try:
        records = list(_records(path, delimiter))
    except (csv.Error, UnicodeDecodeError) as exc:
        raise CompileError(Problem(f"cannot read the CSV file: {exc}", display, 1, code="bad-seed",
                                   hint="save it as UTF-8 CSV")) from exc
    if not records or not any(records[0][1]):
        raise CompileError(Problem("the seed has no header row", display, 1, code="bad-seed",
                                   hint="the first line names the columns: id,name,..."))
    header = tuple(c.strip() for c in records[0][1])
    _check_header(header, display)
    for name in overrides:
        if name not in {c.lower() for c in header}:
            raise CompileError(Problem(f"column_types names column '{name}', which the seed does not have", display, 1,
                                       code="bad-seed", hint="its columns: " + ", ".join(header)))
    rows = []
    for line, values in records[1:]:
        if len(values) != len(header):
            raise CompileError(Problem(f"this row has {len(values)} values, the header {len(header)} columns", display, line,
                                       code="bad-seed", hint="quote values that contain the delimiter"))
        rows.append(tuple(None if v.strip().lower() in _NULLS else v for v in values))
    types = tuple(overrides.get(c.lower()) or infer_type([r[i] for r in rows]) for i, c in enumerate(header))
    rows = [tuple(_normalized(v, t) for v, t in zip(row, types)) for row in rows]
    return SeedFile(header, types, rows)


def _records(path: Path, delimiter: str) -> Iterator[tuple[int, list[str]]]:
    """(line, values) of each CSV record, blank lines skipped."""
    with path.open(encoding="utf-8-sig", newline="") as handle:
        reader = csv.reader(handle, delimiter=delimiter)
        line = 1
        for values in reader:
            if values:
                yield line, values
            line = reader.line_num + 1


def _check_header(header: tuple[str, ...], display: str) -> None:
    seen: set[str] = set()
    for column in header:
        if not column:
            raise CompileError(Problem("the header has an empty column name", display, 1, code="bad-seed",
                                       hint="name every column in the first line"))
        if column.lower() in seen:
            raise CompileError(Problem(f"the header names column '{column}' twice", display, 1, code="bad-seed",
                                       hint="column names are case-insensitive in Spark: rename one"))
        seen.add(column.lower())


def infer_type(values: list[str | None]) -> str:
    """The Spark type of a column from its values (None is NULL), by dbt's rules.

    >>> infer_type(["1", "-20", None]), infer_type(["1", "2.50"]), infer_type(["2024-01-31"])
    ('bigint', 'double', 'date')
    >>> infer_type(["2024-01-31 10:00:00", "2024-02-01T08:30:00Z"]), infer_type(["True", "false"]), infer_type(["1", "x"])
    ('timestamp', 'boolean', 'string')
    >>> infer_type([None, None])
    'bigint'
    """
    present = [v.strip() for v in values if v is not None]
    if all(_NUMBER.match(v) for v in present):
        return "double" if any(_decimals(v) for v in present) else "bigint"
    for type_, test in (("date", _is_date), ("timestamp", _is_timestamp)):
        if all(test(v) for v in present):
            return type_
    if all(v.lower() in ("true", "false") for v in present):
        return "boolean"
    return "string"


def _decimals(value: str) -> bool:
    exponent = Decimal(value).as_tuple().exponent
    return isinstance(exponent, int) and exponent < 0


def _is_date(value: str) -> bool:
    try:
        datetime.strptime(value, "%Y-%m-%d")
        return True
    except ValueError:
        return False


def _is_timestamp(value: str) -> bool:
    try:
        datetime.strptime(value, "%Y-%m-%d %H:%M:%S")
        return True
    except ValueError:
        return bool(_ISO_DATETIME.match(value))


def _normalized(value: str | None, type_: str) -> str | None:
    """Text Spark casts to ``type_`` exactly as dbt reads it (``1e3`` is the integer 1000)."""
    if value is None or type_ not in ("bigint", "double"):
        return value
    try:
        number = Decimal(value.strip())
    except InvalidOperation:
        return value
    return str(int(number)) if type_ == "bigint" and number == number.to_integral_value() else value.strip()


def run_seed(spark: "SparkSession", manifest: "Manifest", model: "Model") -> "Result":
    """Fill the seed's temporary view from its file (read again: it may have changed since
    compile, and its types are the compiled ones), then build the table."""
    from pyspark.sql.types import StringType, StructField, StructType

    from ..run import Result

    kind: SeedKind = model.kind  # type: ignore[assignment]
    try:
        seed = read_seed(manifest.project.root / model.path, model.path, kind.delimiter, dict(kind.column_types))
    except CompileError as exc:
        return Result(model.name, kind.name, "error", message=exc.problems[0].format())
    schema = StructType([StructField(c, StringType()) for c in seed.columns])
    spark.createDataFrame(seed.rows, schema).createOrReplaceTempView(seed_view(model))
    try:
        return run_table(spark, manifest, model)
    finally:
        spark.catalog.dropTempView(seed_view(model))
