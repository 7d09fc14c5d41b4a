"""Helpers of the memory browser's tests: a cookie-keeping client of the sans-I/O app."""

from __future__ import annotations

import re
from urllib.parse import urlencode

from host.ui import Request, Response, UiApp

_CSRF = re.compile(r'name="csrf" value="([0-9a-f]+)"')


class UiClient:
    """Talks to a `UiApp` as one browser would: keeps its cookies, reads the CSRF token of the
    last page, sends `Host` and (for POSTs) `Origin` as a browser on that page does."""

    def __init__(self, app: UiApp, remote: str = "127.0.0.1", host: str = "127.0.0.1:8765"
                 ) -> None:
        self.app = app
        self.remote = remote
        self.host = host
        self.cookies: dict[str, str] = {}
        self.csrf = ""

    async def _read(self, r: Response) -> Response:
        """`r` with a streamed body read whole (a download, as a browser saves it)."""
        if r.stream is not None:
            r.body = b"".join([chunk async for chunk in r.stream])
            r.stream = None
        return self._take(r)

    def _take(self, r: Response) -> Response:
        for name, value in r.headers:
            if name.lower() == "set-cookie":
                k, _, rest = value.partition("=")
                v = rest.split(";", 1)[0]
                if "Max-Age=0" in value:
                    self.cookies.pop(k, None)
                else:
                    self.cookies[k] = v
        m = _CSRF.search(r.body.decode(errors="replace"))
        if m:
            self.csrf = m.group(1)
        return r

    def _headers(self, extra: dict[str, str]) -> list[tuple[str, str]]:
        h = [("Host", self.host)]
        if self.cookies:
            h.append(("Cookie", "; ".join(f"{k}={v}" for k, v in self.cookies.items())))
        return h + list(extra.items())

    async def get(self, target: str, **headers: str) -> Response:
        """GET `target` (path and query)."""
        return await self._read(await self.app.handle(Request.build(
            "GET", target, self._headers(headers), remote=self.remote)))

    async def post(self, path: str, form: dict[str, str], csrf: bool = True,
                   **headers: str) -> Response:
        """POST `form` to `path`, with the page's CSRF token unless `csrf` is False."""
        fields = {"csrf": self.csrf, **form} if csrf else dict(form)
        hdrs = {"Content-Type": "application/x-www-form-urlencoded",
                "Origin": f"http://{self.host}", **headers}
        return await self._read(await self.app.handle(Request.build(
            "POST", path, self._headers(hdrs), urlencode(fields).encode(), remote=self.remote)))

    async def sign_in(self, token: str) -> Response:
        """Open the sign-in form, then post `token` with its CSRF token."""
        await self.get("/ui/signin")
        return await self.post("/ui/signin", {"token": token})


def text(r: Response) -> str:
    """The body of `r` as text."""
    return r.body.decode()
