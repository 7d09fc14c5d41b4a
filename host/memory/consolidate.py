"""Consolidation on write (docs/protocol.md, "Consolidation on write"; docs/search.md,
"Judgement"): a store that asks for it keeps, skips or supersedes a near-duplicate of what the
namespace already holds.

A store's policy is its request's `consolidate`, else the namespace's configured one
(`consolidation.namespaces`), else `consolidation.policy` (`keep` unless configured):

- `keep` (the spec's behaviour): every entry stored. Nothing here runs: a store costs what it
  cost before consolidation existed.
- `skip`: an entry with a **near-duplicate** already stored (the collapse rule of
  `host.search.judgement`: cosine of the two vectors at least `DUPLICATE`, no conflicting
  number, word of time or name, neither saying the other changed) is not stored; the reply
  names the existing key and the similarity.
- `supersede`: the entry is stored, and the older entry it duplicates, or that it **updates**
  (the supersede rule: each other's nearest, cosine at least `SUPERSEDE`, the new one says
  it changed), is retired: deleted, its content kept in the history (`memory/history`, reason
  `superseded`, with the new key and the similarity).

Both read the time of a fact (`valid_from` / `valid_until`, docs/protocol.md "Time of a
fact"), at the instant of the store, by the rule of a read (`protocol.validity.valid_at`, as
the judgement's step 3): `mergeable`. Entries with the same bounds (none, or equal ones) merge
as above, whatever their time. With other bounds, `skip` stores the new entry (its bounds are
a told fact the stored one lacks, and a skip never changes what is stored), and `supersede`
retires the stored entry only when the new one holds at the store and the stored one has
begun by then: a current fact retires the ended one it updates (whose history version keeps
its bounds), a current saying with an end to come its unbounded saying; a record of the past
(its `valid_until` passed, its window ending before the stored one begins) or a fact still to
come never retires what holds, and a fact still to come is never retired. Without bounds every
decision is the one made before the bounds existed.

The new entry is compared with the stored entries of its own tier the session may read (the
same tenant's: its agent's episodic entries, the namespace's semantic ones; never another
key's working entries, never its own key), found by a search for its text (the query path:
keyword and vector candidates, read-your-writes included) and judged on the vectors the host
keeps for them against the new text's vector (the query embedder's). An entry stored with
client vectors only, and the other entries of the same request, are not compared. Each merge
is logged as a change of its own (op `consolidated`: both keys and the similarity), after the
store's `stored` change: a watch replays it, an operator audits it, and undoes a supersede by
storing the version `memory/history` returns under its key again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import msgspec
import numpy as np

from host.config import Config
from host.core.context import ConnectionContext
from host.memory.session import Session, sessions_of
from host.search import judgement
from host.search.engine import SearchEngine
from host.store.interface import EntryStore
from host.store.records import NewEntry, Query, Scope, StoredEntry
from protocol.errors import ErrorCode, ProtocolError
from protocol.messages import Consolidated
from protocol.validity import valid_at

__all__ = ["Consolidator", "Merge", "decide", "mergeable"]

_CANDIDATES = 20  # stored entries a new one is compared with, the best of its own search
_THRESHOLDS = judgement.Thresholds()  # the read-time judgement's


@dataclass(frozen=True, slots=True)
class Merge:
    """What consolidation decided for the entry at `index` of a store request."""

    index: int  # in the request's entries
    tier: str
    key: bytes  # the new entry's
    existing: bytes  # the stored entry's
    similarity: float
    action: str  # "skipped" or "superseded"

    def wire(self) -> Consolidated:
        """The reply's item."""
        return Consolidated(key=msgspec.Raw(self.key), action=self.action,
                            existing=msgspec.Raw(self.existing),
                            similarity=self.similarity)


Window = tuple[float | None, float | None]  # [valid_from, valid_until), None: open
_OPEN: Window = (None, None)


def mergeable(policy: str, new: Window, old: Window, now: float) -> bool:
    """Whether `policy` may merge a new entry valid over `new` with a stored one valid over
    `old`, at the write's instant `now` (the time of a fact, `protocol.validity`): always
    when the two have the same bounds (the same time told again, as entries without bounds);
    otherwise never for `skip` (the new bounds are a told fact the stored entry lacks), and
    for `supersede` only when the new entry holds at `now` and the stored one has begun by
    then (the present takes over from what it follows: a record of the past or a fact still
    to come never retires what holds now, and a fact still to come is never retired)."""
    if new == old:
        return True
    if policy != "supersede":
        return False
    return valid_at(new[0], new[1], now) and valid_at(old[0], None, now)


def decide(new_text: str, new_vec: np.ndarray, old_texts: Sequence[str], old_vecs: np.ndarray,
           policy: str, th: judgement.Thresholds = _THRESHOLDS, new_window: Window = _OPEN,
           old_windows: Sequence[Window] | None = None, now: float = 0.0
           ) -> tuple[int, float] | None:
    """The stored entry (index into `old_*`, similarity) that `policy` merges the new one with,
    if any: for `skip` and `supersede` the most similar near-duplicate (collapse rule), for
    `supersede` otherwise the entry the new one updates (the mutual nearest at `th.supersede`
    or more, the new text saying it changed). Each only when `mergeable` at `now` with the
    bounds of the two (`new_window`, `old_windows`; None: none has bounds)."""
    if not len(old_texts):
        return None

    def ok(j: int) -> bool:
        return old_windows is None or mergeable(policy, new_window, old_windows[j], now)

    sims = old_vecs @ new_vec
    order = np.argsort(-sims, kind="stable")
    for j in order.tolist():
        s = float(sims[j])
        if s < th.duplicate:
            break
        old = old_texts[j]
        if not (judgement.conflict(new_text, old) or judgement.says_change(new_text, old)
                or judgement.says_change(old, new_text)) and ok(j):
            return j, s
    if policy != "supersede":
        return None
    j = int(order[0])
    s = float(sims[j])
    if s < th.supersede or not judgement.says_change(new_text, old_texts[j]) or not ok(j):
        return None
    # each other's nearest: no other stored candidate is closer to the old entry than the new
    others = old_vecs @ old_vecs[j]
    others[j] = -np.inf
    if len(others) > 1 and float(others.max()) > s:
        return None
    return j, s


class Consolidator:
    """The write-time judgement of one memory plugin (see the module docstring)."""

    def __init__(self, config: Config, search: SearchEngine, store: EntryStore) -> None:
        self.cfg = config.consolidation
        self.search = search
        self.store = store

    def policy(self, asked: str, namespace: str, req_id: str) -> str:
        """The policy of a store: asked, else the namespace's, else the default. One that
        needs what this host lacks (an embedder) is refused when
        asked, and is `keep` when configured."""
        policy = asked or self.cfg.namespaces.get(namespace, self.cfg.policy)
        if policy == "keep" or self.able:
            return policy
        if asked:
            raise ProtocolError(ErrorCode.INVALID_MESSAGE,
                                f"consolidate {asked!r}: this host has no embedder to judge"
                                " near-duplicates with", req_id=req_id, field="consolidate")
        return "keep"

    @property
    def able(self) -> bool:
        """Whether this host can judge near-duplicates on write."""
        return self.search.embedder is not None and self.search.queries is not None

    async def judge(self, ctx: ConnectionContext, session: Session,
                    entries: Sequence[NewEntry], where: Sequence[int], policy: str, now: float
                    ) -> list[Merge]:
        """The merges `policy` makes for the persistent `entries` of a request (`where`: their
        indices in it), judged against what the session may read of their tiers once its
        connection's earlier writes are committed and embedded (as a query waits for them)."""
        if ctx.last_write is not None and not ctx.last_write.done():
            await ctx.writes_done()
        sessions = sessions_of(ctx)
        ticket = max((s.vector_ticket for s in sessions.by_id.values()), default=0) \
            if sessions is not None else session.vector_ticket
        out: list[Merge] = []
        for i, e in zip(where, entries, strict=True):
            if e.vectors:  # client vectors only: never judged
                continue
            found = await self._judge_one(session.scope, e, policy, now, ticket, ctx.conn_id)
            if found is not None:
                old, sim = found
                out.append(Merge(i, e.tier, e.key, old.key, round(sim, 4),
                                 "skipped" if policy == "skip" else "superseded"))
        return out

    async def _judge_one(self, scope: Scope, e: NewEntry, policy: str, now: float,
                         ticket: int, conn: str) -> tuple[StoredEntry, float] | None:
        search, queries, embedder = self.search, self.search.queries, self.search.embedder
        assert queries is not None and embedder is not None
        q = Query(tiers=(e.tier,), limit=_CANDIDATES)
        found = await search.search(scope, q, e.text, now, _CANDIDATES, None, ticket, conn)
        found = [c for c in found if c.id is not None and c.key != e.key]
        if not found:
            return None
        vecs = await judgement.stored_vectors(self.store, [c.id for c in found if c.id],
                                              embedder.dim)
        have = [c for c in found if c.id in vecs]
        if not have:
            return None
        new_vec = np.asarray(await queries.vector(e.text, scope.namespace, conn),
                             dtype=np.float64)
        mat = np.stack([vecs[c.id] for c in have if c.id is not None])
        got = decide(judgement.content_text(cast(Any, e)), new_vec,
                     [judgement.content_text(c) for c in have], mat, policy,
                     new_window=(e.valid_from, e.valid_until),
                     old_windows=[(c.valid_from, c.valid_until) for c in have], now=now)
        return (have[got[0]], got[1]) if got is not None else None

    async def commit(self, scope: Scope, put: asyncio.Future[Any] | None,
                     where: Sequence[int], merges: Sequence[Merge], now: float) -> Any:
        """After the store's put (`put`, None: nothing to put), retire what the stored
        entries supersede and log the skips: the put's outcomes (None: nothing put). A
        supersede whose new entry was refused (a quota) retires nothing and is dropped from
        `merges` by the caller (`done`)."""
        results = await put if put is not None else None
        ok = {i for i, r in zip(where, results or [], strict=False) if r is None}
        retire = [(m.tier, m.existing, m.key, m.similarity) for m in merges
                  if m.action == "superseded" and m.index in ok]
        skips = [(m.tier, m.existing, m.key, m.similarity) for m in merges
                 if m.action == "skipped"]
        if retire:
            await self.store.retire(scope, retire, now)
        if skips:
            await self.store.log_skips(scope, skips, now)
        return results

    @staticmethod
    def done(merges: Sequence[Merge], results: Sequence[Any] | None,
             where: Sequence[int]) -> list[Consolidated]:
        """The reply's `consolidated`: the skips, and the supersedes whose entry was stored."""
        ok = {i for i, r in zip(where, results or [], strict=False) if r is None}
        return [m.wire() for m in merges if m.action == "skipped" or m.index in ok]
