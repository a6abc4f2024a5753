"""The Spark type of a SQL expression, where it is certain (column lineage's ``types``).

Spark's own rules, for the expressions whose result type they fix: ``count`` is ``bigint``,
``sum`` of an integral type ``bigint`` and of a decimal(p, s) decimal(p + 10, s), ``avg``
``double`` (decimal(p + 4, s + 4) for decimals), ``min``/``max`` keep their argument's type,
arithmetic on ints and doubles widens, ``/`` is ``double``. Anything else, and every rule
whose inputs are not all known, answers None: an unknown type is shown as unknown, never
guessed. (sqlglot's ``annotate_types`` is not used: it answers for every expression, and
some answers differ from Spark's, e.g. ``avg`` of a decimal, or decimal arithmetic.)
"""

from __future__ import annotations

import difflib
import re
from typing import Callable

from sqlglot import exp
from sqlglot.errors import SqlglotError

from .parse import DIALECT

ColumnType = Callable[[exp.Column], "str | None"]

# Non-decimal numeric types, narrowest first: Spark widens an operation to the wider one.
_NUMERIC = ("tinyint", "smallint", "int", "bigint", "float", "double")
_INTEGRAL = _NUMERIC[:4]
_MAX_PRECISION = 38
_BOOLEAN = (exp.Boolean, exp.Predicate, exp.Connector, exp.Not)
_STRING = (exp.Upper, exp.Lower, exp.ConcatWs, exp.Trim, exp.Initcap)
_SAME_AS_ARGUMENT = (exp.Min, exp.Max, exp.First, exp.Last, exp.AnyValue, exp.Abs, exp.Neg, exp.Paren, exp.Alias)
_INT = (exp.RowNumber, exp.Rank, exp.DenseRank, exp.Length)
_ARITHMETIC = (exp.Add, exp.Sub, exp.Mul, exp.Mod)


def spark_type(node: exp.Expression, column_type: ColumnType) -> str | None:
    """The type Spark gives ``node``, spelled as Spark prints it, or None when not certain.

    ``column_type`` answers the type of a column reference (None: unknown).

    >>> from sqlglot import parse_one
    >>> types = {"i": "int", "x": "double", "m": "decimal(12, 2)", "s": "string"}
    >>> def typed(sql):
    ...     return spark_type(parse_one(sql, read="spark"), lambda c: types.get(c.name))
    >>> [typed(e) for e in ("count(*)", "sum(i)", "avg(i)", "x", "sum(m)", "avg(m)", "max(m)", "i + x", "i / 2")]
    ['bigint', 'bigint', 'double', 'double', 'decimal(22,2)', 'decimal(16,6)', 'decimal(12,2)', 'double', 'double']
    >>> [typed(e) for e in ("m * 2", "u", "coalesce(i, 0)", "upper(s)", "i = 1", "1.50", "cast(m AS double)")]
    [None, None, 'int', 'string', 'boolean', 'decimal(3,2)', 'double']
    >>> [typed(e) for e in ("concat(s, i)", "concat(s, u)", "substring(s, 1, 2)")]
    ['string', None, 'string']
    """
    rule = _rule(node)
    return spelled(rule(node, lambda child: spark_type(child, column_type), column_type)) if rule else None


Typer = Callable[[exp.Expression], "str | None"]


def _rule(node: exp.Expression) -> Callable[[exp.Expression, Typer, ColumnType], "str | None"] | None:
    for kinds, rule in _RULES:
        if isinstance(node, kinds):
            return rule
    return None


def _cast(node, typed, column_type):
    return node.to.sql(dialect=DIALECT)


def _column(node, typed, column_type):
    return None if node.is_star else column_type(node)


def _literal(node: exp.Literal, typed, column_type):
    if node.is_string:
        return "string"
    text = node.this
    if text.isdigit():
        return "int" if int(text) < 2**31 else "bigint" if int(text) < 2**63 else None
    whole, dot, fraction = text.partition(".")
    if dot and (whole + fraction).isdigit():  # Spark reads 1.50 as decimal(3, 2)
        precision = len(str(int(whole + fraction)))
        return f"decimal({max(precision, len(fraction))}, {len(fraction)})"
    return None


def _count(node, typed, column_type):
    return "bigint"


def _sum(node: exp.Sum, typed, column_type):
    argument = typed(node.this)
    if argument in _INTEGRAL:
        return "bigint"
    if argument in ("float", "double"):
        return "double"
    decimal = _decimal(argument)
    return f"decimal({min(decimal[0] + 10, _MAX_PRECISION)}, {decimal[1]})" if decimal else None


def _avg(node: exp.Avg, typed, column_type):
    argument = typed(node.this)
    if argument in _NUMERIC:
        return "double"
    decimal = _decimal(argument)
    return f"decimal({min(decimal[0] + 4, _MAX_PRECISION)}, {min(decimal[1] + 4, _MAX_PRECISION)})" if decimal else None


def _same(node, typed, column_type):
    return typed(node.this)


def _arithmetic(node: exp.Binary, typed, column_type):
    """``a + b``: the wider of the two. A long chain (``a + b + … + z``, left-deep) is folded in a loop,
    from its innermost pair out, not by recursion: a SELECT may sum hundreds of columns."""
    rights = []
    while isinstance(node, _ARITHMETIC):
        rights.append(node.right)
        node = node.left
    result = typed(node)
    for right in reversed(rights):
        result = _wider([result, typed(right)])
    return result


def _divide(node: exp.Div, typed, column_type):
    return "double" if _wider([typed(node.left), typed(node.right)]) else None


def _branches(node, typed, column_type):
    """``coalesce``, ``if``, ``case``: every non-NULL branch has the type, or they widen."""
    if isinstance(node, exp.Case):
        values = [i.args.get("true") for i in node.args.get("ifs") or []] + [node.args.get("default")]
    elif isinstance(node, exp.If):
        values = [node.args.get("true"), node.args.get("false")]
    else:
        values = [node.this, *node.expressions]
    types = [typed(v) for v in values if v is not None and not isinstance(v, exp.Null)]
    if types and None not in types and len(set(types)) == 1:
        return types[0]
    return _wider(types)


def _text(node, typed, column_type):
    """``concat`` and ``substring`` give a string when they read strings (arrays and binaries stay what they are)."""
    arguments = node.expressions if isinstance(node, exp.Concat) else [node.this]
    types = [typed(a) for a in arguments]
    return "string" if types and all(t is not None and _scalar(t) for t in types) and "string" in types else None


def _scalar(type_: str) -> bool:
    return type_ in (*_NUMERIC, "string", "boolean", "date", "timestamp") or type_.startswith("decimal")


def _window(node: exp.Window, typed, column_type):
    return typed(node.this)


_RULES: tuple[tuple[type | tuple[type, ...], Callable], ...] = (
    ((exp.Cast, exp.TryCast), _cast),
    (exp.Column, _column),
    (exp.Literal, _literal),
    (exp.Count, _count),
    (exp.Sum, _sum),
    (exp.Avg, _avg),
    (_SAME_AS_ARGUMENT, _same),
    (_ARITHMETIC, _arithmetic),
    (exp.Div, _divide),
    ((exp.Coalesce, exp.If, exp.Case), _branches),
    ((exp.Concat, exp.Substring), _text),
    (exp.Window, _window),
    (_BOOLEAN, lambda node, typed, column_type: "boolean"),
    (_STRING, lambda node, typed, column_type: "string"),
    (_INT, lambda node, typed, column_type: "int"),
)


def _wider(types: list[str | None]) -> str | None:
    """The widest of non-decimal numeric types, None if any is another or unknown.

    ``float`` with ``int`` or ``bigint`` is ``double`` under ANSI mode (Spark 4's default) and
    ``float`` without it: the session decides, so it is not known here.

    >>> _wider(["int", "bigint"]), _wider(["float", "smallint"]), _wider(["float", "int"]), _wider(["int", "string"])
    ('bigint', 'float', None, None)
    """
    if not types or any(t not in _NUMERIC for t in types):
        return None
    if "float" in types and {"int", "bigint"} & set(types):
        return None
    return max(types, key=_NUMERIC.index)


def _decimal(type_: str | None) -> tuple[int, int] | None:
    """(precision, scale) of a decimal type (Spark's default decimal is decimal(10, 0))."""
    if not type_ or not type_.startswith("decimal"):
        return None
    built = exp.DataType.build(type_, dialect=DIALECT)
    values = [int(e.this.this if isinstance(e.this, exp.Literal) else e.name) for e in built.expressions]
    return (values[0], values[1] if len(values) > 1 else 0) if values else (10, 0)


def spelled(type_: str | None) -> str | None:
    """A type the way Spark prints it (``DataType.simpleString``), or None if it cannot be read.

    >>> spelled("DECIMAL(12, 2)"), spelled("Map<String, Int>"), spelled("integer"), spelled("not a type")
    ('decimal(12,2)', 'map<string,int>', 'int', None)
    """
    if not type_:
        return None
    try:
        text = exp.DataType.build(type_, dialect=DIALECT).sql(dialect=DIALECT).lower()
    except (SqlglotError, ValueError):
        return None
    return re.sub(r"([,:]) ", r"\1", text)


_TYPE_NAMES = ("string", "bigint", "int", "smallint", "tinyint", "double", "float", "decimal", "boolean", "date", "timestamp",
               "timestamp_ntz", "binary", "varchar", "char", "array", "map", "struct")


def type_problem(type_: object) -> str | None:
    """None when a declared column ``type:`` is a Spark SQL type, else what to write instead (a hint).

    >>> type_problem("decimal(12, 2)"), type_problem("array<string>"), type_problem("strnig")
    (None, None, "did you mean 'string'? (Spark SQL types: string, bigint, int, double, decimal(p, s), boolean, date, timestamp, ...)")
    """
    if isinstance(type_, str) and spelled(type_) is not None:
        return None
    close = difflib.get_close_matches(str(type_).lower(), _TYPE_NAMES, n=1)
    known = "Spark SQL types: string, bigint, int, double, decimal(p, s), boolean, date, timestamp, ..."
    return f"did you mean '{close[0]}'? ({known})" if close else f"write a Spark SQL type ({known})"
