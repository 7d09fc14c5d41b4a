"""Keyword relevance: the tokeniser and the [0, 1] score shared by every store and tier.

Tokens are maximal runs of letters and digits, case-folded, with diacritics removed (the same
rule as SQLite FTS5's `unicode61 remove_diacritics 2`, so the SQL candidate search and this
module agree). Query terms are the distinct tokens of the query minus common English stop words
(unless nothing else is left).

    relevance = (matched query terms) / (query terms)

so a match needs at least one shared term (the documented floor: relevance > 0), and
`min_score=0.5` keeps entries that share at least half of the query's terms.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable
from typing import TypeVar

__all__ = ["COMMON_WORDS", "STOP_WORDS", "Coverage", "coverage", "fts_match_expression",
           "pair_coverage", "query_terms", "stem", "stems", "term_weights", "tokens"]

_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)

# The pieces the tokeniser splits off possessives and contractions ("user's" -> "user", "s";
# "don't" -> "don", "t") are stop words too: "What's the weather?" does not match "The user's
# laptop" on "s".
STOP_WORDS: frozenset[str] = frozenset(
    """a an and are as at be but by did do does for from had has have he her his how i in is it
    its me my of on or our she so that the their them they this to was we were what when where
    which who whom why will with you your am been being any some there can could would should
    about into if than then also just very s t d m ll re ve don doesn didn isn aren wasn""".split()
)

# Words of questions that say little about what is asked ("What do I need to get?"): a term
# among them counts a third in `term_weights`. A fixed list, the same for every namespace.
COMMON_WORDS: frozenset[str] = frozenset(
    """get got need want like know go going make take use thing things time day days good new
    much many more one first last next every other still really well way back see look say said
    tell told think feel ever often usual usually kind sort lot place people""".split()
)


def _fold(text: str) -> str:
    text = text.casefold()
    if text.isascii():
        return text
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c))


class _TokenChars(dict[int, str]):
    """`str.translate` table of the tokeniser: each character to its folded form (`_fold`) with
    every character that is not a letter or digit as a space, so that `split()` gives the
    tokens `_TOKEN` finds in the folded text (a character's fold is its own: case folding and
    NFKD decompose character by character, and the combining marks that canonical ordering
    could move are dropped). Filled as characters are met, at most `MAX` of them kept: a full
    table is emptied (not frozen, which left every character met later, whoever's text it
    was, to this method)."""

    MAX = 65536

    def __missing__(self, c: int) -> str:
        out = "".join(x if x.isalnum() else " " for x in _fold(chr(c)))
        if len(self) >= self.MAX:
            self.clear()
        self[c] = out
        return out


_TOKEN_CHARS = _TokenChars()
for _c in range(128):
    _TOKEN_CHARS[_c]  # noqa: B018 - the ASCII characters, filled at import


def tokens(text: str) -> list[str]:
    """The tokens of `text`, in order, case-folded and without diacritics."""
    return text.translate(_TOKEN_CHARS).split()


def query_terms(query: str) -> tuple[str, ...]:
    """The distinct search terms of a query, in first-seen order, stop words dropped."""
    seen = dict.fromkeys(tokens(query))
    terms = tuple(t for t in seen if t not in STOP_WORDS)
    return terms or tuple(seen)


def coverage(terms: tuple[str, ...], text: str) -> float:
    """The share of `terms` found among the tokens of `text`, in [0, 1]."""
    if not terms:
        return 0.0
    return sum(map(_TOKEN_SETS[text].__contains__, terms)) / len(terms)


MAX_KEPT_TEXT = 2048  # longer texts' token sets are not cached
_V = TypeVar("_V")


class _Kept(dict[str, _V]):
    """key -> `make(key)`, made once and kept, looked up at C speed (a miss calls
    `__missing__`): at most `MAX` keys of at most `longest` characters each (a longer key's
    value is made each time), emptied when full (as `_TokenChars`)."""

    def __init__(self, make: Callable[[str], _V], most: int, longest: int) -> None:
        super().__init__()
        self.make, self.MAX, self.longest = make, most, longest

    def __missing__(self, key: str) -> _V:
        out = self.make(key)
        if len(key) <= self.longest:
            if len(self) >= self.MAX:
                self.clear()
            self[key] = out
        return out


# text -> the set of its `tokens`, for `coverage`: a memory's texts come back query after
# query (a keyword search scores ~100 candidates a query); 4096 texts (a few MB)
_TOKEN_SETS = _Kept(lambda text: frozenset(tokens(text)), 4096, MAX_KEPT_TEXT)


MAX_KEPT_TOKEN = 64  # longer tokens' stems are not cached (a cache entry holds its token)


def stem(token: str) -> str:
    """A light English stem of a token (plurals, -ing, -ed), the same for query and entry:
    "lives" and "live", "lessons" and "lesson" meet. Numbers and short tokens stay as they are."""
    return _STEM_OF[token]


def _stem(token: str) -> str:
    n = len(token)
    if n <= 3 or not token.isalpha():
        return token
    if token.endswith("ies") and n > 4:
        return token[:-3] + "y"
    if token.endswith("sses"):
        return token[:-2]
    if token.endswith("s") and not token.endswith(("ss", "us", "is")):
        token = token[:-1]
    elif token.endswith("ing") and n > 5:
        token = token[:-3]
    elif token.endswith("ed") and n > 4:
        token = token[:-2]
    return token[:-1] if token.endswith("e") and len(token) > 3 else token


def term_weights(query: str) -> dict[str, float]:
    """The stemmed content terms of a query (stop words out) with their weight in
    `pair_coverage`: 1, or a third for a `COMMON_WORDS` term. Empty when the query has none."""
    out: dict[str, float] = {}
    for t in dict.fromkeys(tokens(query)):
        if t not in STOP_WORDS:
            out.setdefault(stem(t), 1.0 / 3.0 if t in COMMON_WORDS else 1.0)
    return out


def pair_coverage(weights: dict[str, float], text: str) -> float:
    """The weighted share of a query's `term_weights` that `text` contains (stemmed alike), in
    [0, 1]: a property of the two texts alone, whatever else a memory holds."""
    total = math.fsum(weights.values())
    if total <= 0:
        return 0.0
    folded = _fold(text)
    return math.fsum(w for t, w in weights.items() if _holds(folded, t)) / total


# token -> `stem`, the one cache of stems, read by `stems`: 65536 tokens (a few MB), emptied
# when full (not frozen: any large memory holds that many distinct words, and every word met
# later, by any namespace, was stemmed anew each time)
_STEM_OF = _Kept(_stem, 65536, MAX_KEPT_TOKEN)


def stems(text: str) -> frozenset[str]:
    """The `stem` of every token of `text`: `pair_coverage(weights, text)` is the weighted
    share of the weights' terms among them (`Coverage.of`), which a caller can keep per text."""
    return frozenset(map(_STEM_OF.__getitem__, tokens(text)))


class Coverage:
    """`pair_coverage` of one query's `term_weights` over many texts' `stems`: the same
    result, a set lookup a term (both sums correctly rounded, `math.fsum`: the same float in
    any order, and a set's order follows the process's hash seed)."""

    __slots__ = ("_terms", "_total", "_weight")

    def __init__(self, weights: dict[str, float]) -> None:
        self._weight = weights.__getitem__
        self._terms = frozenset(weights)
        self._total = math.fsum(weights.values())

    def of(self, held: frozenset[str]) -> float:
        """The weighted share of the query's terms among the text's stems `held`."""
        if self._total <= 0:
            return 0.0
        return math.fsum(map(self._weight, self._terms.intersection(held))) / self._total


def _holds(folded: str, term: str) -> bool:
    """True when the folded text has a token whose `stem` is `term`. A stem is a prefix of its
    word (but for "-ies" -> "y"), so only the tokens starting with it are stemmed."""
    prefix = term.rstrip("y") or term
    i = folded.find(prefix)
    while i >= 0:
        if i == 0 or not folded[i - 1].isalnum():
            m = _TOKEN.match(folded, i)
            if m is not None and stem(m.group()) == term:
                return True
        i = folded.find(prefix, i + 1)
    return False


def fts_match_expression(terms: tuple[str, ...]) -> str:
    """An FTS5 MATCH expression for any of `terms` (each quoted as a phrase)."""
    return " OR ".join(f'"{t}"' for t in terms)
