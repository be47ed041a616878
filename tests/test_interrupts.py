"""Interrupts, user exceptions and failures leave the server consistent: no held lock, no
half-registered op, no lost drop, no value of one tensor under another's id, no leaked
buffer; failed values are freed like any other; a read can be interrupted."""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import os
import random
import signal
import sys
import threading
import time

import numpy as np
import pytest

import clients
from tests.conftest import exploding_kernel, failing_builds, rand, server_settings, settle

pytestmark = pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs POSIX interval timers")


class _Alarm:
    """Raises `exc` from a SIGALRM handler at a random moment, `seconds` from now at most.

    It borrows the wall-clock timer of pytest-timeout's signal method: meanwhile a
    watchdog in C (faulthandler) stands in for it, so that a hang prints every thread's
    stack and ends the run, and pytest-timeout's timer runs on again afterwards."""

    def __init__(self, exc: type[BaseException], seed: int):
        self.exc = exc
        self.rng = random.Random(seed)
        self.fired = 0
        self.armed = False

    def __enter__(self):
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        self.resume = (time.monotonic() + left) if left else None
        faulthandler.dump_traceback_later(left or 900, exit=True)
        self.old = signal.signal(signal.SIGALRM, self._raise)
        return self

    def _raise(self, signum, frame):
        if self.armed:  # (a signal that arrived as the timer was disarmed is dropped)
            self.fired += 1
            raise self.exc()

    def arm(self, seconds: float) -> None:
        self.armed = True
        signal.setitimer(signal.ITIMER_REAL, self.rng.uniform(0, seconds))

    def disarm(self) -> None:
        self.armed = False
        signal.setitimer(signal.ITIMER_REAL, 0)

    def __exit__(self, *exc):
        self.disarm()
        signal.signal(signal.SIGALRM, self.old)
        faulthandler.cancel_dump_traceback_later()
        if self.resume is not None:
            signal.setitimer(signal.ITIMER_REAL, max(self.resume - time.monotonic(), 0.001))


def _untraced_worker_thread() -> None:
    """What a worker thread of an interrupt test calls first.

    The timer's signal is blocked here, so it reaches the main thread, which handles it.
    The thread runs without a trace function: on CPython 3.11, a traced thread that
    cannot handle a pending signal spins for ever at the next function entry (its tracing
    path re-checks the eval breaker without advancing), and when the main thread, which
    would handle it, sleeps on the server lock that the spinning thread holds, neither
    moves again (seen under coverage: a worker at 100% CPU in one function's first line)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    sys.settrace(None)


@contextlib.contextmanager
def _restored(target: list, items: list):
    try:
        yield
    finally:
        target[:] = items


def _lock_is_free(client) -> bool:
    free = client._lock.acquire(timeout=5)
    if free:
        client._lock.release()
    return free


def _leak_report(client) -> str:
    """What holds buffers beyond the baseline: for the message of a failed check."""
    server = client.server
    entries = server.handles.entries
    owned = {id(e.storage.buffer) for e in entries.values() if e.storage.buffer is not None}
    live = server.runtime.pool._live
    pinned = [(st.pins, st.refs, st.status) for st in server.pinned]
    return (f"{len(live)} buffers live, {sum(1 for k in live if k not in owned)} without an entry; "
            f"{len(entries)} entries; pinned storages (pins, refs, status): {pinned}; "
            f"{len(server.leases)} leases, {len(server.unpin_inbox)} queued; {len(server.tapes)} tapes")


def _workload(x, a, rng):
    """Chains, reductions, views and reads of a random shape: what an interrupt may cut."""
    kind = rng.randrange(4)
    y = x
    for k in range(rng.randrange(5, 40)):
        y = clients.tanh(y * 1.01 + 0.5) - y * 0.5
        if kind == 1 and k % 5 == 2:
            y = y + clients.max(y, axis=-1, keepdims=True)
        if kind == 2 and k % 7 == 3:
            y = clients.reshape(y, (-1,))[: a.size].reshape(a.shape)
    if kind == 3:
        y = y.T @ y
    return y.numpy()


@clients.jit
def _jitted_step(y, scale):
    return clients.tanh(y * scale + 0.5) - y * 0.5


def _holders_workload(x, a, rng):
    """`_workload`, or chains whose values something outside the entries holds for a
    while (a jitted call's capture, a resolved array, a host map): what pins buffers."""
    kind = rng.randrange(7)
    if kind < 4:
        return _workload(x, a, rng)
    host_maps = kind == 6 and x._client.server.info.kind == "CPU"
    y = x
    for k in range(rng.randrange(2, 10)):
        y = _jitted_step(y, 1.01) if kind == 4 else clients.tanh(y * 1.01 + 0.5) - y * 0.5
        if k % 3 == 1 and kind == 5:
            held = clients.resolve(y)
            del held
        elif k % 3 == 1 and host_maps:
            held = np.from_dlpack(y, copy=False)
            del held
    return y.numpy()


WORKLOADS = {"chains": _workload, "holders": _holders_workload}
SEEDS = [int(s) for s in os.environ.get("INTERRUPT_SEEDS", "1,2").split(",")]  # more for long runs


@pytest.mark.timeout(600)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("flavour", list(WORKLOADS))
def test_interrupt_fuzzer_keeps_values_right_the_lock_free_and_buffers_at_baseline(client, seed, flavour):
    """KeyboardInterrupt from a signal handler, thousands of times, at random points of
    recording, launching, reading and dropping (and, in the holders flavour, of jitted
    calls, resolved arrays and host maps), while two other threads do the same work
    (signal handlers run on the main thread only); afterwards every value is right."""
    workload = WORKLOADS[flavour]
    a = rand((64, 64), seed=seed)
    x = clients.asarray(a)
    settle()
    base = clients.stats()["buffers_live"]
    stop = threading.Event()
    failures: list[str] = []

    def worker(k):
        _untraced_worker_thread()
        rng = random.Random(seed * 100 + k)
        xk = clients.asarray(a)
        while not stop.is_set():
            want = rng.random()
            try:
                got = (xk * want + 1.0).numpy()
                if not np.allclose(got, a * np.float32(want) + 1, rtol=1e-5, atol=1e-6):
                    failures.append(f"worker {k}: wrong values")
                workload(xk, a, rng)
            except Exception as exc:  # noqa: BLE001 (interrupts land on the main thread only)
                failures.append(f"worker {k}: {exc!r}"[:600])
                return

    threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(2)]
    for th in threads:
        th.start()
    rng = random.Random(seed)
    interrupted = 0
    # Other libraries' garbage-collector callbacks (Hypothesis times collections) are
    # Python code an interrupt can land in: its error is then reported as unraisable,
    # and pytest keeps the report, traceback and all, for the rest of the session.
    callbacks, gc.callbacks[:] = gc.callbacks[:], []
    with _Alarm(KeyboardInterrupt, seed) as alarm, _restored(gc.callbacks, callbacks):
        for i in range(1500):
            try:
                alarm.arm(0.003)
                workload(x, a, rng)
                alarm.disarm()
            except KeyboardInterrupt:
                interrupted += 1
            finally:
                alarm.disarm()
            if i % 50 == 0:  # ordinary work in between: right values, under fresh ids
                want = np.tanh(a * np.float32(1.5))
                np.testing.assert_allclose(clients.tanh(x * 1.5).numpy(), want, rtol=1e-5, atol=1e-6)
    stop.set()
    for th in threads:
        th.join(60)
        assert not th.is_alive(), "a worker hangs"
    assert not failures, failures
    assert interrupted > 500  # most iterations were cut somewhere
    assert _lock_is_free(client)
    np.testing.assert_allclose((x + 1.0).numpy(), a + 1, rtol=1e-6)
    settle()
    settle()
    assert clients.stats()["buffers_live"] == base, _leak_report(client)
    assert clients.stats()["pending_ops"] == 0


def _custom_kernel(exc: type[BaseException] | None, calls: list):
    from pyopencl.elementwise import ElementwiseKernel

    kernels = {}

    def launch(queue, inputs, outputs, *, fail):
        calls.append(fail)
        if fail and exc is not None:
            raise exc()
        k = kernels.get(queue.context)
        if k is None:
            k = kernels[queue.context] = ElementwiseKernel(queue.context, "float *o, const float *src",
                                                           "o[i] = src[i] * 3.0f", "triple")
        k(outputs[0], inputs[0], queue=queue)

    return clients.custom.kernel("maybe_exit", launch, outputs=lambda spec, **_: [(spec.shape, spec.dtype)])


@pytest.mark.parametrize("exc", [SystemExit, KeyboardInterrupt, pytest.fail.Exception, pytest.skip.Exception])
def test_a_base_exception_from_a_launch_fails_its_outputs_once_and_is_never_replayed(baseline, exc):
    calls: list = []
    op = _custom_kernel(exc, calls)
    a = rand(256)
    x = clients.asarray(a)
    failed = clients.stats()["failed_blocks"]
    with pytest.raises(exc):  # raised once, where the block runs (here: it runs alone, at once)
        op(x, fail=True)
    assert calls == [True]
    assert clients.stats()["failed_blocks"] == failed + 1
    z = op(x, fail=False)  # the thread goes on: the failed op is gone from its queue
    np.testing.assert_allclose(z.numpy(), a * 3, rtol=1e-6)
    assert calls == [True, False]
    del x, z
    settle()
    assert clients.stats()["buffers_live"] == baseline


@pytest.mark.timeout(600)
def test_system_exit_from_launches_at_random_keeps_the_server_consistent(client):
    calls: list = []
    op = _custom_kernel(SystemExit, calls)
    rng = random.Random(3)
    a = rand(512)
    x = clients.asarray(a)
    settle()
    base = clients.stats()["buffers_live"]
    exits = 0
    for _ in range(300):
        fail = rng.random() < 0.3
        use_exp = rng.random() < 0.5
        want = (np.exp(a) * np.float32(0.5) if use_exp else a) * 3 + 1
        try:
            y = op(clients.exp(x) * 0.5 if use_exp else x, fail=fail)
            z = y + 1.0
            got = z.numpy()
        except SystemExit:
            exits += 1
            continue
        except clients.TensorFailedError:
            assert fail
            continue
        assert not fail
        np.testing.assert_allclose(got, want, rtol=1e-5)
    assert exits > 30
    y = z = None
    settle()
    assert _lock_is_free(client)
    assert clients.stats()["buffers_live"] == base, _leak_report(client)


def _long_kernel():
    """A custom kernel that keeps the device busy for seconds."""
    from pyopencl.elementwise import ElementwiseKernel

    kernels = {}

    def launch(queue, inputs, outputs, *, rounds):
        k = kernels.get(queue.context)
        if k is None:
            k = kernels[queue.context] = ElementwiseKernel(
                queue.context, "float *o, const float *src, const long rounds",
                "float v = src[i]; for (long r = 0; r < rounds; ++r) v = v * 0.9999999f + 1e-7f; o[i] = v",
                "spin")
        k(outputs[0], inputs[0], np.int64(rounds), queue=queue)

    return clients.custom.kernel("spin", launch, outputs=lambda spec, **_: [(spec.shape, spec.dtype)])


@pytest.mark.timeout(300)
def _read_interrupted(y) -> tuple[float | None, str]:
    """Read `y` with a SIGINT sent 0.2 s into the wait: the seconds from the signal to the
    KeyboardInterrupt (None if the read ended first), and what happened, for a report."""
    from fusion_server.runtime import waits

    waiting = threading.Event()
    sent: list[float] = []

    def hook():
        if threading.current_thread() is threading.main_thread():
            waiting.set()

    def interrupter():
        if waiting.wait(60):
            time.sleep(0.2)  # (not ordering: inside the wait already, by the hook)
            sent.append(time.perf_counter())
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    waits.guards.append(hook)
    th = threading.Thread(target=interrupter, daemon=True)
    start = time.perf_counter()
    th.start()
    caught = ended = None
    try:
        try:
            y.numpy()
            ended = time.perf_counter()
            th.join(10)  # (a signal sent after the read lands here)
        except KeyboardInterrupt:
            caught = time.perf_counter()
    finally:
        waits.guards.remove(hook)
    th.join(10)
    report = (f"wait began: {waiting.is_set()}; signal at {sent[0] - start:.3f} s" if sent else
              f"wait began: {waiting.is_set()}; no signal") + \
        (f"; read ended at {ended - start:.3f} s" if ended else "") + \
        (f"; interrupt at {caught - start:.3f} s" if caught else "")
    if ended is not None or caught is None or not sent:
        return None, report
    return caught - sent[0], report


def test_sigint_during_a_long_read_is_acted_on_within_100_ms_and_the_value_stays_readable(client):
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # (a shell without job control starts background commands so: Ctrl-C cannot reach them)
        pytest.skip("this process ignores SIGINT")
    spin = _long_kernel()
    x = clients.asarray(np.ones(4096, np.float32))
    spin(x, rounds=10).numpy()  # built before the timed part
    took = []
    for _ in range(3):
        start = time.perf_counter()
        spin(x, rounds=200_000).numpy()
        took.append(time.perf_counter() - start)
    rounds = int(200_000 * 2.0 / max(min(took), 1e-4))  # about two seconds on this device
    reports = []
    for _ in range(3):  # a busy machine measured too slow: the read ended before the signal
        y = spin(x, rounds=rounds)
        delay, report = _read_interrupted(y)
        reports.append(f"{rounds} rounds: {report}")
        if delay is not None:
            break
        rounds *= 4
    assert delay is not None, f"no read was interrupted: {reports}"
    assert delay < 0.1, reports
    got = y.numpy()  # still pending on the device, or done by now: readable either way
    assert got.shape == (4096,) and np.isfinite(got).all()
    assert _lock_is_free(client)


def test_main_thread_waits_that_outlast_the_polling_share_one_kept_helper_thread(client):
    from fusion_server.runtime import waits

    spin = _long_kernel()
    x = clients.asarray(np.ones(4096, np.float32))
    spin(x, rounds=10).numpy()  # built before the counted part
    rounds = 20_000
    while True:  # long enough that every read outlasts the polling, on any device
        start = time.perf_counter()
        spin(x, rounds=rounds).numpy()
        if time.perf_counter() - start > 20 * client.spin_seconds:
            break
        rounds *= 4
    want = spin(x, rounds=rounds).numpy()
    kept = list(waits._idle)
    assert kept, "no helper thread was kept after a wait that outlasted the polling"
    for _ in range(5):
        np.testing.assert_array_equal(spin(x, rounds=rounds).numpy(), want)
        assert waits._idle == kept and not waits._busy, "a wait started a helper of its own"
    assert _lock_is_free(client)


class _PolledEvent:
    """Stands for a cl.Event that completes after `polls` looks at its status."""

    def __init__(self, polls: int):
        self.polls = polls
        self.looks = 0

    @property
    def command_execution_status(self) -> int:
        self.looks += 1
        return 0 if self.looks > self.polls else 1  # (COMPLETE is 0, RUNNING 1)

    def wait(self) -> None:
        self.looks = self.polls


def test_a_wait_polls_for_its_spin_then_hands_over_to_a_helper(client, monkeypatch):
    from fusion_server.runtime import waits

    handed = []

    class Helper:
        inbox = type("Inbox", (), {"put": staticmethod(lambda item: (handed.append(item), item[1].release()))})

    monkeypatch.setattr(waits, "_helper", lambda: Helper)
    waits.wait(_PolledEvent(polls=50), spin_seconds=60.0)  # done within the polling
    assert not handed
    waits.wait(_PolledEvent(polls=10**9), spin_seconds=0.0)  # never done while polled
    assert len(handed) == 1
    # The client polls for a short while on CPU devices (a poll takes a core from the
    # kernel), longer elsewhere (a helper's wake-up would cost more than the polls).
    cpu = client.server.info.kind == "CPU"
    assert client.spin_seconds == (waits.SPIN_SECONDS if cpu else waits.ACCELERATOR_SPIN_SECONDS)


def test_a_long_poll_lets_other_threads_run_between_looks(monkeypatch):
    from fusion_server.runtime import waits

    sleeps = []
    monkeypatch.setattr(waits.time, "sleep", lambda seconds: sleeps.append(seconds))
    monkeypatch.setattr(waits, "YIELD_AFTER_SECONDS", 0.0)
    waits.wait(_PolledEvent(polls=50), spin_seconds=60.0)
    assert sleeps and set(sleeps) == {0}
    sleeps.clear()
    monkeypatch.setattr(waits, "YIELD_AFTER_SECONDS", 60.0)
    waits.wait(_PolledEvent(polls=50), spin_seconds=60.0)  # (all of it within the tight polling)
    assert not sleeps


def test_other_threads_poll_then_wait_in_the_driver(monkeypatch):
    from fusion_server.runtime import waits

    monkeypatch.setattr(waits, "_helper", lambda: pytest.fail("a helper was used off the main thread"))
    quick, slow, errors = _PolledEvent(polls=50), _PolledEvent(polls=10**9), []
    waited = []
    slow.wait = lambda: waited.append(True)  # (the driver's wait: done at once here)

    def waiter() -> None:
        try:
            waits.wait(quick, spin_seconds=60.0)  # done within the polling: no driver wait
            waits.wait(slow, spin_seconds=0.0)
        except BaseException as exc:  # noqa: BLE001 (reported by the main thread)
            errors.append(exc)

    thread = threading.Thread(target=waiter)
    thread.start()
    thread.join()
    assert not errors, errors
    assert quick.looks == 51 and waited == [True]


# -- every failure kind frees what it held ----------------------------------------------------
def _counts():
    settle()
    s = clients.stats()
    return s["buffers_live"], s["tensors_live"]


def test_failed_launches_free_their_buffers_and_entries(client):
    calls: list = []
    op = _custom_kernel(RuntimeError, calls)
    x = clients.asarray(rand((16, 16)))
    before = _counts()
    for _ in range(20):
        y = op(x.T, fail=True)  # a strided input: the op gets a contiguous copy made for it
        with pytest.raises(clients.TensorFailedError):
            y.numpy()
        del y
    assert _counts() == before


def test_failed_builds_free_their_entries(client):
    import uuid

    from fusion_server.runtime.programs import KernelBuildError

    programs = client.server.runtime.programs
    marker = f"{uuid.uuid4().int % 1000}.125f"
    op = clients.custom.elementwise("never_built", f"x + {marker}")
    x = clients.asarray(rand(64))
    before = _counts()
    with failing_builds(programs, marker, lambda name: KernelBuildError("injected build failure")):
        for _ in range(10):
            y = op(x) * 2.0
            with pytest.raises(clients.TensorFailedError):
                y.numpy()
            del y
    assert _counts() == before


def test_failed_allocations_free_their_entries(client, monkeypatch):
    from fusion_server.errors import DeviceMemoryError

    pool = client.server.runtime.pool
    x = clients.asarray(rand(1000))
    (x * 3.0).numpy()
    before = _counts()
    real = pool.alloc

    def full(nbytes):
        if nbytes == 4000 * 7:
            raise DeviceMemoryError("injected: the device is full")
        return real(nbytes)

    monkeypatch.setattr(pool, "alloc", full)
    for _ in range(10):
        y = clients.concat([x] * 7) * 2.0
        with pytest.raises(clients.TensorFailedError, match="device is full"):
            y.numpy()
        del y
    monkeypatch.undo()
    assert _counts() == before


def test_a_custom_fuser_whose_offer_raises_leaks_nothing(client):
    from fusion_server.fusers.base import Fuser

    class Broken(Fuser):
        name = "broken"

        def __init__(self):
            self.reset()

        def reset(self):
            self.closed = False
            self.close_reason = ""

        def score(self):
            return 0

        def offer(self, op, ctx):
            raise ValueError("injected: this fuser cannot look at ops")

        def finish(self, ctx):
            raise AssertionError("never chosen")

    a = rand(128)
    x = clients.asarray(a)
    before = _counts()
    clients.custom.register_fuser(lambda ctx: Broken())
    try:
        for _ in range(10):
            np.testing.assert_allclose((x * 2.0 + 1.0).numpy(), a * 2 + 1, rtol=1e-6)
    finally:
        clients.custom.unregister_fusers()
    assert _counts() == before


def test_an_interrupted_build_leaks_nothing_and_the_op_runs_later(client):
    import uuid

    programs = client.server.runtime.programs
    marker = f"{uuid.uuid4().int % 1000}.375f"
    op = clients.custom.elementwise("interrupted_build", f"x * {marker}")
    a = rand(64)
    x = clients.asarray(a)
    before = _counts()
    # (op(x) * 2.0, not op(x) alone: the op's check at definition may have built that kernel)
    with failing_builds(programs, marker, lambda name: KeyboardInterrupt(), times=1):
        with pytest.raises(KeyboardInterrupt):
            (op(x) * 2.0).numpy()
        got = (op(x) * 2.0).numpy()  # built this time
    np.testing.assert_allclose(got, a * np.float32(float(marker[:-1])) * 2, rtol=1e-6)
    assert _counts() == before


@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
def test_a_kept_failure_does_not_keep_the_stack_it_was_raised_in_alive(client, exc):
    """A failed value keeps its cause without a traceback (written into a note instead):
    the traceback's frames reach the whole stack that raised it, and every tensor it held."""
    import weakref

    calls: list = []
    op = _custom_kernel(exc, calls)
    x = clients.asarray(rand(32))

    def cut():
        victim = x * 2.0
        ref = weakref.ref(victim)
        try:
            return ref, op(victim, fail=True)  # runs at once: nothing else is in its block
        except KeyboardInterrupt:
            return ref, None

    ref, failed = cut()
    gc.collect()
    assert ref() is None  # victim, held only by the frames that ran the launch, is gone
    if failed is not None:
        error = client.call(lambda server: server.handles.get(failed._id).storage.error)
        link, notes = error, []
        while link is not None:
            assert link.__traceback__ is None
            notes += getattr(link, "__notes__", [])
            link = link.__cause__
        assert any("raise exc()" in n for n in notes) or not hasattr(error, "add_note")
        with pytest.raises(clients.TensorFailedError, match="failed in its launch function"):
            failed.numpy()


def test_a_lost_signal_at_handle_death_loses_no_drop(baseline):
    """Handles report their death through a C callback: an interrupt raised while the
    garbage collector frees thousands of them drops every one."""
    callbacks, gc.callbacks[:] = gc.callbacks[:], []  # (see the fuzzer: other libraries' callbacks)
    with _Alarm(KeyboardInterrupt, 7) as alarm, _restored(gc.callbacks, callbacks):
        for _ in range(200):
            xs = [clients.asarray(rand(16)) * 2.0 for _ in range(20)]
            try:
                alarm.arm(0.0005)
                xs.clear()  # the handles die here, one after the other
                gc.collect()
                alarm.disarm()
            except KeyboardInterrupt:
                pass
            finally:
                alarm.disarm()
            xs = None
    settle()
    assert clients.stats()["buffers_live"] == baseline


def _interrupting_at_first_call(raised: list[str]):
    """A profile hook that raises KeyboardInterrupt at the first Python function entered
    (as a signal handler's exception is raised at a function's entry), noting its name
    in `raised`."""
    def hook(frame, event, arg):
        if event == "call" and not raised:
            raised.append(frame.f_code.co_qualname)
            raise KeyboardInterrupt

    return hook


def _hold_a_buffer(kind: str, x: clients.Tensor):
    """Something that holds x's buffer outside the entries: what `kind` names."""
    if kind == "a resolved array":
        return clients.resolve(x)
    if kind == "a host map":
        return np.from_dlpack(x, copy=False)
    f = clients.jit(lambda y: y + x)  # a capture's constant: x, read by reference
    f(clients.asarray(np.zeros(x.shape, x.dtype))).numpy()
    return f


@pytest.mark.parametrize("kind", ["a resolved array", "a host map", "a capture's constant"])
def test_an_interrupt_as_a_buffers_holder_is_collected_loses_no_unpin(client, baseline, kind):
    """A pin ends through a C callback when what holds the buffer is collected (a lease):
    no Python code runs there, so an interrupt at that moment cannot cut the unpin short
    (with a finalizer in Python it was lost, and the buffer with it)."""
    if kind == "a host map" and client.server.info.kind != "CPU":
        pytest.skip("host maps are for CPU devices")
    a = rand((8, 16), seed=3)
    x = clients.asarray(a) * 2.0
    holder = _hold_a_buffer(kind, x)
    tid = x._id
    storage = client.call(lambda server: server.handles.get(tid).storage)
    assert storage.pins == 1 and len(client.server.leases) == 1
    del x
    gc.collect()
    assert client.call(lambda server: storage.buffer) is not None  # (the holder's now)
    raised: list[str] = []
    sys.setprofile(_interrupting_at_first_call(raised))
    try:
        del holder
    finally:
        sys.setprofile(None)
    settle()
    assert storage.pins == 0 and not client.server.leases, f"an unpin was lost (interrupted in {raised})"
    assert clients.stats()["buffers_live"] == baseline
    assert raised == [], f"Python code ran as the holder was collected: {raised}"


def test_a_block_run_around_a_failed_input_is_not_stopped_half_done_by_a_build(client, monkeypatch):
    """A block with a failed input fails the values that depend on it and computes the
    rest, whose kernel may not be built yet. That build must not stop the block once it
    has failed values: run again after it, the block would find gone a failed value whose
    handle died meanwhile (its op still queued), and fail the values it should compute."""
    import uuid

    programs = client.server.runtime.programs
    marker = f"{uuid.uuid4().int % 1000}.875f"
    scaled = clients.custom.elementwise("around_a_failure", f"x * {marker}")
    explode = exploding_kernel("explodes_before_a_build")
    a = rand(256, seed=14)
    x = clients.asarray(a)
    before = _counts()
    failed = explode(x)
    held = [failed * 3.0]  # fails with its input; dropped while the other values' kernel builds
    good = scaled(x) * 2.0
    build = programs.build

    def build_dropping(key, source, name, options=(), arg_dtypes=None):
        if marker in source:
            held.clear()
        return build(key, source, name, options, arg_dtypes)

    monkeypatch.setattr(programs, "build", build_dropping)
    np.testing.assert_allclose(good.numpy(), a * np.float32(float(marker[:-1])) * 2, rtol=1e-6)
    assert not held  # (the build ran while the block was under way)
    del failed, good
    assert _counts() == before


# -- an interrupt between an op's entry and the note that the server has it -------------------
class _CutOnce(dict):
    """A server's `registered_upto` whose next update, once armed, raises KeyboardInterrupt
    instead: an op has its entry, and the server has not noted it as registered."""

    armed = False

    def __setitem__(self, key, value):
        if self.armed:
            self.armed = False
            raise KeyboardInterrupt
        dict.__setitem__(self, key, value)


def _interrupted(fn) -> bool:
    """Whether `fn()` raised KeyboardInterrupt; its frames, and the handles they held, are
    gone when this returns (collected: a traceback can sit in a reference cycle)."""
    try:
        fn()
        cut = False
    except KeyboardInterrupt:
        cut = True
    gc.collect()
    return cut


@pytest.fixture
def cut(client, monkeypatch):
    """The inbox channel (ops wait in the thread's queue), no run cache, and a server whose
    next note of an op as registered an armed `_CutOnce` interrupts."""
    monkeypatch.setattr(client, "channel", "inbox")
    with server_settings(run_cache_enabled=False) as server:
        cut = _CutOnce(server.registered_upto)
        monkeypatch.setattr(server, "registered_upto", cut)
        yield cut


def test_an_op_cut_after_its_entry_is_not_registered_again_once_its_handle_died(cut):
    """The op stays in its thread's queue and its handle dies; the next flush applies that
    drop (releasing the op's failed entry) before it registers the queue. Registered again,
    the op would make an entry for an id whose drop is spent: alive, and its buffer held,
    for ever."""
    a = rand(256, seed=11)
    x = clients.asarray(a)
    before = _counts()

    def read():
        y = x * 3.0
        cut.armed = True
        y.numpy()

    assert _interrupted(read) and not cut.armed
    np.testing.assert_allclose((x + 1.0).numpy(), a + 1, rtol=1e-6)
    assert _counts() == before
    assert clients.stats()["pending_ops"] == 0


def test_a_view_cut_after_its_entry_is_not_registered_again_once_its_handle_died(cut):
    """As above, for a view: the interrupt falls after its entry, before the server notes
    it as registered; its handle dies, and the next flush leaves nothing behind."""
    a = rand((16, 16), seed=12)
    x = clients.asarray(a)
    before = _counts()

    def read():
        y = x[1:, ::3]
        cut.armed = True
        y.numpy()

    assert _interrupted(read) and not cut.armed
    np.testing.assert_allclose((x[2:].T + 1.0).numpy(), a[2:].T + 1, rtol=1e-6)
    assert _counts() == before
    assert clients.stats()["pending_ops"] == 0


def test_an_op_cut_after_its_entry_still_takes_the_drop_that_came_before_it(cut):
    """A value dropped before its op was registered (`x * 3.0` as a statement) has its drop
    kept for the op; cut between the op's entry and that drop's application, the value is
    still released."""
    a = rand(256, seed=13)
    x = clients.asarray(a)
    before = _counts()

    def read():
        x * 3.0  # noqa: B018 (dropped at once: the flush below applies the drop first)
        cut.armed = True
        (x + 1.0).numpy()

    assert _interrupted(read) and not cut.armed
    np.testing.assert_allclose((x + 2.0).numpy(), a + 2, rtol=1e-6)
    assert _counts() == before
    assert clients.stats()["pending_ops"] == 0


def test_a_run_replay_cut_before_its_ops_count_as_registered_leaks_nothing(client, monkeypatch):
    """A recurring run is replayed (entries made for its live values), and the interrupt
    falls before the server notes its ops as registered: they are still queued, and must
    not be registered again once the replayed values' handles died."""
    monkeypatch.setattr(client, "channel", "inbox")
    a = rand(512, seed=12)
    x = clients.asarray(a)
    want = np.tanh(a * np.float32(1.5)) + np.float32(0.25)

    def step():
        return (clients.tanh(x * 1.5) + 0.25).numpy()

    with server_settings(run_cache_enabled=True) as server:
        for _ in range(3):  # noted, captured, replayed
            np.testing.assert_allclose(step(), want, rtol=1e-5, atol=1e-6)
        before = _counts()
        replay = server.replay
        armed = [True]

        def replay_then_interrupt(*args, **kwargs):
            done = replay(*args, **kwargs)
            if done and armed[0]:
                armed[0] = False
                raise KeyboardInterrupt
            return done

        monkeypatch.setattr(server, "replay", replay_then_interrupt)
        assert _interrupted(step) and not armed[0]  # (cut once the replay was done)
        np.testing.assert_allclose(step(), want, rtol=1e-5, atol=1e-6)  # (its flush applies the drop first)
        assert _counts() == before
        assert clients.stats()["pending_ops"] == 0
