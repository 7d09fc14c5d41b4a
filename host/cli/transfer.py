"""The export file format: JSON Lines, one entry an object, shared by `export` and `import`.

    {"namespace": "ns", "tier": "episodic", "owner": "a1", "agent": "a1", "key": {"k": 1},
     "content": "hello", "tags": ["t"], "source": "", "score": 1.0, "ttl": 0,
     "created_at": 1700000000.0, "updated_at": 1700000000.0}

and, for an entry that has them, `valid_from` / `valid_until` (when its fact holds, Unix
seconds; absent: open on that side).

`key` and `content` are the entry's JSON values as stored; `owner` is the agent for episodic
entries and "" for semantic ones; `agent` the agent that last wrote it; timestamps are Unix
seconds. Embeddings are never exported (they are derived and rebuilt). Schema evolution: a new
field gets a default, so older files keep importing; unknown fields are ignored.
"""

from __future__ import annotations

from typing import Literal

import msgspec
from msgspec import UNSET, UnsetType

from protocol.keys import canonical_key

__all__ = ["ExportedEntry", "IMPORT_AGENT", "decode_line", "encode_line"]

IMPORT_AGENT = "a2e-host-import"  # writer recorded for a semantic entry whose file names none


class ExportedEntry(msgspec.Struct, kw_only=True):
    """One line of an export file."""

    namespace: str
    tier: Literal["episodic", "semantic"]
    owner: str = ""
    agent: str = ""
    key: msgspec.Raw
    content: msgspec.Raw
    tags: list[str] | msgspec.Raw = []
    source: str = ""
    score: float = 1.0
    ttl: int = 0
    created_at: float | None = None
    updated_at: float | None = None
    # the time extension: absent from a line for an entry without them (UNSET is never written)
    valid_from: float | UnsetType | None = UNSET
    valid_until: float | UnsetType | None = UNSET

    def writer(self) -> str:
        """The agent to write the entry as: the owner of an episodic entry, else `agent`."""
        if self.tier == "episodic":
            return self.owner or self.agent or IMPORT_AGENT
        return self.agent or IMPORT_AGENT

    def canonical_key(self) -> bytes:
        """The key in canonical form. Raises `ValueError` unless a non-empty JSON object."""
        return canonical_key(msgspec.json.decode(self.key))


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(ExportedEntry)

encode_line = _encoder.encode


def decode_line(line: bytes) -> ExportedEntry:
    """One export line as an `ExportedEntry`. Raises `ValueError` naming what is wrong."""
    try:
        entry = _decoder.decode(line)
    except (msgspec.ValidationError, msgspec.DecodeError) as err:
        raise ValueError(str(err)) from None
    if not entry.namespace:
        raise ValueError("namespace must not be empty")
    return entry
