"""The spec is the contract: every key the library's Layout produces matches a line of the
key tree in docs/PROTOCOL.md section 4, and every line of that tree is produced by the
Layout; every document the library writes has exactly the fields of its table in section 5
and of its example, and every reader refuses a document without a required field and
accepts one without an optional field. A renamed document (counter.json once drifted from
the spec's name) or field fails here."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from checkpointing.protocol.documents import PROTOCOL_VERSION
from checkpointing.protocol.layout import Layout

SPEC = Path(__file__).resolve().parents[2] / "docs" / "PROTOCOL.md"
SHA = "ab" + "0" * 62
PLACEHOLDERS = {"<epoch>": r"\d{10}", "<NNNN>": r"\d{4}", "<task>": r"[A-Za-z0-9_.-]+",
                "<hh>": r"[0-9a-f]{2}", "<sha256>": r"[0-9a-f]{64}", "<name>": r"[A-Za-z0-9_.-]+",
                "<lineage>": r"[A-Za-z0-9_.-]+", "<run>": r"[0-9a-f]{40}"}


def spec_tree() -> list[str]:
    text = SPEC.read_text()
    section = text[text.index("## 4. Key layout"):text.index("## 5. Documents")]
    block = section.split("```")[1]
    return [line.split()[0] for line in block.strip().splitlines()]


def pattern(template: str) -> re.Pattern:
    out = re.escape(template)
    for ph, rx in PLACEHOLDERS.items():
        out = out.replace(re.escape(ph), rx)
    return re.compile(out.replace(re.escape("..."), ".+") + "$")


def layout_keys() -> dict[str, str]:
    lay = Layout("pipe")
    keys = {
        "counter": lay.counter, "barrier": lay.barrier(7), "metadata": lay.metadata(7),
        "start": lay.attempt_object(7, "t1", 2, "start"),
        "ack": lay.attempt_object(7, "t1", 2, "ack"),
        "decline": lay.attempt_object(7, "t1", 2, "decline"),
        "operation": lay.attempt_object(7, "t1", 2, "operation"),
        "lease": lay.lease(7), "alert": lay.alert(7), "failure": lay.failure_record(7),
        "state": lay.state_prefix(7, "t1", 2) + "part-0.parquet",
        "staging": lay.staging_prefix(7, "t1", 2) + "part-0.parquet",
        "shared": lay.shared(SHA), "savepoint": lay.savepoint("sp1"),
        "manifest": lay.manifest, "origin": lay.lineage_origin("backfill-1"),
        "promotion": lay.lineage_promotion("backfill-1"), "summary": lay.epoch_summary(7),
        "kept_summary": lay.kept_summary(7),
        "verified": lay.verified(7), "stale": lay.stale_alert("main", 7),
        "listing": lay.listing(7, SHA),
        "run": lay.run_index_entry("main", "scheduled__2013-01-02T00:00:00+00:00", 7),
    }
    return {name: key.removeprefix(lay.base) for name, key in keys.items()}


def test_every_layout_key_is_in_the_spec_tree_and_back():
    tree = spec_tree()
    patterns = {t: pattern(t) for t in tree}
    matched = set()
    for name, key in layout_keys().items():
        hits = [t for t, p in patterns.items() if p.match(key)]
        assert hits, f"Layout key {name} ({key}) is not in PROTOCOL.md section 4"
        matched.update(hits)
    assert sorted(set(tree) - matched) == [], "spec lines no Layout method produces"


def test_spec_and_code_agree_on_the_version():
    head = SPEC.read_text().split("\n", 4)[2]
    assert f"**{PROTOCOL_VERSION}**" in head, head


def test_the_epoch_summary_fields_are_the_specs():
    """5.7 lists the summary's fields: every field of the statistics the code writes."""
    from dataclasses import fields

    from checkpointing.views.stats import EpochStats, TaskStats

    text = SPEC.read_text()
    section = text[text.index("### 5.7"):text.index("### 5.8")]
    listed = set(re.findall(r"[a-z_]+", section[section.index("`stats`"):
                                                section.index("A listing serves")]))
    assert {f.name for f in fields(EpochStats)} <= listed
    assert {f.name for f in fields(TaskStats)} <= listed


# ------------------------------------------------------------------ documents (section 5)
def spec_documents() -> dict[str, dict]:
    """Per format: its field tables ({field: required}), one per table, and its example."""
    text = SPEC.read_text()
    body = text[text.index("## 5. Documents"):text.index("## 6. Protocol")]
    docs = {}
    for section in body.split("\n### 5.")[1:]:
        fmt = re.search(r"\(`(ckpt\.[a-z-]+)`", section.splitlines()[0]).group(1)
        tables, current = [], None
        for line in section.splitlines():
            if line.startswith("| field |"):
                current = {}
                tables.append(current)
            elif line.startswith("| `") and current is not None:
                cells = [c.strip() for c in line.strip("|").split(" | ")]
                names = re.findall(r"`([a-z_]+)`", cells[0])
                reqs = [r.strip() for r in cells[2].split(",")]
                for i, name in enumerate(names):
                    current[name] = reqs[min(i, len(reqs) - 1)]  # yes | no | one
            elif not line.startswith("|"):
                current = None
        example = json.loads(section.split("```json\n", 1)[1].split("\n```", 1)[0])
        docs[fmt] = {"tables": tables, "example": example}
    return docs


def written_documents(tmp_path: Path) -> dict[str, list[dict]]:
    """Every kind of document as the library writes it, from one small history: two epochs
    (one completed by a retried task under a lease, one declined), a savepoint, a backfill
    origin, a promotion record, an alert and the summaries a listing writes."""
    from checkpointing import (
        CheckpointConfig,
        Coordinator,
        LocalStorage,
        create_savepoint,
        plan_from_edges,
    )
    from checkpointing.coordination.lease import RunnerLease
    from checkpointing.protocol.listings import FileListing, listing_source
    from checkpointing.protocol.operations import EngineOperation
    from checkpointing.records.alerts import EpochAlert, record_alert
    from checkpointing.records.backfill_lineages import (
        Promotion,
        new_origin,
        record_origin,
        record_promotion,
    )
    from checkpointing.views.listing import list_epochs
    from tests.support.helpers import ack_task

    root = tmp_path / "ckpt"
    st = LocalStorage(root)
    c = Coordinator(st, "p", CheckpointConfig(lease_seconds=30))
    plan = plan_from_edges({"ingest": [], "stats": ["ingest"]}, {"stats"})
    day = {"start": "2013-01-02T00:00:00+00:00", "end": "2013-01-02T00:00:00+00:00"}
    b = c.begin_epoch(plan, "scheduled__2013-01-02", data_interval=day, owner="flights_daily",
                      input_range={"logical_date": "2013-01-02"})
    with RunnerLease(c, b.epoch_id):
        ack_task(c, b.epoch_id, "ingest", files={"bronze": b"abc"}, tmp=tmp_path)
        c.record_operation(b.epoch_id, EngineOperation(
            "stats", 1, "state:stats", "spark-connect", "0b6e4a9c-6f1d-4c55-9a4e-2f1c3d9b8e71",
            "6ba3a0fc-5ecc-49ff-ac81-79827450d110", "2013-01-02T00:05:03.120Z",
            user_id="airflow", observations=("5d1f0c52",)))
        c.pin_listing(b.epoch_id, listing_source("file:///data/", "raw/flights/"),
                      FileListing("raw/flights/", ("raw/flights/2013-01-02.csv",), "ingest",
                                  1, "2013-01-03T00:01:12.403Z"))
        ack_task(c, b.epoch_id, "stats", attempt=2, files={"stats": b"def"},
                 outputs={"gold": b"ghi"}, tmp=tmp_path)
        lease = json.loads(st.read(c.layout.lease(b.epoch_id))[0])
    c.complete(b.epoch_id)
    create_savepoint(c, "after-day1", b.epoch_id)
    b2 = c.begin_epoch(plan, "scheduled__2013-01-03")
    c.decline(b2.epoch_id, "ingest", 1, "validation failed")
    meta = c.abort(b2.epoch_id, "declined", "task ingest declined", declined_by="ingest")
    record_alert(st, c.layout, EpochAlert.from_abort("p", meta, c.barrier(b2.epoch_id)))
    record_origin(st, c.layout, new_origin("backfill-1", "2013-01-03", "2013-01-04", 0.0,
                                           from_savepoint="after-day1", publish_at="2013-01-04",
                                           requested_by="admin", promote=True))
    record_promotion(st, c.layout, Promotion("backfill-1", 9, True, 1, "2013-01-04",
                                             "2013-01-02", "2013-01-05T00:00:00.000Z"))
    import time

    stale = Coordinator(st, "p", CheckpointConfig(max_epoch_age_seconds=1),
                        clock=lambda: time.time() + 10)
    assert stale.records.stale_alert() is not None
    from checkpointing.coordination.staleness import StaleResolved, record_resolved

    assert record_resolved(st, c.layout, StaleResolved("p", "main", 1, 3,
                                                       "2013-01-04T00:05:00.000Z",
                                                       "2013-01-04T00:06:00.000Z"))
    list_epochs(c, per_task=True)
    out: dict[str, list[dict]] = {"ckpt.lease": [lease]}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not {"shared", "state", "staging", ".ckpt-locks"} & set(path.parts):
            doc = json.loads(path.read_bytes())
            out.setdefault(doc["format"], []).append(doc)
    return out


def decoders(tmp_path: Path) -> dict[str, Callable[[bytes], object]]:
    """The library's reader of each document that readers parse (the others are listed)."""
    from checkpointing import LocalStorage
    from checkpointing.coordination.lease import lease_ttl
    from checkpointing.coordination.staleness import CODEC as STALE
    from checkpointing.coordination.staleness import RESOLVED_CODEC
    from checkpointing.protocol.acknowledgement import Acknowledgement
    from checkpointing.protocol.barrier import Barrier
    from checkpointing.protocol.epoch_metadata import EpochMetadata
    from checkpointing.protocol.history import FailureRecord
    from checkpointing.protocol.listings import LISTING
    from checkpointing.protocol.operations import OPERATION
    from checkpointing.protocol.registry import Registry
    from checkpointing.records.alerts import EpochAlert
    from checkpointing.records.backfill_lineages import LineageOrigin, Promotion
    from checkpointing.records.savepoints import read_savepoint
    from checkpointing.records.two_phase_publish import Manifest
    from checkpointing.views.summary import decode_summary

    st = LocalStorage(tmp_path / "decode")

    def savepoint(data: bytes) -> object:
        st.write(Layout("p").savepoint("sp"), data)
        return read_savepoint(st, Layout("p"), "sp")

    by_bytes = {"ckpt.registry": Registry, "ckpt.barrier": Barrier,
                "ckpt.ack": Acknowledgement, "ckpt.epoch-metadata": EpochMetadata,
                "ckpt.alert": EpochAlert, "ckpt.lineage": LineageOrigin,
                "ckpt.promotion": Promotion, "ckpt.failure": FailureRecord,
                "ckpt.manifest": Manifest}
    out = {fmt: (lambda data, cls=cls: cls.from_bytes(data, "doc")) for fmt, cls in
           by_bytes.items()}
    out["ckpt.savepoint"] = savepoint
    out["ckpt.epoch-summary"] = lambda data: decode_summary(data, "doc")
    out["ckpt.lease"] = lambda data: lease_ttl(data, "doc")
    out["ckpt.operation"] = lambda data: OPERATION.decode(data, "doc")
    out["ckpt.listing"] = lambda data: LISTING.decode(data, "doc")
    out["ckpt.stale-alert"] = lambda data: STALE.decode(data, "doc")
    out["ckpt.stale-resolved"] = lambda data: RESOLVED_CODEC.decode(data, "doc")
    return out


def test_every_document_matches_its_field_table_and_example(tmp_path):
    spec, written = spec_documents(), written_documents(tmp_path)
    assert set(spec) == set(written), "documents without a section, or sections unwritten"
    for fmt, docs in written.items():
        table = spec[fmt]["tables"][0]
        keys = set().union(*(set(d) for d in docs)) - {"format", "protocol_version"}
        assert keys == set(table), f"{fmt}: written {sorted(keys)}, table {sorted(table)}"
        for d in docs:
            missing = [f for f, req in table.items() if req == "yes" and f not in d]
            assert not missing, f"{fmt}: required {missing} not written"
        example = spec[fmt]["example"]
        assert example["format"] == fmt and example["protocol_version"] == PROTOCOL_VERSION
        shown = set(example) - {"format", "protocol_version"}
        assert shown <= set(table), f"{fmt}: example fields {sorted(shown - set(table))}"
        assert {f for f, req in table.items() if req == "yes"} <= shown, fmt
    # The state handle inside an acknowledgement has its own table.
    handle_table = spec["ckpt.ack"]["tables"][1]
    handles = [d["state_handle"] for d in written["ckpt.ack"]]
    assert set().union(*(set(h) for h in handles)) == set(handle_table)


def test_every_reader_refuses_a_document_without_a_required_field(tmp_path):
    from checkpointing.errors import MalformedDocument

    spec, written, read = spec_documents(), written_documents(tmp_path), decoders(tmp_path)
    for fmt, decode_doc in read.items():
        table = spec[fmt]["tables"][0]
        doc = max(written[fmt], key=len)  # the fullest one written
        decode_doc(json.dumps(doc).encode())
        for field_name, req in table.items():
            if field_name not in doc:
                continue
            without = json.dumps({k: v for k, v in doc.items() if k != field_name}).encode()
            if req == "yes" or (req == "one" and doc[field_name] is not None):
                with pytest.raises(MalformedDocument):
                    decode_doc(without)
            else:
                decode_doc(without)  # optional (or the unset one of a pair): a default


def test_one_codec_per_document_and_errors_name_the_document(tmp_path):
    """Every document of section 5 is read and written by exactly one Codec (the savepoint
    embeds the barrier's and the acknowledgement's); a field of the wrong shape is a
    one-line MalformedDocument naming the document and its key."""
    import importlib
    import pkgutil

    import checkpointing
    from checkpointing.errors import MalformedDocument
    from checkpointing.protocol.codec import Codec

    codecs: dict[str, list[Codec]] = {}
    for mod in pkgutil.walk_packages(checkpointing.__path__, "checkpointing."):
        m = importlib.import_module(mod.name)
        for value in vars(m).values():
            if isinstance(value, Codec) and value not in codecs.get(value.format, []):
                codecs.setdefault(value.format, []).append(value)
    assert set(codecs) == set(spec_documents())
    assert all(len(c) == 1 for c in codecs.values()), codecs
    written, spec = written_documents(tmp_path), spec_documents()
    for fmt, (codec,) in codecs.items():
        table = spec[fmt]["tables"][0]
        assert set(codec.required) == {f for f, req in table.items() if req == "yes"}, fmt
        doc = max(written[fmt], key=len)
        codec.decode(json.dumps(doc).encode(), "k")
        bad = {**doc, codec.required[0]: {"not": "this"}}
        try:
            codec.decode(json.dumps(bad).encode(), "s3://b/k")
        except MalformedDocument as exc:
            assert str(exc).startswith(f"malformed {codec.name} at s3://b/k") or \
                "s3://b/k" in str(exc), exc
            assert "\n" not in str(exc)
