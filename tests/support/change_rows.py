"""A change set's rows without Spark: each data file read by pyarrow, its rows selected by
position (a deletion vector's ``skip_rows`` or ``only_rows``), Delta's partition values
from the log, columns by the name the files give them (Iceberg: by field id). What a test
compares with a table reader's own read of a version; independent of the job runtime's
Spark reading."""

from __future__ import annotations

from collections import Counter
from urllib.parse import unquote, urlparse

from checkpointing.protocol.table_inputs import ChangeSet, DataFile


def _path(uri: str) -> str:
    return unquote(urlparse(uri).path) if uri.startswith("file://") else uri


def file_rows(cs: ChangeSet, f: DataFile, columns: list[str]) -> list[tuple]:
    import pyarrow.parquet as pq

    table = pq.read_table(_path(f.uri))
    n = table.num_rows
    if f.only_rows is not None:
        keep = sorted(f.only_rows)
    else:
        skip = set(f.skip_rows)
        keep = [i for i in range(n) if i not in skip]
    out = []
    data = {}
    # Iceberg: a column is the file's column of its field id, whatever the file names it
    by_id = {(fl.metadata or {}).get(b"PARQUET:field_id"): fl.name for fl in table.schema}
    for c in columns:
        if c in cs.log_partition_columns:
            data[c] = [f.partition_values.get(c)] * n
            continue
        if c in cs.field_ids:
            name = by_id.get(str(cs.field_ids[c]).encode(), "")
        else:
            name = cs.physical_names.get(c, c)
        data[c] = table.column(name).to_pylist() if name in table.column_names else [None] * n
    for i in keep:
        out.append(tuple(data[c][i] for c in columns))
    return out


def signed_rows(cs: ChangeSet, columns: list[str]) -> Counter:
    """The change set as signed row counts: +1 per added row, -1 per removed one."""
    counts: Counter = Counter()
    for f in cs.added:
        counts.update(file_rows(cs, f, columns))
    for f in cs.removed:
        counts.subtract(file_rows(cs, f, columns))
    return counts


def arrow_counts(table, columns: list[str]) -> Counter:
    """A reader's Arrow table as row counts over ``columns``."""
    return Counter(zip(*(table.column(c).to_pylist() for c in columns), strict=True))


def histories(ops: list[str], max_epochs: int):
    """Hypothesis' strategy of epochs of operations: 2 to ``max_epochs`` epochs, each of zero
    to four (operation, small number) pairs."""
    from hypothesis import strategies as st

    return st.lists(st.lists(st.tuples(st.sampled_from(ops), st.integers(0, 6)), max_size=4),
                    min_size=2, max_size=max_epochs)


def history_settings(examples: int):
    """The histories' fixed-seed profile: ``examples`` examples, no deadline (a step is a
    table commit)."""
    from hypothesis import HealthCheck, seed, settings

    profile = settings(max_examples=examples, deadline=None,
                       suppress_health_check=[HealthCheck.function_scoped_fixture,
                                              HealthCheck.too_slow])
    return lambda test: seed(20261204)(profile(test))
