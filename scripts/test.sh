#!/usr/bin/env bash
# Set up (if needed), then run the tests. Extra arguments go to pytest.
#
#   scripts/test.sh            the fast tier (target ≤ 15 minutes on 2 cores; 13.7-17.9 measured, docs/architecture.md#tier-times): every test not marked `slow`
#   scripts/test.sh --slow     the slow system tier: real kill -9 of CLI processes, a standalone Spark
#                              cluster, `serve` with three runners, the PostgreSQL metastore, dbt itself
#   scripts/test.sh --all      both tiers in one pytest run
#   scripts/test.sh --changed  the fast-tier tests of the modules this branch changes (tests/changed.py)
#
# MVFLOW_TEST_BUDGET=<minutes> makes a run that takes longer fail (CI sets it per tier).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

# The fast tier in two pytest processes, a SparkSession each (pytest-xdist): 22 -> 18 minutes on 2
# cores, one run after the other. Work stealing: with xdist's default (load) the tests' durations
# summed to 17 minutes per process against 22 of wall (2026-11-27): one process ran the last heavy
# modules while the other idled; a process that runs out now takes half of the other's queue. The
# slow tier in two as well, each module whole in one process, serve, the concurrent runs and the
# cluster never beside each other (groups: tests/conftest.py): 26.3 minutes for 79 tests against 29.2
# with every system module in one process and 32.7 spread over both (2026-11-29).
# MVFLOW_TEST_WORKERS=0 runs the fast tier in this process.
tier=(-m "not slow" -n "${MVFLOW_TEST_WORKERS:-2}" --dist worksteal)
paths=()
case "${1:-}" in
  --slow) tier=(-m slow -n 2 --dist loadgroup); shift ;;
  --all) tier=(); shift ;;
  --changed)
    shift
    mapfile -t paths < <(.venv/bin/python -m tests.changed)
    if [ ${#paths[@]} -eq 0 ]; then
      echo "test: no change against main touches a test"
      exit 0
    fi
    echo "test: ${paths[*]}"
    ;;
esac
exec .venv/bin/python -m pytest ${tier[@]+"${tier[@]}"} "$@" ${paths[@]+"${paths[@]}"}
