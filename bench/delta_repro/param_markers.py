"""Parameter markers with Delta on (spike): python bench/delta_repro/param_markers.py <jars> <ext|cat|both> [legacy]

ext: the Delta SQL extension only; cat: the DeltaCatalog only; legacy: also spark.sql.legacy.parameterSubstitution.constantsOnly=true."""
import sys
from pyspark.sql import SparkSession
jars, mode = sys.argv[1], sys.argv[2]
b = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").config("spark.sql.warehouse.dir", f"/tmp/parammodes/{mode}").config("spark.jars", jars)
if mode in ("ext", "both"):
    b = b.config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
if mode in ("cat", "both"):
    b = b.config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
if len(sys.argv) > 3:
    b = b.config("spark.sql.legacy.parameterSubstitution.constantsOnly", "true")
s = b.getOrCreate()
s.sql("CREATE TABLE i (id BIGINT, c INT) USING parquet")
for q, a in [("SELECT :b AS x", {"b": 7}), ("SELECT * FROM i WHERE c = :b", {"b": 7}), ("SELECT * FROM i WHERE c = ?", [7]),
             ("INSERT INTO i SELECT id, :b FROM range(3)", {"b": 7}), ("SELECT * FROM range(3) WHERE id = :b", {"b": 1}),
             ("CREATE OR REPLACE VIEW vv AS SELECT * FROM IDENTIFIER(:t)", {"t": "i"}),
             ("CREATE TABLE ct USING parquet AS SELECT id, :b AS c FROM range(3) LIMIT 0", {"b": 1}),
             ("CREATE TABLE cd USING delta AS SELECT id, :b AS c FROM range(3)", {"b": 1}),
             ("MERGE INTO cd USING (SELECT 1 AS id, 5 AS c) s ON cd.id = s.id AND s.c > :b WHEN MATCHED THEN UPDATE SET *", {"b": 1})]:
    try:
        s.sql(q, args=a).collect(); print(mode, "OK  ", q)
    except Exception as e:
        print(mode, "FAIL", q, "->", " ".join(str(e).split())[:70])
s.stop()
