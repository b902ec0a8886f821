"""The Spark hooks: connections and masters, named in one line."""

from __future__ import annotations

import pytest


def test_unreachable_spark_master_is_named():
    import socket

    from airflow.sdk.exceptions import AirflowException
    from dag_checkpoints.hooks.spark import check_master_reachable

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(AirflowException, match=f"Spark master spark://127.0.0.1:{port} is "
                                               "unreachable"):
        check_master_reachable(f"spark://127.0.0.1:{port}", timeout=1)
    with socket.socket() as live:
        live.bind(("127.0.0.1", 0))
        live.listen()
        check_master_reachable(f"spark://127.0.0.1:{port},127.0.0.1:{live.getsockname()[1]}")
    check_master_reachable("local[2]")  # nothing to probe
