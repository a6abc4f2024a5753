"""The compile cache (compiler/cache.py): a warm compile writes exactly what a cold one writes,
edits anywhere upstream invalidate what depends on them, and a damaged, foreign or unwritable
cache is ignored. The oracle is always a compile without a cache of the same files."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from compiler.artifacts import write_artifacts
from compiler.cache import CACHE_FILE, KEEP_RUNS, CompileCache
from compiler.cli import main
from compiler.compile import compile_project
from compiler.project import load_project

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.generate import generate, write_mvflow  # noqa: E402

SOURCES = """
sources:
  - name: offers
    database: stage
    primary_key: [offer_id]
    position: [updated_at]
    columns:
      - {name: offer_id, type: bigint}
      - {name: shop_id, type: bigint}
      - {name: price, type: "decimal(12,2)"}
      - {name: updated_at, type: timestamp}
  - name: shops
    database: stage
    primary_key: [shop_id]
    dictionary: true
    columns:
      - {name: shop_id, type: bigint}
      - {name: name, type: string}
"""

FILES = {
    "lineage/s.yml": SOURCES,
    "macros/m.sql": "{% macro cents(x) %}CAST({{ x }} * 100 AS BIGINT){% endmacro %}\n",
    "models/base.sql": "SELECT o.offer_id, o.shop_id, o.price FROM {{ source('stage', 'offers') }} AS o\n",
    "models/wide.sql": "SELECT b.*, {{ cents('b.price') }} AS price_cents FROM {{ ref('base') }} AS b\n",
    "models/top.sql": ("SELECT w.offer_id, w.price, s.name FROM {{ ref('wide') }} AS w\n"
                       "JOIN {{ source('stage', 'shops') }} AS s ON s.shop_id = w.shop_id\n"),
}


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def build(root: Path, cache: CompileCache | None) -> dict[str, bytes]:
    """target/ of one compile (then removed), with or without a cache; warnings as one more file."""
    shutil.rmtree(root / "target", ignore_errors=True)
    manifest = compile_project(load_project(root), cache=cache)
    write_artifacts(manifest)
    if cache is not None:
        cache.save()
    files = tree(root / "target")
    files["warnings"] = "\n".join(w.format() for w in manifest.warnings).encode()
    shutil.rmtree(root / "target")
    return files


def warm_equals_cold(root: Path) -> CompileCache:
    """Compile with the project's cache (as the CLI does) and check it against a cold compile."""
    cache = CompileCache.for_project(root)
    assert build(root, cache) == build(root, None)
    return cache


def test_warm_compile_of_a_generated_project_reuses_everything_and_writes_the_same_bytes(tmp_path: Path):
    root = write_mvflow(generate(60), tmp_path / "gen")  # views, tables, mv, fact, macros, `*`
    cold = warm_equals_cold(root)
    assert cold.misses > 0
    warm = warm_equals_cold(root)
    assert warm.misses == 0 and warm.hits >= cold.misses


def test_editing_an_upstream_model_invalidates_what_reads_it(make_project):
    root = make_project(FILES)
    warm_equals_cold(root)
    # a new column in base: wide's `*` expands to it, its lineage and types follow
    (root / "models/base.sql").write_text(
        "SELECT o.offer_id, o.shop_id, o.price, o.updated_at FROM {{ source('stage', 'offers') }} AS o\n")
    cache = warm_equals_cold(root)
    assert cache.hits > 0  # top's parse is reused: its rendered SQL did not change
    manifest = compile_project(load_project(root), cache=CompileCache.for_project(root))
    assert manifest.models["wide"].columns == ["offer_id", "shop_id", "price", "updated_at", "price_cents"]
    # a type change upstream reaches a copied column downstream (lineage types)
    (root / "models/base.sql").write_text(
        "SELECT o.offer_id, o.shop_id, CAST(o.price AS STRING) AS price FROM {{ source('stage', 'offers') }} AS o\n")
    warm_equals_cold(root)


def test_edits_to_macros_sources_and_project_reach_every_model(make_project):
    root = make_project(FILES)
    warm_equals_cold(root)
    (root / "macros/m.sql").write_text("{% macro cents(x) %}CAST(ROUND({{ x }} * 100) AS INT){% endmacro %}\n")
    warm_equals_cold(root)
    (root / "lineage/s.yml").write_text(SOURCES.replace("{name: name, type: string}", "{name: name, type: varchar(9)}"))
    warm_equals_cold(root)
    (root / "project.yml").write_text("name: t\nmodels:\n  +materialized: table\n")
    warm_equals_cold(root)


def test_cli_keeps_the_cache_under_dot_mvflow_only_after_success(make_project):
    root = make_project(FILES)
    main(["--project-dir", str(root), "compile"])
    assert (root / CACHE_FILE).is_file()
    first = tree(root / "target")
    main(["--project-dir", str(root), "compile"])
    assert tree(root / "target") == first
    broken = make_project({**FILES, "models/bad.sql": "SELECT FROM WHERE\n"})
    shutil.rmtree(broken / ".mvflow")
    shutil.rmtree(broken / "target")
    with pytest.raises(SystemExit):
        main(["--project-dir", str(broken), "compile"])
    assert not (broken / ".mvflow").exists() and not (broken / "target").exists()


def test_damaged_or_foreign_cache_files_are_ignored(make_project, monkeypatch):
    root = make_project(FILES)
    warm_equals_cold(root)
    (root / CACHE_FILE).write_bytes(b"not a pickle")
    assert len(CompileCache.for_project(root)) == 0
    warm_equals_cold(root)
    assert len(CompileCache.for_project(root)) > 0
    # another mvflow/sqlglot/Jinja/Python (here: another tag) starts empty
    monkeypatch.setattr("compiler.cache._code_tag", lambda: "another version")
    assert len(CompileCache.for_project(root)) == 0


def test_unwritable_cache_directory_does_not_fail_a_compile(make_project):
    root = make_project(FILES)
    (root / ".mvflow").write_text("a file where the cache folder would go")
    warm_equals_cold(root)


def test_entries_unused_for_several_runs_are_dropped(tmp_path: Path):
    path = tmp_path / "c.pickle"
    cache = CompileCache(path)
    cache.put("old", 1)
    cache.put("kept", 2)
    cache.save()
    for _ in range(KEEP_RUNS):
        cache = CompileCache(path)
        assert cache.get("kept") == 2
        cache.save()
    cache = CompileCache(path)
    assert cache.get("old") is None and cache.get("kept") == 2


def test_a_model_from_the_cache_is_parsed_only_when_its_tree_is_needed(make_project):
    root = make_project(FILES)
    warm_equals_cold(root)
    model = compile_project(load_project(root), cache=CompileCache.for_project(root)).models["top"]
    assert model.parsed and model._ast is None
    printed = model.select_sql
    assert model._ast is None
    assert model.ast is not None and model.select_sql == printed
