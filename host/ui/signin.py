"""Who may use the memory browser, sign-in cookies and the CSRF check.

- With authentication on (`Authenticator.enabled`), a person signs in with a token that has the
  `admin` right, from any address, loopback included. The token travels once, in the body of
  the sign-in form (field `token`), and then lives in an HttpOnly, SameSite=Strict cookie
  (Secure over TLS), never in a URL. Every request checks it against the token table as it
  stands, so a token revoked by a reload signs the browser out at its next click.
- With authentication off, the pages are served to loopback peers only, and only under a
  loopback `Host` name (a page on another site cannot rebind its name to 127.0.0.1 and read
  ours).
- Every POST carries a CSRF token: an HMAC, under a key of this process, of a random value in
  a second HttpOnly SameSite=Strict cookie; a POST whose `Origin` (or `Sec-Fetch-Site`) shows
  another site is refused too.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import re
import secrets
from dataclasses import dataclass
from http import HTTPStatus

from host.core.auth import Authenticator, Grant
from host.memory.access import Access
from host.store.records import PERSISTENT_TIERS
from host.ui.web import Request, Response, refusal

__all__ = ["BIND_COOKIE", "TOKEN_COOKIE", "Gatekeeper", "Viewer"]

log = logging.getLogger("a2e_host.ui")

TOKEN_COOKIE = "a2e_ui_token"
BIND_COOKIE = "a2e_ui_csrf"
_COOKIE_PATH = "/ui"
_TOKEN_TEXT = re.compile(r"[A-Za-z0-9._~+/=-]{1,512}")  # what a cookie may carry as is


@dataclass(frozen=True)
class Viewer:
    """The person behind a request: their grant (None with authentication off) and the CSRF
    token their forms carry."""

    grant: Grant | None
    csrf: str

    @property
    def label(self) -> str:
        """Who is signed in, for the page header."""
        return f"agent {self.grant.agent}" if self.grant else "loopback, authentication off"

    def allows(self, namespace: str) -> bool:
        """True when the token may read `namespace` (the wire's rule)."""
        return self.grant is None or self.grant.allows_namespace(namespace)

    @property
    def namespaces(self) -> list[str] | None:
        """The namespaces the token names, or None for every one."""
        if self.grant is None or "*" in self.grant.namespaces:
            return None
        return sorted(self.grant.namespaces)

    @property
    def tiers(self) -> tuple[str, ...]:
        """The persistent tiers the token may read."""
        return tuple(t for t in PERSISTENT_TIERS if Access.may_read(self.grant, t))

    def may_forget(self, tier: str) -> bool:
        """True when the token may delete from `tier`."""
        return Access.may_forget(self.grant, tier)


def _loopback_ip(text: str | None) -> bool:
    if not text:
        return False
    try:
        return ipaddress.ip_address(text.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def _host_name(host: str) -> str:
    """The name part of a `Host` header (`[::1]:8765` -> `::1`, `localhost:80` -> `localhost`)."""
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _loopback_host(host: str | None) -> bool:
    if not host:
        return False
    name = _host_name(host.strip()).lower()
    return name == "localhost" or name.endswith(".localhost") or _loopback_ip(name)


class Gatekeeper:
    """The rules above over one host's `Authenticator`. `secure` marks cookies Secure (TLS)."""

    def __init__(self, auth: Authenticator, secure: bool = False) -> None:
        self.auth = auth
        self.secure = secure
        self._key = secrets.token_bytes(32)  # CSRF tokens die with the process: forms reload

    # -- cookies ---------------------------------------------------------------------------

    def _cookie(self, name: str, value: str, max_age: int | None = None) -> tuple[str, str]:
        text = f"{name}={value}; Path={_COOKIE_PATH}; HttpOnly; SameSite=Strict"
        if max_age is not None:
            text += f"; Max-Age={max_age}"
        if self.secure:
            text += "; Secure"
        return ("Set-Cookie", text)

    def token_cookie(self, token: str) -> tuple[str, str]:
        """The `Set-Cookie` header that signs the browser in with `token`."""
        return self._cookie(TOKEN_COOKIE, token)

    def signout_cookie(self) -> tuple[str, str]:
        """The `Set-Cookie` header that drops the sign-in cookie."""
        return self._cookie(TOKEN_COOKIE, "", max_age=0)

    def binding(self, req: Request) -> tuple[str, tuple[str, str] | None]:
        """The request's CSRF binding value and, when it had none, the `Set-Cookie` header
        that gives it one."""
        bind = req.cookies().get(BIND_COOKIE, "")
        if re.fullmatch(r"[A-Za-z0-9_-]{32,64}", bind):
            return bind, None
        bind = secrets.token_urlsafe(32)
        return bind, self._cookie(BIND_COOKIE, bind)

    def csrf_for(self, bind: str) -> str:
        """The CSRF token of binding value `bind`."""
        return hmac.new(self._key, bind.encode(), hashlib.sha256).hexdigest()

    # -- the checks ------------------------------------------------------------------------

    def network(self, req: Request) -> Response | None:
        """With authentication off: a refusal (403) for a peer or a `Host` that is not
        loopback; None to go on."""
        if self.auth.enabled:
            return None
        if not _loopback_ip(req.remote):
            log.warning("ui: refused %s: authentication is off, loopback peers only",
                        req.remote or "?")
            return refusal(HTTPStatus.FORBIDDEN, "with authentication off the memory browser"
                           " is served to loopback clients only")
        if not _loopback_host(req.headers.get("host")):
            return refusal(HTTPStatus.FORBIDDEN, "with authentication off the memory browser"
                           " answers only to a loopback host name (localhost, 127.0.0.1, [::1])")
        return None

    def same_site(self, req: Request, form: dict[str, str]) -> bool:
        """True when a POST carries the CSRF token of its binding cookie and does not come
        from another site."""
        bind = req.cookies().get(BIND_COOKIE, "")
        sent = form.get("csrf", "")
        if not bind or not sent or not hmac.compare_digest(sent, self.csrf_for(bind)):
            return False
        fetch_site = req.headers.get("sec-fetch-site")
        if fetch_site is not None and fetch_site not in ("same-origin", "none"):
            return False
        origin = req.headers.get("origin")
        if origin == "null":  # an opaque origin: only a browser's own same-origin word counts
            return fetch_site == "same-origin"
        if origin is not None:
            scheme = "https" if req.secure else "http"
            return origin == f"{scheme}://{req.headers.get('host', '')}"
        return True

    def signed_in(self, req: Request) -> Grant | None:
        """The grant of the sign-in cookie when it is an admin token in force now; None
        otherwise (authentication on) — with authentication off, callers do not ask."""
        token = req.cookies().get(TOKEN_COOKIE, "")
        grant = self.auth.check(token) if token else None
        return grant if grant is not None and "admin" in grant.rights else None

    def sign_in(self, req: Request, token: str) -> tuple[Grant | None, str]:
        """Check a token typed into the sign-in form: (its grant, "") when it is a valid admin
        token, else (None, why). Logs the outcome, never the token."""
        token = token.strip()
        grant = self.auth.check(token) if _TOKEN_TEXT.fullmatch(token) else None
        if grant is None:
            log.warning("ui: sign-in refused from %s: unknown token", req.remote or "?")
            return None, "That token is not valid here."
        if "admin" not in grant.rights:
            log.warning("ui: sign-in refused from %s: agent %s has no admin right",
                        req.remote or "?", grant.agent)
            return None, "That token is valid but has no admin right: the memory browser" \
                         " needs one."
        log.info("ui: agent %s signed in from %s", grant.agent, req.remote or "?")
        return grant, ""
