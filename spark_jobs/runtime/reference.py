"""Jobs are referenced, not registered: ``"package.module:function"`` names any importable
job, so a user's own jobs run under the checkpoint contract without editing this project."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from typing import Any, cast

_REF = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


class JobReferenceError(ValueError):
    """A job reference that does not name an importable callable (one line, named)."""


def job_reference(job: str | Callable[..., Any]) -> str:
    """The ``module:qualname`` reference of a job given by reference or as a callable."""
    if isinstance(job, str):
        if not _REF.match(job):
            raise JobReferenceError(f"job reference {job!r} is not 'package.module:function'")
        return job
    module, name = getattr(job, "__module__", None), getattr(job, "__qualname__", None)
    if not module or not name or "<" in name:
        raise JobReferenceError(f"job {job!r} is not a module-level function: reference it as "
                                "'package.module:function' so that workers can import it")
    return f"{module}:{name}"


def resolve_job(job: str | Callable[..., Any]) -> Callable[..., Any]:
    """The callable a reference names (a callable is returned as it is)."""
    if callable(job):
        return job
    ref = job_reference(job)
    module_name, _, attr = ref.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise JobReferenceError(f"job {ref}: cannot import {module_name!r} ({exc})") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise JobReferenceError(f"job {ref}: {module_name!r} has no {attr!r}") from None
    if not callable(obj):
        raise JobReferenceError(f"job {ref} is not callable")
    return cast(Callable[..., Any], obj)


def named_job(job: Callable[..., Any], name: str, module: str) -> Callable[..., Any]:
    """Name a job made by a factory after the module-level name it is bound to, so that
    its reference (``module:name``) imports it: ``route_stats = named_job(job,
    "route_stats", __name__)``."""
    job.__name__ = job.__qualname__ = name
    job.__module__ = module
    return job
