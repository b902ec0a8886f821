"""Helpers for the local services the runtime and the scripts start (the Spark Connect
server, the demo's and the process topology's services): one place for free ports,
listening checks, stopping a process group and the tail of a log."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

#: how many ports below the kernel's ephemeral range :func:`free_port` chooses from
_BELOW_EPHEMERAL = 12_000


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(host: str = "127.0.0.1", taken: Iterable[int] = ()) -> int:
    """A port free on ``host`` now, not among ``taken``, chosen at random below the kernel's
    ephemeral range: a port of that range can be taken, between this choice and the
    service binding it, by any process's outgoing connection or automatically bound
    listener (a Spark driver's RPC port), and a Spark master then moves to the next port
    while its workers knock at the old one."""
    taken = set(taken)
    low = _ephemeral_low()
    rnd = random.SystemRandom()
    for _ in range(500):
        port = rnd.randrange(max(1024, low - _BELOW_EPHEMERAL), low)
        if port in taken:
            continue
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        return port
    while True:  # that range is full: the OS's choice
        with socket.socket() as s:
            s.bind((host, 0))
            port = int(s.getsockname()[1])
        if port not in taken:
            return port


def listening(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _live_processes() -> Iterator[tuple[int, int, int]]:
    """(pid, parent pid, process group) of every live (not zombie) process, from /proc."""
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                yield int(d.name), int(fields[1]), int(fields[2])


def process_groups() -> list[tuple[int, int]]:
    """(pid, process group) of every live (not zombie) process, from /proc."""
    return [(pid, group) for pid, _, group in _live_processes()]


def descendants(pid: int) -> list[int]:
    """Every live process descended from ``pid`` (children first found, then theirs),
    whatever its process group or session: a task process that called setsid is still one."""
    children: dict[int, list[int]] = {}
    for child, parent, _ in _live_processes():
        children.setdefault(parent, []).append(child)
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def group_alive(pgid: int) -> bool:
    """Whether a live (not zombie) process is in process group ``pgid``."""
    if not Path("/proc").is_dir():  # no /proc: ask the kernel (zombies count there)
        try:
            os.killpg(pgid, 0)
            return True
        except ProcessLookupError:
            return False
    return any(pg == pgid for _, pg in process_groups())


def stop_group(pgid: int, timeout: float, proc: subprocess.Popen[bytes] | None = None,
               sig: int = signal.SIGTERM) -> None:
    """Send ``sig`` to process group ``pgid``, SIGKILL it after ``timeout``. ``proc``: our
    own child, reaped here (unreaped, it would stay a zombie)."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None:
            proc.poll()
        if not group_alive(pgid):
            return
        time.sleep(0.3)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return
    if proc is not None:
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            pass


def tail(path: str | Path | None, n: int = 2000, *, one_line: bool = False) -> str:
    """The last ``n`` characters of a log ("" when unreadable); ``one_line`` joins its lines
    with `` | `` for an error message."""
    if path is None:
        return ""
    try:
        text = Path(path).read_text(errors="replace")[-n:]
    except OSError:
        return ""
    return text.strip().replace("\n", " | ") if one_line else text
