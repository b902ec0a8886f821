"""Where `make test`'s CPU goes: with ``CKPT_TEST_CPU_LOG=<file>``, each test appends one
JSON line (test id, worker, wall seconds, CPU seconds of the test process and everything
under it: Spark JVMs, Airflow components, subprocesses) to the file.

The machine has 2 cores and `make test` runs three workers, so a module's wall time says
how long it waited as much as how much it cost; its CPU seconds say what cutting it would
give the others. A process under the worker that outlives a test (the session's Spark
Connect server) is charged to the test that made it work. Not used by `make test`."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds of ``root`` and its live descendants, with what their waited-for children
    used (a child that ended unwaited-for is lost: rare here)."""
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        stats[int(d.name)] = fields
        children.setdefault(int(fields[1]), []).append(int(d.name))
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        f = stats.get(pid)
        if f:  # utime stime cutime cstime
            total += sum(int(x) for x in f[11:15]) / _TICK
        todo += children.get(pid, [])
    return total


class CpuLog:
    """The pytest plugin (registered by conftest.py when the variable is set)."""

    def __init__(self, path: str):
        self.path = Path(path)
        self._start: tuple[float, float] | None = None

    def pytest_runtest_logstart(self, nodeid: str, location: tuple) -> None:  # noqa: ARG002
        self._start = (time.monotonic(), tree_cpu_seconds(os.getpid()))

    def pytest_runtest_logfinish(self, nodeid: str, location: tuple) -> None:  # noqa: ARG002
        if self._start is None:
            return
        wall0, cpu0 = self._start
        line = {"test": nodeid, "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
                "wall": round(time.monotonic() - wall0, 1),
                "cpu": round(tree_cpu_seconds(os.getpid()) - cpu0, 1)}
        with self.path.open("a") as f:
            f.write(json.dumps(line) + "\n")
