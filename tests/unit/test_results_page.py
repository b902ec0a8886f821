"""The Results page's targets table (docs/charts.py) and what the benchmarks record for it
(bench/pipeline_bench.py's ``record``): each figure beside its bound and the run, machine
and command that measured it."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _charts():
    # As docs/hooks.py loads it: a file beside the hook, not a package module.
    spec = importlib.util.spec_from_file_location("ckpt_docs_charts_test",
                                                  ROOT / "docs" / "charts.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


KEYS = """\
| key | how it is measured | target |
|---|---|---|
| `a_ratio` | one over the other | <= 1.2 |
| `b_speedup` | recompute / retry | >= 50 at D=180 |
| `c_d{30,90}` | a pattern, not a key | <= 1 |
| `d_seconds` | no bound | |
| `e_peak_mb`, `f_peak_mb` | two keys in one row | <= 10 |
| `g_peak_mb` | thousands | <= 8,192 at SF 10 |

| key (`--s3`) | how it is measured | target |
|---|---|---|
| `a_ratio` | on MinIO | <= 1.5 at SF 1 |
"""


def test_the_bounds_of_the_key_tables_are_read_with_their_table(tmp_path):
    charts = _charts()
    readme = tmp_path / "README.md"
    readme.write_text(KEYS)
    T = charts.Target
    assert charts.targets(readme) == [
        T("a_ratio", "<=", 1.2, "<= 1.2", False),
        T("b_speedup", ">=", 50.0, ">= 50 at D=180", False),
        T("g_peak_mb", "<=", 8192.0, "<= 8,192 at SF 10", False),
        T("a_ratio", "<=", 1.5, "<= 1.5 at SF 1", True)]
    assert T("x", "<=", 1.2, "", False).met(1.2) is True
    assert T("x", "<=", 1.2, "", False).met(1.21) is False
    assert T("x", ">=", 50, "", False).met(49.9) is False
    assert T("x", ">=", 50, "", False).met(None) is None
    assert T("x", ">=", 50, "", False).met(True) is None  # a flag is not a figure


def test_each_figure_is_checked_and_named_by_the_run_that_measured_it(tmp_path):
    charts = _charts()
    readme = tmp_path / "README.md"
    readme.write_text(KEYS)
    new = {"cpus": 2, "python": "3.11.7", "at": "2026-12-01T01:00:00+00:00",
           "command": "python bench/x.py --scale 10"}
    old = {"cpus": 2, "python": "3.11.7", "at": "2026-11-20T09:30:00+00:00"}
    own = {"cpus": 4, "python": "3.12.1", "at": "2026-11-02T00:00:00+00:00"}
    latest = {"a_ratio": 1.3, "b_speedup": 60, "g_peak_mb": 7000, "d_seconds": 3,
              "machine": own, "runs": {"x": {"keys": ["a_ratio"], **new}}}
    s3 = {"a_ratio": 1.4, "tpch_scale_factor": 1.0, "machine": own}
    history = [{"b_speedup": 60, "machine": old}, {"b_speedup": 61, "machine": new}]
    rows = charts.targets_table([(False, latest), (True, s3)], history, readme)
    assert rows[2:6] == [
        "| `a_ratio` | 1.3 | <= 1.2 | **no** | 1 |",
        # From the history entry with this figure, not the newest entry of the key.
        "| `b_speedup` | 60 | >= 50 at D=180 | yes | 2 |",
        "| `g_peak_mb` | 7000 | <= 8,192 at SF 10 | yes | 3 |",
        "| `a_ratio` | 1.4 | <= 1.5 at SF 1 | yes | 3 |"]
    assert rows[7:] == [
        "1. 2 cores, Python 3.11.7, measured 2026-12-01 01:00; `python bench/x.py --scale 10`",
        "2. 2 cores, Python 3.11.7, measured 2026-11-20 09:30; command not recorded",
        "3. 4 cores, Python 3.12.1, measured 2026-11-02 00:00; command not recorded"]
    assert charts.targets_table([(False, {"d_seconds": 1})], [], readme) == []


def test_the_project_s_key_tables_bound_the_scale_targets():
    targets = {(t.key, t.s3): t for t in _charts().targets()}
    assert targets[("tpch_deletion_day_ratio", False)].bound == 1.5
    assert targets[("tpch_connect_server_peak_mb", False)].bound == 8192
    assert targets[("tpch_recovery_speedup", False)].op == ">="
    assert targets[("tpch_s3_over_local_daily_ratio", True)].bound == 1.5


def test_a_bench_records_its_command_and_which_keys_its_run_measured(tmp_path, monkeypatch):
    from bench.pipeline_bench import record

    out, history = tmp_path / "latest.json", tmp_path / "history.jsonl"
    out.write_text(json.dumps({"kept": 1, "machine": {"cpus": 2}}))
    monkeypatch.setattr(sys, "argv", [str(ROOT / "bench" / "x.py"), "--work", "a dir"])
    record(out, history, "x", {"x_ratio": 0.5}, {"detail": True})
    merged = json.loads(out.read_text())
    run = merged["runs"]["x"]
    assert run["keys"] == ["x_ratio"] and run["command"] == "python bench/x.py --work 'a dir'"
    assert merged["kept"] == 1 and merged["machine"] == {"cpus": 2}  # other runs' keys stay
    assert merged["details"]["x"] == {"detail": True}
    line = json.loads(history.read_text())
    assert line["bench"] == "x" and line["machine"]["command"] == run["command"]


def test_the_scale_bench_sizes_its_server_by_the_documented_rule():
    """`make bench-scale` without --driver-memory gives the server the heap the TPC-H page
    tells users to give it: at SF 10 the 8 GB default it had peaked over the 8 GB target."""
    from bench.tpch_bench import server_heap

    assert [server_heap(s) for s in (0.1, 1, 3, 10, 100)] == [
        "2048m", "2048m", "2048m", "6144m", "61440m"]
    guide = (Path(__file__).resolve().parents[2] / "docs/guides/tpch.md").read_text()
    assert "about 0.6 GB of heap per scale factor, at least 2 GB" in " ".join(guide.split())


def test_families_modes_and_two_column_tables_have_their_targets(tmp_path):
    charts = _charts()
    readme = tmp_path / "README.md"
    readme.write_text("| key | how | target |\n|---|---|---|\n"
                      "| `r_d{30,180}` | a family | >= 20 at D=180 |\n"
                      "| `s_scale{1,10}` | another | <= 1.0 at scale 7 |\n"
                      "| `o_<mode>` | per mode | <= 2.5 (connect) |\n\n"
                      "| key | target |\n|---|---|\n| `dv_ratio` | <= 0.1 |\n")
    assert [t.key for t in charts.targets(readme)] == ["r_d180", "o_connect", "dv_ratio"]


def test_the_readme_shows_every_target_met_or_not():
    """README.md's Results table is the one the benchmark results give: every key of
    bench/README.md with a target and a figure, the misses beside the hits (regenerate it
    with `python docs/charts.py --readme`)."""
    charts = _charts()
    readme = (ROOT / "README.md").read_text()
    block = charts.readme_block()
    assert block in readme, "README.md's Results table is stale: python docs/charts.py --readme"
    found, _ = charts.results()
    keys = {t.key for t in charts.targets() for s3, r in found
            if s3 == t.s3 and r.get(t.key) is not None}
    for key in keys:
        assert f"`{key}`" in block
