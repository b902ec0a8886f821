"""What a catalog name costs a Delta output, on MinIO: ``catalog_commit_ms``.

For ``--epochs`` epochs (default 20) of a one-task pipeline whose task appends a row to a
Delta table on MinIO through a Spark Connect server with a metastore (embedded Derby, the
default kind), the registration step the task runs for an output declared with ``name=``
(RunOutputs._register: the name registered, or found registered by the epoch the task
restores from) is timed in every epoch. The first epoch's registration (the table created,
the name registered) is reported apart; ``catalog_commit_ms`` is the median of the others,
the cost each later commit pays (target <= 50 ms). As a control, the same epochs without a
name, alternating in the same run: ``catalog_epoch_ratio`` is the median epoch time with
the name over without it. Afterwards a fresh Connect session reads the table by name: one
version per epoch. Writes ``catalog_*`` keys into bench/results/latest.json.

    python bench/catalog_bench.py [--epochs 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness.s3server import ACCESS_KEY, SECRET_KEY, start_s3_server  # noqa: E402
from checkpointing import Coordinator, TableSpec  # noqa: E402
from checkpointing.protocol.barrier import plan_from_edges  # noqa: E402
from checkpointing.storage.s3 import S3Storage  # noqa: E402

RESULTS = ROOT / "bench" / "results"


def run(epochs: int, work: Path) -> dict[str, Any]:
    from spark_jobs.runtime import JobResult, Pipeline, drive_epoch
    from spark_jobs.runtime.connect_server import ConnectServer
    from spark_jobs.runtime.run_outputs import RunOutputs

    s3 = start_s3_server("minio")
    os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"] = ACCESS_KEY, SECRET_KEY
    bucket = f"bench-{uuid.uuid4().hex[:8]}"
    s3.client().create_bucket(Bucket=bucket)
    server = ConnectServer(port=0, driver_memory="2g", log_path=work / "connect.log",
                           s3_endpoint=s3.endpoint,
                           metastore=f"jdbc:derby:;databaseName={work}/metastore;create=true",
                           extra_env={"AWS_ACCESS_KEY_ID": ACCESS_KEY,
                                      "AWS_SECRET_ACCESS_KEY": SECRET_KEY}).start()
    spark = server.session("catalog-bench", s3=True, endpoint_url=s3.endpoint)
    timed: list[float] = []
    register = RunOutputs._register

    def timing(self: Any, output: str, spec: TableSpec, ref: Any) -> None:
        t = time.perf_counter()
        try:
            register(self, output, spec, ref)
        finally:
            if spec.name:
                timed.append((time.perf_counter() - t) * 1000)

    RunOutputs._register = timing

    def pipeline(spec: TableSpec) -> Pipeline:
        def job(run: Any) -> Any:
            df = run.spark.createDataFrame([(f"d{run.epoch_id}", run.epoch_id)],
                                           "day string, n long")
            run.write_table(df, "t", spec)
            return JobResult()

        return Pipeline({"t": []}, {"t": job}, plan_from_edges({"t": []}, {"t"}))

    root = f"s3://{bucket}"
    named = TableSpec(f"{root}/gold/named", name="gold.named")
    plain = TableSpec(f"{root}/gold/plain")
    runs = {kind: (Coordinator(S3Storage(bucket, f"ckpt-{kind}", endpoint_url=s3.endpoint),
                               kind), pipeline(spec))
            for kind, spec in (("named", named), ("plain", plain))}
    seconds: dict[str, list[float]] = {"named": [], "plain": []}
    try:
        for e in range(1, epochs + 1):
            for kind in (("named", "plain") if e % 2 else ("plain", "named")):
                c, pipe = runs[kind]
                t = time.perf_counter()
                _, meta = drive_epoch(pipe, c, spark, "", f"r{e}",
                                        endpoint_url=s3.endpoint)
                seconds[kind].append(time.perf_counter() - t)
                assert meta is not None and meta.completed, meta
            print(f"epoch {e}: registration {timed[-1]:.1f} ms", file=sys.stderr, flush=True)
        fresh = server.session("catalog-reader", s3=True, endpoint_url=s3.endpoint)
        history = fresh.sql("DESCRIBE HISTORY gold.named").collect()
        assert len(history) == epochs + 1, len(history)  # version 0, then one per epoch
        assert fresh.sql("SELECT count(*) FROM gold.named").collect()[0][0] == epochs
    finally:
        RunOutputs._register = register
        spark.stop()
        server.stop()
        s3.stop()
    return {"catalog_commit_ms": round(statistics.median(timed[1:]), 1),
            "catalog_first_registration_ms": round(timed[0], 1),
            "catalog_epoch_ratio": round(statistics.median(seconds["named"][1:])
                                         / statistics.median(seconds["plain"][1:]), 3),
            "catalog_epochs": epochs,
            "details": {"registration_ms": [round(t, 1) for t in timed],
                        "epoch_s": {k: [round(s, 3) for s in v] for k, v in seconds.items()}}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="catalog_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--out", type=Path, default=RESULTS / "latest.json")
    ap.add_argument("--history", type=Path, default=RESULTS / "history.jsonl")
    a = ap.parse_args(argv)
    from bench.pipeline_bench import record

    with tempfile.TemporaryDirectory(prefix="ckpt-catalog-") as tmp:
        result = run(a.epochs, Path(tmp))
    details = result.pop("details")
    record(a.out, a.history, "catalog", result, details)
    return 0


if __name__ == "__main__":
    sys.exit(main())
