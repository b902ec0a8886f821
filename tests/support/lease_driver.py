"""A process that drives one epoch and holds its lease, for tests/unit/test_lease.py: begins an
epoch, acknowledges one task, says READY, waits for a go-file, then tries the next task."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from checkpointing import CheckpointConfig, Coordinator, LocalStorage
from checkpointing.coordination.lease import RunnerLease
from checkpointing.errors import CheckpointError
from tests.support.helpers import DIAMOND, ack_task


def main(root: str, run_id: str, lease_s: str, go: str) -> int:
    c = Coordinator(LocalStorage(root), "p", CheckpointConfig(lease_seconds=float(lease_s)))
    tmp = Path(root).parent
    epoch = c.begin_epoch(DIAMOND, run_id).epoch_id
    with RunnerLease(c, epoch):
        ack_task(c, epoch, "src_a", files={"s": b"a"}, tmp=tmp)
        print(f"READY {epoch}", flush=True)
        while not Path(go).exists():
            time.sleep(0.1)
        try:
            ack_task(c, epoch, "src_b", files={"s": b"b"}, tmp=tmp)
        except CheckpointError as exc:
            print(f"REFUSED {exc}", flush=True)
            return 0
        print("ACKED", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
