"""Small parts of the Airflow plugin that need no running Airflow."""

from __future__ import annotations


def test_unreachable_spark_master_is_named():
    import socket

    import pytest
    from airflow.sdk.exceptions import AirflowException
    from dag_checkpoints.operators import check_master_reachable

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


def test_settings_round_trip_without_secrets():
    from dag_checkpoints import AlertSettings, CheckpointSettings

    from checkpointing import CheckpointConfig

    s = CheckpointSettings("flights_daily", storage="s3://b/p", data="s3://d/",
                           endpoint_url="http://127.0.0.1:9000", aws_conn_id="aws_ckpt",
                           config=CheckpointConfig(timeout_seconds=60, retained_epochs=2),
                           spark_mode="submit", spark_conn_id="spark_cluster",
                           alerts=AlertSettings("hook", "/a", ("ops@example.com",), "smtp",
                                                "ckpt@example.com"))
    d = s.to_kwargs()
    assert CheckpointSettings.from_kwargs(d) == s
    import json

    text = json.dumps(d)  # what a Deadline Alert stores in Airflow's database
    assert "secret" not in text.lower() and "password" not in text.lower()


def test_bad_spark_mode_is_refused():
    import pytest
    from dag_checkpoints import CheckpointSettings

    with pytest.raises(ValueError, match="spark_mode"):
        CheckpointSettings("p", spark_mode="yarn-ish")


def test_checkpoint_conf_of_a_run():
    from dag_checkpoints.runconf import checkpoint_conf

    assert checkpoint_conf(None) == {} and checkpoint_conf({"other": 1}) == {}
    assert checkpoint_conf({"checkpoint": {"lineage": "bf-1"}}) == {"lineage": "bf-1"}
