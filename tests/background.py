"""``mvflow ARGS`` as a background process whose output lines the test reads as they come, and
kills with -9 together with everything it started (Spark's JVM)."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from compiler.phases import _descendants

ROOT = Path(__file__).resolve().parent.parent
MVFLOW = [sys.executable, "-c", "from compiler.cli import main; main()"]


class Background:
    def __init__(self, project: Path, *args: str):
        self.proc = subprocess.Popen([*MVFLOW, *args], cwd=project, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: [self.lines.put(x) for x in self.proc.stdout], daemon=True).start()

    def wait_for(self, text: str, timeout: float = 300) -> None:
        deadline, seen = time.monotonic() + timeout, []
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=1)
            except queue.Empty:
                assert self.proc.poll() is None, "".join(seen)
                continue
            seen.append(line)
            if text in line:
                return
        raise AssertionError(f"never printed {text!r}:\n" + "".join(seen))

    def kill(self) -> None:
        for pid in [*_descendants(self.proc.pid), self.proc.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
