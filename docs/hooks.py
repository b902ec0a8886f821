"""MkDocs hooks: the pages generated at build time, so the site never holds a copy made by
hand.

- ``index.md`` is the README, ``bench.md`` is bench/README.md (the benchmark keys),
  ``changelog.md`` is CHANGELOG.md; links between them are rewritten to the site's pages,
  and the benchmark result files the docs link to are published under ``results/``;
- ``cli.md`` is the help of ``ckpt`` and ``ckpt-airflow``, from their argument parsers;
- ``rest.md`` is the plugin's REST routes, from its FastAPI app's OpenAPI schema;
- ``results.md`` and its charts come from bench/results/*.json (docs/charts.py);
- versions (the protocol's, the package's) are read from the code wherever a page says
  ``{{ protocol_version }}`` or ``{{ package_version }}``.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "plugins"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

#: repository files shown as site pages: source -> page
MIRRORED = {"README.md": "index.md", "bench/README.md": "bench.md",
            "CHANGELOG.md": "changelog.md"}
#: result files the docs link to, published as they are
RESULTS = ("bench/results/drills.json", "bench/results/drills_run.json",
           "bench/results/drills-containers.json",
           "bench/results/drills-containers_run.json",
           "bench/results/faults.json", "bench/results/latest.json",
           "bench/results/drills-containers-minio.json",
           "bench/results/drills-containers-minio_run.json")
#: the example DAGs (docs/examples/, outside the site's pages), each published as a page
#: showing its source: a link to ``examples/<name>.py`` leads there
EXAMPLES = ("docs/examples/clickstream.py", "docs/examples/energy_daily.py")


def _site_link(target: str, page_src: str) -> str | None:
    """The site's link for a repository-relative link ``target`` written in ``page_src``
    (a docs page, or a mirrored file), or None when it needs no rewriting."""
    path, _, anchor = target.partition("#")
    if not path or "://" in path or path.startswith("mailto:"):
        return None
    mirrored = page_src in MIRRORED  # a repository file, else a page under docs/
    where = os.path.normpath(Path(page_src if mirrored else f"docs/{page_src}").parent / path)
    if where in MIRRORED:
        new = MIRRORED[where]
    elif where in RESULTS:
        new = "results/" + Path(where).name
    elif where in EXAMPLES:
        new = "example-" + Path(where).stem + ".md"
    elif where.startswith("docs/"):
        new = where[len("docs/"):]
    else:
        return None
    depth = 0 if mirrored else len(Path(page_src).parent.parts)
    return "../" * depth + new + (f"#{anchor}" if anchor else "")


def _rewrite_links(markdown: str, page_src: str) -> str:
    def repl(m: re.Match[str]) -> str:
        new = _site_link(m.group(2), page_src)
        return m.group(0) if new is None else f"{m.group(1)}({new})"

    return re.sub(r"(\]\s?)\(([^)\s]+)\)", repl, markdown)


def _cli_page() -> str:
    from dag_checkpoints.server.cli import _parser as airflow_parser

    from checkpointing.ckpt import _parser as ckpt_parser

    out = ["# Command-line reference", "",
           "Generated from the commands' argument parsers: what `--help` prints. `ckpt` "
           "and `ckpt-airflow` are installed with the package; the job runtime's entry "
           "points run with `python -m`.", ""]
    for name, parser in (("ckpt", ckpt_parser()), ("ckpt-airflow", airflow_parser())):
        out += [f"## `{name}`", "", "```text", parser.format_help().rstrip(), "```", ""]
        for action in parser._actions:  # argparse keeps its subcommands here only
            if isinstance(action, argparse._SubParsersAction):
                for sub, sp in action.choices.items():
                    out += [f"### `{name} {sub}`", "", "```text",
                            sp.format_help().rstrip(), "```", ""]
    # The job runtime's entry points build their parsers inside main(): ask them.
    for title, module in (("python -m spark_jobs.runtime (one task attempt)",
                           "spark_jobs.runtime"),
                          ("python -m spark_jobs.runtime.run_epoch (a whole epoch)",
                           "spark_jobs.runtime.run_epoch")):
        r = subprocess.run([sys.executable, "-m", module, "--help"],  # noqa: S603 - ours
                           capture_output=True,
                           text=True, timeout=120, cwd=ROOT)
        if r.returncode != 0:
            raise RuntimeError(f"{module} --help failed: {r.stderr[-500:]}")
        out += [f"## `{title.split(' (')[0]}`", "", title.split(" (")[1].rstrip(")") + ":",
                "", "```text", r.stdout.rstrip(), "```", ""]
    return "\n".join(out)


def _rest_page() -> str:
    os.environ.setdefault("AIRFLOW_HOME", str(ROOT / "site" / ".airflow"))
    # importing the plugin configures Airflow's logging: the build prints warnings only
    os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")
    logging.getLogger("dag_checkpoints").setLevel(logging.WARNING)
    from dag_checkpoints.server.api import app
    from dag_checkpoints.server.plugin import URL_PREFIX

    schema = app.openapi()
    out = ["# REST API", "",
           f"The plugin's routes, mounted by Airflow's api-server under `{URL_PREFIX}`, "
           f"generated from their OpenAPI schema (served as `{URL_PREFIX}/openapi.json`). "
           "Every route requires Airflow's authentication and the DAG's permission: reading "
           "for `GET`, editing for the others.", "",
           "| method | path | what it does |", "|---|---|---|"]
    for path, ops in schema["paths"].items():
        for method, op in ops.items():
            # a path is one word: it must not break across lines in a narrow column
            out.append(f"| `{method.upper()}` | <code style=\"white-space: nowrap\">"
                       f"{URL_PREFIX}{path}</code> | {_what(op)} |")
    return "\n".join(out) + "\n"


def _what(op: dict[str, Any]) -> str:
    """A route's description for a table cell: its docstring's first paragraph, whole
    (its lines joined), else its summary; a ``|`` escaped."""
    text = (op.get("description") or op.get("summary") or "").strip()
    first = " ".join(text.split("\n\n", 1)[0].split())
    return first.replace("|", "\\|")


def on_files(files: Files, config: Any) -> Files:
    for src, page in MIRRORED.items():
        text = _rewrite_links((ROOT / src).read_text(), src)
        files.append(File.generated(config, page, content=text))
    files.append(File.generated(config, "cli.md", content=_cli_page()))
    files.append(File.generated(config, "rest.md", content=_rest_page()))
    for example in EXAMPLES:
        name = Path(example).name
        files.append(File.generated(config, f"example-{Path(example).stem}.md", content=(
            f"# {name}\n\nThe example DAG `{example}`, as the repository holds it:\n\n"
            f"```python\n{(ROOT / example).read_text()}```\n")))
    import importlib.util

    # docs/charts.py, beside this file (MkDocs restores sys.path after loading hooks)
    spec = importlib.util.spec_from_file_location("ckpt_docs_charts",
                                                  Path(__file__).with_name("charts.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    page, charts = module.render()
    files.append(File.generated(config, "results.md", content=page))
    for name, svg in charts.items():
        files.append(File.generated(config, f"charts/{name}", content=svg))
    for res in RESULTS:
        if (ROOT / res).exists():
            files.append(File.generated(config, "results/" + Path(res).name,
                                        content=(ROOT / res).read_bytes()))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    from checkpointing.protocol.documents import PROTOCOL_VERSION

    try:
        from importlib.metadata import version

        package = version("dag-checkpoints")
    except Exception:  # noqa: BLE001 - not installed: the source tree's own
        package = "unreleased"
    if page.file.src_uri not in MIRRORED.values():
        markdown = _rewrite_links(markdown, page.file.src_uri)
    if "{{ compatibility }}" in markdown:
        markdown = markdown.replace("{{ compatibility }}", _compatibility())
    if "{{ spark_jars }}" in markdown:
        markdown = markdown.replace("{{ spark_jars }}", _spark_jars())
    if "{{ checkpoint_settings_fields }}" in markdown:
        markdown = markdown.replace("{{ checkpoint_settings_fields }}", _settings_fields())
    return (markdown.replace("{{ protocol_version }}", PROTOCOL_VERSION)
            .replace("{{ package_version }}", package))


#: what the compatibility page lists of constraints.txt, and what each is for
TESTED = (("apache-airflow", "Airflow (scheduler, api-server, triggerer, workers)"),
          ("pyspark", "Spark (local mode, spark-submit, the Connect server)"),
          ("pyspark-client", "the Spark Connect client of a connect-mode worker"),
          ("apache-airflow-providers-apache-spark", "the Spark and Spark Connect connections"),
          ("apache-airflow-providers-amazon", "the AWS connection (S3)"),
          ("apache-airflow-providers-openlineage", "lineage events"),
          ("deltalake", "Delta tables: commits, table inputs (delta-rs)"),
          ("pyiceberg", "Iceberg tables: commits, table inputs"),
          ("boto3", "checkpoint storage on S3"),
          ("great-expectations", "expectations on table outputs"),
          ("duckdb", "reading tables in the tests and examples"))


def _compatibility() -> str:
    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)$",
                           (ROOT / "constraints.txt").read_text(), re.M))
    out = ["| package | version tested | used for |", "|---|---|---|"]
    out += [f"| `{name}` | {pins[name]} | {what} |" for name, what in TESTED]
    return "\n".join(out)


#: the jars scripts/install_spark_s3.sh puts on every Spark: its version variable, the
#: artifact (``{line}``: the Spark line), and what each is for
SPARK_JARS = (("HADOOP", "org.apache.hadoop:hadoop-aws", "S3A, of the Hadoop line pyspark bundles"),
              ("AWSSDK", "software.amazon.awssdk:bundle", "the AWS SDK S3A is built on"),
              ("AAL", "software.amazon.s3.analyticsaccelerator:analyticsaccelerator-s3",
               "S3A's read layer"),
              ("DELTA", "io.delta:delta-spark_{line}_2.13", "Delta tables in Spark"),
              ("DELTA", "io.delta:delta-storage", "Delta's storage layer"),
              ("ICEBERG", "org.apache.iceberg:iceberg-spark-runtime-{line}_2.13",
               "Iceberg tables and catalogs in Spark"),
              ("PGJDBC", "org.postgresql:postgresql",
               "Spark's metastore, an Iceberg catalog on PostgreSQL"),
              ("SQLITE", "org.xerial:sqlite-jdbc", "an embedded Iceberg catalog"))


def _spark_jars() -> str:
    """The Maven artifacts every Spark the project starts carries, at the versions
    scripts/install_spark_s3.sh pins."""
    pins = dict(re.findall(r"^([A-Z_]+)=(\S+)", (ROOT / "scripts" / "install_spark_s3.sh")
                           .read_text(), re.M))
    out = ["| artifact | version | used for |", "|---|---|---|"]
    out += [f"| `{art.format(line=pins['SPARK_LINE'])}` | {pins[var]} | {what} |"
            for var, art, what in SPARK_JARS]
    return "\n".join(out)


def _settings_fields() -> str:
    """CheckpointSettings' fields in the order the class declares them, each with its row
    of the reference's table (environment variable, default, meaning): one source."""
    from dataclasses import fields

    from dag_checkpoints import AlertSettings, CheckpointSettings

    rows = {}
    for line in (ROOT / "docs" / "reference.md").read_text().splitlines():
        m = re.match(r"^\| `([a-z_.]+)` \|(.*)\|$", line)
        if m:  # the reference's links are relative to docs/, this page's to docs/api/
            rows.setdefault(m.group(1), re.sub(r"\]\((?!https?:|#|\.\./)", "](../",
                                               m.group(2)))
    names = []
    for f in fields(CheckpointSettings):
        if f.name == "alerts":
            names += [f"alerts.{a.name}" for a in fields(AlertSettings)]
        elif f.name == "config":
            names.append("config")
        else:
            names.append(f.name)
    out = ["| field | environment variable | default | meaning |", "|---|---|---|---|"]
    for name in names:
        if name == "config":
            ref = "../reference.md#configuration-reference-checkpointconfig"
            out.append(f"| `config` | | `CheckpointConfig()` | the policies: "
                       f"[CheckpointConfig]({ref}) |")
        else:
            out.append(f"| `{name}` |{rows[name]}|")
    return "\n".join(out)


#: a Sphinx cross-reference role before the code it names (``:func:`pkg.f` ``), which
#: docstrings use and mkdocstrings leaves as text
_ROLE = re.compile(r":(?:func|class|meth|mod|attr|data|exc|obj):(?=<code>|`)")


def on_post_page(output: str, page: Any, config: Any) -> str:
    """Pages as HTML: a docstring's Sphinx roles dropped, the code they name kept."""
    return _ROLE.sub("", output)
