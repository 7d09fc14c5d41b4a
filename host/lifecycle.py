"""`Opens`: `async with thing:` for anything with `async open()` and `async close()` (the
stores, the MCP app), so each does not write the two methods again."""

from __future__ import annotations

from typing import Self

__all__ = ["Opens"]


class Opens:
    """Mixin: `async with x:` awaits `x.open()` on entry and `x.close()` on leaving."""

    async def open(self) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
