"""Timing a command as a subprocess: wall time and the peak memory of the Python process and of
any Spark JVM it starts.

Memory comes from ``/proc``: a sampler thread reads ``VmHWM`` (the kernel's peak resident set)
of the child and of every descendant every 50 ms; processes named ``java`` count as the JVM.
``VmHWM`` only grows, so the last sample is the peak up to 50 ms before the process ends; the
child's ``ru_maxrss`` from ``wait4`` is the fallback when a process ends before one sample.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

SAMPLE_SECONDS = 0.05


@dataclass(frozen=True)
class Sample:
    seconds: float
    cpu_seconds: float  # user + system of the process and the children it waited for
    python_mb: float
    jvm_mb: float | None
    returncode: int


@dataclass
class Series:
    """Several runs of one command."""

    label: str
    samples: list[Sample] = field(default_factory=list)

    @property
    def times(self) -> list[float]:
        return [s.seconds for s in self.samples]

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    def spread(self) -> str:
        """``median (min–max)`` in seconds."""
        return f"{self.median:.2f} s ({min(self.times):.2f}–{max(self.times):.2f})"

    @property
    def cpu_median(self) -> float:
        return statistics.median(s.cpu_seconds for s in self.samples)

    @property
    def python_mb(self) -> float:
        return max(s.python_mb for s in self.samples)

    @property
    def jvm_mb(self) -> float | None:
        values = [s.jvm_mb for s in self.samples if s.jvm_mb is not None]
        return max(values) if values else None

    def to_dict(self) -> dict:
        return {"label": self.label, "seconds": self.times, "median": self.median,
                "cpu_seconds": [s.cpu_seconds for s in self.samples],
                "python_peak_mb": self.python_mb, "jvm_peak_mb": self.jvm_mb}


class RunFailed(RuntimeError):
    pass


def run_command(cmd: Sequence[str], cwd: Path, env: Mapping[str, str] | None = None, log: Path | None = None) -> Sample:
    """Run ``cmd`` once and measure it; a non-zero exit raises RunFailed with the output's tail."""
    out = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115 - closed below
    started = time.perf_counter()
    proc = subprocess.Popen(list(cmd), cwd=cwd, env={**os.environ, **(env or {})}, stdout=out, stderr=subprocess.STDOUT)
    peaks: dict[int, tuple[str, float]] = {}
    done = threading.Event()
    sampler = threading.Thread(target=_sample_tree, args=(proc.pid, peaks, done), daemon=True)
    sampler.start()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    done.set()
    sampler.join()
    if log:
        out.close()
    if proc.returncode != 0:
        tail = log.read_text(errors="replace")[-2000:] if log else ""
        raise RunFailed(f"{' '.join(cmd)} exited {proc.returncode} (in {cwd})\n{tail}")
    python_mb = peaks.get(proc.pid, ("", 0.0))[1] or usage.ru_maxrss / 1024
    jvm = [mb for pid, (name, mb) in peaks.items() if name == "java"]
    cpu = usage.ru_utime + usage.ru_stime
    return Sample(seconds, cpu, python_mb, max(jvm) if jvm else None, proc.returncode)


def _sample_tree(root: int, peaks: dict[int, tuple[str, float]], done: threading.Event) -> None:
    while not done.is_set():
        for pid in _descendants(root):
            status = _status(pid)
            if "VmHWM" in status:
                peaks[pid] = (status.get("Name", ""), max(peaks.get(pid, ("", 0.0))[1], int(status["VmHWM"].split()[0]) / 1024))
        done.wait(SAMPLE_SECONDS)


def _descendants(root: int) -> list[int]:
    """``root`` and its descendants, read from ``/proc/<pid>/task/<tid>/children`` (cheap)."""
    found, frontier = [], [root]
    while frontier:
        pid = frontier.pop()
        found.append(pid)
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == "java":
                continue  # a JVM's many threads fork nothing we measure
            for tid in os.listdir(f"/proc/{pid}/task"):
                frontier += [int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
        except OSError:
            continue
    return found


def _status(pid: int) -> dict[str, str]:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    return dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)


def interleaved(commands: Mapping[str, tuple[Sequence[str], Path, Mapping[str, str] | None]], runs: int,
                before: Mapping[str, object] | None = None, log_dir: Path | None = None) -> dict[str, Series]:
    """Run every command ``runs`` times, alternating between them so that machine noise hits all.

    ``before`` maps a label to a callable run (untimed) before each of its runs, e.g. to clear a cache.
    """
    series = {label: Series(label) for label in commands}
    if log_dir:
        log_dir.mkdir(parents=True, exist_ok=True)
    for i in range(runs):
        for label, (cmd, cwd, env) in commands.items():
            if before and label in before:
                before[label]()  # type: ignore[operator]
            log = log_dir / f"{_slug(label)}.{i}.log" if log_dir else None
            series[label].samples.append(run_command(cmd, cwd, env, log))
    return series


def _slug(label: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in label).strip("-")
