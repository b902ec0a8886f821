"""Table formats: outputs committed once per completed epoch, upstream tables read as
incremental inputs (PROTOCOL 6.12-6.14).
"""

from typing import Any


def __getattr__(name: str) -> Any:
    """``from checkpointing.tables import TableSpec``, as the flat layout spelled it (this
    package was the module :mod:`checkpointing.tables.spec`): still served, with a
    DeprecationWarning, until the next minor release."""
    import warnings

    from checkpointing.tables import spec

    if name.startswith("__") or not hasattr(spec, name):
        raise AttributeError(f"module 'checkpointing.tables' has no attribute {name!r}")
    warnings.warn(f"checkpointing.tables.{name} moved to checkpointing.tables.spec.{name}; "
                  "the old name goes in the next minor release", DeprecationWarning,
                  stacklevel=2)
    return getattr(spec, name)
