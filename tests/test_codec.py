"""The pure protocol layer: decoding, error classification, encoding."""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.codec import decode_entry, decode_message, decode_request, encode, error_reply
from protocol.errors import ErrorCode, ProtocolError
from protocol.messages import MemoryRetrieveRequest, MemoryStoreRequest, Pong


def test_defaults_filled_when_omitted() -> None:
    """Fields with spec defaults may be omitted; id and ts default too."""
    msg = decode_request('{"type":"memory/retrieve/req","version":"1.0","memory_id":"m"}')
    assert isinstance(msg, MemoryRetrieveRequest)
    assert (msg.id, msg.keys, msg.query, msg.tags, msg.tier, msg.limit, msg.min_score) == (
        "", [], "", [], "", 10, 0.0)


def test_unknown_fields_ignored() -> None:
    """Unknown fields are ignored at the top level and inside entries."""
    msg = decode_request('{"type":"memory/store/req","version":"1.0","memory_id":"m","x":1,'
                         '"entries":[{"key":{"k":1},"content":2,"tier":"working","y":[1]}]}')
    assert isinstance(msg, MemoryStoreRequest)
    assert decode_entry(bytes(msg.entries[0])).tier == "working"


@pytest.mark.parametrize("version", ["1", "1.0", "1.1", "1.10.3"])
def test_versions_1x_accepted(version: str) -> None:
    """Any 1.x version is spoken."""
    decode_request(json.dumps({"type": "ping", "version": version}))


@pytest.mark.parametrize("version", ["2.0", "0.9", "", "1.x", "v1"])
def test_other_versions_mismatch(version: str) -> None:
    """A version that is not 1.x is version_mismatch, with the request id kept."""
    with pytest.raises(ProtocolError) as err:
        decode_request(json.dumps({"type": "ping", "version": version, "id": "q"}))
    assert err.value.code is ErrorCode.VERSION_MISMATCH and err.value.req_id == "q"


def test_entry_constraints_declared_in_types() -> None:
    """score outside [0, 1], negative ttl and unknown tier fail entry decoding."""
    for bad in ({"score": -0.1}, {"score": 1.01}, {"ttl": -1}, {"tier": "x"}, {"ttl": 1.5}):
        raw = json.dumps({"key": {"k": 1}, "content": 1, "tier": "episodic", **bad})
        with pytest.raises(msgspec.ValidationError):
            decode_entry(raw.encode())


def test_reply_round_trip() -> None:
    """A reply encodes to JSON that decodes back to the same struct."""
    pong = Pong(id="p", version="1.0", ts=1.5, req_id="r", uptime_seconds=3.0)
    assert decode_message(encode(pong)) == pong


def test_error_reply_retryable_follows_code() -> None:
    """rate_limited and internal_error are retryable; the others are not."""
    assert error_reply(ErrorCode.RATE_LIMITED, "slow down").retryable
    assert error_reply(ErrorCode.INTERNAL_ERROR, "oops").retryable
    assert not error_reply(ErrorCode.MEMORY_FULL, "full").retryable


# What decoding may answer: the input's fault, never the host's.
DECODE_CODES = {ErrorCode.PARSE_ERROR, ErrorCode.INVALID_MESSAGE, ErrorCode.VERSION_MISMATCH}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@given(st.one_of(st.binary(max_size=200), st.text(max_size=200), json_values.map(json.dumps)))
def test_decode_never_crashes(data: bytes | str) -> None:
    """Any input either decodes to a request or raises ProtocolError with a client's-fault
    code (never internal_error) — nothing else."""
    try:
        decode_request(data)
    except ProtocolError as err:
        assert err.code in DECODE_CODES


@given(st.dictionaries(st.sampled_from(["type", "id", "version", "ts", "memory_id", "namespace",
                                        "entries", "keys", "limit", "tier", "tags"]),
                       json_values, max_size=8))
def test_decode_mutated_messages(fields: dict) -> None:
    """Messages with random field values are decoded or classified as the client's fault
    (parse_error for a non-finite number, which JSON has not; invalid_message;
    version_mismatch), never crash."""
    fields.setdefault("type", "memory/retrieve/req")
    try:
        decode_request(json.dumps(fields))
    except ProtocolError as err:
        assert err.code in DECODE_CODES
