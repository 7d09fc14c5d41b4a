"""The front's fast path: a plain kept-alive HTTP/1.1 request read, and its reply written,
without h11's state machine, where h11 would do exactly the same.

h11 (`host.net.front`) reads every request the host answers, and its per-request cycle
(events, state transitions, the response's clean-up) costs several times what a plain request
needs: most of an HTTP + SSE message's CPU is that cycle. Most requests on a kept-alive
connection are plain: a request line, a few header lines, a `Content-Length` body that arrived
whole. `read_simple` recognises a strict subset of what h11 accepts and returns it already
parsed; anything else (`None`) goes to h11 as before, which gives the errors (400, 411, 413,
431), reads chunked and partial bodies, answers `Expect: 100-continue`, and upgrades.

What the subset is, each a condition h11 would accept and read the same way:

- the request line `METHOD SP /target SP HTTP/1.1` with an upper-case method, a target of
  visible ASCII starting with `/`;
- header lines `name: value` with CR LF line ends, a token name, a value of visible ASCII words
  separated by spaces or tabs (no obs-text, no control character, no empty value, no folding),
  optional whitespace around the value (stripped, as h11 strips it);
- exactly one `Host`, at most one `Content-Length` (1-18 digits, within the limit), no
  `Transfer-Encoding`, `Expect` or `Upgrade`, `Connection` absent or `keep-alive`;
- the head within the front's head bound and the whole body in the bytes already received.

`response_head` validates a reply's head once through h11 (an `h11.Response`, cached by
content) and keeps its bytes as `head_bytes` writes them: as h11 writes a head for a kept-alive
HTTP/1.1 request (the status line with its phrase, the headers in order, Host first, nothing
changed: h11 leaves a reply with a `Content-Length` on a kept-alive connection as it is).
tests/test_simple_http.py checks both against h11 itself on generated requests and replies.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import h11

__all__ = ["Head", "Simple", "head_bytes", "read_simple", "response_head", "validated"]

_LINE = re.compile(rb"[-!#$%&'*+.^_`|~0-9a-zA-Z]+:[ \t]*[\x21-\x7e]+(?:[ \t]+[\x21-\x7e]+)*[ \t]*")
_REQUEST_LINE = re.compile(rb"([A-Z]+) (/[\x21-\x7e]*) HTTP/1\.1")
_REFUSED = frozenset({b"transfer-encoding", b"expect", b"upgrade"})


@dataclass(slots=True)
class Simple:
    """One plain request: its parts as the front's `HttpRequest` takes them, and how many
    bytes of the buffer it spans (head and body)."""

    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes
    size: int


def read_simple(buf: bytes | bytearray, head_max: int, body_max: int) -> Simple | None:
    """The plain request at the start of `buf`, or None when h11 must read it (see the module's
    docstring for what plain means). `head_max` bounds the head (with its blank line),
    `body_max` the declared body."""
    end = buf.find(b"\r\n\r\n", 0, head_max)
    if end < 0:
        return None
    lines = bytes(buf[:end]).split(b"\r\n")
    first = _REQUEST_LINE.fullmatch(lines[0])
    if first is None:
        return None
    headers: list[tuple[str, str]] = []
    hosts = 0
    length: bytes | None = None
    line_match = _LINE.fullmatch
    for line in lines[1:]:
        if line_match(line) is None:
            return None
        name, _, value = line.partition(b":")
        value = value.strip(b" \t")
        lower = name.lower()
        if lower == b"host":
            hosts += 1
        elif lower == b"content-length":
            if length is not None or not value.isdigit() or len(value) > 18:
                return None
            length = value
        elif lower in _REFUSED:
            return None
        elif lower == b"connection" and value.lower() != b"keep-alive":
            return None
        headers.append((name.decode("ascii"), value.decode("ascii")))
    if hosts != 1:
        return None
    size = int(length) if length is not None else 0
    if size > body_max:
        return None
    start = end + 4
    if len(buf) < start + size:
        return None
    return Simple(first[1].decode("ascii"), first[2].decode("ascii"), headers,
                  bytes(buf[start:start + size]), start + size)


def head_bytes(status: int, reason: bytes, headers: list[tuple[bytes, bytes]]) -> bytes:
    """A reply head as h11 writes it: the status line, then `Host` (if any) and the other
    headers in their order, then the blank line. `headers` are already validated (an
    `h11.Response` made them)."""
    out = [b"HTTP/1.1 %d %s\r\n" % (status, reason)]
    out += [b"%s: %s\r\n" % (n, v) for n, v in headers if n.lower() == b"host"]
    out += [b"%s: %s\r\n" % (n, v) for n, v in headers if n.lower() != b"host"]
    out.append(b"\r\n")
    return b"".join(out)


class Head:
    """A validated response head: h11's event, and its bytes as h11 writes them for a
    kept-alive request (the fast path's)."""

    __slots__ = ("event", "raw")

    def __init__(self, event: h11.Response) -> None:
        self.event = event
        self.raw = head_bytes(event.status_code, event.reason, list(event.headers.raw_items()))


_HEADS: dict[tuple[Any, ...], Head] = {}  # validated heads by content (no body)
_HEADS_MAX = 256


def response_head(status: HTTPStatus | int, headers: dict[str, str], cookies: list[str],
              fixed: list[tuple[str, str]]) -> Head:
    """A response head: `fixed` first, then `headers` not named there, then cookies.
    Raises `h11.LocalProtocolError` for a header h11 will not write (CR LF in a value, a
    character outside Latin-1). The same head again (a 202 of /send, a 200 of /healthz) is
    the one validated before: h11's events are immutable."""
    key = (status, *fixed, *headers.items(), *cookies)
    head = _HEADS.get(key)
    if head is None:
        head = Head(validated(status, headers, cookies, fixed))
        if len(_HEADS) >= _HEADS_MAX:
            _HEADS.clear()
        _HEADS[key] = head
    return head


def validated(status: HTTPStatus | int, headers: dict[str, str], cookies: list[str],
               fixed: list[tuple[str, str]]) -> h11.Response:
    names = {name.lower() for name, _ in fixed}
    items = list(fixed)
    items += [(n, v) for n, v in headers.items() if n.lower() not in names]
    items += [("Set-Cookie", c) for c in cookies]
    st = HTTPStatus(status)
    try:
        raw = [(n.encode("latin-1"), v.encode("latin-1")) for n, v in items]
    except UnicodeEncodeError as exc:
        raise h11.LocalProtocolError(f"a header outside Latin-1: {exc}") from None
    return h11.Response(status_code=st.value, headers=raw, reason=st.phrase)
