"""The one place where the host waits for the device.

Every wait goes through `wait`, which first asks each registered guard whether waiting
is allowed here. The client registers a guard that fails when the calling thread holds
the server lock (invariant 1); tests add guards to observe the waits.

A wait on the main thread returns to Python at least every `POLL_SECONDS`, so Ctrl-C
(or any signal handler) is acted on while a long kernel runs: the driver goes on, the
value stays pending, and it can be waited for again. Other threads never run signal
handlers: they poll the same way, then wait in the driver.
"""

from __future__ import annotations

import os
import queue
import signal
import threading
import time
from _thread import allocate_lock as _allocate_lock
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
# Small reads complete within tens of microseconds: polling the status for that long first
# costs less than handing the wait to a helper thread (a 1024-element chain and read: 31 us
# polling, 45 us through the helper). Not longer: on a CPU device the polling thread takes
# a core from the kernel it waits for (a 1.5 ms kernel on 2 cores took 0.2 to 0.35 ms
# more with 0.5 ms of polling; Intel's CPU runtime, a 2-core AMD EPYC).
SPIN_SECONDS = 0.00005
# Where the device is not the host's CPU, polling takes nothing from the kernel, and a wait
# handed over costs the driver's wake-up on top (NVIDIA's blocking wait, about 0.2 ms).
# On the H200 (driver 580), polling for up to 2 ms instead of 50 us took a jitted 16-op
# chain over 2^24 floats from 0.87 to 0.97 of the hand-written kernel's enqueue + finish,
# and its build + read on 1024 floats from 180 to 128 us; polling for as long as a main-
# thread wait stays in the driver (POLL_SECONDS) instead of 2 ms took maximum(a @ w + bias,
# 0) at 4096^3 (a 3.2 ms kernel) from 3.56 to 3.35 ms of wall time, 0.84 to 0.90 of
# cuBLAS's (interleaved rounds).
ACCELERATOR_SPIN_SECONDS = POLL_SECONDS
# Past this much polling, each look at the status is preceded by a sleep(0), which lets a
# thread waiting for the GIL run at once instead of at the next switch interval (5 ms):
# a long wait on an accelerator does not slow the threads that record meanwhile.
YIELD_AFTER_SECONDS = 0.002
_COMPLETE = cl.command_execution_status.COMPLETE
_main = threading.main_thread()


def wait(event: cl.Event | None, spin_seconds: float = SPIN_SECONDS) -> None:
    """Block until `event` completes (None: nothing to wait for). Its status is polled for
    up to `spin_seconds` (SPIN_SECONDS for CPU devices, ACCELERATOR_SPIN_SECONDS for
    others); then the main thread hands the wait to a helper thread, others wait in the
    driver."""
    for guard in guards:
        guard()
    if event is None:
        return
    main = threading.current_thread() is _main
    if main and not _interrupts_restored:
        restore_interrupts()
    if _polled(event, spin_seconds):
        return
    if not main:
        event.wait()
        return
    # A helper thread waits in the driver; this one waits on a lock with a timeout, which
    # signals interrupt and after which their handlers run. (An event callback would do
    # the same, but pyopencl then blocks when the event object is freed, until the
    # command completes: an interrupted wait would still last as long as the kernel.)
    done = _allocate_lock()
    done.acquire()
    _helper().inbox.put((event, done))
    while not done.acquire(timeout=POLL_SECONDS):
        pass
    if event.command_execution_status < 0:
        event.wait()  # (raises the driver's error here, in the caller)


def _polled(event: cl.Event, spin_seconds: float) -> bool:
    """Poll `event`'s status for up to `spin_seconds`: whether it completed (a command
    that failed on the device has its error raised here, by the driver's wait)."""
    start = time.perf_counter()
    while True:
        status = event.command_execution_status
        if status == _COMPLETE:
            return True
        if status < 0:
            event.wait()
            return True
        spent = time.perf_counter() - start
        if spent > spin_seconds:
            return False
        if spent > YIELD_AFTER_SECONDS:
            time.sleep(0)


class _Helper(threading.Thread):
    """Waits in the driver for the main thread, one event at a time, then goes back to
    the idle helpers. Kept between waits: starting a thread per wait cost about 50 us."""

    def __init__(self) -> None:
        super().__init__(daemon=True, name="fusion-wait")
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()

    def run(self) -> None:
        while True:
            event, done = self.inbox.get()
            _busy.add(self)
            try:
                event.wait()
            except Exception:  # noqa: BLE001 (a failed command: the caller asks the event again)
                pass
            finally:
                _busy.discard(self)
                _idle.append(self)  # (before the release: the woken caller's next wait finds it)
                done.release()


_idle: list[_Helper] = []  # helpers waiting for a wait to do
_busy: set[_Helper] = set()  # helpers inside the driver (an interrupted or running wait)


def _helper() -> _Helper:
    """An idle helper, or a new one when all are busy (an interrupted wait still runs)."""
    try:
        return _idle.pop()
    except IndexError:
        helper = _Helper()
        helper.start()
        return helper


def _forget_helpers() -> None:  # a forked child has none of its parent's threads
    _idle.clear()
    _busy.clear()


os.register_at_fork(after_in_child=_forget_helpers)


def drain_at_exit(device_queue: cl.CommandQueue) -> None:
    """Wait for the queue at interpreter exit, where the lock is held on purpose (so that
    daemon threads stay out of the driver while the process ends); no guards apply. The
    helpers that wait in the driver end too: one still inside it when the interpreter
    finalizes would be killed inside the driver's C++ code, which aborts the process."""
    device_queue.finish()
    deadline = time.monotonic() + 10
    while _busy and time.monotonic() < deadline:
        time.sleep(0.001)  # (an idle helper waits on its inbox, outside the driver: harmless)
