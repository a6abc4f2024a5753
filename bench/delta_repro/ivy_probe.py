"""spark.jars.packages through Spark's Ivy with a project-local cache (spike): python bench/delta_repro/ivy_probe.py .mvflow/ivy
Offline second start: unshare -n sh -c 'ip link set lo up; SPARK_LOCAL_IP=127.0.0.1 python bench/delta_repro/ivy_probe.py .mvflow/ivy'"""
import sys, time
from pyspark.sql import SparkSession
ivy = sys.argv[1]
t = time.time()
b = (SparkSession.builder.master("local[2]").appName("ivy-probe")
     .config("spark.jars.packages", "io.delta:delta-spark_2.13:4.4.0")
     .config("spark.jars.ivy", ivy)
     .config("spark.ui.enabled", "false")
     .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
     .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog"))
s = b.getOrCreate()
print("session", round(time.time() - t, 2), flush=True)
print("jars:", s.sparkContext.getConf().get("spark.jars", ""))
s.range(10).write.format("delta").mode("overwrite").save("/tmp/ivyprobe_delta")
print("rows", s.read.format("delta").load("/tmp/ivyprobe_delta").count(), "total", round(time.time() - t, 2))
s.stop()
