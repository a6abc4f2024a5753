"""A throwaway Spark standalone cluster for the tests: one master and two workers started from
pyspark's own distribution (``bin/spark-class`` under the installed package, no Spark download),
on loopback and free ports, with a temporary folder for the workers' executors; stopped and
removed after the session. ``python tests/spark_cluster.py`` starts one and waits (to try mvflow
on it by hand)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class SparkCluster:
    def __init__(self, workers: int = 2, cores: int = 1, memory: str = "1g") -> None:
        self.home = spark_home()
        self.base = Path(tempfile.mkdtemp(prefix="mvflow-spark-"))
        self.workers, self.cores, self.memory = workers, cores, memory
        self.port, self.webui = _free_port(), _free_port()
        self._procs: list[tuple[str, subprocess.Popen]] = []
        self.started_in = 0.0  # seconds from the first process to the last worker registered

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    @property
    def work_dir(self) -> Path:
        """Where the workers run their executors: ``<app id>/<executor id>/`` (jars fetched, stderr)."""
        return self.base / "work"

    def start(self, timeout: float = 120) -> "SparkCluster":
        started = time.monotonic()
        try:
            self._spawn("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                        "--port", str(self.port), "--webui-port", str(self.webui))
            self._wait(lambda s: s.get("status") == "ALIVE", "the master to be up", started + timeout)
            for i in range(self.workers):
                self._spawn(f"worker{i}", "org.apache.spark.deploy.worker.Worker", self.master_url,
                            "--host", "127.0.0.1", "--cores", str(self.cores), "--memory", self.memory,
                            "--webui-port", str(_free_port()), "--work-dir", str(self.work_dir))
            self._wait(lambda s: self._alive(s) == self.workers, f"{self.workers} workers to register",
                       started + timeout)
        except BaseException:
            self.stop()
            raise
        self.started_in = time.monotonic() - started
        return self

    def state(self) -> dict[str, Any]:
        """The master's JSON view: workers, active and completed applications."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.webui}/json/", timeout=5) as response:
            return json.load(response)

    def stop(self) -> None:
        """Stop the workers (and the executors they started: same process group), then the master."""
        try:
            for _, proc in reversed(self._procs):
                self._signal(proc, signal.SIGTERM)
            for _, proc in reversed(self._procs):
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    self._signal(proc, signal.SIGKILL)
                    proc.wait()
        finally:
            self._procs = []
            shutil.rmtree(self.base, ignore_errors=True)

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in sorted(self.base.glob("*.log")))

    def _spawn(self, name: str, *args: str, program: str = "spark-class") -> None:
        env = {**os.environ, "SPARK_HOME": str(self.home), "SPARK_LOCAL_IP": "127.0.0.1",
               "SPARK_CONF_DIR": str(self.base / "conf"), "SPARK_LOG_DIR": str(self.base), "SPARK_NO_DAEMONIZE": "1",
               "SPARK_WORKER_DIR": str(self.work_dir)}
        env.pop("PYSPARK_GATEWAY_PORT", None)
        (self.base / "conf").mkdir(exist_ok=True)
        with open(self.base / f"{name}.log", "wb") as log:
            proc = subprocess.Popen([str(self.home / "bin" / program), *args], env=env,
                                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)  # its own process group: the executors it starts too
        self._procs.append((name, proc))

    def _wait(self, ready, what: str, deadline: float, state: bool = True) -> None:
        """Until ``ready(the master's JSON)`` (or ``ready(None)``, not ``state``) holds; a process that exits fails."""
        while time.monotonic() < deadline:
            for name, proc in self._procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"spark {name} exited ({proc.returncode}) waiting for {what}:\n{self.logs()}")
            try:
                if ready(self.state() if state else None):
                    return
            except (urllib.error.URLError, OSError, ValueError):
                pass
            time.sleep(0.5)
        raise RuntimeError(f"timed out waiting for {what}:\n{self.logs()}")

    @staticmethod
    def _alive(state: dict[str, Any]) -> int:
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

    @staticmethod
    def _signal(proc: subprocess.Popen, sig: int) -> None:
        try:
            os.killpg(proc.pid, sig)  # the group this process leads (start_new_session), nothing else
        except ProcessLookupError:
            pass


class ConnectServer(SparkCluster):
    """A Spark Connect server (``spark-submit --class ...SparkConnectServer``, the class that
    Spark's ``sbin/start-connect-server.sh`` starts; pip's pyspark has no such script but has the
    jar) on loopback: its own master (local mode unless told), Hive catalog, Derby metastore and
    warehouse in a temporary folder, and ``conf`` (e.g. Delta's jars and extension)."""

    def __init__(self, master: str = "local[2]", conf: dict[str, str] | None = None) -> None:
        super().__init__(workers=0)
        self.master, self.conf = master, dict(conf or {})

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def start(self, timeout: float = 120) -> "ConnectServer":
        started = time.monotonic()
        conf = {"spark.connect.grpc.binding.address": "127.0.0.1", "spark.connect.grpc.binding.port": str(self.port),
                "spark.sql.catalogImplementation": "hive", "spark.sql.warehouse.dir": (self.base / "warehouse").as_uri(),
                "spark.driver.extraJavaOptions": f"-Dderby.system.home={self.base / 'metastore'}",
                "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2", **self.conf}
        args = [arg for key, value in conf.items() for arg in ("--conf", f"{key}={value}")]
        try:
            self._spawn("connect", "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
                        "--name", "mvflow-connect-test", "--master", self.master, *args, program="spark-submit")
            self._wait(lambda _: "Spark Connect server started" in (self.base / "connect.log").read_text(errors="replace"),
                       "the Spark Connect server to listen", started + timeout, state=False)
        except BaseException:
            self.stop()
            raise
        self.started_in = time.monotonic() - started
        return self


if __name__ == "__main__":
    cluster = SparkCluster().start()
    print(f"{cluster.master_url} (web UI http://127.0.0.1:{cluster.webui}/) up in {cluster.started_in:.1f}s; Ctrl-C stops it",
          flush=True)
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
