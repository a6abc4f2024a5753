"""The P4 baseline: start the SparkSession of a project's default target, then stop it.
``python bench/bare_session.py PROJECT_DIR``: the same settings ``mvflow run`` uses, no mvflow work."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compiler.project import load_project  # noqa: E402
from compiler.spark import spark_session  # noqa: E402

spark_session(load_project(sys.argv[1]).target()).stop()
