"""What of an entry is searchable: its content's text, plus its tags and key values.

For a string content, the string; for JSON content, every string and number in it and the
object member names (a `{"language": "python"}` entry is found by "language" and "python").
Tags and the key's values are appended so that an entry tagged `preferences` matches the query
"preferences". Of a structured tag `prefix:value` (`type:procedural`, `level:general`) only the
value is indexed: the prefix names a facet, and would otherwise make every such entry match
queries like "type hints".
"""

from __future__ import annotations

import threading
from sys import getsizeof
from typing import Any

import msgspec

from host.text.keyword import stems

__all__ = ["EntryTerms", "searchable_text", "stored_text"]

_decode = msgspec.json.decode


def _walk(value: Any, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            out.append(str(k))
            _walk(v, out)
    elif isinstance(value, list):
        for v in value:
            _walk(v, out)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        out.append(str(value))


def searchable_text(content: Any, tags: list[str] | tuple[str, ...] = (), key: Any = None) -> str:
    """The text indexed for keyword (and vector) search of one entry."""
    parts: list[str] = []
    _walk(content, parts)
    parts.extend(t.rpartition(":")[2] for t in tags)
    if isinstance(key, dict):
        for v in key.values():
            _walk(v, parts)
    return "\n".join(parts)


def stored_text(
    content: bytes | str, tags: list[str] | tuple[str, ...], key: bytes | str
) -> str:
    """`searchable_text` of an entry as the stores hold it: content and key as JSON text."""
    return searchable_text(_decode(content), tags, _decode(key))


class EntryTerms:
    """The `stems` of entries' `stored_text`, kept for the entries read again: a query's
    candidates are largely the last query's, and decoding, tokenising and stemming their text
    was most of the ranking's CPU. Held by what the entry is (content, tags, key), so an entry
    that changed is read anew. Bounded: at most `max_bytes`, counted as the objects an entry
    holds (`sys.getsizeof` of its content, key, tags, the set of stems and each stem, as if
    no other entry shared them, plus `ENTRY_BYTES` for its key's tuples and its slot), the
    whole emptied when that is reached; an entry over a tenth of it is not kept. Thread-safe.
    (Counting the text's characters twice and 64 bytes a stem held about half of what a short
    entry holds.)"""

    ENTRY_BYTES = 256  # the (content, tags, key) tuple, the tags' tuple, the dict's slot

    def __init__(self, max_bytes: int = 16 << 20) -> None:
        self.max_bytes = max_bytes
        self._held: dict[tuple[bytes | str, tuple[str, ...], bytes | str], frozenset[str]] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, content: bytes | str, tags: list[str] | tuple[str, ...],
            key: bytes | str) -> frozenset[str]:
        """The stems of the entry's searchable text."""
        k = (content, tuple(tags), key)
        got = self._held.get(k)
        if got is not None:
            return got
        held = stems(stored_text(content, tags, key))
        size = (getsizeof(content) + getsizeof(key) + sum(map(getsizeof, tags))
                + getsizeof(held) + sum(map(getsizeof, held))
                + self.ENTRY_BYTES + 8 * len(tags))
        if size * 10 <= self.max_bytes:
            with self._lock:
                if self._bytes + size > self.max_bytes:
                    self._held.clear()
                    self._bytes = 0
                self._held[k] = held
                self._bytes += size
        return held

    def __len__(self) -> int:
        return len(self._held)
