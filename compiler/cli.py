"""The ``mvflow`` command. Commands stay thin: load, call the module that does the work, print.

User errors print ``file:line: [code] what — what to do`` and exit 2 without a traceback
(``--debug`` shows one); a run with a failed model exits 1.
"""

from __future__ import annotations

import logging
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import click

from .errors import LOGGED, MvflowError, Problem, ProjectError

EXIT_USER_ERROR = 2
EXIT_RUN_FAILED = 1

_select = click.option("--select", "-s", multiple=True, help="Models to include (dbt syntax: name, +name, name+, tag:x, path:x, kind:x).")
_exclude = click.option("--exclude", multiple=True, help="Models to leave out (same syntax as --select).")
_target = click.option("--target", "-t", default=None, help="Target (profile) from project.yml.")


def _run_options(command):
    """The options of ``run`` and ``build``."""
    for option in reversed([
        click.option("--threads", default=1, show_default=True, type=click.IntRange(1, 64), help="Nodes run at once."),
        click.option("--full-refresh", is_flag=True, help="Rebuild incremental models from scratch (resets their offsets)."),
        click.option("--max-steps", default=None, type=click.IntRange(1), help="At most this many steps per fact model."),
        click.option("--rebuild-state", is_flag=True, help="Numerator models: compact the state (dense ids, a new V) first."),
        click.option("--no-file-check", "file_check", flag_value=False, default=True,
                     help="Ask Spark whether mv/fact inputs moved even when their files and offsets say nothing did."),
    ]):
        command = option(command)
    return command


class _Context:
    def __init__(self, project_dir: str, debug: bool, profiles_dir: str | None = None, variables: str | None = None):
        self.project_dir = Path(project_dir)
        self.profiles_dir = profiles_dir
        self.variables = variables  # --vars: YAML overriding the project's vars
        self.debug = debug
        self.cache = None  # the compile cache, saved only when the command succeeds

    def project(self):
        from .project import load_project

        from dataclasses import replace

        project = load_project(self.project_dir, self.profiles_dir)
        if not self.variables:
            return project
        given = _parse_vars(self.variables)
        return replace(project, vars={**project.vars, **given}, cli_vars=given)

    def manifest(self, target: str | None, select: tuple[str, ...] | None = None, exclude: tuple[str, ...] = ()):
        """The compiled project; with ``select``/``exclude`` (a run's), a model outside them whose SQL
        does not compile is set aside with a warning (``compile_project``'s ``needs``)."""
        from .cache import CompileCache
        from .compile import compile_project
        from .select import needed

        project = self.project()
        self.cache = CompileCache.for_project(project.root)
        needs = needed(select, exclude) if select is not None else None
        manifest = compile_project(project, target, self.cache, needs)
        for warning in manifest.warnings:
            click.echo(f"{'log' if warning.code == LOGGED else 'warning'}: {warning.format()}", err=True)
        manifest.graph.graph["state"] = lambda which: _catalog_state(manifest, which)  # --select state:modified
        return manifest


def _catalog_state(manifest, which: str) -> set[str]:
    """The models ``state:modified`` / ``state:new`` select: against the catalog's active versions."""
    from .catalog.report import modified
    from .state import open_state_store

    return modified(manifest, open_state_store(manifest.project.target(manifest.target).state), new_only=which == "new")


@click.group()
@click.version_option(package_name="mvflow", prog_name="mvflow")
@click.option("--project-dir", default=".", show_default=True, help="The project's directory (holds project.yml).")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.option("--profiles-dir", default=None, help="A dbt project's profiles.yml folder (default: $DBT_PROFILES_DIR, the project, ~/.dbt).")
@click.option("--vars", "variables", default=None, help="Project vars as YAML, over project.yml's: '{price_kind: sale}'.")
@click.pass_context
def cli(ctx: click.Context, project_dir: str, debug: bool, profiles_dir: str | None, variables: str | None) -> None:
    """mvflow: compile and run declarative SQL projects on Apache Spark (and dbt-core projects as they are)."""
    ctx.obj = _Context(project_dir, debug, profiles_dir, variables)


@cli.result_callback()
@click.pass_obj
def _succeeded(obj: _Context, *_, **__) -> None:
    """After a command succeeded: keep compile results for the next one (.mvflow/cache/, see cache.py)."""
    if obj.cache is not None:
        obj.cache.save()


@cli.command()
@_select
@_exclude
@_target
@click.pass_obj
def compile(obj: _Context, select, exclude, target) -> None:  # noqa: A001 - the command's name
    """Render, parse and resolve models; write target/compiled, target/run and manifest.json."""
    from .artifacts import write_artifacts
    from .select import select as choose

    started = time.monotonic()
    manifest = obj.manifest(target)
    selected = choose(manifest.graph, select, exclude)
    write_artifacts(manifest, selected)
    click.echo(f"compiled {len(selected)} of {len(manifest.models)} models, {len(manifest.sources)} sources "
               f"into {manifest.project.target_path}/ in {time.monotonic() - started:.2f}s")


@cli.command(name="ls")
@_select
@_exclude
@_target
@click.option("--output", "-o", type=click.Choice(["name", "path", "relation", "kind"]), default="name", show_default=True)
@click.pass_obj
def list_models(obj: _Context, select, exclude, target, output) -> None:
    """List the selected models in run order."""
    from .select import select as choose

    manifest = obj.manifest(target)
    for name in choose(manifest.graph, select, exclude):
        model = manifest.models[name]
        click.echo({"name": name, "path": model.path, "relation": model.relation, "kind": f"{model.kind.name}\t{name}"}[output])


cli.add_command(list_models, name="list")  # dbt's name


@cli.command()
@_target
@click.pass_obj
def parse(obj: _Context, target) -> None:
    """Check the whole project (render, parse, resolve) and write nothing; `compile` writes target/."""
    started = time.monotonic()
    manifest = obj.manifest(target)
    click.echo(f"parsed {len(manifest.models)} models, {len(manifest.tests)} tests, {len(manifest.sources)} sources "
               f"in {time.monotonic() - started:.2f}s")


@cli.command()
@click.pass_obj
def clean(obj: _Context) -> None:
    """Delete target/ (and a dbt project's clean-targets, folders inside the project)."""
    from .dbt.commands import clean as clean_project

    removed = clean_project(obj.project())
    click.echo(f"removed {', '.join(removed)}" if removed else "nothing to remove")


@cli.command(name="debug")
@_target
@click.pass_obj
def debug_command(obj: _Context, target) -> None:
    """The project, its target, Java, PySpark and dbt's macro library (Spark is not started)."""
    from .dbt.commands import debug_lines

    for line in debug_lines(obj.project(), target):
        click.echo(line)


@cli.command()
@click.pass_obj
def deps(obj: _Context) -> None:
    """Install the packages of packages.yml into dbt_packages/ (local and git ones) and lock their commits."""
    from .dbt.packages import install

    project = obj.project()
    if project.dialect != "dbt":
        raise ProjectError(Problem("mvflow deps installs a dbt project's packages: this project has no dbt_project.yml",
                                   project.settings_file, code="not-dbt", hint="mvflow's own projects have no packages"))
    install(project, echo=click.echo)


def _not_here(name: str) -> None:
    @cli.command(name=name, context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
                 help=f"dbt's `{name}`: says what to use in mvflow instead.", add_help_option=False)
    def command() -> None:
        from .dbt.commands import instead

        click.echo(f"error: {instead(name)}", err=True)
        sys.exit(EXIT_USER_ERROR)


for _name in ("retry", "run-operation"):
    _not_here(_name)


@cli.command()
@_select
@_exclude
@_target
@_run_options
@click.pass_obj
def run(obj: _Context, select, exclude, target, threads, **flags) -> None:
    """Compile, then build the selected models on Spark in dependency order."""
    from .select import select as choose

    manifest = obj.manifest(target, select, exclude)
    selected = [n for n in choose(manifest.graph, select, exclude)
                if manifest.models[n].kind.name not in ("seed", "ephemeral", "snapshot")]
    _locked_run(manifest, target, selected, threads, **flags)


@cli.command()
@_select
@_exclude
@_target
@click.option("--threads", default=1, show_default=True, type=click.IntRange(1, 64), help="Seeds loaded at once.")
@click.pass_obj
def seed(obj: _Context, select, exclude, target, threads) -> None:
    """Load the selected seeds (seeds/**/*.csv) into their tables, replacing what they held."""
    manifest, selected = _of_kind(obj, "seed", select, exclude, target)
    _locked_run(manifest, target, selected, threads)


def _of_kind(obj: _Context, kind: str, select, exclude, target) -> tuple:
    """The manifest narrowed to the selection (every model of ``kind`` without one), and the selected models of ``kind``."""
    from .select import select as choose

    manifest = obj.manifest(target, select or (f"kind:{kind}",), exclude)
    return manifest, [n for n in choose(manifest.graph, select, exclude) if manifest.models[n].kind.name == kind]


@cli.command()
@_select
@_exclude
@_target
@click.option("--threads", default=1, show_default=True, type=click.IntRange(1, 64), help="Snapshots taken at once.")
@click.pass_obj
def snapshot(obj: _Context, select, exclude, target, threads) -> None:
    """Take the selected snapshots (dbt's): changed rows close their current version and open a new one."""
    manifest, selected = _of_kind(obj, "snapshot", select, exclude, target)
    if not selected:
        folders = ", ".join(f"{p}/" for p in manifest.project.snapshot_paths)
        click.echo(f"nothing to do: no snapshot selected ({{% snapshot %}} blocks and YAML snapshots live under {folders})")
        return
    _locked_run(manifest, target, selected, threads)


@cli.command(name="test")
@_select
@_exclude
@_target
@click.option("--threads", default=1, show_default=True, type=click.IntRange(1, 64), help="Tests run at once.")
@click.pass_obj
def test_command(obj: _Context, select, exclude, target, threads) -> None:
    """Run the data tests of the selected models (and tests selected by name, tag or path)."""
    from .select import select_with_tests

    manifest = obj.manifest(target, select, exclude)
    selected = [n for n in select_with_tests(manifest, select, exclude) if n in manifest.tests]
    _locked_run(manifest, target, selected, threads)


@cli.command()
@_select
@_exclude
@_target
@_run_options
@click.pass_obj
def build(obj: _Context, select, exclude, target, threads, **flags) -> None:
    """Seeds, models and their tests in DAG order; a failing test skips what is downstream of its model."""
    from .select import select_with_tests

    manifest = obj.manifest(target, select, exclude)
    selected = [n for n in select_with_tests(manifest, select, exclude)
                if n in manifest.tests or manifest.models[n].kind.name != "ephemeral"]
    _locked_run(manifest, target, selected, threads, **flags)


def _locked_run(manifest, target, selected, threads, **flags) -> None:
    """``flags``: the run options of ``_run_options`` (``full_refresh``, ``max_steps``, ``file_check``, ``rebuild_state``)."""
    from .lock import target_lock
    from .state import open_state_store

    settings = manifest.project.target(target)
    store = open_state_store(settings.state)
    with target_lock(store, settings):
        _run(manifest, selected, settings, store, threads, **flags)


def _run(manifest, selected, settings, store, threads, **flags) -> None:
    from . import phases
    from .artifacts import write_artifacts
    from .drift import check_sources
    from .paths import target_file
    from .progress import Progress
    from .run import EXIT_INTERRUPTED, RunOptions, run_hooks, run_models
    from .spark import LazySession, spark_session

    write_artifacts(manifest, selected)  # the tests' files too: target/run/ holds what runs
    started = time.monotonic()
    models = {m for n in selected for m in ([n] if n in manifest.models else manifest.tests[n].depends_on)}
    delta = any(manifest.models[name].table_format == "delta" for name in models)
    spark = LazySession(lambda: spark_session(settings, delta=delta or None), then=lambda session: check_sources(session, manifest, selected))
    with Progress(click.echo, spark) as progress:
        options = RunOptions(store, **flags,
                             phase=phases.from_env(),  # MVFLOW_KILL_AT: the kill-point tests' hook, a no-op otherwise
                             echo=progress.echo, progress=progress)
        hooks = run_hooks(spark, manifest, "on-run-start", progress.echo)
        report = run_models(spark, manifest, selected, threads=threads, echo=progress.echo, options=options) if hooks.ok else hooks
        if hooks.ok:
            report.results += run_hooks(spark, manifest, "on-run-end", progress.echo).results
    target_file(manifest.project.target_dir, "run_results.json").write_text(report.to_json(manifest.project.name))
    click.echo(f"{'interrupted' if report.interrupted else 'done'} in {time.monotonic() - started:.1f}s: {report.summary()}")
    if report.interrupted:
        sys.exit(EXIT_INTERRUPTED)
    if not report.ok:
        sys.exit(EXIT_RUN_FAILED)


@cli.command()
@_select
@_exclude
@_target
@click.option("--interval", default=60.0, show_default=True, type=click.FloatRange(0.1), help="Seconds between two runs of one model.")
@click.option("--ttl", default=30.0, show_default=True, type=click.FloatRange(1),
              help="Seconds a runner's heartbeat and leases live: a dead runner's models move on after this.")
@click.option("--max-steps", default=None, type=click.IntRange(1), help="At most this many steps per fact model and run.")
@click.option("--threads", default=1, show_default=True, type=click.IntRange(1, 64),
              help="Models run at once (never two where one depends on the other).")
@click.option("--turns", default=None, type=click.IntRange(1), hidden=True, help="Stop after this many turns (tests).")
@click.pass_obj
def serve(obj: _Context, select, exclude, target, interval, ttl, max_steps, threads, turns) -> None:
    """Refresh the selected models forever, sharing them with the other `serve` runners of the
    target (one of them, elected, hands the models out). SIGTERM/Ctrl-C stops after the current step."""
    from .artifacts import write_artifacts
    from .drift import check_sources
    from .lock import target_lock
    from .select import select as choose
    from .serve.runner import RunnerProcess, ServeOptions, job_order
    from .spark import LazySession, spark_session
    from .state import open_state_store

    manifest = obj.manifest(target)
    jobs = job_order(manifest, choose(manifest.graph, select, exclude))
    settings = manifest.project.target(target)
    store = open_state_store(settings.state)
    write_artifacts(manifest, jobs)
    delta = any(manifest.models[name].table_format == "delta" for name in jobs)
    spark = LazySession(lambda: spark_session(settings, delta=delta or None), then=lambda session: check_sources(session, manifest, jobs))
    with target_lock(store, settings):
        RunnerProcess(manifest, jobs, store, spark, ServeOptions(interval, ttl, max_steps, turns, threads), click.echo).serve()


@cli.command()
@click.option("--select", "-s", "name", default=None, help="The model whose SELECT to run.")
@click.option("--inline", default=None, help="A query instead, with {{ ref('model') }} / {{ source('a', 'b') }}.")
@click.option("--limit", default=5, show_default=True, type=click.IntRange(1), help="Rows to show.")
@_target
@click.pass_obj
def show(obj: _Context, name, inline, limit, target) -> None:
    """Print the first rows of a model's SELECT (or of --inline SQL) without writing anything."""
    from .errors import CompileError, Problem
    from .lock import target_lock
    from .show import inline_query, limited, model_query, table_text
    from .spark import spark_session
    from .state import open_state_store

    if (name is None) == (inline is None):
        raise CompileError(Problem("give either --select MODEL or --inline SQL", code="bad-selection",
                                   hint="mvflow show --select orders --limit 10"))
    manifest = obj.manifest(target)
    sql = model_query(manifest, name) if name is not None else inline_query(manifest, inline)
    settings = manifest.project.target(target)
    with target_lock(open_state_store(settings.state), settings):
        frame = _spark_or_fail(lambda: spark_session(settings).sql(limited(sql, limit)))
        rows = _spark_or_fail(frame.collect)
    click.echo(f"Previewing {'model ' + name if name else 'inline query'} ({len(rows)} rows):")
    click.echo(table_text(frame.columns, [tuple(r) for r in rows]))


def _spark_or_fail(work):
    """A Spark error in a query the user gave: one line, exit 1."""
    from .errors import Problem, RunError
    from .failures import describe

    try:
        return work()
    except Exception as exc:  # noqa: BLE001
        if isinstance(exc, RunError):
            raise
        raise RunError(Problem(describe(exc), code="query-failed")) from None


@cli.group()
def source() -> None:
    """Sources: their freshness."""


@source.command(name="freshness")
@click.option("--select", "-s", multiple=True, help="Sources by name (wildcards allowed): raw.orders, stage.*.")
@_target
@click.pass_obj
def source_freshness(obj: _Context, select, target) -> None:
    """How long ago each source received data, judged by its freshness (warn_after / error_after)."""
    import fnmatch

    from . import freshness
    from .lock import target_lock
    from .paths import target_file
    from .run import run_hooks
    from .spark import spark_session
    from .state import open_state_store

    manifest = obj.manifest(target)
    patterns = [p for term in select for p in term.split()]
    chosen = [s for s in manifest.sources.values()
              if (s.freshness is not None if s.plain else freshness.loaded_at(s) is not None)
              and (not patterns or any(fnmatch.fnmatchcase(name, p) for p in patterns for name in (s.id, s.ref_name or s.id)))]
    settings = manifest.project.target(target)
    with target_lock(open_state_store(settings.state), settings):
        spark = spark_session(settings) if chosen or manifest.hooks else None
        hooks = run_hooks(spark, manifest, "on-run-start", click.echo)  # dbt runs them for freshness too
        results = [freshness.check(spark, s) for s in chosen] if hooks.ok else []
        hooks.results += run_hooks(spark, manifest, "on-run-end", click.echo).results if hooks.ok else []
    for result in results:
        click.echo(freshness.line(result))
    (manifest.project.target_dir).mkdir(parents=True, exist_ok=True)
    target_file(manifest.project.target_dir, "sources.json").write_text(freshness.to_json(results))
    click.echo(f"{len(results)} sources checked" + ("" if chosen else " (none declares freshness or a position)"))
    if not hooks.ok or any(r.status in ("error", "runtime error") for r in results):
        sys.exit(EXIT_RUN_FAILED)


@cli.command()
@_select
@_exclude
@_target
@click.pass_obj
def status(obj: _Context, select, exclude, target) -> None:
    """Offsets of fact models, MVs and MV inputs: last/next, how far behind the source, age, rows,
    lease holder, state in words (why a topic waits)."""
    from .kinds.fact.steps import utc_now
    from .select import select as choose
    from .state import open_state_store
    from .serve.coordinator import COORDINATOR
    from .publish import status as publish_status
    from .status import claim_lines, runner_lines, status_lines

    manifest = obj.manifest(target)
    chosen = set(choose(manifest.graph, select, exclude)) if select or exclude else None
    store = open_state_store(manifest.project.target(target).state)
    now = utc_now()
    runners = runner_lines(store.runners(), store.assignments(), store.get(COORDINATOR), now)
    published = publish_status.status_lines(publish_status.published_statuses(manifest, store, chosen, now))
    click.echo("\n".join([*claim_lines(store.claims(), now), *runners, *status_lines(store.offsets(), now, chosen),
                          *([""] + published if published else [])]))


@cli.command()
@_select
@_exclude
@_target
@click.option("--repair", is_flag=True, help="Publish again in full every published table that differs from its MV.")
@click.pass_obj
def verify(obj: _Context, select, exclude, target, repair) -> None:
    """Compare each MV, fact and numerator with a full recomputation of its SELECT (missing, extra,
    different rows), and each published table with its MV or table model."""
    from .lock import target_lock
    from .progress import Progress
    from .publish.publisher import publish_model
    from .publish.verify import verify_published
    from .select import select as choose
    from .spark import spark_session
    from .state import open_state_store
    from .verify import verify as check

    manifest = obj.manifest(target)
    chosen = choose(manifest.graph, select, exclude)
    names = [n for n in chosen if manifest.models[n].kind.verifiable]
    published = [n for n in chosen if getattr(manifest.models[n].kind, "publish", None) is not None]
    settings = manifest.project.target(target)
    store = open_state_store(settings.state)
    with target_lock(store, settings):
        delta = any(manifest.models[name].table_format == "delta" for name in {*names, *published})
        spark = spark_session(settings, delta=delta or None)
        with Progress(click.echo, spark) as progress:
            verdicts = check(spark, manifest, names, store, progress)
            for name in published:
                verdict = verify_published(spark, manifest, manifest.models[name])
                if repair and not verdict.ok and not verdict.skipped:
                    click.echo(verdict.format())
                    click.echo(publish_model(spark, manifest, manifest.models[name], store, repair=True, echo=click.echo).words())
                    verdict = verify_published(spark, manifest, manifest.models[name])
                verdicts.append(verdict)
    for verdict in verdicts:
        click.echo(verdict.format())
    if any(not v.ok and not v.skipped for v in verdicts):
        sys.exit(EXIT_RUN_FAILED)


@cli.command()
@click.argument("model")
@click.option("--costs", is_flag=True, help="Also the batches the cost model read and its last 10 decisions, "
              "estimated against actual seconds.")
@_target
@click.pass_obj
def explain(obj: _Context, model, costs, target) -> None:
    """Print what mvflow derived for an MV: key, hidden columns, key queries per input, refresh SQL."""
    from .errors import CompileError, Problem, did_you_mean
    from .kinds import MvKind
    from .kinds.mv.derive import explain as describe
    from .kinds.mv.analyze import mv_plan
    from .kinds.mv.refresh import strategy_lines

    manifest = obj.manifest(target)
    found = manifest.models.get(model)
    mvs = "mv models here: " + (", ".join(name for name, m in manifest.models.items() if isinstance(m.kind, MvKind)) or "none")
    if found is None:
        raise CompileError(Problem(f"no model named '{model}'", hint=did_you_mean(model, manifest.models) or mvs,
                                   code="unknown-model"))
    if not isinstance(found.kind, MvKind):
        raise CompileError(Problem(f"'{model}' is a {found.kind.name} model: explain shows what mvflow derives for an mv",
                                   found.path, 1, hint=mvs, code="not-an-mv"))
    plan = mv_plan(found, manifest)
    click.echo(describe(plan, strategy_lines(manifest.project.target(target).state, plan, found.kind, costs)), nl=False)


@cli.command()
@_select
@_exclude
@_target
@click.option("--full-refresh", is_flag=True, help="As `mvflow run --full-refresh` would.")
@click.pass_obj
def plan(obj: _Context, select, exclude, target, full_refresh) -> None:
    """What the next `mvflow run` would do to each model (build, refresh, rebuild because of a breaking
    change, refuse, nothing), from the compiled project, the catalog and the offsets; no Spark.
    It checks the project as `mvflow compile` does (and writes nothing)."""
    from .artifacts import check_artifacts
    from .catalog.report import plan as next_runs
    from .kinds.fact.steps import utc_now
    from .select import select as choose
    from .state import open_state_store

    manifest = obj.manifest(target)
    chosen = choose(manifest.graph, select, exclude)
    check_artifacts(manifest, chosen)
    selected = [n for n in chosen if manifest.models[n].kind.name not in ("seed", "ephemeral", "snapshot")]
    store = open_state_store(manifest.project.target(target).state)
    steps = next_runs(manifest, selected, store, utc_now(), full_refresh)
    click.echo("\n".join(str(step) for step in steps))
    if any(step.action == "REFUSE" for step in steps):
        sys.exit(EXIT_RUN_FAILED)


@cli.command(name="catalog")
@click.argument("words", nargs=-1, metavar="[MODEL] | diff MODEL V1 V2")
@click.option("--at", "at", default=None, help="The versions active at this time (ISO, UTC unless it says): 2026-11-24T10:00.")
@_target
@click.pass_obj
def catalog_command(obj: _Context, words, at, target) -> None:
    """The catalog: each model's active version and last breaking change; a model's versions; the
    diff of two versions (`mvflow catalog diff MODEL 1 2`)."""
    from .catalog.report import check_model, diff_lines, version_lines
    from .errors import CompileError, Problem
    from .state import open_state_store

    manifest = obj.manifest(target)
    store = open_state_store(manifest.project.target(target).state)
    if words[:1] == ("diff",):
        if len(words) != 4 or not all(w.lstrip("v").isdigit() for w in words[2:]):
            raise CompileError(Problem("catalog diff takes a model and two version numbers", code="bad-arguments",
                                       hint="e.g. mvflow catalog diff orders_enriched 1 2"))
        check_model(manifest, words[1])
        click.echo("\n".join(diff_lines(store, words[1], int(words[2].lstrip("v")), int(words[3].lstrip("v")))))
        return
    if len(words) > 1:
        raise CompileError(Problem(f"unexpected arguments: {' '.join(words[1:])}", code="bad-arguments",
                                   hint="mvflow catalog [MODEL] [--at TIME], or mvflow catalog diff MODEL V1 V2"))
    if words:
        check_model(manifest, words[0])
    click.echo("\n".join(version_lines(store, words[0] if words else None, _moment(at))))


def _moment(text: str | None):
    from datetime import datetime, timezone

    from .errors import CompileError, Problem

    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise CompileError(Problem(f"--at {text!r} is not a time", code="bad-arguments",
                                   hint="write it as ISO 8601, e.g. 2026-11-24T10:00 (UTC) or 2026-11-24T10:00+03:00")) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


@cli.command(name="lineage")
@click.argument("column")
@click.option("--upstream", "direction", flag_value="upstream", help="Only where the column comes from.")
@click.option("--downstream", "direction", flag_value="downstream", help="Only what is computed from it.")
@_target
@click.pass_obj
def lineage_command(obj: _Context, column, direction, target) -> None:
    """Column lineage of MODEL[.COLUMN] (or DATABASE.SOURCE[.COLUMN]), upstream and downstream."""
    from .lineage import find_columns, lineage, lineage_tree

    manifest = obj.manifest(target)
    traced = lineage(manifest)
    for ref in find_columns(manifest, traced, column):
        up, down = lineage_tree(traced, ref), lineage_tree(traced, ref, downstream=True)
        click.echo("\n".join({"upstream": up, "downstream": down}.get(direction) or up + down[1:]))


@cli.group()
def docs() -> None:
    """The static docs site in target/docs/."""


@docs.command(name="generate")
@_target
@click.pass_obj
def docs_generate(obj: _Context, target) -> None:
    """Compile, then write the docs site to target/docs/ (opens from file:// too)."""
    from .artifacts import write_artifacts
    from .docs import generate_docs

    started = time.monotonic()
    manifest = obj.manifest(target)
    write_artifacts(manifest)
    index = generate_docs(manifest)
    click.echo(f"wrote {index} in {time.monotonic() - started:.2f}s")


@docs.command(name="serve")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535), help="0 picks a free port.")
@click.pass_obj
def docs_serve(obj: _Context, port) -> None:
    """Serve target/docs/ on http://127.0.0.1:PORT until Ctrl+C (run `docs generate` first)."""
    from .docs import serve_docs

    serve_docs(obj.project().target_dir / "docs", port, echo=click.echo)


@cli.group()
def demo() -> None:
    """Create and change the demo project's source tables."""


@demo.command(name="init")
@click.option("--scale", default=1.0, show_default=True, type=click.FloatRange(min=0.001), help="1 = 10,000 offers.")
@click.option("--seed", default=1, show_default=True, type=int)
@_target
@click.pass_obj
def demo_init(obj: _Context, scale, seed, target) -> None:
    """(Re)create the demo source tables, deterministic for a seed."""
    from .demo import init
    from .progress import Progress
    from .lock import target_lock
    from .spark import spark_session
    from .state import open_state_store

    settings = obj.project().target(target)
    with target_lock(open_state_store(settings.state), settings):
        spark = spark_session(settings)
        with Progress(click.echo, spark) as progress:
            counts = init(spark, scale=scale, seed=seed, table_format=settings.table_format, progress=progress)
    click.echo("created " + ", ".join(f"{table} ({rows:,} rows)" for table, rows in counts.items()))


@demo.command(name="change")
@click.option("--fraction", default=0.01, show_default=True, type=click.FloatRange(0, 1), help="Share of rows to touch.")
@click.option("--seed", default=2, show_default=True, type=int)
@click.option("--batches", default=1, show_default=True, type=click.IntRange(min=1),
              help="Batches to apply, seeds SEED, SEED+1, ...: a stream of changes for `mvflow serve` to follow.")
@click.option("--every", default=0.0, show_default=True, type=click.FloatRange(min=0),
              help="A batch starts every SECONDS (at once when the last took longer).")
@_target
@click.pass_obj
def demo_change(obj: _Context, fraction, seed, batches, every, target) -> None:
    """Apply one batch (or --batches) of production-like changes to the demo sources."""
    from .demo import change
    from .progress import Progress
    from .lock import target_lock
    from .spark import spark_session
    from .state import open_state_store

    settings = obj.project().target(target)
    with target_lock(open_state_store(settings.state), settings):
        spark = spark_session(settings)
        started = time.monotonic()
        for n in range(batches):
            time.sleep(max(0.0, started + n * every - time.monotonic()))
            with Progress(click.echo, spark) as progress:
                counts = change(spark, fraction=fraction, seed=seed + n, progress=progress)
            click.echo("changed " + ", ".join(f"{table}: {what}" for table, what in counts.items()))


@contextmanager
def _debug_log(debug: bool) -> Iterator[None]:
    """With --debug, the ``mvflow`` logger prints debug records (full errors, Java stack traces too)
    and Spark logs to the terminal (see spark.py); reset afterwards for callers that go on."""
    if not debug:
        yield
        return
    logger, handler = logging.getLogger("mvflow"), logging.StreamHandler()
    level = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _set_project_dir(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.find_object(_Context).project_dir = Path(value)


def _parse_vars(text: str) -> dict:
    """``--vars``: a YAML mapping; anything else is a user error."""
    from .errors import Problem, ProjectError
    from .yamlfile import load_yaml_text

    value = load_yaml_text(text, "--vars")
    if not isinstance(value, dict):
        raise ProjectError(Problem(f"--vars must be a YAML mapping, got {text!r}", "--vars", code="bad-value",
                                   hint="e.g. --vars '{price_kind: sale, days: 7}'"))
    return dict(value)


def _set_vars(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.find_object(_Context).variables = value


def _set_profiles_dir(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.find_object(_Context).profiles_dir = value


def _set_debug(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.find_object(_Context).debug = True


def _accept_global_options(group: click.Group) -> None:
    """Let every command take --project-dir and --debug after its name too: ``mvflow compile --project-dir X``."""
    for command in {id(c): c for c in group.commands.values()}.values():  # `list` is `ls` under dbt's name
        if isinstance(command, click.Group):
            _accept_global_options(command)
            continue
        command.params += [
            click.Option(["--project-dir"], default=None, expose_value=False, callback=_set_project_dir,
                         help="The project's directory (as before the command name)."),
            click.Option(["--debug"], is_flag=True, expose_value=False, callback=_set_debug,
                         help="Show tracebacks for errors."),
            click.Option(["--profiles-dir"], default=None, expose_value=False, callback=_set_profiles_dir,
                         help="A dbt project's profiles.yml folder (as before the command name)."),
            click.Option(["--vars"], default=None, expose_value=False, callback=_set_vars,
                         help="Project vars as YAML (as before the command name)."),
        ]


_accept_global_options(cli)


def main(argv: list[str] | None = None) -> None:
    from .depth import recursion_room, too_deep

    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        with _debug_log(debug), recursion_room():  # deeply nested SQL (depth.py)
            cli.main(args=argv, prog_name="mvflow", standalone_mode=False)
    except MvflowError as exc:
        if debug:
            raise
        click.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except RecursionError:  # where no model was at hand to name (they are named where they are handled)
        if debug:
            raise
        click.echo(f"error: {too_deep(None, what='something in the project').format()} (--debug shows where)", err=True)
        sys.exit(EXIT_USER_ERROR)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
