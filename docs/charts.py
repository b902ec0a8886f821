"""The results page (``results.md``) and its charts, rendered from bench/results/*.json by
docs/hooks.py at every build: a figure here is always the latest measured one, and
regenerating changes no hand-written text. It opens with the targets: every key of
bench/README.md's tables that has a bound, against its latest figure. Each figure and chart
names the machine and the command that measured it."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
KEYS = ROOT / "bench" / "README.md"
#: A target cell of bench/README.md's key tables that a figure can be checked against:
#: ``<= 1.2``, ``>= 50 at D=180``, ``<= 8,192 at SF 10`` (what follows is shown as written).
_BOUND = re.compile(r"(<=|>=)\s*([0-9][0-9,]*(?:\.[0-9]+)?)")


class Target(NamedTuple):
    """One key's target from bench/README.md. (A named tuple: MkDocs' hook loads this file
    as a module of no package, where a dataclass cannot resolve its annotations.)"""

    key: str
    op: str  # "<=" or ">="
    bound: float
    text: str  # the target cell as written
    s3: bool  # a row of the ``--s3`` table: checked against bench/results/tpch_sf*_s3.json

    def met(self, value: Any) -> bool | None:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return None
        return value <= self.bound if self.op == "<=" else value >= self.bound


def targets(readme: Path = KEYS) -> list[Target]:
    """The keys of bench/README.md's tables whose target is a bound: a row whose first
    cell is one key, or the member of a family the target names (``x_d{30,180}`` with
    ``>= 20 at D=180``), or a key of one Spark mode (``x_<mode>`` with a target that names
    it, ``<= 2.5 (connect)``);
    tables of two columns (key, target) as well as three."""
    out, s3 = [], False
    for line in readme.read_text().splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0].startswith("key"):  # a table's header: its keys are of this run kind
            s3 = "--s3" in cells[0]
            continue
        key = re.fullmatch(r"`([a-z0-9_]+)`", cells[0])
        mode = re.fullmatch(r"`([a-z0-9_]+)_<mode>`", cells[0])
        family = re.fullmatch(r"`([a-z0-9_]+)\{([0-9,]+)\}`", cells[0])
        bound = _BOUND.match(cells[-1]) if len(cells) >= 2 else None
        named = re.search(r"\((local|connect|submit)\)", cells[-1]) if bound else None
        # a family of keys whose target names one member: `x_d{30,180}` ">= 20 at D=180"
        member = re.search(r"at (?:D=|scale )([0-9]+)\b", cells[-1]) if bound else None
        name = (key[1] if key else f"{mode[1]}_{named[1]}" if mode and named else
                f"{family[1]}{member[1]}" if family and member
                and member[1] in family[2].split(",") else None)
        if name and bound:
            out.append(Target(name, bound[1], float(bound[2].replace(",", "")), cells[-1],
                              s3))
    return out


def _svg(fig: Any) -> bytes:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    return buf.getvalue()


def _machine(m: dict[str, Any]) -> str:
    """Where and how: cores, Python, the day, the command line (recorded since results
    carry it)."""
    at = str(m.get("at", ""))[:16].replace("T", " ")
    how = f"`{m['command']}`" if m.get("command") else "command not recorded"
    return f"{m.get('cpus', '?')} cores, Python {m.get('python', '?')}, measured {at}; {how}"


def _history() -> list[dict[str, Any]]:
    path = RESULTS / "history.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_of(result: dict[str, Any], key: str, history: list[dict[str, Any]]) -> dict[str, Any]:
    """The machine (and command) of the run that measured ``result[key]``: the run a bench
    recorded the key under (``runs``), else the last history entry with that value, else
    the result's own."""
    for run in (result.get("runs") or {}).values():
        if key in run.get("keys", ()):
            return run
    for entry in reversed(history):
        if key in entry and entry[key] == result.get(key) and entry.get("machine"):
            return entry["machine"]
    return result.get("machine") or {}


class TargetRow(NamedTuple):
    """One target with its latest figure: the key (with its scale), the figure, the target
    as written, whether it is met, and the run that measured it."""

    key: str
    value: Any
    target: str
    met: str  # "yes", "**no**", or "-" (not a figure)
    run: str


def target_rows(results: list[tuple[bool, dict[str, Any]]], history: list[dict[str, Any]],
                readme: Path = KEYS) -> list[TargetRow]:
    """A row per bench/README.md target with a figure in ``results`` (pairs of: from an
    ``--s3`` run?, its results)."""
    rows = []
    for t in targets(readme):
        for s3, result in results:
            if s3 != t.s3 or result.get(t.key) is None:
                continue
            met = {True: "yes", False: "**no**", None: "-"}[t.met(result[t.key])]
            scale = (f" (SF {result['tpch_scale_factor']:g}{', MinIO' if s3 else ''})"
                     if "tpch_scale_factor" in result and t.key.startswith("tpch_") else "")
            rows.append(TargetRow(f"`{t.key}`{scale}", result[t.key], t.text, met,
                                  _machine(run_of(result, t.key, history))))
    return rows


def targets_table(results: list[tuple[bool, dict[str, Any]]], history: list[dict[str, Any]],
                  readme: Path = KEYS) -> list[str]:
    """:func:`target_rows` as a table: the figure, the target, whether it is met, and the
    run that measured it (numbered, listed under the table)."""
    rows = target_rows(results, history, readme)
    if not rows:
        return []
    runs = list(dict.fromkeys(r.run for r in rows))
    return (["| key | measured | target | met | run |", "|---|---|---|---|---|"]
            + [f"| {r.key} | {r.value} | {r.target} | {r.met} | {runs.index(r.run) + 1} |"
               for r in rows]
            + [""] + [f"{i}. {r}" for i, r in enumerate(runs, 1)])


README_BEGIN = "<!-- results: generated by `python docs/charts.py --readme` -->"
README_END = "<!-- results: end -->"


def results() -> tuple[list[tuple[bool, dict[str, Any]]], list[dict[str, Any]]]:
    """The latest results (``latest.json``, then each ``--s3`` TPC-H run's) and the
    history: what the targets are checked against."""
    latest = json.loads((RESULTS / "latest.json").read_text())
    s3 = [(True, json.loads(p.read_text())) for p in sorted(RESULTS.glob("tpch_sf*_s3.json"))]
    return [(False, latest), *s3], _history()


def readme_block() -> str:
    """The README's Results table: every target with its latest figure, met or not (the
    misses beside the hits), between the markers this function owns."""
    rows = target_rows(*results())
    missed = sum(r.met == "**no**" for r in rows)
    return "\n".join([README_BEGIN, "", "| key | measured | target | met |",
                      "|---|---|---|---|",
                      *(f"| {r.key} | {r.value} | {r.target} | {r.met} |" for r in rows), "",
                      f"{len(rows)} targets, {missed} not met.", "", README_END])


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
    found, history = results()
    latest = found[0][1]
    charts: dict[str, bytes] = {}
    out = ["# Results", "",
           "Rendered from `bench/results/*.json` when the site is built: the latest "
           "figure of each benchmark, with the machine and the command that measured it. "
           "What each figure means and how it is measured: [Performance](performance.md) "
           "and the [benchmark keys](bench.md).", ""]
    table = targets_table(found, history)
    if table:
        out += ["## Targets", "",
                "Each key of the [benchmark keys](bench.md) that has a bound, against its "
                "latest figure and the run that measured it (the machine and the command).",
                "", *table, ""]
    rec = latest.get("details", {}).get("recovery")
    if rec:
        charts["recovery.svg"], charts["epoch.svg"], charts["bytes.svg"] = _recovery(rec)
        out += ["## Recovery, epoch time and bytes against history", "",
                f"`make bench` ({_machine(latest.get('machine') or {})}; "
                f"{latest.get('repeats')} repeats, medians).", "",
                "![recovery](charts/recovery.svg)", "",
                "![epoch time](charts/epoch.svg)", "", "![bytes](charts/bytes.svg)", ""]
    sf10 = latest.get("details", {}).get("tpch_sf10")
    if sf10:
        charts["tpch_daily.svg"] = _tpch(dict(sf10["daily_split_median"]),
                                         "Where a TPC-H SF 10 daily epoch's time goes")
        run = _machine(run_of(latest, "tpch_daily_epoch_seconds", history))
        out += ["## TPC-H at scale factor 10", "",
                f"`make bench-scale` ({run}): the daily epoch's median split; "
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


if __name__ == "__main__":  # python docs/charts.py --readme: rewrite the README's table
    import sys

    if sys.argv[1:] != ["--readme"]:
        sys.exit("usage: python docs/charts.py --readme")
    path = ROOT / "README.md"
    text = path.read_text()
    head, rest = text.split(README_BEGIN, 1)
    path.write_text(head + readme_block() + rest.split(README_END, 1)[1])
