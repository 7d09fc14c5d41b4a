"""The rows of an `a2e-host export` (JSON Lines), for the tests of export and import on either
backend."""

from __future__ import annotations

import json

__all__ = ["jsonl", "sorted_rows"]


def jsonl(data: bytes) -> list[dict]:
    """The JSON object of each non-blank line of `data`."""
    return [json.loads(line) for line in data.splitlines() if line.strip()]


def sorted_rows(rows: list[dict]) -> list[dict]:
    """`rows` by namespace, tier, owner and key (two exports compare whatever their order)."""
    return sorted(rows, key=lambda r: (r["namespace"], r["tier"], r["owner"],
                                       json.dumps(r["key"], sort_keys=True)))
