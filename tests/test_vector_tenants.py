"""The vector indexes under hostile tenants (SQLite): a space of one wide vector is charged
what it holds, not a thousand rows; one namespace filling the memory budget with many spaces
evicts its own indexes, never another namespace's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from conftest import make_config, running_host, url_of

from host.app import Host
from host.client import MemoryClient
from host.search.client_vectors import MAX_DIMS, ROWS_PER_ENTRY, space_key


def _config(db: Path, **search: Any) -> Any:
    return make_config(db, search={"embedder": "none", **search})


async def _client(host: Host, ns: str) -> MemoryClient:
    c = await MemoryClient.connect(url_of(host))
    await c.init(ns, {"agent": "a1"})
    return c


async def _put(c: MemoryClient, space: str, vectors: list[np.ndarray]) -> None:
    """Store one entry a vector set of `vectors` into `space`."""
    reply = await c.store([{"key": {"k": i}, "content": {"i": i}, "tier": "semantic",
                            "vectors": v.tolist(), "vector_space": space}
                           for i, v in enumerate(vectors)])
    assert reply.errors == []


async def test_a_space_of_one_wide_vector_is_charged_its_row_not_a_thousand(
    tmp_path: Path,
) -> None:
    """A space holding one vector of the widest dimension adds about that vector's bytes to
    the indexes' figure (what `a2e_vector_index_bytes` shows), not a matrix of 1,024 rows."""
    rng = np.random.default_rng(1)
    async with running_host(_config(tmp_path / "one.db")) as host:
        c = await _client(host, "ns")
        try:
            await _put(c, "wide", [rng.standard_normal((1, MAX_DIMS))])
            got = await c.retrieve(vector=rng.standard_normal(MAX_DIMS).tolist(),
                                   vector_space="wide")
            assert len(got.entries) == 1
        finally:
            await c.close()
        vectors: Any = host.search.vectors
        assert vectors.keys() == [space_key("ns", "wide")]
        assert vectors.stats()["nbytes"] < 4 * MAX_DIMS + 4096


async def test_a_namespace_filling_the_budget_with_spaces_evicts_its_own(tmp_path: Path) -> None:
    """A victim's space stays loaded (never read again) while another namespace creates and
    queries 40 spaces that together pass the budget: the attacker's own spaces leave, each
    of its retrieves still answers right, the indexes stay within the budget."""
    dims = 256
    rng = np.random.default_rng(2)
    budget = 2_000_000  # the victim ~0.25 MB; each attacker space ~0.07 MB, 40 of them ~2.9 MB
    async with running_host(_config(tmp_path / "share.db", vector_memory_bytes=budget)) as host:
        vectors: Any = host.search.vectors
        victim = await _client(host, "victim")
        attacker = await _client(host, "attacker")
        try:
            mine = rng.standard_normal((200, 1, dims))
            await _put(victim, "v", list(mine))
            q = mine[7, 0].tolist()
            assert (await victim.retrieve(vector=q, vector_space="v")).entries[0]["key"] == {"k": 7}
            key = space_key("victim", "v")
            loads = vectors.stats()["loads"]
            for i in range(40):
                theirs = rng.standard_normal((1, ROWS_PER_ENTRY, dims))
                await _put(attacker, f"s{i}", list(theirs))
                got = await attacker.retrieve(vector=theirs[0, 3].tolist(), vector_space=f"s{i}")
                assert got.entries[0]["key"] == {"k": 0}
                assert key in vectors.keys(), i
                assert vectors.nbytes <= budget
            assert vectors.stats()["evictions"] > 0
            assert (await victim.retrieve(vector=q, vector_space="v")).entries[0]["key"] == {"k": 7}
            assert vectors.stats()["loads"] == loads + 40  # the attacker's alone
        finally:
            await victim.close()
            await attacker.close()
