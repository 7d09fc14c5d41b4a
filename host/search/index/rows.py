"""The rows of a vector index: each row's entry id, group and expiry, and the filters on them.

Shared by `ExactIndex` and `AnnIndex`: a row is a slot in parallel arrays (`ids`, `groups`,
`expires`), found by id through `_row`. A search's filters (the groups the agent may read, the
time, the `only` ids) become the allowed slots here, before anything is ranked.
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Iterable
from itertools import repeat

import numpy as np

from host.store.records import Hits

_NEVER = np.inf
# rows as an index's `add` takes them and its `rows()` gives them: ids, float32 vectors (one
# row each), groups, expiries (None: never)
Chunk = tuple[list[int], np.ndarray, list[str], list[float | None]]
# what `_row` (a dict id -> slot) holds a row besides its arrays: a dict entry and two ints
ROW_DICT_BYTES = 100


# ids mapped to slots a call by `row_map` (~1 ms: a thread building a million rows' map in one
# call held the GIL, and so the event loop, ~130 ms; 65,536 rows a call, ~10 ms each, still
# left the loop waiting 30-40 ms for it, a wait each time it asked for the GIL back)
ROW_MAP_STEP = 8192


def row_map(ids: np.ndarray, slots: np.ndarray, step: int = ROW_MAP_STEP) -> dict[int, int]:
    """{ids[s]: s for s in slots}, built `step` rows a call (the GIL may pass between two)."""
    out: dict[int, int] = {}
    for a in range(0, slots.size, step):
        part = slots[a: a + step]
        out.update(zip(ids[part].tolist(), part.tolist(), strict=True))
    return out


def group_of(tier: str, owner: str) -> str:
    """The group name of the rows of `tier` owned by `owner` ("" for semantic)."""
    return f"{tier}/{owner}"


def no_hits() -> Hits:
    return Hits(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32), 0.0, 0.0, 0)


def checked(
    dim: int, ids: Iterable[int], vectors: np.ndarray, groups: Iterable[str],
    expires: Iterable[float | None],
) -> tuple[list[int], np.ndarray, list[str], list[float | None]]:
    """The arguments of an index's `add` as lists and a contiguous float32 `(n, dim)` matrix
    (no ids: empty, whatever the rest); ValueError for another dimension or lengths that
    differ."""
    ids = [int(i) for i in ids]
    if not ids:  # nothing to add: the rest is not looked at
        return ids, np.zeros((0, dim), dtype=np.float32), [], []
    vecs = np.ascontiguousarray(vectors, dtype=np.float32).reshape(len(ids), -1)
    if vecs.shape[1] != dim:
        raise ValueError(f"vectors have dimension {vecs.shape[1]}, index has {dim}")
    groups, expires = list(groups), list(expires)
    if not len(groups) == len(expires) == len(ids):
        raise ValueError("ids, vectors, groups and expires differ in length")
    return ids, vecs, groups, expires


def chunk_of(ids: np.ndarray, vectors: np.ndarray, codes: np.ndarray, expires: np.ndarray,
             names: dict[int, str]) -> Chunk:
    """Rows of the arrays (ids, group codes, expiries with inf for never) as a `Chunk`;
    `names`: each group code's name (`Rows.group_names`)."""
    return (ids.tolist(), vectors, [names[int(c)] for c in codes],
            [None if not np.isfinite(e) else float(e) for e in expires])


def top_k(sims: np.ndarray, k: int) -> np.ndarray:
    """Positions of the `k` largest of `sims`, largest first (ties: lower position first)."""
    k = min(k, sims.size)
    top = np.argpartition(-sims, k - 1)[:k] if k < sims.size else np.arange(sims.size)
    return top[np.argsort(-sims[top], kind="stable")]


class Rows:
    """Slots of rows: id, group code, expiry; `live` marks slots holding a row (a subclass that
    never leaves holes keeps every slot below `_n` live). Created with room for `capacity`
    slots, grown as rows come (to what an add needs, at least double): a key of one row holds
    one slot, not a thousand."""

    holes = False  # True: slots below `_n` may be dead (`_live` says which)
    kind = "rows"
    dirty = False  # changed since last saved (an index that is saved)

    def __init__(self, capacity: int = 1) -> None:
        capacity = max(1, capacity)
        self._ids = np.zeros(capacity, dtype=np.int64)
        self._groups = np.zeros(capacity, dtype=np.int32)
        self._expires = np.full(capacity, _NEVER, dtype=np.float64)
        self._live = np.zeros(capacity, dtype=bool)
        self._n = 0  # slots used
        self._row: dict[int, int] = {}
        self._group_codes: dict[str, int] = {}
        self._group_rows: list[int] = []  # live rows a group code holds
        self._expiring = 0  # live rows with a finite expiry

    @property
    def slots(self) -> int:
        """Slots used (rows and holes)."""
        return self._n

    def __len__(self) -> int:
        return len(self._row)

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self._row

    def ids(self) -> np.ndarray:
        """The ids of every row (a copy)."""
        return self._ids[: self._n][self._live[: self._n]].copy() if self.holes \
            else self._ids[: self._n].copy()

    def meta_nbytes(self) -> int:
        cap = len(self._ids)
        return cap * (8 + 4 + 8 + 1) + len(self._row) * ROW_DICT_BYTES + sys.getsizeof(self._row)

    def vectors(self, ids: Iterable[int]) -> np.ndarray:  # pragma: no cover (subclasses')
        raise NotImplementedError

    def _scores(self, slots: np.ndarray | None, q: np.ndarray
                ) -> np.ndarray:  # pragma: no cover (subclasses')
        """Similarity of `q` to the (decoded) vectors of `slots` (None: every slot)."""
        raise NotImplementedError

    def similarity(self, query: np.ndarray, ids: Iterable[int]) -> np.ndarray:
        """Cosine similarity of `query` to each of `ids` (their stored vectors); NaN for ids
        without a row."""
        ids = list(ids)
        out = np.full(len(ids), np.nan, dtype=np.float64)
        rows = [(j, self._row[i]) for j, i in enumerate(ids) if i in self._row]
        if rows:
            pos, idx = zip(*rows, strict=True)
            q = np.asarray(query, dtype=np.float32).reshape(-1)
            out[list(pos)] = self._scores(np.array(idx, dtype=np.int64), q)
        return out

    def _top(self, sims: np.ndarray, k: int, slots: np.ndarray | None) -> Hits:
        """The `k` best of `sims` (the similarities of `slots`, None: of every slot) as hits,
        `mean`/`std` over all of them."""
        top = top_k(sims, k)
        picked = top if slots is None else slots[top]
        return Hits(ids=self._ids[picked].copy(), similarities=sims[top].astype(np.float32),
                    mean=float(sims.mean()), std=float(sims.std()), allowed=int(sims.size))

    def group_names(self) -> dict[int, str]:
        """Each group code's name."""
        return {c: g for g, c in self._group_codes.items()}

    def rows_of(self, ids: Iterable[int]) -> Chunk:
        """The rows of those of `ids` that have one, as `add` takes them (their vectors as
        float32, decoded): a copy of a part of the index."""
        present = [i for i in ids if i in self._row]
        slots = np.array([self._row[i] for i in present], dtype=np.int64)
        return chunk_of(np.array(present, dtype=np.int64), self.vectors(present),
                        self._groups[slots], self._expires[slots], self.group_names())

    def slots_of(self, ids: Iterable[int]) -> np.ndarray:
        """The slot of each of `ids` (-1: no row)."""
        return np.array([self._row.get(i, -1) for i in ids], dtype=np.int64)

    def meta_moved(self, slots: np.ndarray, groups: list[str],
                   expires: list[float | None]) -> np.ndarray:
        """Whether each of `slots` holds another group or expiry than given."""
        codes = np.array([self._group_codes.get(g, -1) for g in groups], dtype=np.int64)
        exps = np.array([np.inf if e is None else e for e in expires], dtype=np.float64)
        return (self._groups[slots] != codes) | (self._expires[slots] != exps)  # type: ignore[no-any-return]

    def _code(self, group: str) -> int:
        code = self._group_codes.get(group)
        if code is None:
            code = self._group_codes[group] = len(self._group_codes)
            self._group_rows.append(0)
        return code

    def _grow_meta(self, need: int) -> int:
        """Make room for `need` slots; the new capacity (unchanged when it was enough)."""
        cap = len(self._ids)
        if need <= cap:
            return cap
        new = max(need, cap * 2)
        self._ids = np.resize(self._ids, new)
        self._groups = np.resize(self._groups, new)
        expires = np.full(new, _NEVER, dtype=np.float64)
        expires[: self._n] = self._expires[: self._n]
        self._expires = expires
        live = np.zeros(new, dtype=bool)
        live[: self._n] = self._live[: self._n]
        self._live = live
        return new

    def _copy_slots(self, source: Rows) -> None:
        """The slots of `source` (ids, groups, expiries, liveness, the maps) as this index's,
        which holds no row yet: a coded copy of an index takes them so (its vectors its own)."""
        n = source._n
        self._grow_meta(max(1, n))
        self._n = n
        self._ids[:n], self._groups[:n] = source._ids[:n], source._groups[:n]
        self._expires[:n], self._live[:n] = source._expires[:n], source._live[:n]
        self._row = dict(source._row)
        self._group_codes = dict(source._group_codes)
        self._group_rows = list(source._group_rows)
        self._expiring = source._expiring

    def _set_slot(self, slot: int, entry_id: int, group: str, expires: float | None) -> None:
        """Fill a fresh slot (live from now on)."""
        code = self._code(group)
        self._ids[slot] = entry_id
        self._groups[slot] = code
        self._expires[slot] = _NEVER if expires is None else expires
        self._live[slot] = True
        self._group_rows[code] += 1
        self._expiring += expires is not None
        self._row[entry_id] = slot

    def _clear_slot(self, slot: int) -> None:
        """Forget a slot's row (its id stays in `_row` for the caller to pop)."""
        self._group_rows[int(self._groups[slot])] -= 1
        self._expiring -= bool(np.isfinite(self._expires[slot]))
        self._live[slot] = False

    def set_meta(self, entry_id: int, group: str, expires: float | None) -> bool:
        """Update the group and expiry of a row; False when `entry_id` has no row."""
        slot = self._row.get(entry_id)
        if slot is None:
            return False
        self._clear_slot(slot)
        self._set_slot(slot, entry_id, group, expires)
        return True

    def _only_slots(self, only: Iterable[int]) -> np.ndarray:
        found = np.fromiter(map(self._row.get, only, repeat(-1)), dtype=np.int64)
        return found[found >= 0]

    def allowed(
        self, groups: Collection[str] | None, now: float | None, only: np.ndarray | None
    ) -> np.ndarray | None:
        """The allowed slots, ascending; None when every row is allowed (no copy made)."""
        return self.allowed_mask(groups, now, only)[0]

    def allowed_mask(
        self, groups: Collection[str] | None, now: float | None, only: np.ndarray | None
    ) -> tuple[np.ndarray | None, np.ndarray | None]:
        """`allowed`, and the bool mask over slots it came from when one was made."""
        n = self._n
        every = (groups is None or all(
            g in groups for g, c in self._group_codes.items() if self._group_rows[c]))
        if every:
            groups = None
        if now is not None and self._expiring == 0:
            now = None
        if only is not None:
            only = np.asarray(only, dtype=np.int64).reshape(-1)
            if only.size * 8 < n:  # a few ids: look them up instead of scanning every row
                slots = np.unique(self._only_slots(only.tolist()))
                return slots[self._keep(slots, groups, now)], None
        if groups is None and now is None and only is None and not self.holes:
            return None, None
        mask = self._live[:n].copy() if self.holes else np.ones(n, dtype=bool)
        if groups is not None:
            codes = [self._group_codes[g] for g in groups if g in self._group_codes]
            # a comparison per allowed group: np.isin sorts, ~5x slower for a few groups
            g = self._groups[:n]
            ok = np.zeros(n, dtype=bool)
            for c in codes:
                if self._group_rows[c]:
                    ok |= g == c
            mask &= ok
        if now is not None:
            mask &= self._expires[:n] > now
        if only is not None:
            mask &= np.isin(self._ids[:n], only)
        return np.flatnonzero(mask), mask

    def _keep(self, slots: np.ndarray, groups: Collection[str] | None,
              now: float | None) -> np.ndarray:
        """Which of `slots` pass the group and expiry filters (a bool per slot)."""
        keep = np.ones(slots.size, dtype=bool)
        if self.holes:
            keep &= self._live[slots]
        if groups is not None:
            codes = np.array([self._group_codes[g] for g in groups if g in self._group_codes],
                             dtype=np.int32)
            keep &= np.isin(self._groups[slots], codes)
        if now is not None:
            keep &= self._expires[slots] > now
        return keep
