#!/usr/bin/env bash
# Set up (if needed), then run the demo project end to end on the embedded default:
# local Spark, warehouse and state store under .mvflow/local/, output in target/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
mvflow() { echo; echo "\$ mvflow $*"; .venv/bin/mvflow "$@"; }
if [ "${PUBLISH:-0}" = 1 ]; then
  # offers_wide is also published by key, shop_stats in full after each build, to a throwaway
  # PostgreSQL on loopback (docs/publishing.md)
  eval "$(.venv/bin/python tests/pg_server.py start)"
  trap '.venv/bin/python tests/pg_server.py stop "$MVFLOW_PG_BASE"' EXIT
  export MVFLOW_PUBLISH=1
  echo "PostgreSQL for the published offers_wide and shop_stats on $(echo "$MVFLOW_APP_DSN" | sed 's|.*@||')"
fi
mvflow compile
mvflow demo init --scale "${SCALE:-1}"
# New source tables: incremental models start from scratch. build = seeds, models and their data tests.
mvflow build --full-refresh --threads 2
for batch in 1 2; do
  mvflow demo change --fraction 0.01 --seed "$batch"
  mvflow run --threads 2
  mvflow verify
  mvflow test --threads 2
done
mvflow status
if [ "${PUBLISH:-0}" = 1 ]; then
  .venv/bin/python bench/adhoc.py --dsn "$MVFLOW_APP_DSN" --table public.offers_wide --queries 200
fi
mvflow docs generate
echo; echo "Open target/docs/index.html in a browser, or run: .venv/bin/mvflow docs serve --port 8080"
