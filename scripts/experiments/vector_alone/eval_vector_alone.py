#!/usr/bin/env python3
"""Vector similarity alone on the evaluation's families, for another embedder's ONNX file.

Whether a candidate embedder is worth wiring into the host: the top-3 hit rate of exact cosine
over every entry, per family (paraphrase, keyword, exact) and memory of
`scripts/bench/eval_relevance.py` (the 30 facts alone, + 1,000 and + 10,000 generated sentences,
+ 600 LoCoMo turns with `--data`), for the host's default embedder and for each `--onnx` file:
a BERT-family sentence encoder that takes the MiniLM tokenizer the host ships (the uncased
WordPiece vocabulary of 30,522 tokens), mean-pooled over its token output, as
sentence-transformers does. No host: only the vectors.

    python scripts/experiments/vector_alone/eval_vector_alone.py --data PATH --onnx model.onnx
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from host.search.embed import _MINILM_TOKENIZER, MiniLMEmbedder, normalise  # noqa: E402
from host.text.searchable import searchable_text  # noqa: E402
from scripts.bench.eval_relevance import (  # noqa: E402
    DATA,
    generated_filler,
    label,
    locomo_filler,
    memory,
    questions,
)


class OnnxEncoder:
    """A mean-pooled BERT-family ONNX encoder with the host's MiniLM tokenizer."""

    def __init__(self, path: Path) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.log_severity_level = 3
        self.s = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        self.inputs = {i.name for i in self.s.get_inputs()}
        # the output of shape (batch, tokens, dim): the token states
        self.out = next(o.name for o in self.s.get_outputs() if len(o.shape) == 3)
        self.tok = Tokenizer.from_file(_MINILM_TOKENIZER)
        self.tok.enable_truncation(256)
        self.tok.enable_padding()
        self.name = path.stem

    def embed(self, texts: list[str], batch: int = 64) -> np.ndarray:
        out = []
        for i in range(0, len(texts), batch):
            encs = self.tok.encode_batch(texts[i:i + batch])
            ids = np.array([e.ids for e in encs], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encs], dtype=np.int64)
            feed = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self.inputs:
                feed["token_type_ids"] = np.zeros_like(ids)
            h = self.s.run([self.out], feed)[0]
            m = mask[..., None].astype(np.float32)
            out.append((h * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1.0))
        return normalise(np.concatenate(out).astype(np.float32))

    embed_queries = embed


def top3(emb: Any, entries: list[dict[str, Any]], data: dict[str, Any]) -> dict[str, int]:
    keys = [json.dumps(e["key"], sort_keys=True) for e in entries]
    vecs = emb.embed([searchable_text(e["content"], [], e["key"]) for e in entries])
    qs = [q for q in questions(data) if q.fact is not None]
    qv = emb.embed_queries([q.text for q in qs])
    hits: dict[str, int] = {}
    for q, v in zip(qs, qv, strict=True):
        best = {keys[j] for j in np.argsort(-(vecs @ v))[:3].tolist()}
        right = json.dumps({"fact": label(q.fact)}, sort_keys=True)
        hits[q.family] = hits.get(q.family, 0) + int(right in best)
    return hits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--onnx", type=Path, nargs="*", default=[])
    ap.add_argument("--data", type=Path, default=None, metavar="PATH", help="LoCoMo")
    args = ap.parse_args()
    data = json.loads(DATA.read_text())
    facts = [f["fact"] for f in data["facts"]]
    memories = [("30 facts", []), ("+ 1,000", generated_filler(1000)),
                ("+ 10,000", generated_filler(10000))]
    if args.data is not None:
        memories.append(("+ 600 LoCoMo", locomo_filler(args.data, ["26", "30"], 600)))
    embedders: list[Any] = [MiniLMEmbedder()] + [OnnxEncoder(p) for p in args.onnx]
    print("| embedder | memory | paraphrase | keyword | exact |\n|---|---|---|---|---|")
    for emb in embedders:
        for name, filler in memories:
            h = top3(emb, memory(facts, filler), data)
            print(f"| {emb.name} | {name} | {h.get('paraphrase', 0)}/30 | {h.get('keyword', 0)}/30"
                  f" | {h.get('exact', 0)}/10 |", flush=True)


if __name__ == "__main__":
    main()
