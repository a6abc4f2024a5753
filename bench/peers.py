"""The peers mvflow is compared with, installed in their own virtual environment under
``bench/.work/``: dbt-core + dbt-spark (``session`` extra) on the same pyspark as mvflow.

Re-runnable: a stamp file records the requirements that were installed; nothing is done when
they did not change.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

WORK = Path(__file__).resolve().parent / ".work"
DBT_VENV = WORK / "dbt-venv"
DBT_REQUIREMENTS = ("dbt-core~=1.11.0", "dbt-spark[session]==1.11.0", "pyspark==4.2.0")  # mvflow's Spark: Delta's jars load on it


def dbt_executable(echo=print) -> Path:
    """The ``dbt`` command of the bench's own venv, installing it first when missing."""
    dbt = DBT_VENV / "bin" / "dbt"
    stamp = DBT_VENV / ".bench-installed"
    wanted = "\n".join(DBT_REQUIREMENTS) + "\n"
    if dbt.exists() and stamp.exists() and stamp.read_text() == wanted:
        return dbt
    WORK.mkdir(parents=True, exist_ok=True)
    if not (DBT_VENV / "bin" / "python").exists():
        echo(f"bench: creating {DBT_VENV}")
        subprocess.run([sys.executable, "-m", "venv", str(DBT_VENV)], check=True)
    echo("bench: installing " + " ".join(DBT_REQUIREMENTS) + " (first time: a few minutes)")
    pip = [str(DBT_VENV / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, *DBT_REQUIREMENTS], check=True)
    stamp.write_text(wanted)
    return dbt
