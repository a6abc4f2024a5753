"""The compile cache: per-model results of earlier compiles, reused when their inputs are unchanged.

A warm compile (the project compiled before, a few files edited since) then skips, for every
model whose inputs did not change, what costs most: Jinja template compilation, sqlglot parsing
and pretty printing, ``*`` expansion and column lineage (like dbt's partial parse).

Entries are content-addressed: each key is a hash of everything its result depends on (the
rendered SQL; for output columns and lineage also the columns, types and graph ids of the tables
the query reads), so editing an upstream model changes the keys of what reads it and a stale
entry is never found. The whole cache is tagged with the versions of Python, Jinja, sqlglot
(compiled or not) and a hash of mvflow's own source: any change starts it empty. It is one file,
``.mvflow/cache/compile.pickle`` (never under ``target/``, which must stay byte-identical), read
once and replaced atomically; entries unused for ``KEEP_RUNS`` saves are dropped. A cache that
cannot be read or written is ignored: compile output never depends on it.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterable, Mapping

import jinja2

CACHE_FILE = Path(".mvflow") / "cache" / "compile.pickle"
KEEP_RUNS = 5
_FORMAT = 2  # 2: Rendered.logged


def cache_key(*parts: Any) -> str:
    """A hash of JSON-able parts (the same parts give the same key in every process).

    >>> cache_key("parse", "SELECT 1") == cache_key("parse", "SELECT 1") != cache_key("parse", "SELECT 2")
    True
    """
    # keys keep their order: a schema's column order is part of what ``*`` expands to
    text = json.dumps(parts, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class CompileCache:
    """Cached results by key, loaded from and saved to one file (``path`` None: in memory only)."""

    def __init__(self, path: Path | None = None):
        self.path = path
        self.tag = _code_tag()
        self._run = 0
        self._entries: dict[str, tuple[int, Any]] = {}  # key → (run that last used it, value)
        self._changed = False
        self._used: list[str] = []  # keys found, and entries put, since take_changes()
        self._added: dict[str, Any] = {}
        self.hits = self.misses = 0
        if path is not None:
            self._load(path)
        self._run += 1

    @classmethod
    def for_project(cls, root: Path) -> CompileCache:
        return cls(root / CACHE_FILE)

    def get(self, key: str) -> Any | None:
        found = self._entries.get(key)
        if found is None:
            self.misses += 1
            return None
        self.hits += 1
        self._used.append(key)
        if found[0] != self._run:
            self._entries[key] = (self._run, found[1])
            self._changed = True
        return found[1]

    def put(self, key: str, value: Any) -> None:
        self._entries[key] = (self._run, value)
        self._added[key] = value
        self._changed = True

    def take_changes(self) -> tuple[list[str], dict[str, Any]]:
        """Keys found and entries put since the last call: what a forked child did (background.py)."""
        changes = (self._used, self._added)
        self._used, self._added = [], {}
        return changes

    def apply_changes(self, changes: tuple[list[str], dict[str, Any]]) -> None:
        """Record a child's ``take_changes()`` here, as if this process had done it."""
        used, added = changes
        for key in used:
            self.get(key)
        for key, value in added.items():
            self.put(key, value)

    def __len__(self) -> int:
        return len(self._entries)

    def save(self) -> None:
        """Write the cache if it changed, without entries unused for ``KEEP_RUNS`` runs."""
        if self.path is None or not self._changed:
            return
        entries = {k: v for k, v in self._entries.items() if self._run - v[0] < KEEP_RUNS}
        data = pickle.dumps({"format": _FORMAT, "tag": self.tag, "run": self._run, "entries": entries},
                            protocol=pickle.HIGHEST_PROTOCOL)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("wb", dir=self.path.parent, prefix=self.path.name, suffix=".tmp",
                                             delete=False) as handle:
                handle.write(data)
            os.replace(handle.name, self.path)
        except OSError:  # a read-only project still compiles, only without a cache
            return
        self._changed = False

    def _load(self, path: Path) -> None:
        try:
            data = pickle.loads(path.read_bytes())
        except FileNotFoundError:
            return
        except Exception:  # noqa: BLE001 - a damaged cache file is ignored (and replaced on save)
            return
        if not isinstance(data, dict) or data.get("format") != _FORMAT or data.get("tag") != self.tag:
            return
        self._run, self._entries = int(data["run"]), dict(data["entries"])

    def jinja(self) -> jinja2.BytecodeCache:
        """A Jinja bytecode cache kept in this cache (templates compile once per edit)."""
        return _JinjaBytecode(self)


class _JinjaBytecode(jinja2.BytecodeCache):
    def __init__(self, cache: CompileCache):
        self.cache = cache

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        code = self.cache.get(cache_key("jinja", bucket.key, bucket.checksum))
        if code is not None:
            bucket.bytecode_from_string(code)

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        self.cache.put(cache_key("jinja", bucket.key, bucket.checksum), bucket.bytecode_to_string())


def _code_tag() -> str:
    """What every cached result depends on besides its key: the code that computed it."""
    import sqlglot
    import sqlglot.parser

    here = Path(__file__).resolve().parent
    sources = hashlib.sha256()
    for path in sorted(here.rglob("*.py")):
        sources.update(path.relative_to(here).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return cache_key(sys.version, jinja2.__version__, sqlglot.__version__, Path(sqlglot.parser.__file__).suffix,
                     sources.hexdigest())


def schema_index(schema: Mapping[str, Mapping[str, Any]]) -> dict[str, list[tuple[str, str]]]:
    """``db.table`` and bare ``table`` names (lower case) → the schema tables they may mean,
    as ``parse.read_schema`` matches them.

    >>> schema_index({"d": {"T": {}}})
    {'d.t': [('d', 'T')], 't': [('d', 'T')]}
    """
    index: dict[str, list[tuple[str, str]]] = {}
    for db, tables in schema.items():
        for table in tables:
            for name in (f"{db}.{table}".lower(), table.lower()):
                index.setdefault(name, []).append((db, table))
    return index


def read_tables(names: Iterable[str], schema: Mapping[str, Mapping[str, Any]],
                index: Mapping[str, list[tuple[str, str]]]) -> list[Any]:
    """What ``schema`` says about each table a query reads (its part of a cache key): the columns
    of every schema table the name may mean, in schema order, None for tables not known yet.

    >>> schema = {"d": {"t": {"x": "int"}}}
    >>> read_tables(["d.t", "e.u"], schema, schema_index(schema))
    [['d.t', [['d', 't', {'x': 'int'}]]], ['e.u', []]]
    """
    return [[name, [[db, table, schema.get(db, {}).get(table)] for db, table in index.get(name, ())]]
            for name in names]
