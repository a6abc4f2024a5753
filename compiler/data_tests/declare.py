"""What a project declares as data tests, before anything is rendered.

Generic tests are listed under ``tests:`` (or ``data_tests:``) of a model or seed entry in a
models YAML, or of one of its columns, in any of dbt's forms::

    columns:
      - name: order_id
        tests:
          - unique
          - not_null: {config: {severity: warn}}
          - accepted_values: {values: [placed, shipped], quote: true, where: "amount > 0"}
          - relationships: {arguments: {to: ref('customers'), field: customer_id}}

Keys that configure the test (``severity``, ``where``, ...) may stand beside the arguments or
under ``config:``; ``arguments:`` (dbt 1.10) may hold the arguments. A singular test is a file
``<test path>/**/*.sql`` holding a SELECT of failing rows (files under ``generic/`` define
generic tests instead).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..errors import Problem
from ..yamlfile import LineDict

#: Keys of a test entry that configure the test rather than pass an argument.
CONFIG_KEYS = ("severity", "where", "store_failures", "store_failures_as", "warn_if", "error_if", "fail_calc", "limit",
               "enabled", "tags", "schema", "alias", "database", "meta", "scope")
SCOPES = ("all", "batch")  # batch: only what an mv's or fact's last batch wrote (``scope.py``)
SEVERITIES = ("error", "warn")
#: configs that take one of a few words, and what to say when one does not
_CHOICES = {"severity": (SEVERITIES, "write severity: error or severity: warn"),
            "scope": (SCOPES, "scope: batch tests only what an mv's or fact's last batch wrote")}
_THRESHOLD = re.compile(r"^\s*(=|==|!=|<>|<|<=|>|>=)\s*-?\d+\s*$")
_TEST_TYPE = re.compile(r"^(?:(?P<namespace>[A-Za-z_][A-Za-z0-9_]*)\.)?(?P<name>[A-Za-z_][A-Za-z0-9_]*)$")


@dataclass(frozen=True)
class TestConfig:
    """How a test is judged and kept (dbt's test configs)."""

    severity: str = "error"
    where: str | None = None  # tested rows only: the model is read as (SELECT * FROM it WHERE ...)
    store_failures: bool = False
    warn_if: str = "!= 0"  # conditions on fail_calc, as SQL
    error_if: str = "!= 0"
    fail_calc: str = "count(*)"
    limit: int | None = None
    enabled: bool = True
    tags: tuple[str, ...] = ()
    scope: str = "all"
    schema: str = "test_audit"  # where store_failures keeps a test's failing rows (in a dbt project: dbt's audit schema)
    alias: str | None = None


@dataclass(frozen=True)
class TestDeclaration:
    """One test as declared: a generic test on a model, seed or source (and maybe a column), or a
    singular test file."""

    name: str
    test_type: str  # the generic test ('unique', 'my_test', 'dbt_utils.at_least_one') or 'singular'
    path: str
    line: int
    attached_to: str | None = None  # model or seed name, or source id ('stage.offers')
    column: str | None = None
    kwargs: Mapping[str, Any] = field(default_factory=dict)  # arguments besides model and column_name
    config: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""

    @property
    def is_singular(self) -> bool:
        return self.test_type == "singular"


def declared_tests(entry: LineDict, path: str, attached_to: str, source: tuple[str, str] | None = None
                   ) -> tuple[list[TestDeclaration], list[Problem]]:
    """The generic tests of one YAML entry (a model, seed or source table) and of its columns.

    ``source`` is (source name, table name) when the entry is a source table: test names then
    follow dbt's ``source_<test>_<source>_<table>_...``.
    """
    found, problems = [], []
    target_name = f"{source[0]}_{source[1]}" if source else attached_to
    lists = [(entry, None)] + [(c, str(c["name"])) for c in entry.get("columns") or [] if isinstance(c, LineDict) and "name" in c]
    for holder, column in lists:
        for key in ("tests", "data_tests"):
            tests = holder.get(key)
            if tests is None:
                continue
            if not isinstance(tests, list):
                problems.append(Problem(f"'{key}' must be a list of tests", path, holder.line_of(key), code="bad-test",
                                        hint="e.g. tests: [unique, not_null]"))
                continue
            for item in tests:
                test, problem = _declaration(item, path, holder.line_of(key), attached_to, target_name, column, source)
                if problem:
                    problems.append(problem)
                else:
                    found.append(test)
    return found, problems


def _declaration(item: Any, path: str, line: int, attached_to: str, target_name: str, column: str | None,
                 source: tuple[str, str] | None) -> tuple[TestDeclaration | None, Problem | None]:
    line = getattr(item, "line", 0) or line
    if isinstance(item, str):
        test_type, body = item, LineDict()
    elif isinstance(item, LineDict) and "test_name" in item:  # the long form: {name: x, test_name: unique, ...}
        body = LineDict({k: v for k, v in item.items() if k != "test_name"})
        test_type = str(item["test_name"])
    elif isinstance(item, LineDict) and len(item) == 1:
        test_type, body = next(iter(item.items()))
        body = body if body is not None else LineDict()
    else:
        return None, Problem("a test is a name ('- unique') or one name with its arguments ('- accepted_values: {values: [a, b]}')",
                             path, line, code="bad-test", hint="write each test as its own list item")
    if not isinstance(body, Mapping):
        return None, Problem(f"test '{test_type}': its arguments must be a mapping", path, line, code="bad-test",
                             hint=f"e.g. '- {test_type}: {{config: {{severity: warn}}}}'")
    if not _TEST_TYPE.match(str(test_type)):
        return None, Problem(f"'{test_type}' is not a test name", path, line, code="bad-test",
                             hint="a test is a name like unique or a package's test like dbt_utils.expression_is_true")
    kwargs, config = _split_arguments(body)
    name = kwargs.pop("name", None)
    description = str(kwargs.pop("description", "") or "")
    args = {**kwargs, **({"column_name": column} if column else {})}
    prefix = "source_" if source else ""
    if not name:
        short, name = generic_test_names(prefix + str(test_type).replace(".", "_"), target_name, args)
        if short != name:
            config.setdefault("alias", short)  # the table store_failures writes
    return TestDeclaration(str(name), str(test_type), path, line, attached_to, column, kwargs, config, description), None


def _split_arguments(body: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Arguments and configs of a test entry: configs may stand beside the arguments (legacy) or
    under ``config:``; arguments may sit under ``arguments:``."""
    kwargs = {k: v for k, v in body.items() if k not in CONFIG_KEYS and k not in ("config", "arguments")}
    kwargs.update(body.get("arguments") or {})
    config = {k: v for k, v in body.items() if k in CONFIG_KEYS}
    config.update(body.get("config") or {})
    return kwargs, config


def generic_test_names(test_type: str, target_name: str, args: Mapping[str, Any]) -> tuple[str, str]:
    """dbt's names for a generic test: type, tested node, then the arguments (sorted by name); the
    short one (its table's name) shortens names of 64 characters or more with an md5 of the full one.

    >>> generic_test_names("not_null", "orders", {"column_name": "order_id"})[1]
    'not_null_orders_order_id'
    >>> generic_test_names("accepted_values", "orders", {"column_name": "status", "values": ["placed", "shipped"]})[1]
    'accepted_values_orders_status__placed__shipped'
    >>> generic_test_names("relationships", "orders", {"column_name": "customer_id", "to": "ref('customers')", "field": "id"})[1]
    'relationships_orders_customer_id__id__ref_customers_'
    >>> generic_test_names("accepted_values", "orders", {"column_name": "status", "values": ["placed", "shipped", "completed", "returned"]})
    ('accepted_values_orders_8b08a2e3c7880954e0d6e0b54536f6b3', 'accepted_values_orders_status__placed__shipped__completed__returned')
    """
    parts: list[str] = []
    for key in sorted(args):
        value = args[key]
        values = list(value.values()) if isinstance(value, Mapping) else list(value) if isinstance(value, (list, tuple)) else [value]
        parts += [re.sub(r"[^0-9a-zA-Z_]+", "_", str(v)) for v in values]
    identifier = f"{test_type}_{target_name}"
    full = f"{identifier}_{'__'.join(parts)}"
    if len(full) < 64:
        return full, full
    return f"{identifier[:30]}_{hashlib.md5(full.encode()).hexdigest()}", full


def test_config(values: Mapping[str, Any], path: str, line: int) -> tuple[TestConfig, list[Problem]]:
    """A test's config from its merged settings; bad values are problems at ``line``.

    >>> test_config({"severity": "WARN", "limit": 10}, "m.yml", 3)[0].severity
    'warn'
    >>> test_config({"severity": "fatal"}, "m.yml", 3)[1][0].format()
    "m.yml:3: [bad-test] severity 'fatal' is not error or warn — write severity: error or severity: warn"
    """
    problems: list[Problem] = []
    settings: dict[str, Any] = {}
    for key, value in values.items():
        if value is None or key in ("meta", "database", "store_failures_as"):
            continue
        if key in _CHOICES:
            choices, hint = _CHOICES[key]
            value = str(value).lower()
            if value not in choices:
                problems.append(Problem(f"{key} '{values[key]}' is not {' or '.join(choices)}", path, line,
                                        code="bad-test", hint=hint))
                continue
        elif key in ("warn_if", "error_if"):
            value = str(value)
            if not _THRESHOLD.match(value):
                problems.append(Problem(f"{key} '{value}' is not a condition on the number of failures", path, line,
                                        code="bad-test", hint=f"e.g. {key}: '>10' or {key}: '!= 0'"))
                continue
        elif key in ("store_failures", "enabled"):
            value = _boolean(value)
        elif key == "limit":
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                problems.append(Problem(f"limit must be a number of rows, got {value!r}", path, line, code="bad-test",
                                        hint="e.g. limit: 100"))
                continue
        elif key == "tags":
            value = tuple(str(t) for t in (value if isinstance(value, (list, tuple)) else [value]))
        elif key not in TestConfig.__dataclass_fields__:
            continue
        else:
            value = str(value)
        settings[key] = value
    return TestConfig(**settings), problems


def _boolean(value: Any) -> bool:
    return value.strip().lower() in ("true", "yes", "1") if isinstance(value, str) else bool(value)
