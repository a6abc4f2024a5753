"""A dbt-core project as it is: ``dbt_project.yml`` and the ``profiles.yml`` output it names.

The result is mvflow's own ``Project`` with ``dialect="dbt"``: paths from ``model-paths``,
``seed-paths``, ``macro-paths``, ``test-paths`` and ``docs-paths``; ``vars``; the ``models:``,
``seeds:`` and ``data_tests:`` blocks as per-folder defaults (under the project's name, keys
with or without ``+``; under an installed package's name, the package's: ``compiler.dbt.packages``);
``on-run-start``/``on-run-end``; and one target per output of the profile. The spark adapter's ``session`` method is a local Spark target whose ``schema`` is the
default schema; other adapters and methods are refused with one line when chosen.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..errors import Problem, ProjectError
from ..project import DEFAULT_SPARK_CONF, Project, SparkSettings, StateSettings, Target, _render_values
from ..yamlfile import LineDict, load_yaml
from .packages import BLOCKS, installed

DBT_PROJECT_FILE = "dbt_project.yml"
PROFILES_FILE = "profiles.yml"
#: dbt_project.yml keys that hold Jinja rendered later (per model or at run time), not at load
_LATER = {"models", "seeds", "data_tests", "tests", "snapshots", "on-run-start", "on-run-end", "vars"}
#: config keys whose value is a mapping (not a folder) in a models/seeds block
_MAPPING_CONFIGS = {"column_types", "meta", "docs", "persist_docs", "grants", "contract", "tblproperties", "quoting",
                    "snapshot_meta_column_names"}
#: dbt configs a folder key can be mistaken for when written without '+'
CONFIG_NAMES = {
    "materialized", "schema", "alias", "tags", "enabled", "pre-hook", "post-hook", "pre_hook", "post_hook",
    "file_format", "partition_by", "incremental_strategy", "unique_key", "on_schema_change", "full_refresh",
    "column_types", "quote_columns", "delimiter", "severity", "where", "store_failures", "warn_if", "error_if",
    "fail_calc", "limit", "database", "meta", "docs", "persist_docs", "grants", "contract", "clustered_by", "buckets",
    "location_root", "tblproperties", "description", "quoting", "access", "group",
    "strategy", "updated_at", "check_cols", "target_schema", "target_database", "hard_deletes", "invalidate_hard_deletes",
    "dbt_valid_to_current", "snapshot_meta_column_names",
}


def load_dbt_project(root: Path, profiles_dir: Path | str | None = None) -> Project:
    path = root / DBT_PROJECT_FILE
    raw = load_yaml(path, DBT_PROJECT_FILE)
    if not isinstance(raw, LineDict) or "name" not in raw:
        raise ProjectError(Problem("dbt_project.yml must be a mapping with a name", DBT_PROJECT_FILE, 1, code="yaml",
                                   hint="start with 'name: <project name>'"))
    data = LineDict({k: (v if k in _LATER else _render_values(v, DBT_PROJECT_FILE, raw.line_of(k))) for k, v in raw.items()})
    data.line, data.key_lines = raw.line, raw.key_lines
    name = str(data["name"])
    targets, default, unusable = load_profile(root, str(data.get("profile") or name), profiles_dir)
    project = Project(
        root=root,
        name=name,
        version=str(data.get("version", "0")),
        model_paths=_paths(data, "model-paths", ["models"], legacy="source-paths"),
        macro_paths=_paths(data, "macro-paths", ["macros"]),
        lineage_paths=(),
        target_path=str(data.get("target-path", "target")),
        vars=dict(data.get("vars") or {}),
        model_defaults=config_block(data.get("models"), name),
        targets=targets,
        default_target=default,
        seed_paths=_paths(data, "seed-paths", ["seeds"], legacy="data-paths"),
        seed_defaults=config_block(data.get("seeds"), name),
        snapshot_paths=_paths(data, "snapshot-paths", ["snapshots"]),
        snapshot_defaults=config_block(data.get("snapshots"), name),
        test_paths=_paths(data, "test-paths", ["tests"]),
        test_defaults=config_block(data.get("data_tests", data.get("tests")), name),
        dialect="dbt",
        on_run_start=_hooks(data.get("on-run-start")),
        on_run_end=_hooks(data.get("on-run-end")),
        docs_paths=_paths(data, "docs-paths", []),
        flags=dict(data.get("flags") or {}),
        dispatch=_dispatch(data.get("dispatch")),
        unusable_targets=unusable,
    )
    packages = tuple(installed(project, {block: data.get(block) for block in BLOCKS}))
    if not packages:
        return project
    names = {p.name for p in packages}  # the project's block under a package's name configures the package
    return replace(project, packages=packages, model_defaults=config_block(data.get("models"), name, names),
                   seed_defaults=config_block(data.get("seeds"), name, names))


def _dispatch(value: Any) -> dict[str, tuple[str, ...]]:
    """``dispatch: [{macro_namespace: dbt_utils, search_order: [my_project, dbt_utils]}]``.

    >>> _dispatch([{"macro_namespace": "dbt_utils", "search_order": ["shop", "dbt_utils"]}])
    {'dbt_utils': ('shop', 'dbt_utils')}
    """
    entries = value if isinstance(value, list) else []
    return {str(e["macro_namespace"]): tuple(str(n) for n in e.get("search_order") or ())
            for e in entries if isinstance(e, dict) and e.get("macro_namespace")}


def _paths(data: LineDict, key: str, default: list[str], legacy: str | None = None) -> tuple[str, ...]:
    value = data.get(key, data.get(legacy, default) if legacy else default)
    return tuple(str(v) for v in (value if isinstance(value, list) else [value]))


def _hooks(value: Any) -> tuple[str, ...]:
    items = value if isinstance(value, list) else [value] if value else []
    return tuple(str(item.get("sql", "")) if isinstance(item, dict) else str(item) for item in items)


def config_block(block: Any, project_name: str, packages: set[str] = frozenset()) -> LineDict:
    """A dbt ``models:``/``seeds:``/``data_tests:`` block as mvflow's per-folder defaults: the
    project-name level removed (the ``packages``' levels dropped: ``package_block``), every config
    key with ``+``.

    >>> block = LineDict({"shop": LineDict({"+materialized": "view", "marts": LineDict({"materialized": "table"})}),
    ...                   "utils": LineDict({"+enabled": False})})
    >>> config_block(block, "shop", {"utils"})
    {'+materialized': 'view', 'marts': {'+materialized': 'table'}}
    >>> package_block(block, "utils")
    {'+enabled': False}
    """
    if not isinstance(block, LineDict):
        return LineDict()
    inner = block.get(project_name)
    result = _converted(block, project_name)
    for package in packages:
        result.pop(package, None)
    if isinstance(inner, LineDict):
        result.update(_converted(inner, None))
        result.key_lines.update(_converted(inner, None).key_lines)
    return result


def package_block(block: Any, package: str) -> LineDict:
    """The entry of a ``models:``/``seeds:`` block under ``package``'s name, as folder defaults."""
    inner = block.get(package) if isinstance(block, LineDict) else None
    return _converted(inner, None) if isinstance(inner, LineDict) else LineDict()


def _converted(node: LineDict, skip: str | None) -> LineDict:
    result = LineDict()
    result.line = node.line
    for key, value in node.items():
        if key == skip:
            continue
        name = str(key)
        if name.startswith("+") or name in CONFIG_NAMES and (not isinstance(value, LineDict) or name in _MAPPING_CONFIGS):
            new = "+" + name.lstrip("+")
            result[new] = value
        elif isinstance(value, LineDict):
            new = name
            result[new] = _converted(value, None)
        else:
            continue  # a scalar that is neither a config nor a folder: another package's setting
        result.key_lines[new] = node.line_of(key)
    return result


def load_profile(root: Path, profile: str, profiles_dir: Path | str | None) -> tuple[dict[str, Target], str, dict[str, Problem]]:
    """The targets of ``profile`` in the first ``profiles.yml`` of: ``--profiles-dir``,
    ``$DBT_PROFILES_DIR``, the project folder, ``~/.dbt``."""
    folders = [Path(p) for p in (profiles_dir, os.environ.get("DBT_PROFILES_DIR")) if p] + [root, Path.home() / ".dbt"]
    path = next((folder / PROFILES_FILE for folder in folders if (folder / PROFILES_FILE).is_file()), None)
    if path is None:
        raise ProjectError(Problem(f"no profiles.yml for profile '{profile}' (looked in {', '.join(str(f) for f in folders)})",
                                   DBT_PROJECT_FILE, 1, code="no-profile",
                                   hint="add profiles.yml beside dbt_project.yml, or pass --profiles-dir"))
    display = str(path.relative_to(root)) if path.is_relative_to(root) else str(path)
    data = _render_values(load_yaml(path, display), display, 1)
    entry = data.get(profile) if isinstance(data, LineDict) else None
    outputs = entry.get("outputs") if isinstance(entry, LineDict) else None
    if not isinstance(outputs, LineDict) or not outputs:
        raise ProjectError(Problem(f"profiles.yml has no profile '{profile}' with outputs", display,
                                   getattr(entry, "line", 1) or 1, code="no-profile",
                                   hint=f"add '{profile}: {{target: dev, outputs: {{dev: {{type: spark, method: session, "
                                        "schema: ...}}}}}}'"))
    targets, unusable = {}, {}
    for name, output in outputs.items():
        target, problem = _target(root, str(name), output, display, outputs.line_of(name))
        if problem is not None:
            unusable[str(name)] = problem
        else:
            targets[str(name)] = target
    return targets, str(entry.get("target") or next(iter(outputs))), unusable


def _target(root: Path, name: str, output: Any, display: str, line: int) -> tuple[Target | None, Problem | None]:
    if not isinstance(output, LineDict):
        return None, Problem(f"profile output '{name}' must be a mapping", display, line, code="bad-value")
    kind, method = output.get("type"), output.get("method")
    if kind != "spark" or method != "session":
        what = f"type '{kind}'" if kind != "spark" else f"method '{method}'"
        return None, Problem(f"target '{name}': {what} is not supported: mvflow runs Spark itself", display, line,
                             code="dbt-unsupported", hint="use 'type: spark' with 'method: session' (a local Spark target)")
    local = root / ".mvflow" / name
    conf = {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in (output.get("server_side_parameters") or {}).items()}
    spark = SparkSettings(app_name=f"mvflow-{name}", warehouse_dir=local / "warehouse", metastore_dir=local / "metastore",
                          database=str(output.get("schema") or "default"), conf={**DEFAULT_SPARK_CONF, **conf})
    return Target(name, spark, StateSettings(path=local / "state.sqlite")), None


#: schema YAML sections mvflow does not read
_UNREAD_SECTIONS = ("metrics", "semantic_models", "saved_queries", "analyses")


def unsupported(project: Project) -> list[Problem]:
    """One warning per dbt feature in the project that mvflow does not run."""
    warnings = []
    for path in project.files("models", (".py",)):
        warnings.append(Problem("Python models are not supported: not compiled", project.relative(path), 1,
                                code="dbt-unsupported", hint="write the model as SQL"))
    for path in project.files("models", (".yml", ".yaml")):
        data = load_yaml(path, project.relative(path))
        for key in (k for k in _UNREAD_SECTIONS if isinstance(data, LineDict) and data.get(k)):
            warnings.append(Problem(f"'{key}' is not supported by mvflow: ignored", project.relative(path),
                                    data.line_of(key), code="dbt-unsupported"))
    return warnings

