"""Aggregates joined back (compiler.kinds.mv.lift): a derived table of an mv that aggregates and is
joined becomes an mv of its own, owned by it — in the manifest, the DAG, the selection, target/
and explain; what cannot be lifted is said as the owner's problem. Refreshing them is
tests/test_mv_dbt_style.py's oracle."""

from __future__ import annotations

import pytest

from compiler.artifacts import write_artifacts
from compiler.compile import compile_project
from compiler.errors import CompileError
from compiler.graph import model_id
from compiler.kinds.mv.derive import explain
from compiler.kinds.mv.analyze import mv_plan
from compiler.project import load_project
from compiler.select import select

SOURCES = """
sources:
  - {name: customers, database: d, primary_key: [id], position: [v]}
  - {name: orders, database: d, primary_key: [id], position: [v]}
  - {name: payments, database: d, primary_key: [id], position: [v]}
"""

STG_ORDERS = "select id as order_id, customer_id, amount from {{ source('d', 'orders') }}\n"

CUSTOMERS = """{{ config(materialized='mv') }}
with customers as (
    select * from {{ source('d', 'customers') }}
),
orders as (
    select * from {{ ref('stg_orders') }}
),
customer_orders as (
    select customer_id, 'orders' as counted, count(order_id) as orders, sum(amount) as amount
    from orders
    group by customer_id
),
customer_payments as (
    select orders.customer_id, sum(p.amount) as paid
    from {{ source('d', 'payments') }} as p
    left join orders on orders.order_id = p.order_id
    group by orders.customer_id
)
select customers.id, customers.name, customer_orders.orders, customer_payments.paid
from customers
left join customer_orders on customer_orders.customer_id = customers.id
left join customer_payments on customers.id = customer_payments.customer_id
"""


def _compile(make_project, customers: str = CUSTOMERS, **files: str):
    root = make_project({"lineage/s.yml": SOURCES, "models/stg_orders.sql": STG_ORDERS,
                         "models/marts/customers.sql": customers, **files})
    return root, compile_project(load_project(root))


def test_each_joined_aggregate_becomes_an_mv_owned_by_its_reader(make_project):
    root, manifest = _compile(make_project)
    owned = sorted(m.name for m in manifest.models.values() if m.owner == "customers")
    assert owned == ["customers__customer_orders", "customers__customer_payments"]
    lifted = manifest.models["customers__customer_payments"]
    assert (lifted.kind.name, lifted.path, lifted.relation) == ("mv", "models/marts/customers.sql", "default.customers__customer_payments")
    assert lifted.depends_on_models == ["stg_orders"] and lifted.depends_on_sources == ["d.payments"]
    # the owner reads the lifted mvs, not the tables only they read
    owner = manifest.models["customers"]
    assert owner.depends_on_models == owned and owner.depends_on_sources == ["d.customers"]
    assert manifest.graph.has_edge(model_id("customers__customer_orders"), model_id("customers"))
    assert manifest.graph.has_edge(model_id("stg_orders"), model_id("customers__customer_orders"))
    # selected with their owner (as its upstream, in order), excluded with it
    assert select(manifest.graph, ["customers"]) == [*owned, "customers"]
    assert select(manifest.graph, ["stg_orders+"], exclude=["customers"]) == ["stg_orders"]
    # each an mv by its GROUP BY columns (a constant column beside them), read by its key
    plan = mv_plan(owner, manifest)
    assert plan.lifted == tuple(owned) and plan.key == ("id",)
    assert mv_plan(lifted, manifest).visible_key == ("customer_id",)
    assert mv_plan(manifest.models["customers__customer_orders"], manifest).columns == ("customer_id", "counted", "orders", "amount")
    assert [(link.input, link.via or tuple(k for k, _ in link.bound)) for link in plan.parts[0].links] == [
        ("customers__customer_orders", ("customer_id",)), ("customers__customer_payments", ("customer_id",))]
    assert "aggregates joined back, each made an mv of its own: customers__customer_orders, " \
           "customers__customer_payments" in explain(plan)
    # compiled beside their owner; the owner's compiled SQL is the SELECT as written (what verify recomputes)
    write_artifacts(manifest)
    assert (root / "target/run/marts/customers__customer_orders/full.sql").exists()
    assert "customers__customer_orders" not in (root / "target/compiled/marts/customers.sql").read_text()
    assert "default.customers__customer_orders AS customer_orders" in (root / "target/run/marts/customers/full.sql").read_text()


def test_what_is_not_lifted(make_project):
    """An aggregate read alone (``select * from final``) is the mv's own GROUP BY; an aggregate in
    WHERE is a semi-join; one SELECT joined twice is one mv."""
    grouped = "{{ config(materialized='mv') }}\nwith final as (select customer_id, count(*) as n from {{ ref('stg_orders') }} " \
              "group by customer_id) select * from final\n"
    twice = ("{{ config(materialized='mv') }}\nwith co as (select customer_id, count(*) as n from {{ ref('stg_orders') }} "
             "group by customer_id)\nselect c.id, a.n, b.n as m from {{ source('d', 'customers') }} as c\n"
             "left join co as a on a.customer_id = c.id left join co as b on b.customer_id = c.id\n")
    _, manifest = _compile(make_project, grouped, **{"models/twice.sql": twice})
    assert sorted(m.name for m in manifest.models.values() if m.owner) == ["twice__a"]
    assert mv_plan(manifest.models["customers"], manifest).visible_key == ("customer_id",)
    assert [link.input for link in mv_plan(manifest.models["twice"], manifest).parts[0].links] == ["twice__a", "twice__a"]


def test_an_aggregate_inside_a_lifted_one_is_lifted_too(make_project):
    nested = """{{ config(materialized='mv') }}
with per_order as (
    select order_id, sum(amount) as paid from {{ source('d', 'payments') }} group by order_id
),
per_customer as (
    select o.customer_id, sum(per_order.paid) as paid, count(*) as orders
    from {{ ref('stg_orders') }} as o
    left join per_order on per_order.order_id = o.order_id
    group by o.customer_id
)
select c.id, per_customer.paid from {{ source('d', 'customers') }} as c
left join per_customer on per_customer.customer_id = c.id
"""
    _, manifest = _compile(make_project, nested)
    assert manifest.models["customers__per_customer__per_order"].owner == "customers__per_customer"
    assert select(manifest.graph, ["customers"]) == ["customers__per_customer__per_order", "customers__per_customer", "customers"]


def test_an_aggregate_that_cannot_be_an_mv_is_the_owners_error_at_its_line(make_project):
    rollup = CUSTOMERS.replace("    group by customer_id\n", "    group by rollup(customer_id)\n")
    with pytest.raises(CompileError) as error:
        _compile(make_project, rollup)
    [problem] = error.value.problems  # the owner's own failure for want of it is not said again
    assert (problem.path, problem.line, problem.code) == ("models/marts/customers.sql", 11, "mv-aggregate")
    assert problem.message.startswith("mv 'customers': its aggregate 'customer_orders' (made the mv "
                                      "'customers__customer_orders' to be refreshed by its groups): ")


def test_a_lifted_name_already_taken_is_an_error(make_project):
    taken = "{{ config(materialized='table') }}\nselect 1 as id\n"
    with pytest.raises(CompileError) as error:
        _compile(make_project, **{"models/customers__customer_orders.sql": taken})
    [problem] = error.value.problems
    assert (problem.code, problem.path) == ("mv-lift-name", "models/marts/customers.sql")
    assert "its aggregate 'customer_orders' becomes the mv 'customers__customer_orders', a name already taken" in problem.message


def test_an_intermediate_view_that_aggregates_is_lifted_where_it_is_joined(make_project):
    """dbt's style guide: intermediate models (views) aggregate, marts join them. The view's SQL
    becomes the lifted mv's (after the view, in the DAG); a view read alone stays the mv's own GROUP BY."""
    int_orders = "{{ config(materialized='view') }}\nwith o as (select * from {{ ref('stg_orders') }})\n" \
                 "select customer_id, count(*) as orders from o group by customer_id\n"
    mart = ("{{ config(materialized='mv') }}\nselect c.id, io.orders from {{ source('d', 'customers') }} as c\n"
            "left join {{ ref('int_orders') }} as io on io.customer_id = c.id\n")
    alone = "{{ config(materialized='mv') }}\nselect customer_id, orders from {{ ref('int_orders') }}\n"
    imported = ("{{ config(materialized='mv') }}\nwith customers as (select * from {{ source('d', 'customers') }}),\n"
                "orders as (select * from {{ ref('int_orders') }})\nselect customers.id, orders.orders from customers\n"
                "left join orders on orders.customer_id = customers.id\n")
    _, manifest = _compile(make_project, mart, **{"models/int_orders.sql": int_orders, "models/alone.sql": alone,
                                                  "models/imported.sql": imported})
    lifted = manifest.models["customers__io"]
    assert lifted.owner == "customers" and lifted.depends_on_models == ["int_orders"]
    assert lifted.select_sql == "SELECT\n  *\nFROM default.int_orders"  # a change of the view's SQL rebuilds it
    assert mv_plan(lifted, manifest).views == ("default.int_orders", "default.stg_orders")
    assert manifest.models["imported__orders"].select_sql == lifted.select_sql  # an import CTE of the view alike
    assert manifest.models["customers"].depends_on_models == ["customers__io"]
    assert select(manifest.graph, ["+customers"]) == ["stg_orders", "int_orders", "customers__io", "customers"]
    assert mv_plan(lifted, manifest).visible_key == ("customer_id",)
    assert {m.owner for m in manifest.models.values() if m.owner} == {"customers", "imported"}
    assert mv_plan(manifest.models["alone"], manifest).visible_key == ("customer_id",)
