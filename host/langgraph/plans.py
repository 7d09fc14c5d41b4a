"""What a batch of LangGraph ops becomes on the wire: `Planner` builds and checks every
request of a batch before any is sent (frame sizes included): runs of puts are `memory/store`
requests cut by size (and one `memory/forget` for the deletions), runs of gets one
`memory/retrieve` by keys, each search a retrieve with the store extensions (`filter`,
`key_prefix`, `offset`, `query` or `vector`, `refresh_ttl`; with a query, a second, plain one
fills the page as LangGraph's stores do), each namespace listing one `memory/paths`. Each
request goes with what its reply does (`Plan`); `host.langgraph.session` sends them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import msgspec
from langchain_core.embeddings import Embeddings
from langgraph.store.base import (
    GetOp,
    IndexConfig,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    ensure_embeddings,
    tokenize_path,
)

from host.langgraph import mapping
from protocol.codec import encode, new_id, now
from protocol.messages import (
    VERSION,
    MemoryForgetRequest,
    MemoryPathsRequest,
    MemoryRetrieveRequest,
    MemoryStoreRequest,
)

Tier = Literal["episodic", "semantic"]
MAX_KEYS = 500  # keys of one retrieve or forget (the host's default allows 1000)
MAX_ENTRIES = 500  # entries of one store request (the host's default allows 1000)
MAX_FRAME_BYTES = 1024 * 1024  # the host's default `limits.max_frame_bytes`
_ENVELOPE_SLACK = 64  # bytes a store request's envelope may vary by (its `ts`)
FILL_MAX = 1000  # the host's default `limits.max_limit`: a query search fills pages up to it


class A2EStoreError(RuntimeError):
    """The host refused part of a batch (a quota, an entry over the size limit, ...)."""


@dataclass(frozen=True, slots=True)
class Index:
    """LangGraph's `index` config, resolved: dims, the embeddings, the tokenized fields."""

    dims: int
    embeddings: Embeddings
    fields: list[tuple[str, str | list[str]]]

    @classmethod
    def of(cls, index: IndexConfig | None) -> Index | None:
        if not index:
            return None
        named: Any = index.get("fields") or dict(index).get("text_fields") or ["$"]
        fields: list[str] = list(named)
        return cls(int(index["dims"]), ensure_embeddings(index.get("embed")),
                   [(f, tokenize_path(f) if f != "$" else "$") for f in fields])


Done = Callable[[Any], None]
Plan = list[tuple[Any, Done]]  # a batch's requests, each with what its reply does


class Planner:
    """A batch's requests for one store's settings: its tier, index, TTL config, `min_score`
    and frame limit."""

    def __init__(self, tier: Tier, index: Index | None, ttl: TTLConfig | None,
                 min_score: float | None, max_frame_bytes: int) -> None:
        self.tier = tier
        self.index = index
        self.ttl = ttl
        self.min_score = min_score
        self.max_frame_bytes = max_frame_bytes
        self.space = mapping.space_of(index.dims) if index is not None else ""

    async def plan(self, mid: str, ops: Sequence[Op], results: list[Result],
                   refresh: list[int]) -> Plan:
        """The requests of `ops` for memory session `mid`, each with what its reply does (it
        fills `results`); the searches whose items' TTL restarts after the replies go to
        `refresh`. Every request is built and checked here: a bad value or filter, or a
        request over the frame limit, raises before anything is sent."""
        plan: Plan = []
        i = 0
        while i < len(ops):
            op = ops[i]
            j = i + 1
            if isinstance(op, (PutOp, GetOp)):  # a run of the same kind goes together
                while j < len(ops) and type(ops[j]) is type(op):
                    j += 1
            if isinstance(op, PutOp):
                plan += await self._puts(mid, ops[i:j])  # type: ignore[arg-type]
            elif isinstance(op, GetOp):
                plan += self._gets(mid, [(k, ops[k]) for k in range(i, j)], results)  # type: ignore[misc]
            elif isinstance(op, SearchOp):
                plan += await self._search(mid, i, op, results, refresh)
            elif isinstance(op, ListNamespacesOp):
                plan += self._paths(mid, i, op, results)
            else:
                raise ValueError(f"Unknown operation type: {type(op)}")
            i = j
        return plan

    def _refresh(self, asked: bool) -> bool:
        """Whether a read refreshes TTLs: asked for, and the TTL config's `refresh_on_read`
        is set (as LangGraph's SQLite store decides)."""
        return bool(asked and self.ttl and self.ttl.get("refresh_on_read", False))

    def _fits(self, msg: Any) -> Any:
        """`msg`, or `A2EStoreError` when its frame would be over `max_frame_bytes`."""
        n = len(encode(msg))
        if n > self.max_frame_bytes:
            raise A2EStoreError(
                f"a {type(msg).__name__} of {n:,} bytes is over the frame limit of"
                f" {self.max_frame_bytes:,} (max_frame_bytes); nothing of this batch was sent")
        return msg

    def _retrieve(self, mid: str, **fields: Any) -> MemoryRetrieveRequest:
        return self._fits(MemoryRetrieveRequest(  # type: ignore[no-any-return]
            id=new_id(), version=VERSION, ts=now(), memory_id=mid, tier=self.tier, **fields))

    async def _puts(self, mid: str, ops: list[PutOp]) -> Plan:
        last: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for op in ops:  # LangGraph's rule: the last put of a key wins
            last[(tuple(op.namespace), op.key)] = op
        kept = list(last.values())
        for op in kept:
            if op.value is not None:
                mapping.check_value(op.value)
        vectors = await self._embed(kept)
        entries: list[tuple[PutOp, bytes]] = []
        deletes: list[dict[str, Any]] = []
        for op, vecs in zip(kept, vectors):
            key = mapping.entry_key(op.namespace, op.key)
            if op.value is None:
                deletes.append(key)
                continue
            e: dict[str, Any] = {"key": key, "content": dict(op.value), "tier": self.tier,
                                 "ttl": mapping.ttl_seconds(op.ttl)}
            if vecs:
                e["vectors"], e["vector_space"] = vecs, self.space
            entries.append((op, encode(e)))
        plan: Plan = [(MemoryStoreRequest(
            id=new_id(), version=VERSION, ts=now(), memory_id=mid,
            entries=[msgspec.Raw(raw) for raw in chunk]), _check_stored)
            for chunk in self._chunks(mid, entries)]
        for k in range(0, len(deletes), MAX_KEYS):
            plan.append((self._fits(MemoryForgetRequest(
                id=new_id(), version=VERSION, ts=now(), memory_id=mid,
                keys=deletes[k:k + MAX_KEYS], tier=self.tier)), _ignore))
        return plan

    def _chunks(self, mid: str, entries: list[tuple[PutOp, bytes]]) -> list[list[bytes]]:
        """The encoded entries in store requests of at most `MAX_ENTRIES` entries and
        `max_frame_bytes` bytes (sizes exact, but the envelope's few varying bytes); a put that
        fits no request is `A2EStoreError`, before anything is sent."""
        base = len(encode(MemoryStoreRequest(id=new_id(), version=VERSION, ts=now(),
                                             memory_id=mid))) + _ENVELOPE_SLACK
        out: list[list[bytes]] = []
        chunk: list[bytes] = []
        size = base
        for op, raw in entries:
            n = len(raw) + 1  # and its comma
            if base + n > self.max_frame_bytes:
                raise A2EStoreError(_too_big(op, base + n, self.max_frame_bytes))
            if chunk and (len(chunk) >= MAX_ENTRIES or size + n > self.max_frame_bytes):
                out.append(chunk)
                chunk, size = [], base
            chunk.append(raw)
            size += n
        if chunk:
            out.append(chunk)
        return out

    async def _embed(self, ops: list[PutOp]) -> list[list[list[float]]]:
        """Each put's vectors (one a text its index embeds), in one call of the embeddings."""
        if self.index is None:
            return [[] for _ in ops]
        texts = [mapping.texts_to_embed(op, self.index.fields) for op in ops]
        flat = [t for ts in texts for t in ts]
        if not flat:
            return [[] for _ in ops]
        got = await self.index.embeddings.aembed_documents(flat)
        out, n = [], 0
        for ts in texts:
            out.append(mapping.unit_vectors(got[n:n + len(ts)]) if ts else [])
            n += len(ts)
        return out

    def _gets(self, mid: str, ops: list[tuple[int, GetOp]], results: list[Result]) -> Plan:
        plan: Plan = []
        by_refresh: dict[bool, list[tuple[int, GetOp]]] = {}
        for i, op in ops:
            by_refresh.setdefault(self._refresh(op.refresh_ttl), []).append((i, op))
        for refresh, group in by_refresh.items():
            for k in range(0, len(group), MAX_KEYS):
                part = group[k:k + MAX_KEYS]
                keys = [mapping.get_key(op) for _, op in part]

                def done(reply: Any, part: list[tuple[int, GetOp]] = part) -> None:
                    found = {(it.namespace, it.key): it for it in _items(reply)}
                    for i, op in part:
                        results[i] = found.get((tuple(op.namespace), op.key))

                plan.append((self._retrieve(mid, keys=keys, limit=len(keys),
                                            refresh_ttl=refresh), done))
        return plan

    async def _search(self, mid: str, i: int, op: SearchOp, results: list[Result],
                      refresh: list[int]) -> Plan:
        """A search's requests. Without a query one read, newest first. With one (and no
        `min_score`), LangGraph's semantics: `limit` items whenever the prefix and filter hold
        that many, those the search ranks first (scored), then the others (score None), as
        LangGraph's InMemoryStore fills a page with the items it has no vectors of: the ranked
        read and a plain read of the first `offset + limit`, pipelined, merged here."""
        if op.limit <= 0:  # LangGraph's stores: nothing
            results[i] = []
            return []
        fields = mapping.search_fields(op)
        scored = dict(fields)
        if op.query and self.index is not None:
            vec = await self.index.embeddings.aembed_query(op.query)
            scored["vector"] = mapping.unit_vectors([vec])[0]
            scored["vector_space"] = self.space
        elif op.query:
            scored["query"] = op.query
        asked = self._refresh(op.refresh_ttl)

        def page(reply: Any) -> None:
            results[i] = _items(reply, search=True)

        start, end = fields["offset"], fields["offset"] + fields["limit"]
        if not op.query:
            return [(self._retrieve(mid, refresh_ttl=asked, **fields), page)]
        if self.min_score is not None or end > FILL_MAX:
            return [(self._retrieve(mid, refresh_ttl=asked, min_score=self.min_score or 0.0,
                                    **scored), page)]
        ranked: list[SearchItem] = []

        def first(reply: Any) -> None:
            ranked[:] = _items(reply, search=True)

        def rest(reply: Any) -> None:
            seen = {(it.namespace, it.key) for it in ranked}
            more = [it for it in _items(reply, search=True) if (it.namespace, it.key) not in seen]
            results[i] = (ranked + more)[start:end]

        if asked:
            refresh.append(i)
        return [(self._retrieve(mid, **{**scored, "offset": 0, "limit": end}), first),
                (self._retrieve(mid, **{**fields, "offset": 0, "limit": end}), rest)]

    def refreshes(self, mid: str, searches: list[int], results: list[Result]) -> Plan:
        """Reads by key that restart the TTL of the items the `searches` returned."""
        items: list[SearchItem] = [it for i in searches for it in results[i] or []]  # type: ignore[misc,union-attr]
        keys = [mapping.entry_key(it.namespace, it.key) for it in items]
        parts = [keys[k:k + MAX_KEYS] for k in range(0, len(keys), MAX_KEYS)]
        return [(self._retrieve(mid, keys=part, limit=len(part), refresh_ttl=True), _ignore)
                for part in parts]

    def _paths(self, mid: str, i: int, op: ListNamespacesOp, results: list[Result]) -> Plan:
        if op.limit <= 0:  # LangGraph's stores: nothing
            results[i] = []
            return []

        def done(reply: Any) -> None:
            results[i] = [tuple(p) for p in reply.paths if p]

        return [(self._fits(MemoryPathsRequest(
            id=new_id(), version=VERSION, ts=now(), memory_id=mid, tier=self.tier,
            **mapping.paths_fields(op))), done)]


def _ignore(reply: Any) -> None:
    return None


def _check_stored(reply: Any) -> None:
    if reply.errors:
        raise A2EStoreError("; ".join(reply.errors))


def _items(reply: Any, search: bool = False) -> list[Any]:
    """The items of a retrieve reply, entries other clients wrote left out."""
    return [it for e in reply.entries if (it := mapping.item_of(e, search)) is not None]


def _too_big(op: PutOp, size: int, limit: int) -> str:
    value = len(encode(op.value))
    return (f"the put of {tuple(op.namespace)!r}, {op.key!r} would be a frame of {size:,} bytes"
            f" ({value:,} of value, the rest its vectors), over the host's frame limit of"
            f" {limit:,} (max_frame_bytes, the host's limits.max_frame_bytes): index fewer"
            " fields (the put's index=[...] or index=False, the store's index fields), or"
            " raise both limits. Nothing of this batch was sent")
