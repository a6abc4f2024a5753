"""``{% docs name %}…{% enddocs %}`` blocks in ``*.md`` files of the model and docs folders, for
``{{ doc('name') }}`` in descriptions."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Callable

import jinja2

from ..files import read_text

if TYPE_CHECKING:
    from ..project import Project

_BLOCK = re.compile(r"\{%-?\s*docs\s+([A-Za-z_][A-Za-z0-9_]*)\s*-?%\}(.*?)\{%-?\s*enddocs\s*-?%\}", re.S)


def doc_blocks(project: "Project") -> dict[str, str]:
    """Every docs block of the project by name.

    >>> _BLOCK.findall("{% docs orders %}\\nOne row per order.\\n{% enddocs %}")
    [('orders', '\\nOne row per order.\\n')]
    """
    blocks: dict[str, str] = {}
    for path in project.files("docs", (".md",)):
        for name, text in _BLOCK.findall(read_text(path, project.relative(path))):
            blocks[name] = text.strip()
    return blocks


def load_docs(project: "Project") -> Callable[[str], str]:
    """``doc(name)``: the block's text (read once, on first use)."""
    blocks: dict[str, str] | None = None

    def doc(name: str) -> str:
        nonlocal blocks
        if blocks is None:
            blocks = doc_blocks(project)
        if name not in blocks:
            raise jinja2.UndefinedError(f"doc('{name}'): no docs block named '{name}' in the *.md files")
        return blocks[name]

    return doc
