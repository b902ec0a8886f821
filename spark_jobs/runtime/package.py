"""The zip that spark-submit ships with ``--py-files``: the checkpointing library, the job
runtime and the top-level package of each job (a user's own jobs included)."""

from __future__ import annotations

import importlib.util
import sys
import zipfile
from pathlib import Path

from .reference import job_reference

_OWN = ("checkpointing", "spark_jobs")


def _package_root(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not (spec.submodule_search_locations or spec.origin):
        raise ValueError(f"cannot find the package {name!r} to ship with spark-submit")
    if spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0])
    return Path(str(spec.origin))  # a single-module job


def build_jobs_zip(dest: str | Path, jobs: tuple[str, ...] = ()) -> Path:
    """Write the zip to ``dest``: our packages and the top-level package of each job
    reference in ``jobs``."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tops = list(_OWN) + sorted({job_reference(j).split(".")[0].split(":")[0] for j in jobs}
                               - set(_OWN))
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as z:
        for top in tops:
            root = _package_root(top)
            if root.is_file():
                z.write(root, root.name)
                continue
            for f in sorted(root.rglob("*")):
                if f.suffix in (".py", ".properties") and "__pycache__" not in f.parts:
                    z.write(f, (Path(top) / f.relative_to(root)).as_posix())
    return dest


if __name__ == "__main__":
    print(build_jobs_zip(sys.argv[1] if len(sys.argv) > 1 else "build/ckpt_jobs.zip",
                         tuple(sys.argv[2:])))
