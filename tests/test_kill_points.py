"""The kill-point suite: the runner crashes at every named phase of an MV batch (refresh, full
build, compaction, a switch to a full build, a chunked refresh) and of a fact step (``compiler.phases``); in every other case
new source changes land between the crash and the redo. After the redo and one more run (both
through the runners, file check included, as ``mvflow run`` runs them) the MV equals a full
recomputation of its SELECT and the fact has every row once.

In-process: the hook raises ``Crash`` (a BaseException no runner catches), so the batch stops
exactly at the phase. ``test_kills_cli.py`` does the same with a real ``kill -9`` of
``mvflow run`` and its JVM at a few of these phases.

The fast tier crashes at ``FAST``: per scenario and format, the phases between a write and its
commit; every other phase is in the slow tier (``scripts/test.sh --slow``), ~6 minutes on 2 cores.
"""

from __future__ import annotations

import random
import sys
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest

from compiler.compile import compile_project
from compiler.kinds.fact.steps import StepOptions, run_fact
from compiler.kinds.mv.refresh import run_mv
from compiler.phases import FACT_PHASES, MV_DELTA_ONLY, MV_PARQUET_ONLY, MV_PHASES, Crash, crash_at, mv_phases
from compiler.project import load_project
from compiler.verify import verify_model

sys.path.insert(0, str(Path(__file__).parent))  # the tests use --import-mode=importlib
from mv_world import WIDE, World, seed  # noqa: E402

PARQUET = mv_phases("parquet")
CHUNK = [p for p in PARQUET if p.startswith("mv:chunk-")]
REFRESH = [p for p in PARQUET if not p.startswith("mv:build-") and p != "mv:fanout-guard" and p not in CHUNK]
BUILD = ["mv:leased", "mv:probed", "mv:next-written", *[p for p in PARQUET if p.startswith("mv:build-")],
         "mv:committed", "mv:step-logged", "mv:snapshots-dropped"]
CASES = ([("refresh", p) for p in REFRESH] + [("build", p) for p in BUILD]
         + [("fanout", "mv:fanout-guard"), ("fanout", "mv:build-base-written")]
         + [("chunked", p) for p in CHUNK] + [("chunked", "mv:delta-written"), ("chunked", "mv:committed")]
         + [("fact", p) for p in FACT_PHASES])
# On Delta, the points where its storage differs from parquet's (the detection before them is shared):
# after the MERGE (a redo restores the version of the last commit), around OPTIMIZE, and a build's
# CREATE OR REPLACE before its commit.
DELTA_CASES = ([("refresh", p) for p in ("mv:published", "mv:merged", "mv:optimized", "mv:compacted")]
               + [("build", p) for p in ("mv:build-marked", "mv:build-replaced", "mv:build-published")]
               + [("fanout", "mv:build-replaced")])

FACT_LINEAGE = """
sources:
  - name: events
    database: {db}
    primary_key: [id]
    position: [ts, id]
    columns:
      - {{name: id, type: bigint}}
      - {{name: shop_id, type: bigint}}
      - {{name: ts, type: timestamp}}
"""
FACT = """
{{{{ config(materialized='fact', schema='{db}', maxstep=4) }}}}
SELECT e.id, e.ts, e.shop_id, s.name AS shop
FROM {{{{ source('{db}', 'events') }}}} AS e
LEFT JOIN {{{{ source('{db}', 'shops') }}}} AS s ON s.id = e.shop_id
"""
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


class Rig:
    """The MV world of the oracle tests plus a fact, its events and a change generator."""

    def __init__(self, spark, root: Path, table_format: str = "parquet"):
        models = {"wide": WIDE.replace("compact_threshold=100, compact_below_rows=0", "compact_threshold=0"),  # compacts every batch
                  "fan": WIDE.replace("strategy='incremental'", "strategy='full'"),       # every refresh is a build
                  # every refresh in chunks of about 2 keys (a crash at the first of a phase is in chunk 1)
                  "chunk": WIDE.replace("strategy='incremental'", "strategy='chunked', chunk_keys=2")}
        self.world = World(spark, root, models, table_format)
        (root / "lineage/events.yml").write_text(FACT_LINEAGE.format(db=self.world.db))
        (root / "models/ev.sql").write_text(FACT.format(db=self.world.db))
        self.world.manifest = compile_project(load_project(root))
        spark.sql(f"CREATE TABLE {self.world.db}.events (id BIGINT, shop_id BIGINT, ts TIMESTAMP) USING parquet")
        self.spark, self.rng, self.events, self.renames = spark, random.Random(11), 0, 0
        seed(self.world)

    def change(self) -> None:
        """A random batch over every input kind, plus edits that always reach the MV: offer 1
        (shop 100, warehouse 10: never deleted here), a new offer and a category rename (a
        dictionary diff)."""
        world, rng = self.world, self.rng
        self.renames += 1
        world.put("offers", id=1, title=f"t{self.renames}")
        # a new key reached by nothing but the offers' positions: a redo over the range planned
        # before the crash does not see it, only a batch past that range does
        world.put("offers", id=1000 + self.renames, shop_id=100, cat_id=None, title="new", note="n",
                  status="active", deleted=False)
        world.put("categories", id=rng.choice([7, 8]), name=f"c{self.renames}", note="x")
        for _ in range(3):
            rng.choice(self._operations)()
        self.add_events(rng.randint(1, 6))

    @property
    def _operations(self):
        world, rng = self.world, self.rng
        return [
            lambda: world.put("offers", id=rng.randint(2, 9), shop_id=rng.choice([100, 200, 300]),
                              cat_id=rng.choice([7, 8, None]), title=f"o{rng.randint(0, 99)}", note="n",
                              status=rng.choice(["active", "hidden"]), deleted=False),
            lambda: world.delete("offers", rng.randint(2, 9)),
            lambda: world.put("shops", id=rng.choice([200, 300]), name=f"s{rng.randint(0, 99)}",
                              wh_id=rng.choice([10, 20]), rating=rng.randint(1, 5), deleted=rng.random() < 0.2),
            lambda: world.put("warehouses", id=20, name=f"w{rng.randint(0, 99)}", region_id=rng.choice([1, 2])),
            lambda: world.put("regions", id=rng.choice([1, 2]), name=rng.choice("NSEW")),
            lambda: world.put("prices", offer_id=rng.randint(1, 9), kind="retail",
                              price=Decimal(rng.choice(["1.00", "2.50", "3.75"]))),
            lambda: world.delete("prices", rng.randint(1, 9), "retail"),
            lambda: world.put("settings", name="currency", value=rng.choice(["EUR", "USD", "GBP"])),
        ]

    def add_events(self, count: int) -> None:
        rows = []
        for _ in range(count):
            self.events += 1
            ts = (T0 + timedelta(minutes=self.events // 2)).strftime("%Y-%m-%d %H:%M:%S")
            rows.append(f"({self.events}, {self.rng.choice([100, 200, 300])}, TIMESTAMP'{ts}')")
        self.spark.sql(f"INSERT INTO {self.world.db}.events VALUES {', '.join(rows)}")

    def run(self, name: str, full_refresh: bool = False, phase=None):
        """The model's runner as ``mvflow run`` calls it (file check on)."""
        world = self.world
        world.flush()
        model = world.manifest.models[name]
        if model.kind.name == "fact":
            options = StepOptions(full_refresh=full_refresh, **({"phase": phase} if phase else {}))
            return run_fact(self.spark, world.manifest, model, world.store, options, lambda _: None)
        return run_mv(self.spark, world.manifest, model, world.store, full_refresh,
                      **({"phase": phase} if phase else {}))

    def verify(self, name: str) -> None:
        verdict = verify_model(self.spark, self.world.manifest, self.world.manifest.models[name], self.world.store)
        assert verdict.ok and not verdict.duplicate, verdict.format()


@pytest.fixture(scope="module")
def rig(spark, tmp_path_factory):
    rig = Rig(spark, tmp_path_factory.mktemp("killpoints"))
    for name in ("wide", "fan", "chunk", "ev"):
        rig.add_events(3)
        result = rig.run(name)
        assert result.status == "success", result.message
        rig.verify(name)
    return rig


@pytest.fixture(scope="module")
def delta_rig(spark, tmp_path_factory):
    rig = Rig(spark, tmp_path_factory.mktemp("killpoints-delta"), "delta")
    for name in ("wide", "fan"):
        result = rig.run(name)
        assert result.status == "success", result.message
        rig.verify(name)
    return rig


def test_at_least_thirty_distinct_kill_points():
    assert len(set(CASES)) == len(CASES) >= 30
    assert {p for _, p in CASES} == set(MV_PHASES + FACT_PHASES) - MV_DELTA_ONLY, "every parquet phase is crashed at"
    assert {p for _, p in DELTA_CASES} == MV_DELTA_ONLY | {"mv:published", "mv:compacted", "mv:build-marked",
                                                         "mv:build-published"}
    assert not {p for _, p in DELTA_CASES} & MV_PARQUET_ONLY
    assert FAST <= set(CASES) | set(DELTA_CASES)


FAST = {("refresh", "mv:next-written"), ("refresh", "mv:delta-written"), ("refresh", "mv:compaction-swapped"),
        ("build", "mv:build-swapped"), ("fanout", "mv:fanout-guard"), ("chunked", "mv:chunk-recorded"),
        ("fact", "fact:written"), ("refresh", "mv:merged"), ("build", "mv:build-replaced")}


def _params(cases: list[tuple[str, str]]) -> list:
    """Every case with its index (odd ones get changes before the redo); those not in ``FAST`` slow."""
    return [pytest.param(index, case, id=f"{case[0]}-{case[1]}", marks=() if case in FAST else pytest.mark.slow)
            for index, case in enumerate(cases)]


@pytest.mark.parametrize("index, case", _params(CASES))
def test_crash_at_phase_then_redo_and_verify(rig, index, case):
    _crash_redo_verify(rig, index, case)


@pytest.mark.parametrize("index, case", _params(DELTA_CASES))
def test_delta_crash_at_phase_then_redo_and_verify(delta_rig, index, case):
    _crash_redo_verify(delta_rig, index, case)


def _crash_redo_verify(rig: Rig, index: int, case: tuple[str, str]) -> None:
    scenario, phase = case
    name = {"refresh": "wide", "build": "wide", "fanout": "fan", "chunked": "chunk", "fact": "ev"}[scenario]
    rig.change()
    with pytest.raises(Crash):
        # a chunked batch: mv:chunk-written in its second chunk (the first is recorded: resumed at the second)
        rig.run(name, full_refresh=scenario == "build", phase=crash_at(phase, 2 if phase == "mv:chunk-written" else 1))
    if index % 2:
        rig.change()  # new changes land before the redo

    redo = rig.run(name)
    assert redo.status == "success", redo.message
    again = rig.run(name)
    assert again.status == "success", again.message
    if scenario != "fact":
        assert again.rows == 0, f"the redo run left work behind: {again.message}"
    rig.verify(name)
