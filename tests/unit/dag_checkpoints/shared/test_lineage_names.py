"""Lineage of tables named in Spark's catalog: the dataset is the table's location, as
OpenLineage names storage, and a ``symlinks`` facet gives the name SQL users query, in
the metastore's namespace. Events themselves are validated end to end under Airflow in
tests/system/test_lineage.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checkpointing.records.two_phase_publish import PublishedOutput
from checkpointing.tables.spec import TableSpec

SPEC = Path(__file__).resolve().parents[3] / "openlineage" / "OpenLineage.json"


def _dataset(spec: TableSpec) -> dict:
    from dag_checkpoints.shared.lineage import _table
    from openlineage.client.serde import Serde

    out = PublishedOutput((), 1, {"table": spec.to_json()}, 3)
    return json.loads(Serde.to_json(_table(out, 4)))


@pytest.mark.parametrize("url, namespace", [
    ("jdbc:postgresql://db.internal:5433/spark_metastore", "hive://db.internal:5433"),
    ("jdbc:postgresql://postgres/spark_metastore", "hive://postgres:5432"),
    ("jdbc:derby:;databaseName=/var/lib/ckpt/metastore;create=true", "hive"),
])
def test_a_named_delta_output_links_its_catalog_name(monkeypatch, url, namespace):
    from jsonschema import Draft202012Validator
    from referencing import Registry, Resource

    monkeypatch.setenv("CKPT_METASTORE_URL", url)
    monkeypatch.setenv("CKPT_METASTORE_PASSWORD", "s3cret")
    ds = _dataset(TableSpec("s3://lake/gold/daily", "overwrite", name="gold.daily"))
    assert (ds["namespace"], ds["name"]) == ("s3://lake", "gold/daily")
    symlinks = ds["facets"]["symlinks"]
    assert symlinks["identifiers"] == [{"namespace": namespace, "name": "gold.daily",
                                        "type": "TABLE"}]
    assert symlinks["_schemaURL"].endswith("SymlinksDatasetFacet.json#/$defs/"
                                           "SymlinksDatasetFacet")
    assert ds["facets"]["version"]["datasetVersion"] == "4"
    text = json.dumps(ds)
    assert "s3cret" not in text and "spark_metastore" not in text and "/var/lib" not in text
    schema = json.loads(SPEC.read_text())
    registry = Registry().with_resource(schema["$id"], Resource.from_contents(schema))
    validator = Draft202012Validator({"$ref": f"{schema['$id']}#/$defs/OutputDataset"},
                                     registry=registry)
    assert not list(validator.iter_errors(ds))


def test_an_unnamed_table_has_no_symlink(monkeypatch):
    monkeypatch.setenv("CKPT_METASTORE_URL", "jdbc:postgresql://postgres/spark_metastore")
    ds = _dataset(TableSpec("s3://lake/gold/daily", "overwrite"))
    assert "symlinks" not in ds["facets"]
