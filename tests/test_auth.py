"""Authentication and rights over real sockets: tokens at the upgrade and in the handshake,
namespaces and rights of a token, revocation by reload and by restart."""

from __future__ import annotations

import signal
import tomllib
from pathlib import Path

import pytest
from authkit import connect, issue, running, write_config
from support.hosts import run_cli
from websockets.exceptions import InvalidStatus

from host.client import MemoryClient, RemoteError
from host.config import AuthConfig, TokenConfig
from host.core.auth import Authenticator, hash_token, is_loopback

pytestmark = pytest.mark.all_transports("websocket")

EPISODIC = {"key": {"k": 1}, "content": "mine", "tier": "episodic"}
SEMANTIC = {"key": {"k": 2}, "content": "shared fact", "tier": "semantic"}


async def _code(coro: object) -> str:
    """The error code the awaited request is refused with."""
    with pytest.raises(RemoteError) as err:
        await coro  # type: ignore[misc]
    return err.value.code


async def test_memory_messages_need_a_token(db_path: Path, transport: str) -> None:
    """With tokens configured, init, store, retrieve and forget before any token are unauthorized."""
    _, spec = issue("a1")
    async with running(db_path, [spec], transport=transport) as host:
        c = await connect(host)
        assert await _code(c.init("ns")) == "unauthorized"
        assert await _code(c.store([EPISODIC], memory_id="x")) == "unauthorized"
        assert await _code(c.retrieve(memory_id="x")) == "unauthorized"
        assert await _code(c.forget(keys=[{"k": 1}], memory_id="x")) == "unauthorized"
        await c.ping()  # liveness needs no token
        await c.close()


async def test_handshake_without_token_is_refused(db_path: Path, transport: str) -> None:
    """A handshake that leaves the connection unauthenticated is answered unauthorized."""
    _, spec = issue("a1")
    async with running(db_path, [spec], transport=transport) as host:
        c = await connect(host)
        assert await _code(c.handshake(agent_id="a1")) == "unauthorized"
        await c.close()


async def test_wrong_token_is_refused(db_path: Path, transport: str) -> None:
    """A token that is not configured fails the handshake, and the connection stays locked."""
    _, spec = issue("a1")
    async with running(db_path, [spec], transport=transport) as host:
        c = await connect(host)
        assert await _code(c.handshake(auth_token="a2e_not-a-real-token")) == "unauthorized"
        assert await _code(c.init("ns")) == "unauthorized"
        await c.close()


async def test_handshake_token_opens_its_namespaces_only(db_path: Path, transport: str) -> None:
    """A token for namespace n1 opens n1 and is unauthorized for n2."""
    token, spec = issue("a1", ["n1"])
    async with running(db_path, [spec], transport=transport) as host:
        c = await connect(host, token)
        assert await _code(c.init("n2")) == "unauthorized"
        await c.init("n1")
        assert (await c.store([EPISODIC])).stored == [{"k": 1}]
        await c.close()


async def test_star_namespace_opens_any(db_path: Path, transport: str) -> None:
    """A token whose namespaces list "*" opens any namespace."""
    token, spec = issue("a1", ["*"])
    async with running(db_path, [spec], transport=transport) as host:
        c = await connect(host, token)
        for ns in ("n1", "anything-else"):
            await c.init(ns)
        await c.close()


async def test_bad_bearer_at_upgrade_is_http_401(db_path: Path, transport: str) -> None:
    """A wrong bearer token, or another scheme, in the upgrade request is refused with HTTP 401."""
    _, spec = issue("a1")
    async with running(db_path, [spec], transport=transport) as host:
        for header in ("Bearer a2e_wrong", "Basic YTph", "Bearer"):
            with pytest.raises(InvalidStatus) as err:
                await connect(host, additional_headers={"Authorization": header})
            assert err.value.response.status_code == 401


async def test_bearer_at_upgrade_authenticates(db_path: Path, transport: str) -> None:
    """A good bearer token authenticates the connection: no handshake needed."""
    token, spec = issue("a1", ["ns"])
    async with running(db_path, [spec], transport=transport) as host:
        c = await connect(host, bearer=token)
        await c.init("ns")
        assert (await c.store([EPISODIC])).stored == [{"k": 1}]
        await c.close()


async def test_identity_comes_from_the_token(db_path: Path, transport: str) -> None:
    """The agent is the token's: a differing scope.agent is unauthorized, and a claimed
    handshake agent_id does not change whose episodic memory is read."""
    t1, s1 = issue("a1")
    t2, s2 = issue("a2")
    async with running(db_path, [s1, s2], transport=transport) as host:
        c1 = await connect(host, bearer=t1)
        assert await _code(c1.init("ns", {"agent": "a2"})) == "unauthorized"
        await c1.init("ns", {"agent": "a1"})
        await c1.store([EPISODIC])
        c2 = await connect(host)
        await c2.handshake(agent_id="a1", auth_token=t2)  # claims a1, proves a2
        await c2.init("ns")
        assert (await c2.retrieve(keys=[{"k": 1}])).entries == []
        c3 = await connect(host, t1)
        await c3.init("ns")
        assert [e["content"] for e in (await c3.retrieve(keys=[{"k": 1}])).entries] == ["mine"]
        for c in (c1, c2, c3):
            await c.close()


async def test_a_connection_cannot_switch_agents(db_path: Path, transport: str) -> None:
    """A second handshake with a token of another agent is unauthorized."""
    t1, s1 = issue("a1")
    t2, s2 = issue("a2")
    async with running(db_path, [s1, s2], transport=transport) as host:
        c = await connect(host, t1)
        assert await _code(c.handshake(auth_token=t2)) == "unauthorized"
        await c.handshake(auth_token=t1)
        await c.close()


async def test_rights_gate_the_semantic_tier_and_forget(db_path: Path, transport: str) -> None:
    """Without read_semantic, write_semantic or forget the matching operations are refused, and
    a request for every tier covers only the permitted ones."""
    admin, s_admin = issue("boss", rights=["admin"])
    reader, s_reader = issue("r", rights=[])
    async with running(db_path, [s_admin, s_reader], transport=transport) as host:
        boss = await connect(host, admin)
        await boss.init("ns")
        await boss.store([SEMANTIC])
        r = await connect(host, reader)
        await r.init("ns")
        assert await _code(r.retrieve(tier="semantic")) == "unauthorized"
        await r.store([EPISODIC, {"key": {"w": 1}, "content": "scratch", "tier": "working"}])
        got = await r.retrieve(query="shared fact mine scratch")
        assert sorted(e["tier"] for e in got.entries) == ["episodic", "working"]
        mixed = await r.store([SEMANTIC, {**EPISODIC, "key": {"k": 3}}])
        assert mixed.stored == [{"k": 3}]
        assert mixed.errors[0].startswith("entries[0]: unauthorized:")
        assert await _code(r.store([SEMANTIC])) == "unauthorized"
        assert await _code(r.forget(keys=[{"k": 1}], tier="episodic")) == "unauthorized"
        assert await r.forget(keys=[{"k": 1}, {"w": 1}], tier="") == 1  # working only
        assert len((await r.retrieve(keys=[{"k": 1}])).entries) == 1
        # the admin still sees the shared fact untouched, and may forget it
        assert await boss.forget(keys=[{"k": 2}], tier="semantic") == 1
        for c in (boss, r):
            await c.close()


async def test_reload_revokes_a_token(db_path: Path, transport: str, tmp_path: Path) -> None:
    """After the config file drops a token and the host reloads, the token's open connection is
    unauthorized on its next request and a new connection with it gets HTTP 401."""
    t1, s1 = issue("a1")
    t2, s2 = issue("a2")
    cfg = write_config(tmp_path / "host.toml", db_path, [s1, s2])
    async with running(db_path, transport=transport, config_path=cfg) as host:
        c1 = await connect(host, bearer=t1)
        c2 = await connect(host, t2)
        await c1.init("ns")
        await c2.init("ns")
        await c1.store([EPISODIC])
        write_config(cfg, db_path, [s2])
        assert host.auth.reload() == 1
        assert await _code(c1.retrieve(keys=[{"k": 1}])) == "unauthorized"
        with pytest.raises(InvalidStatus) as err:
            await connect(host, bearer=t1)
        assert err.value.response.status_code == 401
        assert (await c2.store([EPISODIC])).stored == [{"k": 1}]
        for c in (c1, c2):
            await c.close()


async def test_reload_keeps_tokens_when_the_file_is_bad(db_path: Path, transport: str, tmp_path: Path) -> None:
    """A reload that cannot read the file raises and leaves the old tokens in force."""
    t1, s1 = issue("a1")
    cfg = write_config(tmp_path / "host.toml", db_path, [s1])
    async with running(db_path, transport=transport, config_path=cfg) as host:
        cfg.write_text("[auth\nbroken")
        with pytest.raises(ValueError):
            host.auth.reload()
        c = await connect(host, t1)
        await c.init("ns")
        await c.close()


def test_reload_never_turns_authentication_off(tmp_path: Path) -> None:
    """Reloading a file with no tokens revokes every token instead of opening the host."""
    token, spec = issue("a1")
    cfg = write_config(tmp_path / "host.toml", tmp_path / "db", [spec])
    auth = Authenticator(AuthConfig(tokens=[TokenConfig.model_validate(spec)]), cfg)
    assert auth.check(token) is not None
    write_config(cfg, tmp_path / "db", [])
    assert auth.reload() == 0
    assert auth.enabled and auth.check(token) is None


def _token_from_cli(agent: str, namespace: str, *rights: str) -> tuple[str, str]:
    args = ["token", "new", "--agent", agent, "--namespace", namespace]
    if rights:
        args += ["--rights", ",".join(rights)]
    proc = run_cli(*args, text=True)
    proc.check_returncode()
    out = proc.stdout
    token, _, rest = out.partition("\n")
    return token, rest


def test_token_new_prints_the_token_once_and_its_hash(tmp_path: Path) -> None:
    """`token new` prints a token and TOML lines holding only its SHA-256, which load as config."""
    token, toml = _token_from_cli("planner", "team-a", "read_semantic", "forget")
    assert token not in toml and hash_token(token) in toml
    cfg = tmp_path / "host.toml"
    cfg.write_text(toml)
    auth = Authenticator(AuthConfig.model_validate(tomllib.loads(toml)["auth"]), cfg)
    grant = auth.check(token)
    assert grant is not None and grant.agent == "planner"
    assert grant.namespaces == {"team-a"} and grant.rights == {"read_semantic", "forget"}


def test_token_new_refuses_an_unknown_right() -> None:
    """`token new --rights` with a right that does not exist exits non-zero."""
    proc = run_cli("token", "new", "--agent", "a", "--namespace", "n",
                   "--rights", "read_semantic,root", text=True)
    assert proc.returncode != 0 and "root" in proc.stderr


async def test_revoked_after_restart(tmp_path: Path, host_process) -> None:  # type: ignore[no-untyped-def]
    """A token from `token new` works in a host subprocess; after it is removed from the config
    and the host restarted, the same token is refused."""
    token, toml = _token_from_cli("a1", "ns")
    _, other = issue("a2")
    db = tmp_path / "a2e.db"
    cfg = write_config(tmp_path / "host.toml", db, [other], extra=toml)
    proc = host_process(db, "--config", str(cfg))
    c = await MemoryClient.connect(proc.url)
    await c.handshake(auth_token=token)
    await c.init("ns")
    await c.store([EPISODIC])
    await c.close()
    assert proc.stop(signal.SIGTERM) == 0
    write_config(cfg, db, [other])
    proc = host_process(db, "--config", str(cfg))
    c = await MemoryClient.connect(proc.url)
    assert await _code(c.handshake(auth_token=token)) == "unauthorized"
    await c.close()
    with pytest.raises(InvalidStatus):
        await MemoryClient.connect(proc.url,
                                   additional_headers={"Authorization": f"Bearer {token}"})
    assert proc.stop(signal.SIGTERM) == 0


def test_serving_a_public_address_without_tokens_is_refused(tmp_path: Path) -> None:
    """`serve --host 0.0.0.0` with no tokens exits 2 before binding, naming the way out."""
    proc = run_cli("serve", "--host", "0.0.0.0", "--port", "0", "--db", str(tmp_path / "a.db"),
                   text=True)
    assert proc.returncode == 2
    assert "allow_anonymous_remote" in proc.stderr


def test_exposure_rules() -> None:
    """Loopback needs no tokens; another address needs tokens or the explicit opt-in."""
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("") and not is_loopback("example.org")
    off = Authenticator(AuthConfig())
    off.check_exposure("127.0.0.1", False)
    off.check_exposure("0.0.0.0", True)
    with pytest.raises(ValueError):
        off.check_exposure("0.0.0.0", False)
    _, spec = issue("a1")
    Authenticator(AuthConfig(tokens=[TokenConfig.model_validate(spec)])).check_exposure(
        "0.0.0.0", False)
