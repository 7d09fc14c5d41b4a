"""Smoke: the host fixture serves the spec's store example and reads it back."""

import pytest

from host.client import MemoryClient

pytestmark = pytest.mark.all_backends


async def test_store_then_retrieve(client: MemoryClient) -> None:
    """A stored episodic entry comes back by key."""
    reply = await client.store([{"key": {"k": 1}, "content": "hello", "tier": "episodic"}])
    assert reply.stored == [{"k": 1}]
    got = await client.retrieve(keys=[{"k": 1}])
    assert [e["content"] for e in got.entries] == ["hello"]
