"""Transport security over real sockets: wss:// with the configured certificate, and the
Origin allow-list for browser clients."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

import pytest
from authkit import connect, running, url_of
from websockets.exceptions import InvalidHandshake, InvalidStatus

from host.client import MemoryClient

pytestmark = pytest.mark.all_transports("websocket")


def self_signed(folder: Path, name: str = "host") -> tuple[Path, Path]:
    """A throw-away certificate and key for 127.0.0.1 and localhost, made by openssl."""
    cert, key = folder / f"{name}.pem", folder / f"{name}.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
        check=True, capture_output=True)
    return cert, key


async def test_tls_serves_wss_with_the_configured_certificate(
    db_path: Path, tmp_path: Path, transport: str
) -> None:
    """With tls_cert and tls_key the host speaks wss:// (verified against the certificate) and
    a plain ws:// client cannot talk to it."""
    cert, key = self_signed(tmp_path)
    async with running(db_path, transport=transport, server={"tls_cert": str(cert), "tls_key": str(key)}) as host:
        trust = ssl.create_default_context(cafile=str(cert))
        c = await MemoryClient.connect(f"wss://127.0.0.1:{host.port}", ssl=trust)
        await c.init("ns", {"agent": "a1"})
        assert (await c.store([{"key": {"k": 1}, "content": 1, "tier": "episodic"}])).stored
        await c.close()
        with pytest.raises(InvalidHandshake):  # the TLS server answers no HTTP upgrade
            await MemoryClient.connect(url_of(host), open_timeout=5)
        other, _ = self_signed(tmp_path, "other")
        with pytest.raises(ssl.SSLCertVerificationError):
            await MemoryClient.connect(f"wss://127.0.0.1:{host.port}",
                                       ssl=ssl.create_default_context(cafile=str(other)))


async def test_tls_with_a_key_of_another_certificate_does_not_start(
    db_path: Path, tmp_path: Path, transport: str
) -> None:
    """A key that does not match the certificate stops the host at start."""
    cert, _ = self_signed(tmp_path, "a")
    _, key = self_signed(tmp_path, "b")
    with pytest.raises(ssl.SSLError):
        async with running(db_path, transport=transport, server={"tls_cert": str(cert), "tls_key": str(key)}):
            pass


async def test_origin_allow_list(db_path: Path, transport: str) -> None:
    """A listed Origin and a client without Origin connect; another Origin gets HTTP 403."""
    async with running(db_path, transport=transport, server={"allowed_origins": ["https://app.example"]}) as host:
        ok = await connect(host, origin="https://app.example")
        agent = await connect(host)
        for c in (ok, agent):
            await c.ping()
            await c.close()
        with pytest.raises(InvalidStatus) as err:
            await connect(host, origin="https://evil.example")
        assert err.value.response.status_code == 403
