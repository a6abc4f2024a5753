"""What users read about progress: ``mvflow status`` and the docs site's State page.

One row per topic of the state store (a fact model, an MV, or one input of an MV), in words:

- positions are printed one way: timestamps as Spark prints them (``2025-12-31 22:33:36``),
  other values as they are, and the batch numbers of an MV, of its dictionary-like inputs and
  of its upstream MVs as ``batch 12``;
- an MV's state is its live slot and row counts, a diffed input's state the batch of the
  snapshot its changes were last found against, never the JSON the runner keeps;
- two lags: ``behind source``, how far ``last`` was behind the newest position its source held
  when the runner last looked (``-`` where the state store does not know it), and ``age``, the
  wall clock since the time of ``last`` (for a batch: since it was committed). A project whose
  data lies in the past shows a large age while being ``0s`` behind its sources.

Pure: offsets and ``now`` in, text out; the CLI and the docs site call the same functions.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterable

from .kinds.mv.storage import MvState
from .kinds.numerator.version import Position as NumeratorPosition
from .kinds.numerator.version import Scheme
from .state import Assignment, Claim, Offset, Position, Runner, StepLogRow, holder_is_gone

NONE = "-"
SERVE_TOPICS = "serve:"  # the coordinator's lease (compiler.serve.coordinator), shown with the runners
PUBLISH_TOPICS = "publish:"  # a publisher's lease (compiler.publish), shown with its published table
COLUMNS = (("topic", "topic"), ("last", "last"), ("next (in flight)", "next"), ("behind source", "behind"),
           ("age", "age"), ("rows", "rows"), ("holder", "holder"), ("state", "state"))
# Input topics whose positions are Delta table versions (compiler.kinds.mv.change_modes tags their state).
_VERSION_MODES = {"versions": "diffed by time travel,", "cdf": "Change Data Feed read"}
_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")


@dataclass(frozen=True)
class TopicStatus:
    """One topic as users read it (every field already text)."""

    topic: str
    last: str
    next: str  # the in-flight ``next``, or "-"
    behind: str
    age: str
    rows: str
    holder: str
    state: str


def status_lines(offsets: list[Offset], now: datetime, topics: set[str] | None = None) -> list[str]:
    """``mvflow status``: one aligned line per topic (``topics``: only these models' topics).

    >>> now = datetime(2026, 11, 23, 12, 0, tzinfo=timezone.utc)
    >>> mv = Offset("wide", last=(12,), next=(12,), rows=40, run=datetime(2026, 11, 23, 11, 0, tzinfo=timezone.utc),
    ...             state='{"base_rows": 10000, "definition": "e7", "delta_rows": 120, "slot": "a", "swapping": ""}')
    >>> dim = Offset("wide:stage.regions", last=(12,), next=(12,), run=mv.run, state='{"fingerprint": "20:5:9"}')
    >>> src = Offset("wide:stage.offers", last=("2025-12-31T22:33:36", 525), next=("2025-12-31T22:33:36", 525),
    ...              rows=7, run=mv.run)
    >>> fact = Offset("orders", last=("2025-12-31 21:50:24", 998), next=("2025-12-31 22:10:00", 1040), rows=3,
    ...               state="caught up")
    >>> print("\\n".join(status_lines([mv, dim, src, fact], now)))
    topic               last                      next (in flight)           behind source  age       rows  holder  state
    wide                batch 12                  -                          -              60 min    40    -       slot a, 10,000 rows + 120 in delta
    wide:stage.regions  batch 12                  -                          -              60 min    0     -       snapshot of batch 12
    wide:stage.offers   2025-12-31 22:33:36, 525  -                          0s             326 days  7     -       -
    orders              2025-12-31 21:50:24, 998  2025-12-31 22:10:00, 1040  -              326 days  3     -       caught up
    """
    rows = [r for r in topic_statuses(offsets, now) if topics is None or r.topic.split(":")[0] in topics]
    table = [[title for title, _ in COLUMNS]] + [[getattr(r, field) for _, field in COLUMNS] for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(COLUMNS) - 1)]
    return ["  ".join([*(cell.ljust(w) for cell, w in zip(row, widths)), row[-1]]).rstrip() for row in table]


def topic_statuses(offsets: list[Offset], now: datetime) -> list[TopicStatus]:
    """Every topic's status; which positions are batch numbers is read from the offsets themselves."""
    batches = batch_topics(offsets)
    return [topic_status(o, now, batches) for o in offsets if not o.topic.startswith((SERVE_TOPICS, PUBLISH_TOPICS))]


def topic_status(offset: Offset, now: datetime, batches: set[str]) -> TopicStatus:
    """One topic's status; ``batches`` are the topics whose positions are batch numbers."""
    batch = offset.topic in batches
    unit = "version" if _json(offset.state).get("mode") in _VERSION_MODES else "batch"
    holder = holder_words(offset.hostid, offset.lease_expires) if offset.held_at(now) else NONE
    return TopicStatus(
        topic=offset.topic,
        last=show_position(offset.last, batch, unit),
        next=show_position(offset.next, batch, unit) if offset.in_flight else NONE,
        behind=_behind(offset, batch),
        age=_age(offset, now, batch),
        rows=f"{offset.rows:,}",
        holder=holder,
        state=state_words(offset.state, offset.last),
    )


def holder_words(holder: str, expires: datetime) -> str:
    """A lease holder; one that is a dead process of this host says so (the next run takes over).

    >>> t = datetime(2026, 1, 1, 12, 0)
    >>> holder_words("runner-a", t)
    'runner-a (until 12:00:00)'
    >>> import socket; holder_words(f"{socket.gethostname()}:999999999:ab", t)
    'dead: pid 999999999 is gone (the next run takes over)'
    """
    if holder_is_gone(holder):
        return f"dead: pid {holder.split(':')[1]} is gone (the next run takes over)"
    return f"{holder} (until {expires:%H:%M:%S})"


def claim_words(claim: Claim, now: datetime) -> str:
    """Who holds a claim, for people.

    >>> t = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
    >>> claim_words(Claim("target:local", "h1:42:ab", "mvflow run", t, t), t.replace(minute=2, second=30))
    '`mvflow run` (pid 42 on host h1, since 12:00:00 UTC, 2 min ago)'
    """
    host, _, rest = claim.holder.partition(":")
    since = f"{claim.since.astimezone(timezone.utc):%H:%M:%S} UTC"
    return (f"`{claim.command}` (pid {rest.split(':', 1)[0]} on host {host}, since {since}, "
            f"{duration((now - claim.since).total_seconds())} ago)")


def claim_lines(claims: list[Claim], now: datetime) -> list[str]:
    """Who holds each target (one process at a time on an embedded metastore; ``compiler.lock``).

    >>> t = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
    >>> claim_lines([Claim("target:local", "h:42:ab", "mvflow run", t, t)], t)
    ['target local: free (the last holder, `mvflow run` (pid 42 on host h, since 12:00:00 UTC, 0s ago), let its claim expire)']
    """
    lines = []
    for claim in claims:
        what = claim.name.replace(":", " ", 1)
        if holder_is_gone(claim.holder):
            lines.append(f"{what}: free (held by {claim_words(claim, now)}, which died; the next command takes over)")
        elif claim.expires_at <= now:
            lines.append(f"{what}: free (the last holder, {claim_words(claim, now)}, let its claim expire)")
        else:
            lines.append(f"{what}: in use by {claim_words(claim, now)}")
    return lines


def runner_lines(runners: list[Runner], assignments: list[Assignment], coordinator: Offset | None,
                 now: datetime) -> list[str]:
    """The ``mvflow serve`` runners: the coordinator, then one line per runner with its heartbeat,
    what it works on and the jobs assigned to it (``compiler.serve``).

    >>> t = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
    >>> boss = Offset("serve:coordinator", hostid="h:42:ab", lease_expires=t.replace(second=20), fence=3)
    >>> print("\\n".join(runner_lines([Runner("h:42:ab", "mvflow serve", t, t.replace(second=8), "orders", t)],
    ...                               [Assignment("orders", "h:42:ab", 3, t), Assignment("wide", "h:42:ab", 3, t)],
    ...                               boss, t.replace(second=10))))
    coordinator: h:42:ab (token 3, lease until 12:00:20)
    runner   started   heartbeat  doing         jobs
    h:42:ab  12:00:00  2s ago     orders (10s)  orders, wide
    """
    if not runners and not assignments:
        return []
    held = coordinator is not None and coordinator.held_at(now)
    lines = [f"coordinator: {coordinator.hostid} (token {coordinator.fence}, lease until {coordinator.lease_expires:%H:%M:%S})"
             if held else "coordinator: none (the next runner's tick elects one)"]
    table = [["runner", "started", "heartbeat", "doing", "jobs"]]
    for runner in runners:
        doing = f"{runner.doing} ({duration((now - runner.doing_since).total_seconds())})" if runner.doing else NONE
        jobs = ", ".join(a.job for a in assignments if a.runner == runner.id) or NONE
        table.append([runner.id, f"{runner.started:%H:%M:%S}", f"{duration((now - runner.heartbeat).total_seconds())} ago",
                      doing, jobs])
    orphans = [a.job for a in assignments if a.runner not in {r.id for r in runners}]
    widths = [max(len(row[i]) for row in table) for i in range(4)]
    lines += ["  ".join([*(cell.ljust(w) for cell, w in zip(row, widths)), row[-1]]).rstrip() for row in table]
    if orphans:
        lines.append(f"assigned to runners gone: {', '.join(orphans)} (the coordinator hands them on)")
    return lines


def state_words(state: str, last: Position | None = None) -> str:
    """A topic's ``state`` in words: the MV's storage and rows, a diffed input's snapshot, else as kept.

    >>> state_words('{"base_rows": 10000, "definition": "e7", "delta_rows": 120, "slot": "a", "swapping": ""}')
    'slot a, 10,000 rows + 120 in delta'
    >>> state_words('{"base_rows": 10000, "definition": "e7", "delta_rows": 120, "slot": "", "version": 12}')
    'Delta table, version 12, 10,000 rows'
    >>> state_words('{"base_rows": 5, "delta_rows": 0, "slot": "a", "swapping": "b"}')
    'slot a, 5 rows + 0 in delta, moving to slot b (a build or compaction was interrupted: the next run redoes it)'
    >>> state_words('{"base_rows": 5, "delta_rows": 4, "slot": "a", "chunked": {"batch": 7, "chunks": 8, "done": 3}}')
    'slot a, 5 rows + 4 in delta, chunked batch 7: 3 of 8 chunks written (the next run resumes it)'
    >>> state_words('{"fingerprint": "20:5:9"}', (12,)), state_words("caught up"), state_words("")
    ('snapshot of batch 12', 'caught up', '-')
    >>> state_words('{"mode": "versions"}', (7,)), state_words('{"mode": "cdf"}', (7,))
    ('diffed by time travel, up to Delta version 7', 'Change Data Feed read up to Delta version 7')
    >>> state_words('{"version": 12}', ("2026-01-01T00:00:00", 4))
    'read as of Delta version 12'
    """
    data = _json(state)
    if "slot" in data:
        return MvState.parse(state).words()
    if "fingerprint" in data:
        return f"snapshot of batch {last[0]}" if last else "no snapshot yet"
    if data.get("mode") in _VERSION_MODES:
        return f"{_VERSION_MODES[data['mode']]} up to Delta version {last[0]}" if last else "no version read yet"
    if "version" in data:  # a position input on Delta: the version its newest position was read from
        return f"read as of Delta version {data['version']}"
    return state or NONE


def show_position(position: Position | None, batch: bool = False, unit: str = "batch") -> str:
    """A position as users read it: ``-`` when unknown, timestamps as Spark prints them.

    >>> show_position(("2025-12-31T22:33:36", 525)), show_position(("2025-12-31 22:33:36.120000", 7))
    ('2025-12-31 22:33:36, 525', '2025-12-31 22:33:36.12, 7')
    >>> show_position((12,), batch=True), show_position(()), show_position(None), show_position((3,), True, "version")
    ('batch 12', 'no rows yet', '-', 'version 3')
    """
    if position is None:
        return NONE
    if not position:
        return "no rows yet"
    if batch:
        return f"{unit} {position[0]}"
    if (state := numerator_state(position)) is not None:
        return state
    return ", ".join(show_value(v) for v in position)


def numerator_state(position: Position) -> str | None:
    """A numerator's position (its state version T.S.V.G, build, previous build, scheme) in words;
    None for any other position.

    >>> numerator_state((1, 0, 2, 7, 12, 9, "0:4:offer_id")), numerator_state(("2025-12-31T22:33:36", 525))
    ('state 1.0.2.7 (build 12)', None)
    """
    try:
        numbered = NumeratorPosition.from_list(position)
        Scheme.parse(numbered.scheme)
    except (TypeError, ValueError):
        return None
    return f"state {numbered.version} (build {numbered.build})"


def show_value(value: Any) -> str:
    """One position value: a timestamp (ISO with ``T`` or a space) the way Spark casts it to string.

    >>> show_value("2025-12-31T22:33:36+00:00"), show_value("2025-12-31T22:33:36.250"), show_value(998)
    ('2025-12-31 22:33:36', '2025-12-31 22:33:36.25', '998')
    """
    when = _timestamp(value)
    if when is None:
        return str(value)
    return f"{show_time(when)}.{when.microsecond:06d}".rstrip("0") if when.microsecond else show_time(when)


def show_time(when: datetime | None) -> str:
    """A wall-clock time (a run, a step, ``now``) in UTC to the second (``-`` for None).

    >>> show_time(datetime(2026, 1, 1, 12, 0, 5, 250000, tzinfo=timezone.utc))
    '2026-01-01 12:00:05'
    """
    return NONE if when is None else _naive(when).strftime("%Y-%m-%d %H:%M:%S")


def duration(seconds: float | None) -> str:
    """A lag or an age in the largest unit that keeps it readable (``-`` for None).

    >>> [duration(s) for s in (42, 3600, 90000, 28166400, None)]
    ['42s', '60 min', '25 h', '326 days', '-']
    """
    if seconds is None:
        return NONE
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    if seconds < 172800:
        return f"{seconds // 3600} h"
    return f"{seconds // 86400} days"


def step_status(step: StepLogRow, batch: bool) -> dict[str, str]:
    """A step log row as the docs site shows it: its time, range and lag in the words of ``status``.

    >>> row = StepLogRow("orders", datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc), 3, last=None,
    ...                  next=("2025-12-31T21:50:24", 998), max_lag_seconds=90.0)
    >>> step_status(row, batch=False)
    {'ts': '2026-01-01 12:00:00', 'range': '(start, 2025-12-31 21:50:24, 998]', 'lag': '90s', 'skipped': '-'}
    >>> step_status(StepLogRow("orders", row.ts, 3, detail={"late": 2, "null_position": 1}), False)["skipped"]
    '2 late, 1 NULL position'
    """
    start = "start" if step.last is None else show_position(step.last, batch)
    skipped = [f"{step.detail[k]:,} {words}" for k, words in (("late", "late"), ("null_position", "NULL position"))
               if step.detail.get(k)]
    return {"ts": show_time(step.ts), "range": f"({start}, {show_position(step.next, batch)}]",
            "lag": duration(step.max_lag_seconds), "skipped": ", ".join(skipped) or NONE}


def batch_topics(offsets: Iterable[Offset]) -> set[str]:
    """Topics whose positions are batch numbers: every MV (a topic with ``<mv>:<input>`` topics),
    inputs diffed against snapshots (their state keeps a fingerprint) and inputs that are MVs."""
    offsets = list(offsets)
    mvs = {o.topic.split(":")[0] for o in offsets if ":" in o.topic}
    mvs |= {o.topic for o in offsets if "slot" in _json(o.state)}
    return mvs | {o.topic for o in offsets if "fingerprint" in _json(o.state) or o.topic.partition(":")[2] in mvs
                  or _json(o.state).get("mode") in _VERSION_MODES}


def _behind(offset: Offset, batch: bool) -> str:
    """How far ``last`` was behind the newest position of its source at the runner's last look.

    An MV input's ``next`` is the newest position its source held when the batch was planned
    (a batch takes every change there is), and a batch with nothing new writes nothing; a fact
    records the newest pending position (``seen``) when it stops for lack of ready rows.
    Anything else is not recorded: ``-``."""
    if batch or offset.last is None:
        return NONE
    nothing = "0s" if _time_of(offset.last) else "nothing"  # positions without a time have no lag in seconds
    if ":" in offset.topic:
        if not offset.in_flight:
            return nothing
        newest, last = _time_of(offset.next), _time_of(offset.last)
        return duration((newest - last).total_seconds()) if newest and last else NONE
    if offset.in_flight or offset.seen is None:
        return NONE
    if tuple(offset.seen) == tuple(offset.last):
        return nothing
    newest, last = _time_of(offset.seen), _time_of(offset.last)
    return duration(max(0.0, (newest - last).total_seconds())) if newest and last else NONE


def _age(offset: Offset, now: datetime, batch: bool) -> str:
    """Wall clock since the time of ``last`` (a batch's time is when it was committed)."""
    if offset.last is None:
        return NONE
    if batch:
        when = _naive(offset.run) if offset.run else None
    else:
        when = _time_of(offset.last)
    return duration((_naive(now) - when).total_seconds()) if when else NONE


def _time_of(position: Position | None) -> datetime | None:
    return _timestamp(position[0]) if position else None


def _timestamp(value: Any) -> datetime | None:
    if not isinstance(value, str) or not _TIMESTAMP.match(value):
        return None
    try:
        return _naive(datetime.fromisoformat(value))
    except ValueError:
        return None


def _naive(value: datetime) -> datetime:
    """UTC without tzinfo, as positions are."""
    return value.astimezone(timezone.utc).replace(tzinfo=None) if value.tzinfo else value


def _json(state: str) -> dict:
    """The runner's JSON state of an MV topic or a diffed input ({} for free text)."""
    if not state.startswith("{"):
        return {}
    try:
        data = json.loads(state)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}
