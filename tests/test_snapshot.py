"""dbt's snapshots (``compiler/kinds/snapshot.py``): the fixture's three snapshots of the
``raw_tickets`` seed (timestamp and check with hard deletes invalidated, a YAML snapshot with
``dbt_valid_to_current``) and one more (check on a two-column key, deletes as new records) taken
over three states of the seed, compared after each with a reference history computed here in
Python (the oracle); a column the SELECT gains is added to the table. tests/test_dbt_projects.py
compares the fixture's snapshots with dbt-spark's, which fails on a two-column key past the first
run (it adds its own dbt_unique_key_1 column to the table, then finds it ambiguous) and leaves
the columns of a new_record deletion null."""

from __future__ import annotations

import hashlib
import re
import shutil
import textwrap
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pytest

from compiler.cli import main
from compiler.compile import compile_project
from compiler.errors import CompileError
from compiler.project import load_project
from compiler.table_format import delta_version

FIXTURE = Path(__file__).parent / "fixtures" / "dbt_shop"
SCHEMAS = ("shop_dev", "shop_dev_raw", "shop_dev_history")
T1, T2, T3, T4, T5 = (f"2024-01-0{d} 09:00:00" for d in range(1, 6))
STATES = [
    "id,owner,state,updated_at\n1,ann,open,{T1}\n2,bob,open,{T1}\n3,cid,open,{T1}\n4,dee,,{T1}\n",
    # 1 closed; 2 changes owner, not its time; 3 deleted; 4 gets a state; 5 new
    "id,owner,state,updated_at\n1,ann,closed,{T2}\n2,bea,open,{T1}\n4,dee,open,{T3}\n5,eve,open,{T3}\n",
    # a new column; 2 deleted; 3 back, later; 5 closed
    "id,owner,state,updated_at,priority\n1,ann,closed,{T2},1\n3,cid,open,{T4},2\n4,dee,open,{T3},3\n5,eve,closed,{T5},4\n",
]
FAR = datetime(9999, 12, 31)
OWNERS = """{% snapshot ticket_owners %}
{{ config(strategy='check', unique_key=['id', 'owner'], check_cols=['state'], hard_deletes='new_record') }}
select id, owner, state from {{ ref('raw_tickets') }}
{% endsnapshot %}
"""


@dataclass
class Version:
    row: dict
    valid_from: object
    valid_to: object
    deleted: bool = False
    updated: object = None


@dataclass
class Reference:
    """The history a snapshot must hold, by dbt's documented rules, one run at a time."""

    key: tuple[str, ...]
    columns: tuple[str, ...] | None  # the SELECT's (None: every column of the seed)
    strategy: str
    checked: tuple[str, ...] = ()
    deletes: str = "ignore"
    current_to: object = None  # what dbt_valid_to holds in current versions
    versions: list[Version] = field(default_factory=list)

    def take(self, rows: list[dict], run: int) -> None:
        now = ("now", run)
        rows = [{c: r.get(c) for c in self.columns or r} for r in rows]
        current = {self._key(v.row): v for v in self.versions if v.valid_to == self.current_to}
        for row in rows:
            stamp = _time(row["updated_at"]) if self.strategy == "timestamp" else now
            version = current.get(self._key(row))
            if version is not None and not (version.deleted or self._changed(version, row)):
                continue
            if version is not None:
                version.valid_to = stamp
            self.versions.append(Version(row, stamp, self.current_to, updated=stamp))
        present = {self._key(r) for r in rows}
        for key, version in current.items():
            if key in present or self.deletes == "ignore" or version.deleted:
                continue
            version.valid_to = now
            if self.deletes == "new_record":
                self.versions.append(Version(version.row, now, self.current_to, deleted=True, updated=now))

    def _key(self, row: dict) -> tuple:
        return tuple(row[k] for k in self.key)

    def _changed(self, version: Version, row: dict) -> bool:
        if self.strategy == "timestamp":
            return version.valid_from < _time(row["updated_at"])
        return any(version.row.get(c) != row.get(c) for c in self.checked)

    def rows(self, columns: list[str]) -> list[tuple]:
        return sorted((tuple(_cast(v.row.get(c)) for c in columns) + (v.valid_from, v.valid_to)
                       + (("True" if v.deleted else "False",) if self.deletes == "new_record" else ()) for v in self.versions),
                      key=repr)


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _cast(value):
    if value in ("", None):
        return None
    if value.isdigit():
        return int(value)
    return _time(value) if value[:2] == "20" else value


def _references() -> dict[str, Reference]:
    return {
        "tickets_history": Reference(("id",), ("id", "owner", "state", "updated_at"), "timestamp", deletes="invalidate"),
        "ticket_states": Reference(("id",), ("id", "owner", "state"), "check", ("state", "owner"), deletes="invalidate"),
        "ticket_owners": Reference(("id", "owner"), ("id", "owner", "state"), "check", ("state",), deletes="new_record"),
        "tickets_since": Reference(("id",), None, "timestamp", current_to=FAR),
    }


def _actual(spark, name: str, reference: Reference, started: datetime) -> tuple[list[str], list[tuple]]:
    """The snapshot's rows as the reference writes them: times of the runs (after ``started``) as
    ("now", n), n counted from the first run that stamped any."""
    frame = spark.table(f"shop_dev_history.{name}")
    own = [c for c in frame.columns if not c.startswith("dbt_")]
    shown = own + ["dbt_valid_from", "dbt_valid_to"] + (["dbt_is_deleted"] if reference.deletes == "new_record" else [])
    rows = [tuple(r) for r in frame.select(*shown).collect()]
    stamps = sorted({v for row in rows for v in row if isinstance(v, datetime) and started <= v < FAR})
    runs = sorted({v[1] for version in reference.versions for v in (version.valid_from, version.valid_to) if isinstance(v, tuple)})
    assert len(stamps) == len(runs), (name, stamps, runs)
    marks = dict(zip(stamps, (("now", run) for run in runs)))
    return own, sorted((tuple(marks.get(v, v) for v in row) for row in rows), key=repr)


def test_snapshots_keep_each_tickets_history_as_dbt_defines_it(spark, tmp_path, capsys):
    project = shutil.copytree(FIXTURE, tmp_path / "shop")
    seed = project / "data" / "raw_tickets.csv"
    snapshots = _references()
    owners = project / "snapshots" / "owners.sql"
    owners.write_text(OWNERS)
    started = datetime.now()
    try:
        for run, state in enumerate(STATES, 1):
            text = state.format(T1=T1, T2=T2, T3=T3, T4=T4, T5=T5)
            seed.write_text(text)
            if run == 3:  # the check snapshot's SELECT gains the new column
                owners.write_text(OWNERS.replace("select id, owner, state from", "select id, owner, state, priority from"))
            if run == 1:
                main(["--project-dir", str(project), "build", "-s", "raw_tickets+"])  # the seed, then its snapshots
            else:
                main(["--project-dir", str(project), "seed", "-s", "raw_tickets"])
                main(["--project-dir", str(project), "snapshot"])
            header, *lines = text.strip().split("\n")
            rows = [dict(zip(header.split(","), line.split(","))) for line in lines]
            for name, reference in snapshots.items():
                if run == 3 and name == "ticket_owners":
                    reference.columns += ("priority",)
                reference.take(rows, run)
                columns, actual = _actual(spark, name, reference, started)
                assert actual == reference.rows(columns), (run, name)
        out, err = capsys.readouterr()
        assert "OK    snapshot tickets_history" in out and "Traceback" not in out + err
        history = spark.table("shop_dev_history.tickets_history").collect()
        assert all(r.dbt_scd_id == hashlib.md5(f"{r.id}|{r.updated_at}".encode()).hexdigest() for r in history)
        states = spark.table("shop_dev_history.ticket_owners")
        assert states.count() == states.select("dbt_scd_id").distinct().count()
        assert "priority" in spark.table("shop_dev_history.tickets_since").columns  # select * gained it too

        main(["--project-dir", str(project), "run", "-s", "raw_tickets+"])  # `run` takes no snapshot (as dbt's)
        assert "snapshot" not in capsys.readouterr().out
    finally:
        for schema in SCHEMAS:
            spark.sql(f"DROP DATABASE IF EXISTS {schema} CASCADE")


@pytest.mark.parametrize("change, expected", [
    (lambda s: s.replace("unique_key='id', ", ""), "snapshots/tickets.sql:3: [bad-config] a snapshot needs a unique_key"),
    (lambda s: s.replace("strategy='check'", "strategy='latest'"),
     "snapshots/tickets.sql:9: [bad-config] a snapshot needs strategy 'timestamp' or 'check', got 'latest'"),
    (lambda s: s.replace("file_format='delta') }}", "file_format='parquet') }}"),
     "snapshots/tickets.sql:3: [bad-config] a snapshot needs the delta table format"),
    (lambda s: s.replace("hard_deletes='invalidate',", "hard_deletes='purge',"),
     "snapshots/tickets.sql:9: [bad-config] invalid hard_deletes 'purge'"),
    (lambda s: s.replace("select id, owner, state from", "select id, owner, state, 1 as dbt_valid_to from"),
     "the snapshot's SELECT has column dbt_valid_to, which the snapshot adds itself"),
    (lambda s: "select 1 as id\n", "snapshots/tickets.sql:1: [bad-snapshot] a snapshot file holds no {% snapshot name %}"),
])
def test_snapshot_config_errors_are_one_line_at_their_place(tmp_path, capsys, change, expected):
    project = shutil.copytree(FIXTURE, tmp_path / "shop")
    sql = project / "snapshots" / "tickets.sql"
    sql.write_text(change(sql.read_text()))
    with pytest.raises(SystemExit) as exit_:
        main(["--project-dir", str(project), "compile"])
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and expected in err and "Traceback" not in out + err, err


def test_a_yaml_snapshot_names_a_ref_or_a_source(tmp_path):
    project = shutil.copytree(FIXTURE, tmp_path / "shop")
    (project / "snapshots" / "tickets.yml").write_text(textwrap.dedent("""
        snapshots:
          - name: tickets_since
            relation: "raw_tickets; drop table x"
            config: {strategy: timestamp, unique_key: id, updated_at: updated_at}
        """))
    with pytest.raises(CompileError) as error:
        compile_project(load_project(project))
    assert "snapshots/tickets.yml:4: [bad-snapshot] snapshot 'tickets_since': relation must be ref('model')" in str(error.value)
    assert len(error.value.problems) == 1, str(error.value)
    shutil.move(project / "snapshots" / "tickets.yml", project / "models" / "tickets.yml")
    with pytest.raises(CompileError) as error:
        compile_project(load_project(project))
    assert "models/tickets.yml:3: [bad-snapshot] snapshot 'tickets_since' is defined outside the snapshot folders" in str(error.value)
    manifest = compile_project(load_project(shutil.copytree(FIXTURE, tmp_path / "again")))
    since = manifest.models["tickets_since"]
    assert (since.kind.name, since.relation, since.table_format) == ("snapshot", "shop_dev_history.tickets_since", "delta")
    assert manifest.models["ticket_states"].kind.check_cols == ("state", "owner")
    assert [call.name for call in since.refs] == ["raw_tickets"]


LIVE = """
{% snapshot live_feed %}
{{ config(strategy='timestamp', unique_key='id', updated_at='updated_at', hard_deletes='invalidate') }}
select id, owner, state, updated_at from {{ source('raw', 'tickets_live') }} where state <> 'spam'
{% endsnapshot %}

{% snapshot live_whole %}
{{ config(strategy='timestamp', unique_key='id', updated_at='updated_at', hard_deletes='invalidate') }}
select * from (select id, owner, state, updated_at from {{ source('raw', 'tickets_live') }} where state <> 'spam') as t
{% endsnapshot %}
"""
LIVE_SOURCE = """
      - name: tickets_live
        identifier: tickets_live
"""


def test_a_snapshot_of_a_table_with_a_change_feed_reads_only_the_keys_it_changed(spark, tmp_path, capsys):
    """live_feed reads one Delta table row by row: after the first run it restages only the keys
    the table's Change Data Feed names (an update, a delete, an insert, a row leaving the WHERE);
    live_whole, the same SELECT nested (so read whole, as dbt does), must hold the same history."""
    project = shutil.copytree(FIXTURE, tmp_path / "shop")
    (project / "snapshots" / "live.sql").write_text(LIVE)
    sources = project / "models" / "staging" / "sources.yml"
    sources.write_text(sources.read_text().replace("    tables:\n", "    tables:" + LIVE_SOURCE, 1))
    live = "shop_dev_raw.tickets_live"
    changes = [
        f"INSERT INTO {live} VALUES (1, 'ann', 'open', TIMESTAMP'{T1}'), (2, 'bob', 'open', TIMESTAMP'{T1}'), "
        f"(3, 'cid', 'open', TIMESTAMP'{T1}'), (4, 'dee', 'open', TIMESTAMP'{T1}')",
        f"UPDATE {live} SET state = 'closed', updated_at = TIMESTAMP'{T2}' WHERE id = 1",
        f"DELETE FROM {live} WHERE id = 3",
        f"INSERT INTO {live} VALUES (5, 'eve', 'open', TIMESTAMP'{T3}')",
        f"UPDATE {live} SET state = 'spam', updated_at = TIMESTAMP'{T3}' WHERE id = 4",
    ]
    started = datetime.now()

    def snapshot() -> str:
        capsys.readouterr()
        main(["--project-dir", str(project), "snapshot", "-s", "live_feed live_whole"])
        return capsys.readouterr().out

    def history(name: str) -> list[tuple]:
        rows = spark.table(f"shop_dev_history.{name}").drop("dbt_scd_id").collect()
        return sorted((tuple("NOW" if isinstance(v, datetime) and v >= started else v for v in row) for row in rows), key=repr)

    try:
        spark.sql("CREATE DATABASE IF NOT EXISTS shop_dev_raw")
        spark.sql(f"CREATE TABLE {live} (id BIGINT, owner STRING, state STRING, updated_at TIMESTAMP) USING delta "
                  "TBLPROPERTIES (delta.enableChangeDataFeed = true)")
        spark.sql(changes[0])
        assert "first build: 4 versions" in snapshot()
        for change in changes[1:]:
            spark.sql(change)
        out = snapshot()
        assert "(the keys shop_dev_raw.tickets_live's change feed names in versions 2..5)" in out, out
        assert history("live_feed") == history("live_whole")
        closed_now = [row[0] for row in history("live_feed") if row[-1] == "NOW"]
        assert len(history("live_feed")) == 6 and sorted(closed_now) == [3, 4]  # 3 deleted, 4 left the WHERE
        assert "nothing changed: shop_dev_raw.tickets_live is still at version 5" in snapshot()
        (project / "snapshots" / "live.sql").write_text(LIVE.replace("'spam'", "'junk'"))  # another SELECT: compared whole
        out = snapshot()
        assert re.search(r"OK +snapshot live_feed +1 rows in [\d.]+s — 1 new versions, 0 closed;", out), out  # 4 is back
        assert history("live_feed") == history("live_whole") and len(history("live_feed")) == 7

        spark.sql(f"ALTER TABLE {live} SET TBLPROPERTIES (delta.enableChangeDataFeed = false)")
        spark.sql(f"UPDATE {live} SET owner = 'eva', updated_at = TIMESTAMP'{T4}' WHERE id = 5")
        spark.sql(f"ALTER TABLE {live} SET TBLPROPERTIES (delta.enableChangeDataFeed = true)")
        out = snapshot()
        assert "(whole SELECT: reading shop_dev_raw.tickets_live's change feed from version 6 failed" in out, out
        assert history("live_feed") == history("live_whole") and len(history("live_feed")) == 8
        assert "Traceback" not in out

        version = delta_version(spark, live)  # dropped and created again: its versions start over
        spark.sql(f"DROP TABLE {live}")
        spark.sql(f"CREATE TABLE {live} (id BIGINT, owner STRING, state STRING, updated_at TIMESTAMP) USING delta "
                  "TBLPROPERTIES (delta.enableChangeDataFeed = true)")
        for n in range(version):  # to the version the last run read, in another table (its id)
            spark.sql(f"INSERT INTO {live} VALUES ({n + 1}, 'new', 'open', TIMESTAMP'{T4}')")
        assert delta_version(spark, live) == version
        out = snapshot()
        assert "nothing changed" not in out and history("live_feed") == history("live_whole"), out
    finally:
        for schema in SCHEMAS:
            spark.sql(f"DROP DATABASE IF EXISTS {schema} CASCADE")
