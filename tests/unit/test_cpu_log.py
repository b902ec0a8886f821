"""The suite's CPU log (tests/support/cpu_log.py) counts what a test's processes really used: a
process re-parented away from the test's tree (as `airflow standalone`'s components are
when the standalone stops first) and a short-lived child its followed parent waited for,
each once; in a control group of its own, also a daemon that ended unseen."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from tests.support.cpu_log import CgroupCpu, CpuLog, ProcessTree, _cgroup2_mount

#: A busy loop of about ``s`` CPU seconds.
BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass\n"


def _follow(tree: ProcessTree, until) -> None:  # noqa: ANN001
    deadline = time.monotonic() + 60
    while not until() and time.monotonic() < deadline:
        tree.sample()
        time.sleep(0.1)


def test_an_orphaned_grandchild_is_counted_after_its_parent_has_gone():
    tree = ProcessTree(os.getpid())
    before = tree.cpu_seconds()
    # The child starts a burner in a session of its own, prints its pid, and exits a
    # moment later without waiting: the burner is re-parented out of this process's tree
    # while it runs.
    child = subprocess.Popen(
        [sys.executable, "-c",
         "import subprocess, sys, time\n"
         f"p = subprocess.Popen([sys.executable, '-c', {BURN.format(s=1.5)!r}], "
         "start_new_session=True)\nprint(p.pid, flush=True)\ntime.sleep(0.5)"],
        stdout=subprocess.PIPE, text=True)
    _follow(tree, lambda: child.poll() is not None)
    burner = int(child.stdout.read())
    _follow(tree, lambda: not os.path.exists(f"/proc/{burner}"))
    used = tree.cpu_seconds() - before
    # the burner's 1.5 s, less what it used after the last sample that saw it (a sample is
    # a read of /proc, slower on a busy machine), and the child's start; the log summed at
    # the start and the end alone counted 0.05-0.13 s here
    assert 1.0 <= used <= 3.0, used


def test_a_child_its_followed_parent_waited_for_is_counted_once():
    tree = ProcessTree(os.getpid())
    before = tree.cpu_seconds()
    parent = subprocess.Popen(
        [sys.executable, "-c",
         f"import subprocess, sys, time\nsubprocess.run([sys.executable, '-c', "
         f"{BURN.format(s=1.0)!r}], check=True)\ntime.sleep(1)"])
    _follow(tree, lambda: parent.poll() is not None)
    used = tree.cpu_seconds() - before
    # the burner's 1.0 s and two interpreters' starts, not the burner twice (its sampled
    # figure and again in its parent's reaped children)
    assert 1.0 <= used < 1.9, used


def test_a_control_group_counts_a_daemon_its_parent_left_unseen():
    """A process whose parent exits without waiting for it, and which ends before anything
    looked at it (a daemonized server stopped between two samples): the process tree
    cannot see its CPU, the control group the worker moves into counts it."""
    child = subprocess.Popen(
        [sys.executable, "-c",
         "import subprocess, sys\nsys.stdin.readline()\n"
         f"p = subprocess.Popen([sys.executable, '-c', {BURN.format(s=1.0)!r}], "
         "start_new_session=True)\nprint(p.pid, flush=True)"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    group = CgroupCpu.create(child.pid)
    # Root with a cgroup v2 hierarchy (the suite's machines) must get a group; elsewhere
    # the log must say so by falling back to the process tree, not fail.
    if group is None:
        child.kill()
        assert os.geteuid() != 0 or _cgroup2_mount() is None, \
            "root with a cgroup v2 hierarchy, yet no control group was made"
        assert CpuLog(os.devnull).tree is not None
        return
    try:
        before = group.cpu_seconds()
        child.stdin.write("go\n")
        child.stdin.close()
        burner = int(child.stdout.read())
        child.wait()
        deadline = time.monotonic() + 60
        while os.path.exists(f"/proc/{burner}") and time.monotonic() < deadline:
            time.sleep(0.1)
        # the burner's 1.0 s and two interpreters' starts
        used = group.cpu_seconds() - before
        assert 1.0 <= used < 2.5, used
    finally:
        group.close()
    assert not group.path.exists()


def test_the_per_module_table_sums_each_module_s_tests():
    from tests.support.cpu_log import by_module, markdown

    lines = [json.dumps({"test": f"tests/x/test_{m}.py::t{i}", "worker": "gw0",
                         "wall": w, "cpu": c})
             for i, (m, w, c) in enumerate([("a", 10.0, 4.0), ("b", 5.0, 9.0), ("a", 1.5, 2.5)])]
    rows = by_module(lines)
    assert rows == [("tests/x/test_a.py", 2, 11.5, 6.5), ("tests/x/test_b.py", 1, 5.0, 9.0)][::-1]
    table = markdown(rows, top=1)
    assert "| `tests/x/test_b.py` | 1 | 5 | 9 |" in table
    assert "| 1 other modules | 2 | 12 | 6 |" in table and table.endswith("| all | 3 | 16 | 16 |")
