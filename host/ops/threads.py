"""The threads numpy's BLAS (OpenBLAS) starts, kept to one in `a2e-host serve`.

numpy's bundled OpenBLAS starts one thread a core when numpy is imported, and a host's matrix
products are small (one query against an index's rows): on a busy host of 2 cores the second
thread made each product wait for a core (index searches p50/p99 1.3/13 ms with 2 threads
against 0.35/1.8 ms with `OPENBLAS_NUM_THREADS=1`; a client-vector retrieve of 20,000 rows
8.0 -> 3.8 ms p50). OpenBLAS reads its thread count once, when it loads, so `limit_blas_threads`
runs before anything imports numpy (`host.cli.main.main`, first thing); a value the user set
is kept. `OMP_NUM_THREADS` is left alone: faiss sizes its graph builds on every core from it
(`host.search.index.builds.build_ann`, threads=0), and its single-query searches start no
thread.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["BLAS_ENV", "blas_threads", "limit_blas_threads"]

BLAS_ENV = "OPENBLAS_NUM_THREADS"
# the OpenBLAS thread count, by the symbol names of numpy's builds (scipy-openblas, 64-bit
# integers, or a plain OpenBLAS)
_GETTERS = ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads",
            "openblas_get_num_threads64_", "openblas_get_num_threads")


def limit_blas_threads(environ: os._Environ[str] | dict[str, str] = os.environ) -> bool:
    """Set `OPENBLAS_NUM_THREADS=1` unless it is set, or numpy is already imported (then it
    would do nothing); True when set."""
    if BLAS_ENV in environ or "numpy" in sys.modules:
        return False
    environ[BLAS_ENV] = "1"
    return True


def serve_command(argv: Sequence[str], commands: Sequence[str]) -> str | None:
    """The sub-command of a command line: its first word that names one of `commands`."""
    return next((a for a in argv if a in commands), None)


_getter: list[Any] = []  # the getter found (read at each scrape: found once)


def blas_threads() -> int | None:
    """The threads numpy's OpenBLAS uses (None: numpy not imported, or no OpenBLAS found)."""
    if _getter:
        return int(_getter[0]())
    if "numpy" not in sys.modules:
        return None
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            paths = sorted({line.split()[-1] for line in maps
                            if "openblas" in line.lower() and "numpy" in line})
    except OSError:
        return None
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name in _GETTERS:
            get = getattr(lib, name, None)
            if get is not None:
                get.restype = ctypes.c_int
                _getter.append(get)
                return int(get())
    return None
