"""The deployment files stay true to the code: their settings exist, their commands parse."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from host.cli.main import build_parser
from host.config import ENV_FILE, Config, env_settings

ROOT = Path(__file__).resolve().parent.parent
FILES = ("Dockerfile", "docker-compose.yml", "configs/a2e-host.service")


def test_environment_variables_name_real_settings() -> None:
    """Every A2E_HOST_* variable the Dockerfile, compose file and unit set is a setting."""
    for name in FILES:
        text = (ROOT / name).read_text()
        names = set(re.findall(r"\bA2E_HOST_[A-Z0-9_]+", text)) - {ENV_FILE}
        assert names or ENV_FILE in text, name
        env_settings({n: "" for n in names})  # raises on a name that is no setting


def test_unit_commands_parse() -> None:
    """The systemd unit's a2e-host command lines are valid for the CLI's parser."""
    unit = (ROOT / "configs" / "a2e-host.service").read_text()
    lines = re.findall(r"^Exec(?:Start|StartPre)=\S*a2e-host (.*)$", unit, re.M)
    assert len(lines) == 2
    parser = build_parser()
    for line in lines:
        parser.parse_args(shlex.split(line))


def test_stop_timeouts_are_above_the_drain_timeout() -> None:
    """systemd's TimeoutStopSec and compose's stop_grace_period leave the host its whole
    server.drain_timeout (and the commit after it) before they kill it."""
    drain = Config().server.drain_timeout
    unit = (ROOT / "configs" / "a2e-host.service").read_text()
    (stop_sec,) = re.findall(r"^TimeoutStopSec=(\d+)s?$", unit, re.M)
    compose = (ROOT / "docker-compose.yml").read_text()
    (grace,) = re.findall(r"^\s*stop_grace_period:\s*(\d+)s", compose, re.M)
    assert int(stop_sec) >= drain + 5 and int(grace) >= drain + 5
