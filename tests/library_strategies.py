"""Hypothesis strategies for the library's model (shared by its property tests)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from hypothesis import strategies as st

from host.library import Memory, MemoryImportance, MemoryType

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)

offsets = st.builds(
    lambda s: timezone(timedelta(seconds=s)), st.integers(-86399, 86399)
) | st.just(UTC)


def aware_datetimes(min_year: int = 1, max_year: int = 9999) -> st.SearchStrategy[datetime]:
    """Timezone-aware datetimes (fixed UTC offsets, down to microseconds) in a year range."""
    return st.datetimes(
        min_value=datetime(min_year, 1, 2), max_value=datetime(max_year, 12, 30), timezones=offsets
    )


@st.composite
def windows(draw: st.DrawFn, min_year: int = 1, max_year: int = 9999
            ) -> dict[str, datetime | None]:
    """A memory's bounds: neither, either or both (`valid_until` after `valid_from`)."""
    bound = st.none() | aware_datetimes(min_year, max_year)
    start, end = draw(bound), draw(bound)
    if start is not None and end is not None:
        if start == end:
            end = None
        elif end < start:
            start, end = end, start
    return {"valid_from": start, "valid_until": end}


def memories(min_year: int = 1, max_year: int = 9999) -> st.SearchStrategy[Memory]:
    """Any valid `Memory` (with a window or without)."""
    return st.builds(
        lambda window, **fields: Memory(**fields, **window),
        window=windows(min_year, max_year),
        id=st.text(min_size=1),
        content=st.text(),
        memory_type=st.sampled_from(list(MemoryType)),
        importance=st.sampled_from(list(MemoryImportance)),
        created_at=aware_datetimes(min_year, max_year),
        last_accessed=aware_datetimes(min_year, max_year),
        metadata=st.dictionaries(st.text(), json_values, max_size=5),
    )
