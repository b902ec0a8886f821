"""How many Spark jobs and actions each task attempt ran, from a Spark UI's REST API.

The runtime tags every action of an attempt with :func:`spark_jobs.runtime.job_tag`; a
Spark Connect server prefixes user tags (``..._Tag_<tag>``) and adds one tag per operation
(``..._Operation_<id>``): an *action* is one operation (a count, a collect, a write), a
*job* one Spark job (an action may run several: a write with a shuffle, an adaptive
re-plan)."""

from __future__ import annotations

import json
import re
import urllib.request
from collections import defaultdict
from typing import Any

_OPERATION = re.compile(r"_Operation_([0-9a-f-]+)$")


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.load(r)


def jobs_by_tag(ui_url: str, prefix: str = "ckpt.") -> dict[str, dict[str, Any]]:
    """``{tag: {"jobs": n, "actions": m, "seconds": s}}`` for every runtime tag (those
    starting with ``prefix``) of the application the UI at ``ui_url`` serves; ``seconds``
    is the jobs' summed duration (overlapping jobs count twice)."""
    from datetime import datetime

    app = _get(f"{ui_url}/api/v1/applications")[0]["id"]
    acc: dict[str, dict[str, Any]] = defaultdict(lambda: {"jobs": 0, "ops": set(),
                                                           "seconds": 0.0})
    for job in _get(f"{ui_url}/api/v1/applications/{app}/jobs"):
        tags = job.get("jobTags") or []
        ops = {m.group(1) for t in tags if (m := _OPERATION.search(t))}
        for t in tags:
            name = t.rsplit("_Tag_", 1)[-1] if "_Tag_" in t else t
            if name.startswith(prefix):
                a = acc[name]
                a["jobs"] += 1
                a["ops"] |= ops
                if job.get("submissionTime") and job.get("completionTime"):
                    fmt = "%Y-%m-%dT%H:%M:%S.%fGMT"
                    a["seconds"] += (datetime.strptime(job["completionTime"], fmt) -
                                     datetime.strptime(job["submissionTime"], fmt)
                                     ).total_seconds()
    return {t: {"jobs": a["jobs"], "actions": len(a["ops"]) or a["jobs"],
                "seconds": round(a["seconds"], 2)} for t, a in sorted(acc.items())}


def per_task(counts: dict[str, dict[str, Any]], pipeline_id: str
             ) -> dict[str, dict[str, list[Any]]]:
    """The tags' figures grouped by task: ``{task: {"jobs": [...], "actions": [...]}}``
    (one entry per epoch and attempt)."""
    out: dict[str, dict[str, list[Any]]] = {}
    pat = re.compile(rf"^ckpt\.{re.escape(pipeline_id)}\.(.+)\.e\d+\.a\d+$")
    for tag, c in counts.items():
        if m := pat.match(tag):
            d = out.setdefault(m.group(1), {})
            for k, v in c.items():
                d.setdefault(k, []).append(v)
    return out
