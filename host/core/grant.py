"""`Grant`: what one valid token proves (issued by `host.core.auth.Authenticator`)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Grant"]


@dataclass(frozen=True, slots=True)
class Grant:
    """What one valid token proves. `generation` is the token table it was read from."""

    agent: str
    namespaces: frozenset[str]
    rights: frozenset[str]
    digest: str
    generation: int

    def allows_namespace(self, namespace: str) -> bool:
        """True when the token may open `namespace` ("*" allows every one)."""
        return "*" in self.namespaces or namespace in self.namespaces

    def has(self, right: str) -> bool:
        """True when the token carries `right` (admin carries every right)."""
        return right in self.rights or "admin" in self.rights
