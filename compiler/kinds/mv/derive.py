"""Every SQL text derived for an MV, by name, as written under ``target/run/<mv>/`` and run by the
refresh (pure): statements are text with named markers (``IDENTIFIER(:base_table)``, ``:batch``)
bound at run time; ``explain`` is the readable account ``mvflow explain`` prints."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable

from sqlglot import exp

from ...parse import pretty
from ...table_format import readable_view
from .analyze import mv_plan
from .inputs import BATCH
from .plan import DELETED, SLOTS, MvPlan
from .queries import (affected_keys_query, aliased_table, change_query, chunk_query, delta_query, diff_ways, diffed,
                      full_query, group_rows, identifier_table, key_query, key_query_methods, lookup_query, merge_statement, mode_words,
                      partitions_query, refresh_query, snapshot_query, state_query, stored_grain_keys, stored_query, stored_version_query,
                      touched_groups, version_diff_query, walk_query)

if TYPE_CHECKING:
    from ...manifest import Manifest, Model

DUPLICATES_SHOWN = 5  # MV keys a batch holds twice, named in the error
COLUMNS = ":columns"  # a CREATE TABLE's column list, bound at run time to another table's (bind_columns)


@dataclass(frozen=True)
class Derived:
    """Every SQL text derived for one MV, by name (manifest ``derived``, ``mvflow explain``)."""

    queries: dict[str, str] = field(default_factory=dict)

    def __getitem__(self, name: str) -> str:
        return self.queries[name]


def derived(manifest: "Manifest", model: "Model") -> Derived:
    """The MV's derived SQL, once per compiled manifest (its run files, manifest.json, the file
    check and the refresh all read it)."""
    return manifest.derived("mv_derived", model, lambda: derive(mv_plan(model, manifest)))


def derive(plan: MvPlan) -> Derived:
    """All derived SQL of an MV, deterministic and pretty (Spark dialect)."""
    q: dict[str, str] = {}
    q["create_schema"] = f"CREATE DATABASE IF NOT EXISTS {plan.relation.split('.')[0]}"
    q["readable_view"] = readable_view(plan.relation)  # after each view under the model's name
    q["full"] = pretty(full_query(plan))
    q["refresh"] = pretty(refresh_query(plan))
    for input_id, info in plan.inputs.items():
        if "versions" in diff_ways(info):
            q[f"versions:{input_id}"] = pretty(version_diff_query(plan, input_id))
        if "snapshots" in diff_ways(info) or not diffed(info):
            q[f"changes:{input_id}"] = pretty(change_query(plan, input_id))
            if info.mode in ("position", "changes"):
                q[f"changes:{input_id}"] = (f"-- t: the key and position columns of {info.feed or info.relation}, its rows past "
                                            "the last position as the batch's probe read them\n" + q[f"changes:{input_id}"])
        if "snapshots" in diff_ways(info):
            snapshot = plan.table_name(f"snap_{info.slug}")
            select = pretty(snapshot_query(plan, input_id))
            # a build's snapshot: the table made by the write of its first partition (one Spark job)
            q[f"create_snapshot:{input_id}"] = f"CREATE TABLE {snapshot}\nUSING parquet\nPARTITIONED BY ({BATCH})\nAS\n{select}"
            q[f"snapshot:{input_id}"] = f"INSERT OVERWRITE TABLE {snapshot} PARTITION ({BATCH})\n{select}"
            q[f"drop_snapshot:{input_id}"] = f"DROP TABLE IF EXISTS {snapshot}"
            # a partition spec takes a literal only: the runner binds the batch into the text (bind_literal)
            q[f"drop_snapshot_batch:{input_id}"] = f"ALTER TABLE {snapshot} DROP IF EXISTS PARTITION ({BATCH} = :batch)"
        for part in plan.parts:
            query = key_query(plan, input_id, part)
            if query is not None:
                q[f"key:{input_id}:p{part.index}"] = pretty(query)
    for part in plan.parts:
        for name, query in (("lookup", lookup_query(plan, part)), ("walk", walk_query(plan, part))):
            if query is not None:
                q[f"{name}:p{part.index}"] = pretty(query)
    delta = plan.table_format == "delta"
    q["stored"] = pretty(stored_version_query(plan) if delta else stored_query(plan))
    for part in plan.parts:
        q[f"chunk:p{part.index}"] = pretty(chunk_query(plan, part))
        if part.partitions:
            q[f"partitions:p{part.index}"] = pretty(partitions_query(plan, part))
    q["keys"] = pretty(affected_keys_query(plan))
    q["drop_changes"] = f"DROP TABLE IF EXISTS {plan.table_name('changes')}"
    (_derive_delta if delta else _derive_parquet)(plan, q)
    return Derived(q)


def _derive_delta(plan: MvPlan, q: dict[str, str]) -> None:
    """A Delta MV: one table under the model's name, replaced by a build, merged into by a batch."""
    from ...table_format import DELTA_PROPERTIES, cluster_clause, properties_clause, using

    table = plan.table
    # Built without deletion vectors: a small MV keeps none (``DeltaStorage.deletion_vectors``).
    q["build"] = f"CREATE OR REPLACE TABLE {table}\n{using('delta', cluster_by=plan.cluster_by)}\nAS\n{q['full']}"
    q["deletion_vectors"] = f"ALTER TABLE {table} SET {properties_clause(DELTA_PROPERTIES)}"
    # a changed cluster_by: a metadata-only commit, then "optimize" clusters the files (rows stay)
    q["cluster_by"] = f"ALTER TABLE {table} {cluster_clause(plan.cluster_by)}"
    # the MERGE's source, the batch's rows, comes in as a DataFrame (a checkpoint: DeltaStorage._merge)
    q["merge_rows"] = pretty(delta_query(plan, batch=False, counted=plan.grouped is not None))
    if plan.grouped:
        q["count_groups"] = pretty(exp.select(exp.alias_(exp.func("COUNT", exp.Star()), "groups"))
                                   .from_(aliased_table(table, "t")).where(group_rows(plan, "t")))
    q["merge"] = merge_statement(plan)
    # Delta's parser takes a literal only here: the runner binds the version into the text (bind_literal).
    q["restore"] = f"RESTORE TABLE {table} TO VERSION AS OF :version"
    q["optimize"] = f"OPTIMIZE {table}"
    q["create_changes"] = _create_changes(plan)
    if table != plan.relation:  # readers see the SELECT's columns (group rows) through a view under the model's name
        visible = exp.select(*[exp.column(c, "t") for c in plan.columns]).from_(aliased_table(table, "t"))
        visible = visible.where(group_rows(plan, "t"), copy=False) if plan.grouped else visible
        q["reader_view"] = f"CREATE OR REPLACE VIEW {plan.relation} AS\n{pretty(visible)}"
        q["drop_table"] = f"DROP TABLE IF EXISTS {plan.relation}"  # a Delta MV's table under its name, when it was one
    else:  # the table beside a view, when it was one
        q["drop_rows"] = f"DROP TABLE IF EXISTS {plan.table_name('rows')}"
    q["publish"], q["publish_all"] = _publish(plan), _publish(plan, every=True)
    # the parquet format's storage, when a model switches to Delta
    q["drop_view"] = f"DROP VIEW IF EXISTS {plan.relation}"
    for slot in SLOTS:
        for what in ("base", "delta"):
            q[f"drop:{what}_{slot}"] = f"DROP TABLE IF EXISTS {plan.table_name(f'{what}_{slot}')}"


def _derive_parquet(plan: MvPlan, q: dict[str, str]) -> None:
    """A parquet MV: base slots a/b, a delta partitioned by batch, a merge-on-read view."""
    base, delta = "IDENTIFIER(:base_table)", "IDENTIFIER(:delta_table)"
    q["drop_base"] = f"DROP TABLE IF EXISTS {base}"
    q["drop_delta"] = f"DROP TABLE IF EXISTS {delta}"
    q["build_base"] = f"CREATE TABLE {base}\nUSING parquet\nAS\n{q['full']}"
    q["create_delta"] = (f"CREATE TABLE {delta} ({COLUMNS}, {DELETED} BOOLEAN, {BATCH} BIGINT)\nUSING parquet\n"
                         f"PARTITIONED BY ({BATCH})")  # the base's columns
    q["write_delta"] = f"INSERT OVERWRITE TABLE {delta} PARTITION ({BATCH})\n{pretty(delta_query(plan))}"
    # a batch of few keys as one file: readers open each delta file on every query
    one_file = delta_query(plan)
    one_file.set("hint", exp.Hint(expressions=[exp.Anonymous(this="COALESCE", expressions=[exp.Literal.number(1)])]))
    q["write_delta_small"] = f"INSERT OVERWRITE TABLE {delta} PARTITION ({BATCH})\n{pretty(one_file)}"
    if plan.grouped:  # groups counted with the rows of a build or compaction (a batch's delta is not: see MvState)
        groups = exp.func("COUNT_IF", group_rows(plan, "b"))
        q["count_base"] = pretty(exp.select(exp.alias_(exp.func("COUNT", exp.Star()), "rows"), exp.alias_(groups, "groups"))
                                 .from_(identifier_table("base_table", "b")))
    # a batch's rows must hold each MV key once (a Delta MERGE refuses them otherwise): checked before the commit
    keys = ", ".join(exp.column(k).sql(dialect="spark") for k in plan.key)  # quoted where Spark needs it
    q["batch_duplicates"] = (f"SELECT {keys}, COUNT(*) AS rows\nFROM {delta}\nWHERE {BATCH} = :batch\n"
                             f"GROUP BY {keys}\nHAVING COUNT(*) > 1\nORDER BY {keys}\nLIMIT {DUPLICATES_SHOWN}")
    q["drop_batch"] = f"ALTER TABLE {delta} DROP IF EXISTS PARTITION ({BATCH} = :batch)"  # bind_literal: a literal only
    q["create_changes"] = _create_changes(plan)
    q["publish"], q["publish_all"] = _publish(plan), _publish(plan, every=True)
    # the size of the delta, so that readers' plans broadcast a small one instead of shuffling the base
    q["delta_stats"] = f"ANALYZE TABLE {delta} COMPUTE STATISTICS NOSCAN"
    for slot in SLOTS:
        visible = pretty(state_query(plan, columns=plan.columns, slot=slot))
        q[f"view:{slot}"] = f"CREATE OR REPLACE VIEW {plan.relation} AS\n{visible}"
        # an empty delta (after a build or a compaction): readers read the base alone, no merge
        plain = exp.select(*[exp.column(c, "b") for c in plan.columns]).from_(aliased_table(plan.table_name(f"base_{slot}"), "b"))
        plain = pretty(plain.where(group_rows(plan, "b"), copy=False) if plan.grouped else plain)
        q[f"plain:{slot}"] = f"CREATE OR REPLACE VIEW {plan.relation} AS\n{plain}"
    q["state"] = pretty(state_query(plan))  # the current rows with their hidden keys, what a compaction keeps
    q["compact"] = f"CREATE TABLE {base}\nUSING parquet\nAS\nSELECT *\nFROM {plan.view_name('current')}"
    # the Delta format's tables, when a model switches to parquet (its view takes the name)
    q["drop_table"] = f"DROP TABLE IF EXISTS {plan.relation}"
    q["drop_rows"] = f"DROP TABLE IF EXISTS {plan.table_name('rows')}"


def bind_columns(text: str, columns: str) -> str:
    """``text`` with its ``:columns`` marker replaced by ``columns``, the definitions of another
    table's columns (``table_format.column_definitions``): a table made like one that a build
    wrote, of types known only then, without the Spark job of a ``CREATE TABLE … AS … LIMIT 0``.

    >>> bind_columns("CREATE TABLE t (:columns, b BIGINT)", "`id` bigint")
    'CREATE TABLE t (`id` bigint, b BIGINT)'
    """
    return text.replace(COLUMNS, columns, 1)


def bind_literal(text: str, name: str, value: int) -> str:
    """``text`` with the marker ``:name`` replaced by the integer ``value``, for the few statements
    whose grammar takes a literal only where a parameter is wanted (a partition spec, Delta's
    ``RESTORE``); an integer cannot inject anything.

    >>> bind_literal("RESTORE TABLE t TO VERSION AS OF :version", "version", 7)
    'RESTORE TABLE t TO VERSION AS OF 7'
    """
    return re.sub(rf":{name}\b", str(int(value)), text)


def _publish(plan: MvPlan, every: bool = False) -> str:
    """The keys a batch replaced, for the MVs that read this one (``MvPlan.published_key``): the
    affected keys; with a grain, the stored keys of the affected main keys and the recomputed
    ones; of a GROUP BY MV, the groups it recomputed. ``every``: a build's, from the view ``keys``."""
    batch = exp.alias_(exp.cast(exp.Placeholder(this="batch"), "BIGINT"), BATCH)
    keys: exp.Expression = exp.to_table(plan.view_name("keys"))
    if plan.grouped and not every:
        keys = touched_groups(plan).subquery("k")
    elif plan.grain and not every:
        keys = exp.union(stored_grain_keys(plan), exp.select(*plan.key).from_(plan.view_name("rows")),
                         distinct=True).subquery("k")
    select = pretty(exp.select(*plan.published_key, batch).from_(keys))
    return f"INSERT OVERWRITE TABLE {plan.table_name('changes')} PARTITION ({BATCH})\n{select}"


def _create_changes(plan: MvPlan) -> str:
    """The table publishing each batch's MV keys for stacked MVs (parquet, a partition per batch):
    the published key columns of the MV's table, with their types (``bind_columns``)."""
    return (f"CREATE TABLE IF NOT EXISTS {plan.table_name('changes')} ({COLUMNS}, {BATCH} BIGINT)\nUSING parquet\n"
            f"PARTITIONED BY ({BATCH})")


def input_paths(plan: MvPlan) -> dict[str, dict]:
    """Per input: its change mode, key, the columns the MV uses (what makes a change relevant)
    and, per part, the join path from the main source with how its changes reach main keys.

    >>> from compiler.kinds.mv.analyze import plan_from_sql
    >>> plan = plan_from_sql("SELECT o.id, s.name FROM d.o AS o JOIN d.s AS s ON s.id = o.sid",
    ...                      {"d.o": ("position", ("id",)), "d.s": ("position", ("id",))})
    >>> [(p["path"], p["method"]) for p in input_paths(plan)["d.s"]["paths"]][0]
    (['d.o AS o', 'd.s AS s'], 'old state: MV rows whose hidden key columns match')
    """
    result = {}
    for input_id, info in plan.inputs.items():
        paths = []
        for part in plan.parts:
            for alias, method, _ in key_query_methods(plan, input_id, part):
                chain = [part.main_alias] if alias == part.main_alias else [*part.ancestors(alias), alias]
                names = [f"{part.main_input if a == part.main_alias else part.link(a).input} AS {a}" for a in chain]
                paths.append({"part": part.index, "alias": alias, "path": names, "method": method})
        result[input_id] = {"mode": info.mode, "key": list(info.key), "uses": list(info.used_columns), "paths": paths}
    return result


def explain(plan: MvPlan, notes: Iterable[str] = ()) -> str:
    """A readable account of what mvflow derived for an MV (``mvflow explain``); ``notes`` are
    lines said after the key (the refresh strategy and its estimates, ``compiler.kinds.mv.strategy``)."""
    lines = [f"mv {plan.name} ({plan.relation}) from {plan.path}",
             f"  unique key: {', '.join(plan.key)}",
             *([f"  grain: one row per main key and per row of each one-to-many join ({', '.join(plan.grain)}); "
                "a refresh replaces every row of an affected main key"] if plan.grain else []),
             *([f"  grouped by: {', '.join(plan.visible_key)} (readers' key); the table also keeps a member row "
                f"per main row ({', '.join(plan.grouped.main_key_columns)}); a refresh recomputes the groups the "
                "members of the affected main keys were in or are in now"] if plan.grouped else []),
             f"  hidden key columns: {', '.join(plan.hidden) or '(none)'}",
             *([f"  reads through the views {', '.join(plan.views)}: their SQL is expanded into the SELECT (its CTEs "
                "inlined, * expanded), their tables are the inputs, and a change of their SQL rebuilds the MV"]
               if plan.views else []),
             *([f"  aggregates joined back, each made an mv of its own: {', '.join(plan.lifted)} (refreshed by group "
                "before this one, which reads the groups they change by their GROUP BY columns)"] if plan.lifted else []),
             *([f"  stored in {plan.table}, read through the view {plan.relation} (the SELECT's columns"
                f"{' of the group rows' if plan.grouped else ''})"] if plan.table_format == "delta" and plan.table != plan.relation else []),
             *notes]
    for part in plan.parts:
        mine = part.rows_condition("mv")
        disc = f", its rows: {mine.sql(dialect='spark')}" if mine is not None else ""
        lines.append(f"  part {part.index}: main {part.main_input} AS {part.main_alias} (key {', '.join(part.main_key)}){disc}")
        if part.partitions:
            lines.append(f"    windows partitioned by {', '.join(e.sql(dialect='spark') for _, e in part.partitions)} "
                         f"(kept in {', '.join(n for n, _ in part.partitions)}): a refresh recomputes every row of the "
                         "partitions the affected main keys were in or are in now")
        for link in part.links:
            how = ", ".join([f"{k} = {c.sql(dialect='spark')}" for k, c in link.bound] +
                            [f"{k} = {v.sql(dialect='spark')}" for k, v in link.literals])
            if link.many:
                lines.append(f"    {link.side} join {link.input} AS {link.alias} one-to-many on ({how}), "
                             f"its rows told apart by their key ({', '.join(link.key)})")
                continue
            how = f"unique key {', '.join(link.via)}: {how}" if link.via else how
            lines.append(f"    {link.side} join {link.input} AS {link.alias} on key ({how})")
    lines.append("  inputs:")
    for input_id, info in plan.inputs.items():
        key_from = f", {info.key_from}" if info.key_from else ""
        lines.append(f"    {input_id}: {mode_words(info)}, key ({', '.join(info.key)}{key_from}), uses {', '.join(info.used_columns)}")
        for part in plan.parts:
            for alias, method, _ in key_query_methods(plan, input_id, part):
                lines.append(f"      p{part.index} {alias}: {method}")
    derived = derive(plan)
    for name, sql in derived.queries.items():
        lines += ["", f"-- {name}", sql.rstrip() + ";"]
    for warning in plan.warnings:
        lines.append(f"warning: {warning.format()}")
    return "\n".join(lines) + "\n"


