"""The catalog (seed 002): a versioned, append-only record of what every model produces.

Every ``mvflow run`` that changes what a model produces appends its next version to the state
store (compare-and-set on the version number: two runners never both write version N), with the
time it became active, so the catalog answers which version was active at any time.

- ``entry``: what a model produces (SQL hash, columns and types, key, kind, config, docs);
- ``changes``: what changed between two entries, breaking or not;
- ``gate``: what a run does about it (run, rebuild, refuse, add the new columns);
- ``record``: the run-time part: types from Spark, the verdict before a model runs, the version
  appended after it succeeded;
- ``report``: ``mvflow catalog`` and ``mvflow plan`` (no Spark).
"""
