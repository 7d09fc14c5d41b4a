"""`a2e-host serve` keeps numpy's OpenBLAS to one thread unless the user set its count, and
/metrics shows it with the vector indexes' figures (bytes held, keys, loads, evictions)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.client_vectors import SPACE, Model, put_vectors, vector_config, vector_sessions
from support.hosts import make_config, running_host
from support.http import get, http_get, metric_value
from support.procs import HostProcess

from host.ops.threads import BLAS_ENV, serve_command


@pytest.mark.parametrize("env", [None, "2"])
def test_serve_runs_openblas_on_one_thread_unless_told(
    tmp_path: Path, env: str | None,
) -> None:
    p = HostProcess(tmp_path / "a.db", env={} if env is None else {BLAS_ENV: env},
                    unset=(BLAS_ENV,))
    try:
        status, _type, text = http_get(p.port, "/metrics")
        assert status == 200
        assert metric_value(text, "a2e_blas_threads") == (1 if env is None else int(env))
        if env is not None:  # what the user set is in the process's environment, untouched
            with open(f"/proc/{p.pid}/environ", "rb") as f:
                assert f"{BLAS_ENV}={env}".encode() in f.read().split(b"\0")
    finally:
        p.terminate()


def test_the_sub_command_is_its_first_command_word() -> None:
    commands = ("serve", "stdio", "rules")
    assert serve_command(["--log-level", "debug", "serve", "--db", "x"], commands) == "serve"
    assert serve_command(["rules", "load", "serve"], commands) == "rules"
    assert serve_command(["--help"], commands) is None


async def test_metrics_show_the_vector_indexes(tmp_path: Path) -> None:
    import numpy as np

    rng = np.random.default_rng(2)
    config = vector_config(tmp_path / "m.db", vector_memory_bytes=1)  # every other space evicted
    async with running_host(config) as host, vector_sessions(host, ("a1",)) as cs:
        _, _, text = await get(host.port, "/metrics")
        assert metric_value(text, "a2e_vector_index_keys") == 0
        assert "a2e_vector_index_bytes" in text and "a2e_vector_index_loads_total" in text
        for space in (SPACE, "other"):
            model = Model()
            await put_vectors(cs["a1"], model, "a1", rng, range(20), "semantic", host.clock())
            if space != SPACE:  # the same rows in a second space
                await cs["a1"].store([{"key": {"k": 100 + i}, "content": {}, "tier": "semantic",
                                       "vectors": [[1.0, float(i)] + [0.0] * 14],
                                       "vector_space": space} for i in range(5)])
            await cs["a1"].retrieve(vector=[1.0] * 16, vector_space=space)
        _, _, text = await get(host.port, "/metrics")
        stats = host.search.vectors.stats() if host.search.vectors is not None else {}
        assert metric_value(text, "a2e_vector_index_keys") == stats["keys"] == 1
        assert metric_value(text, "a2e_vector_index_bytes") == stats["nbytes"] > 0
        assert metric_value(text, "a2e_vector_index_budget_bytes") == 1
        assert metric_value(text, "a2e_vector_index_loads_total") == stats["loads"] == 2
        assert metric_value(text, "a2e_vector_index_evictions_total") == stats["evictions"] == 1
        assert metric_value(text, "a2e_vector_index_rows") == stats["rows"] > 0
        assert metric_value(text, "a2e_blas_threads") >= 1  # numpy's OpenBLAS, in this process


async def test_metrics_show_the_embedding_workers_faults(tmp_path: Path) -> None:
    """/metrics shows the embedding worker's fault counters and the keys let go past a
    namespace's share, each as the worker and the indexes count them (zero on a quiet host)."""
    async with running_host(make_config(tmp_path / "f.db")) as host:
        worker = host.search.worker
        assert worker is not None
        worker.failures, worker.set_aside, worker.refused = 3, 2, 1  # as the worker counts them
        _, _, text = await get(host.port, "/metrics")
        assert metric_value(text, "a2e_embed_failures_total") == 3
        assert metric_value(text, "a2e_embed_set_aside_total") == 2
        assert metric_value(text, "a2e_embed_refused_total") == 1
        assert metric_value(text, "a2e_vector_index_let_go_total") == 0
