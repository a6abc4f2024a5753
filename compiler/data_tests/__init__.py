"""Data tests: queries that return the rows breaking an expectation; a test passes when it returns none.

==============  ============================================================================
``declare.py``  what a project declares: generic tests in models YAML (``tests:`` or
                ``data_tests:`` on a model or a column) and singular tests (``tests/**/*.sql``)
``generic.sql`` the built-in generic tests: ``unique``, ``not_null``, ``accepted_values``,
                ``relationships`` (a project's ``{% test %}`` blocks are generic tests too)
``compile.py``  a declaration → the SELECT of its failing rows, with real table names
``scope.py``    ``scope: batch``: a test of an mv or fact reading only what its last batch wrote
``execute.py``  running a test on Spark: failures counted, the verdict (pass, warn, fail) by
                ``severity``, ``warn_if`` and ``error_if``, failing rows kept with ``store_failures``
==============  ============================================================================

Names and verdicts follow dbt's, so that a dbt project's tests give the verdicts dbt gives.
"""

from .compile import DataTest, compile_tests, place_scopes
from .declare import TestConfig, TestDeclaration

__all__ = ["DataTest", "TestConfig", "TestDeclaration", "compile_tests", "place_scopes"]
