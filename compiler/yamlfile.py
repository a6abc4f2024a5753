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


#: Values a file may add through aliases (``*name`` repeats everything its anchor ``&name`` holds): nine
#: aliases of nine aliases of ... make a small file hold hundreds of millions of values (a YAML
#: "alias bomb": 90 s and 1.2 GB to read). Merge keys of shared defaults add a few hundred.
MAX_ALIAS_VALUES = 100_000


class _AliasProblem(yaml.YAMLError):
    """Aliases that expand the file past MAX_ALIAS_VALUES, or an alias inside its own anchor."""

    def __init__(self, message: str, hint: str, mark: yaml.Mark):
        super().__init__(message)
        self.message, self.hint, self.mark = message, hint, mark


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, counting what aliases expand to while it composes the file."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._values: dict[int, int] = {}  # id(node) → how many values it holds, aliases expanded
        self._aliased = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            node = self.anchors.get(event.anchor)
            if node is not None and node.end_mark is None:  # still being composed: the alias is inside it
                raise _AliasProblem(f"alias *{event.anchor} is inside its own anchor &{event.anchor}, which makes "
                                    "the value infinite", "remove the alias, or move it out of the anchored value",
                                    event.start_mark)
            if node is not None:
                self._aliased += self._count(node)
                if self._aliased > MAX_ALIAS_VALUES:
                    raise _AliasProblem(f"the aliases (*{event.anchor} and those before it) expand this file to more "
                                        f"than {MAX_ALIAS_VALUES:,} values", "write the values out, or use fewer aliases: "
                                        "each one repeats everything its anchor holds", event.start_mark)
        return super().compose_node(parent, index)

    def _count(self, root: yaml.Node) -> int:
        """The values ``root`` holds, aliases expanded (each node once: no recursion, memoized)."""
        stack = [root]
        while stack:
            node = stack[-1]
            children = [c for pair in node.value for c in (pair if isinstance(pair, tuple) else (pair,))] \
                if isinstance(node, (yaml.SequenceNode, yaml.MappingNode)) else []
            waiting = [c for c in children if id(c) not in self._values]
            if waiting:
                stack.extend(waiting)
                continue
            stack.pop()
            self._values[id(node)] = 1 + sum(self._values[id(c)] for c in children)
        return self._values[id(root)]


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

    Aliases may repeat a value, not blow it up (``MAX_ALIAS_VALUES``):

    >>> load_yaml_text("d: &d {a: 1}\\nx: {<<: *d, b: 2}", "x.yml")["x"]
    {'a': 1, 'b': 2}
    >>> bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\\n" + "".join(
    ...     f"{n}: &{n} [{', '.join([f'*{p}'] * 10)}]\\n" for p, n in zip("abcd", "bcde"))
    >>> try:
    ...     load_yaml_text(bomb, "x.yml")
    ... except ProjectError as exc:
    ...     print(exc.problems[0].format().splitlines()[0])
    x.yml:5:36: [yaml-aliases] the aliases (*d and those before it) expand this file to more than 100,000 values — write the values out, or use fewer aliases: each one repeats everything its anchor holds
    """
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        raise ProjectError(_yaml_problem(exc, text, display)) from exc
    except _AliasProblem as exc:
        line, col = exc.mark.line + 1, exc.mark.column + 1
        raise ProjectError(Problem(exc.message, display, line, col, hint=exc.hint, code="yaml-aliases",
                                   snippet=snippet(text, line, col))) from exc


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
