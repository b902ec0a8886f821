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
