"""What a long bench script shares: its work directory and its progress lines."""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path


def work_dir(work: Path | None, prefix: str) -> Path:
    """``--work`` (made if new), or a new temporary directory named ``prefix...``."""
    path = work or Path(tempfile.mkdtemp(prefix=prefix))
    path.mkdir(parents=True, exist_ok=True)
    return path


class Progress:
    """``<bench>: <step> at <seconds> s`` on stderr as each step ends: a run stopped by a
    timeout shows how far it got."""

    def __init__(self, bench: str):
        self.bench, self.t0 = bench, time.perf_counter()

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self.t0

    def __call__(self, step: str) -> None:
        print(f"{self.bench}: {step} at {self.seconds:.0f} s", file=sys.stderr, flush=True)
