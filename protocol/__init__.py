"""The A2E memory wire protocol: messages, codec, error codes, canonical keys. Pure: no I/O."""

from protocol.codec import decode_entry, decode_message, decode_request, encode, error_reply
from protocol.errors import ErrorCode, ProtocolError
from protocol.keys import canonical_key
from protocol.messages import VERSION

__all__ = [
    "VERSION",
    "ErrorCode",
    "ProtocolError",
    "canonical_key",
    "decode_entry",
    "decode_message",
    "decode_request",
    "encode",
    "error_reply",
]
