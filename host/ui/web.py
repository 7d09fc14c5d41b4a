"""The memory browser's own small HTTP shape: a `Request` in, a `Response` out, no socket.

Whichever transport carries the bytes (`host.net`), it builds a `Request` (method, path, query,
headers, body, the peer's address) and writes the `Response` (status, headers, body) back, so
every page, sign-in, cookie and CSRF rule of `host.ui` is tested without a server. Helpers
here parse forms and cookies and build the common answers (HTML, redirects, refusals) with the
security headers every answer of the browser carries.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from urllib.parse import parse_qs, urlsplit

from host.net.http import form_fields

__all__ = [
    "MAX_BODY",
    "PREFIX",
    "Request",
    "Response",
    "html_response",
    "redirect",
    "refusal",
    "typed",
]

PREFIX = "/ui"  # where the memory browser answers
MAX_BODY = 64 * 1024  # a sign-in or action form is a few hundred bytes

# every answer of the memory browser: nothing from elsewhere, no framing, no caching, no
# referrer to other sites
_SECURITY_HEADERS: tuple[tuple[str, str], ...] = (
    ("Content-Security-Policy",
     "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
     " connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "same-origin"),  # and so browsers send our own Origin with a form
    ("Cache-Control", "no-store"),
)


@dataclass(frozen=True)
class Request:
    """One HTTP request as the browser's app sees it. `headers` has lower-case names; `remote`
    is the peer's IP address (None when the transport has none); `secure` is True over TLS."""

    method: str
    path: str
    query: Mapping[str, list[str]] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    remote: str | None = None
    secure: bool = False

    @classmethod
    def build(
        cls, method: str, target: str, headers: Iterable[tuple[str, str]] = (),
        body: bytes = b"", remote: str | None = None, secure: bool = False,
    ) -> Request:
        """A request from a request line's `target` (path and query string) and raw header
        pairs (the first of repeated names is kept, names compared without case)."""
        parts = urlsplit(target)
        hdrs: dict[str, str] = {}
        for name, value in headers:
            hdrs.setdefault(name.lower(), value)
        return cls(method.upper(), parts.path or "/", parse_qs(parts.query), hdrs, body,
                   remote, secure)

    def arg(self, name: str, default: str = "") -> str:
        """The first value of query parameter `name`, stripped, or `default`."""
        values = self.query.get(name)
        return values[0].strip() if values else default

    def form(self) -> dict[str, str]:
        """The body as an `application/x-www-form-urlencoded` form (first value of each name);
        empty for any other content type or a body that is not UTF-8."""
        return form_fields(self.headers.get("content-type"), self.body)

    def cookies(self) -> dict[str, str]:
        """The `Cookie` header's name=value pairs (the first of a repeated name)."""
        out: dict[str, str] = {}
        for part in self.headers.get("cookie", "").split(";"):
            name, sep, value = part.strip().partition("=")
            if sep and name:
                out.setdefault(name, value.strip().strip('"'))
        return out


@dataclass
class Response:
    """One answer: status, headers (a list: `Set-Cookie` may repeat), body bytes, or (a
    download) `stream`, the body's chunks as they come."""

    status: int
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    stream: AsyncIterator[bytes] | None = None

    def header(self, name: str) -> str | None:
        """The first value of header `name` (without case), or None."""
        low = name.lower()
        return next((v for n, v in self.headers if n.lower() == low), None)


def _with_security(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [*_SECURITY_HEADERS, *headers]


def html_response(body: str, status: int = HTTPStatus.OK,
                  headers: Iterable[tuple[str, str]] = ()) -> Response:
    """An HTML page with the security headers."""
    return Response(int(status), _with_security(
        [("Content-Type", "text/html; charset=utf-8"), *headers]), body.encode())


def redirect(location: str, headers: Iterable[tuple[str, str]] = ()) -> Response:
    """A 303 See Other to `location` (after a form, the browser GETs it)."""
    return Response(HTTPStatus.SEE_OTHER,
                    _with_security([("Location", location), *headers]), b"")


def refusal(status: int, text: str) -> Response:
    """A plain-text refusal (403, 404, 405, 413 ...) with the security headers."""
    return Response(int(status), _with_security(
        [("Content-Type", "text/plain; charset=utf-8")]), (text + "\n").encode())


def typed(body: bytes | AsyncIterator[bytes], content_type: str,
          headers: Iterable[tuple[str, str]] = ()) -> Response:
    """A 200 of `content_type` (JSON, CSS, JavaScript, a download) with the security headers;
    `body` may be an async iterator of chunks (streamed)."""
    head = _with_security([("Content-Type", content_type), *headers])
    if isinstance(body, bytes):
        return Response(HTTPStatus.OK, head, body)
    return Response(HTTPStatus.OK, head, stream=body)
