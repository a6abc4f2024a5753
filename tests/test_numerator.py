"""Numerator models (seed 001) on a real SparkSession, real tables and a real state store file:
seed 001's developer cases as oracle tests, random generations against an independent pure-Python
reference, a crash at every phase, a stale writer, both table formats, and config errors."""

from __future__ import annotations

import random
import textwrap
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from compiler.compile import compile_project
from compiler.errors import CompileError
from compiler.kinds.numerator.generation import GenerationOptions, run_numerator
from compiler.kinds.numerator.version import Position, Version
from compiler.phases import NUMERATOR_PHASES, Crash, crash_at
from compiler.project import StateSettings, load_project
from compiler.spark import LazySession
from compiler.state import open_state_store
from compiler.verify import verify_model

TOPIC = "ids"
LINEAGE = """
sources:
  - name: keys
    database: {src}
    primary_key: [a, b]
    dictionary: true
    columns:
      - {{name: a, type: int}}
      - {{name: b, type: string}}
"""


class Env:
    """A one-model project: ``ids`` numbers the (a, b) tuples of the table ``<src>.keys``."""

    def __init__(self, spark, make_project, fmt: str = "parquet", **config):
        self.spark = spark
        tag = uuid.uuid4().hex[:8]
        self.src, self.out = f"src_{tag}", f"out_{tag}"
        self.root = make_project({"project.yml": f"name: t\nmodels:\n  +schema: {self.out}\n  +table_format: {fmt}\n",
                                  "lineage/src.yml": LINEAGE.format(src=self.src)})
        self.configure(**config)
        self.store = open_state_store(self.project.target().state)
        spark.sql(f"CREATE DATABASE {self.src}")
        spark.sql(f"CREATE TABLE {self.src}.keys (a INT, b STRING) USING parquet")

    def configure(self, select: str = "a, b", **config) -> None:
        """The model with this config (key a, b; 1 shard; ttl 1; max_holes 0.9 unless given), recompiled."""
        config = {"key": ["a", "b"], "shards": 1, "ttl_generations": 1, "max_holes": 0.9, **config}
        args = ", ".join(f"{k}={v!r}" for k, v in config.items())
        sql = f"{{{{ config(materialized='numerator', {args}) }}}}\nSELECT {select} FROM {{{{ source('{self.src}', 'keys') }}}}\n"
        (self.root / "models").mkdir(exist_ok=True)
        (self.root / "models/ids.sql").write_text(sql)
        self.project = load_project(self.root)
        self.manifest = compile_project(self.project)
        self.model = self.manifest.models[TOPIC]

    def run(self, keys, rebuild: bool = False, **options):
        """One generation over exactly these key tuples (ints stand for ``(n, 'x')``)."""
        rows = [k if isinstance(k, tuple) else (k, "x") for k in keys]
        self.spark.createDataFrame(rows, "a INT, b STRING").write.mode("overwrite").insertInto(f"{self.src}.keys")
        return run_numerator(self.spark, self.model, self.store, GenerationOptions(rebuild=rebuild, **options))

    def ids(self) -> dict[tuple, tuple[int, int]]:
        """The view: key → (shard_id, doc_id)."""
        return {(r.a, r.b): (r.shard_id, r.doc_id) for r in self.spark.table(self.model.relation).collect()}

    def docs(self) -> dict[int, int]:
        """With ``(n, 'x')`` keys in one shard: n → doc_id."""
        return {key[0]: doc for key, (_, doc) in self.ids().items()}

    def version(self) -> str:
        return str(Position.from_list(self.store.get(TOPIC).last).version)

    def builds(self) -> list[str]:
        return sorted(r.tableName for r in self.spark.sql(f"SHOW TABLES IN {self.out} LIKE 'ids__mvflow_*'").collect())


def ok(result) -> str:
    assert result.status == "success", result.message
    return result.message


@pytest.fixture
def env(spark, make_project):
    return Env(spark, make_project)


FORMATS = pytest.mark.parametrize("fmt", ["parquet", "delta"])


# -- seed 001's developer cases -------------------------------------------------------------------
@FORMATS
def test_main_case_new_keys_get_new_ids_and_present_keys_keep_theirs(spark, make_project, fmt):
    """Case 5: no rebuild: new docs get new ids; a key set that changes nothing changes nothing."""
    env = Env(spark, make_project, fmt)
    assert "state 1.0.0.0 (a new state)" in ok(env.run([30, 10, 20]))
    assert env.docs() == {10: 0, 20: 1, 30: 2}  # numbered in key order
    message = ok(env.run([10, 20, 30, 5, 40]))
    assert message == "state 1.0.0.1 (from 1.0.0.0: 2 new ids, 0 reused); 5 keys; data built on 1.0.0.≤1 stays usable"
    assert env.docs() == {10: 0, 20: 1, 30: 2, 5: 3, 40: 4}
    builds = env.builds()
    message = ok(env.run([40, 30, 20, 10, 5]))
    assert message.startswith("state 1.0.0.1 unchanged") and env.version() == "1.0.0.1"
    assert env.builds() == builds  # nothing built
    assert env.docs() == {10: 0, 20: 1, 30: 2, 5: 3, 40: 4}


def test_past_the_ttl_without_expired_keys_new_ids_follow_the_shards_max(env):
    """Case 2: generations past the TTL, no key absent long enough: new ids follow the max."""
    ok(env.run([10, 20, 30]))
    ok(env.run([10, 20, 30, 40]))
    ok(env.run([20, 30, 40]))  # 10 absent once: not expired (ttl 1)
    ok(env.run([10, 20, 30, 40, 50]))  # 10 back with its id
    assert env.docs() == {10: 0, 20: 1, 30: 2, 40: 3, 50: 4}
    ok(env.run([10, 20, 30, 40, 50, 60]))
    assert env.docs()[60] == 5 and env.version() == "1.0.0.4"
    verdict = verify_model(env.spark, env.manifest, env.model, env.store)  # one row per key of the SELECT
    assert verdict.ok and verdict.actual == verdict.expected == 6, verdict.format()


@FORMATS
def test_past_the_ttl_new_keys_take_expired_ids_first_then_the_next_after_the_max(spark, make_project, fmt):
    """Case 3: ids of keys absent for more than ttl generations go to new keys, lowest first, then
    the ids after the shard's max; a key absent for ttl generations or less keeps its id."""
    env = Env(spark, make_project, fmt)
    ok(env.run([10, 20, 30, 40]))  # G0: 0..3
    ok(env.run([10, 40, 50]))  # G1: 20, 30 absent one generation (= ttl): not free; 50 → 4
    assert env.docs() == {10: 0, 40: 3, 50: 4}
    message = ok(env.run([10, 40, 50, 60, 70, 80]))  # G2: 20, 30 absent two generations: free
    assert env.docs() == {10: 0, 40: 3, 50: 4, 60: 1, 70: 2, 80: 5}
    assert "(from 1.0.0.1: 1 new ids, 2 reused)" in message
    ok(env.run([10, 40, 50, 60, 70, 80, 20]))  # 20 lost its id: it comes back as a new key
    assert env.docs()[20] == 6


def test_holes_over_max_holes_rebuild_the_state_automatically(spark, make_project):
    """Case 4: when the ids held by absent keys would exceed max_holes, the generation compacts:
    present keys numbered 0..n-1 in their old order, new keys after them; V grows, G restarts."""
    env = Env(spark, make_project, max_holes=0.5)
    ok(env.run([1, 2, 3, 4, 5, 6]))
    ok(env.run([1, 2, 3, 5, 6]))  # 1 hole of 6
    assert env.version() == "1.0.0.1"
    ok(env.run([6, 3, 0]))  # 0 takes expired 4's id: 3 holes of 6, not over max_holes
    assert env.version() == "1.0.0.2" and env.docs() == {3: 2, 6: 5, 0: 3}
    ok(env.run([6, 0, 9]))  # 9 takes expired 1's id: 3 holes of 6 again
    assert env.version() == "1.0.0.3" and env.docs() == {6: 5, 0: 3, 9: 0}
    message = ok(env.run([0, 6]))  # 4 holes of 6: over max_holes
    assert env.version() == "1.0.1.0" and env.docs() == {0: 0, 6: 1}  # the old order kept
    assert "rebuilt from 1.0.0.3: the holes would be 4 of 6 ids (67%) > max_holes 50%" in message
    assert "data built on 1.0.0.* does not" in message


@FORMATS
def test_a_forced_rebuild_makes_each_shard_as_big_as_its_input(spark, make_project, fmt):
    """Case 1: --rebuild-state: a new state (V + 1) whose shards hold exactly the input's keys of
    that shard, numbered densely in their old order."""
    env = Env(spark, make_project, fmt, shards=3)
    ok(env.run(range(20)))
    ok(env.run(range(5, 30)))
    before = env.ids()
    message = ok(env.run(range(5, 30, 2), rebuild=True))
    assert "rebuilt from 1.0.0.1: asked (--rebuild-state)" in message and env.version() == "1.0.1.0"
    after = env.ids()
    assert set(after) == {(n, "x") for n in range(5, 30, 2)}
    for shard in range(3):
        mine = sorted((before[k][1], k) for k, (s, _) in after.items() if s == shard)
        assert sorted(d for k, (s, d) in after.items() if s == shard) == list(range(len(mine)))
        assert [after[k][1] for _, k in mine] == list(range(len(mine)))  # the old order kept
        assert all(before[k][0] == shard for _, k in mine)  # same scheme: same shard


def test_a_new_sharding_scheme_reshards_the_present_keys(env):
    ok(env.run(range(12)))
    env.configure(shards=3)
    message = ok(env.run(range(12)))
    assert env.version() == "1.1.0.0" and "re-sharded from 1.0.0.0: the sharding scheme changed: shards 1 → 3" in message
    shards = {s for s, _ in env.ids().values()}
    assert shards == {0, 1, 2}
    for shard in shards:
        assert sorted(d for s, d in env.ids().values() if s == shard) == list(range(sum(1 for s, _ in env.ids().values() if s == shard)))
    shard_sql = spark_shards(env, range(12), 3)
    assert {k: s for k, (s, _) in env.ids().items()} == shard_sql


def test_null_key_parts_keep_their_ids(env):
    ok(env.run([(1, None), (None, "a"), (1, "a")]))
    first = env.ids()
    ok(env.run([(1, None), (None, "a"), (1, "a"), (2, "b")]))
    assert {k: v for k, v in env.ids().items() if k in first} == first
    assert env.ids()[(2, "b")] == (0, 3)


# -- random generations against a pure-Python reference -------------------------------------------
class Reference:
    """Seed 001's rules on dicts, independent of the SQL: key → [shard, doc, last_seen]."""

    def __init__(self, shard_of: dict, ttl: int, max_holes: float):
        self.shard_of, self.ttl, self.max_holes = shard_of, ttl, max_holes
        self.state: dict[tuple, list[int]] = {}
        self.present: set = set()
        self.version: list[int] | None = None

    def run(self, keys: set, rebuild: bool = False) -> str:
        if self.version is None or rebuild:
            self.version = [1, 0, 0, 0] if self.version is None else [1, 0, self.version[2] + 1, 0]
            self._renumber(keys)
            return "rebuild"
        if keys == self.present:
            return "unchanged"
        generation = self.version[3] + 1
        state = {k: list(v) for k, v in self.state.items()}
        for key in sorted(keys - set(state), key=_order):
            shard = self.shard_of[key]
            free = sorted((v[1], k) for k, v in state.items()
                          if v[0] == shard and k not in keys and generation - v[2] > self.ttl)
            if free:
                del state[free[0][1]]
                state[key] = [shard, free[0][0], generation]
            else:
                state[key] = [shard, max((v[1] for v in state.values() if v[0] == shard), default=-1) + 1, generation]
        for key in keys:
            state[key][2] = generation
        if sum(1 for k in state if k not in keys) / len(state) > self.max_holes:
            self.version = [1, 0, self.version[2] + 1, 0]
            self._renumber(keys)
            return "rebuild"
        self.state, self.present, self.version[3] = state, set(keys), generation
        return "append"

    def _renumber(self, keys: set) -> None:
        old = self.state
        placed = sorted(keys, key=lambda k: (k not in old, *(old[k][:2] if k in old else (0, 0)), _order(k)))
        self.state, counts = {}, {}
        for key in placed:
            shard = self.shard_of[key]
            self.state[key] = [shard, counts.get(shard, 0), 0]
            counts[shard] = counts.get(shard, 0) + 1
        self.present = set(keys)

    def ids(self) -> dict:
        return {k: (v[0], v[1]) for k, v in self.state.items() if k in self.present}


def _order(key: tuple) -> tuple:
    """Spark's ascending order with NULLs first."""
    return tuple((0,) if v is None else (1, v) for v in key)


def spark_shards(env: Env, numbers, shards: int) -> dict:
    rows = [(n, "x") for n in numbers]
    frame = env.spark.createDataFrame(rows, "a INT, b STRING")
    return {(r.a, r.b): r.s for r in frame.selectExpr("a", "b", f"CAST(pmod(xxhash64(0, a, b), {shards}) AS INT) AS s").collect()}


def test_random_generations_match_the_reference(spark, make_project):
    """A dozen generations of random key sets: the view equals the reference's ids; ids are unique
    per shard, stable while present, dense after a rebuild, reused only after the TTL."""
    shards, ttl, universe = 3, 2, range(40)
    env = Env(spark, make_project, shards=shards, ttl_generations=ttl, max_holes=0.6)
    reference = Reference(spark_shards(env, universe, shards), ttl, 0.6)
    rng = random.Random(1)
    keys: set = {(n, "x") for n in rng.sample(universe, 15)}
    owners: dict[tuple, tuple] = {}  # (shard, doc) → its key, within one T.S.V
    last_seen: dict[tuple, int] = {}
    previous, seen_actions = {}, set()
    for generation in range(12):
        rebuild = generation == 7
        action = reference.run(keys, rebuild)
        seen_actions.add(action)
        ok(env.run(sorted(keys), rebuild=rebuild))
        ids = env.ids()
        assert ids == reference.ids(), (generation, action)
        assert env.version() == ".".join(map(str, reference.version))
        assert len(set(ids.values())) == len(ids)  # unique <shard_id, doc_id>
        if action == "rebuild":
            owners, previous = {}, {}
            for shard in range(shards):
                assert sorted(d for s, d in ids.values() if s == shard) == list(range(sum(s == shard for s, _ in ids.values())))
        g = reference.version[3]
        for key, pair in ids.items():
            if key in previous:
                assert previous[key] == pair, key  # stable while present
            holder = owners.get(pair)
            if holder is not None and holder != key:
                assert g - last_seen[holder] > ttl, (holder, key)  # reused only after the TTL
            owners[pair] = key
            last_seen[key] = g
        previous = ids
        keys = {k for k in keys if rng.random() > 0.3} | {(n, "x") for n in rng.sample(universe, rng.randint(0, 8))}
        if generation == 4:
            keys = set(ids)  # a generation with nothing to do
    assert seen_actions == {"rebuild", "append", "unchanged"}


# -- crashes and a stale writer -------------------------------------------------------------------
@pytest.mark.parametrize("fmt, phases", [
    ("parquet", NUMERATOR_PHASES),
    ("delta", ("numerator:state-written", "numerator:committed")),  # the phases around the format's own write
])
def test_a_crash_at_every_phase_then_a_rerun_gives_the_same_ids(spark, make_project, fmt, phases):
    env = Env(spark, make_project, fmt, shards=2)
    reference = Reference(spark_shards(env, range(40), 2), 1, 0.9)
    keys = {(n, "x") for n in range(10)}
    reference.run(keys)
    ok(env.run(sorted(keys)))
    for index, phase in enumerate(phases):
        keys = (keys - {(index, "x")}) | {(10 + 2 * index, "x"), (11 + 2 * index, "x")}
        reference.run(keys)
        with pytest.raises(Crash):
            env.run(sorted(keys), phase=crash_at(phase))
        ok(env.run(sorted(keys)))
        assert env.ids() == reference.ids(), phase
        assert env.version() == ".".join(map(str, reference.version)), phase
        published = Position.from_list(env.store.get(TOPIC).last)
        assert not env.store.get(TOPIC).in_flight
        kept = {f"ids__mvflow_state_{published.build}", f"ids__mvflow_state_{published.previous}"}
        assert set(env.builds()) <= kept, phase  # the crashed try's tables are gone


def test_a_run_with_no_input_file_moved_does_not_start_spark(env):
    first = env.run([1, 2])
    assert first.status == "success", first.message
    lazy = LazySession(lambda: env.spark)
    idle = run_numerator(lazy, env.model, env.store, GenerationOptions())
    assert idle.message == f"up to date (no input file moved since state {env.version()})" and idle.rows == 2
    assert not lazy.started
    assert env.model.kind.next_run(env.manifest, env.model, env.store, datetime.now(timezone.utc))[0] == "nothing"
    assert run_numerator(lazy, env.model, env.store, GenerationOptions(file_check=False)).status == "success"
    assert lazy.started                                       # --no-file-check asks Spark
    moved = env.run([1, 2, 3])                               # the input's files moved: a new generation
    assert moved.status == "success" and "1 new ids" in moved.message, moved.message
    assert len(env.ids()) == 3


def test_a_stale_writer_cannot_publish(env):
    ok(env.run([1, 2, 3]))
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    taken = {}

    def take_over(phase: str) -> None:
        if phase == "numerator:checked":  # built and checked, about to commit: another runner takes the topic
            taken["lease"] = env.store.acquire(TOPIC, "runner-b", 60, later)

    result = env.run([1, 2, 3, 4], phase=take_over, lease_ttl_seconds=60)
    assert result.status == "error" and "taken over" in result.message
    assert env.version() == "1.0.0.0" and env.docs() == {1: 0, 2: 1, 3: 2}  # the view still reads the old state
    assert env.builds() == ["ids__mvflow_input_2", "ids__mvflow_state_1", "ids__mvflow_state_2"]  # the stale build's
    env.store.release(taken["lease"])
    ok(env.run([1, 2, 3, 4]))  # token 4 (runner-b took 3)
    assert env.version() == "1.0.0.1" and env.docs() == {1: 0, 2: 1, 3: 2, 4: 3}
    assert env.builds() == ["ids__mvflow_state_1", "ids__mvflow_state_4"]  # the stale build dropped, the predecessor kept


def test_a_state_the_store_lost_is_refused_until_a_full_refresh(env, tmp_path):
    ok(env.run([1, 2]))
    env.store = open_state_store(StateSettings(path=tmp_path / "other.sqlite"))
    result = env.run([1, 2, 3])
    assert result.status == "error" and "reads a state the state store knows nothing of" in result.message
    ok(env.run([3, 1], fresh=True))
    assert env.version() == "1.0.0.0" and env.docs() == {1: 0, 3: 1}
    message = ok(env.run([3, 2, 1], fresh=True))  # a new state again: new ids, in key order
    assert env.version() == "1.0.1.0" and env.docs() == {1: 0, 2: 1, 3: 2}
    assert "(replacing 1.0.0.0: a new state from the input alone (--full-refresh))" in message


def test_a_table_under_the_models_name_is_refused(env):
    env.spark.sql(f"CREATE DATABASE {env.out}")
    env.spark.sql(f"CREATE TABLE {env.model.relation} (x INT) USING parquet")
    result = env.run([1])
    assert result.status == "error" and "is a parquet table; a numerator publishes a view there" in result.message


def test_a_live_lease_of_another_runner_is_refused(env):
    ok(env.run([1]))
    env.store.acquire(TOPIC, "runner-b", 600, datetime.now(timezone.utc))
    result = env.run([1, 2])
    assert result.status == "error" and "being processed by runner-b" in result.message


# -- config errors ---------------------------------------------------------------------------------
@pytest.mark.parametrize("config, select, expected", [
    ("shards=4", "a, b", "[numerator-key] a numerator needs its key: config(key=[...])"),
    ("key=['a', 'c']", "a, b", "[numerator-key] model 'ids': key column 'c' is not an output column of the SELECT"),
    ("key=['a']", "a, b", "model 'ids': the SELECT outputs b, which is not in the key"),
    ("key=['a', 'b'], shards=0", "a, b", "[bad-config] shards must be a positive number, got 0"),
    ("key=['a', 'b'], ttl_generations=-1", "a, b", "[bad-config] ttl_generations must be a number of 0 or more, got -1"),
    ("key=['a', 'b'], max_holes=2", "a, b", "max_holes must be a share of the ids between 0 and 1, got 2.0"),
    ("key=['a', 'shard_id']", "a, b AS shard_id", "key column 'shard_id' is a column the numerator adds"),
    ("key=['a', 'b'], shard=4", "a, b", "[unknown-config] unknown config key for kind 'numerator': shard"),
])
def test_bad_config_is_a_compile_error_at_the_config_line(make_project, config, select, expected):
    root = make_project({
        "lineage/src.yml": LINEAGE.format(src="s"),
        "models/ids.sql": f"-- ids\n{{{{ config(materialized='numerator', {config}) }}}}\nSELECT {select} FROM {{{{ source('s', 'keys') }}}}\n",
    })
    with pytest.raises(CompileError) as caught:
        compile_project(load_project(root))
    text = str(caught.value)
    assert expected in text and "models/ids.sql:2:" in text, text


def test_the_generation_script_shows_every_statement(make_project):
    root = make_project({"lineage/src.yml": LINEAGE.format(src="s"), "models/ids.sql": textwrap.dedent("""
        {{ config(materialized='numerator', key=['a', 'b'], shards=4) }}
        SELECT a, b FROM {{ source('s', 'keys') }}
        """)})
    manifest = compile_project(load_project(root))
    model = manifest.models["ids"]
    assert model.columns == ["a", "b", "shard_id", "doc_id"]
    script = model.kind.run_files(manifest, model)["generation.sql"]
    for text in ("CREATE TABLE IDENTIFIER(:input_table)", "PMOD(XXHASH64(0, q.a, q.b), 4)", "FROM IDENTIFIER(:previous_table)",
                 "CREATE OR REPLACE VIEW default.ids AS", "SHOW TABLES IN default LIKE 'ids__mvflow_*'"):
        assert text in script, text
