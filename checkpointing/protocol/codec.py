"""One codec for the protocol's documents (docs/PROTOCOL.md section 5).

Each document type is a ``Codec``: its format tag, its required fields (the ``req = yes``
rows of its field table), and a function building the typed value from the fields. Every
reader then fails the same way: a document that is not JSON, of another format or major
version, or without a required field is refused by ``documents.decode``; one whose fields
have the wrong shape raises ``MalformedDocument`` naming the document and its key, never a
``KeyError`` or ``TypeError`` from deep inside a reader.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from checkpointing.errors import MalformedDocument
from checkpointing.json_types import JsonObject
from checkpointing.protocol.documents import decode, encode

T = TypeVar("T")

#: What a reader may raise on fields of the wrong shape (a missing optional key, a string
#: where a number belongs, a list where an object does).
SHAPE_ERRORS = (KeyError, TypeError, ValueError, AttributeError)


@dataclass(frozen=True)
class Codec(Generic[T]):
    """A document type: ``format`` tag, ``name`` used in errors, ``required`` fields, and
    ``build(fields, key)`` making the typed value (it may raise any of SHAPE_ERRORS)."""

    format: str
    name: str
    required: tuple[str, ...]
    build: Callable[[JsonObject, str], T]

    def encode(self, body: JsonObject) -> bytes:
        """The document's bytes at the current protocol version."""
        return encode(self.format, body)

    def decode(self, data: bytes, key: str) -> T:
        """The typed value of the document stored at ``key``; MalformedDocument (or
        UnsupportedVersion) with one line naming ``key`` when it is not one."""
        return self.parse(decode(data, self.format, key, self.required), key)

    def parse(self, fields: JsonObject, key: str) -> T:
        """The typed value of fields already parsed (a document embedded in another, as a
        savepoint embeds its barrier and acknowledgements)."""
        if not isinstance(fields, dict):
            raise MalformedDocument(f"malformed {self.name} at {key}: expected an object")
        missing = [f for f in self.required if f not in fields]
        if missing:
            raise MalformedDocument(f"malformed {self.name} at {key}: missing field(s) "
                                    f"{', '.join(missing)}")
        try:
            return self.build(fields, key)
        except MalformedDocument:
            raise
        except SHAPE_ERRORS as exc:
            raise MalformedDocument(f"malformed {self.name} at {key}: {exc!r}") from None
