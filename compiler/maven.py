"""Files from Maven Central, fetched once into mvflow's jar cache and checked against the ``.sha1``
published beside each: Delta Lake's jars (``compiler.delta_jars``), PostgreSQL's JDBC driver and
Hive's metastore scripts (``compiler.metastore``).

A file is fetched with plain ``urllib`` from Maven Central's layout
(``<group as path>/<artifact>/<v>/<artifact>-<v><suffix>``) and written atomically into
``.mvflow/jars/`` of the mvflow checkout (git-ignored; ``~/.cache/mvflow/jars`` for an installed
mvflow; ``MVFLOW_JARS`` overrides; ``MVFLOW_MAVEN_REPO`` names another repository with the same
layout). A second call finds the file and touches no network, so offline starts work once it is there.
"""

from __future__ import annotations

import hashlib
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

MAVEN = os.environ.get("MVFLOW_MAVEN_REPO", "https://repo1.maven.org/maven2")
_CHECKOUT = Path(__file__).resolve().parent.parent
DEFAULT_DIR = Path(os.environ.get("MVFLOW_JARS") or (_CHECKOUT / ".mvflow" / "jars" if (_CHECKOUT / "pyproject.toml").is_file()
                                                     else Path.home() / ".cache" / "mvflow" / "jars"))


class ArtifactMissing(RuntimeError):
    """A file is not in the cache and cannot be fetched (offline, unreachable, or a bad checksum): one line."""


@dataclass(frozen=True)
class Artifact:
    group: str
    artifact: str
    version: str
    suffix: str = ".jar"  # "-src.tar.gz" for a classifier and another extension

    @property
    def filename(self) -> str:
        return f"{self.artifact}-{self.version}{self.suffix}"

    def url(self, repo: str | None = None) -> str:
        return f"{repo or MAVEN}/{self.group.replace('.', '/')}/{self.artifact}/{self.version}/{self.filename}"


def fetch(artifact: Artifact, dest: Path | None = None, offline: bool = False, timeout: float = 60.0,
          what: str = "file", remedy: str = "run mvflow once while it is reachable") -> Path:
    """The cached file's path, fetched into ``dest`` on first use. Raises ArtifactMissing, naming the
    file as ``what`` and saying how to get it (``remedy``), when it is missing and cannot be fetched."""
    dest = Path(dest or DEFAULT_DIR)
    path = dest / artifact.filename
    if path.is_file() and path.stat().st_size > 0:
        return path
    if offline:
        raise ArtifactMissing(f"{what} {path.name} is missing in {dest} and --check forbids the network: {remedy}")
    url = artifact.url()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            data = response.read()
        with urllib.request.urlopen(url + ".sha1", timeout=timeout) as response:
            expected = response.read().decode().split()[0].strip()
    except urllib.error.HTTPError as exc:
        raise ArtifactMissing(f"{what} {path.name} is missing in {dest} and {url} answers {exc.code} {exc.reason}: "
                              f"{remedy}, or copy the file there") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ArtifactMissing(f"{what} {path.name} is missing in {dest} and {MAVEN} is unreachable "
                              f"({reason}): {remedy}, or copy the file there") from None
    actual = hashlib.sha1(data).hexdigest()
    if actual != expected:
        raise ArtifactMissing(f"{what} {path.name}: sha1 {actual} does not match Maven Central's {expected}")
    dest.mkdir(parents=True, exist_ok=True)
    part = path.with_name(f"{path.name}.{os.getpid()}.part")  # two processes may fetch at once: each its own part
    part.write_bytes(data)
    part.replace(path)
    return path
