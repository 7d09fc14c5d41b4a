"""Judgement of a query's reply: the present first, and no repeats (docs/search.md, "Judgement").

A query's matches, ranked by their combined score (`host.search.rank.rank_matches`), are
judged among themselves, at read time, deterministically (no model call: the vectors the host
already keeps, read back from the store), within the first `DEPTH` of them and among those
whose relevance to the query is at least `RELEVANCE` (both must answer the question):

1. **near-duplicates collapse** (when the request asks, `collapse`). Two matches are
   near-duplicates when the cosine similarity of their stored vectors is at least `DUPLICATE`,
   neither says the other changed (step 2's words) and they do not `conflict`: a number or a
   word of time in one and not the other, or capitalised names on both sides with none in
   common ("Atlas ... 3 March" is not "Borealis ... 21 April" however close the rest).
   Groups are complete-linkage (every member a near-duplicate of every other), formed in rank
   order; a group is replaced by its newest member (`updated_at`, then the row id), at the
   place of its best-ranked one and with its combined score, carrying the others' keys
   (`collapsed`).
2. **an update supersedes** (by default, `supersede`). A match supersedes an older one when
   each is the other's most similar among the judged matches (about the same thing), their
   cosine is at least `SUPERSEDE`, and the newer says it changed: it holds a word of
   `CHANGE_WORDS` the older does not ("now", "switched", "moved", "instead", ...) and none
   of `MORE_WORDS` ("also", "too": an addition, not a change). The newer then ranks right
   above the match it supersedes (if it was below) and carries its key (`supersedes`); the
   older stays in the reply, just below it. Without the mutual nearest, a long turn of a
   conversation that says "now" superseded dozens (LoCoMo recall@10 0.78 -> 0.73).
3. **a fact that holds now before one that does not** (with `supersede`, when the read gives
   its instant `now`: a retrieve's `as_of`, else the time of the read). A match whose bounds
   (`valid_from` / `valid_until`, [from, until)) do not hold `now` (its fact has ended, or not
   begun yet) is superseded by a match that holds now (or has no bounds) when they are step
   2's pair across that line: each the other's most similar on the other side (the current
   match's nearest among those not valid now, and theirs among the current ones) and their
   cosine at least `SUPERSEDE`. That match ranks right above it, as in step 2, and carries
   its key. The bounds are the agent's word that the fact is over, so no word of change is
   asked for, nor that the current match be the newer (a fact written after its successor,
   to record the past, is still the past). A match not valid now without such a counterpart
   keeps its place: it may be the only answer ("where did I live before?"; without the
   mutual nearest, a third of such answers lost their first place to a current fact merely
   near them, `scripts/bench/eval_judgement.py`'s ended facts). Step 2 does not let a match
   not valid now supersede one valid now, and step 1 does not group the two (a fact that
   ended is not a saying of one that holds), so the order has no cycle. With `as_of` every
   match holds then (the stores filter the others out), so this step moves nothing; with
   every match valid now (no bounds), nothing here runs.

Nothing else moves: a match that no newer one supersedes keeps the place its relevance gave
it. A newer fact that does not say it changed ("My favourite food is ramen." after "... is
sushi.") is not told from a second, different fact ("I'm allergic to penicillin." after "...
to peanuts."): it is left where the ranking puts it. The thresholds were chosen on the tuning
half of `scripts/bench/eval_judgement.py`'s families and checked on the other half; a match without
a vector (not embedded yet, a working entry, one stored with a client's vectors only) is never
judged.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, overload

import numpy as np
from msgspec import Raw

from host.text.keyword import COMMON_WORDS, STOP_WORDS
from host.text.searchable import searchable_text
from protocol.messages import Collapsed, EntryOut
from protocol.validity import valid_at

__all__ = ["CHANGE_WORDS", "DEPTH", "DUPLICATE", "MORE_WORDS", "SUPERSEDE", "Judged",
           "Thresholds", "VectorsOf", "conflict", "content_text", "judge", "mark", "plan",
           "says_change", "stored_vectors"]

DUPLICATE = 0.80
SUPERSEDE = 0.40
DEPTH = 50
RELEVANCE = 0.2
SINGLE = False

# words by which a newer entry says that something changed (compared as lower-case words)
CHANGE_WORDS = frozenset((
    "now", "switched", "switch", "moved", "changed", "change", "new", "instead", "replaced",
    "anymore", "longer", "lately", "stopped", "quit", "left", "cancelled", "canceled",
    "dropped", "raised", "lowered", "migrated", "sold", "finished", "became", "updated",
    "gave", "nowadays", "currently", "former", "formerly",
))
# words by which it says that it adds to it
MORE_WORDS = frozenset(("also", "too", "additionally", "besides", "as well"))

COMMON = STOP_WORDS | COMMON_WORDS | {"user", "users", "please", "our", "my", "the"}
# words of time, compared without a final "s" ("Mondays" is "monday")
TIME_WORDS = frozenset((
    "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday", "january",
    "february", "march", "april", "may", "june", "july", "august", "september", "october",
    "november", "december", "yesterday", "today", "tonight", "tomorrow", "morning",
    "afternoon", "evening", "night", "week", "weekend", "month", "year", "spring", "summer",
    "autumn", "fall", "winter", "holiday", "ago", "daily", "weekly", "monthly", "yearly",
))
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*|\d[\d.,:/-]*")
_NUMBER = re.compile(r"\d+")


@dataclass(frozen=True, slots=True)
class Thresholds:
    """The rule's parameters (the module's constants by default)."""

    duplicate: float = DUPLICATE
    supersede: float = SUPERSEDE
    depth: int = DEPTH
    relevance: float = RELEVANCE
    single: bool = SINGLE


class VectorsOf(Protocol):
    """Where the judgement reads its matches' vectors: a store (`EntryStore.vectors_of`), or
    the search engine's copy of them in memory (`SearchEngine.stored_vectors`)."""

    async def vectors_of(self, ids: Sequence[int], dim: int) -> tuple[list[int], np.ndarray]:
        ...


class _Entry(Protocol):
    @property
    def id(self) -> int | None: ...
    @property
    def key(self) -> bytes: ...
    @property
    def content(self) -> bytes: ...
    @property
    def updated_at(self) -> float: ...


E = TypeVar("E", bound=_Entry)


@dataclass(slots=True)
class Judged:
    """What a judged match says beyond its entry: the keys it supersedes and those of the
    near-duplicates it stands for (best-ranked first)."""

    supersedes: list[bytes] = field(default_factory=list)
    collapsed: list[bytes] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Said:
    """What the rule reads of a text: its numbers, words of time, names and lower-case words."""

    numbers: frozenset[str]
    times: frozenset[str]
    names: frozenset[str]
    words: frozenset[str]

    @classmethod
    def of(cls, text: str) -> _Said:
        words = _WORD.findall(text)
        low = frozenset(w.lower() for w in words)
        return cls(frozenset(_NUMBER.findall(text)),
                   frozenset(w.rstrip("s") for w in low) & TIME_WORDS, _names(words), low)


def _names(words: list[str]) -> frozenset[str]:
    """Capitalised words, but a first word that is a common word ("The", "My": a sentence's
    first word is capitalised anyway) and "I"."""
    out = {w.lower() for w in words[1:] if w[0].isupper()}
    if words and words[0][0].isupper() and words[0].lower() not in COMMON:
        out.add(words[0].lower())
    return frozenset(out - {"i", "i'm", "i've", "i'd", "i'll"})


def _conflict(a: _Said, b: _Said) -> bool:
    return (a.numbers != b.numbers or a.times != b.times
            or (bool(a.names) and bool(b.names) and not a.names & b.names))


def _says_change(newer: _Said, older: _Said) -> bool:
    return bool((newer.words - older.words) & CHANGE_WORDS) and not newer.words & MORE_WORDS


def conflict(a: str, b: str) -> bool:
    """Whether texts `a` and `b` name different things: a number or a word of time
    (`TIME_WORDS`) in one that the other lacks, or capitalised names on both sides with none
    in common."""
    return _conflict(_Said.of(a), _Said.of(b))


def says_change(newer: str, older: str) -> bool:
    """Whether `newer` says that what `older` says changed: a `CHANGE_WORDS` word `older`
    lacks, and no `MORE_WORDS` word."""
    return _says_change(_Said.of(newer), _Said.of(older))


class _Lazy(dict[int, _Said]):
    """`_Said` of each text, read when first asked for."""

    def __init__(self, texts: Sequence[str]) -> None:
        super().__init__()
        self.texts = texts

    def __missing__(self, i: int) -> _Said:
        text = self.texts[i]
        out = _SAID.get(text)
        if out is None:
            out = _Said.of(text)
            if len(text) <= _SAID_TEXT_MAX:
                if len(_SAID) >= _SAID_MAX:
                    _SAID.clear()
                _SAID[text] = out
        self[i] = out
        return out


# what the rule read of recent texts (a memory's matches come back query after query), bounded:
# at most `_SAID_MAX` texts of at most `_SAID_TEXT_MAX` characters (a few MB), emptied when full
_SAID: dict[str, _Said] = {}
_SAID_MAX = 4096
_SAID_TEXT_MAX = 2000


class _Texts(Sequence[str]):
    """The compared text of each match, read when first asked for (`plan` reads few: those it
    compares); "" for a match without a vector (None)."""

    def __init__(self, entries: list[Any], read: Callable[[Any], str]) -> None:
        self.entries = entries
        self.read = read

    def __len__(self) -> int:
        return len(self.entries)

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[str]: ...

    def __getitem__(self, i: int | slice) -> str | Sequence[str]:
        if isinstance(i, slice):
            return [self[j] for j in range(len(self))[i]]
        e = self.entries[i]
        return "" if e is None else self.read(e)


def plan(sims: np.ndarray, texts: Sequence[str], newness: Sequence[tuple[float, int]],
         th: Thresholds = Thresholds(), relevance: Sequence[float] | None = None,
         supersede: bool = True, collapse: bool = True,
         current: Sequence[bool] | None = None,
         ) -> list[tuple[int, list[int], list[int]]]:
    """The judged order of `n` ranked matches (best first) from their pairwise cosines `sims`
    (`(n, n)`, NaN for a match without a vector), their texts and their newness (`updated_at`,
    row id) and `relevance` to the query (a match below `th.relevance` is not judged): a list
    of (match index, indices it supersedes, indices it stands for), each index in exactly
    one row as the first item or among those it stands for. Steps 1 and 2 of the module's
    docstring, each when asked (`collapse`, `supersede`), and step 3 with `current` (whether
    each match's bounds hold at the read's instant; None: every match holds)."""
    n = len(texts)
    if current is not None and all(current):
        current = None  # nothing ended or to come: steps 1 and 2 exactly
    ok = np.isfinite(np.diag(sims)) if n else np.zeros(0, dtype=bool)
    if relevance is not None:
        ok = ok & (np.asarray(relevance, dtype=np.float64) >= th.relevance)
    said = _Lazy(texts)
    groups: list[list[int]] = []
    dup = (sims >= th.duplicate).tolist() if collapse else []  # NaN: False, as sims[i, j] >= x
    ok = ok.tolist()
    for i in range(n):
        # a group takes `i` only if `i` is a near-duplicate of one of its members (of all of
        # them unless `th.single`): with none among the earlier matches, no group can
        if ok[i] and collapse and True in dup[i][:i]:
            for g in groups:
                near = [dup[i][j] for j in g]
                if ok[g[0]] and (current is None or current[i] == current[g[0]]) and (
                        any(near) if th.single else all(near)) and not any(
                        _conflict(said[i], said[j]) or _says_change(said[i], said[j])
                        or _says_change(said[j], said[i]) for j in g):
                    g.append(i)
                    break
            else:
                groups.append([i])
        else:
            groups.append([i])
    reps = [g[0] if len(g) == 1 else max(g, key=newness.__getitem__) for g in groups]
    sup: list[list[int]] = [[] for _ in groups]
    judged = [a for a, r in enumerate(reps) if ok[r]] if supersede else []
    if len(judged) > 1:
        rows = [reps[a] for a in judged]
        close = sims[np.ix_(rows, rows)].copy()
        np.fill_diagonal(close, -np.inf)
        nearest = close.argmax(axis=1).tolist()
        for x, a in enumerate(judged):  # each other's nearest: about the same thing
            y = nearest[x]
            b = judged[y]
            ra, rb = reps[a], reps[b]
            if (nearest[y] == x and newness[ra] > newness[rb] and sims[ra, rb] >= th.supersede
                    and (current is None or current[ra] or not current[rb])
                    and _says_change(said[ra], said[rb])):
                sup[a].append(b)
        if current is not None:  # step 3: each match not valid now, after its nearest that is
            holding = [y for y, a in enumerate(judged) if current[reps[a]]]
            over = [y for y, a in enumerate(judged) if not current[reps[a]]]
            if holding and over:
                for x in over:
                    y = holding[int(close[x, holding].argmax())]
                    if over[int(close[y, over].argmax())] != x:
                        continue
                    a, b = judged[y], judged[x]
                    if close[x, y] >= th.supersede and b not in sup[a]:
                        sup[a].append(b)
    # a superseding match takes the place of the best-ranked match it supersedes, just
    # above it (the newest first among those that share a place); nothing else moves (no
    # supersession: the groups' own order). A place is taken through a chain too (a current
    # match above an ended one that supersedes an older one: step 3 over step 2), and among
    # superseding matches that share it, one valid now comes first.
    order: Sequence[int] = range(len(groups))
    if any(sup):
        place = _places(sup)
        late = [0] * len(groups) if current is None else [
            0 if current[r] else 1 for r in reps]
        order = sorted(order, key=lambda a: (
            place[a], 0 if sup[a] else 1, late[a], tuple(-x for x in newness[reps[a]]), a))
    return [(reps[a], [reps[b] for b in sorted(sup[a])] if sup[a] else [],
             [j for j in g if j != reps[a]] if len(g := groups[a]) > 1 else [])
            for a in order]


def _places(sup: list[list[int]]) -> list[int]:
    """The place each group takes: the best (lowest) of its own and of the places of those it
    supersedes. The supersessions have no cycle: none goes from a match not valid now to one
    that is (step 2 refuses it, step 3's go the other way), and among matches alike in that,
    only step 2's, from newer to older."""
    place = list(range(len(sup)))
    done = [False] * len(sup)

    def of(a: int) -> int:
        if not done[a]:
            done[a] = True  # set first: a cycle, which the rule cannot make, would end here
            place[a] = min([a] + [of(b) for b in sup[a]])
        return place[a]

    for a in range(len(sup)):
        of(a)
    return place


def content_text(e: _Entry) -> str:
    """The text of an entry's content (its strings, as the keyword index reads them), without
    its key: a turn number in a key is no number of what it says."""
    content = e.content
    kept = isinstance(content, bytes)  # hashable, as a StoredEntry's
    out = _TEXT.get(content) if kept else None
    if out is None:
        try:
            out = searchable_text(json.loads(content))
        except ValueError:
            out = content.decode("utf-8", "replace")
        if kept and len(content) <= _SAID_TEXT_MAX:
            if len(_TEXT) >= _TEXT_MAX:
                _TEXT.clear()
            _TEXT[content] = out
    return out


# the text of recent contents (judged query after query), bounded: at most `_TEXT_MAX` of
# at most `_SAID_TEXT_MAX` bytes (~4 MB with their texts), emptied when full
_TEXT: dict[bytes, str] = {}
_TEXT_MAX = 1024


async def stored_vectors(store: VectorsOf | None, ids: Sequence[int], dim: int
                         ) -> dict[int, np.ndarray]:
    """The stored vectors of entry `ids` ({id: unit vector}) from a store that reads them back
    (SQLite's and PostgreSQL's, or the search engine's copy in memory); empty without one."""
    if store is None or not ids:
        return {}
    got, vecs = await store.vectors_of(list(ids), dim)
    return {int(i): np.asarray(v, dtype=np.float64) for i, v in zip(got, vecs, strict=True)}


def mark(out: EntryOut, judged: Judged | None) -> EntryOut:
    """`out` (a reply's entry) with what its judgement says it carries, if anything."""
    if judged is not None:
        if judged.supersedes:
            out.supersedes = [Raw(k) for k in judged.supersedes]
        if judged.collapsed:
            out.collapsed = Collapsed(count=len(judged.collapsed),
                                      keys=[Raw(k) for k in judged.collapsed])
    return out


async def judge(
    ranked: list[tuple[float, E]], store: VectorsOf | None, dim: int,
    th: Thresholds = Thresholds(),
    text: Any = None, supersede: bool = True, collapse: bool = True,
    now: float | None = None,
) -> tuple[list[tuple[float, E]], dict[int, Judged]]:
    """The ranked matches judged (first `th.depth` of them; the rest follow as they were) and,
    by `id()` of the entries that carry something, what they carry. `text(entry)` gives the
    text compared for names, numbers and words of change (default: the content, decoded).
    `now`: the read's instant (its `as_of`, else the time of the read), at which each entry's
    `valid_from` / `valid_until` are read (step 3 of the module's docstring); None reads no
    bounds."""
    head = ranked[: th.depth]
    # only the matches that answer the question are judged: the others' vectors are not read
    ids = [e.id for _c, e in head
           if e.id is not None and (getattr(e, "relevance", None) or 0.0) >= th.relevance]
    if len(ids) < 2:
        return ranked, {}
    vecs = await stored_vectors(store, ids, dim)
    if len(vecs) < 2:
        return ranked, {}
    n = len(head)
    have = [k for k, (_c, e) in enumerate(head) if e.id in vecs]
    mat = np.stack([vecs[head[k][1].id] for k in have])  # type: ignore[index]
    sims = np.full((n, n), np.nan)
    # einsum, not BLAS: a 50 x 384 product took ~50 ms in the host, BLAS's threads spinning
    # against the embedder's on 2 cores (0.2 ms alone)
    sims[np.ix_(have, have)] = np.einsum("ij,kj->ik", mat, mat)
    read = text or content_text
    texts = _Texts([e if e.id in vecs else None for _c, e in head], read)
    newness = [(e.updated_at, e.id or 0) for _c, e in head]
    out: list[tuple[float, E]] = []
    notes: dict[int, Judged] = {}
    rel = [getattr(e, "relevance", None) or 0.0 for _c, e in head]
    current = None if now is None else [
        valid_at(getattr(e, "valid_from", None), getattr(e, "valid_until", None), now)
        for _c, e in head]
    for k, sup, coll in plan(sims, texts, newness, th, rel, supersede, collapse, current):
        c, e = head[k]
        if sup or coll:
            notes[id(e)] = Judged([head[j][1].key for j in sup], [head[j][1].key for j in coll])
            c = max([c] + [head[j][0] for j in coll])
        out.append((c, e))
    return out + ranked[th.depth:], notes
