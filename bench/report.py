"""The bench's output: one table of figures (a Markdown table, printed and saved), and the raw
samples as JSON, both under ``bench/.work/``."""

from __future__ import annotations

import json
import platform
from dataclasses import dataclass, field
from pathlib import Path

from .measure import Series


@dataclass
class Row:
    """One measured command: what, how big, its runs, and its ratio to a baseline if any."""

    figure: str
    what: str
    size: str
    series: Series
    ratio: str = ""
    note: str = ""

    def cells(self) -> list[str]:
        jvm = f"{self.series.jvm_mb:.0f}" if self.series.jvm_mb is not None else "–"
        return [self.figure, self.what, self.size, self.series.spread(), f"{self.series.cpu_median:.2f}",
                f"{self.series.python_mb:.0f}", jvm, self.ratio, self.note]


@dataclass
class Report:
    command: str
    rows: list[Row] = field(default_factory=list)
    verdicts: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    sections: list[str] = field(default_factory=list)  # further Markdown tables, printed after the rows

    def markdown(self) -> str:
        head = ["figure", "what", "size", "wall: median (min–max)", "CPU s", "Python peak MB", "JVM peak MB",
                "ratio", "note"]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] if self.rows else []
        lines += ["| " + " | ".join(row.cells()) + " |" for row in self.rows]
        lines += [line for section in self.sections for line in ("", section.rstrip())]
        lines += [""] + [f"- {v}" for v in self.verdicts] + [f"- skipped: {s}" for s in self.skipped]
        return "\n".join(lines).rstrip() + "\n"

    def save(self, directory: Path) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        machine = f"{platform.system()} {platform.machine()}, Python {platform.python_version()}"
        (directory / "results.md").write_text(f"`{self.command}` ({machine})\n\n" + self.markdown())
        data = {"command": self.command, "machine": machine, "verdicts": self.verdicts, "skipped": self.skipped,
                "rows": [{"figure": r.figure, "what": r.what, "size": r.size, "ratio": r.ratio, "note": r.note,
                          **r.series.to_dict()} for r in self.rows]}
        path = directory / "results.json"
        path.write_text(json.dumps(data, indent=2) + "\n")
        return path


def ratio(numerator: Series, denominator: Series) -> float:
    """Ratio of medians (each side measured in the same, interleaved run)."""
    return numerator.median / denominator.median
