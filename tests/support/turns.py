"""Turns of the event loop: how many times the other tasks ran while one awaited something."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def turns_while(work: Awaitable[T]) -> tuple[T, int]:
    """`work` awaited beside a task that counts the turns of the loop it gets meanwhile:
    (what `work` returned, the turns). 0: `work` never let the loop run."""
    turns = 0
    done = False

    async def tick() -> None:
        nonlocal turns
        while not done:
            turns += 1
            await asyncio.sleep(0)

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0)  # the ticker's first turn, before `work` starts
    start = turns
    try:
        result = await work
    finally:
        done = True
        seen = turns - start
        await ticker
    return result, seen
