"""Where `make test`'s CPU goes: with ``CKPT_TEST_CPU_LOG=<file>``, each test appends one
JSON line (test id, worker, wall seconds, CPU seconds of the test process and everything
under it: Spark JVMs, Airflow components, subprocesses) to the file.

The machine has 2 cores and `make test` runs three workers, so a module's wall time says
how long it waited as much as how much it cost; its CPU seconds say what cutting it would
give the others. A process under the worker that outlives a test (the session's Spark
Connect server) is charged to the test that made it work. Not used by `make test`.

Where the process may create a control group (cgroup v2, as root), the worker moves into
one of its own and the kernel counts the CPU of every process started under it, wherever
it is re-parented and however briefly it lived (:class:`CgroupCpu`). Elsewhere the log
follows the process tree (:class:`ProcessTree`), which cannot simply be summed at a test's
start and end: `airflow standalone` and the Celery topology put their components in
sessions of their own, and when the parent is stopped first its components are
re-parented to init, which reaps them, so their CPU left the tree uncounted (a test that
stopped a standalone logged -184 CPU-s). It therefore follows every process it once saw
under the worker, wherever it is re-parented, by a sample every :data:`SAMPLE_SECONDS`; a
process that lives and dies between two samples is counted through its parent's
reaped-children times, when the parent is followed and waits for it. What a process spends
after its last sample is lost when its parent did not wait for it (a test that stopped a
daemonized Connect server logged -159 CPU-s), which the control group does not lose."""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")
#: How often the followed processes are read; what a process spends after its last sample
#: and before it is reaped by a process not followed (init) is lost.
SAMPLE_SECONDS = 5.0


@dataclass
class _Proc:
    ppid: int
    own: float  # utime + stime
    reaped: float  # cutime + cstime: what the children it waited for used
    alive: bool = True


def _read(pid: int) -> tuple[str, _Proc] | None:
    """(start time, figures) of ``pid``, or None when it is gone. The start time tells a
    reused pid from the process once followed."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[19], _Proc(int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICK,
                             (int(fields[13]) + int(fields[14])) / _TICK)


class ProcessTree:
    """The CPU of ``root`` and of every process that was ever seen below it or below a
    process it followed."""

    def __init__(self, root: int):
        self.root = root
        self._procs: dict[tuple[int, str], _Proc] = {}
        self._lock = threading.Lock()

    def sample(self) -> None:
        """One read of every process's figures; the followed ones, and every process below
        one of them, are kept."""
        procs: dict[int, tuple[str, _Proc]] = {}
        children: dict[int, list[int]] = {}
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                got = _read(int(d.name))
                if got is not None:
                    procs[int(d.name)] = got
                    children.setdefault(got[1].ppid, []).append(int(d.name))
        with self._lock:
            todo = [pid for (pid, _), p in self._procs.items() if p.alive] + [self.root]
            seen: set[tuple[int, str]] = set()
            while todo:
                pid = todo.pop()
                if pid not in procs:
                    continue
                start, figures = procs[pid]
                if (pid, start) in seen:
                    continue
                seen.add((pid, start))
                self._procs[(pid, start)] = figures
                todo += children.get(pid, [])
            for key, p in self._procs.items():
                if key not in seen:
                    p.alive = False

    def cpu_seconds(self) -> float:
        """Every followed process's own CPU as last sampled and what it reaped, less each
        ended process whose parent was followed: that parent waited for it, so its CPU is in
        the parent's reaped figure (or in the grandparent's, if the parent ended too)."""
        self.sample()
        with self._lock:
            followed = {pid for pid, _ in self._procs}
            return sum(p.own + p.reaped for p in self._procs.values()
                       if p.alive or p.ppid not in followed)


def _cgroup2_mount() -> Path | None:
    """Where the unified (v2) control-group hierarchy is mounted, if it is."""
    try:
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            left, _, right = line.partition(" - ")
            if right.split(" ", 1)[0] == "cgroup2":
                return Path(left.split()[4])
    except OSError:
        pass
    return None


class CgroupCpu:
    """A control group (v2) of its own for a process and everything it starts: the kernel
    counts their CPU (``cpu.stat``'s ``usage_usec``, without any controller enabled)."""

    def __init__(self, path: Path):
        self.path = path

    @classmethod
    def create(cls, pid: int) -> CgroupCpu | None:
        """Moves ``pid`` into a new group below its own; None where that is not allowed
        (not root, no cgroup v2)."""
        root = _cgroup2_mount()
        try:
            own = next(line[3:] for line in
                       Path(f"/proc/{pid}/cgroup").read_text().splitlines()
                       if line.startswith("0::"))
            if root is None or not (root / own.lstrip("/") / "cpu.stat").exists():
                return None
            path = root / own.lstrip("/") / f"ckpt-cpu-{pid}-{time.monotonic_ns()}"
            path.mkdir()
        except (OSError, StopIteration):
            return None
        try:
            (path / "cgroup.procs").write_text(str(pid))
        except OSError:
            path.rmdir()
            return None
        return cls(path)

    def cpu_seconds(self) -> float:
        for line in (self.path / "cpu.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) / 1e6
        raise RuntimeError(f"no usage_usec in {self.path / 'cpu.stat'}")

    def close(self) -> None:
        """Moves what is left in the group to its parent and removes it: empty groups
        would pile up under the machine's hierarchy, one per test worker and run."""
        try:
            for pid in (self.path / "cgroup.procs").read_text().split():
                (self.path.parent / "cgroup.procs").write_text(pid)
            self.path.rmdir()
        except OSError:
            pass


class CpuLog:
    """The pytest plugin (registered by conftest.py when the variable is set)."""

    def __init__(self, path: str):
        self.path = Path(path)
        self._start: tuple[float, float] | None = None
        self.cgroup = CgroupCpu.create(os.getpid())
        self.tree: ProcessTree | None = None
        if self.cgroup is None:
            self.tree = ProcessTree(os.getpid())
            threading.Thread(target=self._sampler, name="cpu-log", daemon=True).start()

    def cpu_seconds(self) -> float:
        if self.cgroup is not None:
            return self.cgroup.cpu_seconds()
        assert self.tree is not None
        return self.tree.cpu_seconds()

    def _sampler(self) -> None:
        while self.tree is not None:
            time.sleep(SAMPLE_SECONDS)
            self.tree.sample()

    def pytest_runtest_logstart(self, nodeid: str, location: tuple) -> None:  # noqa: ARG002
        self._start = (time.monotonic(), self.cpu_seconds())

    def pytest_runtest_logfinish(self, nodeid: str, location: tuple) -> None:  # noqa: ARG002
        if self._start is None:
            return
        wall0, cpu0 = self._start
        line = {"test": nodeid, "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
                "wall": round(time.monotonic() - wall0, 1),
                "cpu": round(self.cpu_seconds() - cpu0, 1)}
        with self.path.open("a") as f:
            f.write(json.dumps(line) + "\n")

    def pytest_unconfigure(self) -> None:
        if self.cgroup is not None:
            self.cgroup.close()


def by_module(lines: list[str]) -> list[tuple[str, int, float, float]]:
    """(module path, tests, wall seconds, CPU seconds) per test module of a log, most CPU
    first."""
    found: dict[str, list[float]] = {}
    for line in lines:
        d = json.loads(line)
        m = found.setdefault(d["test"].split("::")[0], [0, 0.0, 0.0])
        m[0] += 1
        m[1] += d["wall"]
        m[2] += d["cpu"]
    return sorted(((k, int(v[0]), v[1], v[2]) for k, v in found.items()),
                  key=lambda r: (-r[3], r[0]))


def markdown(rows: list[tuple[str, int, float, float]], top: int = 25) -> str:
    """The table docs/testing.md shows: the ``top`` costliest modules, then the rest."""
    out = ["| module | tests | wall s | CPU s |", "|---|--:|--:|--:|"]
    out += [f"| `{m}` | {n} | {w:,.0f} | {c:,.0f} |" for m, n, w, c in rows[:top]]
    rest = rows[top:]
    if rest:
        out.append(f"| {len(rest)} other modules | {sum(r[1] for r in rest)} | "
                   f"{sum(r[2] for r in rest):,.0f} | {sum(r[3] for r in rest):,.0f} |")
    out.append(f"| all | {sum(r[1] for r in rows)} | {sum(r[2] for r in rows):,.0f} | "
               f"{sum(r[3] for r in rows):,.0f} |")
    return "\n".join(out)


if __name__ == "__main__":  # python -m tests.support.cpu_log FILE: the per-module table
    import sys

    print(markdown(by_module(Path(sys.argv[1]).read_text().splitlines())))
