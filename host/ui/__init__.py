"""The memory browser: server-rendered pages at `GET /ui` on the host's port (docs/ui.md).

`host.ui.app.UiApp` is a sans-I/O app over `host.ui.web.Request`/`Response`; the HTTP path of
`host.net` carries its bytes. See `host.ui.signin` for who may use it.
"""

from host.ui.app import PREFIX, UiApp, UiDeps
from host.ui.web import Request, Response

__all__ = ["PREFIX", "Request", "Response", "UiApp", "UiDeps"]
