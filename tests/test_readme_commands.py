"""Every command the README shows works on a clean clone: each `make` target it names
exists (make -n), and the quick paths run as written (the flights pipeline's shell lines,
with its /tmp paths moved into a temporary directory)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_every_make_target_in_the_readme_exists():
    targets = sorted(set(re.findall(r"(?:^|`)make ([a-z][a-z0-9_-]*)", README, re.M)))
    assert {"demo", "test"} <= set(targets), targets
    for t in targets:
        r = subprocess.run(["make", "-n", t], cwd=ROOT, capture_output=True, text=True)
        assert r.returncode == 0, f"make {t}: {r.stderr.strip()}"


@pytest.mark.slow
def test_flights_quick_path_runs_as_written(tmp_path):
    section = README[README.index("## The flights pipeline"):]
    block = section.split("```")[1]
    lines = [x.strip() for x in block.replace("\\\n", " ").strip().splitlines()]
    assert len(lines) == 3, lines
    bindir = Path(sys.executable).parent
    for line in lines:
        line = re.sub(r"\[[^\]]*\]", "", line)  # optional arguments in brackets
        line = line.replace("/tmp/", f"{tmp_path}/").replace("python -m",
                                                            f"{sys.executable} -m")
        line = re.sub(r"^ckpt ", f"{bindir}/ckpt ", line.strip())
        r = subprocess.run(line, shell=True, cwd=ROOT, capture_output=True, text=True,
                           timeout=600, env={"PATH": f"{bindir}:/usr/bin:/bin",
                                             "SPARK_LOCAL_IP": "127.0.0.1",
                                             "HOME": str(tmp_path)})
        assert r.returncode == 0, f"{line}\n{r.stderr[-2000:]}"
    assert "completed" in r.stdout, r.stdout


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


@pytest.mark.parametrize("doc", ["README.md", "docs/JOBS.md"])
def test_every_python_block_is_python(doc):
    """The README's and JOBS.md's Python blocks parse (most are fragments of a job or a
    DAG file, run for real by the examples they quote: docs/examples/energy_daily.py by
    tests/test_user_pipeline.py, dags/aircraft_utilisation.py by test_aircraft_dag.py);
    an ellipsis stands for the user's own code."""
    import ast
    import textwrap

    blocks = _python_blocks((ROOT / doc).read_text())
    assert blocks, doc
    for block in blocks:
        ast.parse(textwrap.dedent(block))


def test_jobs_md_reading_recipe_runs(tmp_path):
    """JOBS.md's "Reading a published output from outside", run as written against a Delta
    table this project committed (its location put in)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from checkpointing import Coordinator, LocalStorage, SnapshotWriter
    from checkpointing.barrier import TaskPlan
    from checkpointing.tables import TableSpec

    c = Coordinator(LocalStorage(tmp_path / "ckpt"), "p")
    loc = f"{tmp_path}/tables/energy_daily_usage"
    for n in (1, 2):
        b = c.begin_epoch({"t": TaskPlan((), True)}, f"r{n}")
        c.register_attempt(b.epoch_id, "t", 1)
        w = SnapshotWriter(c.storage, c.layout, b.epoch_id, "t", 1)
        path = tmp_path / f"part-{n}.parquet"
        pq.write_table(pa.table({"site": ["north"], "kwh": [float(n)]}), path)
        w.stage_table_output("energy_daily_usage", TableSpec(f"file://{loc}", "overwrite"),
                             [path])
        c.acknowledge(b.epoch_id, "t", 1, w.handle())
        c.complete(b.epoch_id)
    text = (ROOT / "docs/JOBS.md").read_text()
    block = text[text.index("### Reading a published output from outside"):]
    code = _python_blocks(block)[0].replace("s3://bucket/tables/energy_daily_usage", loc) \
        .replace("version=7", "version=1")  # epoch 1's version here
    lines = [ln.split("#")[0].strip() for ln in code.strip().splitlines()]
    scope: dict = {}
    exec(lines[0], scope)  # the import
    latest, earlier = (eval(ln, scope) for ln in lines[1:])  # noqa: S307 - our own doc
    assert latest["kwh"].tolist() == [2.0] and earlier["kwh"].tolist() == [1.0]
