"""The tutorial's blocks as a test runs them, and its install step (shared by the package
tier and the tutorial's own test: building and installing the wheel takes minutes)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IGNORE = shutil.ignore_patterns(".venv", ".tools", ".git", "node_modules", "__pycache__",
                                ".demo", ".cluster", "*.egg-info", "build", "dist",
                                "spark-warehouse", ".pytest_cache", ".ruff_cache")


def tutorial_block(first: str, tmp: Path | None = None, **put: str) -> str:
    """The tutorial's block starting with ``first``, its /tmp/tutorial moved into ``tmp``
    and the clone's interpreter put for ``.venv/bin/python`` (a copy of the tree has no
    .venv); each ``old=new`` of ``put`` replaced too."""
    from tests.system.test_readme_commands import _block

    text = _block("docs/tutorial.md", first).replace(".venv/bin/python", sys.executable)
    if tmp is not None:
        text = text.replace("/tmp/tutorial", str(tmp))
    for old, new in put.items():
        text = text.replace(old, new)
    return text


def install_the_wheel(tmp: Path) -> Path:
    """The tutorial's install block, as written, in a copy of the clone: the standard build
    front-end builds the sdist and the wheel; a fresh environment gets the wheel with its
    worker extras, Airflow and the readers, under constraints.txt. Returns the tutorial's
    /tmp/tutorial (``tmp``), its environment in ``venv/``."""
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=IGNORE)
    script = tutorial_block(".venv/bin/python -m build", tmp)
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=src,
                       capture_output=True, text=True, timeout=2400)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert next((src / "dist").glob("dag_checkpoints-*.whl"))
    assert next((src / "dist").glob("dag_checkpoints-*.tar.gz"))
    return tmp
