"""Hybrid retrieval end to end: paraphrases, ties, min_score, the embedding worker, forget,
a changed embedder and visibility, over the wire where the behaviour is a wire behaviour."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.search import DISTRACTORS, PARAPHRASE, PUPPY, entry, keys_of

from host.app import Host
from host.client import MemoryClient
from host.config import load_config
from host.search.embed import Embedder, OpenAIEmbedder
from host.search.engine import SearchEngine
from host.store.records import NewEntry, Query, Scope
from host.store.sqlite.store import SQLiteEntryStore
from protocol.keys import canonical_key

# Distractors: a small memory about unrelated things, so that "standing out" means something.


async def fill(client: MemoryClient, host: Host, extra: list[dict[str, Any]]) -> None:
    """Store the distractors and `extra`, then embed everything queued."""
    await client.store([entry({"d": i}, t) for i, t in enumerate(DISTRACTORS)] + extra)
    await host.search.drain()


@pytest.mark.all_backends
async def test_paraphrase_finds_entry_without_shared_keyword(
    client: MemoryClient, host: Host
) -> None:
    """A query sharing no word with an entry finds it by meaning, first."""
    await fill(client, host, [entry({"k": "puppy"}, PUPPY)])
    got = await client.retrieve(query=PARAPHRASE, limit=3)
    assert keys_of(got)[0] == {"k": "puppy"}
    assert 0 < got.entries[0]["relevance"] < 1 and got.entries[0]["score"] == 1.0


async def test_a_paraphrase_is_found_in_a_memory_of_three_entries(
    client: MemoryClient, host: Host
) -> None:
    """In a memory too small to have statistics of its own (three entries) a clear paraphrase
    still finds its fact by meaning, while a question about none of them finds nothing."""
    await client.store([
        entry({"n": 1}, "Maria adopted a beagle named Toby last week", "semantic"),
        entry({"n": 2}, "The quarterly report is due on Friday", "semantic"),
        entry({"n": 3}, "Paris is the capital of France", "semantic")])  # keys say nothing
    await host.search.drain()
    assert keys_of(await client.retrieve(query=PARAPHRASE, limit=3)) == [{"n": 1}]
    assert (await client.retrieve(query="How do I reset my password?", limit=3)).total == 0


async def test_importance_breaks_ties(client: MemoryClient, host: Host) -> None:
    """Of two entries equally relevant (same text), the more important one ranks first."""
    for high, low in (("episodic", "semantic"), ("semantic", "episodic")):
        await client.store([entry({"k": "twin"}, PUPPY, high, score=0.9),
                            entry({"k": "twin"}, PUPPY, low, score=0.2)])
        await host.search.drain()
        got = await client.retrieve(query="puppy shelter", limit=2)
        assert [e["tier"] for e in got.entries] == [high, low]
        assert got.entries[0]["relevance"] == got.entries[1]["relevance"]


async def test_recency_breaks_ties(client: MemoryClient, host: Host) -> None:
    """Of two entries equally relevant and important, the more recently updated ranks first."""
    await client.store([entry({"k": "twin"}, PUPPY, "semantic")])
    await asyncio.sleep(0.05)
    await client.store([entry({"k": "twin"}, PUPPY, "episodic")])
    await host.search.drain()
    got = await client.retrieve(query="puppy shelter", limit=2)
    assert [e["tier"] for e in got.entries] == ["episodic", "semantic"]
    await client.store([entry({"k": "twin"}, PUPPY, "semantic")])  # now the newer one
    got = await client.retrieve(query="puppy shelter", limit=2)
    assert [e["tier"] for e in got.entries] == ["semantic", "episodic"]


async def test_min_score_filters_on_relevance_not_stored_score(
    client: MemoryClient, host: Host
) -> None:
    """min_score keeps results whose relevance reaches it, whatever their stored score."""
    # semantic, unlike the distractors: no neighbour of theirs (test_neighbours_* covers that)
    await fill(client, host, [entry({"k": "puppy"}, PUPPY, "semantic", score=0.0)])
    query = "puppy adopted shelter marathon printer"  # shares words with three entries
    everything = await client.retrieve(query=query, limit=20)
    top = everything.entries[0]
    assert top["key"] == {"k": "puppy"} and top["score"] == 0.0
    cut = (everything.entries[0]["relevance"] + everything.entries[1]["relevance"]) / 2
    assert everything.total >= 3
    got = await client.retrieve(query=query, min_score=cut, limit=20)
    assert keys_of(got) == [{"k": "puppy"}] and got.total == 1
    assert all(e["relevance"] >= cut for e in got.entries)


@pytest.mark.all_backends
async def test_other_agents_episodic_never_returned(
    connect: Callable[..., Any], host: Host
) -> None:
    """A query by meaning, across tiers, never returns another agent's episodic entries."""
    alice: MemoryClient = await connect()
    await alice.init("ns", {"agent": "alice"})
    bob: MemoryClient = await connect()
    await bob.init("ns", {"agent": "bob"})
    await fill(alice, host, [entry({"k": "puppy"}, PUPPY),
                             entry({"k": "pet"}, "Our team adopted a shelter dog as office mascot.",
                                   "semantic")])
    assert {"k": "puppy"} in keys_of(await alice.retrieve(query=PARAPHRASE, limit=3))
    got = await bob.retrieve(query=PARAPHRASE, limit=50)
    assert got.entries and all(e["tier"] == "semantic" for e in got.entries)
    assert {"k": "pet"} in keys_of(got)
    got = await bob.retrieve(query=PARAPHRASE, tier="episodic", limit=50)
    assert got.total == 0


async def test_forget_removes_vector(client: MemoryClient, host: Host, db_path: Path) -> None:
    """Forgetting an entry deletes its stored vector and drops it from the in-memory index."""
    await fill(client, host, [entry({"k": "puppy"}, PUPPY)])
    assert {"k": "puppy"} in keys_of(await client.retrieve(query=PARAPHRASE))  # loads the index
    count = "SELECT count(*) FROM vectors"
    with sqlite3.connect(db_path) as conn:
        before = conn.execute(count).fetchone()[0]
    assert before == len(DISTRACTORS) + 1
    assert await client.forget(keys=[{"k": "puppy"}]) == 1
    with sqlite3.connect(db_path) as conn:
        assert conn.execute(count).fetchone()[0] == before - 1
    await host.search.drain()
    assert host.search.index is not None and len(host.search.index) == before - 1
    assert {"k": "puppy"} not in keys_of(await client.retrieve(query=PARAPHRASE, limit=20))


async def _engine(path: Path, embedder: Embedder) -> tuple[SQLiteEntryStore, SearchEngine]:
    store = SQLiteEntryStore(path)
    await store.open()
    engine = SearchEngine(store, embedder, load_config().search)
    await engine.start(worker=False)
    return store, engine


async def _put(store: SQLiteEntryStore, scope: Scope, texts: dict[str, str]) -> None:
    await store.put(scope, [NewEntry("episodic", canonical_key({"k": k}), f'"{t}"'.encode())
                            for k, t in texts.items()], 1.0)


async def test_keyword_findable_before_vector_exists(tmp_path: Path, embedder: Embedder) -> None:
    """A committed entry is found by keyword before the worker wrote its vector, and by
    meaning once it has."""
    store, engine = await _engine(tmp_path / "a.db", embedder)
    scope, q = Scope("ns", "a1"), Query(tiers=("episodic", "semantic"))
    try:
        await _put(store, scope, {f"d{i}": t for i, t in enumerate(DISTRACTORS)})
        await engine.drain()
        await _put(store, scope, {"puppy": PUPPY})
        assert await store.vector_queue() == 1
        found = await engine.search(scope, q, "adopted puppy", 2.0, 100)
        assert [e.key for e in found] == [canonical_key({"k": "puppy"})]
        assert found[0].relevance is not None and 0 < found[0].relevance < 1
        by_meaning = await engine.search(scope, q, PARAPHRASE, 2.0, 100)
        assert canonical_key({"k": "puppy"}) not in [e.key for e in by_meaning]
        assert await engine.drain() == 1 and await store.vector_queue() == 0
        by_meaning = await engine.search(scope, q, PARAPHRASE, 2.0, 100)
        best = max(by_meaning, key=lambda e: e.relevance or 0.0)
        assert best.key == canonical_key({"k": "puppy"})
    finally:
        await engine.stop()
        await store.close()


async def test_judgement_reads_the_vectors_the_store_holds(
    tmp_path: Path, embedder: Embedder
) -> None:
    """What the judgement of a reply reads its matches' vectors from (the namespace's index in
    memory, the store for what it lacks) gives the store's own vectors, bit for bit: for
    entries in the index, one not embedded yet, one embedded after the index was loaded, an
    id that is no entry, and a namespace whose index is not loaded."""
    store, engine = await _engine(tmp_path / "a.db", embedder)
    scope, q = Scope("ns", "a1"), Query(tiers=("episodic", "semantic"))
    dim = embedder.dim

    async def same(namespace: str, ids: list[int]) -> None:
        got, vecs = await engine.stored_vectors(namespace).vectors_of(ids, dim)
        want, wvecs = await store.vectors_of(ids, dim)
        assert sorted(got) == sorted(want)
        by_id = dict(zip(want, wvecs.tolist(), strict=True))
        assert all(by_id[i] == v for i, v in zip(got, vecs.tolist(), strict=True))
        assert vecs.dtype == np.float32

    try:
        await _put(store, scope, {f"d{i}": t for i, t in enumerate(DISTRACTORS)})
        await engine.drain()
        await same("ns", [1, 2])  # not loaded yet: the store's
        ids = [e.id for e in await engine.search(scope, q, "meeting room budget", 2.0, 100)]
        assert engine.index is not None and engine.index.get("ns") is not None
        await _put(store, scope, {"puppy": PUPPY})  # no vector yet
        ids = [i for i in ids if i is not None] + [len(DISTRACTORS) + 1, 999]
        await same("ns", ids)
        await engine.drain()  # now in the store and the loaded index
        await same("ns", ids)
        await same("other", ids)
    finally:
        await engine.stop()
        await store.close()


async def test_changing_embedder_reembeds(
    tmp_path: Path, embedder: Embedder, embedding_endpoint: tuple[str, list[dict[str, Any]]]
) -> None:
    """Opening the store with another embedder drops the old vectors, records the new model
    and re-embeds every entry."""
    path = tmp_path / "a.db"
    scope = Scope("ns", "a1")
    store, engine = await _engine(path, embedder)
    await _put(store, scope, {"puppy": PUPPY, "budget": DISTRACTORS[0]})
    assert await engine.drain() == 2
    await engine.stop()
    await store.close()
    with sqlite3.connect(path) as conn:
        old = dict(conn.execute("SELECT entry_id, vec FROM vectors"))

    # another model: an OpenAI-compatible endpoint (a real local server) with a document prefix
    other = OpenAIEmbedder(embedding_endpoint[0], "other-model", document_prefix="note: ")
    store, engine = await _engine(path, other)
    try:
        assert await store.vector_queue() == 2
        assert await engine.drain() == 2
        with sqlite3.connect(path) as conn:
            meta = dict(conn.execute("SELECT name, value FROM search_meta"))
            new = dict(conn.execute("SELECT entry_id, vec FROM vectors"))
        assert meta["model"] == other.name != embedder.name
        assert new.keys() == old.keys()
        assert all(not np.array_equal(np.frombuffer(new[i], np.float32),
                                      np.frombuffer(old[i], np.float32)) for i in new)
    finally:
        await engine.stop()
        await store.close()


async def test_restored_text_keeps_vector(tmp_path: Path, embedder: Embedder) -> None:
    """Re-storing an entry with the same text keeps its vector; a new text re-embeds it."""
    path = tmp_path / "a.db"
    store, engine = await _engine(path, embedder)
    scope = Scope("ns", "a1")
    try:
        await _put(store, scope, {"puppy": PUPPY})
        await engine.drain()
        with sqlite3.connect(path) as conn:
            first = conn.execute("SELECT vec FROM vectors").fetchone()[0]
        await _put(store, scope, {"puppy": PUPPY})
        assert await store.vector_queue() == 1 and await engine.drain() == 1
        with sqlite3.connect(path) as conn:
            assert conn.execute("SELECT vec FROM vectors").fetchone()[0] == first
        await _put(store, scope, {"puppy": DISTRACTORS[1]})
        await engine.drain()
        with sqlite3.connect(path) as conn:
            assert conn.execute("SELECT vec FROM vectors").fetchone()[0] != first
    finally:
        await engine.stop()
        await store.close()


async def test_reindex_command_embeds_queue_and_all(tmp_path: Path) -> None:
    """`a2e-host reindex` embeds the queued entries; `--all` recomputes every vector."""
    from support.hosts import run_cli

    path = tmp_path / "a.db"
    store = SQLiteEntryStore(path)
    await store.open()
    await _put(store, Scope("ns", "a1"), {"puppy": PUPPY, "budget": DISTRACTORS[0]})
    await store.close()
    done = run_cli("reindex", "--db", str(path))
    assert done.returncode == 0, done.stderr
    assert b"embedded 2 entries" in done.stdout
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM vectors").fetchone()[0] == 2
        assert conn.execute("SELECT count(*) FROM embed_queue").fetchone()[0] == 0
    assert b"embedded 0 entries" in run_cli("reindex", "--db", str(path)).stdout
    assert b"embedded 2 entries" in run_cli("reindex", "--all", "--db", str(path)).stdout


async def test_long_texts_are_embedded_up_to_the_cap(
    tmp_path: Path, embedder: Embedder, embedding_endpoint: tuple[str, list[dict[str, Any]]]
) -> None:
    """A long entry or query reaches the embedder cut to `search.max_embed_chars` (embedding
    costs grow with the text: a frame of long texts would otherwise hold the embedding threads
    for minutes), while the whole text stays keyword-searchable."""
    url, seen = embedding_endpoint
    store = SQLiteEntryStore(tmp_path / "a.db")
    await store.open()
    cfg = load_config().search
    engine = SearchEngine(store, OpenAIEmbedder(url, "m"), cfg)
    await engine.start(worker=False)
    scope = Scope("ns", "a1")
    try:
        tail = "zebra " * 3000  # 18,000 characters after the first words
        await _put(store, scope, {"long": f"{PUPPY} {tail}needle", "short": DISTRACTORS[0]})
        assert await engine.drain() == 2
        q = Query(tiers=("episodic",), limit=5)
        found = await engine.search(scope, q, "needle " + "puppy " * 3000, 10.0, 100)
        assert [e.key for e in found] == [canonical_key({"k": "long"})]
        sizes = [len(t) for r in seen for t in r["body"]["input"]]
        assert sizes and max(sizes) <= cfg.max_embed_chars < len(tail)
    finally:
        await engine.stop()
        await store.close()


async def test_neighbours_of_a_match_rank_right_below_it(client: MemoryClient, host: Host) -> None:
    """The entries written right before and after a strong match (a question and its reply)
    rank just below it, above unrelated entries; an entry of another tier is no neighbour."""
    await fill(client, host, [
        entry({"q": 1}, "How long have you and your husband been married?"),
        entry({"a": 1}, "Five years already, time flies!"),
        entry({"s": 1}, "Seven years of weather records", "semantic"),
        entry({"x": 1}, "The queue at the bakery was long this morning."),
    ])
    got = await client.retrieve(query="How long has Mel been married?", limit=20)
    keys = keys_of(got)
    assert keys[0] == {"q": 1} and {"a": 1} in keys[1:3]  # the other neighbour: {"d": 7}
    rel = {json.dumps(e["key"]): e["relevance"] for e in got.entries}
    assert rel['{"a": 1}'] < rel['{"q": 1}']
    assert rel['{"a": 1}'] > max(rel.get(json.dumps({"d": i}), 0.0) for i in range(6))
    assert rel['{"a": 1}'] > rel.get('{"s": 1}', 0.0)


@pytest.mark.all_backends
@pytest.mark.parametrize("intruder", [("b", "bob", "semantic"), ("a", "carol", "episodic")])
async def test_other_tenants_writes_between_a_question_and_its_reply_change_nothing(
    connect: Callable[..., Any], host: Host, intruder: tuple[str, str, str]
) -> None:
    """Entries another namespace or another agent writes between a question and its reply (in
    the store's order) leave the reply's lift, and the asker's result order, as they were."""
    async def asked(namespace: str, between: bool) -> list[Any]:
        alice: MemoryClient = await connect()
        await alice.init(namespace, {"agent": "alice"})
        await alice.store([entry({"d": i}, t) for i, t in enumerate(DISTRACTORS)]
                          + [entry({"q": 1}, "How long have you and your husband been married?")])
        if between:
            other: MemoryClient = await connect()
            ns, agent, tier = intruder
            await other.init(namespace if ns == "a" else "other", {"agent": agent})
            for i in range(3):
                await other.store([entry({"n": i}, f"Note {i} about the garden", tier)])
        await alice.store([entry({"a": 1}, "Five years already, time flies!"),
                           entry({"x": 1}, "The queue at the bakery was long this morning.")])
        await host.search.drain()
        return keys_of(await alice.retrieve(query="How long has Mel been married?", limit=5))

    alone = await asked("alone", False)
    assert {"a": 1} in alone[1:3]
    assert await asked("mixed", True) == alone
