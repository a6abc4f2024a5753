"""dbt's macro library in a dbt project: the cross-database macros dbt documents (``dbt.dateadd``,
``dbt.type_string()`` …), read from the installed dbt-adapters and dbt-spark packages
(``compiler/dbt/macros.py``), rendered as dbt renders them and run on Spark; ``adapter.dispatch``
finds a project's own implementation first; ``return()`` works between macros of one file.
``tests/test_dbt_projects.py`` (slow tier) compares a model using them with dbt's own tables."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from compiler.cli import main
from compiler.compile import compile_project
from compiler.dbt import macros
from compiler.project import load_project

PROFILE = """
shop:
  target: dev
  outputs:
    dev: {type: spark, method: session, host: NA, schema: shop_dev}
"""
ROWS = """
with t as (
    select * from values
        (1, 'a-b-c', timestamp'2024-03-15 10:20:30', date'2024-01-31', true, 'x'),
        (1, 'd', timestamp'2024-02-29 00:00:00', date'2024-02-29', false, 'y'),
        (2, 'it''s', timestamp'2023-12-31 23:59:59', date'2023-12-31', false, 'z')
    as t(g, s, ts, d, flag, letter)
)
"""
# every cross-database macro of dbt's documentation that renders SQL without querying the database
SCALARS = ROWS + """
select
    g, s,
    {{ dbt.date_trunc('month', 'ts') }} as month_start,
    {{ dbt.dateadd('day', 3, 'ts') }} as plus_3_days,
    {{ dbt.dateadd('month', 1, 'd') }} as plus_1_month,
    {{ dbt.dateadd('hour', -2, 'ts') }} as minus_2_hours,
    {{ dbt.datediff('d', 'ts', 'day') }} as days_between,
    {{ dbt.datediff("date'2023-11-30'", 'd', 'month') }} as months_between,
    {{ dbt.last_day('d', 'month') }} as month_end,
    {{ dbt.date(2024, 3, 15) }} as a_date,
    cast(g as {{ dbt.type_string() }}) as g_string,
    cast(g as {{ dbt.type_numeric() }}) as g_numeric,
    cast(g as {{ dbt.type_bigint() }}) as g_bigint,
    cast(g as {{ dbt.type_int() }}) as g_int,
    cast(g as {{ dbt.type_float() }}) as g_float,
    cast(flag as {{ dbt.type_boolean() }}) as flag_boolean,
    cast(d as {{ dbt.type_timestamp() }}) as d_timestamp,
    {{ dbt.safe_cast("'12'", api.Column.translate_type('int')) }} as cast_12,
    {{ dbt.cast("'7'", dbt.type_bigint()) }} as cast_7,
    {{ dbt.cast_bool_to_text('flag') }} as flag_text,
    {{ dbt.concat(['s', "'/'", 'letter']) }} as joined,
    {{ dbt.hash('letter') }} as letter_md5,
    {{ dbt.split_part("concat(s, '-end')", "'-'", 2) }} as second_part,
    {{ dbt.length('s') }} as s_length,
    {{ dbt.position("'b'", 's') }} as b_at,
    {{ dbt.replace('s', "'-'", "'+'") }} as replaced,
    {{ dbt.right('s', 2) }} as last_two,
    {{ dbt.string_literal(dbt.escape_single_quotes("it's")) }} as quoted,
    {{ dbt.array_construct(['g', 'g + 1']) }} as pair,
    {{ dbt.array_append(dbt.array_construct(['g']), '9') }} as appended,
    {{ dbt.array_concat(dbt.array_construct(['1']), dbt.array_construct(['2'])) }} as concatenated,
    {{ dbt.equals('letter', "'x'") }} as is_x,
    {{ dbt.current_timestamp() }} is not null as has_now
from t
"""
AGGREGATES = ROWS + """
select
    g,
    {{ dbt.listagg('letter', "','") }} as letters,
    {{ dbt.bool_or('flag') }} as any_flag,
    {{ dbt.any_value('g') }} as some_g
from t
group by g
"""
SET_OPERATIONS = ROWS + """
select 'except' as op, g from (select g from t {{ dbt.except() }} select 1)
union all
select 'intersect' as op, g from (select g from t {{ dbt.intersect() }} select 1)
"""


@pytest.fixture
def dbt_project(tmp_path):
    (tmp_path / "dbt_project.yml").write_text("name: shop\nprofile: shop\nconfig-version: 2\n")
    (tmp_path / "profiles.yml").write_text(PROFILE)
    (tmp_path / "models").mkdir()
    return tmp_path


def _compiled(root, **models: str) -> dict[str, str]:
    for name, sql in models.items():
        (root / "models" / f"{name}.sql").write_text(sql)
    manifest = compile_project(load_project(root))
    return {name: manifest.models[name].sql for name in models}


def test_the_cross_database_macros_render_as_dbt_spark_renders_them_and_run_on_spark(spark, dbt_project):
    if not macros.library_files():
        pytest.fail("dbt's macro library is not installed: scripts/setup.sh installs it (dbt-adapters, dbt-spark)")
    sql = _compiled(dbt_project, scalars=SCALARS, aggregates=AGGREGATES, set_operations=SET_OPERATIONS)
    rows = {row.s: row for row in spark.sql(sql["scalars"]).collect()}
    first, leap, quote = rows["a-b-c"], rows["d"], rows["it's"]
    assert first.month_start == dt.datetime(2024, 3, 1) and first.plus_3_days == dt.datetime(2024, 3, 18, 10, 20, 30)
    assert first.plus_1_month == dt.datetime(2024, 2, 29) and first.minus_2_hours == dt.datetime(2024, 3, 15, 8, 20, 30)
    assert (first.days_between, leap.days_between, quote.days_between) == (44, 0, 0)
    # dbt-spark's month count: whole months, plus one when the day of month falls back (29 < 30)
    assert (first.months_between, leap.months_between) == (2, 4)
    assert (first.month_end, leap.month_end) == (dt.date(2024, 1, 31), dt.date(2024, 2, 29))
    assert first.a_date == dt.date(2024, 3, 15)
    assert (first.g_string, first.g_numeric, first.g_bigint, first.g_int, first.g_float) == ("1", Decimal("1.000000"), 1, 1, 1.0)
    assert first.flag_boolean is True and first.d_timestamp == dt.datetime(2024, 1, 31)
    assert (first.cast_12, first.cast_7, first.flag_text) == (12, 7, "true")
    assert (first.joined, first.second_part, leap.second_part, first.s_length, first.b_at) == ("a-b-c/x", "b", "end", 5, 3)
    assert first.letter_md5 == "9dd4e461268c8034f5c8564e155c67a6"  # md5('x')
    assert (first.replaced, first.last_two, first.quoted) == ("a+b+c", "-c", "it's")
    assert (first.pair, first.appended, first.concatenated) == ([1, 2], [1, 9], [1, 2])
    assert (first.is_x, leap.is_x, first.has_now) == (True, False, True)
    assert len(rows) == 3
    groups = {row.g: row for row in spark.sql(sql["aggregates"]).collect()}
    assert (sorted(groups[1].letters.split(",")), groups[1].any_flag, groups[1].some_g) == (["x", "y"], True, 1)
    assert (groups[2].letters, groups[2].any_flag) == ("z", False)
    assert sorted(tuple(row) for row in spark.sql(sql["set_operations"]).collect()) == [("except", 2), ("intersect", 1)]


def test_a_projects_own_implementation_is_dispatched_first_and_return_works_within_a_file(dbt_project):
    (dbt_project / "macros").mkdir()
    (dbt_project / "macros" / "dates.sql").write_text(
        "{% macro spark__dateadd(datepart, interval, from_date_or_timestamp) %}"
        "timestampadd({{ datepart }}, {{ interval }}, {{ from_date_or_timestamp }}){% endmacro %}\n"
        "{% macro unit_of(part) %}{{ return(part | upper) }}{% endmacro %}\n"
        "{% macro shifted(column) %}{{ dbt.dateadd(unit_of('day'), 1, column) }}{% endmacro %}\n")
    sql = _compiled(dbt_project, m="select {{ shifted('ts') }} as x, {{ dbt.type_string() }} as t from src")["m"]
    assert "timestampadd(day, 1, ts) as x, string as t" in sql.lower(), sql


def test_without_the_library_a_call_names_the_line_and_the_package_to_install(dbt_project, monkeypatch, capsys):
    monkeypatch.setattr("compiler.render.library_files", lambda: ())
    (dbt_project / "models" / "m.sql").write_text("select\n  {{ dbt.date_trunc('day', 'ts') }} as d\nfrom src\n")
    (dbt_project / "models" / "n.sql").write_text("select {{ dateadd('day', 1, 'ts') }} as d from src\n")
    with pytest.raises(SystemExit) as exit_:
        main(["--project-dir", str(dbt_project), "compile"])
    err = capsys.readouterr().err
    assert exit_.value.code != 0 and "Traceback" not in err
    assert "models/m.sql:2" in err and "dbt.date_trunc: dbt's macro library is not installed" in err, err
    assert "models/n.sql:1" in err and "'dateadd' is undefined" in err and "pip install 'mvflow[dbt]'" in err, err


def test_exceptions_warn_is_a_compile_warning_at_the_models_line(dbt_project, capsys):
    (dbt_project / "macros").mkdir()
    (dbt_project / "macros" / "checks.sql").write_text(
        "{% macro stale(days) %}{% if days > 3 %}{% do exceptions.warn('data is ' ~ days ~ ' days old') %}{% endif %}"
        "{% endmacro %}\n")
    (dbt_project / "models" / "m.sql").write_text("select 1 as x\n{{ stale(5) }}\n{{ stale(1) }}\n")
    main(["--project-dir", str(dbt_project), "parse"])
    assert "warning: models/m.sql:2: [dbt-warn] data is 5 days old" in capsys.readouterr().err


def test_log_with_info_is_a_line_at_compile_and_without_it_nothing(dbt_project, capsys):
    """dbt prints ``log(msg, info=True)`` on the console; without ``info`` only into its log file."""
    (dbt_project / "models" / "m.sql").write_text(
        "{{ log('rows from ' ~ 'raw', info=True) }}\nselect 1 as x\n{{ log('debugging only') }}\n")
    main(["--project-dir", str(dbt_project), "parse"])
    err = capsys.readouterr().err
    assert "log: models/m.sql:1: [dbt-log] rows from raw" in err and "debugging only" not in err, err
    assert "warning:" not in err, err
