"""What the analysis of one MV SELECT found wrong (errors stop it at the end of their phase) or
worth saying (warnings), each at the line of the model file it is about."""

from __future__ import annotations

from sqlglot import exp

from ....errors import CompileError, Problem


class Report:
    """The problems and warnings of MV ``name`` in ``path``, whose rendered SQL starts ``offset``
    lines into the file."""

    def __init__(self, name: str, path: str, offset: int):
        self.name, self.path, self.offset = name, path, offset
        self.problems: list[Problem] = []
        self.warnings: list[Problem] = []

    def problem(self, node: exp.Expression | None, code: str, message: str, hint: str | None = None) -> None:
        """An error at ``node``'s line: the plan is refused at the end of the phase."""
        self.problems.append(Problem(f"mv '{self.name}': {message}", self.path, self.line(node), hint=hint, code=code))

    def warning(self, line: int | None, code: str, message: str, hint: str) -> None:
        """Something the plan allows but the user should know (``mvflow compile`` prints it)."""
        self.warnings.append(Problem(f"mv '{self.name}': {message}", self.path, line, hint=hint, code=code))

    def line(self, node: exp.Expression | None) -> int | None:
        """The first line sqlglot recorded inside ``node``, else inside its parent (DISTINCT records none)."""
        while node is not None:
            for item in node.walk():
                line = item.meta.get("line") if isinstance(item, exp.Expression) else None
                if line:
                    return int(line) + self.offset
            node = node.parent
        return None

    def stop_if_any(self) -> None:
        """End of a phase: raise every problem found so far, in the order of the file."""
        if self.problems:
            raise CompileError(sorted(self.problems, key=lambda p: (p.line or 0, p.code)))
