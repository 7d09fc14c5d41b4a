"""`a2e-host mcp` as a real subprocess: the SDK's client over stdio and over streamable HTTP, and
a WebSocket host sharing the same SQLite file."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp_types import CallToolResult
from support.hosts import run_cli
from support.procs import free_port, wait_port

from host.client import MemoryClient


def _ok(result: CallToolResult) -> Any:
    """The structured payload of a successful call, unwrapped from `result`."""
    assert not result.is_error, result.content
    payload = result.structured_content
    assert payload is not None
    return payload["result"] if set(payload) == {"result"} else payload


def stdio_server(db: Path | str, cwd: Path, *extra: str) -> StdioServerParameters:
    """How the SDK's stdio client starts `a2e-host mcp` on `db`."""
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "host.cli", "mcp", "--db", str(db), *extra],
        cwd=str(cwd),
        env={"PYTHONUNBUFFERED": "1"},
    )


async def test_stdio_subprocess_serves_the_tools(db_path: Path, tmp_path: Path) -> None:
    """Over stdio the SDK's client lists the tools, and a put is found after a restart."""
    params = stdio_server(db_path, tmp_path, "--namespace", "ns", "--agent", "a1")
    async with Client(params, mode="legacy") as c:
        names = {t.name for t in (await c.list_tools()).tools}
        assert {"memory_put", "memory_get", "memory_search", "memory_forget"} <= names
        m = _ok(await c.call_tool(
            "memory_put", {"content": "the release train leaves on Thursdays",
                           "memory_type": "semantic"}))
    async with Client(params, mode="legacy") as c:
        assert _ok(await c.call_tool("memory_get", {"memory_id": m["id"]}))["content"] == (
            "the release train leaves on Thursdays")
        hits = _ok(await c.call_tool("memory_search", {"query": "release train"}))
        assert [h["memory"]["id"] for h in hits] == [m["id"]]


def test_stdio_stdout_is_only_json_rpc_and_sigterm_exits_0(db_path: Path, tmp_path: Path) -> None:
    """stdout carries only JSON-RPC lines, logs go to stderr, and SIGTERM ends the server with 0."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "host.cli", "mcp", "--db", str(db_path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    with _reaped(proc):
        assert proc.stdin is not None and proc.stdout is not None
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"}}}
        proc.stdin.write((json.dumps(init) + "\n").encode())
        proc.stdin.flush()
        reply = json.loads(proc.stdout.readline())
        assert reply["id"] == 1 and reply["result"]["serverInfo"]["name"] == "a2e-memory"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
        out, err = proc.communicate(timeout=20)
        assert out == b""
        assert b"MCP server on stdio" in err


@contextmanager
def _reaped(proc: subprocess.Popen[bytes]) -> Iterator[subprocess.Popen[bytes]]:
    """`proc`, killed and waited for at the end if it is still running."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def _put_then_find(c: Client, content: str, query: str) -> None:
    """memory_put `content`, then memory_search `query` finds exactly it."""
    m = _ok(await c.call_tool("memory_put", {"content": content}))
    hits = _ok(await c.call_tool("memory_search", {"query": query}))
    assert [h["memory"]["id"] for h in hits] == [m["id"]]


def _start_http(db: Path, cwd: Path, *extra: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "host.cli", "mcp", "--transport", "http", "--port", str(port),
         "--db", str(db), *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=cwd,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        wait_port(port, proc, timeout=20.0)
    except TimeoutError:
        proc.kill()
        raise
    return proc, f"http://127.0.0.1:{port}/mcp"


async def test_streamable_http_subprocess(db_path: Path, tmp_path: Path) -> None:
    """Over streamable HTTP the SDK's client puts and searches; SIGTERM then exits 0."""
    proc, url = _start_http(db_path, tmp_path, "--namespace", "ns")
    with _reaped(proc):
        async with Client(url) as c:
            await _put_then_find(c, "HTTP transport works", "transport")
            assert _error_text(await c.call_tool("memory_search", {"query": "x", "k": 999}))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0


def _error_text(result: CallToolResult) -> str:
    assert result.is_error
    return result.content[0].text  # type: ignore[union-attr]


@pytest.mark.all_backends
async def test_websocket_host_and_mcp_share_one_database(
    store_db: str, tmp_path: Path, connect: Callable[..., Any]
) -> None:
    """A memory put through MCP is retrieved over WebSocket, and an entry stored over WebSocket
    is got, found and forgotten through MCP, with the host and the MCP server both running on
    one database (a SQLite file, or a PostgreSQL database)."""
    ws: MemoryClient = await connect()
    await ws.init("ns", {"agent": "a1"})
    params = stdio_server(store_db, tmp_path, "--namespace", "ns", "--agent", "a1")
    async with Client(params, mode="legacy") as c:
        # MCP -> WebSocket
        m = _ok(await c.call_tool(
            "memory_put", {"content": "Ana prefers short answers", "importance": "high"}))
        got = (await ws.retrieve(keys=[{"id": m["id"]}])).entries
        assert len(got) == 1
        assert got[0]["tier"] == "episodic" and got[0]["score"] == 0.75
        assert got[0]["content"] == {"text": "Ana prefers short answers", "metadata": {}}
        assert got[0]["tags"] == ["type:episodic"]
        found = (await ws.retrieve(query="short answers")).entries
        assert [e["key"] for e in found] == [{"id": m["id"]}]

        # WebSocket -> MCP: an entry in the library's shape, and a plain wire entry
        await ws.store([
            {"key": {"id": "fact-1"}, "tier": "semantic", "tags": ["type:semantic"],
             "content": {"text": "staging runs in Frankfurt", "metadata": {"by": "ops"}},
             "score": 1.0},
            {"key": {"user": "u1"}, "tier": "episodic", "content": "likes dark mode"},
        ])
        fact = _ok(await c.call_tool("memory_get", {"memory_id": "fact-1"}))
        assert (fact["content"], fact["memory_type"], fact["importance"], fact["metadata"]) == (
            "staging runs in Frankfurt", "semantic", "critical", {"by": "ops"})
        hits = _ok(await c.call_tool("memory_search", {"query": "dark mode"}))
        assert [h["memory"]["content"] for h in hits] == ["likes dark mode"]
        plain_id = hits[0]["memory"]["id"]
        assert _ok(await c.call_tool("memory_get", {"memory_id": plain_id}))["content"] == (
            "likes dark mode")

        # forget through MCP -> gone over WebSocket
        assert _ok(await c.call_tool("memory_forget", {"memory_id": plain_id}))["deleted"]
        assert _ok(await c.call_tool("memory_forget", {"memory_id": m["id"]}))["deleted"]
    assert (await ws.retrieve(keys=[{"user": "u1"}, {"id": m["id"]}], tier="")).entries == []
    assert [e["key"] for e in (await ws.retrieve(tier="semantic")).entries] == [{"id": "fact-1"}]


def _status(url: str, token: str | None) -> int:
    """The HTTP status of an MCP initialize POST with `token` as bearer (None: no header)."""
    return _answer(url, token)[0]


def _answer(url: str, token: str | None) -> tuple[int, str]:
    """The HTTP status and body of an MCP initialize POST with `token` as bearer."""
    import urllib.error
    import urllib.request

    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}}).encode()
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, body, headers), timeout=10) as r:
            return int(r.status), r.read().decode(errors="replace")
    except urllib.error.HTTPError as err:
        return int(err.code), err.read().decode(errors="replace")


async def test_http_with_tokens_needs_a_bearer_fit_for_the_server(
    db_path: Path, tmp_path: Path
) -> None:
    """With tokens configured, the HTTP endpoint answers 401 without a valid bearer token,
    403 for a token of another agent, of another namespace or without every right the tools
    use, and serves the tools with the server's own agent's full token."""
    from authkit import issue, write_config
    from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

    good, g = issue("a1", ["ns"])
    other_agent, o = issue("a2", ["ns"])
    other_ns, n = issue("a1", ["elsewhere"])
    read_only, r = issue("a1", ["ns"], rights=["read_semantic"])
    cfg = write_config(tmp_path / "mcp.toml", db_path, [g, o, n, r])
    proc, url = _start_http(db_path, tmp_path, "--config", str(cfg), "--namespace", "ns",
                            "--agent", "a1")
    with _reaped(proc):
        assert await asyncio.to_thread(_status, url, None) == 401
        assert await asyncio.to_thread(_status, url, "not-a-token") == 401
        for token in (other_agent, other_ns, read_only):
            assert await asyncio.to_thread(_status, url, token) == 403
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {good}"})
        async with Client(streamable_http_client(url, http_client=http)) as c:
            await _put_then_find(c, "only with a token", "token")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0


async def test_http_admin_tokens_sighup_reload_and_a_403_that_tells_nothing(
    db_path: Path, tmp_path: Path
) -> None:
    """Over MCP HTTP an `admin` token of the served agent is accepted (admin carries every
    right); a 403 body names neither the served agent nor its namespace; SIGHUP re-reads the
    tokens (a new one is accepted, a removed one refused) and the process keeps serving."""
    from authkit import issue, write_config

    admin, a = issue("served-agent", ["secret-ns"], rights=["admin"])
    read_only, r = issue("served-agent", ["secret-ns"], rights=["read_semantic"])
    stranger, s = issue("someone-else", ["*"])
    cfg = write_config(tmp_path / "mcp.toml", db_path, [a, r, s])
    proc, url = _start_http(db_path, tmp_path, "--config", str(cfg), "--namespace", "secret-ns",
                            "--agent", "served-agent")
    with _reaped(proc):
        assert (await asyncio.to_thread(_answer, url, admin))[0] == 200
        for token in (read_only, stranger):
            status, body = await asyncio.to_thread(_answer, url, token)
            assert status == 403 and body.strip()
            assert "served-agent" not in body and "secret-ns" not in body, body
        fresh, f = issue("served-agent", ["secret-ns"])
        write_config(cfg, db_path, [f, s])  # the admin token revoked, a new one added
        proc.send_signal(signal.SIGHUP)
        for _ in range(200):  # the reload runs on the server's loop: poll until it took effect
            if await asyncio.to_thread(_status, url, fresh) == 200:
                break
            await asyncio.sleep(0.05)
        assert await asyncio.to_thread(_status, url, fresh) == 200
        assert await asyncio.to_thread(_status, url, admin) == 401
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0


def test_http_on_a_public_address_without_tokens_is_refused(db_path: Path, tmp_path: Path) -> None:
    """`mcp --transport http` on every interface without tokens exits 2 and says why,
    as the WebSocket host does."""
    proc = run_cli("mcp", "--transport", "http", "--host", "0.0.0.0", "--port", str(free_port()),
                   "--db", str(db_path), cwd=tmp_path, text=True)
    assert proc.returncode == 2 and "without authentication" in proc.stderr
