"""Helpers of the security tests: tokens, config files and hosts with authentication on."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from support.hosts import make_config, running_host, url_of

from host.app import Host
from host.cli.token import token_toml
from host.client import MemoryClient
from host.config import TokenConfig, load_config
from host.core.auth import hash_token, new_token


def issue(agent: str, namespaces: Sequence[str] = ("*",),
          rights: Sequence[str] | None = None) -> tuple[str, dict[str, Any]]:
    """A new token and its `[[auth.tokens]]` table (as a dict)."""
    token = new_token()
    spec: dict[str, Any] = {"sha256": hash_token(token), "agent": agent,
                            "namespaces": list(namespaces)}
    if rights is not None:
        spec["rights"] = list(rights)
    return token, spec


def write_config(path: Path, db: Path, tokens: Sequence[dict[str, Any]], extra: str = "") -> Path:
    """A TOML config file on port 0 with `db` and `tokens`; `extra` is appended as is."""
    lines = ["[server]", "port = 0", "[store]", f"db = {json.dumps(str(db))}", extra]
    lines += [token_toml(TokenConfig.model_validate(t)) for t in tokens]
    path.write_text("\n".join(lines) + "\n")
    return path


@asynccontextmanager
async def running(db: Path, tokens: Sequence[dict[str, Any]] = (),
                  config_path: Path | None = None, transport: str = "websockets",
                  **sections: dict[str, Any]) -> AsyncIterator[Host]:
    """A started host on `transport`: from `config_path` if given, else with `tokens` and
    `sections`."""
    if config_path is not None:
        config = load_config(config_path, {"server": {"transport": transport}})
    else:
        sections.setdefault("server", {})
        sections["server"] = {"transport": transport, **sections["server"]}
        config = make_config(db, auth={"tokens": list(tokens)}, **sections)
    async with running_host(config, config_path) as host:
        yield host


async def connect(host: Host, token: str = "", *, bearer: str = "",
                  **kwargs: Any) -> MemoryClient:
    """A client of `host`: `bearer` goes in the upgrade header, `token` in a handshake."""
    if bearer:
        kwargs["additional_headers"] = {"Authorization": f"Bearer {bearer}"}
    client = await MemoryClient.connect(url_of(host), **kwargs)
    if token:
        await client.handshake(auth_token=token)
    return client
