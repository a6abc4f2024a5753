"""YAML loading that remembers where each mapping and key came from, for error messages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .errors import Problem, ProjectError


class LineDict(dict):
    """A dict that knows its own line and the line of each of its keys (1-based)."""

    line: int = 0
    key_lines: dict[str, int]

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
    """Parse a YAML file; syntax errors become a ProjectError naming file and line."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProjectError(Problem(f"cannot read file: {exc.strerror}", display, code="io")) from exc
    return load_yaml_text(text, display)


def load_yaml_text(text: str, display: str) -> Any:
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise ProjectError(
            Problem(
                f"invalid YAML: {exc.problem or exc.context}",
                display,
                line=mark.line + 1 if mark else None,
                col=mark.column + 1 if mark else None,
                hint="fix the YAML syntax (indentation, ':' after keys, quotes)",
                code="yaml",
            )
        ) from exc


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
