"""What S3A's SHA-256 upload checksum costs a large write: TPC-H's line items at a scale
factor written to MinIO in month partitions from a local SparkSession, with the checksum
(the runtime's setting, spark_jobs/runtime/spark_conf.py) and without, alternating; the
median of each (docs/performance.md, SF 1 on MinIO).

    python bench/s3a_checksum_bench.py [--scale 1] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.tpch_bench import start_s3  # noqa: E402
from spark_jobs.runtime import spark_session  # noqa: E402
from spark_jobs.tpch.landing import DEFAULT_CACHE, generate  # noqa: E402

CHECKSUM = "fs.s3a.create.checksum.algorithm"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="s3a_checksum_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args(argv)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    generated = generate(a.scale, DEFAULT_CACHE)
    s3 = start_s3(Path(tempfile.mkdtemp(prefix="ckpt-s3a-checksum-")))
    try:
        # No cached S3A filesystem: each write opens one with the configuration set just before.
        spark = spark_session("s3a-checksum", s3=True, endpoint_url=s3["endpoint"],
                              conf={"spark.driver.memory": "4g",
                                    "spark.hadoop.fs.s3a.impl.disable.cache": "true"})
        from pyspark.sql import functions as F

        lineitem = spark.read.parquet(str(generated / "lineitem.parquet")).withColumn(
            "month", F.date_format("l_shipdate", "yyyy-MM"))
        lineitem.cache().count()
        hadoop = spark._jsc.hadoopConfiguration()
        seconds: dict[str, list[float]] = {"SHA256": [], "none": []}
        for i in range(a.repeats):
            for algo in seconds:
                if algo == "none":
                    hadoop.unset(CHECKSUM)
                else:
                    hadoop.set(CHECKSUM, algo)
                t = time.perf_counter()
                (lineitem.repartition("month").write.partitionBy("month").mode("overwrite")
                 .parquet(f"s3a://tpch-bench/lineitem-{algo}-{i}"))
                seconds[algo].append(round(time.perf_counter() - t, 2))
                print(f"{algo:6} {i} {seconds[algo][-1]:6.2f} s", flush=True)
        medians = {k: statistics.median(v) for k, v in seconds.items()}
        print(json.dumps({"scale": a.scale, "seconds": seconds, "median": medians,
                          "sha256_over_none": round(medians["SHA256"] / medians["none"], 3)}))
        spark.stop()
    finally:
        s3["server"].stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
