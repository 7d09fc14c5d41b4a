"""The error replies the request core makes itself: for an exception a handler raised, a
request past the rate or its deadline, a binary message."""

from __future__ import annotations

import logging
from typing import Any

from protocol.codec import error_reply
from protocol.errors import ErrorCode, ProtocolError

__all__ = ["binary_refused", "error_for", "past_deadline", "rate_limited"]

log = logging.getLogger("a2e_host.pipeline")


def error_for(exc: BaseException, req_id: str) -> Any:
    """The `error` reply for an exception a request raised (internal ones are logged)."""
    if isinstance(exc, ProtocolError):
        detail = {"field": exc.field} if exc.field else {}
        if exc.detail:
            detail.update(exc.detail)
        return error_reply(exc.code, exc.message, exc.req_id or req_id, detail)
    if isinstance(exc, RecursionError):  # hostile nesting that got past the frame decoder
        log.warning("request %s: value nested too deeply", req_id)
        return error_reply(ErrorCode.INVALID_MESSAGE, "JSON nested too deeply", req_id)
    log.error("internal error on request %s", req_id, exc_info=exc)
    return error_reply(ErrorCode.INTERNAL_ERROR, "internal error; the request may be retried", req_id)


def rate_limited(req_id: str) -> ProtocolError:
    """The error of a request past the connection's `limits.requests_per_second`."""
    return ProtocolError(ErrorCode.RATE_LIMITED,
                         "too many requests on this connection; retry later", req_id=req_id)


def binary_refused() -> Any:
    """The `parse_error` reply to a binary message (the protocol is JSON text)."""
    return error_reply(ErrorCode.PARSE_ERROR, "binary frames are not accepted; send JSON text")


def past_deadline(req_id: str, timeout: float | None) -> Any:
    """The `error` reply for a request answered at its deadline (retryable)."""
    log.warning("request %s exceeded the deadline of %s s", req_id, timeout)
    return error_reply(ErrorCode.INTERNAL_ERROR,
                       f"request deadline of {timeout} s exceeded; it may still take effect;"
                       " retry", req_id, {"reason": "deadline"})
