"""A real browser for the memory browser (host/ui): Debian's Chromium, headless, driven by
Selenium through the system's chromedriver (nothing is downloaded), and a host with
authentication on for it to browse. Used by tests/test_ui_browser.py and
scripts/tools/ui_screenshots.py.

`.ci/run` installs `chromium` and `chromium-driver` when they are missing; without them
`chromium()` raises (the browser tests fail, they never skip).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from host.cli.token import token_toml
from host.config import TokenConfig
from host.core.auth import hash_token, new_token

from .procs import HostProcess

__all__ = ["CHROMIUM_FLAGS", "BrowsedHost", "as_json", "chromium", "demo_entries"]

CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage",
)


def _find(*names: str) -> str:
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    raise RuntimeError(f"none of {names} is installed: `apt-get install -y chromium"
                       " chromium-driver` (.ci/run does it)")


@contextmanager
def chromium(width: int = 1280, height: int = 900) -> Iterator[Any]:
    """A headless Chromium session (a Selenium WebDriver) with a fresh profile, quit on
    leaving the block."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="a2e-ui-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = _find("chromium", "chromium-browser", "google-chrome")
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}"):
        opts.add_argument(flag)
    driver = webdriver.Chrome(options=opts, service=Service(executable_path=_find("chromedriver")))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _token(agent: str, rights: list[str]) -> tuple[str, str]:
    token = new_token()
    spec = TokenConfig(sha256=hash_token(token), agent=agent, namespaces=["*"], rights=rights)
    return token, token_toml(spec)


class BrowsedHost:
    """`a2e-host serve` (log level DEBUG, into `folder/host.log`) with three tokens: `admin`
    (agent ops, the admin right), `writer` (agent a1, every right but admin) and `reader`
    (agent a2, no right); `extra` is more TOML for its config file."""

    def __init__(self, folder: Path, extra: str = "") -> None:
        self.admin, admin = _token("ops", ["admin"])
        self.writer, writer = _token("a1", ["read_semantic", "write_semantic", "forget"])
        self.reader, reader = _token("a2", [])
        config = folder / "host.toml"
        config.write_text("\n".join([extra, admin, writer, reader]) + "\n")
        self.log_path = folder / "host.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.process = HostProcess(folder / "a2e.db", "--config", str(config),
                                   log_level="DEBUG", stdout=self._log,
                                   stderr=subprocess.STDOUT, timeout=60.0)
        self.base = f"http://127.0.0.1:{self.process.port}"
        self.ws = self.process.url

    def stop(self) -> None:
        """Stop the host (SIGTERM, SIGKILL after a grace period)."""
        self.process.terminate()
        self._log.close()

    def logged(self) -> str:
        """Everything the host logged so far."""
        return self.log_path.read_text(errors="replace")


def demo_entries() -> list[dict[str, Any]]:
    """A small, readable memory: preferences, facts and a long note."""
    long_note = {"summary": "Quarterly planning notes", "items": [
        {"step": i, "text": f"Item {i}: review the roadmap section {i} with the team"}
        for i in range(1, 13)]}
    return [
        {"key": {"topic": "prefs"}, "content": {"language": "python", "style": "concise"},
         "tier": "episodic", "tags": ["preferences"], "score": 0.9},
        {"key": {"topic": "garden"}, "content": "She planted tomatoes and basil in the garden.",
         "tier": "semantic", "tags": ["home"], "score": 0.5},
        {"key": {"topic": "travel"}, "content": "The train to Lyon leaves from platform 4.",
         "tier": "episodic", "tags": ["travel"], "ttl": 86400},
        {"key": {"topic": "plans"}, "content": long_note, "tier": "semantic",
         "tags": ["work", "planning"], "score": 0.7},
        {"key": {"topic": "allergy"}, "content": "He is allergic to peanuts.",
         "tier": "semantic", "tags": ["health"], "score": 1.0},
    ]


def as_json(value: Any) -> str:
    """`value` as compact JSON, as the pages show keys."""
    return json.dumps(value, separators=(", ", ": "))
