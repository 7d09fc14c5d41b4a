"""The store interface under the persistent tiers (episodic, semantic): `EntryStore`, which
every backend implements, and the few capabilities only one backend has.

`EntryStore` is an abstract base class: a backend subclasses it (`host/store/sqlite/store.py`,
`host/store/postgres/store.py`), so a method it lacks fails at construction and mypy checks
every signature against the one declared here. What only one backend has is an optional
capability: an `EntryStore` with more abstract methods, named on that backend's class line
(`class SQLiteEntryStore(VectorStore, NotReadyReason, EntryStore)`): `VectorStore` (the host
indexes the vectors in memory: SQLite), `VectorSearch` (the store searches them itself:
PostgreSQL with pgvector), `NearSearch`, `ChangeNotices` (PostgreSQL) and `NotReadyReason`
(SQLite). The part that uses one checks it once, with `isinstance`, where it is given the store,
and keeps the answer, typed as that capability (which has every `EntryStore` method too). The values these methods take and give are in `host.store.records`; the
operator tasks of the CLI are `host.store.admin.StoreAdmin`.

Visibility is part of every query, never a filter added afterwards: a read for agent A sees
episodic rows whose owner is A and the semantic rows of the namespace, and nothing else. Reads
never return expired entries (expires at updated_at + ttl when ttl > 0, as written by `put`;
`touch` moves updated_at but never the expiry).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from host.lifecycle import Opens
from host.store.history import HistoryVersion, Merges, Retention
from host.store.records import (
    BrowsedEntry,
    BrowseFilter,
    Change,
    ClientRows,
    Hits,
    NamespaceOverview,
    NewEntry,
    Pending,
    Query,
    Quotas,
    Scope,
    StoredEntry,
    StoreOutcome,
)

if TYPE_CHECKING:
    import numpy as np

    from host.store.growth import UsageSummary
    from host.text.bm25 import Analysis, Bm25Stats

__all__ = [
    "ChangeNotices",
    "EntryStore",
    "NearSearch",
    "NotReadyReason",
    "VectorSearch",
    "VectorStore",
]


class EntryStore(Opens, ABC):
    """What the host needs from a persistent backend. Use `async with` or `open()`/`close()`.

    Writes (`put`, `forget`, `touch`, `refresh`, `sweep`) return only after their data is
    committed (durable). `put`, `forget`, `touch` and `refresh` return an awaitable that needs
    no task of its own (a coroutine, or a future of the backend's writer).

    `reads_on_loop` is True when reads run synchronously on the event loop and no method
    needs to run inside a task (no `asyncio.timeout`). The store has to say so: on Python
    3.11 (no eager tasks) the request core saves a task a request by running a handler's first
    step in the transport's callback, which only a store that needs no task allows (see
    `host.net.pipeline`); the server reads the flag, nothing else does. `quotas` may be
    replaced while the store runs (`Host.reload` applies new `limits` quotas through it).
    """

    reads_on_loop: bool
    quotas: Quotas

    # -- life --------------------------------------------------------------------------------

    @abstractmethod
    async def open(self) -> None:
        """Create or migrate the schema and start workers. Call once before use."""

    @abstractmethod
    async def close(self) -> None:
        """Finish queued writes, commit, stop workers, release files/connections."""

    @abstractmethod
    async def ready(self) -> bool:
        """True when the store answers a trivial query."""

    # -- writes ------------------------------------------------------------------------------

    @abstractmethod
    def put(
        self, scope: Scope, entries: Sequence[NewEntry], now: float
    ) -> Awaitable[list[StoreOutcome]]:
        """Upsert `entries` for `scope` in one transaction; one outcome per entry, in order.
        A `NewEntry`'s client `vectors` are written in the same transaction; rows of another
        dimension than their space's are refused (`Refusal.VECTOR_DIMS`)."""

    @abstractmethod
    def forget(
        self, scope: Scope, tiers: Sequence[str], keys: Sequence[bytes], tags: Sequence[str],
        now: float,
    ) -> Awaitable[int]:
        """Delete the matching entries (with their index rows); the number deleted."""

    @abstractmethod
    def touch(
        self, scope: Scope, tiers: Sequence[str], keys: Sequence[bytes], when: float
    ) -> Awaitable[int]:
        """Record a read of the entries under `keys` in `tiers`: move their `updated_at` forward
        to `when`, for those visible to `scope`, live at `when` and last updated before it; the
        number moved. Returns after the commit, as `put` and `forget` do.

        Nothing else changes: content, tags, source, score, ttl, created_at, the keyword index,
        the vectors and the quota usage stay as they are, so a touch can never undo a write that
        landed between the read and the touch (a write-back of the entry read could). Expiry
        never moves either: a touch does not extend a TTL and cannot bring an expired entry
        back. The entry then expires before `updated_at + ttl`: a caller that shows entries with
        a TTL to wire clients (whose rule is `updated_at + ttl`) should not touch them.
        """

    @abstractmethod
    def refresh(self, scope: Scope, tiers: Sequence[str], keys: Sequence[bytes], now: float
                ) -> Awaitable[int]:
        """Restart the TTL of the live entries under `keys` with one: they expire `ttl`
        seconds after `now`. Returns after the commit: how many."""

    @abstractmethod
    def sweep(self, scope: Scope, tiers: Sequence[str], now: float) -> Awaitable[int]:
        """Delete the expired entries of `scope`'s namespace it may see in `tiers`, 1,000 a
        transaction (each batch logged as one `expired` change; other writes may land between
        batches). Returns after the last commit: how many."""

    @abstractmethod
    async def collect_garbage(self, now: float) -> int:
        """Physically delete expired entries; the number deleted."""

    # -- reads (`q` applies visibility, liveness, keys, tags, `where`, `key_prefix`) ---------

    @abstractmethod
    async def find(self, scope: Scope, q: Query, now: float) -> tuple[list[StoredEntry], int]:
        """Entries matching `q` ordered by score desc, updated_at desc; (first `limit`, total)."""

    @abstractmethod
    async def fetch(self, scope: Scope, q: Query, ids: Sequence[int], now: float
                    ) -> list[StoredEntry]:
        """The entries among row `ids` that `q` lets `scope` read, with `id` set; any order
        (what a vector search found, read back)."""

    @abstractmethod
    async def neighbours(self, scope: Scope, q: Query, hits: Sequence[tuple[int, str, str]],
                         span: int, now: float) -> list[tuple[StoredEntry, int, int]]:
        """For each `(id, tier, owner)` of `hits`, the up to `span` entries written just before
        it and the up to `span` just after it in its own (namespace, tier, owner), in row-id
        order, that `q` lets `scope` read: `(entry with id set, hit id, distance)`, distance
        1 for the adjacent readable entry of that group; any order, a hit's own entry never."""

    @abstractmethod
    async def allowed_ids(self, scope: Scope, q: Query, now: float) -> np.ndarray:
        """The row ids `q`'s filters let `scope` read (an in-memory index's filter)."""

    @abstractmethod
    async def key_paths(self, scope: Scope, q: Query, field: str, prefix: Sequence[str],
                        now: float) -> list[bytes]:
        """The distinct JSON texts of the arrays under key member `field` among the entries
        `q` lets `scope` read, with `prefix`'s elements ("*": any) leading."""

    @abstractmethod
    async def count_by_tier(self, now: float) -> dict[str, int]:
        """Live entries at `now` by persistent tier (a scan: `/metrics` calls it every few
        seconds)."""

    @abstractmethod
    async def quota_usage(self, quotas: Quotas, top: int) -> UsageSummary | None:
        """Tenants by usage fraction and the `top` fullest (None: no quota counters to read,
        e.g. an in-memory database; `host.store.growth`)."""

    # -- keyword search (BM25, `host.text.bm25`) ----------------------------------------------

    @abstractmethod
    async def search(
        self, scope: Scope, q: Query, text: str, now: float, candidates: int, *,
        relevance: bool = True,
    ) -> list[StoredEntry]:
        """Keyword candidates for `text` matching `q`'s filters, each with `relevance` set.

        Returns at most `candidates` entries; ranking and `limit` are the caller's. With
        `relevance` False the caller scores the candidates itself (`host.search.ranking`): a
        candidate with its `keyword` (BM25) set may come without `relevance` (None), the same
        candidates in the same order otherwise.
        """

    @abstractmethod
    async def search_stats(
        self, scope: Scope, q: Query, text: str, now: float, candidates: int, *,
        relevance: bool = True,
    ) -> tuple[list[StoredEntry], Bm25Stats]:
        """`search`'s candidates and, from the same read, the BM25 statistics of the terms it
        searched (the terms kept for the entries `q` lets `scope` read, the namespace's rows
        holding each, its rows and their average length): what scores a text outside the
        index, a working-tier entry, on the index's scale (`host.text.bm25`). With no tier in
        `q`, no candidates and the statistics alone. One round trip where the store has them."""

    @abstractmethod
    def analyse(self, text: str) -> Analysis:
        """`text`'s terms as the store's keyword index reads them."""

    # -- the embedding queue and stored vectors ------------------------------------------------

    @abstractmethod
    async def set_vector_model(self, name: str, dim: int) -> bool:
        """Record the embedder in the database; a different one than recorded drops every
        vector and queues every entry. True when that happened."""

    @abstractmethod
    async def requeue_vectors(self) -> int:
        """Queue every entry for re-embedding; the queue's length."""

    @abstractmethod
    async def vector_queue(self) -> int:
        """Entries waiting for a vector."""

    @abstractmethod
    async def vectors_of(self, ids: Sequence[int], dim: int) -> tuple[list[int], np.ndarray]:
        """The ids that have a stored vector of `dim` and their float32 unit rows, in no
        particular order (the judgement of a reply, `host.search.judgement`, compares them)."""

    # -- client-supplied vectors (the store extension), searched in the host's memory ----------

    @abstractmethod
    async def client_vectors(self, scope: Scope, q: Query, space: str, now: float
                             ) -> tuple[int, list[tuple[int, np.ndarray]]]:
        """The dimension of the namespace's `space` (0: none yet) and (row id, its vectors
        as a (n, dims) array) of every entry `q` lets `scope` read with vectors in it. Unit
        float32 rows kept per (namespace, space), never returned to a client."""

    @abstractmethod
    def client_space(self, namespace: str, space: str
                     ) -> tuple[int, int, Iterator[ClientRows]]:
        """(the namespace's newest change number, the space's dimension, its rows in
        batches), all of one snapshot (blocking: run it in a thread). The host loads a space
        in its own index (`host.search.client_vectors.ClientSpaces`) on its first retrieve."""

    @abstractmethod
    async def client_changes(self, namespace: str, after: int, limit: int
                             ) -> tuple[int, list[int] | None]:
        """A page of what changed `namespace`'s client vectors after its change number
        `after`: (the change number read up to, the ids of the entry rows stored in the changes
        after `after` up to it). A page holds about `limit` rows and whole changes only (a
        single larger change comes whole); read again from the number returned until it comes
        back unchanged (no change after it: an empty list). The ids are None when the log was
        pruned past `after` (they cannot be told: read the space again). Deletes are not
        listed (the reader drops the rows it finds gone)."""

    @abstractmethod
    async def client_rows_of(self, ids: Sequence[int], space: str, dims: int) -> ClientRows:
        """The entries among `ids` with vectors in `space` now, with them."""

    # -- the change log (`host.store.changes`), the source of `memory/watch` -----------------

    @abstractmethod
    async def change_head(self, namespace: str) -> int:
        """The sequence a watch of `namespace` starting now starts after (at least the floor)."""

    @abstractmethod
    async def change_heads(self, namespaces: Sequence[str]) -> dict[str, int]:
        """`change_head` of several namespaces at once (the poll of changes other processes
        or hosts committed)."""

    @abstractmethod
    async def change_floor(self, namespace: str) -> int:
        """The highest sequence pruned from `namespace`'s log (0: none)."""

    @abstractmethod
    async def changes_after(self, namespace: str, after: int, limit: int,
                            max_bytes: int = 0) -> list[Change]:
        """Up to `limit` changes of `namespace` with `seq` > `after`, in order; with
        `max_bytes`, no more after the one that takes their `entries` to that many bytes."""

    @abstractmethod
    async def prune_changes(self, before: float, max_rows: int) -> int:
        """Delete the changes committed before `before` (seconds since the epoch) and those
        past the newest `max_rows` of their namespace, raising the floors; the number deleted."""

    # -- history (`host.store.history`): earlier versions, and consolidation's merges ----------

    @abstractmethod
    async def set_history_retention(self, retention: Retention) -> None:
        """Apply `retention` (the `history` settings) from now on, to every writer."""

    @abstractmethod
    async def history(self, scope: Scope, tiers: Sequence[str], key: bytes, now: float,
                      limit: int) -> list[HistoryVersion]:
        """The versions of `key` that `scope` may read in `tiers`, newest first, at most
        `limit`: the live entries, then the earlier ones kept within the retention."""

    @abstractmethod
    def retire(self, scope: Scope, merges: Merges, now: float) -> Awaitable[int]:
        """Retire the live entries the merges name (each copied into the history as
        `superseded` by the new key, then deleted, its key's history kept), logged as one
        `consolidated` change; after the commit, how many were retired."""

    @abstractmethod
    def log_skips(self, scope: Scope, skips: Merges, now: float) -> Awaitable[None]:
        """Log skipped stores (the new entry not stored) as one `consolidated` change."""

    # -- the memory browser (`host.ui`): an operator's reads across a namespace's agents -------
    # Nothing here is reachable from the wire; the caller decides which namespaces and tiers a
    # person may see.

    @abstractmethod
    async def overview(self, namespaces: Sequence[str] | None, now: float
                       ) -> list[NamespaceOverview]:
        """The namespaces with live entries (only those in `namespaces` unless None), by name."""

    @abstractmethod
    async def browse(self, namespace: str, f: BrowseFilter, now: float
                     ) -> tuple[list[BrowsedEntry], int]:
        """Live entries of `namespace` matching `f`, newest first (updated_at, then id);
        (the page at `f.offset` of at most `f.limit`, how many match)."""

    @abstractmethod
    async def browse_entry(self, namespace: str, id: int, now: float) -> BrowsedEntry | None:
        """The live entry with row id `id` in `namespace`, or None."""

    @abstractmethod
    async def export_namespace(self, namespace: str, now: float, after: int = 0,
                               limit: int = 1000) -> list[BrowsedEntry]:
        """The live entries of `namespace` with a row id above `after`, in row order, at most
        `limit`: a page of the browser's export (written in the format of `a2e-host export`;
        the browser streams page after page, so a download holds one page in memory)."""


# -- the optional capabilities: each named on the class line of the one backend that has it ----


class VectorStore(EntryStore):
    """Optional capability of an `EntryStore`: it keeps the vectors the search engine embeds
    and the engine searches them in its in-memory index (`host.search`; SQLite). The engine
    reads the queue (`pending_vectors`), writes vectors (`write_vectors`), loads a namespace's
    vectors on its first query (`namespace_vectors`, within `search.vector_memory_bytes`) or
    every vector at start (`load_vectors`), drops those deletes removed (`vectors_gone`), and
    reads back by row id what the index found (`EntryStore.fetch`, `neighbours`, with
    `allowed_ids` for the filters). Other processes may write vectors into the same file (a
    host, `a2e-host mcp` and the library share one): `vector_seq`/`vectors_since` tell which
    are new, so the worker's index takes them in before each batch. A store with neither this
    nor `VectorSearch` is searched by keywords alone."""

    path: str  # the database file: the indexes built from it are saved beside it

    @abstractmethod
    async def pending_vectors(self, limit: int, namespace: str | None = None
                              ) -> list[tuple[Pending, bytes | None]]:
        """Up to `limit` queued entries (of `namespace`), newest first, each with the digest
        of the text its stored vector was made of (None: no vector)."""

    @abstractmethod
    async def write_vectors(self, rows: Sequence[tuple[int, str, bytes | None]]) -> list[int]:
        """Store `(entry id, embedded text, vector bytes or None: unchanged)` rows and dequeue
        them, but a row whose entry's text changed since (it stays queued); the ids dequeued."""

    @abstractmethod
    async def vectors_gone(self) -> list[int]:
        """Ids whose vectors deletes removed since the last `clear_vectors_gone`."""

    @abstractmethod
    async def clear_vectors_gone(self, ids: Sequence[int]) -> None:
        """Acknowledge `vectors_gone` ids."""

    @abstractmethod
    def load_vectors(self, dim: int) -> Iterator[tuple[list[Pending], np.ndarray]]:
        """Every stored vector, in batches (blocking: run it in a thread)."""

    @abstractmethod
    def namespace_vectors(self, namespace: str, dim: int) -> Iterator[
            tuple[list[int], np.ndarray, list[tuple[str, str]], list[float | None]]]:
        """The stored vectors of `namespace` in batches: (entry ids, (n, dim) float32, the
        (tier, owner) of each, the expiry of each); blocking: run it in a thread."""

    @abstractmethod
    def vector_seq(self) -> int:
        """The number of the newest write of vectors (blocking: read before `load_vectors`)."""

    @abstractmethod
    async def vectors_since(self, after: int, dim: int, limit: int = 10_000
                            ) -> tuple[list[Pending], np.ndarray, int]:
        """Up to `limit` vectors written after number `after`, by any process: (rows, their
        vectors, the number read up to)."""


class VectorSearch(EntryStore):
    """Optional capability of an `EntryStore`: it keeps the vectors and searches them itself.

    A store with it (`PostgresEntryStore` with pgvector) is shared by several hosts, so no host
    can hold the vectors in memory: the search engine (`host.search`) then writes every vector
    through `put_vectors` and asks `nearest_vectors` for the neighbours of a query, with the
    same visibility as every read (namespace, tier/owner, keys, tags, TTL) applied in the query
    BEFORE ranking. `vectors_available` is False when the capability is absent at run time (no
    pgvector on the server): the engine then searches by keywords alone.
    """

    vectors_available: bool

    @abstractmethod
    async def claim_vectors(self, limit: int, lease: float) -> list[tuple[Pending, int]]:
        """Claim up to `limit` queued entries for `lease` seconds (of the database's clock),
        oldest first, skipping those another host holds: each with the text to embed and its
        queue sequence number (for `put_vectors`)."""

    @abstractmethod
    async def claim_namespace_vectors(
        self, namespace: str, limit: int, lease: float, skip: Sequence[int] = (),
    ) -> tuple[list[tuple[Pending, int]], int]:
        """As `claim_vectors`, of the queued entries of `namespace` alone (those a query waits
        for), and how many of them the claim left (held by another host, or past `limit`;
        the ids `skip`, claims the caller keeps, not counted): 0 when it took all that the
        namespace had queued."""

    @abstractmethod
    async def release_vectors(self, rows: Sequence[tuple[int, int]]) -> None:
        """Release the claims of `(entry id, sequence)` rows (from `claim_vectors`) not
        embedded: any host may claim them again at once."""

    @abstractmethod
    async def put_vectors(self, model: str, rows: Sequence[tuple[int, int, np.ndarray]]
                          ) -> list[int]:
        """Store `(entry id, sequence, unit vector)` rows under `model` and dequeue them; a row
        whose entry changed (sequence moved) or vanished since its claim is skipped. Returns
        the ids stored; returns after the commit."""

    @abstractmethod
    async def nearest_vectors(
        self, scope: Scope, q: Query, model: str, vector: np.ndarray, now: float, k: int,
        sample: int, also: Sequence[int] = (),
    ) -> Hits:
        """The `k` entries `q` lets `scope` read nearest to `vector` (cosine), best first, and
        the mean/std of the similarity over at most `sample` of those entries; in `also`, the
        similarity of each of the ids `also` that has a vector (the query's keyword candidates,
        read in the same round trip)."""

    @abstractmethod
    async def vector_similarity(self, model: str, vector: np.ndarray, ids: Sequence[int]
                                ) -> np.ndarray:
        """Cosine similarity of `vector` to the entries `ids`, NaN for those without a vector."""


class NearSearch(EntryStore):
    """Optional capability of an `EntryStore` (PostgreSQL): its keyword search also returns, in
    the same round trip, the neighbours of its first `near` candidates, {candidate id:
    [(neighbour, distance), ...]} as its `neighbours` would give them (`span` a side); the
    engine asks `neighbours` only for the hits not among those."""

    @abstractmethod
    async def search_near(
        self, scope: Scope, q: Query, text: str, now: float, candidates: int, near: int,
        span: int, *, stats: bool = False,
    ) -> tuple[list[StoredEntry], dict[int, list[tuple[StoredEntry, int]]], Bm25Stats | None]:
        """As `EntryStore.search`, with the neighbours of the first `near` candidates, and with
        `stats` the statistics `EntryStore.search_stats` gives (None without)."""


class ChangeNotices(EntryStore):
    """Optional capability of an `EntryStore` (PostgreSQL's LISTEN/NOTIFY): it tells at once of
    a change committed through any host; the watches poll the change log in any case."""

    @abstractmethod
    async def listen_changes(self, notify: Callable[[str], None]) -> None:
        """From now on call `notify(namespace)` ("" = any) when a change commits."""


class NotReadyReason(EntryStore):
    """Optional capability of an `EntryStore` (SQLite: a full disk): it says why `ready()` is
    False, for `/readyz`; without it `/readyz` gives the server's answer alone."""

    @abstractmethod
    def not_ready_reason(self) -> str:
        """Why the store is not ready ("" when it cannot say)."""
