"""Reading the user's files: UTF-8 text (a leading byte-order mark dropped) up to a size limit.

Every problem is a ProjectError naming the file (and, for bad bytes, the line), never a
``UnicodeDecodeError`` traceback.
"""

from __future__ import annotations

from pathlib import Path

from .errors import Problem, ProjectError

#: Model files larger than this are rejected: sqlglot parses about 150 KB of SELECT per second
#: (a 14 MB SELECT took minutes and gigabytes), and no hand-written model comes near it.
MAX_MODEL_BYTES = 1024 * 1024
_BOM = "\ufeff"


def read_text(path: Path, display: str, limit: int | None = None) -> str:
    """The file's text; bytes that are not UTF-8 or a file over ``limit`` bytes are a ProjectError.

    A UTF-8 byte-order mark (some Windows editors write one) is dropped, so that line and
    column numbers and carets in errors match what the user sees.

    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "m.sql"
    >>> _ = path.write_bytes(b"\\xef\\xbb\\xbfselect 1")
    >>> read_text(path, "m.sql")
    'select 1'
    >>> _ = path.write_bytes(b"select 1\\n-- caf\\xe9")
    >>> read_text(path, "m.sql")
    Traceback (most recent call last):
    ...
    compiler.errors.ProjectError: m.sql:2:7: [encoding] the file is not UTF-8 text: byte 0xe9 cannot be decoded — save the file as UTF-8
    """
    try:
        if limit is not None and path.stat().st_size > limit:
            raise ProjectError(_too_large(display, path.stat().st_size, limit))
        data = path.read_bytes()
    except OSError as exc:
        raise ProjectError(Problem(f"cannot read the file: {exc.strerror}", display, 1, code="io",
                                   hint="make it readable (chmod a+r), or move it out of the project's folders")) from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProjectError(_not_utf8(display, data, exc)) from exc
    if "\0" in text:
        raise ProjectError(_nul(display, text.removeprefix(_BOM)))
    return text.removeprefix(_BOM)


def _nul(display: str, text: str) -> Problem:
    """A NUL byte is not text (a binary file, or one an editor or a tool damaged): SQL and YAML readers
    would stop at it or pass it on.

    >>> print(_nul("m.sql", "select 1\\n-- a\\0b").format())
    m.sql:2:5: [encoding] the file holds a NUL byte (0x00), which is not text — remove it (the file may be binary or damaged)
    """
    at = text.index("\0")
    line = text.count("\n", 0, at) + 1
    return Problem("the file holds a NUL byte (0x00), which is not text", display, line, at - (text.rfind("\n", 0, at) + 1) + 1,
                   hint="remove it (the file may be binary or damaged)", code="encoding")


def _not_utf8(display: str, data: bytes, exc: UnicodeDecodeError) -> Problem:
    before = data[:exc.start]
    line = before.count(b"\n") + 1
    col = len(before[before.rfind(b"\n") + 1:].decode("utf-8", errors="replace").removeprefix(_BOM)) + 1
    return Problem(f"the file is not UTF-8 text: byte 0x{data[exc.start]:02x} cannot be decoded", display, line, col,
                   hint="save the file as UTF-8", code="encoding")


def _too_large(display: str, size: int, limit: int) -> Problem:
    return Problem(f"the file is {over_limit(size, limit)}", display, 1, code="too-large",
                   hint="split the model, or move generated data into a source table")


def over_limit(size: int, limit: int = MAX_MODEL_BYTES) -> str:
    """``1,048,600 bytes, over the limit of 1,048,576 (1 MB)``"""
    return f"{size:,} bytes, over the limit of {limit:,} ({limit / 2**20:g} MB)"
