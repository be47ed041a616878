"""The one place where the host waits for the device.

Every wait goes through `wait`, which first asks each registered guard whether waiting
is allowed here. The client registers a guard that fails when the calling thread holds
the server lock (invariant 1); tests add guards to observe the waits.

A wait on the main thread returns to Python at least every `POLL_SECONDS`, so Ctrl-C
(or any signal handler) is acted on while a long kernel runs: the driver goes on, the
value stays pending, and it can be waited for again. Other threads never run signal
handlers, and wait in the driver.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable

import pyopencl as cl

guards: list[Callable[[], None]] = []
_interrupts_restored = False


def restore_interrupts() -> None:
    """Give SIGINT back to Python once drivers are loaded (main thread only).

    PoCL replaces the process's SIGINT handler with its own when its platform loads, and
    Ctrl-C then never reaches Python's handler during a wait (measured with PoCL 3.0: a
    6 s read ran to its end). Reinstalling the Python-level handler that is recorded
    restores Python's C handler; the Python-level one is unchanged."""
    global _interrupts_restored
    if _interrupts_restored or threading.current_thread() is not _main:
        return
    _interrupts_restored = True
    handler = signal.getsignal(signal.SIGINT)
    if handler is not None:
        signal.signal(signal.SIGINT, handler)

POLL_SECONDS = 0.05  # the longest a main-thread wait stays in the driver without looking up
# Small reads complete within tens of microseconds: polling the status for this long
# first costs less than the driver's callback (measured on PoCL: a 1024-element chain and
# read took 160 us polling, 206 us through the callback).
SPIN_SECONDS = 0.0005
_COMPLETE = cl.command_execution_status.COMPLETE
_main = threading.main_thread()


def wait(event: cl.Event | None) -> None:
    """Block until `event` completes (None: nothing to wait for)."""
    for guard in guards:
        guard()
    if event is None:
        return
    if threading.current_thread() is not _main:
        event.wait()
        return
    if not _interrupts_restored:
        restore_interrupts()
    start = time.perf_counter()
    while True:
        status = event.command_execution_status
        if status == _COMPLETE:
            return
        if status < 0:  # failed on the device: let the driver report it
            event.wait()
            return
        if time.perf_counter() - start > SPIN_SECONDS:
            break
    # A helper thread waits in the driver; this one waits on a lock with a timeout, which
    # signals interrupt and after which their handlers run. (An event callback would do
    # the same, but pyopencl then blocks when the event object is freed, until the
    # command completes: an interrupted wait would still last as long as the kernel.)
    done = threading.Event()
    threading.Thread(target=_wait_then_set, args=(event, done), daemon=True, name="fusion-wait").start()
    while not done.wait(POLL_SECONDS):
        pass


_helpers: set[threading.Thread] = set()  # waiting in the driver for an interrupted or running wait


def _wait_then_set(event: cl.Event, done: threading.Event) -> None:
    _helpers.add(threading.current_thread())  # (here, not in the caller: an interrupt cannot fall in between)
    try:
        event.wait()
    finally:
        done.set()
        _helpers.discard(threading.current_thread())


def drain_at_exit(queue: cl.CommandQueue) -> None:
    """Wait for the queue at interpreter exit, where the lock is held on purpose (so that
    daemon threads stay out of the driver while the process ends); no guards apply. The
    helpers that wait in the driver end too: one still inside it when the interpreter
    finalizes would be killed inside the driver's C++ code, which aborts the process."""
    queue.finish()
    for helper in list(_helpers):
        if helper is not threading.current_thread():
            helper.join(10)
