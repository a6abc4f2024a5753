"""The tests a change touches, for the inner loop (``scripts/test.sh --changed``).

A changed test file runs itself; a changed ``compiler`` module runs its own doctests and every test
file that imports it (by its dotted name, or ``from <package> import <module>``); a changed test
helper runs the test files that import it; a changed demo-project file (``models/``, ``lineage/``,
...) runs the tests that read the demo. A change to what every test shares (``conftest.py``,
``pyproject.toml``, ``scripts/``) selects the whole tier, and so does a change nothing maps.

    python -m tests.changed            # prints the test paths, one a line (nothing when nothing changed)

Files are compared with ``git merge-base HEAD main`` (the branch's changes, committed or not, and
new files git does not ignore).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EVERYTHING = ("tests", "compiler")  # pytest's testpaths
_SHARED = {"tests/conftest.py", "pyproject.toml", "scripts/setup.sh", "scripts/test.sh"}
_DEMO = ("project.yml", "models/", "macros/", "lineage/", "seeds/", "data_tests/")
_IGNORED = ("docs/", "README.md", "bench/HISTORY.md", "bench/results/", ".gitignore", ".ci/")


def module_name(path: str) -> str:
    """``compiler/kinds/mv/plan.py`` -> ``compiler.kinds.mv.plan`` (a package's ``__init__`` is the package).

    >>> module_name("compiler/kinds/mv/__init__.py")
    'compiler.kinds.mv'
    """
    parts = Path(path).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(source: str, module: str) -> bool:
    """Whether Python ``source`` imports ``module`` (or a name from it).

    >>> imports("from compiler.kinds.mv import refresh", "compiler.kinds.mv.refresh")
    True
    >>> imports("from compiler.kinds.mv.refresh import refresh_mv", "compiler.kinds.mv.refresh")
    True
    >>> imports("import compiler.state", "compiler.state_postgres")
    False
    """
    parent, _, leaf = module.rpartition(".")
    patterns = [rf"\b(from|import)\s+{re.escape(module)}\b(?!\.)"]
    if parent:
        patterns.append(rf"\bfrom\s+{re.escape(parent)}\s+import\s+\(?[\w\s,]*\b{re.escape(leaf)}\b")
    return any(re.search(pattern, source) for pattern in patterns)


def select_tests(changed: list[str], test_files: dict[str, str]) -> list[str]:
    """The test paths to run for ``changed`` paths (relative to the repository), given every test
    file's source by path. ``EVERYTHING`` when a change reaches every test or maps to none.

    >>> tests = {"tests/test_state.py": "from compiler.state import open_state_store",
    ...          "tests/test_mv.py": "from mv_world import World", "tests/mv_world.py": ""}
    >>> select_tests(["compiler/state.py", "tests/mv_world.py"], tests)
    ['compiler/state.py', 'tests/test_mv.py', 'tests/test_state.py']
    >>> select_tests(["docs/kinds.md"], tests)
    []
    >>> select_tests(["tests/conftest.py"], tests)
    ['tests', 'compiler']
    """
    selected: set[str] = set()
    for path in changed:
        if path.startswith(_IGNORED):
            continue
        if path in _SHARED:
            return list(EVERYTHING)
        found = _tests_of(path, test_files)
        if found is None:
            return list(EVERYTHING)
        selected |= found
    return sorted(selected)


def _tests_of(path: str, test_files: dict[str, str]) -> set[str] | None:
    if path.startswith("tests/") and Path(path).name.startswith("test_") and path.endswith(".py"):
        return {path}
    if path.startswith("tests/") and path.endswith(".py"):  # a helper: whoever imports it
        helper = Path(path).stem
        return {test for test, source in test_files.items() if Path(test).name.startswith("test_")
                and re.search(rf"\b(from|import)\s+(tests\.)?{helper}\b", source)}
    if path.startswith("tests/"):  # fixture data: the tests that name its folder
        folder = Path(path).parts[1]
        return {test for test, source in test_files.items() if folder in source and Path(test).name.startswith("test_")}
    if path.startswith("compiler/") and path.endswith(".py"):
        module = module_name(path)
        return {path} | {test for test, source in test_files.items() if imports(source, module)}
    if path.startswith("compiler/"):  # a data file of a package (SQL, assets): that package's importers
        return _tests_of(str(Path(path).parent / "__init__.py"), test_files)
    if path.startswith("bench/"):
        return {"tests/test_bench.py"}
    if path.startswith(_DEMO):
        return {test for test, source in test_files.items() if Path(test).name.startswith("test_")
                and re.search(r"\bROOT\b", source)}
    return None


def changed_files(root: Path = ROOT) -> list[str]:
    """Paths changed on this branch (against ``main``'s merge base), committed or not, and new files."""
    def git(*args: str) -> list[str]:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True)
        return [line for line in done.stdout.splitlines() if line]

    base = git("merge-base", "HEAD", "main")[0] if git("branch", "--list", "main") else "HEAD"
    return sorted(set(git("diff", "--name-only", base)) | set(git("ls-files", "--others", "--exclude-standard")))


def main() -> None:
    test_files = {str(path.relative_to(ROOT)): path.read_text() for path in sorted((ROOT / "tests").glob("*.py"))}
    existing = [path for path in select_tests(changed_files(), test_files) if (ROOT / path).exists()]
    print("\n".join(existing))


if __name__ == "__main__":
    sys.exit(main())
