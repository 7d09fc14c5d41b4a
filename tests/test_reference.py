"""Docs that cannot drift: every setting and every CLI command is documented."""

from __future__ import annotations

import argparse
import re
import tomllib
from pathlib import Path

from host.cli.main import build_parser
from host.cli.reference import _subparsers, sample_toml, sections
from host.config import Config

ROOT = Path(__file__).resolve().parent.parent
HINT = "; run `python scripts/tools/gen_reference.py` and commit the result"


def _uncommented(text: str) -> dict:
    """The sample file with its commented-out settings made live, parsed."""
    live = re.sub(r"(?m)^# (\w+ = )", r"\1", text)
    return tomllib.loads(live)


def test_sample_config_lists_every_setting_at_its_default() -> None:
    """configs/a2e-host.toml names every setting of the model, with the model's default."""
    text = (ROOT / "configs" / "a2e-host.toml").read_text()
    assert _uncommented(text) == Config().model_dump(mode="json"), "sample config is stale" + HINT
    assert text == sample_toml(), "sample config differs from the model" + HINT


def test_sample_config_loads_as_is() -> None:
    """The sample file, unchanged, is a valid configuration (everything is commented out)."""
    with open(ROOT / "configs" / "a2e-host.toml", "rb") as fh:
        Config.model_validate(tomllib.load(fh))


def test_configuration_doc_lists_every_setting() -> None:
    """docs/configuration.md names each `section.field` and its environment variable."""
    doc = (ROOT / "docs" / "configuration.md").read_text()
    missing = [
        f"{name}.{field}"
        for name, model in sections()
        for field in model.model_fields
        if f"`{name}.{field}`" not in doc or f"A2E_HOST_{name.upper()}_{field.upper()}" not in doc
    ]
    assert not missing, f"undocumented settings {missing}" + HINT


def _commands(prefix: str, parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    out = []
    for name, sub in _subparsers(parser).items():
        out.append((f"{prefix} {name}", sub))
        out += _commands(f"{prefix} {name}", sub)
    return out


def test_cli_doc_lists_every_command_and_option() -> None:
    """docs/cli.md has a section for every sub-command, with each of its options."""
    doc = (ROOT / "docs" / "cli.md").read_text()
    missing = []
    for full, sub in _commands("a2e-host", build_parser()):
        if f"### {full}\n" not in doc:
            missing.append(full)
            continue
        section = doc.split(f"### {full}\n", 1)[1].split("\n### ", 1)[0]
        for action in sub._actions:
            for opt in action.option_strings:
                if opt not in section:
                    missing.append(f"{full} {opt}")
    assert not missing, f"undocumented commands/options {missing}" + HINT
