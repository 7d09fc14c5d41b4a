"""The files of a saved `AnnIndex`: the faiss index at `path`, and `path.meta.npz` (format, key,
dimension, options, a CRC of the faiss file, each slot's id, group, expiry and liveness).
`read` refuses anything that does not match (a corrupt, truncated or foreign file) before
faiss reads it. Each file is written through a temporary one renamed into place, the rows'
last: a file of rows always names a complete index."""

from __future__ import annotations

import json
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faiss as _faiss
import numpy as np

faiss: Any = _faiss  # its bundled type stubs miss much of the API used here
FORMAT = 1


@dataclass
class Saved:
    """What `read` found: the faiss index and its rows."""

    index: Any  # faiss's
    dim: int
    n: int
    options: dict[str, Any]
    groups: list[str]
    ids: np.ndarray
    gcodes: np.ndarray
    expires: np.ndarray
    live: np.ndarray


def _crc(path: Path) -> int:
    crc = 0
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            crc = zlib.crc32(block, crc)
    return crc


def exists(path: str | Path) -> bool:
    return Path(f"{path}.meta.npz").exists()


def discard(path: str | Path) -> None:
    """Remove the files saved at `path` (the rows' first: without them `read` finds nothing);
    absent files are no error."""
    Path(f"{path}.meta.npz").unlink(missing_ok=True)
    Path(path).unlink(missing_ok=True)


def write(path: str | Path, key: str, index: Any, dim: int, options: dict[str, Any],
          rows: dict[str, Any]) -> None:
    """Write faiss `index` to `path` and `rows` (`AnnIndex.slots_meta`) beside it."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    faiss.write_index(index, str(tmp))
    crc = _crc(tmp)
    os.replace(tmp, path)
    head = json.dumps({"format": FORMAT, "dim": dim, "n": rows["n"], "crc": crc,
                       "key": key, "groups": rows["groups"], "options": options})
    mtmp = path.with_name(path.name + ".meta.tmp.npz")
    np.savez(mtmp, head=np.frombuffer(head.encode("utf-8", "surrogatepass"), dtype=np.uint8),
             ids=rows["ids"], groups=rows["gcodes"], expires=rows["expires"], live=rows["live"])
    os.replace(mtmp, f"{path}.meta.npz")


def read(path: str | Path, key: str) -> Saved:
    """The files saved at `path` for `key`; ValueError when they do not match (not of this
    format, another key, corrupt, truncated)."""
    path = Path(path)
    with np.load(f"{path}.meta.npz", allow_pickle=False) as meta:
        head = json.loads(meta["head"].tobytes().decode("utf-8", "surrogatepass"))
        if head.get("format") != FORMAT or head.get("key") != key:
            raise ValueError("not a saved index of this key")
        n, dim = int(head["n"]), int(head["dim"])
        ids, gcodes = meta["ids"].astype(np.int64), meta["groups"].astype(np.int32)
        exps, live = meta["expires"].astype(np.float64), meta["live"].astype(bool)
    if not (ids.size == gcodes.size == exps.size == live.size == n):
        raise ValueError("saved rows do not match")
    if _crc(path) != head["crc"]:
        raise ValueError("saved index does not match its checksum")
    names = list(head["groups"])
    if gcodes.size and (gcodes.min() < 0 or gcodes.max() >= len(names)):
        raise ValueError("saved rows name unknown groups")
    return Saved(faiss.read_index(str(path)), dim, n, dict(head.get("options", {})), names,
                 ids, gcodes, exps, live)
