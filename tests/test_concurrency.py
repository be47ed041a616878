"""Threads: reads wait outside the lock, streams see each other's values, no re-entry."""

from __future__ import annotations

import pathlib
import re
import threading

import numpy as np
import pytest

import clients
from fusion_server.runtime import waits
from tests.conftest import rand

TIMEOUT = 60


def run_thread(fn, *args):
    """Run fn on a thread; return (thread, result box)."""
    box: dict = {}

    def target():
        try:
            box["value"] = fn(*args)
        except BaseException as exc:  # re-raised by the test
            box["error"] = exc

    th = threading.Thread(target=target, daemon=True)
    th.start()
    return th, box


def joined(th, box):
    th.join(TIMEOUT)
    assert not th.is_alive(), "thread did not finish"
    if "error" in box:
        raise box["error"]
    return box.get("value")


def test_a_waiting_read_does_not_block_other_threads(client):
    """While thread A waits in a read, thread B registers and launches work."""
    a_waiting = threading.Event()
    b_done = threading.Event()
    data = rand(1 << 16)
    x = clients.asarray(data)
    reader_ident: list[int] = []

    def guard():
        if reader_ident and threading.get_ident() == reader_ident[0]:
            a_waiting.set()
            # A stays in its wait until B has done its work: if A held the lock, B
            # could not register or launch and this wait would time out.
            assert b_done.wait(TIMEOUT), "thread B could not work while A was reading"

    def reader():
        reader_ident.append(threading.get_ident())
        return (clients.exp(x) * 2.0).numpy()

    waits.guards.append(guard)
    try:
        th_a, box_a = run_thread(reader)
        assert a_waiting.wait(TIMEOUT)

        def other_work():
            launched = clients.stats()["kernels_launched"]
            y = clients.sin(x) + 1.0
            clients.flush()
            return clients.stats()["kernels_launched"] - launched, y

        th_b, box_b = run_thread(other_work)
        launched, y = joined(th_b, box_b)
        b_done.set()
        assert launched == 1
        got = joined(th_a, box_a)
    finally:
        waits.guards.remove(guard)
    np.testing.assert_allclose(got, np.exp(data) * 2, rtol=1e-5)
    np.testing.assert_allclose(y.numpy(), np.sin(data) + 1, rtol=1e-5, atol=1e-6)


def test_waiting_under_the_lock_is_refused(client):
    with pytest.raises(clients.FusionError, match="holding the server lock"):
        client.call(lambda server: waits.wait(None))


def test_tensor_from_another_threads_queue():
    """B uses a tensor still queued in A's stream: A's work is flushed first."""
    a = rand(1000)
    made = threading.Event()
    used = threading.Event()
    box: dict = {}

    def producer():
        x = clients.asarray(a)
        box["t"] = clients.exp(x) + 1.0  # queued in this thread's stream only
        made.set()
        return used.wait(TIMEOUT)

    th, result = run_thread(producer)
    assert made.wait(TIMEOUT)
    assert clients.stats()["pending_ops"] >= 1
    out = (box["t"] * 2.0).numpy()
    used.set()
    assert joined(th, result), "the producer was never released"
    np.testing.assert_allclose(out, (np.exp(a) + 1) * 2, rtol=1e-5)


def test_many_threads_compute_correct_values():
    n_threads = 8
    barrier = threading.Barrier(n_threads, timeout=TIMEOUT)
    shared = clients.asarray(rand(777, seed=99))

    def work(seed):
        a = rand(777, seed=seed)
        barrier.wait()
        x = clients.asarray(a)
        results = []
        for i in range(20):
            y = clients.tanh(x * float(i) + shared) - x
            if i % 5 == 0:
                results.append((i, y.numpy()))
        return a, results

    threads = [run_thread(work, s) for s in range(n_threads)]
    s = rand(777, seed=99)
    for th, box in threads:
        a, results = joined(th, box)
        for i, got in results:
            np.testing.assert_allclose(got, np.tanh(a * np.float32(i) + s) - a, rtol=1e-5, atol=1e-6)


def test_reentry_from_under_the_lock_raises(client):
    original = client.server.register, client.server.register_run

    def register_calling_back(stream_id, op_or_queue, *before):
        clients.asarray([1.0])  # a fuser or launch function calling the client

    client.server.register = client.server.register_run = register_calling_back
    try:
        with pytest.raises(clients.ReentrancyError, match="under its own lock"):
            _kept = clients.asarray([1.0, 2.0]) + 1.0
            clients.flush()  # (the inbox channel registers here, the lock channel at the op)
    finally:
        # (the class's methods again: not copies of them shadowing later patches)
        del client.server.register, client.server.register_run
    assert (client.server.register, client.server.register_run) == original
    # The server stays usable.
    np.testing.assert_allclose((clients.asarray([1.0, 2.0]) * 2.0).numpy(), [2.0, 4.0])


def test_no_blocking_call_outside_the_wait_module():
    """Invariant 1, structurally: every device wait goes through runtime/waits.py."""
    root = pathlib.Path(__file__).resolve().parents[1]
    pattern = re.compile(r"\.wait\(\)|\.finish\(\)|is_blocking=True|\bcl\.wait_for_events\(")
    offenders = []
    for pkg in ("fusion_server", "clients"):
        for path in (root / pkg).rglob("*.py"):
            if path.name in ("waits.py", "demo.py"):  # demo.py: a program, its waits are its own
                continue
            for no, line in enumerate(path.read_text().splitlines(), 1):
                if pattern.search(line):
                    offenders.append(f"{path.relative_to(root)}:{no}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_read_while_another_thread_flushes_a_long_queue():
    """B reads its own small result while A's stream holds hundreds of queued ops."""
    a = rand(4096)
    x = clients.asarray(a)
    a_queued = threading.Event()
    b_done = threading.Event()

    def long_queue():
        t = x
        for i in range(600):  # many blocks' worth of ops, launched as blocks close
            t = t * 0.999 + (0.001 + i * 1e-7)  # (new scalars: no batch recurs and empties the stream)
            if i == 300:
                a_queued.set()
        assert b_done.wait(TIMEOUT)
        return t.numpy()

    th, box = run_thread(long_queue)
    assert a_queued.wait(TIMEOUT)
    server = clients.client_for().server

    def queued() -> int:
        s = server.streams.get(th.ident)
        return len(s.queue) if s else 0

    y = clients.asarray(rand(8, seed=3))
    np.testing.assert_allclose((y + 1.0).numpy(), rand(8, seed=3) + 1, rtol=1e-6)
    # B's read ran B's own work only: A's queue still holds what A has not closed yet.
    assert clients.client_for().call(lambda _: queued()) > 0
    b_done.set()
    got = joined(th, box)
    want = a.copy()
    for i in range(600):
        want = want * np.float32(0.999) + np.float32(0.001 + i * 1e-7)
    np.testing.assert_allclose(got, want, rtol=1e-4)


def test_tensor_made_in_one_thread_is_resolved_read_and_dropped_in_another(baseline):
    a = rand(300)
    made = threading.Event()
    box: dict = {}

    def producer():
        box["t"] = clients.tanh(clients.asarray(a)) * 2.0  # pending in this thread's stream
        made.set()

    th = threading.Thread(target=producer)
    th.start()
    assert made.wait(TIMEOUT)
    th.join(TIMEOUT)
    t = box.pop("t")
    arr = clients.resolve(t)
    np.testing.assert_allclose(arr.get(), np.tanh(a) * 2, rtol=1e-5)
    np.testing.assert_allclose((t + 1.0).numpy(), np.tanh(a) * 2 + 1, rtol=1e-5)
    del t, arr
    import gc

    gc.collect()
    clients.sync()
    assert clients.stats()["buffers_live"] == baseline


def test_only_the_streams_holding_needed_work_are_flushed():
    """Reading A's pending tensor runs A's queue; C's unrelated queue stays queued."""
    a_ready, c_ready, done = threading.Event(), threading.Event(), threading.Event()
    box: dict = {}
    data = rand(64)

    def make(key, ready, value):
        box[key] = clients.exp(clients.asarray(data) * value)  # queued, not run
        ready.set()
        return done.wait(TIMEOUT)

    ta, result_a = run_thread(make, "a", a_ready, 1.0)
    tc, result_c = run_thread(make, "c", c_ready, 2.0)
    assert a_ready.wait(TIMEOUT) and c_ready.wait(TIMEOUT)
    server = clients.client_for().server

    def queued(stream_owner: threading.Thread) -> int:
        """Its ops not yet run: in its stream, and still in its inbox (that channel)."""
        s = server.streams.get(stream_owner.ident)
        inbox = clients.client_for().queues.get(stream_owner.ident, ())
        return (len(s.queue) if s else 0) + sum(op is not None for _, op, *_ in inbox)

    assert clients.client_for().call(lambda _: (queued(ta), queued(tc))) == (2, 2)
    np.testing.assert_allclose(box["a"].numpy(), np.exp(data), rtol=1e-6)
    assert clients.client_for().call(lambda _: (queued(ta), queued(tc))) == (0, 2)
    done.set()
    assert joined(ta, result_a) and joined(tc, result_c)
    np.testing.assert_allclose(box["c"].numpy(), np.exp(data * 2), rtol=1e-6)


def test_a_read_keeps_the_threads_stream_and_an_ended_threads_stream_goes():
    client = clients.client_for()
    x = clients.asarray(rand(8, seed=5))
    me = threading.get_ident()
    np.testing.assert_allclose((x + 1.0).numpy(), rand(8, seed=5) + 1, rtol=1e-6)
    first = client.call(lambda server: server.streams.get(me))
    np.testing.assert_allclose((x * 2.0).numpy(), rand(8, seed=5) * 2, rtol=1e-6)
    assert first is not None and client.call(lambda server: server.streams.get(me)) is first  # not made again

    seen = {}

    def work():
        seen["id"] = threading.get_ident()
        seen["value"] = (x - 3.0).numpy()

    th = threading.Thread(target=work)
    th.start()
    th.join()
    # The thread's end mark has normally fired by now; where it has not, this does what it
    # does (a second notice of one ended stream is harmless). The next locked section drops it.
    client.call(lambda server: server.ended_streams.append(seen["id"]))
    assert not client.call(lambda server: seen["id"] in server.streams)
    np.testing.assert_allclose(seen["value"], rand(8, seed=5) - 3, rtol=1e-6)
