"""YAML loading that remembers where each mapping and key came from, for error messages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .errors import Problem, ProjectError, snippet
from .files import read_text


class LineDict(dict):
    """A dict that knows its own line and the line of each of its keys (1-based)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.line = 0
        self.key_lines: dict[str, int] = {}

    def line_of(self, key: str) -> int:
        return self.key_lines.get(key, self.line)


class _Loader(yaml.SafeLoader):
    pass


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> LineDict:
    loader.flatten_mapping(node)
    result = LineDict()
    result.line = node.start_mark.line + 1
    result.key_lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in result:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        result[key] = loader.construct_object(value_node, deep=True)
        result.key_lines[key] = key_node.start_mark.line + 1
    return result


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_yaml(path: Path, display: str) -> Any:
    """Parse a YAML file; syntax errors and bytes that are not UTF-8 become a ProjectError naming file and line."""
    return load_yaml_text(read_text(path, display), display)


def load_yaml_text(text: str, display: str) -> Any:
    """Parse YAML text; a syntax error is a ProjectError at the line where the problem starts.

    >>> load_yaml_text("a: [1, 2]", "x.yml")
    {'a': [1, 2]}
    >>> try:
    ...     load_yaml_text("a: [1, 2\\nb: 3\\n", "x.yml")
    ... except ProjectError as exc:
    ...     print(exc.problems[0].format())
    x.yml:2:2: [yaml] invalid YAML: expected ',' or ']', but got ':' (in the flow sequence that starts at line 1) — fix the YAML syntax (indentation, ':' after keys, closing brackets and quotes)
        1 | a: [1, 2
        2 | b: 3
          |  ^
    """
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        raise ProjectError(_yaml_problem(exc, text, display)) from exc


def _yaml_problem(exc: yaml.MarkedYAMLError, text: str, display: str) -> Problem:
    mark = exc.problem_mark or exc.context_mark
    lines = len(text.splitlines())
    at_end = mark is None or mark.line >= lines
    if exc.context_mark and at_end:
        # "unexpected end of stream": the useful place is where the unclosed thing started
        mark = exc.context_mark
    message = f"invalid YAML: {exc.problem or exc.context}"
    if exc.problem and exc.context and exc.context_mark:
        what = exc.context.replace("while scanning ", "").replace("while parsing ", "").removeprefix("a ")
        if exc.context_mark is mark:
            message += f" (in the {what} that starts here)"
        elif exc.context_mark.line != mark.line:
            message += f" (in the {what} that starts at line {exc.context_mark.line + 1})"
    line = mark.line + 1 if mark else None
    col = mark.column + 1 if mark else None
    return Problem(
        message, display, line=line, col=col, hint=_yaml_hint(exc), code="yaml",
        snippet=snippet(text, line, col) if line and line <= lines else None,
    )


def _yaml_hint(exc: yaml.MarkedYAMLError) -> str:
    problem = str(exc.problem or "")
    if "'\\t'" in problem:
        return "indent YAML with spaces, not tabs"
    if "duplicate key" in problem:
        return "remove or rename one of the two keys"
    if "mapping values are not allowed" in problem:
        return "check this line's indentation, and quote values that contain ': '"
    if "quoted scalar" in str(exc.context or ""):
        return "close the quote"
    return "fix the YAML syntax (indentation, ':' after keys, closing brackets and quotes)"


def check_keys(
    mapping: LineDict, allowed: set[str], display: str, what: str, required: set[str] = frozenset()
) -> list[Problem]:
    """Problems for unknown keys (with the valid ones listed) and missing required keys."""
    problems = []
    for key in mapping:
        if key not in allowed:
            problems.append(
                Problem(
                    f"unknown key '{key}' in {what}",
                    display,
                    line=mapping.line_of(key),
                    hint="valid keys: " + ", ".join(sorted(allowed)),
                    code="unknown-key",
                )
            )
    for key in sorted(required - set(mapping)):
        problems.append(
            Problem(f"{what} has no '{key}'", display, line=mapping.line, hint=f"add '{key}:'", code="missing-key")
        )
    return problems
