"""The PostgreSQL store's key index (`a2e_entries_key_ns`): a `key_prefix` (or a paths prefix) on the
key member `ns` reads an index range, not the whole namespace (`host/store/key_index.py`).

The range is of the member's jsonb text (`, ` between elements) in code-point order
(`COLLATE "C"`, as the index); the prefix's own conditions (`host/store/postgres/filters.py`)
still decide which entries match.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from host.store.filters import KeyPrefix
from host.store.key_index import INDEXED_MEMBER, prefix_bounds
from host.store.postgres.filters import KEY

__all__ = ["prefix_range"]

_TEXT = f"(({KEY} -> '{INDEXED_MEMBER}')::text COLLATE \"C\")"
_ARRAY = f"jsonb_typeof({KEY} -> '{INDEXED_MEMBER}') = 'array'"  # the index's WHERE


def prefix_range(prefixes: Sequence[KeyPrefix], p: Callable[[Any], str]) -> str:
    """The SQL (" AND ..." or "") of the index range of `prefixes`, if any; `p` takes each
    parameter and gives its placeholder."""
    bounds = prefix_bounds(prefixes, ", ")
    if bounds is None:
        return ""
    low, high = bounds
    return f" AND {_ARRAY} AND {_TEXT} >= {p(low)}::text AND {_TEXT} < {p(high)}::text"
