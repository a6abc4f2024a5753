"""A throwaway PostgreSQL server for the tests: Debian's ``postgresql`` package (installed with
apt-get where missing), a temporary data directory, a free port on loopback, trust auth; stopped
and removed after the session. Never skipped: a machine without it installs it."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path


def _binaries() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, capture_output=True)
        subprocess.run(["apt-get", "install", "-y", "-qq", "postgresql"], check=True, env=env, capture_output=True)
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    def __init__(self) -> None:
        self.bin = _binaries()
        self.base = Path(tempfile.mkdtemp(prefix="mvflow-pg-"))
        self.data = self.base / "data"
        self.port = _free_port()
        self._as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []  # initdb refuses to run as root
        if self._as:
            shutil.chown(self.base, "postgres", "postgres")

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> "PostgresServer":
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        options = f"-p {self.port} -k {self.base} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(self.base / "log"), "-w", "start")
        return self

    def stop(self) -> None:
        try:
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.base, ignore_errors=True)

    def _run(self, *args: str) -> None:
        done = subprocess.run([*self._as, *args], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed: {done.stdout}{done.stderr}")


if __name__ == "__main__":  # scripts/demo.sh with PUBLISH=1: start prints shell exports; stop <base> stops it
    import sys

    if sys.argv[1:2] == ["start"]:
        server = PostgresServer().start()
        print(f"export MVFLOW_APP_DSN={server.dsn} MVFLOW_PG_BASE={server.base} MVFLOW_PG_BIN={server.bin}")
    elif sys.argv[1:2] == ["stop"] and len(sys.argv) == 3:
        server = PostgresServer.__new__(PostgresServer)
        server.base, server.data = Path(sys.argv[2]), Path(sys.argv[2]) / "data"
        server.bin, server._as = _binaries(), (["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else [])
        server.stop()
    else:
        sys.exit("usage: python tests/pg_server.py start | stop <base>")
