"""``scope: batch``: a test of an ``mv`` or ``fact`` model that reads only what the model's last
batch wrote, so a check after each refresh costs what the refresh touched, not the whole table.

- an ``mv``: the rows of the MV keys its last refresh replaced (the keys it publishes per batch in
  ``<mv>__mvflow_changes``; a batch-scoped test makes the MV publish them, as a stacked MV does);
- a ``fact``: the rows of its last step (parquet: the step's ``mvflow_step`` partition; Delta:
  ``(last, next]`` on the fact's position columns).

The predicate is written into the test's SQL once the manifest is complete (it needs the
model's plan); the batch numbers or positions are bound at run time from the step log.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import CompileError, Problem, RunError

if TYPE_CHECKING:
    from ..manifest import Manifest, Model
    from ..state import StateStore

#: where the predicate goes in a batch-scoped test's SQL until the manifest is complete
PLACEHOLDER = "__mvflow_batch_scope__"
KINDS = ("mv", "fact")


def scoped(relation: str) -> str:
    """What a batch-scoped test reads in place of the model's relation."""
    return f"(SELECT * FROM {relation} WHERE {PLACEHOLDER}) AS mvflow_batch"


def predicate(manifest: "Manifest", model: "Model") -> str:
    """The rows of the model's last batch, with markers (``:mvflow_since``/``:mvflow_until``, or a
    fact step's ``:step`` / ``:last_<col>``, ``:next_<col>``)."""
    if model.kind.name == "mv":
        from ..kinds.mv.analyze import mv_plan
        from ..kinds.mv.inputs import BATCH

        plan = mv_plan(model, manifest)
        if plan.grouped:
            raise CompileError(Problem(f"scope: batch is not supported on '{model.name}', a GROUP BY mv (its changed "
                                       "groups are not published)", model.path, 1, code="bad-test",
                                       hint="test the whole table (scope: all)"))
        keys = ", ".join(plan.key)
        return (f"({keys}) IN (SELECT {keys} FROM {plan.table_name('changes')} "
                f"WHERE {BATCH} > :mvflow_since AND {BATCH} <= :mvflow_until)")
    from ..kinds.fact.plan import STEP_COLUMN, fact

    return fact(manifest, model).written or f"{STEP_COLUMN} = :step"


def parameters(manifest: "Manifest", model: "Model", store: "StateStore") -> dict[str, Any]:
    """The last batch of the model, from the step log."""
    rows = store.steps(model.name, limit=1)
    if not rows:
        raise RunError(Problem(f"{model.kind.name} '{model.name}' has written no batch yet: a batch-scoped test has "
                               "nothing to read", model.path, 1, code="no-batch", hint=f"run it first: mvflow run -s {model.name}"))
    row = rows[0]
    if model.kind.name == "mv":
        return {"mvflow_since": int(row.last[0]), "mvflow_until": int(row.next[0])}
    from ..kinds.fact.plan import fact, step_id
    from ..kinds.fact.steps import bind_range

    return {**bind_range(fact(manifest, model), row.last, row.next), "step": step_id(tuple(row.next))}
