"""Paths under ``target/``: every file compile, run and docs write there is named after something the
user declared (a model, a seed, a data test), so a name is checked before it becomes a path.

Two checks, one each side of the work:

- ``name_problem`` — the rule for every name that becomes a file name (``compiled/<model>.sql``,
  ``run/<model>/``, ``compiled/tests/<test>.sql``): letters, digits and ``_``, as for a table name
  (the same name is a relation in SQL), and short enough for a file system. Callers report its
  Problem at the line the name was declared, before anything is written.
- ``target_file`` — where a file under ``target/`` really lands: a path that leaves ``target/``
  (a symbolic link committed inside it) is refused as the writers' last line of defence.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import Problem, ProjectError
from .sources import IDENTIFIER

#: File systems take 255 bytes per file name; a name also gets a suffix (``.sql``) and, for tables,
#: an mvflow suffix (``__mvflow_b``).
MAX_NAME = 200


def name_problem(name: str, what: str, path: str | None, line: int | None, hint: str) -> Problem | None:
    """None when ``name`` may name files under ``target/`` (and a table), else a ``[bad-name]`` Problem.

    >>> name_problem("orders", "model name", "models/orders.sql", 1, "rename the file") is None
    True
    >>> print(name_problem("../../tmp/x", "test name", "models/docs.yml", 6, "name it with letters, digits and _").format())
    models/docs.yml:6: [bad-name] test name '../../tmp/x' is not a valid name: it would be a path under target/ and a table name — name it with letters, digits and _
    >>> print(name_problem("t" * 201, "test name", "models/docs.yml", 6, "shorten it").message)
    test name 'tttttttttttttttttttt…' is 201 characters long, over the limit of 200 (it names a file under target/)
    """
    if not IDENTIFIER.fullmatch(name):
        return Problem(f"{what} '{name}' is not a valid name: it would be a path under target/ and a table name",
                       path, line, hint=hint, code="bad-name")
    if len(name) > MAX_NAME:
        return Problem(f"{what} '{name[:20]}…' is {len(name)} characters long, over the limit of {MAX_NAME} "
                       "(it names a file under target/)", path, line, hint=hint, code="bad-name")
    return None


def target_file(target_dir: Path, relative: str) -> Path:
    """``target_dir / relative``, once it is sure to land inside ``target_dir``: a ``..`` or a symbolic
    link under ``target_dir`` leading elsewhere is a ProjectError, and nothing is written.

    >>> import tempfile
    >>> target = Path(tempfile.mkdtemp())
    >>> target_file(target, "compiled/a.sql") == target / "compiled" / "a.sql"
    True
    >>> (target / "run").symlink_to("/etc")
    >>> target_file(target, "run/a.sql")
    Traceback (most recent call last):
    ...
    compiler.errors.ProjectError: [unsafe-path] run/a.sql in the target folder leads outside it, to /etc/a.sql — remove the symbolic link (or the '..') and compile again
    """
    path = target_dir / relative
    root = os.path.realpath(target_dir)
    landing = os.path.realpath(path)
    if landing != root and not landing.startswith(root.rstrip(os.sep) + os.sep):
        raise ProjectError(Problem(f"{relative} in the target folder leads outside it, to {landing}", code="unsafe-path",
                               hint="remove the symbolic link (or the '..') and compile again"))
    return path
