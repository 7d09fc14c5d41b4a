"""Bad input gets the right error reply (or close code) and the host keeps serving others."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

from host.client import MemoryClient

pytestmark = pytest.mark.all_transports("websocket")


async def reply_to(ws: Any, frame: str | bytes) -> dict[str, Any]:
    await ws.send(frame)
    return json.loads(await ws.recv())


@pytest.mark.parametrize(
    ("frame", "code", "req_id", "field"),
    [
        ("not json at all", "parse_error", "", None),
        ("[1, 2, 3]", "parse_error", "", None),
        ('"a string"', "parse_error", "", None),
        ('{"type": "memory/init/req", "id": "x1", "namespace": "n"}', "invalid_message", "x1", "version"),
        ('{"id": "x2", "version": "1.0"}', "invalid_message", "x2", "type"),
        ('{"type": "memory/teleport/req", "id": "x3", "version": "1.0"}', "invalid_message", "x3", "type"),
        ('{"type": "memory/init/resp", "id": "x3b", "version": "1.0", "memory_id": "m",'
         ' "namespace": "n"}', "invalid_message", "x3b", "type"),
        ('{"type": "memory/init/req", "id": 7, "version": "1.0", "namespace": "n"}', "invalid_message", "", "id"),
        ('{"type": "ping", "id": "x4", "version": "1.0", "ts": "noon"}', "invalid_message", "x4", "ts"),
        ('{"type": "memory/init/req", "id": "x5", "version": "2.0", "namespace": "n"}', "version_mismatch", "x5", None),
        ('{"type": "memory/init/req", "id": "x6", "version": "1.0"}', "invalid_message", "x6", "namespace"),
        ('{"type": "memory/init/req", "id": "x7", "version": "1.0", "namespace": 5}', "invalid_message", "x7", "namespace"),
        ('{"type": "memory/retrieve/req", "id": "x8", "version": "1.0", "memory_id": "m", "limit": 0}',
         "invalid_message", "x8", "limit"),
        ('{"type": "memory/retrieve/req", "id": "x9", "version": "1.0", "memory_id": "m", "tier": "deep"}',
         "invalid_message", "x9", "tier"),
        ('{"type": "memory/retrieve/req", "id": "x10", "version": "1.0", "memory_id": "m", "min_score": 2}',
         "invalid_message", "x10", "min_score"),
        ('{"type": "memory/store/req", "id": "x11", "version": "1.0", "memory_id": "nope", "entries": []}',
         "memory_not_found", "x11", "memory_id"),
        ('{"type": "memory/retrieve/req", "id": "x12", "version": "1.0", "memory_id": "nope"}',
         "memory_not_found", "x12", "memory_id"),
        ('{"type": "memory/forget/req", "id": "x13", "version": "1.0", "memory_id": "nope", "tags": ["a"]}',
         "memory_not_found", "x13", "memory_id"),
        ('{"type": "memory/store/req", "id": "x14", "version": "1.0", "entries": []}',
         "invalid_message", "x14", "memory_id"),
    ],
)
async def test_error_replies(raw_ws: Any, frame: str, code: str, req_id: str, field: str | None) -> None:
    """Each malformed or unserviceable frame gets one error reply with the right code."""
    reply = await reply_to(raw_ws, frame)
    assert reply["type"] == "error" and reply["code"] == code
    assert reply["req_id"] == req_id
    assert reply["capability_name"] == "memory" and reply["retryable"] is False
    assert reply["version"] == "1.0" and reply["id"] and reply["message"]
    if field is not None:
        assert reply["detail"]["field"] == field
    # the connection stays usable
    pong = await reply_to(raw_ws, '{"type": "ping", "id": "after", "version": "1.0"}')
    assert pong["type"] == "pong" and pong["req_id"] == "after"


async def test_binary_frame_is_parse_error(raw_ws: Any) -> None:
    """A binary frame is answered with parse_error and the connection stays open."""
    reply = await reply_to(raw_ws, b'{"type": "ping", "version": "1.0"}')
    assert reply["code"] == "parse_error"
    assert (await reply_to(raw_ws, '{"type": "ping", "version": "1.0"}'))["type"] == "pong"


async def test_bad_key_in_retrieve(client: MemoryClient, raw_ws: Any) -> None:
    """An empty key object in retrieve keys is invalid_message naming keys."""
    mid = (await reply_to(raw_ws, '{"type":"memory/init/req","version":"1.0","namespace":"n"}'))["memory_id"]
    reply = await reply_to(raw_ws, json.dumps({"type": "memory/retrieve/req", "id": "k",
                                               "version": "1.0", "memory_id": mid, "keys": [{}]}))
    assert reply["code"] == "invalid_message" and reply["detail"]["field"] == "keys"


async def test_oversized_frame_closes_only_that_connection(
    url: str, connect: Callable[..., Any], host: Any
) -> None:
    """A frame over the limit closes its connection with 1009; another connection is unharmed."""
    other: MemoryClient = await connect()
    await other.init("ns", {"agent": "o"})
    limit = host.config.limits.max_frame_bytes
    async with ws_connect(url, max_size=None, compression=None) as ws:
        await ws.send("x" * (limit + 1))
        with pytest.raises(ConnectionClosed):
            await ws.recv()
        assert ws.close_code == 1009
    assert (await other.store([{"key": {"k": 1}, "content": 1, "tier": "episodic"}])).stored


async def test_invalid_utf8_closes_with_1007(url: str, connect: Callable[..., Any]) -> None:
    """A text frame that is not UTF-8 closes that connection with 1007; others keep working."""
    other: MemoryClient = await connect()
    async with ws_connect(url, max_size=None, compression=None) as ws:
        # websockets validates outgoing text, so build the frame on the raw protocol
        from websockets.frames import Frame, Opcode

        ws.protocol.send_frame(Frame(Opcode.TEXT, b'{"type":"ping","x":"\xff\xfe"}'))
        ws.send_data()  # type: ignore[attr-defined]
        with pytest.raises(ConnectionClosed):
            await ws.recv()
        assert ws.close_code == 1007
    assert (await other.ping()).uptime_seconds >= 0


async def test_host_serves_others_while_one_misbehaves(url: str, connect: Callable[..., Any]) -> None:
    """A stream of garbage on one connection does not disturb a well-behaved one."""
    good: MemoryClient = await connect()
    await good.init("ns", {"agent": "g"})
    async with ws_connect(url, compression=None) as bad:
        for i in range(50):
            await bad.send("{" * (i + 1))
            await good.store([{"key": {"i": i}, "content": i, "tier": "episodic"}])
        replies = [json.loads(await bad.recv()) for _ in range(50)]
    assert {r["code"] for r in replies} == {"parse_error"}
    assert (await good.retrieve(limit=100)).total == 50


@pytest.mark.parametrize("tier", ["working", "episodic", "semantic"])
async def test_content_number_out_of_range_is_a_bad_entry(raw_ws: Any, tier: str) -> None:
    """A content number beyond float range (1e999) is that entry's invalid_message, not an
    internal_error of the request: the other entries are stored."""
    mid = (await reply_to(raw_ws, '{"type":"memory/init/req","version":"1.0","namespace":"n"}'))["memory_id"]
    frame = ('{"type":"memory/store/req","id":"big","version":"1.0","memory_id":"' + mid
             + '","entries":[{"key":{"a":1},"content":[1e999],"tier":"' + tier + '"},'
             '{"key":{"a":2},"content":"fine","tier":"' + tier + '"}]}')
    reply = await reply_to(raw_ws, frame)
    assert reply["type"] == "memory/store/resp", reply
    assert reply["stored"] == [{"a": 2}]
    assert len(reply["errors"]) == 1 and reply["errors"][0].startswith("entries[0]: invalid_message:")
    got = await reply_to(raw_ws, json.dumps({"type": "memory/retrieve/req", "id": "r", "version": "1.0",
                                             "memory_id": mid, "tier": tier}))
    assert [e["key"] for e in got["entries"]] == [{"a": 2}]


async def test_a_query_of_thousands_of_words_uses_its_first_terms(client: MemoryClient) -> None:
    """A query of 30,000 words is answered from its first `search.max_query_terms` distinct
    terms: an entry matching the first word is found, one matching only a word past the
    limit is not (the rest of the query is ignored rather than searched term by term)."""
    await client.store([{"key": {"k": 1}, "content": "zebra crossing", "tier": "episodic"},
                        {"key": {"k": 2}, "content": "giraffe neck", "tier": "episodic"}])
    filler = " ".join(f"w{i}x" for i in range(30_000))
    found = await client.retrieve(query=f"zebra {filler} giraffe", limit=10)
    assert [e["key"] for e in found.entries] == [{"k": 1}]


HUGE_INT = "9" * 400  # valid JSON; no IEEE double holds it (RFC 8785 keys compare as doubles)


@pytest.mark.parametrize(
    ("frame", "req_id", "field"),
    [
        ('{"type":"ping","id":"t1","version":"1.0","ts":1e999}', "t1", "ts"),
        ('{"type":"ping","id":"t2","version":"1.0","ts":-1e999}', "t2", "ts"),
        ('{"type":"memory/retrieve/req","id":"t3","version":"1.0","memory_id":"m",'
         '"min_score":1e999}', "t3", "min_score"),
        ('{"type":"memory/retrieve/req","id":"t4","version":"1.0","memory_id":"m",'
         '"limit":1e999}', "t4", "limit"),
        ('{"type":"memory/init/req","id":"t5","version":"1.0","namespace":"n",'
         '"metadata":{"x":1e999}}', "t5", "metadata"),
        ('{"type":"memory/init/req","id":"t6","version":"1.0","namespace":"n",'
         '"ts":' + HUGE_INT + '}', "t6", "ts"),
    ],
)
async def test_numbers_out_of_range_are_invalid_message(
    raw_ws: Any, frame: str, req_id: str, field: str
) -> None:
    """A number JSON allows but the host cannot hold (1e999, a 400-digit integer) in a request
    field is invalid_message naming that field, with the request's req_id (not parse_error)."""
    reply = await reply_to(raw_ws, frame)
    assert reply["type"] == "error" and reply["code"] == "invalid_message", reply
    assert reply["req_id"] == req_id and reply["retryable"] is False
    assert reply["detail"]["field"].startswith(field), reply


async def _session(ws: Any) -> str:
    init = '{"type":"memory/init/req","version":"1.0","namespace":"n","scope":{"agent":"a"}}'
    return str((await reply_to(ws, init))["memory_id"])


@pytest.mark.parametrize("tier", ["working", "episodic", "semantic"])
@pytest.mark.parametrize(
    "bad",
    [
        '{"key":{"n":' + HUGE_INT + '},"content":"x","tier":"TIER"}',
        '{"key":{"n":[1,{"m":-' + HUGE_INT + '}]},"content":"x","tier":"TIER"}',
        '{"key":{"n":1},"content":{"big":' + "7" * 5000 + '},"tier":"TIER"}',
        '{"key":{"n":1},"content":"x","tier":"TIER","score":1e999}',
        '{"key":{"n":1},"content":"x","tier":"TIER","ttl":' + HUGE_INT + '}',
        '{"key":{"n":1},"content":"x","tier":"TIER","created_at":1e999}',
    ],
)
async def test_a_huge_number_in_an_entry_does_not_stop_the_others(
    raw_ws: Any, tier: str, bad: str
) -> None:
    """An entry holding a number out of range (in its key, content, score, ttl or a timestamp)
    is that entry's invalid_message; the valid entry beside it is stored and read back."""
    mid = await _session(raw_ws)
    good = '{"key":{"ok":1},"content":"fine","tier":"TIER"}'
    frame = ('{"type":"memory/store/req","id":"s","version":"1.0","memory_id":"' + mid
             + '","entries":[' + bad.replace("TIER", tier) + "," + good.replace("TIER", tier)
             + "]}")
    reply = await reply_to(raw_ws, frame)
    assert reply["type"] == "memory/store/resp", reply
    assert reply["req_id"] == "s" and reply["stored"] == [{"ok": 1}]
    assert len(reply["errors"]) == 1, reply
    assert reply["errors"][0].startswith("entries[0]: invalid_message:"), reply
    got = await reply_to(raw_ws, json.dumps({"type": "memory/retrieve/req", "id": "r",
                                             "version": "1.0", "memory_id": mid, "tier": tier}))
    assert [e["key"] for e in got["entries"]] == [{"ok": 1}]


@pytest.mark.parametrize("kind", ["retrieve", "forget"])
async def test_a_huge_integer_in_request_keys_is_invalid_message(raw_ws: Any, kind: str) -> None:
    """A 400-digit integer in retrieve or forget `keys` is invalid_message naming keys, with
    the request's req_id; the connection keeps working."""
    mid = await _session(raw_ws)
    frame = ('{"type":"memory/' + kind + '/req","id":"k","version":"1.0","memory_id":"' + mid
             + '","keys":[{"n":' + HUGE_INT + '}]}')
    reply = await reply_to(raw_ws, frame)
    assert reply["code"] == "invalid_message" and reply["req_id"] == "k", reply
    assert reply["detail"]["field"] == "keys"
    assert (await reply_to(raw_ws, '{"type":"ping","id":"p","version":"1.0"}'))["type"] == "pong"
