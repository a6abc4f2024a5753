"""Node selection (``--select`` / ``--exclude``) on a small graph project, and ``mvflow ls``.

    stage.a ─ s1 ─┐
                  m1 ─ m2 ─ m3        x (alone)
    stage.b ─ s2 ─┘
"""

from __future__ import annotations

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler.cli import main
from compiler.compile import compile_project
from compiler.errors import SelectionError
from compiler.project import load_project
from compiler.select import Criterion, parse_criterion, select

FILES = {
    "project.yml": """
        name: graph
        models:
          +materialized: view
          marts:
            +materialized: table
            +schema: marts
    """,
    "lineage/stage.yml": """
        sources:
          - {name: a, database: stage, primary_key: [id], position: [ts]}
          - {name: b, database: stage, primary_key: [id], dictionary: true}
    """,
    "models/staging/s1.sql": "{{ config(tags=['nightly']) }}\nselect id from {{ source('stage', 'a') }}",
    "models/staging/s2.sql": "select id from {{ source('stage', 'b') }}",
    "models/marts/m1.sql": "select s1.id from {{ ref('s1') }} as s1 join {{ ref('s2') }} as s2 on s1.id = s2.id",
    "models/marts/m2.sql": "{{ config(tags=['nightly', 'core']) }}\nselect id from {{ ref('m1') }}",
    "models/marts/m3.sql": "{{ config(materialized='view') }}\nselect id from {{ ref('m2') }}",
    "models/other/x.sql": "select 1 as id",
}


@pytest.fixture
def project(make_project):
    return make_project(FILES)


@pytest.fixture
def graph(project):
    return compile_project(load_project(project)).graph


@pytest.mark.parametrize(
    "expression, expected",
    [
        ("", ["x", "s1", "s2", "m1", "m2", "m3"]),
        ("m1", ["m1"]),
        ("s*", ["s1", "s2"]),
        ("m?", ["m1", "m2", "m3"]),
        ("+m2", ["s1", "s2", "m1", "m2"]),
        ("m1+", ["m1", "m2", "m3"]),
        ("+m1+", ["s1", "s2", "m1", "m2", "m3"]),
        ("1+m2", ["m1", "m2"]),
        ("2+m3", ["m1", "m2", "m3"]),
        ("m1+1", ["m1", "m2"]),
        ("s1+2", ["s1", "m1", "m2"]),
        ("@s1", ["s1", "s2", "m1", "m2", "m3"]),
        ("@x", ["x"]),
        ("tag:nightly", ["s1", "m2"]),
        ("tag:core+", ["m2", "m3"]),
        ("path:models/marts", ["m1", "m2", "m3"]),
        ("path:models/marts/", ["m1", "m2", "m3"]),
        ("path:models/staging/s2.sql", ["s2"]),
        ("path:models/*/s1.sql", ["s1"]),
        ("kind:table", ["m1", "m2"]),
        ("kind:view", ["x", "s1", "s2", "m3"]),
        ("source:stage.a+", ["s1", "m1", "m2", "m3"]),
        ("source:stage.*+1", ["s1", "s2"]),
        ("source:stage.b", []),  # a source itself is not a model
        ("s1 x", ["x", "s1"]),  # union
        ("m1+ tag:nightly", ["s1", "m1", "m2", "m3"]),
        ("path:models/marts,kind:table", ["m1", "m2"]),  # intersection
        ("+m3,tag:nightly", ["s1", "m2"]),
        ("kind:view,path:models/marts", ["m3"]),
    ],
)
def test_select(graph, expression, expected):
    assert select(graph, [expression] if expression else []) == expected


@pytest.mark.parametrize(
    "selection, exclusion, expected",
    [
        (["m1+"], ["m3"], ["m1", "m2"]),
        ([], ["tag:nightly"], ["x", "s2", "m1", "m3"]),
        (["+m3"], ["+m1"], ["m2", "m3"]),
        (["m1", "m2"], ["kind:table"], []),
        (["s1", "s2"], ["s1 s2"], []),
    ],
)
def test_exclude(graph, selection, exclusion, expected):
    assert select(graph, selection, exclusion) == expected


def test_several_select_options_are_a_union(graph):
    assert select(graph, ["s1", "x"]) == select(graph, ["s1 x"]) == ["x", "s1"]


def test_order_is_topological_with_ties_by_name(graph):
    order = select(graph)
    assert order.index("s1") < order.index("m1") < order.index("m2") < order.index("m3")
    assert order.index("s2") < order.index("m1")
    assert order == ["x", "s1", "s2", "m1", "m2", "m3"]  # ties broken by node id: the same every time


@pytest.mark.parametrize(
    "text, criterion",
    [
        ("x", Criterion("name", "x")),
        ("+x", Criterion("name", "x", parents=True)),
        ("3+tag:t", Criterion("tag", "t", parents=True, parents_depth=3)),
        ("x+", Criterion("name", "x", children=True)),
        ("path:models/a+2", Criterion("path", "models/a", children=True, children_depth=2)),
        ("@kind:mv", Criterion("kind", "mv", childrens_parents=True)),
        ("source:stage.offers+", Criterion("source", "stage.offers", children=True)),
    ],
)
def test_parse_criterion(text, criterion):
    assert parse_criterion(text) == criterion


@pytest.mark.parametrize("text", ["a++b", "+", "", "++a", "@+a", "a+b", "a@b", "tag:", "a+x", "2+@a"])
def test_invalid_syntax(graph, text):
    with pytest.raises(SelectionError) as info:
        select(graph, [text] if text else [","])
    problem = info.value.problems[0]
    assert problem.code == "bad-selection" and problem.path == "--select"
    assert "+name" in problem.hint and "tag:x" in problem.hint


def test_unknown_method_lists_the_methods(graph):
    with pytest.raises(SelectionError) as info:
        select(graph, [], ["tags:nightly"])
    problem = info.value.problems[0]
    assert (problem.path, problem.code) == ("--exclude", "bad-selection")
    assert "tags:" in problem.message and problem.hint == "methods: name:, tag:, path:, kind:, source:, state:, test_type:, package:"


def test_unknown_kind_lists_the_kinds(graph):
    with pytest.raises(SelectionError) as info:
        select(graph, ["kind:tabel"])
    assert info.value.problems[0].hint == "kinds: view, table, mv, fact, seed, incremental, ephemeral, numerator, snapshot, test"


def test_unknown_name_says_did_you_mean(graph):
    with pytest.raises(SelectionError) as info:
        select(graph, ["m1+", "mm2"])
    problem = info.value.problems[0]
    assert problem.code == "unknown-selection" and "mm2" in problem.message
    assert problem.hint == "did you mean 'm2'?"
    with pytest.raises(SelectionError) as info:
        select(graph, ["zzzzzz"])
    assert "mvflow ls" in info.value.problems[0].hint


def test_a_wildcard_that_matches_nothing_is_not_an_error(graph):
    assert select(graph, ["nothing*"]) == select(graph, ["path:models/none/*"]) == []
    assert select(graph, ["kind:fact"]) == []


@pytest.mark.parametrize("term, hint", [
    ("tag:nightli", "tags in this project: core, nightly"),
    ("path:models/mart", "run 'mvflow ls -o path' to see the model paths"),
    ("source:stage.aa", "did you mean 'stage.a'?"),
])
def test_a_tag_path_or_source_that_matches_nothing_is_an_error_in_select_only(graph, term, hint):
    with pytest.raises(SelectionError) as info:
        select(graph, [term])
    problem = info.value.problems[0]
    assert (problem.code, problem.message, problem.hint) == ("unknown-selection", f"'{term}' matches no model", hint)
    assert problem.path == "--select"
    assert select(graph, exclude=[term]) == select(graph)


def test_ls_prints_the_selection_in_run_order(project, capsys):
    main(["--project-dir", str(project), "ls", "--select", "+m2", "--exclude", "s2"])
    assert capsys.readouterr().out.splitlines() == ["s1", "m1", "m2"]
    main(["--project-dir", str(project), "ls", "-s", "m2+", "-o", "relation"])
    assert capsys.readouterr().out.splitlines() == ["marts.m2", "marts.m3"]
    main(["--project-dir", str(project), "ls", "-s", "tag:nightly", "-o", "path"])
    assert capsys.readouterr().out.splitlines() == ["models/staging/s1.sql", "models/marts/m2.sql"]
    main(["--project-dir", str(project), "ls", "-s", "m1", "-o", "kind"])
    assert capsys.readouterr().out.splitlines() == ["table\tm1"]


def test_ls_with_bad_selection_exits_2(project, capsys):
    with pytest.raises(SystemExit) as info:
        main(["--project-dir", str(project), "ls", "--select", "a++b"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "--select: [bad-selection] invalid selection 'a++b'" in err
    assert "Traceback" not in err


# -- properties on random DAGs ----------------------------------------------------------------


@st.composite
def dags(draw):
    """A random DAG of models m0..mN (edges only from lower to higher numbers)."""
    size = draw(st.integers(min_value=1, max_value=8))
    edges = draw(st.sets(st.tuples(st.integers(0, size - 1), st.integers(0, size - 1)).filter(lambda e: e[0] < e[1])))
    graph = nx.DiGraph()
    graph.add_nodes_from((f"model.m{i}", {"kind": "view", "tags": (), "path": f"models/m{i}.sql"}) for i in range(size))
    graph.add_edges_from((f"model.m{a}", f"model.m{b}") for a, b in edges)
    node = f"m{draw(st.integers(0, size - 1))}"
    return graph, node


def _names(nodes) -> set[str]:
    return {n.split(".", 1)[1] for n in nodes}


@settings(max_examples=60, deadline=None)
@given(dags())
def test_graph_operators_match_ancestors_and_descendants(case):
    graph, node = case
    up, down = _names(nx.ancestors(graph, f"model.{node}")), _names(nx.descendants(graph, f"model.{node}"))
    assert set(select(graph, [f"+{node}"])) == up | {node}
    assert set(select(graph, [f"{node}+"])) == down | {node}
    assert set(select(graph, [f"+{node}+"])) == up | down | {node}
    assert set(select(graph, [f"@{node}"])) == {node} | down | _names(
        set().union(*(nx.ancestors(graph, f"model.{d}") for d in down | {node})))
    assert set(select(graph, [f"1+{node}"])) == {node} | _names(graph.predecessors(f"model.{node}"))
    assert set(select(graph, [f"{node}+1"])) == {node} | _names(graph.successors(f"model.{node}"))
    assert set(select(graph, [f"{node}+"], [f"{node}+"])) == set()
    order = select(graph)
    assert all(order.index(a.split(".")[1]) < order.index(b.split(".")[1]) for a, b in graph.edges)
