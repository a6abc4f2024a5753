"""How deeply a model's SQL may nest, and the room Python gets to handle it.

sqlglot parses, prints and walks SQL by recursion, and so does some of mvflow (the type of an
expression, an ephemeral model's CTEs): each level of nesting (a parenthesis, a subquery, a CASE in a
CASE) takes a few Python frames, and Python stops at 1,000 frames by default, so 500 nested
parentheses were a RecursionError traceback. Two measures:

- ``recursion_room``: the ``mvflow`` command runs with a higher recursion limit, sized to the
  process's stack (sqlglot is compiled with mypyc: its frames live on the C stack, about 1 KB each, so
  the limit must stay well inside the stack or Python crashes instead of raising). With an 8 MB stack
  it is 4,096: 1,000 nested parentheses compile.
- ``nesting_problem``: parentheses and brackets nested deeper than ``MAX_NESTING`` are refused before
  sqlglot sees them (``[too-deep]`` at their line): the parser's own compiled recursion does not count
  towards Python's limit, and 10,000 nested subqueries crashed the process at any limit; printing
  2,000 levels took 14 s.

Whatever still runs out of room is a ``[too-deep]`` error (``too_deep``), never a traceback.
"""

from __future__ import annotations

import resource
import sys
from contextlib import contextmanager
from typing import Iterator

from sqlglot import Dialect
from sqlglot.errors import SqlglotError
from sqlglot.tokens import TokenType

from .errors import Problem

MAX_NESTING = 1_000
_BYTES_PER_FRAME = 2_048  # measured: about 900 bytes of C stack per frame of sqlglot's parser; twice that
_MOST_FRAMES = 6_000
_OPEN, _CLOSE = {TokenType.L_PAREN, TokenType.L_BRACKET}, {TokenType.R_PAREN, TokenType.R_BRACKET}
_HINT = "flatten it: move inner queries into CTEs (WITH) or models, and split long expressions into steps"


def recursion_limit() -> int:
    """The recursion limit the stack has room for (never below Python's default).

    >>> 1_000 <= recursion_limit() <= _MOST_FRAMES
    True
    """
    soft, _ = resource.getrlimit(resource.RLIMIT_STACK)
    stack = 8 * 2**20 if soft == resource.RLIM_INFINITY else soft
    return max(1_000, min(_MOST_FRAMES, stack // _BYTES_PER_FRAME))


@contextmanager
def recursion_room() -> Iterator[None]:
    """Run the block with ``recursion_limit()`` (restored afterwards)."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(max(before, recursion_limit()))
    try:
        yield
    finally:
        sys.setrecursionlimit(before)


def nesting_problem(sql: str, path: str, dialect: str = "spark") -> Problem | None:
    """A ``[too-deep]`` Problem at the line where ``sql``'s parentheses (or brackets) nest deeper than
    ``MAX_NESTING``, else None. Cheap for any SQL with fewer parentheses than that.

    >>> nesting_problem("select ((1)) as x", "m.sql") is None
    True
    >>> print(nesting_problem("select\\n" + "(" * 1001 + "1" + ")" * 1001, "m.sql").format())
    m.sql:2: [too-deep] parentheses nest 1,001 deep here, deeper than mvflow reads (1,000) — flatten it: move inner queries into CTEs (WITH) or models, and split long expressions into steps
    """
    if sql.count("(") + sql.count("[") <= MAX_NESTING:
        return None
    try:
        tokens = Dialect.get_or_raise(dialect).tokenize(sql)
    except SqlglotError:
        return None  # the parser reports it
    depth, deepest, line = 0, 0, None
    for token in tokens:
        if token.token_type in _OPEN:
            depth += 1
            deepest = max(deepest, depth)
            if depth > MAX_NESTING and line is None:
                line = token.line
        elif token.token_type in _CLOSE:
            depth -= 1
    if line is None:
        return None
    return Problem(f"parentheses nest {deepest:,} deep here, deeper than mvflow reads ({MAX_NESTING:,})", path, line,
                   hint=_HINT, code="too-deep")


def too_deep(path: str | None, line: int | None = 1, what: str = "the SQL") -> Problem:
    """What a RecursionError while handling ``path`` means to the user.

    >>> print(too_deep("m.sql").format())
    m.sql:1: [too-deep] the SQL nests too deeply for mvflow to handle — flatten it: move inner queries into CTEs (WITH) or models, and split long expressions into steps
    """
    return Problem(f"{what} nests too deeply for mvflow to handle", path, line if path else None, hint=_HINT,
                   code="too-deep")
