"""When a stored fact holds: an entry's `valid_from` / `valid_until` and a retrieve's `as_of`
(docs/protocol.md, "Time of a fact").

Each is an instant, given as epoch seconds (a number) or as ISO-8601 text with a zone
(`2026-03-01T09:00:00Z`, `2026-03-01T10:00:00+01:00`); a date or time without a zone says no
instant and is refused. `instant` reads one, `window` an entry's pair (`valid_until` after
`valid_from`). Both raise ValueError, whose text is the error a client reads. Pure: no clock.
"""

from __future__ import annotations

import math
from datetime import datetime

__all__ = ["EARLIEST", "LATEST", "MAX_TEXT", "instant", "valid_at", "window"]

# the instants a field may name: years 1 to 9999, the years ISO-8601 text can write, so both
# forms cover the same span (and every one is an exact double)
EARLIEST = -62135596800.0  # 0001-01-01T00:00:00Z
LATEST = 253402300799.0  # 9999-12-31T23:59:59Z
MAX_TEXT = 64  # characters of an ISO-8601 instant ("2026-03-01T09:00:00.123456+01:00": 32)


def instant(value: float | str, field: str) -> float:
    """`value` as epoch seconds: a finite number within [EARLIEST, LATEST], or ISO-8601 text
    with a zone (`Z` or an offset). ValueError naming `field` otherwise."""
    if isinstance(value, str):
        if len(value) > MAX_TEXT:
            raise ValueError(f"{field}: at most {MAX_TEXT} characters")
        try:
            at = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(f"{field}: not an ISO-8601 date-time: {value!r}") from None
        if at.tzinfo is None or at.utcoffset() is None:
            raise ValueError(f"{field}: an ISO-8601 date-time needs a zone (Z or +hh:mm):"
                             f" {value!r}")
        try:
            seconds = at.timestamp()
        except (OverflowError, ValueError):  # an offset that takes year 1 or 9999 past its end
            raise ValueError(f"{field}: out of the years 1 to 9999") from None
    else:
        seconds = float(value)
        if not math.isfinite(seconds):
            raise ValueError(f"{field}: not a finite number")
    if not EARLIEST <= seconds <= LATEST:
        raise ValueError(f"{field}: out of the years 1 to 9999")
    return seconds


def window(valid_from: float | str | None, valid_until: float | str | None
           ) -> tuple[float | None, float | None]:
    """An entry's validity as epoch seconds (None: open on that side). ValueError when a
    bound is malformed or `valid_until` is not after `valid_from`."""
    start = None if valid_from is None else instant(valid_from, "valid_from")
    end = None if valid_until is None else instant(valid_until, "valid_until")
    if start is not None and end is not None and end <= start:
        raise ValueError("valid_until must be after valid_from")
    return start, end


def valid_at(valid_from: float | None, valid_until: float | None, as_of: float) -> bool:
    """True when a fact valid over [valid_from, valid_until) holds at `as_of` (the rule the
    stores' SQL applies too)."""
    return ((valid_from is None or valid_from <= as_of)
            and (valid_until is None or as_of < valid_until))
