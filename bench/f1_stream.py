"""F1: freshness under a stream (issue 32, item 5): how long a change takes to reach the MVs while
``mvflow serve`` follows a steady stream of them, and whether a backlog builds up.

    python -m bench.f1_stream                            # 1M offers (scale 100), 100 changes/s, 30 minutes
    python -m bench.f1_stream --scale 1 --minutes 3      # a quick look: 10,000 offers

One ``mvflow serve`` runner follows the demo project while ``mvflow demo change --batches N --every E``
lands a batch every E seconds: rate × E offers changed (``--fraction``), with their prices, new
orders and dictionary edits. Both processes share a PostgreSQL state store and Hive metastore (the
embedded Derby one admits one process at a time): a throwaway server (``tests/pg_server.py``) unless
``--dsn`` names one.

A landed batch is visible in an MV when a batch of the MV that started after the landing has
committed (its step log row: committed at ``ts``, started ``seconds`` before): its latency is that
commit minus the landing. The backlog at a moment is the batches landed and not yet visible. Prints
p50/p95/max latency per MV and the backlog's growth over the stream (target: p95 ≤ 60 s, no growth);
writes ``f1.md``, ``f1.json`` and, with matplotlib installed (the ``bench`` extra), ``f1.png`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "bench" / ".work" / "f1"
MVFLOW = [sys.executable, "-c", "from compiler.cli import main; main()"]
MVS = ("offers_wide", "category_stats")
UPSTREAM = {"category_stats": "offers_wide"}  # an MV of an MV: a change reaches it through its upstream's batch
OFFERS_PER_SCALE = 10_000
TARGET_P95 = 60.0

TARGET = """
  stream:
    table_format: delta
    spark:
      master: local[*]
      app_name: mvflow-f1
      warehouse_dir: {warehouse}
      log_level: ERROR
      conf: {{spark.driver.memory: {memory}, spark.sql.shuffle.partitions: 8}}
    state: {{type: postgres, dsn: "{state}"}}
    metastore: {{type: postgres, dsn: "{metastore}"}}
"""


# -- what the figures are (pure) -----------------------------------------------------------------

@dataclass(frozen=True, order=True)
class Step:
    """One MV batch: when it started and when it committed (epoch seconds)."""

    started: float
    committed: float


def visible_at(landed: list[float | None], steps: list[Step]) -> list[float | None]:
    """Per landed batch, when the first MV batch started after it committed (None: none did, or
    the batch never reached the MV's input).

    >>> visible_at([10.0, 20.0, 50.0, None], [Step(5, 12), Step(12, 30), Step(31, 40)])
    [30, 40, None, None]
    """
    return [None if t is None else min((s.committed for s in steps if s.started > t), default=None) for t in landed]


def percentile(values: list[float], share: float) -> float | None:
    """Nearest-rank percentile.

    >>> percentile([5.0, 1.0, 3.0, 2.0, 4.0], 0.95), percentile([5.0, 1.0, 3.0], 0.5), percentile([], 0.5)
    (5.0, 3.0, None)
    """
    if not values:
        return None
    rank = math.ceil(round(share * len(values), 9))  # round: 0.95 * 20 is 19.000000000000004
    return sorted(values)[max(rank, 1) - 1]


def backlog(landed: list[float], visible: list[float | None], at: float) -> int:
    """Batches landed by ``at`` and not yet visible then.

    >>> backlog([1.0, 2.0, 3.0], [5.0, None, 2.5], at=4.0)
    2
    """
    return sum(1 for t, v in zip(landed, visible) if t <= at and (v is None or v > at))


def growth(samples: list[tuple[float, int]]) -> float:
    """The backlog's growth over the samples, in batches: the least-squares slope times their span
    (a steady backlog that goes up and down by a batch or two grows by about 0).

    >>> round(growth([(0, 1), (10, 2), (20, 3)]), 6), round(growth([(0, 1), (10, 0), (20, 1)]), 6)
    (2.0, 0.0)
    """
    if len(samples) < 2:
        return 0.0
    n = len(samples)
    mean_t = sum(t for t, _ in samples) / n
    mean_b = sum(b for _, b in samples) / n
    spread = sum((t - mean_t) ** 2 for t, _ in samples)
    if spread == 0:
        return 0.0
    slope = sum((t - mean_t) * (b - mean_b) for t, b in samples) / spread
    return slope * (samples[-1][0] - samples[0][0])


@dataclass
class MvFigures:
    mv: str
    batches: int           # MV batches during the stream
    latencies: list[float]
    unseen: int            # landed batches no MV batch showed before the end
    p50: float | None
    p95: float | None
    max: float | None
    growth: float          # backlog growth over the stream, in landed batches
    visible: list[float | None]  # per landed batch, when the MV showed it

    @property
    def verdict(self) -> str:
        met = self.p95 is not None and self.p95 <= TARGET_P95 and self.growth < 1 and not self.unseen
        return "met" if met else "missed"


def figures(mv: str, landed: list[float], steps: list[Step], start: float, end: float,
            reached: list[float | None] | None = None, every: float = 5.0) -> MvFigures:
    """``reached``: when each batch reached the MV's input, for an MV of an MV (its upstream's
    batch published it); the landing otherwise."""
    visible = visible_at(landed if reached is None else reached, steps)
    lat = [v - t for t, v in zip(landed, visible) if v is not None]
    samples = [(at, backlog(landed, visible, at)) for at in _ticks(start, end, every)]
    return MvFigures(mv, sum(1 for s in steps if s.started >= start), lat, visible.count(None), percentile(lat, 0.5),
                     percentile(lat, 0.95), max(lat, default=None), growth(samples), visible)


def _ticks(start: float, end: float, every: float) -> list[float]:
    return [start + i * every for i in range(int((end - start) // every) + 1)]


# -- running it ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Options:
    scale: float = 100.0
    rate: float = 100.0      # offers changed per second
    every: float = 10.0      # seconds between batches landing
    minutes: float = 30.0
    interval: float = 5.0    # serve --interval
    threads: int = 1         # serve --threads (2 measured slower at 1M on 2 cores: bench/results/f1-1m.md)
    select: str = ""
    dsn: str = ""            # a PostgreSQL server (its postgres database); empty: a throwaway one
    out: Path = WORK


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "MVFLOW_TABLE_FORMAT": "delta"}


def _mvflow(project: Path, *args: str) -> None:
    done = subprocess.run([*MVFLOW, *args], cwd=project, env=_env(), capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"mvflow {' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def _project(options: Options, dsn: str) -> Path:
    import psycopg

    from bench.p4_noop import demo_copy

    project = demo_copy(options.out / "demo")
    state = f"f1_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as db:
        db.execute(f"CREATE DATABASE {state}")
    base = dsn.rsplit("/", 1)[0]
    memory = "3g" if options.scale >= 10 else "1g"
    text = (project / "project.yml").read_text().replace("default_target: local", "default_target: stream")
    (project / "project.yml").write_text(text + TARGET.format(
        warehouse=project / "warehouse", memory=memory, state=f"{base}/{state}", metastore=f"{base}/{state}_hive"))
    return project


def _steps(project: Path, mv: str) -> list[Step]:
    from compiler.project import load_project
    from compiler.state import open_state_store

    store = open_state_store(load_project(project).target().state)
    rows = store.steps(mv, limit=100_000)
    return sorted(Step(r.ts.timestamp() - r.seconds, r.ts.timestamp()) for r in rows)


def _feed(project: Path, options: Options, batches: int, fraction: float, landed: list[float], log: Path) -> subprocess.Popen:
    """``demo change`` as a stream; each ``changed`` line it prints is a batch landing (its commits done)."""
    proc = subprocess.Popen([*MVFLOW, "demo", "change", "--fraction", f"{fraction:.8f}", "--seed", "1000",
                             "--batches", str(batches), "--every", str(options.every)],
                            cwd=project, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def read() -> None:
        with log.open("w") as out:
            for line in proc.stdout:
                out.write(line)
                if line.startswith("changed "):
                    landed.append(time.time())

    threading.Thread(target=read, daemon=True).start()
    return proc


def run(options: Options, echo=print) -> list[MvFigures]:
    sys.path.insert(0, str(ROOT / "tests"))
    from pg_server import PostgresServer

    server = None if options.dsn else PostgresServer().start()
    dsn = options.dsn or server.dsn
    try:
        return _stream(options, dsn, echo)
    finally:
        if server is not None:
            server.stop()


def _stream(options: Options, dsn: str, echo) -> list[MvFigures]:
    options.out.mkdir(parents=True, exist_ok=True)
    project = _project(options, dsn)
    offers = int(OFFERS_PER_SCALE * options.scale)
    fraction = min(1.0, options.rate * options.every / offers)
    batches = max(1, int(options.minutes * 60 // options.every))
    echo(f"f1: demo at scale {options.scale} ({offers:,} offers): init and a first run")
    _mvflow(project, "demo", "init", "--scale", str(options.scale), "--seed", "7")
    _mvflow(project, "run", *(["--select", options.select] if options.select else []))

    serve_log = (options.out / "serve.log").open("w")
    serve = subprocess.Popen([*MVFLOW, "serve", "--interval", str(options.interval), "--threads", str(options.threads),
                              *(["--select", options.select] if options.select else [])],
                             cwd=project, env=_env(), stdout=serve_log, stderr=subprocess.STDOUT, start_new_session=True)
    landed: list[float] = []
    try:
        time.sleep(options.interval * 2)  # the runner registered and found nothing to do
        start = time.time()
        echo(f"f1: {batches} batches of {fraction * offers:,.0f} offers changed (fraction {fraction:.6f}), one every "
             f"{options.every:g} s ({options.rate:g} changes/s) for {options.minutes:g} minutes")
        feeder = _feed(project, options, batches, fraction, landed, options.out / "feed.log")
        over = False  # a feeder slower than the rate asked: the stream still ends on time
        while feeder.poll() is None and not over:
            time.sleep(30)
            echo(f"f1: {len(landed)}/{batches} batches landed, {time.time() - start:,.0f} s")
            over = time.time() > start + options.minutes * 60 + options.every
        if over:
            feeder.terminate()  # its batch in flight is not counted (no `changed` line)
            feeder.wait()
            echo(f"f1: {options.minutes:g} minutes are over: {len(landed)} of {batches} batches landed "
                 f"(the feeder is slower than {options.rate:g} changes/s)")
        end = time.time()
        if feeder.returncode and not over:
            raise SystemExit(f"demo change failed: see {options.out / 'feed.log'}")
        _wait_caught_up(project, landed, deadline=end + max(600.0, options.minutes * 20), echo=echo)
    finally:
        serve.send_signal(signal.SIGTERM)
        try:
            serve.wait(timeout=600)
        except subprocess.TimeoutExpired:
            os.killpg(serve.pid, signal.SIGKILL)
        serve_log.close()
    results = [figures(mv, landed, _steps(project, mv), start, end, _reached(project, mv, landed)) for mv in MVS]
    _save(options, results, landed, start, end, fraction, offers)
    return results


def _reached(project: Path, mv: str, landed: list[float]) -> list[float | None]:
    """When each landed batch reached ``mv``'s input: its landing, or its upstream MV's showing it."""
    if mv not in UPSTREAM:
        return list(landed)
    return visible_at(_reached(project, UPSTREAM[mv], landed), _steps(project, UPSTREAM[mv]))


def _visible(project: Path, mv: str, landed: list[float]) -> list[float | None]:
    return visible_at(_reached(project, mv, landed), _steps(project, mv))


def _wait_caught_up(project: Path, landed: list[float], deadline: float, echo) -> None:
    while time.time() < deadline:
        if all(None not in _visible(project, mv, landed) for mv in MVS):
            return
        time.sleep(5)
    echo("f1: the MVs had not caught up with every batch by the deadline (counted as unseen)")


def table(results: list[MvFigures]) -> str:
    def s(value: float | None) -> str:
        return "–" if value is None else f"{value:.1f} s"

    lines = ["| MV | MV batches | landed batches seen | p50 | p95 | max | backlog growth | target p95 ≤ 60 s, no growth |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r.mv} | {r.batches} | {len(r.latencies)} of {len(r.latencies) + r.unseen} | {s(r.p50)} | "
                     f"{s(r.p95)} | {s(r.max)} | {r.growth:+.1f} batches | {r.verdict} |")
    return "\n".join(lines)


def _save(options: Options, results: list[MvFigures], landed: list[float], start: float, end: float,
          fraction: float, offers: int) -> None:
    achieved = len(landed) * fraction * offers / max(end - start, 1e-9)
    text = (f"F1 at scale {options.scale:g} ({offers:,} offers): {options.rate:g} changes/s asked, in batches every "
            f"{options.every:g} s (fraction {fraction:.6f}); {len(landed)} batches landed in {end - start:,.0f} s "
            f"({achieved:,.0f} changes/s); serve --interval {options.interval:g} --threads {options.threads}\n\n{table(results)}\n")
    (options.out / "f1.md").write_text(text)
    (options.out / "f1.json").write_text(json.dumps({"options": {k: str(v) for k, v in asdict(options).items()},
                                                     "landed": landed, "start": start, "end": end,
                                                     "results": [asdict(r) for r in results]}, indent=1))
    print(text)
    try:
        _plot(options.out / "f1.png", results, landed, start, end)
    except ImportError:
        print("f1: no plot (pip install -e '.[bench]' for matplotlib)")


def _plot(path: Path, results: list[MvFigures], landed: list[float], start: float, end: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for r in results:
        visible = r.visible
        seen = [(t - start, v - t) for t, v in zip(landed, visible) if v is not None]
        top.plot([x for x, _ in seen], [y for _, y in seen], marker=".", label=r.mv)
        ticks = _ticks(start, max(end, max((v for v in visible if v), default=end)), 5.0)
        bottom.step([t - start for t in ticks], [backlog(landed, visible, t) for t in ticks], where="post", label=r.mv)
    top.axhline(TARGET_P95, color="grey", linestyle="--", linewidth=1)
    top.set_ylabel("change → MV row (s)")
    bottom.set_ylabel("backlog (batches)")
    bottom.set_xlabel("seconds since the stream began")
    top.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"f1: plot in {path}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.f1_stream", description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=Options.scale, help="demo scale (1 = 10,000 offers)")
    parser.add_argument("--rate", type=float, default=Options.rate, help="offers changed per second")
    parser.add_argument("--every", type=float, default=Options.every, help="seconds between batches landing")
    parser.add_argument("--minutes", type=float, default=Options.minutes, help="how long the stream lasts")
    parser.add_argument("--interval", type=float, default=Options.interval, help="serve --interval")
    parser.add_argument("--threads", type=int, default=Options.threads, help="serve --threads")
    parser.add_argument("--select", default="", help="serve --select (default: the whole demo)")
    parser.add_argument("--dsn", default="", help="a PostgreSQL server to use (default: a throwaway one)")
    parser.add_argument("--out", type=Path, default=WORK)
    args = parser.parse_args(argv)
    run(Options(args.scale, args.rate, args.every, args.minutes, args.interval, args.threads, args.select, args.dsn, args.out))


if __name__ == "__main__":
    main()
