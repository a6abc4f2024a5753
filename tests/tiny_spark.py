"""Spark settings for the tests' tables of a few rows: the test session's, and every mvflow process's
the tests start (``processes.TINY_CONF``)."""

# Runtime settings for tables of a few rows (measured on a Delta MV's build, refresh and verify,
# bench-free: ~30% less wall than Spark's defaults). Adaptive execution only adds jobs there (each
# shuffle stage its own: 29 jobs a batch against 23); generating and JIT-compiling a whole stage's
# code for every new query costs more than interpreting a few rows (the JVM's CPU went to its
# compilers). Not spark.sql.codegen.factoryMode=NO_CODEGEN: catalog.listTables fails under it
# (EXPRESSION_DECODING_FAILED decoding a catalog Table).
TINY_DATA = {
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.codegen.wholeStage": "false",
}
