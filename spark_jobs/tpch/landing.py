"""Land TPC-H the way a daily pipeline receives it.

``tpchgen-cli`` (pinned in requirements.txt; a Rust wheel, nothing downloaded at run time)
generates the tables at a scale factor into a cache directory, once. From there:

- ``dim/<table>.parquet``: customer, supplier, nation, region (dimensions, landed once);
- the **history**: orders placed before ``history_until`` and their line items, in a few
  large files (``raw/orders/history-0001.parquet``, ``raw/lineitem/history-0001.parquet``,
  ...); a history file is named for no day, so the first epoch consumes it whatever its
  input end;
- **one file per day** after that, by order date: ``raw/orders/<day>.parquet`` and
  ``raw/lineitem/<day>.parquet`` (the line items of that day's orders), TPC-H's refresh
  function RF1 as a daily feed;
- optionally **deletions** of old orders every ``delete_every`` days,
  ``raw/deletes/<day>.parquet`` (RF2): ``o_orderkey`` of ``deletes`` random orders of the
  history not deleted before, with their ``o_orderdate``. TPC-H's RF2 files carry the key
  only; ours also carry the order's date, as a change-data-capture delete event carries
  the table's partition key, so that a deletion touches only its day's state.

Strings are landed as plain UTF-8 strings (not Arrow string views), decimals as they are
generated (``decimal(15,2)``): sums stay exact.

Usage: ``python -m spark_jobs.tpch.landing --data file:///tmp/tpch --scale 1
--history-until 1998-06-01 --days 30 [--delete-every 7 --deletes 100]``
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from checkpointing import Storage, open_storage

TABLES = ("orders", "lineitem", "customer", "supplier", "nation", "region")
DIMENSIONS = ("customer", "supplier", "nation", "region")
#: Rows per history file: a few large files, as a bulk export lands.
HISTORY_FILE_ROWS = 8_000_000
#: TPC-H's order dates run from 1992-01-01 to 1998-08-02.
FIRST_ORDER_DAY, LAST_ORDER_DAY = date(1992, 1, 1), date(1998, 8, 2)
DEFAULT_CACHE = Path(__file__).resolve().parents[2] / ".tpch"


class LandingError(RuntimeError):
    """The generator is missing or failed; the message is one line saying what to do."""


@dataclass
class Landed:
    """What was landed: row counts, the days with a file, the deleted order keys."""

    history_until: str
    history_orders: int = 0
    history_lineitems: int = 0
    days: list[str] = field(default_factory=list)
    day_orders: dict[str, int] = field(default_factory=dict)
    deletes: dict[str, list[int]] = field(default_factory=dict)


def generate(scale: float, cache: Path = DEFAULT_CACHE) -> Path:
    """The directory holding TPC-H at ``scale`` as Parquet, generated once by tpchgen-cli
    (``TPCHGEN_CLI`` names another executable)."""
    out = cache / f"sf{scale:g}"
    if all((out / f"{t}.parquet").exists() for t in TABLES):
        return out
    exe = os.environ.get("TPCHGEN_CLI") or shutil.which("tpchgen-cli") or \
        str(Path(sys.executable).parent / "tpchgen-cli")
    if not Path(exe).exists():
        raise LandingError(f"tpchgen-cli not found ({exe}): install it with `pip install "
                           "tpchgen-cli==4.0.0` (it is in requirements.txt)")
    tmp = cache / f".sf{scale:g}.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    cmd = [exe, "parquet", "-s", f"{scale:g}", f"--tables={','.join(TABLES)}",
           f"--output-dir={tmp}"]
    r = subprocess.run(cmd, capture_output=True, text=True)  # noqa: S603 - our arguments
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["no output"])[-1]
        raise LandingError(f"tpchgen-cli failed (exit {r.returncode}) at scale factor "
                           f"{scale:g}: {last}")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def _plain(table: Any) -> Any:
    """String views as plain strings (every Parquet reader knows those)."""
    import pyarrow as pa

    fields = [pa.field(f.name, pa.string()) if pa.types.is_string_view(f.type) else f
              for f in table.schema]
    return table.cast(pa.schema(fields))


def _write(storage: Storage, key: str, table: Any, scratch: Path) -> None:
    import pyarrow.parquet as pq

    path = scratch / hashlib.sha256(key.encode()).hexdigest()
    pq.write_table(_plain(table), path, compression="zstd")
    storage.upload_file(key, str(path))
    path.unlink()


class _PartedWriter:
    """Writes a stream of tables as ``<prefix>-0001.parquet``, ... of HISTORY_FILE_ROWS
    rows each (a file rolls over at a batch boundary), uploading each file when full."""

    def __init__(self, storage: Storage, prefix: str, scratch: Path):
        self.storage, self.prefix, self.scratch = storage, prefix, scratch
        self.writer: Any = None
        self.rows = self.part = 0

    def write(self, table: Any) -> None:
        import pyarrow.parquet as pq

        if not table.num_rows:
            return
        if self.writer is None or self.rows >= HISTORY_FILE_ROWS * self.part:
            self._upload()
            self.part += 1
            self.writer = pq.ParquetWriter(self._path(), table.schema, compression="zstd")
        self.writer.write_table(table)
        self.rows += table.num_rows

    def _path(self) -> Path:
        return self.scratch / f"{self.prefix.replace('/', '_')}-{self.part}.parquet"

    def _upload(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.storage.upload_file(f"{self.prefix}-{self.part:04d}.parquet", str(self._path()))
            self._path().unlink()
            self.writer = None

    def close(self) -> int:
        """Upload the last file; the rows written."""
        self._upload()
        return self.rows


def land(data: Storage, scale: float, history_until: date, days: int, *,
         delete_every: int = 0, deletes: int = 0, seed: int = 1,
         cache: Path = DEFAULT_CACHE) -> Landed:
    """Land the dimensions, the history before ``history_until`` and ``days`` daily files
    from it on (see the module docstring). Deterministic for a seed."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    src = generate(scale, cache)
    scratch = cache / ".landing"
    scratch.mkdir(parents=True, exist_ok=True)
    for t in DIMENSIONS:
        _write(data, f"dim/{t}.parquet", pq.read_table(src / f"{t}.parquet"), scratch)

    orders = _plain(pq.read_table(src / "orders.parquet"))
    cut = pa.scalar(history_until, pa.date32())
    daily_days = [history_until + timedelta(days=i) for i in range(days)]
    result = Landed(history_until.isoformat())

    hist_mask = pc.less(orders["o_orderdate"], cut)
    history = orders.filter(hist_mask)
    result.history_orders = history.num_rows
    for i, start in enumerate(range(0, history.num_rows, HISTORY_FILE_ROWS)):
        _write(data, f"raw/orders/history-{i + 1:04d}.parquet",
               history.slice(start, HISTORY_FILE_ROWS), scratch)
    for d in daily_days:
        day_orders = orders.filter(pc.equal(orders["o_orderdate"], pa.scalar(d, pa.date32())))
        _write(data, f"raw/orders/{d.isoformat()}.parquet", day_orders, scratch)
        result.days.append(d.isoformat())
        result.day_orders[d.isoformat()] = day_orders.num_rows

    # Each line item goes where its order goes: an array from order key to order day.
    keys = orders["o_orderkey"].to_numpy()
    day_of = np.full(int(keys.max()) + 1, -1, dtype=np.int32)
    day_of[keys] = orders["o_orderdate"].cast(pa.int32()).to_numpy()
    cut_i, end_i = history_until.toordinal() - 719163, history_until.toordinal() - 719163 + days
    history_out = _PartedWriter(data, "raw/lineitem/history", scratch)
    per_day: dict[int, list[Any]] = {}
    for batch in pq.ParquetFile(src / "lineitem.parquet").iter_batches(batch_size=1 << 20):
        batch = _plain(pa.Table.from_batches([batch]))
        od = day_of[batch["l_orderkey"].to_numpy()]
        history_out.write(batch.filter(pa.array(od < cut_i)))
        in_days = (od >= cut_i) & (od < end_i)
        if in_days.any():
            sel = batch.filter(pa.array(in_days))
            sel_days = od[in_days]
            for d in np.unique(sel_days):
                per_day.setdefault(int(d), []).append(sel.filter(pa.array(sel_days == d)))
    n_hist = history_out.close()
    result.history_lineitems = n_hist
    empty = pq.read_schema(src / "lineitem.parquet")
    for d in daily_days:
        parts = per_day.get(d.toordinal() - 719163, [])
        table = pa.concat_tables(parts) if parts else _plain(empty.empty_table())
        _write(data, f"raw/lineitem/{d.isoformat()}.parquet", table, scratch)

    if delete_every and deletes:
        rnd = random.Random(seed)  # noqa: S311 - test data, not secrets
        pool = history.select(["o_orderkey", "o_orderdate"])
        chosen: set[int] = set()
        hist_keys = pool["o_orderkey"].to_pylist()
        for i, d in enumerate(daily_days):
            if (i + 1) % delete_every:
                continue
            picks = [k for k in rnd.sample(hist_keys, min(len(hist_keys), deletes * 2))
                     if k not in chosen][:deletes]
            chosen.update(picks)
            rows = pool.filter(pc.is_in(pool["o_orderkey"], pa.array(picks, pa.int64())))
            _write(data, f"raw/deletes/{d.isoformat()}.parquet", rows, scratch)
            result.deletes[d.isoformat()] = sorted(picks)
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="spark_jobs.tpch.landing", description=__doc__.split(
        "\n\n")[0])
    ap.add_argument("--data", required=True, help="the data root (file:// or s3:// URI)")
    ap.add_argument("--scale", type=float, default=1.0, help="TPC-H scale factor")
    ap.add_argument("--history-until", default="1998-06-01",
                    help="orders before this day land as bulk history")
    ap.add_argument("--days", type=int, default=30, help="daily files from that day on")
    ap.add_argument("--delete-every", type=int, default=0, help="a deletion file every N days")
    ap.add_argument("--deletes", type=int, default=0, help="orders deleted per deletion file")
    ap.add_argument("--cache", default=str(DEFAULT_CACHE), help="where generated data is kept")
    ap.add_argument("--endpoint-url", default=None)
    a = ap.parse_args(argv)
    try:
        landed = land(open_storage(a.data, endpoint_url=a.endpoint_url), a.scale,
                      date.fromisoformat(a.history_until), a.days,
                      delete_every=a.delete_every, deletes=a.deletes, cache=Path(a.cache))
    except LandingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"landed TPC-H sf{a.scale:g}: {landed.history_orders} orders and "
          f"{landed.history_lineitems} line items of history before {landed.history_until}, "
          f"{len(landed.days)} daily files, {len(landed.deletes)} deletion files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
