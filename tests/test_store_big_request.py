"""A store request bigger than `STEP_BYTES` is checked a step at a time, the loop turning
between steps: its reply and what it stores are those of the same entries sent one a request
(a request that small is checked in one step), a bad entry's error in the same words at its
position, wherever it falls against the steps."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np

from host.client import MemoryClient
from host.memory.plugin import STEP_BYTES

DIMS = 384
COUNT = 250  # ~3.7 kB an entry: ~0.9 MB (under `max_frame_bytes`), several steps


def _entries() -> list[dict[str, Any]]:
    """`COUNT` entries with a client vector each (values of 6 decimals, as a client sends
    them), bad ones spread over the request: the first, either side of the first steps'
    ends, the middle and the last."""
    rng = np.random.default_rng(7)
    out: list[dict[str, Any]] = []
    for i in range(COUNT):
        v = [round(float(x), 6) for x in rng.standard_normal(DIMS)]
        out.append({"key": {"k": i}, "content": {"text": f"entry {i}", "n": i},
                    "tier": "episodic" if i % 3 else "semantic", "tags": [f"t{i % 4}"],
                    "vectors": [v], "vector_space": "sp"})
    del out[0]["tier"]  # missing field: the decoder's words
    out[36]["vectors"] = [out[36]["vectors"][0], [1.0, 2.0]]  # rows of different lengths
    out[37]["content"] = {"big": 10**400}  # JSON, but no double holds it
    out[38]["tier"] = "working"  # vectors on the working tier
    out[39] = {"key": {"k": 39}, "content": "kept in the session", "tier": "working"}
    out[76]["vectors"] = [[float("nan")] * DIMS]  # sent as null: the decoder's words
    out[77]["valid_from"], out[77]["valid_until"] = 20.0, 10.0  # an empty window
    out[150]["vector_space"] = "bad name"
    out[151]["tier"] = "nowhere"
    out[-1]["key"] = ["not", "an", "object"]
    return out


async def _stored(c: MemoryClient) -> list[tuple[Any, ...]]:
    found = await c.retrieve(limit=1000)
    return sorted((e["key"]["k"], e["content"], e["tier"], e["tags"]) for e in found.entries)


async def test_a_big_request_answers_as_its_entries_one_a_request(
    connect: Callable[..., Any],
) -> None:
    entries = _entries()
    sizes = [len(msgspec.json.encode(e)) for e in entries]
    assert sum(sizes) > 4 * STEP_BYTES and max(sizes) < STEP_BYTES  # several steps, and
    # an entry alone is one step
    big: MemoryClient = await connect()
    await big.init("big", {"agent": "a1"})
    one: MemoryClient = await connect()
    await one.init("one", {"agent": "a1"})

    reply = await big.store(entries)
    stored: list[Any] = []
    errors: list[str] = []
    for i, e in enumerate(entries):
        r = await one.store([e])
        stored += r.stored
        errors += [m.replace("entries[0]:", f"entries[{i}]:", 1) for m in r.errors]
    assert [m.split(":")[0] for m in errors] == [
        f"entries[{i}]" for i in (0, 36, 37, 38, 76, 77, 150, 151, COUNT - 1)]
    assert reply.errors == errors
    assert reply.stored == stored and len(stored) == COUNT - 9
    assert await _stored(big) == await _stored(one)
    q = np.random.default_rng(8).standard_normal(DIMS).tolist()
    near = [await c.retrieve(vector=q, vector_space="sp", limit=20) for c in (big, one)]
    assert [(e["key"], round(e["relevance"], 6)) for e in near[0].entries] == \
        [(e["key"], round(e["relevance"], 6)) for e in near[1].entries]
    assert len(near[0].entries) == 20
