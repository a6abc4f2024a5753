#!/usr/bin/env bash
# Fetch Delta Lake's two jars once into .mvflow/jars/ (git-ignored); prints the spark.jars value.
# Offline and missing: one line on stderr, exit 2. `--check` never uses the network.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
exec "$PY" -m compiler.delta_jars "$@"
