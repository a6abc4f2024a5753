"""``cluster_by`` (Delta liquid clustering) on ``mv`` and ``table`` models: the clause in the
compiled SQL under target/run/, compile errors (also tests/broken/cluster_by_*), and on Spark a
clustered Delta MV that refreshes by key, then changes its clustering without a rebuild (``ALTER
TABLE … CLUSTER BY`` + ``OPTIMIZE``, also through a crash and its redo), and a clustered table.
Oracle: after every batch the MV equals a full recomputation of its SELECT.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from compiler.artifacts import write_artifacts
from compiler.compile import compile_project
from compiler.errors import CompileError
from compiler.kinds import KindError, create_kind
from compiler.kinds.mv.analyze import mv_plan
from compiler.kinds.mv.refresh import run_mv
from compiler.kinds.mv.storage import MvState
from compiler.kinds.table import run_table
from compiler.phases import Crash, crash_at
from compiler.project import load_project

sys.path.insert(0, str(Path(__file__).parent))  # the tests use --import-mode=importlib
from mv_world import World, seed  # noqa: E402

PROJECT = {
    "lineage/s.yml": """
        sources:
          - {name: offers, database: stage, primary_key: [id], position: [ts, id]}
        """,
    "models/wide.sql": """
        {{ config(materialized='mv', table_format='delta', cluster_by='shop_id') }}
        SELECT o.id, o.shop_id, o.title FROM {{ source('stage', 'offers') }} AS o
        """,
    "models/stats.sql": """
        {{ config(materialized='table', table_format='delta', cluster_by=['shop_id', 'n']) }}
        SELECT o.shop_id, COUNT(*) AS n FROM {{ source('stage', 'offers') }} AS o GROUP BY o.shop_id
        """,
    "models/events.sql": """
        {{ config(materialized='fact', table_format='delta') }}
        SELECT o.id, o.ts, o.shop_id FROM {{ source('stage', 'offers') }} AS o
        """,
}


def test_the_clause_is_in_the_compiled_sql(make_project):
    root = make_project(PROJECT)
    manifest = compile_project(load_project(root))
    write_artifacts(manifest)
    run = root / "target" / "run"
    build = (run / "wide" / "build.sql").read_text()
    assert "CREATE OR REPLACE TABLE default.wide\nUSING delta\nCLUSTER BY (shop_id)\nAS" in build
    assert "ALTER TABLE default.wide SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true');" in \
        (run / "wide" / "deletion_vectors.sql").read_text()  # once the MV passes compact_below_rows
    assert "ALTER TABLE default.wide CLUSTER BY (shop_id);" in (run / "wide" / "cluster_by.sql").read_text()
    assert "OPTIMIZE default.wide;" in (run / "wide" / "optimize.sql").read_text()  # clusters: no ZORDER
    stats = (run / "stats.sql").read_text()
    assert "USING delta\nCLUSTER BY (shop_id, n)\nAS" in stats and "OPTIMIZE default.stats;" in stats


def test_a_fact_takes_no_cluster_by(make_project):
    # a fact's steps write new files and nothing compacts them: clustering would never happen
    fact = PROJECT["models/events.sql"].replace("table_format='delta'", "table_format='delta', cluster_by='shop_id'")
    with pytest.raises(CompileError) as info:
        compile_project(load_project(make_project({**PROJECT, "models/events.sql": fact})))
    assert [p.code for p in info.value.problems] == ["unknown-config"]


def test_no_cluster_by_is_no_clustering(make_project):
    files = {**PROJECT, "models/wide.sql": PROJECT["models/wide.sql"].replace(", cluster_by='shop_id'", "")}
    manifest = compile_project(load_project(make_project(files)))
    assert create_kind({"materialized": "mv"}).cluster_by == ()
    from compiler.kinds.mv.derive import derived as derived_of

    derived = derived_of(manifest, manifest.models["wide"])
    assert "CLUSTER BY" not in derived["build"] and derived["cluster_by"] == "ALTER TABLE default.wide CLUSTER BY NONE"


@pytest.mark.parametrize("value, words", [
    (3, "must be a column name or a list of column names"),
    (["a", "b", "c", "d", "e"], "Delta clusters by at most 4"),
    (["a", "A"], "names column 'A' twice"),
    ("a b", "is not a plain column name"),
])
def test_bad_values(value, words):
    with pytest.raises(KindError, match=words) as info:
        create_kind({"materialized": "mv", "cluster_by": value})
    assert info.value.code == "cluster-by" and info.value.key == "cluster_by"


def test_parquet_and_unknown_columns_fail_at_their_line(make_project):
    files = {**PROJECT, "models/wide.sql": PROJECT["models/wide.sql"].replace("table_format='delta'", "table_format='parquet'")}
    with pytest.raises(CompileError, match="Delta Lake option") as info:
        compile_project(load_project(make_project(files)))
    assert [(p.path, p.line, p.code) for p in info.value.problems] == [("models/wide.sql", 1, "cluster-by")]


# three inputs (a position source, a dictionary): the runs stay short
SMALL = """
{{{{ config(materialized='mv', schema='{db}', strategy='incremental', compact_threshold=100, compact_below_rows=0, cluster_by='shop') }}}}
SELECT o.id, o.title, s.name AS shop, c.name AS category
FROM {{{{ source('{db}', 'offers') }}}} AS o
JOIN {{{{ source('{db}', 'shops') }}}} AS s ON s.id = o.shop_id AND s.deleted = FALSE
LEFT JOIN {{{{ source('{db}', 'categories') }}}} AS c ON c.id = o.cat_id
WHERE o.deleted = FALSE AND o.status = 'active'
"""
STATS = """
{{{{ config(materialized='table', schema='{db}', table_format='delta', cluster_by='shop_id') }}}}
SELECT o.shop_id, COUNT(*) AS n FROM {{{{ source('{db}', 'offers') }}}} AS o GROUP BY o.shop_id
"""


def _clustering(spark, relation: str) -> list[str]:
    return list(spark.sql(f"DESCRIBE DETAIL {relation}").first()["clusteringColumns"])


def _operations(spark, relation: str) -> list[str]:
    return [r["operation"] for r in spark.sql(f"DESCRIBE HISTORY {relation}").orderBy("version").collect()]


def test_a_clustered_delta_mv_refreshes_and_changes_its_clustering_without_a_rebuild(spark, tmp_path):
    wide = SMALL
    world = World(spark, tmp_path, models={"wide": wide, "stats": STATS}, table_format="delta")
    relation = mv_plan(world.manifest.models["wide"], world.manifest).table  # its joins' keys: beside a view
    assert relation == world.manifest.models["wide"].relation + "__mvflow_rows"
    seed(world)
    assert world.refresh().mode == "build"
    assert _clustering(spark, relation) == ["shop"]

    def recompile(config: str) -> None:
        text = wide.replace(", cluster_by='shop'", config).format(db=world.db)
        path = tmp_path / "models" / "wide.sql"
        path.write_text(text.replace("materialized='mv',", "materialized='mv', table_format='delta',", 1).lstrip("\n"))
        world.manifest = compile_project(load_project(tmp_path))

    def state() -> MvState:
        return MvState.parse(world.store.get("wide").state)

    # new columns and changes; the batch crashes after its ALTER and its MERGE: the redo restores
    # the ALTER's version (saved in the state) and merges again
    recompile(", cluster_by=['category', 'shop']")
    world.put("offers", id=7, shop_id=100, cat_id=7, title="new", status="active", note="n")
    world.put("shops", id=200, name="Beta2", wh_id=10, rating=4)
    world.put("categories", id=8, name="Games2", note="y")
    with pytest.raises(Crash):
        world.refresh(phase=crash_at("mv:merged"))
    redo = run_mv(spark, world.manifest, world.manifest.models["wide"], world.store)  # records the file check
    assert redo.status == "success" and "redo of the crashed batch" in redo.message, redo.message
    world.check()
    assert _clustering(spark, relation) == ["category", "shop"] and state().cluster_by == ["category", "shop"]

    # removed while no input moved: the file check must not skip it
    recompile("")
    result = run_mv(spark, world.manifest, world.manifest.models["wide"], world.store)
    assert result.status == "success" and "up to date" in result.message, result.message
    assert _clustering(spark, relation) == [] and state().cluster_by == []
    operations = _operations(spark, relation)
    assert operations.count("CREATE OR REPLACE TABLE AS SELECT") == 1, operations  # the first build only
    assert "RESTORE" in operations and operations[-1] == "CLUSTER BY", operations

    table = world.manifest.models["stats"]
    assert run_table(spark, world.manifest, table).status == "success"
    assert _clustering(spark, table.relation) == ["shop_id"]
    assert _operations(spark, table.relation)[-1] == "OPTIMIZE"
