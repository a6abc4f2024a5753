"""The dbt commands a dbt user types that are not mvflow's own: ``clean`` and ``debug`` work
(``deps``: ``compiler.dbt.packages``),
``list`` and ``parse`` are ``ls`` and a compile that writes nothing, and the others answer with one
line saying what to use instead (``NOT_HERE``).

>>> print(instead("retry"))  # doctest: +ELLIPSIS
mvflow retry: mvflow has no retry — run `mvflow build -s <model>+` for the models target/run_results.json lists as error ...
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import Problem, ProjectError
from ..yamlfile import load_yaml

if TYPE_CHECKING:
    from ..project import Project

#: dbt command → what to do in mvflow instead
NOT_HERE = {
    "retry": "mvflow has no retry — run `mvflow build -s <model>+` for the models target/run_results.json lists as error "
             "(mv, fact and numerator models redo an interrupted batch by themselves)",
    "run-operation": "macros are not run against the database — put the SQL in on-run-start/on-run-end hooks, or read "
                     "with `mvflow show --inline \"...\"`",
}


def instead(command: str) -> str:
    return f"mvflow {command}: {NOT_HERE[command]}"


def clean_targets(project: "Project") -> list[Path]:
    """What ``mvflow clean`` deletes: the target path and, in a dbt project, ``clean-targets``;
    only folders inside the project (a project file must not delete anything outside it)."""
    names = [project.target_path]
    if project.dialect == "dbt":
        data = load_yaml(project.root / "dbt_project.yml", "dbt_project.yml")
        names += [str(name) for name in (data.get("clean-targets") or []) if isinstance(name, str)]
    paths = []
    for name in dict.fromkeys(names):
        path = (project.root / name).resolve()
        if path == project.root or not path.is_relative_to(project.root):
            raise ProjectError(Problem(f"clean-targets: '{name}' is not a folder inside the project: nothing was deleted",
                                       project.settings_file, code="bad-value", hint="list folders of the project, e.g. [target, dbt_packages]"))
        paths.append(path)
    return paths


def clean(project: "Project") -> list[str]:
    """Delete the clean targets; the project-relative names of those that existed."""
    removed = []
    for path in clean_targets(project):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
            removed.append(path.relative_to(project.root).as_posix())
        elif path.exists() or path.is_symlink():
            path.unlink()
            removed.append(path.relative_to(project.root).as_posix())
    return removed


def debug_lines(project: "Project", target: str | None) -> list[str]:
    """What ``mvflow debug`` reports without starting Spark: the project, the target, Java,
    PySpark and dbt's macro library."""
    import importlib.metadata
    import subprocess

    from .macros import library_files

    chosen = project.target(target)
    java = shutil.which("java")
    version = subprocess.run([java, "-version"], capture_output=True, text=True).stderr.splitlines()[:1] if java else []
    library = library_files()
    return [
        f"project: {project.name} ({project.root / project.settings_file})",
        f"target: {chosen.name} — Spark {chosen.spark.remote or chosen.spark.master}, schema {chosen.spark.database}, "
        f"{chosen.table_format} tables",
        f"state store: {chosen.state.type} ({chosen.state.dsn and 'dsn set' or chosen.state.path})",
        f"java: {version[0] if version else 'not found: Spark needs Java 17 or newer (scripts/setup.sh installs it)'}",
        f"pyspark: {importlib.metadata.version('pyspark')}",
        f"dbt's macro library: {library[0].parents[3] if library else 'not installed (pip install mvflow[dbt])'}",
    ]
