"""The results page (``results.md``) and its charts, rendered from bench/results/*.json by
docs/hooks.py at every build: a figure here is always the latest measured one, and
regenerating changes no hand-written text. Each chart names the machine and the command
that measured it."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


def _svg(fig: Any) -> bytes:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    return buf.getvalue()


def _machine(result: dict[str, Any]) -> str:
    m = result.get("machine") or {}
    at = str(m.get("at", ""))[:10]
    return f"{m.get('cpus', '?')} cores, Python {m.get('python', '?')}, measured {at}"


def _recovery(rec: dict[str, Any]) -> tuple[bytes, bytes, bytes]:
    import matplotlib.pyplot as plt

    days = sorted(int(d) for d in rec)
    r = [rec[str(d)] for d in days]
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.plot(days, [x["recompute_seconds"] for x in r], "o-", label="recompute from scratch")
    ax.plot(days, [x["restore_seconds"] for x in r], "o-", label="restore (retry)")
    ax.set(xlabel="days of history", ylabel="seconds", yscale="log",
           title="A failed epoch's retry: restore vs recompute")
    ax.legend()
    recovery = _svg(fig)
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.plot(days, [x["normal_epoch_seconds"] for x in r], "o-")
    ax.set(xlabel="days of history", ylabel="seconds", ylim=(0, None),
           title="A daily epoch's time against the history behind it")
    epoch = _svg(fig)
    fig, ax = plt.subplots(figsize=(6, 3.2))
    width = 0.27
    xs = range(len(days))
    for i, (key, label) in enumerate((("changed_state", "state changed"),
                                      ("written", "bytes written"),
                                      ("full_state", "full state"))):
        ax.bar([x + (i - 1) * width for x in xs], [v["bytes"][key] / 1e6 for v in r],
               width, label=label)
    ax.set_xticks(list(xs), [str(d) for d in days])
    ax.set(xlabel="days of history", ylabel="MB", yscale="log",
           title="What a daily epoch writes: its change, not the state")
    ax.legend()
    return recovery, epoch, _svg(fig)


def _tpch(split: dict[str, float], title: str) -> bytes:
    import matplotlib.pyplot as plt

    parts = [(k.removesuffix("_ms").replace("_", " "), v) for k, v in split.items()
             if k != "total_ms"]
    fig, ax = plt.subplots(figsize=(6, 2.4))
    left = 0.0
    for name, ms in parts:
        ax.barh([0], [ms / 1000], left=left, label=name)
        left += ms / 1000
    ax.set(yticks=[], xlabel="seconds", title=title)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=2)
    return _svg(fig)


def _faults_table(faults: list[dict[str, Any]]) -> str:
    rows = ["| fault | runs | outcomes | rows lost | rows duplicated |", "|---|---|---|---|---|"]
    for f in faults:
        outs = "; ".join(f"{k} ({v})" for k, v in sorted(f["outcomes"].items()))
        rows.append(f"| {f['fault']} | {f['runs']} | {outs} | {f['rows_lost']} | "
                    f"{f['rows_duplicated']} |")
    return "\n".join(rows)


def render() -> tuple[str, dict[str, bytes]]:
    """(the page's markdown, chart file name -> SVG bytes)."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display, whichever chart is drawn first
    latest = json.loads((RESULTS / "latest.json").read_text())
    charts: dict[str, bytes] = {}
    out = ["# Results", "",
           "Rendered from `bench/results/*.json` when the site is built: the latest "
           "figure of each benchmark, with the machine and the command that measured it. "
           "What each figure means and how it is measured: [Performance](performance.md) "
           "and the [benchmark keys](bench.md).", ""]
    rec = latest.get("details", {}).get("recovery")
    if rec:
        charts["recovery.svg"], charts["epoch.svg"], charts["bytes.svg"] = _recovery(rec)
        out += ["## Recovery, epoch time and bytes against history", "",
                f"`make bench` ({_machine(latest)}; {latest.get('repeats')} repeats, "
                "medians).", "", "![recovery](charts/recovery.svg)", "",
                "![epoch time](charts/epoch.svg)", "", "![bytes](charts/bytes.svg)", ""]
    sf10 = latest.get("details", {}).get("tpch_sf10")
    if sf10:
        charts["tpch_daily.svg"] = _tpch(dict(sf10["daily_split_median"]),
                                         "Where a TPC-H SF 10 daily epoch's time goes")
        out += ["## TPC-H at scale factor 10", "",
                f"`make bench-scale` ({_machine(latest)}): the daily epoch's median split; "
                f"the initial epoch took {latest.get('tpch_initial_epoch_seconds')} s "
                f"({latest.get('tpch_initial_epoch_overhead_ratio')} x plain Spark); "
                f"results equal DuckDB's: {latest.get('tpch_results_equal_duckdb')}.", "",
                "![tpch](charts/tpch_daily.svg)", ""]
    faults_path = RESULTS / "faults.json"
    if faults_path.exists():
        faults = json.loads(faults_path.read_text())
        out += ["## The fault matrix", "", "`make faults` (bench/results/faults.json):", "",
                _faults_table(faults), ""]
    return "\n".join(out), charts
