#!/usr/bin/env bash
# Installs what mvflow needs, where it is missing: Java 17+ (for Spark), a virtual environment
# in .venv with mvflow and its test dependencies. Safe to re-run: it only does what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "setup: $*"; }

java_major() {
  command -v java >/dev/null 2>&1 || { echo 0; return; }
  java -version 2>&1 | awk -F'"' '/version/ {split($2, v, "."); print (v[1] == "1" ? v[2] : v[1]); exit}'
}

if [ "$(java_major)" -lt 17 ]; then
  say "installing Java 17 (Spark needs Java 17 or newer)"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq openjdk-17-jre-headless >/dev/null
fi

PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "setup: mvflow needs Python 3.11 or newer ($PYTHON is $("$PYTHON" --version 2>&1))" >&2
  exit 1
fi

if [ ! -x .venv/bin/python ]; then
  say "creating .venv"
  "$PYTHON" -m venv .venv
fi

stamp=.venv/.mvflow-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  say "installing mvflow and its dependencies into .venv (pyspark is large: the first time takes a few minutes)"
  log=.venv/install.log
  # dbt's macro library (the [dbt] extra) without dbt-core: mvflow reads its .sql files only; the
  # versions of the dbt the differential tests run (bench/peers.py)
  if ! { .venv/bin/python -m pip install --upgrade pip && .venv/bin/python -m pip install -e ".[test]" &&
         .venv/bin/python -m pip install --no-deps "dbt-adapters==1.24.5" "dbt-spark==1.11.0"; } >"$log" 2>&1; then
    cat "$log" >&2
    echo "setup: installing into .venv failed (the log is above and in $log)" >&2
    exit 1
  fi
  touch "$stamp"
fi
# Delta Lake's jars (two, ~10 MB) from Maven Central into .mvflow/jars/, once; offline runs use them.
if ! jars_error=$(.venv/bin/python -m compiler.delta_jars 2>&1 >/dev/null); then
  echo "setup: warning: $jars_error (parquet targets work without them)" >&2
fi
# The JVM's class archive of a Spark session (~220 MB, ~40 s once): every later Spark start ~a third
# faster (compiler/jvm_archive.py). Without it everything works, slower.
.venv/bin/python -m compiler.jvm_archive >/dev/null || echo "setup: warning: no JVM class archive (Spark starts slower)" >&2
say "ready: $(.venv/bin/mvflow --version 2>/dev/null || echo mvflow) with $(java -version 2>&1 | head -1)"
