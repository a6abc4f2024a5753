"""User-facing errors: each one knows the file and line it is about and what to do.

The CLI prints ``path:line:col: [code] message — hint`` and exits non-zero without a
traceback; ``--debug`` shows one.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Iterable


LOGGED = "dbt-log"  # the code of a Problem that is a dbt ``log(message, info=True)`` line, not a warning


@dataclass(frozen=True)
class Problem:
    """One problem found in the user's project."""

    message: str
    path: str | None = None
    line: int | None = None
    col: int | None = None
    hint: str | None = None
    code: str = "error"
    snippet: str | None = None

    def format(self) -> str:
        where = ""
        if self.path:
            where = self.path
            if self.line:
                where += f":{self.line}"
                if self.col:
                    where += f":{self.col}"
            where += ": "
        text = f"{where}[{self.code}] {self.message}"
        if self.hint:
            text += f" — {self.hint}"
        if self.snippet:
            text += "\n" + self.snippet
        return text


class MvflowError(Exception):
    """Base of every error caused by the user's input (printed without a traceback)."""

    exit_code = 2  # a user error; a run that could not do its work (e.g. the target is busy) exits 1

    def __init__(self, problems: list[Problem] | Problem | str):
        if isinstance(problems, str):
            problems = [Problem(problems)]
        elif isinstance(problems, Problem):
            problems = [problems]
        self.problems: list[Problem] = list(problems)
        super().__init__("\n".join(p.format() for p in self.problems))


class ProjectError(MvflowError):
    """project.yml, lineage/*.yml or a model's YAML is invalid."""


class CompileError(MvflowError):
    """A model cannot be rendered, parsed or resolved."""


class SelectionError(MvflowError):
    """A --select / --exclude expression is invalid."""


class RunError(MvflowError):
    """A run cannot start (e.g. the target is unusable)."""


@dataclass
class ProblemList:
    """Collects problems so that one compile reports all of them, not just the first.

    >>> problems = ProblemList()
    >>> problems.add(Problem("a", "x.sql", 1)); problems.add(Problem("a", "x.sql", 1))
    >>> problems.extend(ProjectError(Problem("b", "project.yml", 2)))
    >>> try:
    ...     problems.raise_if_any()
    ... except MvflowError as exc:
    ...     print(type(exc).__name__, len(exc.problems))
    ProjectError 2
    """

    problems: list[Problem] = field(default_factory=list)
    error_type: type[MvflowError] | None = None

    def add(self, problem: Problem) -> None:
        if problem not in self.problems:  # the same folder default can fail for many models
            self.problems.append(problem)

    def extend(self, error: MvflowError) -> None:
        self.error_type = self.error_type or type(error)
        for problem in error.problems:
            self.add(problem)

    def raise_if_any(self, error_type: type[MvflowError] | None = None) -> None:
        """Raise ``error_type`` (default: the type of the first error collected, else CompileError)."""
        if self.problems:
            raise (error_type or self.error_type or CompileError)(self.problems)


def did_you_mean(name: str, candidates: Iterable[str]) -> str | None:
    """A hint naming the closest candidate, if one is close.

    >>> did_you_mean("offers_wid", ["offers_wide", "shops"]), did_you_mean("x", ["offers_wide"])
    ("did you mean 'offers_wide'?", None)
    """
    close = difflib.get_close_matches(name, list(candidates), n=1)
    return f"did you mean '{close[0]}'?" if close else None


def snippet(text: str, line: int, col: int | None = None, context: int = 1) -> str:
    """Lines around ``line`` (1-based) of ``text`` with a caret under ``col``.

    >>> print(snippet("select a\\nfrom t\\nwhere", 2, 6))
        1 | select a
        2 | from t
          |      ^
        3 | where
    """
    lines = text.splitlines()
    out = []
    for number in range(max(1, line - context), min(len(lines), line + context) + 1):
        out.append(f"{number:>5} | {lines[number - 1]}")
        if number == line and col:
            out.append(f"{'':>5} | {' ' * (col - 1)}^")
    return "\n".join(out)


def find_line(text: str, name: str, before: str = "") -> int | None:
    """The line (1-based) of ``text`` where the dotted ``name`` (``s.rating``, ``stage.shops`` in backticks or not)
    appears as whole words, case-insensitively; else where its last part does. ``before`` is the
    text preceding the name where it was found (e.g. in the statement Spark ran): its own matches
    count, so the same occurrence is chosen here. None if the name does not appear.

    >>> find_line("select\\n  s.rating,\\n  s.name\\nfrom x as s", "S . name")
    3
    >>> find_line("from {{ source('stage', 'shops') }} as s", "`stage`.`shops`")
    1
    >>> find_line("select a.id,\\n b.id\\nfrom a join b", "id", before="SELECT a.id, b.")
    2
    """
    parts = [part.strip().strip("`\"") for part in name.split(".") if part.strip()]
    if not parts:
        return None
    for pattern in (r"\s*\.\s*".join(map(re.escape, parts)), re.escape(parts[-1])):
        word = re.compile(rf"(?<![\w$]){pattern}(?![\w$])", re.IGNORECASE)
        found = list(word.finditer(text))
        if found:
            chosen = found[min(len(word.findall(before)), len(found) - 1)]
            return text.count("\n", 0, chosen.start()) + 1
    return None
