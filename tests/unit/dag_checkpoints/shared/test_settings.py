"""CheckpointSettings: what a DAG's checkpointing is, round-tripped without secrets."""

from __future__ import annotations

import pytest
from dag_checkpoints import CheckpointHook


def test_settings_round_trip_without_secrets(monkeypatch):
    """Settings built from a deployment's environment, where secrets sit beside them, carry
    connection ids only: nothing secret reaches what Airflow stores (callback kwargs,
    trigger kwargs)."""
    from dag_checkpoints import AlertSettings, CheckpointSettings
    from dag_checkpoints.triggers import EpochDeadlineTrigger

    secrets = {"AWS_SECRET_ACCESS_KEY": "aws-s3cr3t-9f1",
               "AWS_SESSION_TOKEN": "tok-77e2",
               "AIRFLOW_CONN_CKPT_SMTP": "smtp://mailer:pw-5c3a@mail.example.com:25",
               "AIRFLOW_CONN_CKPT_WEBHOOK": "https://hooks.example.com/T0/B0/xoxb-hook-secret"}
    for k, v in {**secrets, "CKPT_STORAGE": "s3://b/p", "CKPT_ALERT_SMTP_CONN": "ckpt_smtp",
                 "CKPT_ALERT_WEBHOOK_CONN": "ckpt_webhook",
                 "CKPT_ALERT_EMAIL": "ops@example.com"}.items():
        monkeypatch.setenv(k, v)
    import json

    from_env = CheckpointSettings("flights_daily")
    stored = json.dumps([from_env.to_kwargs(),
                         EpochDeadlineTrigger(from_env.to_kwargs(), 1, "x").serialize()[1]])
    assert from_env.alerts.smtp_conn_id == "ckpt_smtp" and "ckpt_webhook" in stored
    for secret in ("aws-s3cr3t-9f1", "tok-77e2", "pw-5c3a", "xoxb-hook-secret"):
        assert secret not in stored

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

    # A credential in spark_conf: only the tasks that start Spark (the DAG's own settings)
    # have it; what Airflow stores (serialized settings, trigger and callback kwargs, and
    # the lineage events that show them) does not.
    from dag_checkpoints.shared.timeouts import deadline_alert

    spark_secret = "s3a-k3y-0aa1"
    with_conf = CheckpointSettings("flights_daily", storage="s3://b/p", spark_mode="connect",
                                   spark_conf=(("spark.hadoop.fs.s3a.secret.key",
                                                spark_secret),))
    assert spark_secret not in json.dumps(with_conf.to_kwargs())
    alert = deadline_alert(with_conf)
    # The callback's kwargs (stored with the serialized DAG, shown in lineage events, logged
    # by Airflow when the callback fails) carry the pipeline id: no location, no secret.
    assert alert.callback.kwargs == {"pipeline_id": "flights_daily"}


def test_credentials_in_a_uri_are_refused_in_one_line_without_showing_them():
    """A URI is stored and shown wherever a location is (the serialized DAG, lineage
    namespaces, log lines); a credential in one is refused before anything stores it."""
    from dag_checkpoints import CheckpointSettings

    for kwargs in ({"storage": "s3://AKIAXYZ:s3cr3t-aa9@bucket/ckpt"},
                   {"storage": "s3://b/ckpt", "data": "s3://AKIAXYZ:s3cr3t-aa9@b/data"},
                   {"storage": "s3://b/ckpt", "endpoint_url": "http://u:s3cr3t-aa9@minio:9000"}):
        with pytest.raises(ValueError) as err:
            CheckpointSettings("p", **kwargs)
        message = str(err.value)
        assert "credentials" in message and "s3cr3t-aa9" not in message
        assert "AKIAXYZ" not in message and "\n" not in message


def test_bad_spark_mode_is_refused():
    from dag_checkpoints import CheckpointSettings

    with pytest.raises(ValueError, match="spark_mode"):
        CheckpointSettings("p", spark_mode="yarn-ish")


def test_blank_or_padded_storage_is_refused_with_one_line(tmp_path, monkeypatch):
    """A blank CKPT_STORAGE once made the api-server create a directory named ' '."""
    from dag_checkpoints import CheckpointSettings

    from checkpointing import open_storage
    from checkpointing.errors import StorageError

    monkeypatch.chdir(tmp_path)
    for bad in (" ", "", "\t", " file:///x"):
        with pytest.raises(StorageError, match="bad storage URI"):
            open_storage(bad)
    with pytest.raises(ValueError, match="surrounding white space"):
        CheckpointSettings("p", storage=" ")
    with pytest.raises(ValueError, match="no checkpoint storage configured"):
        CheckpointHook(CheckpointSettings("p", storage="")).get_coordinator()
    assert list(tmp_path.iterdir()) == []  # nothing created in the working directory
