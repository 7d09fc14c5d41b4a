"""The benchmark scripts: their frames are valid requests and their report logic holds."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from protocol.codec import decode_request
from protocol.messages import MemoryForgetRequest, MemoryRetrieveRequest, MemoryStoreRequest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts" / "bench"
LOCOMO = Path(__file__).resolve().parent / "data" / "locomo"  # a made-up conversation, "tiny"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_every_case_frame_is_a_valid_request() -> None:
    """Each load-client case builds frames the host decodes as the request it means to send."""
    client = _load("bench_client")
    kinds = {"store1": MemoryStoreRequest, "store20": MemoryStoreRequest,
             "get_key": MemoryRetrieveRequest, "get_tags": MemoryRetrieveRequest,
             "get_query": MemoryRetrieveRequest, "forget": MemoryForgetRequest}
    assert set(kinds) == set(client.CASES)
    for case, kind in kinds.items():
        make = client.frame_maker(case, "m-1", 3, 4, 100)
        first, second = decode_request(make(1)), decode_request(make(2))
        assert isinstance(first, kind) and first.memory_id == "m-1"
        assert first.id != second.id
    store20 = decode_request(client.frame_maker("store20", "m", 0, 0, 1)(5))
    assert isinstance(store20, MemoryStoreRequest) and len(store20.entries) == 20


def _row(server: str, case: str, rate: float) -> dict[str, Any]:
    return {"server": server, "case": case, "connections": 100, "mode": "seq",
            "msgs_per_s": rate}


def test_ratio_compares_with_the_echo_of_the_same_frame_size() -> None:
    """store20 is compared with the echo of a store20 frame, every other case with store1's."""
    host = _load("bench_host")
    rows = [_row("echo", "store1", 20_000), _row("echo", "store20", 10_000),
            _row("host", "get_key", 5_000), _row("host", "store20", 1_000)]
    host.attach_ratios(rows)
    assert rows[2]["ratio"] == 0.25 and rows[3]["ratio"] == 0.1
    assert "ratio" not in rows[0]


def test_slow_callbacks_grouped_without_task_numbers() -> None:
    """asyncio's debug warnings group by what held the loop, whatever the task's number."""
    host = _load("bench_host")
    log = "\n".join([
        "WARNING asyncio Executing <Task pending name='Task-7' coro=<f() running at x.py:3>"
        " wait_for=<Future pending>> took 0.012 seconds",
        "WARNING asyncio Executing <Task pending name='Task-9' coro=<f() running at x.py:3>"
        " wait_for=<Future pending>> took 0.030 seconds",
        "WARNING asyncio Executing <Handle _resolve at 0x7f00>(...) took 0.006 seconds",
    ])
    slow = host.slow_callbacks(log)
    assert [(r["count"], round(r["max_ms"])) for r in slow] == [(2, 30), (1, 6)]


async def test_writer_bench_measures_full_groups_of_puts_and_forgets(tmp_path: Path) -> None:
    """bench_writer's groups hold the puts (or forgets) it queued together, and each run
    reports the writer's CPU an entry."""
    bench = _load("bench_writer")
    put = await bench.run_once(tmp_path / "p.db", 48, 8, 2, 0)
    forget = await bench.run_once(tmp_path / "f.db", 48, 8, 1, 0, forget=True)
    for run in (put, forget):
        assert run["mean_group"] == 8 and run["writer_cpu_us_per_entry"] > 0


async def test_bench_ui_measures_every_read_of_the_browser() -> None:
    """scripts/bench/bench_ui.py times the wire baseline and each browser read on a small store."""
    figures = await _load("bench_ui").bench(300)
    assert len(figures) == 8 and all(v > 0 for v in figures.values())
    assert "wire find, one agent, 25 (baseline)" in figures and "browse, as of now" in figures


def test_bench_watch_delivers_every_event_it_counts(capsys: pytest.CaptureFixture[str]) -> None:
    """scripts/bench/bench_watch.py, on a tiny run, reports both phases' store rates and every
    event of the watched phase received, with latencies."""
    bench = _load("bench_watch")
    assert bench.main(["--watchers", "2", "--writers", "2", "--seconds", "0.5", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["baseline_stores_per_s"] > 0 and report["stores_per_s"] > 0
    assert report["events_received"] == report["events_expected"] > 0
    assert report["ack_to_event_ms_p99"] >= report["ack_to_event_ms_p50"]


def test_bench_semantic_reports_every_figure_on_a_tiny_run() -> None:
    """scripts/bench/bench_semantic.py, on 40 turns of the tests' tiny conversation and short phases,
    measures the embedding rate, the embedder's ceiling, similarity queries and stores with and
    without an embedder."""
    figures = _load("bench_semantic").main(
        ["--data", str(LOCOMO), "--conv", "tiny", "--turns", "40", "--seconds", "0.3",
         "--writers", "2", "--levels", "1", "2"])
    assert all(figures[k] > 0 for k in (
        "embedded_per_s", "text_ceiling", "query_ceiling", "queries_per_s", "stores_busy",
        "stores_plain"))


def test_bench_embedding_drains_the_backlog_beside_the_ceiling_on_a_tiny_run() -> None:
    """scripts/bench/bench_embedding.py on the tests' tiny conversation: the turns stored as a
    backlog, the embedder's ceiling measured, and a host that embeds the backlog to the end
    (the entries it counts are those still queued at its first answer)."""
    figures = _load("bench_embedding").main(["--data", str(LOCOMO), "--conv", "tiny"])
    assert figures["stored"] == 48
    assert len(figures["ceilings"]) == 1 and figures["ceilings"][0] > 0
    [(_tree, _chars, counted, secs)] = figures["drains"]
    assert 0 <= counted <= 48 and secs > 0


def test_bench_embedding_drains_a_postgresql_backlog_on_a_tiny_run() -> None:
    """bench_embedding.py --db embedded: the backlog is a database of a throw-away PostgreSQL
    server, and a host's SharedWorker embeds a copy of it to the end."""
    figures = _load("bench_embedding").main(
        ["--data", str(LOCOMO), "--conv", "tiny", "--db", "embedded"])
    assert figures["stored"] == 48 and figures["ceilings"][0] > 0
    [(_tree, _chars, counted, secs)] = figures["drains"]
    assert 0 <= counted <= 48 and secs > 0


def test_bench_embed_tenants_probes_another_tenants_backlog_on_a_tiny_run() -> None:
    """scripts/bench/bench_embed_tenants.py with a small backlog: a host of an empty database
    and one of tenant A's backlog, each probed by tenant B (store, then a paraphrase); with no
    backlog every probe finds its fact, and the backlog's host still had it queued."""
    figures = _load("bench_embed_tenants").main(["--backlog", "2000", "--probes", "2"])
    idle, busy = figures["hosts"]
    assert idle["found"] == 2 and idle["backlog"] == (0, 0) and len(idle["seconds"]) == 2
    assert busy["backlog"][0] > 0 and len(busy["seconds"]) == 2


def test_bench_host_drives_http_sessions_without_errors() -> None:
    """bench_host.py --transport http runs a short case over HTTP + SSE sessions (POSTs and
    the event stream of its own load client) and counts replies, none an error."""
    out = subprocess.run(
        [sys.executable, str(SCRIPTS / "bench_host.py"), "--transport", "http", "--json",
         "--levels", "2", "--cases", "get_key", "--modes", "seq,pipe", "--duration", "0.3",
         "--warmup", "0.1", "--idle", "0", "--read-entries", "5", "--quiet"],
        capture_output=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    rows = [r for r in json.loads(out.stdout)["cases"] if r["server"] == "host-http"]
    assert len(rows) == 2 and all(r["msgs_per_s"] > 0 and r["errors"] == 0 for r in rows)


def test_locomo_loads_from_a_folder_or_from_one_file_of_every_conversation(tmp_path: Path) -> None:
    """The LoCoMo loader reads a conversation from a folder of `<conv>.json` files and the same
    one from a single file listing every conversation (`sample_id` "conv-<conv>")."""
    bench = _load("bench_retrieval")
    turns, questions = bench.load(LOCOMO, "tiny")
    assert len(turns) == 48 and turns[0] == ("D1:1", f"Ana said: {json.loads((LOCOMO / 'tiny.json').read_text())['session_1'][0]['text']}")
    assert {c for _q, _e, c in questions} == {1, 2, 3, 4}  # category 5 (adversarial) left out
    flat = json.loads((LOCOMO / "tiny.json").read_text())
    qa = flat.pop("qa")
    (tmp_path / "all.json").write_text(json.dumps(
        [{"sample_id": "conv-other", "conversation": {}, "qa": []},
         {"sample_id": "conv-tiny", "conversation": flat, "qa": qa}]))
    assert bench.load(tmp_path / "all.json", "tiny") == (turns, questions)


def test_locomo_data_is_asked_for_never_assumed(tmp_path: Path) -> None:
    """The benchmarks take the data set's place from `--data` (required), and a place that
    holds no such conversation stops the script with a message naming it."""
    out = subprocess.run([sys.executable, str(SCRIPTS / "bench_retrieval.py")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--data" in out.stderr
    bench = _load("bench_retrieval")
    with pytest.raises(SystemExit, match="41.json"):
        bench.load(tmp_path, "41")
    with pytest.raises(SystemExit, match="not found"):
        bench.load(tmp_path / "missing.json", "41")


def test_bench_start_times_a_start_against_a_bare_interpreter() -> None:
    """scripts/bench/bench_start.py starts `a2e-host serve` until /readyz answers, stops it (exit 0),
    and reports the time with the bare interpreter's and the environment's size."""
    figures = _load("bench_start").main(["--runs", "1", "--json"])
    assert figures["serve_ready_s"] > figures["python_bare_s"] > 0 and figures["env_mb"] > 1


def test_bench_langgraph_times_every_operation_of_every_store() -> None:
    """A tiny run of scripts/bench/bench_langgraph.py prints a rate for each operation of A2EStore,
    LangGraph's SqliteStore and InMemoryStore, alone and concurrent, and the load average."""
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / "bench_langgraph.py"), "--items", "20", "--ops", "4",
         "--rounds", "1", "--clients", "1", "2"],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = [line.split("|")[1:-1] for line in done.stdout.splitlines()
            if line.startswith("| ") and "---" not in line and "store" not in line]
    seen = {(r[0].strip(), r[1].strip(), r[2].strip()) for r in rows}
    ops = ["get", "search_filter", "search_query", "put"]
    want = {(s, c, o) for s in ("a2e", "sqlite", "memory") for c in ("1", "2") for o in ops}
    want |= {(s, "1", "batch100_items") for s in ("a2e", "sqlite", "memory")}
    assert seen == want
    assert all(float(r[3].replace(",", "")) > 0 for r in rows)
    assert "load average before" in done.stdout and "load average after" in done.stdout


def test_bench_scale_measures_every_figure_on_a_tiny_run() -> None:
    """scripts/bench/bench_scale.py on 400 rows, one namespace and four, with and without vectors,
    measured at once and settled: every request answered (exit 0), a load rate, the RSS, a
    restart, vector queries that find numpy's exact top 10 (also filtered by the rare tag) and
    keyword queries that find rows, and each phase's longest loop stall and VmHWM."""
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / "bench_scale.py"), "--entries", "400", "--namespaces",
         "1,4", "--sizes", "100,400", "--clusters", "8", "--dim", "16", "--queries", "8",
         "--settle-seconds", "30", "--at-once", "--json"],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    runs = {(r["namespaces"], r["mode"]): r for r in report["runs"]}
    assert set(runs) == {(1, "vectors"), (1, "plain"), (4, "vectors"), (4, "plain")}
    assert [p["size"] for p in runs[1, "vectors"]["points"]] == [100, 400]
    for r in runs.values():
        assert sum(x["entries"] for x in r["load"]) == 400
        assert all(x["entries_per_s"] > 0 for x in r["load"])
        assert r["after_load"]["rss_mb"] > 0 and r["restart"]["ready_s"] > 0
        assert r["after_restart"]["keyword"]["mean_hits"] > 0
        if r["mode"] == "vectors":
            for p in [*r["points"], *(x["at_once"] for x in r["points"]), r["after_restart"]]:
                assert p["vector"]["recall10"] >= 0.95 and p["tagged"]["exact_share"] == 1.0
        names = [ph["phase"] for ph in r["phases"]]
        assert "restarted: queries" in names and any(n.startswith("settle at") for n in names)
        assert all(ph["stall_ms"] >= 0 and ph["hwm_mb"] >= ph["rss_mb"] > 0 for ph in r["phases"])
        assert max(ph["stall_ms"] for ph in r["phases"]) > 0  # the probe answered
        assert r["after_restart"]["keyword"]["stall_ms"] >= 0  # each kind of query's own
    assert report["failures"] == 0 and len(report["cost_curve"]) == 2
    assert any(g["goal"].startswith("longest loop stall") for g in report["goals"])


def test_the_relevance_harness_asks_locomo_once_a_try(tmp_path: Path) -> None:
    """eval_relevance.py --set locomo on the tiny conversation prints one table row of recall
    figures for each `--try` (keyword only, so no embedder), and without --data it says so."""
    cmd = [sys.executable, str(SCRIPTS / "eval_relevance.py"), "--set", "locomo",
           "--cache", str(tmp_path / "v.npz")]
    out = subprocess.run(
        [*cmd, "--data", str(LOCOMO), "--conv", "tiny", "--try", "search.embedder=none",
         "--try", "search.embedder=none", "ranking.search_candidates=50"],
        capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line for line in out.stdout.splitlines() if line.startswith("| search.")]
    assert len(rows) == 2
    assert all(0.0 <= float(cell) <= 1.0 for row in rows for cell in row.split("|")[2:4])
    missing = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert missing.returncode != 0 and "--data" in missing.stderr


def test_bench_ranking_replays_the_queries_it_saved(tmp_path: Path) -> None:
    """bench_ranking.py --save writes the tiny conversation's questions with their candidates;
    --replay runs a part of the ranking over every one of them, and nothing else."""
    saved = tmp_path / "cases.pickle"
    script = str(SCRIPTS / "bench_ranking.py")
    out = subprocess.run(
        [sys.executable, script, "--data", str(LOCOMO), "--conv", "tiny", "--rounds", "1",
         "--save", str(saved), "--cache", str(tmp_path / "v.npz")],
        capture_output=True, text=True, timeout=180, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    questions = int(out.stdout.split(": ", 1)[1].split(" questions")[0])
    for part in ("z", "coverage", "query"):
        got = subprocess.run([sys.executable, script, "--replay", str(saved), "--part", part,
                              "--rounds", "2"], capture_output=True, text=True, timeout=60,
                             check=True)
        assert got.stdout.strip() == f"{part}: 2 rounds of {questions} queries"


def test_bench_store_parts_prints_every_part_of_a_store() -> None:
    """bench_store_parts.py on 200 entries prints each part of a durable store's CPU (the
    group, its flush, COMMIT, put_entries, the change-log row, the hand-off) and the load
    average, each a number of microseconds."""
    out = subprocess.run([sys.executable, str(SCRIPTS / "bench_store_parts.py"), "--entries",
                          "200", "--rounds", "1"], capture_output=True, text=True, timeout=120,
                         check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = {line[:50].strip(): line[50:].strip() for line in out.stdout.splitlines()
            if line.startswith("  ")}
    for part in ("store.put (loop + writer)", "group in one thread", "of which COMMIT",
                 "change-log row (log_change alone)", "embed-queue row (difference)",
                 "hand-off and loop (store.put less the group)"):
        assert float(rows[part]) == float(rows[part]), part  # a number, not nan
    assert out.stdout.splitlines()[-1].startswith("load average ")
