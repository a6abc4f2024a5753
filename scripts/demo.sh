#!/usr/bin/env bash
# Set up (if needed), then run the demo project end to end on the embedded default:
# local Spark, warehouse and state store under .mvflow/local/, output in target/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
mvflow() { echo; echo "\$ mvflow $*"; .venv/bin/mvflow "$@"; }
mvflow compile
mvflow demo init --scale "${SCALE:-1}"
mvflow run
mvflow demo change --fraction 0.01 --seed 7
mvflow run
