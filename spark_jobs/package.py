"""Builds the zip that spark-submit ships to a cluster (--py-files)."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build_jobs_zip(dest: str | Path) -> Path:
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as z:
        for pkg in ("checkpointing", "spark_jobs"):
            for f in sorted((ROOT / pkg).rglob("*.py")):
                z.write(f, f.relative_to(ROOT).as_posix())
    return dest


if __name__ == "__main__":
    print(build_jobs_zip(sys.argv[1] if len(sys.argv) > 1 else ROOT / "build/ckpt_jobs.zip"))
