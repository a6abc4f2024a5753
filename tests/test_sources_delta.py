"""Sources on Delta Lake (compiler.kinds.mv.change_modes): the Change Data Feed as a change mode
(``changes: cdf``), ``position`` sources stored as Delta, dictionaries diffed by time travel
instead of snapshots, beside parquet sources in the same MV. Oracle: after every batch the MV
equals a full recomputation of its SELECT, also after a crash with new versions landing before
the redo, and after the history a batch needs was vacuumed away (a full build instead).
"""

from __future__ import annotations

import random
import sys
import threading
from decimal import Decimal
from pathlib import Path

import pytest

from compiler.compile import compile_project
from compiler.errors import RunError
from compiler.kinds.mv.refresh import run_mv
from compiler.phases import Crash, crash_at
from compiler.project import load_project
from compiler.table_format import delta_version, table_details
from compiler.watch import local_location

sys.path.insert(0, str(Path(__file__).parent))  # the tests use --import-mode=importlib
from mv_world import KEYS, SCHEMAS, WIDE, World, seed  # noqa: E402
from tiny_spark import rows_frame  # noqa: E402

# offers: position on Delta; warehouses and prices: the Change Data Feed (hard deletes);
# regions and categories: Delta dictionaries (time travel); shops and settings stay parquet.
DELTA_TABLES = ("offers", "warehouses", "prices", "regions", "categories")
LINEAGE = """
sources:
  - {{name: offers, database: {db}, primary_key: [id], position: [ts, seq], deleted: deleted}}
  - {{name: shops, database: {db}, primary_key: [id], position: [v], deleted: deleted}}
  - {{name: warehouses, database: {db}, primary_key: [id], changes: cdf}}
  - {{name: regions, database: {db}, primary_key: [id], dictionary: true}}
  - {{name: categories, database: {db}, primary_key: [id], dictionary: true}}
  - name: prices
    database: {db}
    primary_key: [offer_id, kind]
    changes: cdf
  - {{name: settings, database: {db}, primary_key: [name], dictionary: true}}
"""


class DeltaWorld(World):
    """The MV oracle world with some sources as Delta tables (Change Data Feed on). A table is created
    with its first rows (one commit); a flush then applies each Delta table's changes since the last
    flush with one MERGE of those rows only, so its feed holds exactly them (a MERGE of the whole
    table took a third of this module's time)."""

    def __init__(self, spark, root: Path, cdf: bool = True, models: dict[str, str] | None = None):
        super().__init__(spark, root, models)
        self.cdf = cdf
        self.flushed: dict[str, dict[tuple, tuple]] = {}  # each Delta table's rows as of the last flush
        (root / "lineage/t.yml").write_text(LINEAGE.format(db=self.db))
        self.manifest = compile_project(load_project(root))

    def flush(self) -> None:
        for table in sorted(self.dirty & set(DELTA_TABLES)):
            name = f"{self.db}.{table}"
            if not self.spark.catalog.tableExists(name):
                self._create(name, table)
            else:
                self._merge(name, table)
            self.flushed[table] = dict(self.rows[table])
        self.dirty -= set(DELTA_TABLES)
        super().flush()

    def _create(self, name: str, table: str) -> None:
        properties = ", ".join(["'delta.enableDeletionVectors' = 'true'",
                                *(["'delta.enableChangeDataFeed' = 'true'"] if self.cdf else [])])
        view = f"{self.db}_{table}_rows"
        rows_frame(self.spark, list(self.rows[table].values()), SCHEMAS[table]).createOrReplaceTempView(view)
        self.spark.sql(f"CREATE TABLE {name} USING delta TBLPROPERTIES ({properties}) AS SELECT * FROM {view}")
        self.spark.catalog.dropTempView(view)

    def _merge(self, name: str, table: str) -> None:
        """The rows put or deleted since the last flush, in one MERGE (none: no commit)."""
        rows, before, keys = self.rows[table], self.flushed.get(table, {}), KEYS[table]
        columns = [c.split()[0] for c in SCHEMAS[table].split(", ")]
        put = [(*row, False) for key, row in rows.items() if before.get(key) != row]
        gone = [(*(dict(zip(keys, key)).get(c) for c in columns), True) for key in before if key not in rows]
        if not put and not gone:
            return
        view = f"{self.db}_{table}_changes_rows"
        rows_frame(self.spark, put + gone, f"{SCHEMAS[table]}, _gone BOOLEAN").createOrReplaceTempView(view)
        on = " AND ".join(f"t.{k} = s.{k}" for k in keys)
        assign = ", ".join(f"t.{c} = s.{c}" for c in columns)
        values = ", ".join(f"s.{c}" for c in columns)
        self.spark.sql(f"MERGE INTO {name} AS t USING {view} AS s ON {on} "
                       f"WHEN MATCHED AND s._gone THEN DELETE WHEN MATCHED THEN UPDATE SET {assign} "
                       f"WHEN NOT MATCHED AND NOT s._gone THEN INSERT ({', '.join(columns)}) VALUES ({values})")
        self.spark.catalog.dropTempView(view)

    def short(self, outcome) -> dict[str, int]:
        return {k.split(".")[-1]: v for k, v in outcome.changed.items() if v}


@pytest.fixture
def world(spark, tmp_path):
    w = DeltaWorld(spark, tmp_path)
    seed(w)
    outcome = w.refresh()
    assert outcome.mode == "build", outcome
    w.check()
    return w


def change(world: DeltaWorld, rng: random.Random) -> None:
    """A few random edits over every input, Delta and parquet, hard deletes included."""
    operations = [
        lambda: world.put("offers", id=rng.randint(1, 9), shop_id=rng.choice([100, 200, 300]), cat_id=rng.choice([7, 8, None]),
                          title=f"o{rng.randint(0, 99)}", note="n", status=rng.choice(["active", "hidden"]), deleted=False),
        lambda: world.delete("offers", rng.randint(1, 9)),
        lambda: world.put("shops", id=rng.choice([100, 200, 300]), name=f"s{rng.randint(0, 99)}", wh_id=rng.choice([10, 20, 30]),
                          rating=rng.randint(1, 5), deleted=False),
        lambda: world.put("warehouses", id=rng.choice([10, 20, 30]), name=f"w{rng.randint(0, 99)}", region_id=rng.choice([1, 2, 3])),
        lambda: world.delete("warehouses", rng.choice([20, 30])),
        lambda: world.put("regions", id=rng.choice([1, 2, 3]), name=rng.choice("NSEW")),
        lambda: world.delete("regions", rng.choice([2, 3])),
        lambda: world.put("categories", id=rng.choice([7, 8]), name=f"c{rng.randint(0, 99)}", note="x"),
        lambda: world.put("prices", offer_id=rng.randint(1, 9), kind="retail", price=Decimal(rng.choice(["1.00", "2.50"]))),
        lambda: world.delete("prices", rng.randint(1, 9), "retail"),
        lambda: world.put("settings", name="currency", value=rng.choice(["EUR", "USD"])),
    ]
    for _ in range(4):
        rng.choice(operations)()


def test_cdf_and_time_travel_refresh_by_key_and_match_a_recomputation(world):
    plan_tables = {r.tableName for r in world.spark.sql(f"SHOW TABLES IN {world.db}").collect()}
    assert any(t.endswith("snap_" + world.db + "_settings") for t in plan_tables)       # parquet: snapshots
    assert not any("snap_" + world.db + "_categories" in t for t in plan_tables)        # Delta: time travel
    assert table_details(world.spark, f"{world.db}.prices")[0] == "delta"

    world.put("prices", offer_id=3, kind="retail", price=Decimal("9.99"))    # CDF: an update
    world.delete("prices", 1, "retail")                                       # CDF: a hard delete
    world.put("warehouses", id=20, name="W20b")                               # CDF, two hops
    world.put("categories", id=7, name="Novels")                              # time travel
    world.put("offers", id=2, title="renamed")                                # position on Delta
    outcome = world.refresh()
    assert outcome.mode == "refresh", outcome
    assert world.short(outcome) == {"prices": 2, "warehouses": 1, "categories": 1, "offers": 1}
    world.check()

    world.delete("warehouses", 20)                                            # rows of shop 200 vanish
    world.delete("regions", 1)                                                # a dictionary row deleted
    world.put("categories", id=8, note="unused")                              # a column the MV does not read
    outcome = world.refresh()
    assert world.short(outcome) == {"warehouses": 1, "regions": 1}, outcome
    world.check()

    assert world.refresh().reason == "up to date"                             # same versions: no scan
    rng = random.Random(5)
    for _ in range(2):
        change(world, rng)
        assert world.refresh().mode in ("refresh", "noop")
        world.check()


def test_crash_with_new_versions_before_the_redo(world):
    rng = random.Random(8)
    # before anything of the batch is written, and after all of it but the commit (every phase
    # between is test_kill_points.py's, on MVs over parquet and Delta sources alike)
    for phase in ("mv:next-written", "mv:published"):
        change(world, rng)
        world.put("prices", offer_id=2, kind="retail", price=Decimal(f"{rng.randint(1, 99)}.00"))
        world.put("categories", id=8, name=f"g{rng.randint(0, 99)}", note="y")
        with pytest.raises(Crash):
            world.refresh(phase=crash_at(phase))
        change(world, rng)                                                    # new versions land first
        world.put("regions", id=2, name=f"r{rng.randint(0, 99)}")
        redo = world.refresh()
        assert redo.redo and not redo.covered, redo                           # the planned versions only
        assert world.store.steps("wide", 1)[0].detail["redo"]                # the step log tells a redo
        assert world.refresh().covered
        world.check()


def test_missing_change_data_falls_back_to_a_full_build(world):
    # A version written while the feed was off has no change data (as one whose change files
    # VACUUM removed): the batch that needs it becomes a full build, which needs no history.
    prices = f"{world.db}.prices"
    world.spark.sql(f"ALTER TABLE {prices} SET TBLPROPERTIES ('delta.enableChangeDataFeed' = 'false')")
    world.put("prices", offer_id=3, kind="retail", price=Decimal("1.11"))
    world.flush()
    world.spark.sql(f"ALTER TABLE {prices} SET TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')")
    outcome = world.refresh()
    assert outcome.mode == "build" and "history" in outcome.reason, outcome
    world.check()
    world.put("prices", offer_id=5, kind="retail", price=Decimal("5.55"))  # and goes on by key
    assert world.short(world.refresh()) == {"prices": 1}
    world.check()


def test_a_build_probes_its_delta_inputs_beside_it_as_of_the_version_it_pinned(world, monkeypatch):
    # A build known before the probe pins each Delta position input to its newest version and probes
    # it beside the build. A row landing after the pin is in the build (it reads the table later) but
    # past the position recorded, so the next batch reads it again (by key: the same row).
    from compiler.kinds.mv import change_modes

    pin = change_modes.Positions.pin
    landed = []

    def pin_then_land(mode, run):
        pinned = pin(mode, run)
        if mode.input_id.endswith(".offers") and not landed:
            world.put("offers", id=4, title="after the pin")
            world.flush()
            landed.append(delta_version(world.spark, mode.table))
        return pinned

    monkeypatch.setattr(change_modes.Positions, "pin", pin_then_land)
    offers = f"{world.db}.offers"
    pinned_at = delta_version(world.spark, offers)
    build = world.refresh(full_refresh=True)
    assert build.mode == "build" and build.covered and landed == [pinned_at + 1], (build, landed)
    world.check()                                                  # the build read the row
    assert world.short(world.refresh()) == {"offers": 1}           # its position was not recorded
    world.check()
    assert world.refresh().reason == "up to date"


def test_a_delta_position_input_whose_log_shows_no_row_changed_is_not_read_by_the_batch(world, monkeypatch):
    # The last commit kept each Delta position input's version beside its position: a batch whose
    # pinned version is that one, or a later one whose commits changed no row (OPTIMIZE), takes the
    # committed position as the newest without reading the table.
    from compiler.kinds.mv import change_modes

    probed, probe = [], change_modes.Positions.probe

    def spy(mode, run, last, column):
        probed.append(mode.input_id.split(".")[-1])
        return probe(mode, run, last, column)

    monkeypatch.setattr(change_modes.Positions, "probe", spy)
    world.put("shops", id=100, name="Renamed")                       # parquet: read past last
    assert world.short(world.refresh()) == {"shops": 1}
    assert probed == ["shops"], probed                               # Delta offers: not read
    world.check()
    world.put("offers", id=2, title="renamed")
    probed.clear()
    assert world.short(world.refresh()) == {"offers": 1}
    assert sorted(probed) == ["offers", "shops"], probed
    world.check()
    offers = f"{world.db}.offers"
    version = delta_version(world.spark, offers)
    world.spark.sql(f"OPTIMIZE {offers}")                            # files rewritten, no row changed
    assert delta_version(world.spark, offers) == version + 1
    probed.clear()
    assert world.refresh().reason == "up to date"
    assert probed == ["shops"], probed
    world.put("offers", id=3, title="after the optimize")            # a row past last again: read
    assert world.short(world.refresh()) == {"offers": 1}
    world.check()


def test_an_mv_built_every_batch_knows_from_its_delta_versions_when_nothing_changed(spark, tmp_path, monkeypatch):
    # config(strategy='full') (as a small MV whose refresh of one key costs more than its build)
    # decides the build before the probe: a Delta position input is then not probed first. Its
    # version kept at the last commit tells whether anything changed; if so, its probe runs
    # beside the build, in another thread.
    from compiler.kinds.mv import change_modes

    world = DeltaWorld(spark, tmp_path, models={"wide": WIDE.replace("strategy='incremental'", "strategy='full'")})
    seed(world)
    assert world.refresh().mode == "build"
    world.check()
    probed, probe = [], change_modes.Positions.probe

    def spy(mode, run, last, column):
        probed.append((mode.input_id.split(".")[-1], threading.current_thread() is threading.main_thread(), bool(last)))
        return probe(mode, run, last, column)

    monkeypatch.setattr(change_modes.Positions, "probe", spy)
    assert world.refresh().reason == "up to date"
    assert probed == [("shops", True, True)], probed               # parquet: probed; Delta offers: its version
    probed.clear()
    world.put("offers", id=2, title="renamed")
    outcome = world.refresh()
    assert outcome.mode == "build" and "strategy='full'" in outcome.reason, outcome
    assert sorted(probed) == [("offers", False, True), ("shops", True, True)], probed  # past last, as by key
    world.check()
    probed.clear()
    world.put("shops", id=100, name="Renamed")                     # offers' log: no row changed since
    assert world.refresh().mode == "build"
    assert probed == [("shops", True, True)], probed               # offers not read, not even beside
    world.check()
    offers = f"{world.db}.offers"
    version = delta_version(spark, offers)
    spark.sql(f"OPTIMIZE {offers}")                               # its files rewritten, no row changed
    assert delta_version(spark, offers) == version + 1
    probed.clear()
    assert world.refresh().reason == "up to date"                 # the commit's files say dataChange = false
    assert probed == [("shops", True, True)], probed
    crash_beside_the_build(world, "mv:build-base-written", 3)
    shops = Path(local_location(spark, f"{world.db}.shops"))        # pinning a parquet table wrote nothing there
    assert shops.is_dir() and not (shops / "_delta_log").exists()


def crash_beside_the_build(world: DeltaWorld, phase: str, offer: int) -> None:
    """A crash at ``phase`` of a build whose probe runs beside it, a change landing before the redo:
    the redo (or, past the commit, the next batch) reads it; then nothing is left to read."""
    world.put("offers", id=offer, title=f"crashed at {phase}")
    with pytest.raises(Crash):
        world.refresh(phase=crash_at(phase))
    world.put("offers", id=offer + 1, title="landed before the redo")
    assert world.refresh().mode == "build"
    world.check()
    assert world.refresh().reason == "up to date"


@pytest.mark.slow
@pytest.mark.parametrize("phase", ["mv:probed", "mv:build-snapshots", "mv:build-marked", "mv:build-published",
                                   "mv:build-swapped", "mv:next-written", "mv:committed", "mv:step-logged"])
def test_a_build_with_its_probe_beside_it_crashed_at_each_phase_slow(spark, tmp_path, phase):
    world = DeltaWorld(spark, tmp_path, models={"wide": WIDE.replace("strategy='incremental'", "strategy='full'")})
    seed(world)
    assert world.refresh().mode == "build"
    crash_beside_the_build(world, phase, 2)


def test_bad_cdf_declarations_fail_naming_the_yaml_line(spark, tmp_path):
    from compiler.drift import check_sources

    world = DeltaWorld(spark, tmp_path, cdf=False)                 # Delta tables without their feed
    seed(world)
    world.flush()
    with pytest.raises(RunError) as error:
        world.refresh()
    text = error.value.problems[0].format()
    assert text.startswith("lineage/t.yml:") and "[cdf-off]" in text and "enableChangeDataFeed" in text, text
    with pytest.raises(RunError) as error:
        check_sources(spark, world.manifest, ["wide"])            # at the start of a run, both sources
    assert sorted(p.code for p in error.value.problems) == ["cdf-off", "cdf-off"]

    spark.sql(f"DROP TABLE {world.db}.prices")
    spark.sql(f"CREATE TABLE {world.db}.prices ({SCHEMAS['prices']}) USING parquet")
    with pytest.raises(RunError) as error:
        check_sources(spark, world.manifest, ["wide"])
    codes = {p.code: p for p in error.value.problems}
    assert set(codes) == {"cdf-off", "cdf-not-delta"}
    line = (world.root / "lineage/t.yml").read_text().splitlines().index("  - name: prices") + 1
    assert codes["cdf-not-delta"].line == line and "not Delta" in codes["cdf-not-delta"].message


def test_the_watch_sees_a_delta_commit(world):
    def run():
        world.flush()
        result = run_mv(world.spark, world.manifest, world.manifest.models["wide"], world.store, file_check=True)
        assert result.status == "success", result.message
        return result.message

    run()                                                          # records the watch
    assert run().startswith("up to date (no input file")
    before = delta_version(world.spark, f"{world.db}.categories")
    world.put("categories", id=7, name="Watched")                  # one MERGE: a new file in _delta_log/
    assert "keys refreshed" in run()
    assert delta_version(world.spark, f"{world.db}.categories") == before + 1
    world.check()
    assert run().startswith("up to date (no input file")


def test_cdf_declaration_compiles_to_table_changes_and_a_bad_one_names_its_line(make_project):
    from compiler.errors import ProjectError
    from compiler.kinds.mv.derive import derive
    from compiler.kinds.mv.analyze import mv_plan
    from compiler.kinds.mv.queries import mode_words
    from compiler.sources import load_sources

    files = {
        "lineage/s.yml": """
            sources:
              - {name: o, database: d, primary_key: [id], changes: cdf}
              - {name: c, database: d, primary_key: [id], dictionary: true}
            """,
        "models/m.sql": "{{ config(materialized='mv') }}\n"
                        "SELECT o.id, c.name FROM {{ source('d', 'o') }} AS o LEFT JOIN {{ source('d', 'c') }} AS c ON c.id = o.cid",
    }
    manifest = compile_project(load_project(make_project(files)))
    plan = mv_plan(manifest.models["m"], manifest)
    queries = derive(plan).queries
    assert "TABLE_CHANGES('d.o', :first_version, :next_version)" in queries["changes:d.o"]
    # a source's format is known only at run time: both ways of diffing a dictionary are derived
    assert {"changes:d.c", "snapshot:d.c", "versions:d.c"} <= set(queries)
    assert "mvflow_m_as_of_last_d_c" in queries["versions:d.c"]
    assert mode_words(plan.inputs["d.o"]).startswith("cdf, the Delta table's Change Data Feed")

    bad = make_project({"lineage/s.yml": "sources:\n  - name: o\n    database: d\n    primary_key: [id]\n    changes: kafka\n"})
    with pytest.raises(ProjectError) as error:
        load_sources(load_project(bad))
    problem = error.value.problems[0]
    assert (problem.line, problem.code) == (5, "bad-value") and "changes: cdf" in problem.hint



def test_a_rebuild_does_not_read_a_delta_position_input_whose_log_shows_no_row_changed(world, monkeypatch):
    # --full-refresh (any rebuild) keeps the committed position of a Delta input whose table is the
    # one the last commit saw, at a version whose commits since changed no row; a changed one is read
    # whole, from the start (a rewritten source may hold smaller positions).
    from compiler.kinds.mv import change_modes

    probed, probe = [], change_modes.Positions.probe

    def spy(mode, run, last, column):
        probed.append((mode.input_id.split(".")[-1], bool(last)))
        return probe(mode, run, last, column)

    monkeypatch.setattr(change_modes.Positions, "probe", spy)
    assert world.refresh(full_refresh=True).mode == "build"
    assert probed == [("shops", False)], probed                    # parquet: read; Delta offers: not
    world.check()
    probed.clear()
    world.put("offers", id=2, title="renamed")
    assert world.refresh(full_refresh=True).mode == "build"
    assert sorted(probed) == [("offers", False), ("shops", False)], probed
    world.check()
    assert world.refresh().reason == "up to date"


def test_a_delta_source_dropped_and_created_again_rebuilds_the_mv_though_its_version_is_the_same(world):
    # A source re-created (DROP, then CREATE: a new log) can reach the version the last commit kept
    # (a position source's, a Change Data Feed's): when that version was committed, kept beside it, tells
    # the two tables apart, so the MV is rebuilt rather than left as it was, or fed the new
    # table's versions as changes.
    for table, key in (("offers", {"id": 2, "title": "in the new table"}),
                       ("warehouses", {"id": 10, "name": "in the new table", "region_id": 2})):
        name = f"{world.db}.{table}"
        version = delta_version(world.spark, name)
        world.spark.sql(f"DROP TABLE {name}")
        world.put(table, **key)
        world.flush()
        assert delta_version(world.spark, name) == version
        outcome = world.refresh()
        assert outcome.mode == "build" and f"{table} was re-created" in outcome.reason, outcome
        world.check()
        assert world.refresh().reason == "up to date"
