"""Error codes of the wire protocol and whether a client may retry them."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["ErrorCode", "RETRYABLE", "ProtocolError"]


class ErrorCode(StrEnum):
    """The `code` of an `error` reply (see docs/protocol.md, "Errors")."""

    PARSE_ERROR = "parse_error"
    INVALID_MESSAGE = "invalid_message"
    VERSION_MISMATCH = "version_mismatch"
    UNAUTHORIZED = "unauthorized"
    MEMORY_NOT_FOUND = "memory_not_found"
    MEMORY_FULL = "memory_full"
    RATE_LIMITED = "rate_limited"
    CURSOR_EXPIRED = "cursor_expired"  # the watch extension: `since` is older than the log
    INTERNAL_ERROR = "internal_error"


RETRYABLE: frozenset[ErrorCode] = frozenset({ErrorCode.RATE_LIMITED, ErrorCode.INTERNAL_ERROR})


class ProtocolError(Exception):
    """A request that cannot be served; becomes one `error` reply.

    `req_id` is the request's `id` when it could be read ("" otherwise); `field` names the
    offending field for `invalid_message` (it goes to `detail.field`); `detail` is more of the
    reply's `detail` (e.g. `{"reason": "disk_full"}`).
    """

    def __init__(
        self, code: ErrorCode, message: str, *, req_id: str = "", field: str | None = None,
        detail: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.req_id = req_id
        self.field = field
        self.detail = detail
