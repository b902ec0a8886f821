"""How long a retry takes after its task was killed at about 80 % of a long Spark action,
against the same job's clean run (connect mode, PROTOCOL 5.17).

The job is ``bench.harness.connect_jobs:slow_squares`` (a write whose rows take a second each on
the server), run as task attempts in fresh interpreters (``python -m spark_jobs.runtime``),
as Airflow runs them: one clean attempt; then, in a new epoch, attempt 1 SIGKILLed once 80 %
of the rows are computed and attempt 2 timed from its start to its acknowledgement
(``reattach_recovery_ratio`` = that / the clean run); then the control: the same kill with
the killed attempt's operation record deleted first, so that the retry runs the action
again, as it did before write resumption, while the killed operation still runs on the server
(``reattach_restart_control_ratio``, about 1.0 or more).

    python bench/reattach_bench.py [--rows 20]      # starts a Connect server of its own

``airflow_bench.py`` runs it on its connect-mode server and records the keys.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from checkpointing import Coordinator, LocalStorage, plan_from_edges  # noqa: E402

PIPELINE = "reattach_bench"


def _attempt(work: Path, remote: str, epoch: int, attempt: int, rows: int, marks: Path
             ) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "spark_jobs.runtime", "--job",
         "bench.harness.connect_jobs:slow_squares", "--storage", f"file://{work}/ckpt",
         "--pipeline", PIPELINE, "--epoch", str(epoch), "--task", "squares",
         "--attempt", str(attempt), "--remote", remote], cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True, env={**os.environ, "CKPT_TEST_MARKS": str(marks),
                        "CKPT_TEST_SLOW_ROWS": str(rows)})


def _finish(p: subprocess.Popen) -> str:
    _, err = p.communicate(timeout=900)
    if p.returncode != 0:
        raise RuntimeError(f"attempt failed: {err[-2000:]}")
    return err


def _marks(work: Path, name: str) -> Path:
    d = work / name
    d.mkdir()
    return d


def _killed_then_retried(c: Coordinator, work: Path, remote: str, rows: int, run: str,
                         forget_first: bool) -> dict[str, Any]:
    epoch = c.begin_epoch(plan_from_edges({"squares": []}, set()), run).epoch_id
    marks = _marks(work, run)
    first = _attempt(work, remote, epoch, 1, rows, marks)
    while len(os.listdir(marks)) < rows * 8 // 10:
        if first.poll() is not None:
            raise RuntimeError(f"attempt 1 ended before the kill: {first.communicate()[1]}")
        time.sleep(0.05)
    first.send_signal(signal.SIGKILL)
    first.wait()
    at_kill = len(os.listdir(marks))
    if forget_first:
        # The control, today's behaviour: the retry does not know the operation (its record
        # is gone) and runs the action again, while the killed one still runs on the server.
        c.storage.delete(c.layout.attempt_object(epoch, "squares", 1, "operation"))
    t0 = time.perf_counter()
    err = _finish(_attempt(work, remote, epoch, 2, rows, marks))
    seconds = time.perf_counter() - t0
    return {"retry_seconds": round(seconds, 2), "rows_done_at_kill": at_kill,
            "rows_computed": len(os.listdir(marks)), "resumed": "resumed state:" in err}


def measure(remote: str, work: Path, rows: int = 20) -> dict[str, Any]:
    """The clean run, the killed-and-resumed run and the control, on server ``remote``."""
    c = Coordinator(LocalStorage(work / "ckpt"), PIPELINE)
    epoch = c.begin_epoch(plan_from_edges({"squares": []}, set()), "clean").epoch_id
    t0 = time.perf_counter()
    _finish(_attempt(work, remote, epoch, 1, rows, _marks(work, "clean")))
    clean = time.perf_counter() - t0
    c.complete(epoch)
    resumed = _killed_then_retried(c, work, remote, rows, "killed", forget_first=False)
    c.complete(2)
    control = _killed_then_retried(c, work, remote, rows, "control", forget_first=True)
    return {"rows": rows, "clean_seconds": round(clean, 2), "resumed": resumed,
            "control": control,
            "reattach_recovery_ratio": round(resumed["retry_seconds"] / clean, 2),
            "reattach_restart_control_ratio": round(control["retry_seconds"] / clean, 2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="reattach_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=20, help="rows of one second each")
    a = ap.parse_args(argv)
    from spark_jobs.runtime.connect_server import ConnectServer

    with tempfile.TemporaryDirectory(prefix="reattach-bench-") as work:
        server = ConnectServer(port=0, log_path=Path(work) / "connect.log").start()
        try:
            r = measure(server.url, Path(work), a.rows)
        finally:
            server.stop()
    import json

    print(json.dumps(r, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
