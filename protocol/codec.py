"""Bytes <-> typed messages. Decoders and the encoder are built once and reused.

`decode_request(data)` is the host's entry point: it returns a typed request or raises
`ProtocolError` with the right code (docs/protocol.md, "Envelope" and "Errors"):
`parse_error` (not JSON, nested deeper than the decoder's recursion limit, not an object),
`invalid_message` (unknown `type`, missing or mistyped
field; `field` names it), `version_mismatch` (a `version` that is not `1.x`).
"""

from __future__ import annotations

import itertools
import os
import re
import uuid
from typing import Any

import msgspec

from protocol.clock import wall_clock
from protocol.errors import RETRYABLE, ErrorCode, ProtocolError
from protocol.messages import VERSION, Error, MemoryEntry, Message, Request

__all__ = [
    "DOUBLE_LIMIT",
    "decode_request",
    "decode_message",
    "decode_entry",
    "encode",
    "numbers_fit",
    "error_reply",
    "new_id",
    "now",
    "version_ok",
]

_request_decoder = msgspec.json.Decoder(Request)
_message_decoder = msgspec.json.Decoder(Message)
_entry_decoder = msgspec.json.Decoder(MemoryEntry)
# the error path reads the untyped frame for its id; a number out of a double's range (1e999)
# reads as infinity there, so the typed decoder's "Number out of range" names its field
_any_decoder = msgspec.json.Decoder(float_hook=float)
_encoder = msgspec.json.Encoder()

encode = _encoder.encode
now = wall_clock  # message timestamps (`ts`); the host's TTL and recency: protocol.clock
_VERSION_RE = re.compile(r"1(\.\d+)*")
_AT_RE = re.compile(r"at `\$\.?([^`]*)`")
_TOO_DEEP = "JSON nested too deeply"
_MISSING_RE = re.compile(r"missing required field `([^`]+)`")
# the decoder reads any integer (a 400-digit one too); one of 309 digits or more may be beyond
# a double's range (1.8e308): only a text with such a run of digits is looked at further. The
# run is found by a byte translation (digits to "0", the rest to " ") and a substring search,
# both linear (a regex tried each start within each run: 28 ms on 64 KiB of 308-digit runs)
_DIGITS_ONLY = bytes(48 if 48 <= b <= 57 else 32 for b in range(256))
_LONG_RUN = b"0" * 309
DOUBLE_LIMIT = 2**1024 - 2**970  # the least integer no double holds (float() overflows)


_id_prefix = str(uuid.uuid4())[:24]  # random per process: "xxxxxxxx-xxxx-4xxx-yxxx-"
_id_counter = itertools.count(int.from_bytes(os.urandom(5), "big"))


def new_id() -> str:
    """A fresh message id in UUID text form, unique in this process and across processes
    (a random 74-bit prefix drawn at start, then a counter): ~10x cheaper than `uuid.uuid4()`."""
    return f"{_id_prefix}{next(_id_counter) & 0xFFFFFFFFFFFF:012x}"


def version_ok(version: str) -> bool:
    """True for a protocol version this host speaks (`1`, `1.0`, `1.x`)."""
    return _VERSION_RE.fullmatch(version) is not None


def _field_of(err: msgspec.ValidationError) -> str | None:
    text = str(err)
    m = _MISSING_RE.search(text)
    if m:
        prefix = _AT_RE.search(text)
        base = prefix.group(1) if prefix and prefix.group(1) else ""
        return f"{base}.{m.group(1)}" if base else m.group(1)
    m = _AT_RE.search(text)
    return m.group(1) if m and m.group(1) else None


def _diagnose(data: bytes | str, err: msgspec.ValidationError) -> ProtocolError:
    """Classify a failed typed decode by looking at the untyped value (error path only)."""
    try:
        raw = _any_decoder.decode(data)
    except msgspec.DecodeError:  # the typed decoder stopped before the bad JSON
        return ProtocolError(ErrorCode.PARSE_ERROR, "frame is not valid JSON")
    except RecursionError:
        return ProtocolError(ErrorCode.PARSE_ERROR, _TOO_DEEP)
    if not isinstance(raw, dict):
        return ProtocolError(ErrorCode.PARSE_ERROR, "message is not a JSON object")
    rid = raw.get("id")
    req_id = rid if isinstance(rid, str) else ""
    version = raw.get("version")
    if isinstance(version, str) and not version_ok(version):
        return ProtocolError(
            ErrorCode.VERSION_MISMATCH,
            f"unsupported protocol version {version!r}; this host speaks 1.x",
            req_id=req_id,
        )
    mtype = raw.get("type")
    if not isinstance(mtype, str):
        return ProtocolError(
            ErrorCode.INVALID_MESSAGE, "missing or non-string `type`", req_id=req_id, field="type"
        )
    field = _field_of(err)
    if field == "type":
        return ProtocolError(
            ErrorCode.INVALID_MESSAGE, f"unknown message type {mtype!r}", req_id=req_id, field="type"
        )
    return ProtocolError(ErrorCode.INVALID_MESSAGE, str(err), req_id=req_id, field=field)


def decode_request(data: bytes | str) -> Request:
    """Decode one frame into a typed request. Raises `ProtocolError` (see module docstring)."""
    try:
        msg = _request_decoder.decode(data)
    except msgspec.ValidationError as err:
        raise _diagnose(data, err) from None
    except msgspec.DecodeError:
        raise ProtocolError(ErrorCode.PARSE_ERROR, "frame is not valid JSON") from None
    except RecursionError:
        raise ProtocolError(ErrorCode.PARSE_ERROR, _TOO_DEEP) from None
    if not version_ok(msg.version):
        raise ProtocolError(
            ErrorCode.VERSION_MISMATCH,
            f"unsupported protocol version {msg.version!r}; this host speaks 1.x",
            req_id=msg.id,
        )
    return msg


def decode_message(data: bytes | str) -> Message:
    """Decode any message (a client reading replies). Raises `msgspec.DecodeError`."""
    return _message_decoder.decode(data)


def decode_entry(raw: bytes) -> MemoryEntry:
    """Decode one store entry. Raises `msgspec.ValidationError`/`DecodeError` if malformed
    (`DecodeError` too for JSON nested deeper than the decoder's recursion limit)."""
    try:
        return _entry_decoder.decode(raw)
    except RecursionError:
        raise msgspec.DecodeError(_TOO_DEEP) from None


def numbers_fit(raw: bytes | msgspec.Raw, value: Any) -> bool:
    """False when `value`, the decoded JSON text `raw`, holds an integer beyond a double's
    range (JSON allows it; docs/protocol.md, "Numbers", refuses it): a decoded float always
    fits (the decoder refuses `1e999`)."""
    if len(raw) < len(_LONG_RUN) or _LONG_RUN not in bytes(raw).translate(_DIGITS_ONLY):
        return True
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
        elif type(v) is int and not -DOUBLE_LIMIT < v < DOUBLE_LIMIT:
            return False
    return True


def error_reply(
    code: ErrorCode, message: str, req_id: str = "", detail: dict[str, Any] | None = None
) -> Error:
    """The `error` reply for `code`, with `retryable` set from the code."""
    return Error(
        id=new_id(),
        version=VERSION,
        ts=now(),
        req_id=req_id,
        code=code.value,
        message=message,
        detail=detail or {},
        retryable=code in RETRYABLE,
    )
