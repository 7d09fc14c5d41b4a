"""What the client-vector tests share: a space (`SPACE`, `DIMS` dimensions), a brute-force
`Model` of what was stored and what a retrieve by vector must return, `put_vectors` (stores
and notes entries), `check_retrieves` (every retrieve shape against the model), one session
per agent (`vector_sessions`) and a host config without an embedder (`vector_config`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from host.app import Host
from host.client import MemoryClient
from host.search.client_vectors import unit_rows
from support.hosts import make_config, url_of

__all__ = ["DIMS", "SPACE", "Model", "check_retrieves", "put_vectors", "random_vectors",
           "retrieve_args", "vector_config", "vector_sessions"]

DIMS = 16
SPACE = "s"


@dataclass
class Model:
    """What the test stored: key -> (tier, owner, unit vectors or None, tags, t, expiry)."""

    entries: dict[int, tuple[str, str, np.ndarray | None, list[str], int, float | None]] = \
        field(default_factory=dict)

    def expected(self, agent: str, q: list[float], now: float, limit: int = 10,
                 offset: int = 0, tags: tuple[str, ...] = (), t: int | None = None,
                 min_score: float = 0.0, tier: str = "") -> list[tuple[int, float]]:
        """(key, similarity) of the page the retrieve must return, by brute force."""
        qv = unit_rows([q])[0].astype(np.float64)
        scored = []
        for k, (etier, owner, vecs, etags, et, exp) in self.entries.items():
            if vecs is None or (exp is not None and exp <= now):
                continue
            if etier == "episodic" and owner != agent or tier and etier != tier:
                continue
            if any(x not in etags for x in tags) or t is not None and et != t:
                continue
            s = float(np.max(vecs.astype(np.float64) @ qv))
            if min_score > 0 and s < min_score:
                continue
            scored.append((s, k))
        scored.sort(reverse=True)
        return [(k, s) for s, k in scored[offset:offset + limit]]


def random_vectors(rng: np.random.Generator) -> list[list[float]]:
    """One to three random (not unit) vectors of `DIMS` dimensions."""
    return rng.standard_normal((int(rng.integers(1, 4)), DIMS)).tolist()


async def put_vectors(c: MemoryClient, model: Model, agent: str, rng: np.random.Generator,
               keys: range, tier: str, now: float, vectors: bool = True) -> None:
    """Store `keys` as `agent`, every third with a TTL of 100 s, and note them in `model`."""
    batch = []
    for k in keys:
        vecs = random_vectors(rng) if vectors else None
        tags = ["even"] if k % 2 == 0 else []
        ttl = 100 if k % 3 == 0 else 0
        e: dict[str, Any] = {"key": {"k": k}, "content": {"t": k % 3}, "tier": tier,
                             "tags": tags, "ttl": ttl}
        if vecs is not None:
            e["vectors"], e["vector_space"] = vecs, SPACE
        batch.append(e)
        model.entries[k] = (tier, agent, None if vecs is None else unit_rows(vecs), tags, k % 3,
                            now + ttl if ttl else None)
    reply = await c.store(batch)
    assert reply.errors == []


def retrieve_args(q: list[float], kw: dict[str, Any]) -> dict[str, Any]:
    """The arguments of a retrieve by `q` of the shape `kw` (`Model.expected`'s keywords:
    limit, offset, tags, t, min_score, tier)."""
    args: dict[str, Any] = {"vector": q, "vector_space": SPACE, "limit": kw.get("limit", 10),
                            "offset": kw.get("offset", 0)}
    if "tags" in kw:
        args["tags"] = list(kw["tags"])
    if "t" in kw:
        args["filter"] = {"t": kw["t"]}
    if "min_score" in kw:
        args["min_score"] = kw["min_score"]
    if "tier" in kw:
        args["tier"] = kw["tier"]
    return args


async def check_retrieves(host: Host, clients: dict[str, MemoryClient], model: Model,
                 rng: np.random.Generator, queries: int = 4) -> None:
    """Every retrieve shape answers as the brute force does, for each agent."""
    now = host.clock()
    for _ in range(queries):
        q = rng.standard_normal(DIMS).tolist()
        for agent, c in clients.items():
            for kw in ({}, {"limit": 7, "offset": 5}, {"tags": ("even",)}, {"t": 1},
                       {"min_score": 0.2, "limit": 50}, {"tier": "episodic"},
                       {"limit": 200}):
                args = retrieve_args(q, kw)
                got = await c.retrieve(**args)
                want = model.expected(agent, q, now, **kw)
                assert [e["key"]["k"] for e in got.entries] == [k for k, _ in want], (agent, kw)
                assert np.allclose([e["relevance"] for e in got.entries],
                                   [s for _, s in want], atol=1e-5)
                if 0 < len(want) < args["limit"]:  # every match seen: the total is exact
                    assert got.total == args["offset"] + len(want)
                for e in got.entries:
                    tier, owner = model.entries[e["key"]["k"]][:2]
                    assert tier == "semantic" or owner == agent  # never another's episodic


@asynccontextmanager
async def vector_sessions(host: Host, agents: tuple[str, ...] = ("a1", "a2"), ns: str = "ns"
                   ) -> AsyncIterator[dict[str, MemoryClient]]:
    """A client a agent, each with a session of `ns`; closed after."""
    clients = {}
    try:
        for a in agents:
            clients[a] = await MemoryClient.connect(url_of(host))
            await clients[a].init(ns, {"agent": a})
        yield clients
    finally:
        for c in clients.values():
            await c.close()


def vector_config(db: Path | str, **search: Any) -> Any:
    """A host's config on `db` with no embedder of its own (the clients bring vectors)."""
    return make_config(db, search={"embedder": "none", **search})
