"""Hostile input over a real socket: hypothesis generates and mutates frames, a host subprocess
answers each with one well-formed reply or a documented close (1007 for text that is not UTF-8,
1009 for an oversized frame), never an internal error, and a second connection is served
throughout. Bounded to a few hundred examples (seconds); `scripts/fuzz/fuzz_host.py` runs longer."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.hosts import TRANSPORTS
from support.procs import HostProcess
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection
from websockets.sync.client import connect as ws_connect

from protocol.errors import RETRYABLE, ErrorCode
from protocol.messages import REQUEST_TYPES, TIERS

MAX_FRAME = 4096
REPLY_TYPES = {"memory/init/resp", "memory/store/resp", "memory/retrieve/resp",
               "memory/forget/resp", "memory/watch/resp", "memory/unwatch/resp",
               "memory/paths/resp", "memory/sweep/resp", "memory/usage/resp",
               "memory/history/resp", "handshake/resp", "pong", "error"}
EVENT_TYPES = {"memory/changed/event", "memory/watch/ended/event"}  # not replies: skipped
CODES = {c.value for c in ErrorCode} - {ErrorCode.INTERNAL_ERROR.value}
MID = "$MID"  # stands for the live session's memory_id

# numbers JSON allows but a double cannot hold (a 400-digit integer, 1e999) are written as
# literals: `_wire` swaps each RAW_NUMBER string for the number itself
RAW_NUMBER = "\x00num:"
raw_number = st.sampled_from(["1e999", "-1e999", "1e-999", "9" * 400, "-" + "9" * 400,
                              "1" + "0" * 1000, "2e308", "123456789012345678901234567890.5"])
leaf = (st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats()
        | st.integers(-(10**30), 10**30) | raw_number.map(lambda n: RAW_NUMBER + n)
        | st.text(max_size=12))
value = st.recursive(leaf, lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)
tier = st.sampled_from(["", *TIERS, "deep"]) | value
entry = st.fixed_dictionaries(
    {"key": st.dictionaries(st.text(max_size=6), value, max_size=3) | value,
     "content": value, "tier": tier},
    optional={"tags": st.lists(st.text(max_size=6), max_size=3) | value,
              "score": st.floats(-1, 2) | value, "ttl": st.integers(-5, 2**65) | value,
              "source": value},
)
message = st.fixed_dictionaries(
    {"type": st.sampled_from(sorted(REQUEST_TYPES) + ["memory/init/resp", "error", "x"]) | value,
     "version": st.sampled_from(["1.0", "1", "1.7", "2.0", ""]) | value},
    optional={
        "id": st.text(max_size=8) | value, "ts": st.floats() | value,
        "memory_id": st.just(MID) | st.text(max_size=8) | value,
        "namespace": st.text(max_size=8) | value, "scope": st.fixed_dictionaries(
            {}, optional={"agent": st.text(max_size=6) | value}) | value,
        "entries": st.lists(entry | value, max_size=3) | value,
        "keys": st.lists(st.dictionaries(st.text(max_size=4), value, max_size=2) | value,
                         max_size=3) | value,
        "tags": st.lists(st.text(max_size=6), max_size=3) | value, "tier": tier,
        "query": st.text(max_size=30) | value, "limit": st.integers(-2, 2**65) | value,
        "min_score": st.floats() | value, "auth_token": st.text(max_size=8) | value,
        "agent_id": value, "agent_caps": st.lists(st.text(max_size=8), max_size=2) | value,
        "unknown_field": value,
    },
)
frame = st.one_of(
    message.map(lambda m: ("json", m)),
    value.map(lambda v: ("json", v)),
    st.text(max_size=40).map(lambda t: ("text", t)),
    st.binary(max_size=40).map(lambda b: ("binary", b)),
    st.binary(min_size=1, max_size=8).map(lambda b: ("bad_utf8", b"\xff" + b)),
    st.integers(MAX_FRAME + 1, MAX_FRAME * 2).map(lambda n: ("big", "x" * n)),
)


def _open(url: str) -> ClientConnection:
    return ws_connect(url, compression=None, max_size=None).__enter__()


class Peer:
    """Connection A (the one under fire) with a live session, reopened after a documented close."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.ws: ClientConnection | None = None
        self.memory_id = ""

    def open(self) -> ClientConnection:
        if self.ws is None:
            self.ws = _open(self.url)
            self.ws.send(json.dumps({"type": "memory/init/req", "id": "i", "version": "1.0",
                                     "namespace": "fuzz", "scope": {"agent": "f"}}))
            self.memory_id = json.loads(self.ws.recv(timeout=10))["memory_id"]
        return self.ws

    def closed(self) -> None:
        if self.ws is not None:
            self.ws.close()
        self.ws = None


def _wire(kind: str, payload: Any, memory_id: str) -> tuple[str | bytes, str]:
    """The frame to send and the req_id its reply must carry ("" without a string `id`)."""
    if kind != "json":
        return payload, ""
    if isinstance(payload, dict) and payload.get("memory_id") == MID:
        payload = {**payload, "memory_id": memory_id}
    rid = payload.get("id") if isinstance(payload, dict) else None
    try:
        text = json.dumps(payload, allow_nan=False)
    except ValueError:  # NaN or Infinity inside: not JSON, so no id can be read
        return json.dumps(payload), ""
    text = _RAW_RE.sub(lambda m: m.group(1), text)
    return text, rid if isinstance(rid, str) and not rid.startswith(RAW_NUMBER) else ""


_RAW_RE = re.compile(r'"\\u0000num:([-0-9.e]+)"')


def _next_reply(ws: ClientConnection) -> str | bytes:
    """The next frame that is a reply: a watch the fuzzer opened sends events in between."""
    while True:
        frame = ws.recv(timeout=10)
        try:
            kind = json.loads(frame).get("type")
        except (ValueError, AttributeError):
            return frame
        if kind not in EVENT_TYPES:
            return frame


def _check(reply_text: str | bytes, req_id: str) -> None:
    reply = json.loads(reply_text)
    assert isinstance(reply, dict) and reply["type"] in REPLY_TYPES, reply
    assert reply["version"] == "1.0" and isinstance(reply["id"], str)
    if reply["type"] == "error":
        assert reply["code"] in CODES, reply  # never internal_error
        assert reply["retryable"] == (reply["code"] in {c.value for c in RETRYABLE})
        assert "Traceback" not in reply["message"]
    assert reply["req_id"] == req_id, (reply, req_id)


@pytest.fixture(scope="module", params=TRANSPORTS)
def fuzz_host(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HostProcess]:
    """A host subprocess (on each transport) with small frames and no rate limit, killed after
    the module."""
    folder = tmp_path_factory.mktemp("fuzz")
    cfg = folder / "host.toml"
    cfg.write_text(f"[limits]\nmax_frame_bytes = {MAX_FRAME}\nrequests_per_second = 0\n")
    proc = HostProcess(folder / "a2e.db", "--config", str(cfg), transport=request.param)
    yield proc
    proc.proc.kill()
    proc.proc.wait()


@pytest.fixture(scope="module")
def peers(fuzz_host: HostProcess) -> Iterator[tuple[Peer, ClientConnection]]:
    """Connection A under fire and connection B that must keep being served."""
    a = Peer(fuzz_host.url)
    b = _open(fuzz_host.url)
    yield a, b
    a.closed()
    b.close()


@settings(max_examples=300, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(frames=st.lists(frame, min_size=1, max_size=4))
def test_every_frame_gets_a_reply_or_a_documented_close(
    peers: tuple[Peer, ClientConnection], fuzz_host: HostProcess, frames: list[tuple[str, Any]]
) -> None:
    """Pipelined generated frames are answered in order, one reply each; a frame that is not
    UTF-8 text or is oversized closes the connection with 1007/1009 (replies to the frames
    pipelined before it may be cut off by the close); a valid `shutdown` is answered by a close
    with 1000 after the replies before it (an invalid one by its error). B keeps answering
    pings throughout."""
    a, b = peers
    ws = a.open()
    expected: list[str] = []
    closing: int | None = None
    shutdown: str | None = None  # the req_id of a `shutdown` sent last
    try:
        for kind, payload in frames:
            data, rid = _wire(kind, payload, a.memory_id)
            if kind == "json" and len(data.encode()) > MAX_FRAME:
                kind = "big"  # the numbers written as literals made it oversized
            ws.send(data, text=True if kind == "bad_utf8" else None)
            if kind in ("bad_utf8", "big"):
                closing = 1007 if kind == "bad_utf8" else 1009
                break
            if kind == "json" and isinstance(payload, dict) and payload.get("type") == "shutdown":
                shutdown = rid  # nothing after it is read: send no more
                break
            expected.append(rid)
        for rid in expected:
            try:
                reply = _next_reply(ws)
            except ConnectionClosed:
                if closing is None:
                    raise
                break
            _check(reply, rid)
        if shutdown is not None:
            try:
                _check(_next_reply(ws), shutdown)  # not a valid shutdown: its error reply
            except ConnectionClosed as done:  # a valid one: the replies, then 1000
                assert done.rcvd is not None and done.rcvd.code == 1000
                closing = 1000
        elif closing is not None:
            with pytest.raises(ConnectionClosed) as err:
                while True:
                    _check(_next_reply(ws), expected.pop(0) if expected else "")
            assert err.value.rcvd is not None and err.value.rcvd.code == closing
    finally:
        if closing is not None or ws.state.name != "OPEN":
            a.closed()
    b.send(json.dumps({"type": "ping", "id": "p", "version": "1.0"}))
    assert json.loads(b.recv(timeout=10))["type"] == "pong"
    assert fuzz_host.proc.poll() is None


def test_fuzzed_host_still_serves_a_fresh_client(
    peers: tuple[Peer, ClientConnection], fuzz_host: HostProcess
) -> None:
    """After the fuzzing, a new connection stores and reads back an entry."""
    with ws_connect(fuzz_host.url, compression=None) as ws:
        ws.send(json.dumps({"type": "memory/init/req", "id": "1", "version": "1.0",
                            "namespace": "ok"}))
        mid = json.loads(ws.recv(timeout=10))["memory_id"]
        ws.send(json.dumps({"type": "memory/store/req", "id": "2", "version": "1.0",
                            "memory_id": mid,
                            "entries": [{"key": {"k": 1}, "content": "fine", "tier": "episodic"}]}))
        assert json.loads(ws.recv(timeout=10))["stored"] == [{"k": 1}]
        ws.send(json.dumps({"type": "memory/retrieve/req", "id": "3", "version": "1.0",
                            "memory_id": mid, "keys": [{"k": 1}]}))
        assert [e["content"] for e in json.loads(ws.recv(timeout=10))["entries"]] == ["fine"]


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        (_deep(1500), "parse_error"),
        ('{"type": "memory/retrieve/req", "version": "1.0", "id": "d", "memory_id": "$MID",'
         f' "keys": [{{"a": {_deep(1500)}}}]}}', "parse_error"),
        ('{"type": "memory/retrieve/req", "version": "1.0", "id": "d", "memory_id": "$MID",'
         f' "keys": [{{"a": {_deep(900)}}}]}}', None),
        ('{"type": "memory/store/req", "version": "1.0", "id": "d", "memory_id": "$MID",'
         f' "entries": [{{"key": {{"a": 1}}, "content": {_deep(900)}, "tier": "working"}}]}}',
         None),
    ],
    ids=["deep-frame", "deep-key", "deep-key-under-the-decoder-limit", "deep-content"],
)
def test_deep_nesting_is_refused_not_a_crash(
    peers: tuple[Peer, ClientConnection], frame: str, code: str | None
) -> None:
    """JSON nested past the decoder's recursion limit is parse_error; nesting that the frame
    decoder accepts but a later step cannot follow is answered without internal_error."""
    a, _ = peers
    ws = a.open()
    ws.send(frame.replace("$MID", a.memory_id))
    reply = json.loads(ws.recv(timeout=10))
    assert reply.get("code") != "internal_error", reply
    if code is not None:
        assert reply["type"] == "error" and reply["code"] == code


def test_a_ttl_past_the_bound_is_an_entry_error(peers: tuple[Peer, ClientConnection]) -> None:
    """A ttl above 2**53 - 1 seconds is reported as invalid_message for that entry only."""
    a, _ = peers
    ws = a.open()
    entries = [{"key": {"t": 1}, "content": 1, "tier": "episodic", "ttl": 2**63},
               {"key": {"t": 2}, "content": 1, "tier": "episodic", "ttl": 2**53 - 1}]
    ws.send(json.dumps({"type": "memory/store/req", "version": "1.0", "id": "t",
                        "memory_id": a.memory_id, "entries": entries}))
    reply = json.loads(ws.recv(timeout=10))
    assert reply["stored"] == [{"t": 2}]
    assert reply["errors"][0].startswith("entries[0]: invalid_message")
