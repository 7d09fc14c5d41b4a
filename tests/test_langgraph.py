"""`host.langgraph`: A2EStore and AsyncA2EStore behave as LangGraph's own stores, on a real
host over real sockets: items, namespaces, search with filters and offsets, namespace listing,
batches in op order, search by meaning both ways, TTL, and tenancy."""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from authkit import issue, running
from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)
from support.hosts import make_config, running_host, url_of
from support.http import get, metric_value

from host.app import Host
from host.client import MemoryClient
from host.langgraph import A2EStore, A2EStoreError, AsyncA2EStore

pytestmark = [pytest.mark.all_backends, pytest.mark.all_transports("websocket")]


def embed(texts: list[str]) -> list[list[float]]:
    """A deterministic 4-dimensional embedding: counts of a, b, c and everything else."""
    return [[t.count("a"), t.count("b"), t.count("c"), len(t) - sum(t.count(x) for x in "abc")]
            for t in texts]


def cosine(u: list[float], v: list[float]) -> float:
    nu, nv = math.sqrt(sum(x * x for x in u)), math.sqrt(sum(x * x for x in v))
    return sum(a * b for a, b in zip(u, v)) / (nu * nv)


INDEX = {"dims": 4, "embed": embed, "fields": ["text"]}


@pytest.fixture
async def open_store(host: Host) -> AsyncIterator[Callable[..., A2EStore]]:
    """A factory of A2EStores on the host (opened in a worker thread; closed after, in a worker
    thread too: a sync close on the loop's own thread would block the host it waits for)."""
    stores: list[A2EStore] = []

    def _open(**kw: Any) -> A2EStore:
        kw.setdefault("namespace", "lg")
        s = A2EStore(url_of(host), **kw)
        stores.append(s)
        return s

    yield _open
    for s in stores:
        await asyncio.to_thread(s.close)


async def in_thread(fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
    """`fn(*args, **kw)` in a worker thread: a sync store blocks, the host's loop must not."""
    return await asyncio.to_thread(fn, *args, **kw)


@pytest.fixture
async def astore(host: Host) -> AsyncIterator[AsyncA2EStore]:
    """An AsyncA2EStore on the host's loop."""
    async with AsyncA2EStore.from_conn_string(url_of(host), namespace="lg-async") as s:
        await s.setup()
        yield s


async def test_put_get_delete_keep_timestamps(open_store: Callable[..., A2EStore]) -> None:
    """An item comes back with its value and timestamps; a put again keeps `created_at` and
    moves `updated_at`; a delete leaves nothing."""
    store = await in_thread(open_store)
    await in_thread(store.put, ("users", "u1"), "prefs", {"lang": "py"})
    first = await in_thread(store.get, ("users", "u1"), "prefs")
    assert first.value == {"lang": "py"} and first.namespace == ("users", "u1")
    assert first.key == "prefs" and first.created_at == first.updated_at
    await in_thread(store.put, ("users", "u1"), "prefs", {"lang": "rust"})
    second = await in_thread(store.get, ("users", "u1"), "prefs")
    assert second.value == {"lang": "rust"} and second.created_at == first.created_at
    assert second.updated_at > first.updated_at
    assert await in_thread(store.get, ("users",), "prefs") is None
    await in_thread(store.delete, ("users", "u1"), "prefs")
    assert await in_thread(store.get, ("users", "u1"), "prefs") is None


async def test_namespaces_are_validated_as_langgraph_does(
    open_store: Callable[..., A2EStore],
) -> None:
    """Empty namespaces, a "langgraph" root, labels with periods or empty labels are
    `InvalidNamespaceError`, also for ops given straight to `batch`."""
    store = await in_thread(open_store)
    for ns in [(), ("langgraph", "x"), ("a.b",), ("a", "")]:
        with pytest.raises(InvalidNamespaceError):
            await in_thread(store.put, ns, "k", {"v": 1})
    with pytest.raises(InvalidNamespaceError):
        await in_thread(store.batch, [GetOp(("a.b",), "k")])
    with pytest.raises(InvalidNamespaceError):
        await in_thread(store.search, ("x.y",))


async def test_search_filters_offsets_and_prefix_boundaries(
    open_store: Callable[..., A2EStore],
) -> None:
    """A search reads the namespace prefix on whole labels, filters on value fields with
    LangGraph's operators and nested paths, newest first, paged by limit and offset; a filter
    key LangGraph refuses is `ValueError`."""
    store = await in_thread(open_store)
    for i in range(6):
        await in_thread(store.put, ("docs", "team"), f"d{i}",
                        {"n": i, "kind": "even" if i % 2 == 0 else "odd", "meta": {"lvl": i}})
    await in_thread(store.put, ("docsx",), "other", {"n": 100, "kind": "even"})
    all_docs = await in_thread(store.search, ("docs",), limit=20)
    assert [r.key for r in all_docs] == [f"d{i}" for i in reversed(range(6))]
    assert all(r.score is None for r in all_docs)
    assert [r.key for r in await in_thread(store.search, ("docs",), limit=2, offset=1)] == [
        "d4", "d3"]
    even = await in_thread(store.search, ("docs",), filter={"kind": "even"})
    assert sorted(r.key for r in even) == ["d0", "d2", "d4"]
    ranged = await in_thread(store.search, ("docs",), filter={"n": {"$gte": 2, "$lt": 4}})
    assert sorted(r.key for r in ranged) == ["d2", "d3"]
    nested = await in_thread(store.search, ("docs",), filter={"meta.lvl": {"$gt": 3}})
    assert sorted(r.key for r in nested) == ["d4", "d5"]
    assert len(await in_thread(store.search, (), filter={"kind": "even"}, limit=10)) == 4
    with pytest.raises(ValueError):
        await in_thread(store.search, ("docs",), filter={"n'; DROP": 1})
    unbounded = await in_thread(store.search, ("docs",), filter={"n": {"$lt": float("inf")}})
    assert len(unbounded) == 6
    assert await in_thread(store.search, ("docs",), filter={"n": float("nan")}) == []


async def test_list_namespaces_with_wildcards_depth_and_pages(
    open_store: Callable[..., A2EStore],
) -> None:
    """`list_namespaces` lists distinct namespaces by prefix and suffix (with `*`), cut to
    `max_depth`, sorted, paged."""
    store = await in_thread(open_store)
    for ns in [("a", "b", "c"), ("a", "b", "d"), ("a", "e"), ("f",), ("x", "b", "c")]:
        await in_thread(store.put, ns, "k", {"v": 1})
    assert await in_thread(store.list_namespaces) == [
        ("a", "b", "c"), ("a", "b", "d"), ("a", "e"), ("f",), ("x", "b", "c")]
    assert await in_thread(store.list_namespaces, prefix=("a",)) == [
        ("a", "b", "c"), ("a", "b", "d"), ("a", "e")]
    assert await in_thread(store.list_namespaces, prefix=("*", "b")) == [
        ("a", "b", "c"), ("a", "b", "d"), ("x", "b", "c")]
    assert await in_thread(store.list_namespaces, suffix=("c",)) == [
        ("a", "b", "c"), ("x", "b", "c")]
    assert await in_thread(store.list_namespaces, max_depth=1) == [("a",), ("f",), ("x",)]
    assert await in_thread(store.list_namespaces, limit=2, offset=1) == [
        ("a", "b", "d"), ("a", "e")]


async def test_batch_keeps_op_order_and_is_one_store_request(
    host: Host, open_store: Callable[..., A2EStore],
) -> None:
    """A batch's ops apply in order (a get before a put sees nothing, after it the value), the
    last put of a key wins, and N puts are one store request."""
    store = await in_thread(open_store)
    results = await in_thread(store.batch, [
        GetOp(("b",), "k"),
        PutOp(("b",), "k", {"v": 1}),
        PutOp(("b",), "k", {"v": 2}),
        GetOp(("b",), "k"),
        SearchOp(("b",)),
        ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("b",)),)),
        PutOp(("b",), "k", None),
        GetOp(("b",), "k"),
    ])
    assert results[0] is None and results[1] is None and results[2] is None
    assert results[3].value == {"v": 2}
    assert [r.value for r in results[4]] == [{"v": 2}]
    assert results[5] == [("b",)]
    assert results[6] is None and results[7] is None
    _, _, before = await get(host.port, "/metrics")
    await in_thread(store.batch, [PutOp(("many",), f"k{i}", {"i": i}) for i in range(50)])
    _, _, after = await get(host.port, "/metrics")
    stores = [metric_value(t, "a2e_requests_total", type="memory/store/req")
              for t in (before, after)]
    assert stores[1] - stores[0] == 1
    assert len(await in_thread(store.search, ("many",), limit=100)) == 50


async def test_query_without_index_is_the_hosts_search(
    open_store: Callable[..., A2EStore],
) -> None:
    """With no `index`, a query is answered by the host's own search: what it finds first,
    with a score in (0, 1], then the other items (score None); with `min_score` only what
    the search finds at that score."""
    store = await in_thread(open_store)
    await in_thread(store.put, ("m",), "1", {"text": "the user prefers concise Python code"})
    await in_thread(store.put, ("m",), "2", {"text": "lunch is at noon on Fridays"})
    hits = await in_thread(store.search, ("m",), query="python code style")
    assert [h.key for h in hits] == ["1", "2"]
    assert hits[0].score is not None and 0 < hits[0].score <= 1 and hits[1].score is None
    strict = await in_thread(open_store, min_score=0.2)
    found = await in_thread(strict.search, ("m",), query="python code style")
    assert [h.key for h in found] == ["1"]


async def test_index_embeds_on_the_client_and_scores_by_cosine(
    open_store: Callable[..., A2EStore],
) -> None:
    """With an `index`, items are embedded with the user's function, a query's score is the
    cosine similarity, `index=False` keeps an item out of it (it comes last, unscored) and
    `index=[fields]` picks the fields embedded."""
    store = await in_thread(open_store, index=INDEX)
    await in_thread(store.put, ("v",), "a", {"text": "aaaa"})
    await in_thread(store.put, ("v",), "b", {"text": "abab"})
    await in_thread(store.put, ("v",), "skip", {"text": "aaaa"}, index=False)
    await in_thread(store.put, ("v",), "other", {"text": "zzzz", "title": "cccc"},
                    index=["title"])
    hits = await in_thread(store.search, ("v",), query="aa")
    assert [h.key for h in hits] == ["a", "b", "other", "skip"]
    want = [cosine(embed(["aa"])[0], embed([t])[0]) for t in ("aaaa", "abab", "cccc")]
    assert [h.score for h in hits[:3]] == pytest.approx(want, abs=1e-5)
    assert hits[3].score is None  # not embedded: after the scored ones, as in InMemoryStore
    assert (await in_thread(store.search, ("v",), query="cc"))[0].key == "other"
    assert [h.key for h in await in_thread(store.search, ("v",), query="aa",
                                           filter={"text": "abab"})] == ["b"]


async def test_ttl_default_override_refresh_and_sweep(
    host: Host, open_store: Callable[..., A2EStore],
) -> None:
    """Items expire after `default_ttl` or their own `ttl` (minutes), a read with
    `refresh_ttl` under `refresh_on_read` restarts the clock, and `sweep_ttl` counts what it
    deleted."""
    store = await in_thread(open_store, ttl={"default_ttl": 1, "refresh_on_read": True})
    await in_thread(store.put, ("t",), "default", {"v": 1})
    await in_thread(store.put, ("t",), "short", {"v": 2}, ttl=0.5)
    await in_thread(store.put, ("t",), "forever", {"v": 3}, ttl=None)
    await in_thread(store.put, ("t",), "read", {"v": 4})
    host.clock.advance(40)  # type: ignore[attr-defined]
    assert await in_thread(store.get, ("t",), "short") is None
    assert await in_thread(store.get, ("t",), "read", refresh_ttl=True) is not None
    host.clock.advance(40)  # type: ignore[attr-defined]
    assert await in_thread(store.get, ("t",), "default", refresh_ttl=False) is None
    assert await in_thread(store.get, ("t",), "read", refresh_ttl=False) is not None
    assert await in_thread(store.get, ("t",), "forever") is not None
    assert await in_thread(store.sweep_ttl) == 2
    assert await in_thread(store.sweep_ttl) == 0


async def test_async_store_batches_and_refuses_sync_calls_on_its_loop(
    astore: AsyncA2EStore,
) -> None:
    """The async store serves the same calls; its sync methods raise InvalidStateError on its
    own loop and work from another thread."""
    await asyncio.gather(*(astore.aput(("a",), f"k{i}", {"i": i}) for i in range(10)))
    got = await asyncio.gather(*(astore.aget(("a",), f"k{i}") for i in range(10)))
    assert [g.value["i"] for g in got] == list(range(10))
    assert len(await astore.asearch(("a",), filter={"i": {"$gte": 5}})) == 5
    assert await astore.alist_namespaces() == [("a",)]
    with pytest.raises(asyncio.InvalidStateError):
        astore.get(("a",), "k1")
    with pytest.raises(asyncio.InvalidStateError):
        astore.batch([GetOp(("a",), "k1")])
    item = await asyncio.to_thread(astore.get, ("a",), "k1")
    assert item is not None and item.value == {"i": 1}
    await astore.adelete(("a",), "k1")
    assert await astore.aget(("a",), "k1") is None


async def test_stores_of_other_agents_or_namespaces_see_nothing(tmp_path: Path) -> None:
    """Two A2EStores with tokens of different agents, or of different A2E namespaces, never
    see each other's items, in gets, searches or namespace listings."""
    t1, s1 = issue("agent-1")
    t2, s2 = issue("agent-2")
    async with running(tmp_path / "db", [s1, s2]) as host:
        url = url_of(host)

        def check() -> None:
            with A2EStore.from_conn_string(url, namespace="shared", token=t1) as a, \
                    A2EStore.from_conn_string(url, namespace="shared", token=t2) as b, \
                    A2EStore.from_conn_string(url, namespace="other", token=t1) as c:
                a.put(("mem",), "k", {"secret": "a's"})
                for s in (b, c):
                    assert s.get(("mem",), "k") is None
                    assert s.search(("mem",)) == []
                    assert s.list_namespaces() == []
                with A2EStore.from_conn_string(url, namespace="shared", token=t1) as again:
                    assert again.get(("mem",), "k").value == {"secret": "a's"}

        await in_thread(check)


def test_a_sync_store_needs_a_host_address() -> None:
    """An address that is not ws://, wss://, http:// or https:// is `ValueError`."""
    with pytest.raises(ValueError):
        A2EStore("sqlite:///x.db")


async def test_ttl_sweepers_start_and_stop(host: Host, open_store: Callable[..., A2EStore],
                                           astore: AsyncA2EStore) -> None:
    """Without a TTL config a sweeper is a done no-op; with one it runs until stopped, on
    both stores."""
    plain = await in_thread(open_store)
    assert (await in_thread(plain.start_ttl_sweeper)).done()
    store = await in_thread(open_store, ttl={"default_ttl": 1, "sweep_interval_minutes": 1})
    future = await in_thread(store.start_ttl_sweeper)
    assert not future.done()
    assert await in_thread(store.stop_ttl_sweeper, 10) is True
    assert future.result(timeout=10) is None
    astore.ttl_config = {"default_ttl": 1}
    task = await astore.start_ttl_sweeper(1)
    assert not task.done()
    assert await astore.stop_ttl_sweeper(10) is True and task.done()


async def test_a_store_over_http_and_sse(host: Host) -> None:
    """An `http://` address speaks HTTP + SSE: the same items, searches and listings."""
    def run() -> None:
        with A2EStore.from_conn_string(f"http://127.0.0.1:{host.port}", namespace="h") as s:
            s.batch([PutOp(("n", str(i)), "k", {"i": i}) for i in range(3)])
            assert s.get(("n", "1"), "k").value == {"i": 1}
            assert sorted(r.value["i"] for r in s.search(("n",), filter={"i": {"$gt": 0}})) == [1, 2]
            assert s.list_namespaces(max_depth=1) == [("n",)]

    await in_thread(run)


def openai_like(dims: int) -> Callable[[list[str]], list[list[float]]]:
    """A deterministic embedding of `dims` dimensions whose values look like OpenAI's (unit
    length, ~N(0, 1/dims)), seeded by the text."""
    def embed_texts(texts: list[str]) -> list[list[float]]:
        out = []
        for t in texts:
            rnd = random.Random(t)
            v = [rnd.gauss(0.0, 1.0) for _ in range(dims)]
            n = math.sqrt(sum(x * x for x in v))
            out.append([x / n for x in v])
        return out

    return embed_texts


async def test_a_put_near_the_frame_limit_fits_and_one_over_it_is_refused_before_sending(
    host: Host, open_store: Callable[..., A2EStore],
) -> None:
    """A document indexed on `paragraphs[*]` with 40 paragraphs of 1,536 dimensions is stored
    and found (its vectors go at the precision the host keeps); one of 64 paragraphs of 4,096
    dimensions is `A2EStoreError` naming the frame limit, raised before anything of its batch
    is sent, and the store serves the next call."""
    index = {"dims": 1536, "embed": openai_like(1536), "fields": ["paragraphs[*]"]}
    store = await in_thread(open_store, index=index)
    doc = {"paragraphs": [f"paragraph {i} of a long report" for i in range(40)]}
    await in_thread(store.put, ("docs",), "report", doc)
    hits = await in_thread(store.search, ("docs",), query="paragraph 7 of a long report")
    assert [h.key for h in hits] == ["report"] and hits[0].score == pytest.approx(1.0, abs=1e-4)
    big = await in_thread(open_store, index={"dims": 4096, "embed": openai_like(4096),
                                             "fields": ["paragraphs[*]"]})
    many = {"paragraphs": [f"part {i}" for i in range(64)]}
    with pytest.raises(A2EStoreError, match="frame limit"):
        await in_thread(big.batch, [PutOp(("docs",), "small", {"paragraphs": ["x"]}),
                                    PutOp(("docs",), "huge", many)])
    assert await in_thread(big.get, ("docs",), "small") is None  # nothing of it was sent
    await in_thread(big.put, ("docs",), "small", {"paragraphs": ["x"]})
    assert (await in_thread(big.get, ("docs",), "small")).value == {"paragraphs": ["x"]}
    assert (await in_thread(store.get, ("docs",), "report")).value == doc


async def test_a_store_opens_a_new_connection_after_the_host_closed_its_last(
    tmp_path: Path,
) -> None:
    """A host whose frame limit is below the store's closes the connection on a big put (the
    call is `A2EStoreError` naming 1009); the store's next calls open a new connection and
    work, and what was stored before is there."""
    config = make_config(tmp_path / "db", limits={"max_frame_bytes": 16 * 1024})
    async with running_host(config) as host:
        def run() -> None:
            with A2EStore.from_conn_string(url_of(host), namespace="small") as store:
                store.put(("a",), "before", {"v": 1})
                with pytest.raises(A2EStoreError, match="1009"):
                    store.put(("a",), "big", {"text": "x" * 20_000})
                assert store.get(("a",), "before").value == {"v": 1}
                store.put(("a",), "after", {"v": 2})
                assert [r.key for r in store.search(("a",))] == ["after", "before"]

        await in_thread(run)


async def test_a_store_goes_on_after_its_host_restarted(tmp_path: Path) -> None:
    """A store whose host stopped and started again on the same address and database reads
    what it stored, on a new connection, at its next call."""
    db = tmp_path / "db"
    async with running_host(make_config(db)) as first:
        url = url_of(first)
        store = await in_thread(A2EStore, url, namespace="restart")
        await in_thread(store.put, ("a",), "k", {"v": 1})
    try:
        port = int(url.rsplit(":", 1)[1])
        async with running_host(make_config(db, server={"port": port})) as again:
            assert url_of(again) == url
            assert (await in_thread(store.get, ("a",), "k")).value == {"v": 1}
    finally:
        await in_thread(store.close)


async def test_entries_other_clients_wrote_never_break_a_search_or_a_listing(
    host: Host, open_store: Callable[..., A2EStore],
) -> None:
    """Entries of the same A2E namespace that the adapter did not write (another key shape,
    a content that is not an object) are skipped by search, get and list_namespaces."""
    store = await in_thread(open_store, namespace="mixed")
    await in_thread(store.put, ("m",), "mine", {"text": "prefers tea"})
    async with await MemoryClient.connect(url_of(host)) as wire:
        await wire.init("mixed")
        await wire.store([
            {"key": {"topic": "prefs"}, "content": {"text": "prefers tea"}, "tier": "episodic"},
            {"key": {"ns": ["m"], "k": 5}, "content": {"v": 1}, "tier": "episodic"},
            {"key": {"ns": ["m"], "k": "text"}, "content": "a string", "tier": "episodic"},
            {"key": {"ns": ["m"], "k": "x", "more": 1}, "content": {}, "tier": "episodic"},
        ])
    for prefix in [(), ("m",)]:
        assert [r.key for r in await in_thread(store.search, prefix)] == ["mine"]
        assert [r.key for r in await in_thread(store.search, prefix, query="tea")] == ["mine"]
    assert await in_thread(store.get, ("m",), "text") is None
    assert await in_thread(store.list_namespaces) == [("m",)]


async def test_no_time_of_a_fact_every_item_holds_at_every_time(
    host: Host, open_store: Callable[..., A2EStore],
) -> None:
    """LangGraph's BaseStore has no time of a fact and the adapter invents none
    (docs/langgraph.md): an item whose entry a wire client bounded in the past is still read
    by get and search (no `as_of` is sent), and a put over it stores it without bounds, so a
    wire read as of after the old bound finds it."""
    store = await in_thread(open_store, namespace="facts")
    key, ended = {"ns": ["m"], "k": "home"}, 1772323200  # 2026-03-01T00:00:00Z
    async with await MemoryClient.connect(url_of(host)) as wire:
        await wire.init("facts")
        await wire.store([{"key": key, "content": {"text": "Boston"}, "tier": "episodic",
                           "valid_until": ended}])
        assert not (await wire.retrieve(keys=[key], as_of=ended)).entries
        item = await in_thread(store.get, ("m",), "home")
        assert item is not None and item.value == {"text": "Boston"}
        assert [r.key for r in await in_thread(store.search, ("m",), query="Boston")] == ["home"]
        await in_thread(store.put, ("m",), "home", {"text": "Denver"})
        got = (await wire.retrieve(keys=[key], as_of=ended)).entries
        assert [e["content"] for e in got] == [{"text": "Denver"}]
        assert "valid_until" not in got[0] and "valid_from" not in got[0]


async def test_limit_zero_returns_nothing_as_langgraphs_stores_do(
    open_store: Callable[..., A2EStore],
) -> None:
    """A search or a namespace listing with `limit=0` returns no item, with or without a
    query."""
    store = await in_thread(open_store)
    await in_thread(store.put, ("z",), "k", {"text": "something"})
    assert await in_thread(store.search, ("z",), limit=0) == []
    assert await in_thread(store.search, ("z",), query="something", limit=0) == []
    assert await in_thread(store.list_namespaces, limit=0) == []


async def test_member_names_that_are_not_strings_are_refused_before_sending(
    open_store: Callable[..., A2EStore],
) -> None:
    """A value with a member name that is not a string is `TypeError` (JSON would make it a
    string) and nothing of its batch is stored; inside a filter it is `ValueError`."""
    store = await in_thread(open_store)
    with pytest.raises(TypeError, match="not a string"):
        await in_thread(store.batch, [PutOp(("n",), "ok", {"v": 1}),
                                      PutOp(("n",), "bad", {"meta": {1: "a"}})])
    assert await in_thread(store.search, ("n",)) == []
    with pytest.raises(ValueError):
        await in_thread(store.search, ("n",), filter={"meta": {1: "a"}})


async def test_a_null_in_a_filter_matches_explicit_nulls_only(
    open_store: Callable[..., A2EStore],
) -> None:
    """`{"z": None}` matches an item whose `z` is null, not one without `z` (the documented
    difference from LangGraph's in-memory and SQLite stores)."""
    store = await in_thread(open_store)
    await in_thread(store.put, ("f",), "null", {"z": None})
    await in_thread(store.put, ("f",), "missing", {"y": 1})
    assert [r.key for r in await in_thread(store.search, ("f",), filter={"z": None})] == ["null"]


async def test_a_query_search_restarts_the_ttl_of_what_it_returned_only(
    host: Host, open_store: Callable[..., A2EStore],
) -> None:
    """Under `refresh_on_read`, a search with a query restarts the TTL of the items it
    returned and of no other."""
    store = await in_thread(open_store, ttl={"default_ttl": 1, "refresh_on_read": True})
    await in_thread(store.put, ("t",), "python", {"text": "python answers"})
    await in_thread(store.put, ("t",), "lunch", {"text": "lunch at noon"})
    host.clock.advance(40)  # type: ignore[attr-defined]
    hits = await in_thread(store.search, ("t",), query="python", limit=1)
    assert [h.key for h in hits] == ["python"]
    host.clock.advance(40)  # type: ignore[attr-defined]
    assert [r.key for r in await in_thread(store.search, ("t",))] == ["python"]
