"""A test that hangs fails, with the stacks of what it was waiting on, instead of stalling CI.

Each test (setup, call and teardown) gets `A2E_TEST_HANG_S` seconds (default 300; the slowest
test takes well under a minute on two loaded cores). Past that, the watchdog thread prints
every thread's stack and every task of the test's event loop, then cancels those tasks, so the
test errors and the session goes on. If the test is still not done 60 s later (a thread, not
a task, is stuck; `A2E_TEST_KILL_S`), it prints the stacks again, to the real stderr, and ends
the process with status 1.

Registered by conftest.py (`pytest_plugins`); `loop_of_test` is the autouse fixture that
tells the watchdog which loop a test runs on.
"""

from __future__ import annotations

import asyncio
import faulthandler
import gc
import os
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

HANG_S = float(os.environ.get("A2E_TEST_HANG_S", "300"))
KILL_AFTER_S = float(os.environ.get("A2E_TEST_KILL_S", "60"))

_loop: asyncio.AbstractEventLoop | None = None


@pytest.fixture(autouse=True)
async def loop_of_test() -> AsyncIterator[None]:
    """Records the running test's event loop for the watchdog (autouse: set up first, torn
    down last, so it covers the other fixtures' teardown too)."""
    global _loop
    _loop = asyncio.get_running_loop()
    try:
        yield
    finally:
        _loop = None


def _dump_tasks(loop: asyncio.AbstractEventLoop) -> None:
    for task in asyncio.all_tasks(loop):
        print(f"--- task {task.get_name()}: {task!r}", file=sys.stderr)
        task.print_stack(limit=30, file=sys.stderr)
        task.cancel("test watchdog: hung")
    sys.stderr.flush()


def _on_hang(nodeid: str, done: threading.Event, capture: Any) -> None:
    print(f"\n=== watchdog: {nodeid} still running after {HANG_S:.0f} s; stacks follow",
          file=sys.stderr)
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    loops = [_loop] if _loop is not None else [  # past the fixture: the runner's own close
        o for o in gc.get_objects() if isinstance(o, asyncio.AbstractEventLoop)]
    for loop in loops:
        if loop is not None and loop.is_running():
            loop.call_soon_threadsafe(_dump_tasks, loop)
    if not done.wait(KILL_AFTER_S):
        if capture is not None:  # to the real stderr, not the test's captured output
            capture.suspend_global_capture(in_=True)
        print(f"\n=== watchdog: {nodeid} did not end once cancelled; exiting", file=sys.stderr)
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        sys.stderr.flush()
        os._exit(1)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Any) -> Iterator[None]:
    done = threading.Event()
    capture = item.config.pluginmanager.getplugin("capturemanager")
    timer = threading.Timer(HANG_S, _on_hang, (item.nodeid, done, capture))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        done.set()
        timer.cancel()
