"""The one place where the host waits for the device.

Every wait goes through `wait`, which first asks each registered guard whether waiting
is allowed here. The client registers a guard that fails when the calling thread holds
the server lock (invariant 1); tests add guards to observe the waits.
"""

from __future__ import annotations

from collections.abc import Callable

import pyopencl as cl

guards: list[Callable[[], None]] = []


def wait(event: cl.Event | None) -> None:
    """Block until `event` completes (None: nothing to wait for)."""
    for guard in guards:
        guard()
    if event is not None:
        event.wait()


def wait_queue(queue: cl.CommandQueue) -> None:
    """Block until everything enqueued on `queue` so far completes."""
    for guard in guards:
        guard()
    queue.finish()


def drain_at_exit(queue: cl.CommandQueue) -> None:
    """Wait for the queue at interpreter exit, where the lock is held on purpose (so that
    daemon threads stay out of the driver while the process ends); no guards apply."""
    queue.finish()
