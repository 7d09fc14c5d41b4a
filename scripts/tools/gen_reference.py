"""Regenerate the reference parts of the docs from the code: run after changing a setting or
a sub-command.

    python scripts/tools/gen_reference.py          # rewrite the files
    python scripts/tools/gen_reference.py --check  # exit 1 if any is out of date

Writes configs/a2e-host.toml (from host/config/) and the generated blocks of
docs/configuration.md and docs/cli.md (from host/config/ and the CLI parser).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from host.cli.main import build_parser
from host.cli.reference import cli_reference, config_reference, replace_generated, sample_toml

ROOT = Path(__file__).resolve().parents[2]


def expected() -> dict[Path, str]:
    """Each generated file's path and the text it should hold."""
    conf_md = ROOT / "docs" / "configuration.md"
    cli_md = ROOT / "docs" / "cli.md"
    return {
        ROOT / "configs" / "a2e-host.toml": sample_toml(),
        conf_md: replace_generated(conf_md.read_text(), "settings", config_reference()),
        cli_md: replace_generated(cli_md.read_text(), "commands", cli_reference(build_parser())),
    }


def main() -> int:
    """Rewrite (or with --check, compare) the generated files."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only report stale files")
    args = ap.parse_args()
    stale = []
    for path, text in expected().items():
        if not path.exists() or path.read_text() != text:
            stale.append(path)
            if not args.check:
                path.write_text(text)
    for path in stale:
        print(f"{'stale' if args.check else 'wrote'}: {path.relative_to(ROOT)}")
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
