"""OpenLineage through the OpenLineage provider, under `airflow dags test` with the
provider's HTTP transport to a local receiver: every event validates against the
OpenLineage JSON schema (and each facet of ours against its own); the checkpoint facet, the
table input's version read and the table output's version committed equal the epoch's own
documents; no checkpoint storage path is in any event. Without a transport (Airflow's
default) nothing is sent."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from bench.harness.airflow_env import ROOT, airflow, airflow_env, migrate
from bench.harness.airflow_standalone import connect_env
from bench.harness.sinks import WebhookSink
from checkpointing import Coordinator, LocalStorage

pytestmark = pytest.mark.slow
DAG, PIPELINE = "ckpt_lineage", "lineage_test"
SPEC = ROOT / "tests/openlineage"
FACET = ROOT / "plugins/dag_checkpoints/shared/facets/CheckpointRunFacet.json"
#: A credential in the DAG's spark_conf, as a deployment on S3 may hold one: the Spark
#: sessions get it, nothing Airflow stores, logs or sends may show it.
CANARY = "s3a-canary-5e1b07"


def _validator(schema_file: Path, ref: str | None = None):
    """A validator of ``schema_file`` (or of its ``$defs`` entry ``ref``), references to the
    OpenLineage spec resolved offline."""
    from jsonschema import Draft202012Validator
    from referencing import Registry, Resource

    docs = [json.loads(p.read_text()) for p in (*SPEC.glob("*.json"), FACET)]
    registry = Registry().with_resources(
        (d["$id"], Resource.from_contents(d)) for d in docs)
    schema = json.loads(schema_file.read_text())
    if ref:
        schema = {"$ref": f"{schema['$id']}#/$defs/{ref}"}
    return Draft202012Validator(schema, registry=registry,
                                format_checker=Draft202012Validator.FORMAT_CHECKER)


@pytest.fixture
def af(tmp_path, spark_connect):
    from deltalake import write_deltalake

    hook = WebhookSink()
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "lineage_dag.py").write_text((ROOT / "tests/dags_lineage/lineage_dag.py").read_text())
    (tmp_path / "data/raw/readings").mkdir(parents=True)
    # The table exists before the pipeline's first epoch pins it (version 0).
    write_deltalake(str(tmp_path / "data/tables/landed"),
                    pd.DataFrame({"meter": ["seed"], "kwh": [0.5]}))
    env = airflow_env(tmp_path / "airflow", AIRFLOW__CORE__DAGS_FOLDER=str(dags),
                      CKPT_STORAGE=f"file://{tmp_path}/ckpt", CKPT_DATA=f"file://{tmp_path}/data",
                      CKPT_SPARK_CONF=f"spark.hadoop.fs.s3a.secret.key={CANARY}",
                      **connect_env(spark_connect))
    migrate(env)
    yield env, tmp_path, hook
    hook.stop()


def _run_day(env, tmp: Path, day: str, logical: str, rows: int) -> None:
    pd.DataFrame({"meter": [f"m{i}" for i in range(rows)], "kwh": [1.0] * rows}).to_csv(
        tmp / f"data/raw/readings/{day}.csv", index=False)
    r = airflow(env, "dags", "test", DAG, logical)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]


def test_lineage_events_carry_epochs_and_table_versions(af):
    env, tmp, hook = af
    _run_day(env, tmp, "2024-01-01", "2024-01-02", 3)
    assert hook.received == []  # no transport configured: the provider sends nothing
    transport = json.dumps({"type": "http", "url": hook.url, "endpoint": "api/v1/lineage"})
    env = {**env, "AIRFLOW__OPENLINEAGE__TRANSPORT": transport,
           "AIRFLOW__OPENLINEAGE__NAMESPACE": "ckpt-test"}
    _run_day(env, tmp, "2024-01-02", "2024-01-03", 4)

    events = [b["json"] for b in hook.received]
    assert events, "no OpenLineage event received"
    core = _validator(SPEC / "OpenLineage.json", "RunEvent")
    for ev in events:
        errors = sorted(core.iter_errors(ev), key=str)
        assert not errors, (ev.get("job"), [e.message for e in errors[:3]])
    blob = json.dumps(events)
    assert str(tmp / "ckpt") not in blob and "ckpt/lineage_test" not in blob  # no storage path
    # The secret of spark_conf: in no lineage event, no task log, nothing in Airflow's
    # database (the serialized DAG, XComs, trigger and callback rows).
    assert CANARY not in blob
    home = tmp / "airflow"
    logs = [p for p in home.rglob("*") if p.is_file() and p.suffix != ".db"]
    assert logs and not [p for p in logs if CANARY.encode() in p.read_bytes()]
    [db] = list(home.glob("*.db"))
    assert CANARY.encode() not in db.read_bytes()

    def complete(task: str) -> dict:
        [ev] = [e for e in events if e["eventType"] == "COMPLETE"
                and e["job"]["name"] == f"{DAG}.{task}"]
        return ev

    c = Coordinator(LocalStorage(tmp / "ckpt"), PIPELINE)
    assert c.latest_completed() == 2
    facet_schema = _validator(FACET, "CheckpointRunFacet")
    version_schema = _validator(SPEC / "DatasetVersionDatasetFacet.json",
                                "DatasetVersionDatasetFacet")
    for task in ("readings", "summary"):
        ev = complete(task)
        facet = ev["run"]["facets"]["dagCheckpoints_epoch"]
        assert not list(facet_schema.iter_errors(facet)), facet
        handle = c.completed_handles(2)[task]
        assert (facet["pipeline"], facet["epoch"], facet["attempt"], facet["status"]) == \
            (PIPELINE, 2, handle.attempt, "acknowledged")
        assert facet["restoredFromEpoch"] == 1
    ns = f"dag-checkpoints://{PIPELINE}"
    # readings: the landing prefix it read, its output as staged for the commit step
    readings = complete("readings")
    assert [(i["namespace"], i["name"]) for i in readings["inputs"]] == \
        [("file", f"{tmp}/data/raw/readings/")]
    assert [(o["namespace"], o["name"]) for o in readings["outputs"]] == \
        [(ns, "readings.landed")]
    # summary: the table input, at the version the barrier pinned and its state recorded
    summary = complete("summary")
    [table_in] = summary["inputs"]
    read = c.completed_handles(2)["summary"].table_offsets["landed"].version
    assert table_in["name"] == f"{tmp}/data/tables/landed"
    assert not list(version_schema.iter_errors(table_in["facets"]["version"]))
    assert table_in["facets"]["version"]["datasetVersion"] == str(read) == "1"
    assert [(o["namespace"], o["name"]) for o in summary["outputs"]] == \
        [(ns, "summary.summary")]
    # the commit step: what it published from, the table version it committed
    commit = complete("checkpoint_commit")
    assert commit["run"]["facets"]["dagCheckpoints_epoch"]["status"] == "completed"
    assert [(i["namespace"], i["name"]) for i in commit["inputs"]] == [(ns, "readings.landed")]
    committed = c.catalog.published_tables(2)["landed"]
    outs = {o["name"]: o for o in commit["outputs"]}
    landed = outs[f"{tmp}/data/tables/landed"]
    assert landed["facets"]["version"]["datasetVersion"] == str(committed) == "2"
    from deltalake import DeltaTable

    assert DeltaTable(str(tmp / "data/tables/landed")).version() == committed

    # The graph, from the received events alone: landing -> readings -> the commit step ->
    # the table -> summary, and one writer of each table version.
    edges = set()
    writers: dict[tuple[str, str], list[str]] = {}
    for ev in events:
        if ev["eventType"] != "COMPLETE":
            continue
        job = ev["job"]["name"]
        edges |= {(i["name"], job) for i in ev.get("inputs", [])}
        edges |= {(job, o["name"]) for o in ev.get("outputs", [])}
        for o in ev.get("outputs", []):
            if "version" in o.get("facets", {}):
                key = (o["name"], o["facets"]["version"]["datasetVersion"])
                writers.setdefault(key, []).append(job)
    table = f"{tmp}/data/tables/landed"
    path = [f"{tmp}/data/raw/readings/", f"{DAG}.readings", "readings.landed",
            f"{DAG}.checkpoint_commit", table, f"{DAG}.summary", "summary.summary"]
    assert all(edge in edges for edge in zip(path, path[1:], strict=False)), sorted(edges)
    assert writers and all(jobs == [f"{DAG}.checkpoint_commit"] for jobs in writers.values()), \
        writers

