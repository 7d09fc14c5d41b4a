"""The bundled client when its connection ends under it: every request fails with a connection
error, and nothing is left for asyncio to complain about."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

from host.client import MemoryClient


async def test_a_request_the_ended_connection_could_not_send_leaves_no_unretrieved_future() -> None:
    """A request whose send fails (the peer closed its input but its output is still open, as a
    stopping host does) raises at once; when the connection then ends, no future nobody awaits
    is given the error ("Future exception was never retrieved"), and a later request raises
    `ConnectionError` instead of waiting for a reply that cannot come."""
    complaints: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: complaints.append(ctx))
    # a real process that closes its stdin at once and its stdout a moment later
    client = await MemoryClient.spawn(["sh", "-c", "exec 0<&-; sleep 1"])
    await asyncio.sleep(0.2)
    for _ in range(3):
        with pytest.raises(ConnectionError):
            await client.ping()
    await client.close()
    with pytest.raises(ConnectionError):
        await asyncio.wait_for(client.ping(), 10)
    del client
    gc.collect()
    await asyncio.sleep(0)
    assert [c.get("message") for c in complaints] == []
