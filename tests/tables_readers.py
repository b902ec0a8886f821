"""Readers of Delta tables that this project did not write: delta-rs (``deltalake``) and
DuckDB's delta extension (delta-kernel-rs), the extension loaded from its PyPI package."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse


def rows_deltalake(location: str, endpoint: str | None = None,
                   version: int | None = None) -> list[tuple]:
    from deltalake import DeltaTable

    from checkpointing.delta import storage_options, table_path

    dt = DeltaTable(table_path(location), version=version,
                    storage_options=storage_options(location, endpoint))
    t = dt.to_pyarrow_table()
    return sorted(zip(*(t.column(c).to_pylist() for c in sorted(t.column_names)), strict=True))


def _extension(name: str) -> str:
    import duckdb_ext

    found = list(Path(duckdb_ext.__path__[0]).glob(f"extensions/*/*/{name}.duckdb_extension"))
    assert found, f"DuckDB extension {name} is not installed (requirements-dev.txt)"
    return str(found[0])


def rows_duckdb(location: str, endpoint: str | None = None) -> list[tuple]:
    import os

    import duckdb

    con = duckdb.connect()
    con.execute(f"LOAD '{_extension('delta')}'")
    path = urlparse(location).path if location.startswith("file://") else location
    if location.startswith("s3://"):
        con.execute(f"LOAD '{_extension('httpfs')}'")
        host = urlparse(endpoint).netloc
        con.execute(f"""CREATE SECRET s3 (TYPE S3, KEY_ID '{os.environ["AWS_ACCESS_KEY_ID"]}',
                        SECRET '{os.environ["AWS_SECRET_ACCESS_KEY"]}', ENDPOINT '{host}',
                        URL_STYLE 'path', USE_SSL false, REGION 'us-east-1')""")
    rel = con.execute(f"SELECT * FROM delta_scan('{path}')")
    cols = [d[0] for d in rel.description]
    order = sorted(range(len(cols)), key=lambda i: cols[i])
    return sorted(tuple(r[i] for i in order) for r in rel.fetchall())
