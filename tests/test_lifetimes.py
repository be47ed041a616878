"""Buffers live exactly as long as needed (invariant 4); drops never take the lock (2)."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import clients
from tests.conftest import rand, settle


def test_buffers_return_to_baseline_after_drops(baseline):
    xs = [clients.asarray(rand(1000, seed=i)) for i in range(5)]
    ys = [clients.exp(x) * 2.0 for x in xs]
    for y in ys:
        y.numpy()
    assert clients.stats()["buffers_live"] >= baseline + 10
    del xs, ys, y
    settle()
    assert clients.stats()["buffers_live"] == baseline


def test_input_dropped_before_its_reader_runs_stays_valid(baseline):
    a = rand(500)
    x = clients.asarray(a)
    y = clients.sqrt(clients.abs(x)) + 1.0  # queued, not run
    del x
    gc.collect()
    np.testing.assert_allclose(y.numpy(), np.sqrt(np.abs(a)) + 1, rtol=1e-6)
    del y
    settle()
    assert clients.stats()["buffers_live"] == baseline


@pytest.mark.parametrize("make", [
    lambda x: (x * 0.5).T.T + x,  # views of a value still to be written, dropped before it is
    lambda x: clients.reshape(x * 2.0, (-1,)),  # the result itself a view of such a value
    lambda x: (x + 1.0)[1:] * 2.0,
    lambda x: clients.reshape(x * 2.0, (-1,)) + 1.0,  # a flat alias read in the same block
])
def test_views_of_values_still_to_be_written_are_released(baseline, make):
    x = clients.asarray(rand((8, 64)))
    y = make(x)
    y.numpy()
    del y
    z = make(x)  # dropped unread
    del z, x
    settle()
    assert clients.stats()["buffers_live"] == baseline


def test_freed_buffers_are_reused():
    x = clients.asarray(rand(4096))
    (x + 1.0).numpy()
    settle()
    before = clients.stats()
    for _ in range(20):
        (x * 2.0 + 1.0).numpy()
    after = clients.stats()
    assert after["buffers_allocated"] == before["buffers_allocated"]
    assert after["buffer_reuses"] >= before["buffer_reuses"] + 20


def test_tensors_dropped_from_another_thread(baseline):
    made = [clients.asarray(rand(100, seed=i)) * 3.0 for i in range(20)]
    for t in made:
        t.numpy()
    box = {"tensors": made}
    del made, t
    barrier = threading.Barrier(2, timeout=30)

    def dropper():
        barrier.wait()
        box.clear()  # the last references go away on this thread

    th = threading.Thread(target=dropper)
    th.start()
    barrier.wait()
    th.join(30)
    assert not th.is_alive()
    settle()
    assert clients.stats()["buffers_live"] == baseline


class _Cycle:
    """Garbage only the cycle collector can free: its tensor dies in a `gc` pass."""

    def __init__(self, tensor):
        self.tensor = tensor
        self.me = self


def test_garbage_collected_inside_a_locked_section(client, baseline):
    for i in range(10):
        _Cycle(clients.asarray(rand(64, seed=i)) + 1.0)
    collected = []
    inside = []

    def with_gc(original):
        def registering(stream_id, op_or_queue, *before):
            # The collector runs while this thread holds the server lock: the __del__ of
            # the cycles' tensors must not try to take it.
            inside.append(client.holds_lock())
            collected.append(gc.collect())
            return original(stream_id, op_or_queue, *before)
        return registering

    # (the last cycle's op is registered by the next locked section: asarray's upload)
    client.server.register = with_gc(client.server.register)
    client.server.register_run = with_gc(client.server.register_run)
    try:
        y = clients.asarray(rand(64)) * 2.0
    finally:
        del client.server.register, client.server.register_run
    assert inside and all(inside) and collected[0] > 0
    np.testing.assert_allclose(y.numpy(), rand(64) * 2, rtol=1e-6)
    del y
    settle()
    assert clients.stats()["buffers_live"] == baseline


@pytest.mark.parametrize("drain_after", [False, True])
def test_a_locked_section_applies_drops_before_or_after_its_work(client, baseline, drain_after):
    x = clients.asarray(rand(256))
    x.numpy()
    del x  # its drop waits in the inbox for the next locked section
    assert client.drops
    pending = client.call(lambda server: len(server.drops), drain_after=drain_after)
    assert (pending > 0) == drain_after  # (a jitted call enqueues first, then releases)
    assert not client.drops
    settle()
    assert clients.stats()["buffers_live"] == baseline


def test_long_mixed_run_does_not_leak(baseline):
    rng = np.random.default_rng(7)
    keep = []
    for step in range(300):
        a = clients.asarray(rng.standard_normal(int(rng.integers(1, 300))).astype(np.float32))
        b = clients.tanh(a) * float(step) + a
        if step % 3 == 0:
            keep.append(b)
        if step % 7 == 0:
            b.numpy()
        if len(keep) > 10:
            keep.pop(0)
    del a, b, keep
    settle()
    assert clients.stats()["buffers_live"] == baseline
    assert clients.stats()["pending_ops"] == 0


def test_work_left_by_an_ended_thread_is_released(baseline):
    def leave_work_behind():
        x = clients.asarray(rand(100))
        y = clients.exp(x) * 2.0  # queued in this thread's stream, never read
        del x, y

    for _ in range(3):
        th = threading.Thread(target=leave_work_behind)
        th.start()
        th.join(30)
    settle()
    stats = clients.stats()
    assert stats["pending_ops"] == 0
    assert stats["buffers_live"] == baseline


def test_host_memory_stays_bounded_in_a_steady_loop():
    import tracemalloc

    a = rand((16, 64))
    x = clients.asarray(a)

    def step(i):
        y = clients.tanh(x * float(i % 7)) + x.T.reshape(16, 64) * 0.5
        if i % 10 == 0:
            y.numpy()

    for i in range(300):  # warm: kernels built, caches filled
        step(i)
    settle()
    tracemalloc.start()
    try:
        first = tracemalloc.take_snapshot()
        for i in range(1500):
            step(i)
        settle()
        growth = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(first, "filename"))
    finally:
        tracemalloc.stop()
    assert growth < 256 * 1024, f"host memory grew by {growth} bytes over 1500 steady iterations"
    assert clients.stats()["pending_ops"] == 0
