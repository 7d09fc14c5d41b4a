"""The memory browser on the host's port, over real HTTP on both WebSocket transports: the
route is mounted at /ui, forms are posted with bodies, cookies come back as Set-Cookie, and
`ui.enabled = false` leaves /ui unserved."""

from __future__ import annotations

import asyncio
import http.client
import re
from pathlib import Path
from urllib.parse import urlencode

import pytest
from authkit import issue, running
from support.hosts import make_config, running_host

pytestmark = pytest.mark.all_transports("websocket")


def _request(port: int, method: str, path: str, body: bytes = b"",
             headers: dict[str, str] | None = None) -> tuple[int, dict[str, list[str]], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body=body or None, headers=headers or {})
        r = conn.getresponse()
        out: dict[str, list[str]] = {}
        for name, value in r.getheaders():
            out.setdefault(name.lower(), []).append(value)
        return r.status, out, r.read()
    finally:
        conn.close()


async def call(port: int, method: str, path: str, body: bytes = b"",
               headers: dict[str, str] | None = None) -> tuple[int, dict[str, list[str]], bytes]:
    """One HTTP request to the host (on a thread: the host runs on this loop)."""
    return await asyncio.to_thread(_request, port, method, path, body, headers)


async def test_sign_in_and_browse_over_http(tmp_path: Path, transport: str) -> None:
    """Over real HTTP: /ui redirects to the sign-in form, posting the admin token sets the
    HttpOnly cookie, and with it the Namespaces page answers 200."""
    admin, spec = issue("ops", ("*",), ["admin"])
    async with running(tmp_path / "a2e.db", [spec], transport=transport,
                       search={"embedder": "none"}) as host:
        port = host.port
        status, headers, _ = await call(port, "GET", "/ui")
        assert status == 303 and headers["location"] == ["/ui/signin"]
        status, headers, body = await call(port, "GET", "/ui/signin")
        assert status == 200 and b'name="token"' in body
        bind = next(c for c in headers["set-cookie"] if c.startswith("a2e_ui_csrf="))
        bind = bind.split(";", 1)[0]
        csrf = re.search(rb'name="csrf" value="([0-9a-f]+)"', body).group(1).decode()  # type: ignore[union-attr]
        form = urlencode({"csrf": csrf, "token": admin}).encode()
        status, headers, _ = await call(port, "POST", "/ui/signin", form, {
            "Content-Type": "application/x-www-form-urlencoded", "Cookie": bind,
            "Origin": f"http://127.0.0.1:{port}"})
        assert status == 303
        token_cookie = next(c for c in headers["set-cookie"] if c.startswith("a2e_ui_token="))
        assert "HttpOnly" in token_cookie and "SameSite=Strict" in token_cookie
        cookies = f"{bind}; {token_cookie.split(';', 1)[0]}"
        status, _, body = await call(port, "GET", "/ui/namespaces", headers={"Cookie": cookies})
        assert status == 200 and b"Namespaces" in body
        status, headers, _ = await call(port, "GET", "/ui/static/ui.js")
        assert status == 200 and headers["content-type"] == ["text/javascript; charset=utf-8"]


async def test_ui_disabled_is_not_served(tmp_path: Path, transport: str) -> None:
    """With `ui.enabled = false` no page of /ui is served."""
    config = make_config(tmp_path / "a2e.db", ui={"enabled": False},
                         server={"transport": transport}, search={"embedder": "none"})
    async with running_host(config) as host:
        status, _, body = await call(host.port, "GET", "/ui/namespaces")
        assert status != 200 and b"Namespaces" not in body
