"""`a2e-host token new`: make a bearer token and print the config lines that accept it.

    a2e-host token new --agent planner --namespace team-a [--namespace team-b]
                       [--rights read_semantic,write_semantic,forget]

The token is printed once, on the first line; the host keeps only its SHA-256, in the
`[[auth.tokens]]` lines printed after it (paste them into the config file, then reload or
restart the host).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from host.config import RIGHTS, TokenConfig
from host.core.auth import hash_token, new_token

__all__ = ["register", "token_toml"]


def token_toml(spec: TokenConfig) -> str:
    """The TOML lines of one `[[auth.tokens]]` table (JSON strings are valid TOML strings)."""
    return "\n".join([
        "[[auth.tokens]]",
        f"sha256 = {json.dumps(spec.sha256)}",
        f"agent = {json.dumps(spec.agent)}",
        f"namespaces = {json.dumps(spec.namespaces)}",
        f"rights = {json.dumps(list(spec.rights))}",
    ])


def _rights(text: str) -> list[str]:
    rights = [r.strip() for r in text.split(",") if r.strip()]
    bad = [r for r in rights if r not in RIGHTS]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown right(s) {', '.join(bad)}; choose among"
                                         f" {', '.join(RIGHTS)}")
    return rights


def cmd_token_new(args: argparse.Namespace) -> int:
    """Print a new token, then the config lines holding its hash."""
    token = new_token()
    fields: dict[str, Any] = {"sha256": hash_token(token), "agent": args.agent,
                              "namespaces": args.namespace}
    if args.rights is not None:
        fields["rights"] = args.rights
    spec = TokenConfig.model_validate(fields)
    print(token)
    print("# The line above is the token: give it to the agent; it is not stored anywhere.")
    print("# Add these lines to the host's config file, then reload or restart the host:")
    print(token_toml(spec))
    return 0


def register(sub: Any) -> None:
    """Add the `token` sub-command (`token new`)."""
    p = sub.add_parser("token", help="manage bearer tokens")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    new = actions.add_parser("new", help="make a token; print it and its config lines")
    new.add_argument("--agent", required=True, help="the agent identity the token proves")
    new.add_argument("--namespace", action="append", required=True,
                     help='a namespace the token may open ("*" = every one); repeat for more')
    new.add_argument("--rights", type=_rights, default=None,
                     help=f"comma-separated among {', '.join(RIGHTS)} (default: all but admin)")
    new.set_defaults(func=cmd_token_new)
