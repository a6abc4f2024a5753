"""mvflow: a dbt-style compiler and runner for declarative SQL projects on Apache Spark."""
