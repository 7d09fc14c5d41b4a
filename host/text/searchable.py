"""What of an entry is searchable: its content's text, plus its tags and key values.

For a string content, the string; for JSON content, every string and number in it and the
object member names (a `{"language": "python"}` entry is found by "language" and "python").
Tags and the key's values are appended so that an entry tagged `preferences` matches the query
"preferences". Of a structured tag `prefix:value` (`type:procedural`, `level:general`) only the
value is indexed: the prefix names a facet, and would otherwise make every such entry match
queries like "type hints".
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["searchable_text", "stored_text"]

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
