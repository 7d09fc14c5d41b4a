"""`a2e-host stdio` as a real subprocess, as the A2E SDK's `SubprocessTransport` spawns it:
NDJSON on stdin and stdout, logs on stderr only, a clean exit that commits."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path

import pytest

from host.client import MemoryClient
from host.net.clients import StdioChannel


def argv(db: Path | str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "host.cli", "stdio", "--db", str(db), *extra]


async def test_eof_on_stdin_commits_and_exits_0(tmp_path: Path) -> None:
    """Stores answered over stdio are durable once stdin closes: the process exits 0 and a new
    process reads them back; stdout carries only protocol messages."""
    db = tmp_path / "s.db"
    errors = (tmp_path / "err.txt").open("wb")
    c = await MemoryClient.spawn(argv(db), stderr=errors)
    await c.init("ns", {"agent": "a"})
    stored = await asyncio.gather(*(c.store([{"key": {"i": i}, "content": "x" * 100,
                                              "tier": "episodic"}]) for i in range(50)))
    assert all(s.stored for s in stored)
    ch = c.channel
    assert isinstance(ch, StdioChannel) and ch.proc is not None
    await c.close()  # closes stdin, waits for the exit
    assert ch.proc.returncode == 0
    errors.close()
    log = (tmp_path / "err.txt").read_text()
    assert "a2e-host stopped" in log

    again = await MemoryClient.spawn(argv(db))
    await again.init("ns", {"agent": "a"})
    assert (await again.retrieve(keys=[{"i": i} for i in range(50)], limit=100)).total == 50
    await again.close()


async def test_sigterm_answers_what_was_read_commits_and_exits_0(tmp_path: Path) -> None:
    """SIGTERM while requests are in flight: what was read is answered, the process exits 0,
    and every answered store is durable."""
    db = tmp_path / "t.db"
    proc = await asyncio.create_subprocess_exec(
        *argv(db), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL)
    assert proc.stdin is not None and proc.stdout is not None
    lines = [json.dumps({"type": "memory/init/req", "id": "i", "version": "1.0",
                         "namespace": "ns", "scope": {"agent": "a"}})]
    proc.stdin.write((lines[0] + "\n").encode())
    mid = json.loads(await proc.stdout.readline())["memory_id"]
    for i in range(20):
        proc.stdin.write((json.dumps({"type": "memory/store/req", "id": f"s{i}",
                                      "version": "1.0", "memory_id": mid, "entries": [
            {"key": {"i": i}, "content": i, "tier": "episodic"}]}) + "\n").encode())
    await proc.stdin.drain()
    first = json.loads(await proc.stdout.readline())
    proc.send_signal(signal.SIGTERM)
    replies = [first] + [json.loads(line) for line in (await proc.stdout.read()).splitlines()]
    assert await proc.wait() == 0
    answered = [r["req_id"] for r in replies if r.get("type") == "memory/store/resp"]
    assert answered and answered == [f"s{i}" for i in range(len(answered))]
    again = await MemoryClient.spawn(argv(db))
    await again.init("ns", {"agent": "a"})
    got = await again.retrieve(keys=[{"i": i} for i in range(len(answered))], limit=100)
    assert got.total == len(answered)
    await again.close()


async def test_a_line_that_is_not_json_or_too_long_gets_an_error(tmp_path: Path) -> None:
    """A line that is not JSON is answered parse_error and a line over the frame limit
    invalid_message; the session goes on."""
    cfg = tmp_path / "a2e.toml"
    cfg.write_text("[limits]\nmax_frame_bytes = 2048\n")
    c = await MemoryClient.spawn(argv(tmp_path / "l.db", "--config", str(cfg)))
    ch = c.channel
    assert isinstance(ch, StdioChannel)
    c._reader.cancel()
    await ch.send("{not json")
    await ch.send(json.dumps({"type": "ping", "id": "big", "version": "1.0",
                              "metadata": "x" * 5000}))
    await ch.send(json.dumps({"type": "ping", "id": "p", "version": "1.0"}))
    it = ch.__aiter__()
    got = [json.loads(await it.__anext__()) for _ in range(3)]
    assert [g.get("code") for g in got[:2]] == ["parse_error", "invalid_message"]
    assert got[2]["type"] == "pong" and got[2]["req_id"] == "p"
    await ch.close()


@pytest.mark.all_backends
async def test_a_last_line_without_a_newline_is_answered(store_db: str) -> None:
    """A last request not followed by a newline before the end of input is answered, not
    dropped."""
    proc = await asyncio.create_subprocess_exec(
        *argv(store_db), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL)
    out, _ = await proc.communicate(
        json.dumps({"type": "ping", "id": "p1", "version": "1.0"}).encode() + b"\n"
        + json.dumps({"type": "ping", "id": "last", "version": "1.0"}).encode())
    assert proc.returncode == 0
    got = [json.loads(line) for line in out.splitlines()]
    assert [(g["type"], g["req_id"]) for g in got] == [("pong", "p1"), ("pong", "last")]


@pytest.mark.all_backends
async def test_a_line_that_is_not_utf8_is_a_parse_error_and_nothing_else(
    store_db: str,
) -> None:
    """A line with bytes that are not UTF-8 is answered parse_error and not taken up (no
    replacement characters stored); the session goes on."""
    db = store_db
    init = {"type": "memory/init/req", "id": "i", "version": "1.0", "namespace": "ns",
            "scope": {"agent": "a"}}
    proc = await asyncio.create_subprocess_exec(
        *argv(db), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps(init).encode() + b"\n")
    mid = json.loads(await proc.stdout.readline())["memory_id"]
    bad = json.dumps({"type": "memory/store/req", "id": "s", "version": "1.0",
                      "memory_id": mid, "entries": [{"key": {"k": "K"}, "content": "C",
                                                     "tier": "semantic"}]}).encode()
    proc.stdin.write(bad.replace(b'"C"', b'"\xff\xfe"') + b"\n")
    proc.stdin.write(json.dumps({"type": "ping", "id": "p", "version": "1.0"}).encode() + b"\n")
    proc.stdin.write(json.dumps({"type": "memory/retrieve/req", "id": "r", "version": "1.0",
                                 "memory_id": mid, "keys": [{"k": "K"}]}).encode() + b"\n")
    proc.stdin.close()
    got = [json.loads(line) for line in (await proc.stdout.read()).splitlines()]
    assert await proc.wait() == 0
    assert got[0]["type"] == "error" and got[0]["code"] == "parse_error"
    assert (got[1]["type"], got[1]["req_id"]) == ("pong", "p")
    assert got[2]["type"] == "memory/retrieve/resp" and got[2]["entries"] == []


async def test_a_regular_file_as_input_is_read_only_as_fast_as_it_is_answered(
    tmp_path: Path,
) -> None:
    """With a regular file as stdin (`a2e-host stdio < requests.ndjson`) and an output that
    nobody reads yet, the host stops reading the file once replies back up, as it stops
    reading a pipe: the requests it holds are a block of the file, not the whole file; once
    the output is read, every request is answered in order."""
    import os

    from support.hosts import make_config, running_host

    from host.net.transport_stdio import serve_pipes

    n = 24_000  # 1.1 MB: a quarter of it is four blocks of the reader (it stops after one)
    path = tmp_path / "requests.ndjson"
    path.write_bytes(b"".join(b'{"type":"ping","id":"p%d","version":"1.0"}\n' % i
                              for i in range(n)))
    size = path.stat().st_size
    async with running_host(make_config(tmp_path / "a.db")) as host:
        source = path.open("rb", buffering=0)
        out_r, out_w = os.pipe()
        conn = await serve_pipes(host.server, source, os.fdopen(out_w, "wb", buffering=0))
        position, still = -1, 0
        while still < 20:  # until the file's reader has not moved for 20 looks
            assert not conn._eof.is_set(), "the whole file was read with nothing answered"
            await asyncio.sleep(0.01)
            now = os.lseek(source.fileno(), 0, os.SEEK_CUR)
            still = still + 1 if now == position and not conn.pipeline.reading else 0
            position = now
        assert position < size // 4
        assert conn.pipeline.request_bytes <= 2 * 65_536

        def read_all() -> list[bytes]:
            got = bytearray()
            while got.count(b"\n") < n:
                chunk = os.read(out_r, 1 << 16)
                assert chunk, "the output ended early"
                got += chunk
            return bytes(got).splitlines()

        lines = await asyncio.gather(asyncio.to_thread(read_all), conn.finished())
        assert [json.loads(line)["req_id"] for line in lines[0]] == [f"p{i}" for i in range(n)]
        os.close(out_r)
        source.close()


async def test_lines_that_are_not_utf8_are_held_to_the_same_backpressure(tmp_path: Path) -> None:
    """A client that sends line after line of bytes that are not UTF-8 and reads none of the
    answers makes the host hold at most `limits.max_pipelined` of them, as it would for lines
    that are not JSON, not one `parse_error` for every line of what it read; once the output
    is read every line is answered, in order."""
    import os
    import threading

    from support.hosts import make_config, running_host

    from host.net.transport_stdio import serve_pipes

    n = 16_384  # 32 KiB of two-byte lines, read at once: a host that answered each line of a read
    # would hold 16 times `max_pipelined`
    config = make_config(tmp_path / "a.db")
    async with running_host(config) as host:
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        conn = await serve_pipes(host.server, os.fdopen(in_r, "rb", buffering=0),
                                 os.fdopen(out_w, "wb", buffering=0))

        def write_all() -> None:
            data = memoryview(b"\xff\n" * n + b'{"type":"ping","id":"end","version":"1.0"}\n')
            while data:
                data = data[os.write(in_w, data):]
            os.close(in_w)

        writer = threading.Thread(target=write_all, daemon=True)
        writer.start()
        held, still = -1, 0
        while still < 20:  # until what the host holds has not moved for 20 looks
            await asyncio.sleep(0.01)
            now = len(conn.pipeline._replies)
            still = still + 1 if now == held and not conn.pipeline.reading else 0
            held = now
        assert held <= config.limits.max_pipelined + 1

        def read_all() -> list[bytes]:
            got = bytearray()
            while got.count(b"\n") < n + 1:
                chunk = os.read(out_r, 1 << 16)
                assert chunk, "the output ended early"
                got += chunk
            return bytes(got).splitlines()

        lines = (await asyncio.gather(asyncio.to_thread(read_all), conn.finished()))[0]
        writer.join()
        replies = [json.loads(line) for line in lines]
        assert [r.get("code") for r in replies[:n]] == ["parse_error"] * n
        assert replies[n]["req_id"] == "end"
        os.close(out_r)
