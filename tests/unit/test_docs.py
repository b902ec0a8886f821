"""The documentation cannot rot unnoticed: the README stays short, the README and docs/
speak of the project and not of how it was made (history goes to CHANGELOG.md), and every
link between them resolves."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "bench" / "README.md",
         *sorted((ROOT / "docs").rglob("*.md"))]  # CHANGELOG.md holds the history
#: how the project was made: sessions of work, issue numbers, commit ids. The word
#: "session" is not used at all (a Spark one is a `SparkSession`, a Spark Connect one its
#: client), so that no reader wonders which kind is meant.
ISSUE = re.compile(r"\bissues? #?\d+\b", re.I)
#: run histories: a user page states a result, its method and the command, not the runs
#: before it or what was tried (those go to CHANGELOG.md or bench/results/)
RUNS = re.compile(r"\b(earlier (full )?run|on older code|tried and not kept|tried:|times "
                  r"slower than|the run before)\b", re.I)
HISTORY = [re.compile(r"\bsessions?\b", re.I), ISSUE, RUNS]
#: a hex word of commit-id length with digits and letters (a longer digest is one word of
#: 64 and does not match): examples use readable placeholders instead of random hex ids
COMMIT = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")


def test_the_readme_is_short():
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= 200, f"README.md has {lines} lines (at most 200: the rest belongs in docs/)"


def test_docs_speak_of_the_project_not_of_its_making():
    found = []
    for page in PAGES:
        for n, line in enumerate(page.read_text().splitlines(), 1):
            for rx in [*HISTORY, COMMIT]:
                m = rx.search(line)
                if m:
                    found.append(f"{page.relative_to(ROOT)}:{n}: {m.group(0)!r}")
    assert not found, "history belongs in CHANGELOG.md:\n" + "\n".join(found)


#: the code, its tests and scripts: their comments and docstrings (some of which the API
#: reference renders) say why, not which piece of work brought them
CODE = [p for d in ("checkpointing", "spark_jobs", "plugins", "dags", "bench", "scripts",
                    "tests", "docker")
        for p in sorted((ROOT / d).rglob("*")) if p.suffix in (".py", ".sh", ".md", ".toml")
        and p.name != "test_docs.py"]


def test_code_names_no_issue_numbers():
    found = [f"{p.relative_to(ROOT)}:{n}: {m.group(0)!r}" for p in CODE
             for n, line in enumerate(p.read_text().splitlines(), 1)
             if (m := ISSUE.search(line))]
    assert CODE and not found, "history belongs in CHANGELOG.md:\n" + "\n".join(found)


#: pages docs/hooks.py generates into the site at build time (the strict build checks
#: links to them)
GENERATED = {"docs/results.md", "docs/cli.md", "docs/rest.md", "docs/bench.md",
             "docs/changelog.md"}


def test_every_internal_link_resolves():
    broken = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            path = target.split("#", 1)[0]
            if not path or "://" in path or path.startswith("mailto:"):
                continue
            where = (page.parent / path).resolve()
            if not where.exists() and str(where.relative_to(ROOT)) not in GENERATED:
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, broken


def test_the_checks_can_fail(tmp_path):
    """The patterns catch what they are for, and leave `SparkSession` and digests alone."""
    assert any(rx.search("measured this session") for rx in HISTORY)
    assert any(rx.search("see issue 27") for rx in HISTORY)
    assert COMMIT.search("fixed in b99203c") and COMMIT.search('"nonce": "dadafce64b65"')
    assert not any(rx.search("a `SparkSession` of its own") for rx in HISTORY)
    assert not COMMIT.search("ba7816bf" * 8) and not COMMIT.search("epochs/0000000001/")


def test_the_site_builds_strictly_with_the_pages_generated_from_the_code(tmp_path):
    """`make docs`: MkDocs fails on any warning (a broken link, a docstring it cannot
    read); the command-line and REST pages come from the parsers and the app, so every
    ckpt command and every route is on them."""
    import os
    import subprocess
    import sys

    from checkpointing.ckpt import COMMANDS

    site = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d",
                        str(site)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    cli = (site / "cli" / "index.html").read_text()
    assert all(f"ckpt {c}" in cli for c in COMMANDS), sorted(COMMANDS)
    assert "--jobs JOBS" in cli and "--job JOB" in cli  # the runtime's entry points
    rest = (site / "rest" / "index.html").read_text()
    for route in ("/ckpt/api/dags/{dag_id}/epochs", "/ckpt/api/dags/{dag_id}/backfills"):
        assert route in rest
    # each route's first paragraph whole, not its first line (which ended at a colon)
    assert "<code>damaged</code>), newest first" in rest
    assert "<code>/ckpt/openapi.json</code>" in rest and "/checkpoints/" not in rest
    # Sphinx roles in docstrings (:func:`x`) render as code, never as raw markup.
    raw = {str(p.relative_to(site)): m.group(0) for p in site.rglob("*.html")
           for m in [re.search(r":(func|class|meth|mod|attr|data|exc|obj):", p.read_text())]
           if m}
    assert not raw, raw
    # Every relative link of every built page leads to a page or file of the site (the
    # strict build passes links to files outside docs/, such as the examples).
    broken = []
    for page in site.rglob("*.html"):
        for href in re.findall(r'href="([^"#?]+)[^"]*"', page.read_text()):
            if "://" in href or href.startswith(("mailto:", "/", "data:")):
                continue
            target = (page.parent / href).resolve()
            if not (target.is_file() or (target / "index.html").is_file()):
                broken.append(f"{page.relative_to(site)} -> {href}")
    assert not broken, broken[:20]
    for example in ("clickstream", "energy_daily"):  # published as pages of their source
        assert "checkpoint_dag" in (site / f"example-{example}" / "index.html").read_text()
    api = (site / "api" / "checkpointing" / "index.html").read_text()
    assert "Coordinator" in api and "task_storage" in api  # from the docstrings
    provider = (site / "api" / "provider" / "index.html").read_text()
    for field in ("spark_connect_conn_id", "alerts.email_from", "daily_inputs"):
        assert f"<code>{field}</code>" in provider, field  # CheckpointSettings' fields
    results = (site / "results" / "index.html").read_text()  # charts from bench/results
    for chart in ("recovery", "epoch", "bytes", "tpch_daily"):
        assert f"charts/{chart}.svg" in results and \
            (site / "charts" / f"{chart}.svg").read_text().lstrip().startswith("<?xml")
    assert "make bench" in results and "cores" in results  # the command and the machine
    assert "tpch_deletion_day_ratio" in results  # the targets table, from bench/README.md
    home = (site / "index.html").read_text()
    assert 'href="tutorial/"' in home  # the README's docs/ links, as the site's pages


def test_the_constraints_file_is_the_tested_pins():
    """constraints.txt (the tutorial installs the wheel with it) is the pins of the
    requirements files, regenerated by scripts/constraints.py whenever they change."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("constraints", ROOT / "scripts/constraints.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert (ROOT / "constraints.txt").read_text() == mod.constraints(), \
        "constraints.txt is stale: run python scripts/constraints.py"
    assert "[" not in (ROOT / "constraints.txt").read_text()  # pip -c refuses extras


def test_the_readme_dag_is_the_tutorial_example():
    """The README shows docs/examples/clickstream.py, which the tutorial copies and runs
    (tests/package/test_wheel.py): the two cannot drift apart."""
    readme = (ROOT / "README.md").read_text()
    [block] = re.findall(r"```python\n(from datetime import datetime.*?)```", readme, re.S)
    example = (ROOT / "docs/examples/clickstream.py").read_text()
    assert example.endswith(block), "README's DAG differs from docs/examples/clickstream.py"


def test_every_environment_variable_is_in_the_reference():
    """Each CKPT_ variable the code reads is documented in docs/reference.md."""
    read = set()
    for pkg in ("checkpointing", "plugins", "spark_jobs"):
        for f in (ROOT / pkg).rglob("*.py"):
            read |= set(re.findall(r"\bCKPT_[A-Z_]+[A-Z]\b", f.read_text()))
    documented = set(re.findall(r"\bCKPT_[A-Z_]+[A-Z]\b", (ROOT / "docs/reference.md").read_text()))
    assert read and not read - documented, f"not in docs/reference.md: {sorted(read - documented)}"


def test_the_reference_names_every_setting_and_every_ckpt_option():
    """docs/reference.md's tables hold every field of CheckpointConfig and
    CheckpointSettings (alert settings as ``alerts.<field>``), and its `ckpt` block every
    option of every command: a setting added to the code and not to the page fails."""
    import argparse
    from dataclasses import fields

    from dag_checkpoints import AlertSettings, CheckpointSettings

    from checkpointing import CheckpointConfig
    from checkpointing.ckpt import _parser

    text = (ROOT / "docs" / "reference.md").read_text()
    rows = set(re.findall(r"^\| `([a-z_.]+)` \|", text, re.M))
    wanted = {f.name for f in fields(CheckpointConfig)}
    wanted |= {f.name for f in fields(CheckpointSettings)} - {"config", "alerts"}
    wanted |= {f"alerts.{f.name}" for f in fields(AlertSettings)}
    assert not wanted - rows, sorted(wanted - rows)

    block = text[text.index("## The `ckpt` command"):]
    block = block[:block.index("\n```\n", block.index("```") + 3)]

    def options(parser: argparse.ArgumentParser) -> set[str]:
        found = set()
        for action in parser._actions:
            found.update(o for o in action.option_strings if o.startswith("--"))
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    found |= options(sub)
        return found - {"--help"}

    assert {o for o in options(_parser()) if o not in block} == set()
