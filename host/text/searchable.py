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
    that changed is read anew. Bounded: at most `max_bytes`, counted as the content, tags and
    key held (twice: their stems' characters too) plus `STEM_BYTES` a stem, the whole emptied
    when that is reached; an entry over a tenth of it is not kept. Thread-safe."""

    STEM_BYTES = 64  # a stem's slot in its set, counted generously (the strings are shared)

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
        # the stems' own characters are at most the text's: counted as the text twice over
        size = (2 * (len(content) + len(key) + sum(map(len, tags)))
                + self.STEM_BYTES * len(held))
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
