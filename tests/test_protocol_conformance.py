"""The spec is the contract: every key the library's Layout produces matches a line of the
key tree in docs/PROTOCOL.md section 4, and every line of that tree is produced by the
Layout. A renamed document (counter.json once drifted from the spec's name) fails here."""

from __future__ import annotations

import re
from pathlib import Path

from checkpointing.documents import PROTOCOL_VERSION
from checkpointing.layout import Layout

SPEC = Path(__file__).resolve().parent.parent / "docs" / "PROTOCOL.md"
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
        "lease": lay.lease(7), "alert": lay.alert(7), "failure": lay.failure_record(7),
        "state": lay.state_prefix(7, "t1", 2) + "part-0.parquet",
        "staging": lay.staging_prefix(7, "t1", 2) + "part-0.parquet",
        "shared": lay.shared(SHA), "savepoint": lay.savepoint("sp1"),
        "manifest": lay.manifest, "origin": lay.lineage_origin("backfill-1"),
        "promotion": lay.lineage_promotion("backfill-1"), "summary": lay.epoch_summary(7),
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

    from checkpointing.stats import EpochStats, TaskStats

    text = SPEC.read_text()
    section = text[text.index("### 5.7"):text.index("### 5.8")]
    listed = set(re.findall(r"[a-z_]+", section[section.index("`stats`"):
                                                section.index("A listing serves")]))
    assert {f.name for f in fields(EpochStats)} <= listed
    assert {f.name for f in fields(TaskStats)} <= listed
