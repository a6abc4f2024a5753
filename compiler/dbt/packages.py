"""dbt packages: ``packages.yml`` (or ``dependencies.yml``), ``mvflow deps``, and the installed
packages a compile reads.

``mvflow deps`` installs each listed package into ``dbt_packages/<name>`` (dbt's
``packages-install-path``), ``<name>`` being the package's own ``dbt_project.yml`` name:

- ``local: <path>``: a copy of the folder (dbt links it; a copy keeps every file a compile reads
  inside the project, which is all a compile may read);
- ``git: <url>`` with ``revision`` (a tag, branch or commit) and ``subdirectory``: cloned, checked
  out, copied without ``.git``; the commit is recorded in ``package-lock.yml``, and the next
  ``deps`` checks out that commit while ``packages.yml`` is unchanged (its hash is in the lock);
- ``package: <hub name>``: dbt Hub's packages need hub.getdbt.com; refused with the git form to use.

A compile reads the installed packages (``installed``, kept in ``Project.packages``): their macros
and generic tests under the package's name (``dbt_utils.generate_surrogate_key``,
``dbt_utils.expression_is_true``), and their models, seeds and schema YAML, built with the
project's as dbt builds them: configured by the package's own ``models:``/``seeds:`` blocks and
then by the project's block under the package's name (the project wins), and rendered with the
package's ``vars`` under the project's (``Package.var_layers``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

import yaml

from ..errors import Problem, ProjectError
from ..yamlfile import LineDict, load_yaml

if TYPE_CHECKING:
    from ..project import Project

PACKAGE_FILES = ("packages.yml", "dependencies.yml")
LOCK_FILE = "package-lock.yml"
HUB_HINT = ("dbt Hub packages are fetched from hub.getdbt.com: write the git form instead, "
            "e.g. '- git: https://github.com/dbt-labs/dbt-utils.git' with 'revision: 1.3.0'")


@dataclass(frozen=True)
class Spec:
    """One entry of ``packages.yml``."""

    kind: str  # local | git | hub
    location: str  # the path, the URL or the hub name
    line: int
    revision: str = ""
    subdirectory: str = ""

    def lock_entry(self, name: str, commit: str = "") -> dict[str, str]:
        entry = {self.kind: self.location, "name": name}  # local or git: a hub package is refused
        if commit:
            entry["revision"] = commit
        if self.subdirectory:
            entry["subdirectory"] = self.subdirectory
        return entry


#: the config blocks of dbt_project.yml that configure a package's files
BLOCKS = ("models", "seeds")


@dataclass(frozen=True)
class Package:
    """An installed package, as a compile reads it."""

    name: str
    root: Path
    macro_paths: tuple[str, ...] = ("macros",)
    test_paths: tuple[str, ...] = ("tests",)
    folder: str = ""  # its root, project-relative: dbt_packages/shop_utils
    model_paths: tuple[str, ...] = ("models",)  # under its root
    seed_paths: tuple[str, ...] = ("seeds",)
    vars: Mapping[str, Any] = field(default_factory=dict)  # its dbt_project.yml's
    # block → the folder defaults that apply to its files, in order (each with its file): its own
    # dbt_project.yml's, then the project's under the package's name
    defaults: Mapping[str, tuple[tuple[Mapping[str, Any], str], ...]] = field(default_factory=dict)

    def paths(self, kind: str) -> tuple[str, ...]:
        """Its model or seed folders, project-relative."""
        return tuple(f"{self.folder}/{p}".rstrip("/") for p in (self.model_paths if kind == "models" else self.seed_paths))

    def var_layers(self, project_vars: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        """Where ``var()`` looks in the package's files, first to last (dbt's order): the project's
        vars scoped to the package, the project's, the package's own scoped to itself, its own.

        >>> Package("p", Path("."), vars={"a": 1, "b": 1}).var_layers({"b": 2, "p": {"a": 3}})
        [{'a': 3}, {'b': 2, 'p': {'a': 3}}, {}, {'a': 1, 'b': 1}]
        """
        return [_scoped(project_vars, self.name), project_vars, _scoped(self.vars, self.name), self.vars]

    def macro_files(self) -> list[Path]:
        """Its macros and generic tests (``<test path>/generic``), in a stable order."""
        folders = [self.root / p for p in self.macro_paths] + [self.root / p / "generic" for p in self.test_paths]
        found: list[Path] = []
        for folder in folders:
            if folder.is_dir():
                found += sorted(p for p in folder.rglob("*") if p.suffix in (".sql", ".jinja") and p.is_file())
        return list(dict.fromkeys(found))


def install_path(project: "Project") -> Path:
    """``packages-install-path`` (default ``dbt_packages``), which must lie inside the project."""
    data = load_yaml(project.root / "dbt_project.yml", "dbt_project.yml") if project.dialect == "dbt" else None
    name = str((data or {}).get("packages-install-path") or "dbt_packages")
    path = (project.root / name).resolve()
    if path == project.root or not path.is_relative_to(project.root):
        line = data.line_of("packages-install-path") if isinstance(data, LineDict) else None
        raise ProjectError(Problem(f"packages-install-path '{name}' is not a folder inside the project", "dbt_project.yml", line,
                                   code="bad-value", hint="leave it out (dbt_packages) or name a folder of the project"))
    return path


def specs(project: "Project") -> tuple[str, list[Spec]]:
    """The packages file's name and its entries ('' and [] without one); a malformed entry is an
    error at its line."""
    for name in PACKAGE_FILES:
        path = project.root / name
        if not path.is_file():
            continue
        data = load_yaml(path, name)
        entries = data.get("packages") if isinstance(data, LineDict) else None
        if entries is None:
            return name, []
        if not isinstance(entries, list):
            raise ProjectError(Problem("'packages:' must be a list", name, data.line_of("packages"), code="yaml",
                                       hint="e.g. packages: [{local: ../shop_utils}]"))
        return name, [_spec(entry, name, data.line_of("packages")) for entry in entries]
    return "", []


def _spec(entry: Any, display: str, line: int) -> Spec:
    line = getattr(entry, "line", line)
    if isinstance(entry, dict) and isinstance(entry.get("local"), str):
        return Spec("local", entry["local"], line)
    if isinstance(entry, dict) and isinstance(entry.get("git"), str):
        return Spec("git", entry["git"], line, str(entry.get("revision") or ""), str(entry.get("subdirectory") or ""))
    if isinstance(entry, dict) and isinstance(entry.get("package"), str):
        return Spec("hub", entry["package"], line, str(entry.get("version") or ""))
    raise ProjectError(Problem("a package entry needs 'local:', 'git:' or 'package:'", display, line, code="yaml",
                               hint="e.g. '- local: ../shop_utils' or '- git: <url>' with 'revision: <tag>'"))


def _scoped(variables: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    scoped = variables.get(name)
    return scoped if isinstance(scoped, Mapping) else {}


def installed(project: "Project", blocks: Mapping[str, Any] | None = None) -> list[Package]:
    """The packages under the install path, by name; ``blocks`` are the project's own ``models:``
    and ``seeds:`` blocks as written, whose entries under a package's name configure its files."""
    from .project import config_block, package_block

    root = install_path(project)
    found = []
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        settings = folder / "dbt_project.yml"
        if not settings.is_file():
            continue
        display = f"{folder.relative_to(project.root).as_posix()}/dbt_project.yml"
        data = load_yaml(settings, display)
        if not isinstance(data, LineDict) or "name" not in data:
            continue
        name = str(data["name"])
        defaults = {block: ((config_block(data.get(block), name), display),
                            (package_block((blocks or {}).get(block), name), project.settings_file)) for block in BLOCKS}
        found.append(Package(name, folder, _list(data, "macro-paths", "macros"), _list(data, "test-paths", "tests"),
                             folder.relative_to(project.root).as_posix(), _list(data, "model-paths", "models"),
                             _list(data, "seed-paths", "seeds"), dict(data.get("vars") or {}), defaults))
    return found


def _list(data: LineDict, key: str, default: str) -> tuple[str, ...]:
    value = data.get(key) or [default]
    return tuple(str(p) for p in (value if isinstance(value, list) else [value]))


def check_installed(project: "Project") -> None:
    """dbt's check before a compile: every listed package installed (a ProjectError otherwise)."""
    display, wanted = specs(project)
    have = project.packages
    if len(have) >= len(wanted):
        return
    raise ProjectError(Problem(f"{display} lists {len(wanted)} package(s), {len(have)} installed in "
                   f"{install_path(project).relative_to(project.root).as_posix()}/", display, 1, code="deps-missing",
                   hint="run `mvflow deps` to install them"))


# -- mvflow deps -----------------------------------------------------------------------------
def install(project: "Project", echo: Callable[[str], None] = print) -> list[str]:
    """Install every listed package (see the module's docstring); the names installed."""
    display, wanted = specs(project)
    if not wanted:
        echo(f"no packages to install ({' or '.join(PACKAGE_FILES)} lists none)")
        return []
    target = install_path(project)
    digest = _digest(project.root / display)
    locked = _locked(project.root / LOCK_FILE, digest)
    work = Path(tempfile.mkdtemp(prefix="mvflow-deps-"))
    entries, names = [], []
    try:
        staged = []
        for n, spec in enumerate(wanted):
            folder, commit = _fetch(project, spec, display, work / str(n), locked.get(n))
            name = _package_name(folder, spec, display)
            staged.append((name, folder))
            entries.append(spec.lock_entry(name, commit))
            echo(f"installed {name} ({spec.kind} {spec.location}{f' @ {commit[:12]}' if commit else ''})")
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        for name, folder in staged:
            shutil.copytree(folder, target / name, ignore=shutil.ignore_patterns(".git"), symlinks=True)
            names.append(name)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    (project.root / LOCK_FILE).write_text(yaml.safe_dump({"packages": entries, "sha1_hash": digest}, sort_keys=False))
    return names


def _digest(path: Path) -> str:
    return hashlib.sha1(path.read_bytes()).hexdigest()  # noqa: S324 - a change marker, as dbt's lock keeps


def _locked(path: Path, digest: str) -> dict[int, str]:
    """The commits the lock file recorded, by entry, while the packages file is the one it locked."""
    if not path.is_file():
        return {}
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict) or data.get("sha1_hash") != digest:
        return {}
    return {n: str(entry["revision"]) for n, entry in enumerate(data.get("packages") or [])
            if isinstance(entry, dict) and "git" in entry and entry.get("revision")}


def _fetch(project: "Project", spec: Spec, display: str, into: Path, commit: str | None) -> tuple[Path, str]:
    """The package's folder (a local one as it is, a git one cloned into ``into``) and its commit."""
    if spec.kind == "hub":
        raise ProjectError(Problem(f"package '{spec.location}' is a dbt Hub package", display, spec.line,
                                   code="deps-hub", hint=HUB_HINT))
    if spec.kind == "local":
        folder = (project.root / spec.location).resolve()
        if not (folder / "dbt_project.yml").is_file():
            raise ProjectError(Problem(f"local package '{spec.location}' has no dbt_project.yml ({folder})", display, spec.line,
                                       code="deps-local", hint="point 'local:' at the package's folder"))
        if folder == project.root or project.root.is_relative_to(folder):
            raise ProjectError(Problem(f"local package '{spec.location}' is the project or holds it", display, spec.line,
                                       code="deps-local", hint="point 'local:' at the package's own folder"))
        return folder, ""
    _git(["clone", "--quiet", spec.location, str(into)], spec, display)
    revision = commit or spec.revision
    if revision:
        _git(["-C", str(into), "checkout", "--quiet", revision], spec, display)
    head = _git(["-C", str(into), "rev-parse", "HEAD"], spec, display).strip()
    return (into / spec.subdirectory if spec.subdirectory else into), head


def _git(args: list[str], spec: Spec, display: str) -> str:
    git = shutil.which("git")
    if git is None:
        raise ProjectError(Problem("git packages need git, which is not installed", display, spec.line, code="deps-git",
                                   hint="install git (apt-get install git)"))
    done = subprocess.run([git, *args], capture_output=True, text=True, env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["failed"])[-1]
        raise ProjectError(Problem(f"git {args[0] if args[0] != '-C' else args[2]} of '{spec.location}' failed: {why}",
                                   display, spec.line, code="deps-git", hint="check the URL and the revision (a tag, branch or commit)"))
    return done.stdout


def _package_name(folder: Path, spec: Spec, display: str) -> str:
    data = load_yaml(folder / "dbt_project.yml", "dbt_project.yml") if (folder / "dbt_project.yml").is_file() else None
    name = str(data.get("name", "")) if isinstance(data, LineDict) else ""
    if not name.isidentifier():
        raise ProjectError(Problem(f"package '{spec.location}' has no dbt_project.yml with a name", display, spec.line,
                                   code="deps-name", hint="a package is a dbt project: dbt_project.yml with 'name:'"))
    return name
