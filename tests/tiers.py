"""Which tier runs a test (``scripts/test.sh``), where that is decided per parameter."""

from __future__ import annotations

import pytest

#: The Delta run of a test whose parquet run stays in the fast tier, where the fast tier's own Delta
#: tests already check what that run adds (a MERGE crashed and redone: the kill points at ``mv:merged``
#: and ``mv:build-replaced``, ``test_mv_refresh``'s crashed MERGE; Delta's storage behind a reader view:
#: ``test_plain_readers``; random changes on a Delta MV: ``test_mv_property``): the slow tier runs it, in
#: its own session beside the system tests. 14 of them took 4 of the fast tier's 34 test-minutes.
SLOW_DELTA = pytest.param("delta", marks=pytest.mark.slow)
FORMATS = ["parquet", SLOW_DELTA]
