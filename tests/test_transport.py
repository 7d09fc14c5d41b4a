"""Framing over both transports, from a bare socket: several frames in one write, fragmented
messages, and the protocol errors a library client would never send."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from authkit import running
from rawws import BINARY, CLOSE, CONTINUATION, TEXT, RawWebSocket, frame

from host.app import Host

pytestmark = pytest.mark.all_transports("websocket")


def _req(kind: str, req_id: str, **fields: Any) -> bytes:
    return json.dumps({"type": f"memory/{kind}/req", "id": req_id, "version": "1.0",
                       **fields}).encode()


async def _open(host: Host) -> tuple[RawWebSocket, str]:
    ws = await asyncio.to_thread(RawWebSocket, host.port)
    await asyncio.to_thread(ws.send_raw, frame(TEXT, _req("init", "i", namespace="ns")))
    _, payload = await asyncio.to_thread(ws.recv)
    return ws, json.loads(payload)["memory_id"]


async def test_frames_of_one_write_are_answered_in_order(db_path: Path, transport: str) -> None:
    """Requests that reach the host in one read are answered in order, replies of every
    length encoding (under 126 bytes, under 64 KiB, over) intact, and a write between reads
    is seen by the reads after it."""
    async with running(db_path, transport=transport) as host:
        ws, mid = await _open(host)
        entries = [{"key": {"k": "mid"}, "content": "m" * 2000, "tier": "episodic"},
                   {"key": {"k": "big1"}, "content": "b" * 40000, "tier": "episodic"},
                   {"key": {"k": "big2"}, "content": "c" * 40000, "tier": "episodic"}]
        batch = [
            _req("retrieve", "r0", memory_id=mid, keys=[{"k": "mid"}]),  # nothing yet
            _req("store", "s", memory_id=mid, entries=entries),
            _req("retrieve", "r1", memory_id=mid, keys=[{"k": "mid"}]),
            _req("retrieve", "r2", memory_id=mid, keys=[{"k": "big1"}, {"k": "big2"}]),
            json.dumps({"type": "ping", "id": "p", "version": "1.0"}).encode(),
            _req("retrieve", "r3", memory_id=mid, keys=[{"k": "none"}]),
        ]
        await asyncio.to_thread(ws.send_raw, b"".join(frame(TEXT, b) for b in batch))
        replies = [json.loads((await asyncio.to_thread(ws.recv))[1]) for _ in batch]
        reads = batch[2:]  # now reads only: every reply is ready in the callback of its frame
        await asyncio.to_thread(ws.send_raw, b"".join(frame(TEXT, b) for b in reads))
        again = [json.loads((await asyncio.to_thread(ws.recv))[1]) for _ in reads]
        ws.close()
    assert [r.get("req_id", r.get("id")) for r in replies][:4] == ["r0", "s", "r1", "r2"]
    assert replies[0]["entries"] == [] and len(replies[1]["stored"]) == 3
    for got in (replies[2:], again):
        assert got[0]["entries"][0]["content"] == "m" * 2000
        assert sorted(e["content"][0] for e in got[1]["entries"]) == ["b", "c"]
        assert got[2]["type"] == "pong" and got[3]["entries"] == []


async def test_a_fragmented_message_is_answered_as_a_whole(db_path: Path, transport: str) -> None:
    """A text message sent in three fragments is one request; a fragmented binary message is
    answered parse_error; the connection stays open."""
    async with running(db_path, transport=transport) as host:
        ws, mid = await _open(host)
        body = _req("store", "s", memory_id=mid,
                    entries=[{"key": {"k": 1}, "content": "x" * 300, "tier": "episodic"}])
        parts = [body[:10], body[10:200], body[200:]]
        await asyncio.to_thread(ws.send_raw, frame(TEXT, parts[0], fin=False)
                                + frame(CONTINUATION, parts[1], fin=False)
                                + frame(CONTINUATION, parts[2]))
        reply = json.loads((await asyncio.to_thread(ws.recv))[1])
        assert reply["req_id"] == "s" and reply["stored"] == [{"k": 1}]
        await asyncio.to_thread(ws.send_raw, frame(BINARY, b"{", fin=False)
                                + frame(CONTINUATION, b"}"))
        reply = json.loads((await asyncio.to_thread(ws.recv))[1])
        assert reply["type"] == "error" and reply["code"] == "parse_error"
        ws.close()


@pytest.mark.parametrize("frames, code", [
    ([frame(CONTINUATION, b"{}")], 1002),  # a continuation of no message
    ([frame(TEXT, b"{", fin=False), frame(TEXT, b"}")], 1002),  # a message inside another
    ([frame(TEXT, b"x" * 1500, fin=False), frame(CONTINUATION, b"y" * 1500)], 1009),  # too big
    ([frame(TEXT, b"\"\xff\xfe\"")], 1007),  # not UTF-8
])
async def test_broken_framing_closes_that_connection_only(
    db_path: Path, transport: str, frames: list[bytes], code: int
) -> None:
    """Framing no client library would produce closes the connection with the RFC 6455 code
    (1002 protocol error, 1009 too big, 1007 not UTF-8); another connection is still served."""
    async with running(db_path, transport=transport,
                       limits={"max_frame_bytes": 2048}) as host:
        bad, _ = await _open(host)
        good, mid = await _open(host)
        await asyncio.to_thread(bad.send_raw, b"".join(frames))
        assert await asyncio.to_thread(bad.close_code) == code
        bad.close()
        await asyncio.to_thread(good.send_raw, frame(TEXT, _req("retrieve", "r", memory_id=mid)))
        opcode, payload = await asyncio.to_thread(good.recv)
        assert opcode != CLOSE and json.loads(payload)["req_id"] == "r"
        good.close()
