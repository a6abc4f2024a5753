"""``mvflow status``: each published table's batch and how far it is behind its MV (a table
model's: whether its last build is published)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from ..errors import RunError

if TYPE_CHECKING:
    from ..manifest import Manifest
    from ..state import StateStore


@dataclass(frozen=True)
class PublishedStatus:
    model: str
    table: str  # store.schema.name
    batch: int | None  # None: never published
    mv_batch: int  # a table model's: 0
    rows: int = 0
    holder: str = "-"
    problem: str = ""  # the store could not be read
    build_behind: bool = False  # a table model's last build is not published yet


def status_lines(found: list[PublishedStatus]) -> list[str]:
    """One aligned line per published table (none: no lines).

    >>> print("\\n".join(status_lines([PublishedStatus("wide", "app.public.wide", 10, 12, 9_500),
    ...                                  PublishedStatus("stats", "app.public.stats", None, 3),
    ...                                  PublishedStatus("x", "app.public.x", None, 3, problem="APP_DSN is not set"),
    ...                                  PublishedStatus("shops", "app.public.shops", 0, 0, 40, build_behind=True)])))
    published         model  batch  behind              rows   holder
    app.public.wide   wide   10     2 batches           9,500  -
    app.public.stats  stats  -      never published     0      -
    app.public.x      x      -      APP_DSN is not set
    app.public.shops  shops  -      its last build      40     -
    """
    if not found:
        return []
    rows = [["published", "model", "batch", "behind", "rows", "holder"]]
    for s in found:
        if s.problem:
            behind = s.problem
        elif s.batch is None:
            behind = "never published"
        elif s.build_behind:
            behind = "its last build"
        else:
            lag = max(0, s.mv_batch - s.batch)
            behind = f"{lag} batch{'es' if lag != 1 else ''}" if lag else "-"
        rows.append([s.table, s.model, "-" if not s.batch else str(s.batch), behind,
                     "" if s.problem else f"{s.rows:,}", "" if s.problem else s.holder])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return ["  ".join([*(c.ljust(w) for c, w in zip(r, widths)), r[-1]]).rstrip() for r in rows]


def published_statuses(manifest: "Manifest", store: "StateStore", names: set[str] | None, now: datetime) -> list[PublishedStatus]:
    """Each published table as its store records it (one connection per store)."""
    from ..kinds.unchanged import build_stamp
    from ..status import holder_words
    from .decisions import NOTHING, decide_table
    from .publisher import lease_topic, mv_batch, published_name
    from .stores import open_store

    target = manifest.project.target(manifest.target)
    found = []
    opened: dict[str, object] = {}
    for name in sorted(names if names is not None else manifest.models):
        model = manifest.models.get(name)
        spec = getattr(model.kind, "publish", None) if model else None
        if spec is None:
            continue
        table = published_name(spec, name)
        shown = f"{spec.to}.{table}"
        batch = mv_batch(store, name).batch
        try:
            if spec.to not in opened:
                opened[spec.to] = open_store(target, spec.to)
            published = opened[spec.to].published(table)
        except RunError as exc:
            found.append(PublishedStatus(name, shown, None, batch, problem=str(exc)))
            continue
        lease = store.get(lease_topic(model, spec.to, table))
        holder = holder_words(lease.hostid, lease.lease_expires) if lease and lease.held_at(now) else "-"
        behind = model.kind.name == "table" and published is not None \
            and decide_table(published, build_stamp(store, manifest, model)).what != NOTHING
        found.append(PublishedStatus(name, shown, published.batch if published else None, batch,
                                     published.rows if published else 0, holder, build_behind=behind))
    return found
