"""The type of a decoded JSON object, named once.

Protocol documents, state handle metadata and job metrics are JSON objects: decoded, their
values are whatever JSON holds, checked where they are read (each document's codec names
the document and key of a value of the wrong shape). The alias says which dictionaries are
such objects; the values stay untyped, as ``json.loads`` returns them.
"""

from __future__ import annotations

from typing import Any, TypeAlias

#: a JSON object as ``json.loads`` returns it
JsonObject: TypeAlias = dict[str, Any]
