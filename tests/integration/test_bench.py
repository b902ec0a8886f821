"""The benchmark script runs end to end and writes the documented JSON shape (timings are
not asserted: speed targets belong in benchmarks, not tests). Its runs are measurements,
minutes of Spark work: `make bench-check` runs this module (marker ``bench``; `.ci/run` runs
it after the suite), `make test` does not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Each script gets RUN_LIMIT, and the test a margin over it, so that a run that is merely
# slow (a busy host made the quick run 5x slower than usual) is not cut off by the suite's
# default per-test limit before its own: a hang still ends, with the script's progress.
RUN_LIMIT = 2100
pytestmark = [pytest.mark.slow, pytest.mark.bench, pytest.mark.timeout(RUN_LIMIT + 300)]
KEYS = {"recovery_speedup_d30", "recovery_speedup_d90", "recovery_speedup_d180",
        "recovery_speedup_d360", "recovery_growth_360_over_30", "checkpoint_overhead_ratio",
        "incremental_bytes_ratio",
        "full_snapshot_bytes_ratio", "vs_structured_streaming_epoch_ratio",
        "vs_structured_streaming_recovery_ratio", "ours_checkpoint_bytes",
        "structured_streaming_checkpoint_bytes", "structured_streaming_results_equal",
        "latest_lookup_requests_10000", "vs_structured_streaming_epoch_ratio_scale1",
        "vs_structured_streaming_epoch_ratio_scale10",
        "vs_structured_streaming_epoch_ratio_scale100", "vs_declarative_pipelines_epoch_ratio",
        "declarative_pipelines_results_equal", "epoch_growth_360_over_30",
        "epochs_page_requests_365", "details", "quick", "days", "scale", "repeats",
        "seconds",
        "machine"}


def run_script(args: list[str], timeout: float = RUN_LIMIT) -> subprocess.CompletedProcess:
    """Runs a benchmark script; past ``timeout`` the test fails with the last lines it
    printed (each script reports its steps on stderr as they end)."""
    try:
        return subprocess.run([sys.executable, *args], capture_output=True, text=True,
                              timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired as exc:
        out = "".join(o.decode(errors="replace") if isinstance(o, bytes) else o
                      for o in (exc.stdout, exc.stderr) if o)
        pytest.fail(f"{args[0]} still running after {timeout:.0f} s:\n{out[-3000:]}")


@pytest.fixture(autouse=True)
def _spark_generates_code(monkeypatch):
    """The benchmark scripts run as users run them, Spark generating code for its queries:
    the rest of the suite evaluates them interpreted (tests/support/spark_cds.py)."""
    from tests.support.spark_cds import INTERPRETED

    opts = os.environ.get("SPARK_SUBMIT_OPTS", "")
    monkeypatch.setenv("SPARK_SUBMIT_OPTS", opts.replace(INTERPRETED, ""))


def test_quick_bench_writes_the_documented_keys(tmp_path):
    out, hist = tmp_path / "latest.json", tmp_path / "history.jsonl"
    # Every phase of the quick run, on the least history (D = 3 instead of 30): the keys
    # and their shape are what is checked, not the figures (those are `make bench`'s).
    r = run_script([str(ROOT / "bench/pipeline_bench.py"), "--quick", "--days", "3",
                    "--out", str(out), "--history", str(hist)])
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    res = json.loads(out.read_text())
    assert set(res) == KEYS
    assert res["quick"] is True and res["structured_streaming_results_equal"] is True
    assert res["days"] == [3] and res["details"]["recovery"]["3"]["speedup"] > 0
    for k in ("checkpoint_overhead_ratio", "incremental_bytes_ratio",
              "full_snapshot_bytes_ratio", "vs_structured_streaming_epoch_ratio",
              "vs_structured_streaming_recovery_ratio",
              "vs_structured_streaming_epoch_ratio_scale1",
              ):
        assert isinstance(res[k], float) and res[k] > 0, k
    # not measured in quick mode, nor at D = 30 with --days 3
    assert res["recovery_speedup_d30"] is None and res["recovery_speedup_d360"] is None
    assert res["epoch_growth_360_over_30"] is None and res["epochs_page_requests_365"] is None
    assert res["details"]["recovery"]["3"]["normal_epoch_seconds"] > 0
    # The page's refresh: a fresh server reads a summary per row, a refresh reads listings.
    page = res["details"]["epochs_page_refresh"]
    assert page["requests_warm"] < page["requests_cold"] < page["requests_cold_without_summaries"]
    for k in ("vs_structured_streaming_epoch_ratio_scale10",
              "vs_structured_streaming_epoch_ratio_scale100",
              "vs_declarative_pipelines_epoch_ratio", "declarative_pipelines_results_equal"):
        assert res[k] is None, k
    assert res["machine"]["commit"] and res["machine"]["cpus"]
    documented = (ROOT / "bench/README.md").read_text()
    assert "`recovery_speedup_d{30,90,180,360}`" in documented
    assert "`vs_structured_streaming_epoch_ratio_scale{1,10,100}`" in documented
    assert all(f"`{k}" in documented for k in KEYS - {"quick", "days", "scale", "repeats",
                                                       "seconds", "machine"}
               if not k.startswith(("recovery_speedup_d", "vs_structured_streaming_epoch_"
                                                                "ratio_scale")))
    [line] = hist.read_text().splitlines()
    assert "details" not in json.loads(line)


def test_declarative_pipelines_peer_counts_each_flight_once():
    """The benchmark's peer (bench/declarative_pipelines.py) on the Spark Connect server it
    starts, as `make bench` runs it: one day after the history, then a run SIGKILLed
    half-way and run again; its materialized views equal the oracle both times (the quick
    run leaves the peer out)."""
    r = run_script(["-m", "bench.declarative_pipelines", "--epochs", "1"])
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    res = json.loads(r.stdout[r.stdout.index("{"):])
    assert res["results_equal"] is True
    assert res["theirs_epoch_seconds"] > 0 and res["ours_epoch_seconds"] > 0
    assert isinstance(res["vs_declarative_pipelines_epoch_ratio"], float)


def test_structured_streaming_at_a_scale_equals_ours_and_says_where_time_goes(tmp_path):
    """The code behind vs_structured_streaming_epoch_ratio_scale{10,100} (not run by
    --quick), on data landed at scale 2: results equal, the time split is reported."""
    from bench.pipeline_bench import ss_at_scale
    from spark_jobs.runtime import spark_session

    spark = spark_session("test-bench-scale")
    res = ss_at_scale(spark, tmp_path, 2, 2, 1)  # one history day, one measured day
    assert res["results_equal"] is True
    assert res["ours_epoch_seconds"] > 0 and res["theirs_epoch_seconds"] > 0
    where = res["where_ms"]
    assert set(where["tasks"]) == {"ingest_flights", "route_stats", "carrier_stats"}
    assert where["epoch"] > 0 and all(t["run_ms"] > 0 for t in where["tasks"].values())
    # Within a task's run: Spark writing the snapshot (sync), then making it durable (async).
    for t in where["tasks"].values():
        assert t["sync_ms"] > 0 and t["async_ms"] > 0, t
        assert t["sync_ms"] + t["async_ms"] <= t["run_ms"] * 1.01 + 1, t


def test_tpch_bench_runs_at_a_small_scale_and_writes_its_documented_keys(tmp_path):
    """`make bench-scale`'s script end to end at scale factor 0.01 (two history epochs,
    each with plain Spark after it, four daily
    epochs with two deletion days of 60 orders, the recovery, the task-process epoch, the
    10 % history): its results equal DuckDB's and every key it writes is in
    bench/README.md."""
    out, hist = tmp_path / "tpch.json", tmp_path / "history.jsonl"
    r = run_script([str(ROOT / "bench/tpch_bench.py"), "--scale", "0.01",
                    "--days", "4", "--delete-every", "2", "--deletes", "60",
                    "--streaming-days", "0", "--driver-memory", "1g",
                    "--initial-repeats", "2",
                    "--cache", str(tmp_path / "cache"), "--out", str(out),
                    "--history", str(hist)])
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    res = json.loads(out.read_text())
    assert res["tpch_results_equal_duckdb"] is True
    assert res["tpch_deletion_day_ratio"] > 0 and res["tpch_recovery_speedup"] > 0
    assert res["tpch_daily_epoch_growth"] > 0
    assert len(res["tpch_initial_epoch_seconds_runs"]) == 2
    assert len(res["tpch_initial_plain_spark_seconds_runs"]) == 2
    assert all(s > 0 for s in res["tpch_initial_epoch_seconds_runs"]), res
    documented = (ROOT / "bench/README.md").read_text()
    keys = {k for k in res if k.startswith("tpch_") and not k.startswith("tpch_state_files")}
    assert keys and all(f"`{k}`" in documented for k in keys), keys - {
        k for k in keys if f"`{k}`" in documented}


def test_tpch_bench_refuses_a_work_directory_holding_an_earlier_run(tmp_path):
    """An earlier run's completed history epoch in ``--work`` would be resumed, and timed
    at 0 s: the bench names the directory and stops before it lands or starts anything."""
    work = tmp_path / "work"
    (work / "ckpt-full").mkdir(parents=True)
    r = run_script([str(ROOT / "bench/tpch_bench.py"), "--scale", "0.01",
                    "--work", str(work), "--out", str(tmp_path / "out.json"),
                    "--history", str(tmp_path / "history.jsonl")], timeout=300)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"--work {work} is not empty" in r.stderr.strip().splitlines()[-1], r.stderr
    assert sorted(p.name for p in work.iterdir()) == ["ckpt-full"]
    assert not (tmp_path / "out.json").exists()


def test_tpch_deletion_day_harness_times_both_kinds_both_ways_from_one_parent(tmp_path):
    """bench/tpch_deletion_day.py at scale factor 0.01, one round: every try of each kind
    (normal, deletion) and way (writes at once, one after the other) ran the four tasks
    and was aborted, a deletion try deleted its orders, and a second run on the same
    ``--work`` reuses the history's state instead of running it again."""
    out = tmp_path / "dd.json"
    args = [str(ROOT / "bench/tpch_deletion_day.py"), "--scale", "0.01", "--rounds", "1",
            "--deletes", "20", "--driver-memory", "1g", "--cache", str(tmp_path / "cache"),
            "--work", str(tmp_path / "work"), "--out", str(out)]
    r = run_script(args)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert "history epoch in" in r.stderr
    res = json.loads(out.read_text())
    tries = res["tries"]
    assert sorted((t["kind"], t["way"]) for t in tries) == sorted(
        (k, w) for k in ("normal", "deletion") for w in ("at_once", "one_after_the_other")
        )
    assert all(t["orders_deleted"] == (20 if t["kind"] == "deletion" else 0) for t in tries)
    assert all(set(t["seconds"]) == {"ingest", "q1_pricing", "q5_revenue", "top_customers",
                                     "epoch"} for t in tries)
    assert set(res["medians"]) == {"normal", "deletion"}
    from checkpointing import Coordinator, open_storage

    c = Coordinator(open_storage((tmp_path / "work" / "ckpt").as_uri()), "tpch_deletion_day")
    assert [c.status(e) for e in c.epoch_ids()] == ["completed"] + ["aborted"] * 4
    r = run_script([*args[:4], "1", *args[5:]])
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert "history epoch in" not in r.stderr
    assert len(json.loads(out.read_text())["tries"]) == 4
    assert [c.status(e) for e in c.epoch_ids()] == ["completed"] + ["aborted"] * 8


def test_views_bench_maintains_tpch_views_equal_to_duckdb(tmp_path):
    """`make bench-views`'s script at scale factor 0.01 on a query of each kind: one table
    (Q1), and joins with EXISTS and NOT EXISTS correlated by an inequality (Q21, the
    deepest plan; the plain joins of Q3 and the others are proven on Spark by
    test_ivm_spark.py); a refresh of 1 % of the orders; the Declarative Pipeline beside
    them. Every view's table equals DuckDB's, every key is documented."""
    out = tmp_path / "views.json"
    r = run_script([str(ROOT / "bench/views_bench.py"), "--scale", "0.01", "--refresh",
                    "0.01", "--queries", "1,21", "--repeats", "1", "--sdp",
                    "--driver-memory", "1500m", "--out", str(out),
                    "--history", str(tmp_path / "history.jsonl")])
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    res = json.loads(out.read_text())
    assert res["views_results_equal_duckdb"] is True
    assert res["views_incremental_queries"] == [1, 21], res
    assert res["views_single_table_ratio_max"] > 0 and res["views_join_ratio_median"] > 0
    assert res["views_vs_sdp_refresh_ratio"] > 0
    per = res["details"]["views"]["queries"]
    assert all(p["state_bytes"] > 0 and p["input_bytes"] > 0 for p in per.values()), per
    documented = (ROOT / "bench/README.md").read_text()
    keys = [k for k in res if k.startswith("views_")]
    assert all(f"`{k}`" in documented for k in keys), keys
