"""compiler/sandbox.py: a template cannot reach ``os`` (nor anything else of Python's), what dbt
users write still renders, and a template that would build something huge is stopped before it
does, with a clean error at its line."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import jinja2
import pytest

from compiler.cli import main
from compiler.dbt.context import dbt_globals
from compiler.sandbox import Sandbox, SecurityError, TooLarge

FIXTURES = Path(__file__).parent / "fixtures"

#: Ways out of a Jinja template to ``os``, each running ``touch pwned`` if it got there.
ESCAPES = {
    "self": '{{ self.__init__.__globals__.__builtins__.__import__("os").popen("touch pwned").read() }}',
    "cycler": '{{ cycler.__init__.__globals__.os.popen("touch pwned").read() }}',
    "joiner": '{{ joiner.__init__.__globals__.os.popen("touch pwned").read() }}',
    "subclasses": "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "range": "{{ range.__globals__ }}",
    "lipsum": '{{ lipsum.__globals__["os"].popen("touch pwned").read() }}',
    "attr_filter": "{{ ''|attr('__class__')|attr('__mro__') }}",
    "getitem": "{{ ''['__class__'] }}",
    "format": "{{ '{0.__class__.__mro__}'.format('') }}",
    "ref": "{{ ref.__self__.project }}",
    "this": "{{ this._renderer }}",
    "env_var": "{{ env_var.__globals__['os'] }}",
}


def _project(root: Path, files: dict[str, str]) -> Path:
    for name, text in {"project.yml": "name: p\n", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def _run(project: Path, capsys, *args: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(["--project-dir", str(project), *args])
    return exit_info.value.code, capsys.readouterr().err


@pytest.mark.parametrize("payload", ESCAPES.values(), ids=ESCAPES.keys())
def test_a_sandboxed_template_cannot_reach_os(payload: str):
    env = Sandbox(undefined=jinja2.StrictUndefined, limit=10_000)
    with pytest.raises(SecurityError):
        env.from_string(payload).render(cycler=jinja2.utils.Cycler, joiner=jinja2.utils.Joiner,
                                        ref=Sandbox.getattr.__get__(env), env_var=shutil.which, this=_Private())


class _Private:
    _renderer = "secret"


def test_modules_are_reached_through_dbt_modules_only():
    env = Sandbox(undefined=jinja2.StrictUndefined, limit=10_000)
    env.globals.update(dbt_globals(env))
    template = "{{ modules.datetime.date(2024, 5, 1).isoformat() }} {{ modules.re.sub('a+', 'b', 'caat') }}"
    assert env.from_string(template).render() == "2024-05-01 cbt"
    for payload in ("{{ modules.re.enum.sys.modules['os'] }}", "{{ modules.datetime.sys }}", "{{ modules.re.functools }}"):
        with pytest.raises(SecurityError):
            env.from_string(payload).render()


@pytest.mark.parametrize("command", [["compile"], ["docs", "generate"]], ids=["compile", "docs"])
@pytest.mark.parametrize("where", ["model", "macro", "description", "test argument"])
@pytest.mark.parametrize("payload", [ESCAPES["self"], ESCAPES["cycler"], ESCAPES["subclasses"], ESCAPES["range"]],
                         ids=["self", "cycler", "subclasses", "range"])
def test_compile_and_docs_refuse_an_escape(payload: str, where: str, command: list[str], tmp_path: Path, capsys):
    files = {"models/a.sql": "select 1 as id\n"}
    if where == "model":
        files["models/a.sql"] = f"select\n  '{payload}' as id\n"
    elif where == "macro":
        files["macros/m.sql"] = f"{{% macro m() %}}\n{payload}\n{{% endmacro %}}\n"
        files["models/a.sql"] = "select '{{ m() }}' as id\n"
    else:
        entry = f"description: >\n      {payload}" if where == "description" else \
            f"columns:\n      - name: id\n        tests:\n          - accepted_values:\n              values:\n                - >-\n" \
            f"                  {payload}"
        files["models/docs.yml"] = f"models:\n  - name: a\n    {entry}\n"
    project = _project(tmp_path / "p", files)

    code, err = _run(project, capsys, *command)

    assert code == 2 and "[unsafe-template] " in err and "unsafe template: access to attribute" in err, err
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith(f"error: {'macros/m.sql:2' if where == 'macro' else 'models/a.sql:2' if where == 'model' else 'models/docs.yml:'}")
    assert not (project / "target").exists() and not (project / ".mvflow").exists()
    assert not list(tmp_path.rglob("pwned")) and not Path("pwned").exists()


def test_project_yml_values_render_in_the_sandbox(tmp_path: Path, capsys):
    project = _project(tmp_path / "p", {"project.yml": "name: p\nvars:\n  x: \"{{ cycler.__init__.__globals__.os }}\"\n",
                                        "models/a.sql": "select 1 as id\n"})
    code, err = _run(project, capsys, "compile")
    assert code == 2 and "project.yml:3: [unsafe-template]" in err, err


def test_includes_stay_inside_the_project(tmp_path: Path, capsys):
    outside = tmp_path / "secret.sql"
    outside.write_text("select 'secret' as s\n")
    for include in (str(outside), "../secret.sql"):
        project = _project(tmp_path / "p", {"models/a.sql": f"{{% include '{include}' %}}\n"})
        code, err = _run(project, capsys, "compile")
        assert code == 2 and "models/a.sql:1:" in err and "secret" not in err.replace(include, ""), err
    (tmp_path / "p" / "macros").mkdir()
    (tmp_path / "p" / "macros" / "linked.sql").symlink_to(outside)
    (tmp_path / "p" / "models" / "a.sql").write_text("{% include 'macros/linked.sql' %}\n")
    code, err = _run(tmp_path / "p", capsys, "compile")
    assert code == 2 and "[unsafe-template]" in err and "leads outside the project" in err, err


def test_what_dbt_users_write_still_renders(tmp_path: Path):
    project = shutil.copytree(FIXTURES / "dbt_shop", tmp_path / "shop")
    (project / "macros" / "probe.sql").write_text(
        "{% macro default__day(col) %}date_format({{ col }}, 'yyyy-MM-dd'){% endmacro %}\n"
        "{% macro cols(names) %}{% set out = [] %}{% for n in names %}{% do out.append(n ~ ' as c_' ~ loop.index) %}"
        "{% endfor %}{{ return(out | join(', ')) }}{% endmacro %}\n")
    (project / "models" / "marts" / "probe.sql").write_text("""{{ config(materialized='view') }}
{% set ns = namespace(total=0) %}{% for i in range(3) %}{% set ns.total = ns.total + i %}{% endfor %}
select
  {{ cols(['1', '2']) }},
  {{ adapter.dispatch('day')('current_date()') }} as day,
  {{ cents_to_dollars('amount') }} as dollars,
  '{{ modules.datetime.datetime(2024, 5, 1).strftime('%Y') }}' as y, {{ ns.total }} as total,
  '{{ this.schema }}.{{ this.name }}' as me, '{{ var("shop_name") }}' as shop,
  '{{ env_var("MVFLOW_TEST_SURELY_UNSET", "dflt") }}' as e, '{{ target.name }}' as tgt,
  {{ "%05d" | format(42) }} as padded, '{{ "{:>4}".format("ab") }}' as fmt, '{{ "ab" * 2 }}' as twice
from {{ ref('stg_payments') }}
""")
    main(["--project-dir", str(project), "compile"])
    [compiled] = (project / "target" / "compiled").rglob("probe.sql")
    sql = compiled.read_text()
    for expected in ("1 AS c_1", "2 AS c_2", "DATE_FORMAT(CURRENT_DATE, 'yyyy-MM-dd') AS day", "ROUND(amount / 100, 2) AS dollars",
                     "'2024' AS y", "3 AS total", "'shop_dev_marts.probe' AS me", "'Jaffle' AS shop", "'dflt' AS e",
                     "'dev' AS tgt", "00042 AS padded", "'  ab' AS fmt", "'abab' AS twice", "FROM shop_dev.stg_payments"):
        assert expected in sql, f"{expected!r} not in\n{sql}"


HUGE = {
    "loop": ("{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
             "the template renders to more than 1,048,576 characters (1 MB)"),
    "macro": ("{% macro m() %}{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}{% endmacro %}"
              "{% set y = m() %}", "a macro or block renders to more than 1,048,576 characters"),
    "set_block": ("{% set y %}{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}{% endset %}",
                  "a macro or block renders to more than"),
    "repeat": ("{{ 'x' * 10 ** 9 }}", "'x' * 1000000000 would make a value of 1,000,000,000 characters"),
    "power": ("{{ 10 ** 100000000 }}", "10 ** 100000000 would be a number of 332,192,809 bits"),
    "doubling": ("{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                 "~ made a value of 2,097,152 characters"),
    "plus": ("{% set ns = namespace(s=['x']) %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
             "+ made a value of 2,097,152 items"),
    "range": ("{% for i in range(10 ** 7) %}{% endfor %}", "range() of 10,000,000 items, over the limit of 100,000"),
    "center": ("{{ 'x'|center(10 ** 9) }}", "would make a value of 1,000,000,000 characters"),
    "ljust": ("{{ 'x'.ljust(10 ** 9) }}", "would make a value of 1,000,000,000 characters"),
    "percent": ("{{ '%0999999999d' % 1 }}", "would make a value of 999,999,999 characters"),
    "str_format": ("{{ '{:>999999999}'.format(1) }}", "would make a value of 999,999,999 characters"),
    "replace": ("{{ ('x' * 1000)|replace('x', 'y' * 100000) }}", "would make a value of 100,000,000 characters"),
}


@pytest.mark.parametrize("body, message", HUGE.values(), ids=HUGE.keys())
def test_a_huge_render_is_stopped_before_it_is_built(body: str, message: str, tmp_path: Path, capsys):
    project = _project(tmp_path / "p", {"models/a.sql": f"select\n{body}\n1 as id\n"})
    started = time.monotonic()

    code, err = _run(project, capsys, "compile")

    assert code == 2 and "models/a.sql:2: [too-large] " in err and message in err and "Traceback" not in err, err
    assert time.monotonic() - started < 20  # unbounded, each of these takes minutes and gigabytes
    assert not (project / "target").exists()


def test_the_limits_are_on_size_not_on_ordinary_templates():
    env = Sandbox(limit=100, extensions=["jinja2.ext.do"])
    assert env.from_string("{{ 'ab' * 50 }}").render() == "ab" * 50
    assert env.from_string("{% set ns = namespace(s='') %}{% for i in range(10) %}{% set ns.s = ns.s ~ i %}{% endfor %}"
                           "{{ ns.s }}").render() == "0123456789"
    with pytest.raises(TooLarge):
        env.from_string("{{ 'ab' * 51 }}").render()
    with pytest.raises(TooLarge, match="a collection of 101 items"):  # a list grown in place, by l.append()
        env.from_string("{% set l = [] %}{% for i in range(100) %}{% for j in range(100) %}{% do l.append(j) %}"
                        "{% endfor %}{% endfor %}").render()


@pytest.mark.parametrize("body", ["{{ (['x' * 60] * 10)|join(', ') }}", "{{ ', '.join(['x' * 60] * 10) }}"], ids=["filter", "method"])
def test_a_join_is_checked_before_it_is_built(body: str):
    env = Sandbox(limit=100)
    with pytest.raises(TooLarge, match="joining ', ' would make a value of 620 characters"):
        env.from_string(body).render()
