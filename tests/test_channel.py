"""The channel from threads to the server: ops recorded into the inbox without the lock,
registered in the order they were made by the next locked section of any thread.

What the inbox must keep: an op's inputs alive until it is registered, another thread's
view of a value still in the inbox, outputs whose handles die before registration, ops
a thread leaves behind when it ends, failures that stay with their op, interrupts.
"""

from __future__ import annotations

import gc
import sys
import threading

import numpy as np
import pytest

import clients
import clients.client as cc
import fusion_server.server as server_module
from fusion_server.ir import ElementwiseOp, TensorIr
from tests.conftest import rand, run_threads, settle

TIMEOUT = 60


def queued(client) -> int:
    """Ops the calling thread has recorded and not yet registered."""
    return len(client.queues.get(threading.get_ident(), ()))


def test_recording_stays_off_the_lock_until_a_batch(client, monkeypatch):
    monkeypatch.setattr(client, "channel", "inbox")
    settle()
    x = clients.asarray(rand(64))
    before = clients.stats()["ops_registered"]
    y = x
    for _ in range(cc.INBOX_BATCH - 2):
        y = y * 1.0001
    assert queued(client) == cc.INBOX_BATCH - 2  # recorded, not yet registered
    assert client.server.handles.entries.get(y._id) is None
    np.testing.assert_allclose(y.numpy(), rand(64) * np.float32(1.0001) ** (cc.INBOX_BATCH - 2), rtol=1e-4)
    assert queued(client) == 0
    assert clients.stats()["ops_registered"] - before == cc.INBOX_BATCH - 2


def test_views_are_recorded_with_the_ops_off_the_lock(client, monkeypatch, baseline):
    """A slice, a transpose, a new axis, an arange join the thread's queue as its ops do (a locked
    section each cost a slice five times an op), and take effect in order with them."""
    monkeypatch.setattr(client, "channel", "inbox")
    a = rand((8, 12))
    x = clients.asarray(a)
    settle()
    y = (x * 2.0)[1:, ::2].T[None]
    assert queued(client) == 4
    assert client.server.handles.entries.get(y._id) is None
    for _ in range(3):
        x[1:]  # noqa: B018 (dropped at once, in the inbox)
    r = clients.arange(12, dtype=clients.float32)  # (an iota: recorded as the others)
    assert queued(client) == 8
    np.testing.assert_array_equal(r.numpy(), np.arange(12, dtype=np.float32))
    np.testing.assert_allclose(y.numpy(), (a * 2)[1:, ::2].T[None], rtol=1e-6)
    assert queued(client) == 0
    del x, y, r
    settle()
    assert clients.stats()["buffers_live"] == baseline and clients.stats()["pending_ops"] == 0


@pytest.mark.timeout(TIMEOUT)
def test_pending_ops_counts_another_threads_queued_ops_but_not_its_views(client, monkeypatch):
    monkeypatch.setattr(client, "channel", "inbox")
    x = clients.asarray(rand(40))
    settle()
    made, release = threading.Event(), threading.Event()
    box: dict = {}

    def producer():
        box["y"] = clients.sin(x) + 1.0
        box["view"] = box["y"][::2].reshape(4, 5)
        made.set()
        release.wait(TIMEOUT)

    t = threading.Thread(target=producer)
    t.start()
    try:
        assert made.wait(TIMEOUT)
        assert clients.stats()["pending_ops"] == 2  # sin and add; the two views run nothing
    finally:
        release.set()
        t.join(TIMEOUT)
    np.testing.assert_allclose(box["view"].numpy(), (np.sin(rand(40)) + 1)[::2].reshape(4, 5), rtol=1e-5)


def test_an_input_dropped_before_its_reader_is_registered_stays_alive(channel, baseline):
    a = rand(100)
    x = clients.asarray(a)
    y = clients.exp(x) * 2.0
    del x  # only the recorded op still holds x
    gc.collect()
    np.testing.assert_allclose(y.numpy(), np.exp(a) * 2, rtol=1e-5)
    del y
    settle()
    assert clients.stats()["buffers_live"] == baseline


def test_outputs_dropped_before_registration_are_never_written(channel, baseline):
    x = clients.asarray(rand(1 << 14))
    settle()
    before = clients.stats()
    for _ in range(10):
        x * 2.0 + 1.0  # dropped at once, while still in the inbox
    gc.collect()
    keep = x * 3.0
    keep.numpy()
    after = clients.stats()
    assert after["buffers_live"] - before["buffers_live"] == 1  # `keep` alone
    del keep, x
    settle()
    assert clients.stats()["buffers_live"] == baseline


def test_a_repeated_reduction_dropped_before_registration_frees_its_value(channel, baseline):
    """A reduction repeated over an unchanged input takes the first result's storage when
    it is registered; dropped while still in the inbox, it lets that storage go again."""
    a = rand((8, 64))
    x = clients.asarray(a)
    keep = clients.sum(x, axis=1)
    np.testing.assert_allclose(keep.numpy(), a.sum(axis=1), rtol=1e-5)
    for _ in range(3):
        clients.sum(x, axis=1)  # the same reduction, dropped at once
    gc.collect()
    # Another thread's locked section applies the drops while the ops are still queued.
    other = threading.Thread(target=lambda: clients.client_for().call(lambda server: None))
    other.start()
    other.join(TIMEOUT)
    np.testing.assert_allclose(keep.numpy(), a.sum(axis=1), rtol=1e-5)
    del keep, x
    settle()
    assert clients.stats()["buffers_live"] == baseline


@pytest.mark.timeout(TIMEOUT)
def test_another_thread_uses_a_value_still_in_the_inbox(channel):
    a = rand(50)
    x = clients.asarray(a)
    made = threading.Event()
    box: dict = {}

    def producer():
        box["y"] = clients.sin(x) + 1.0  # recorded by this thread, not registered
        box["view"] = box["y"][::-2]
        box["queued"] = queued(clients.client_for())
        made.set()

    t = threading.Thread(target=producer)
    t.start()
    made.wait(TIMEOUT)
    t.join(TIMEOUT)
    if channel == "inbox":
        assert box["queued"] >= 3
    z = box["y"] * 3.0  # this thread's op reads the other's value: registered after it
    np.testing.assert_allclose(z.numpy(), (np.sin(a) + 1) * 3, rtol=1e-5)
    np.testing.assert_allclose(box["view"][1:].numpy(), (np.sin(a) + 1)[::-2][1:], rtol=1e-5)


_twice_plus_one = clients.custom.elementwise("twice_plus_one", "x * 2.0f + 1.0f")


@pytest.mark.timeout(TIMEOUT)
def test_an_op_registered_at_once_reads_a_value_still_in_another_inbox(channel):
    """Custom ops (and others that register at once) reading another thread's value that
    is still in its inbox: that thread's ops are registered first (the stress run found a
    DroppedTensorError here once the inbox was the default)."""
    a = rand(50)
    x = clients.asarray(a)
    made, done = threading.Event(), threading.Event()
    box: dict = {}

    def producer():
        box["y"] = clients.sin(x) + 1.0  # recorded by this thread, not registered
        made.set()
        done.wait(TIMEOUT)  # alive meanwhile: its queue is not an ended thread's

    t = threading.Thread(target=producer)
    t.start()
    try:
        assert made.wait(TIMEOUT)
        got = _twice_plus_one(box["y"]).numpy()
    finally:
        done.set()
        t.join(TIMEOUT)
    np.testing.assert_allclose(got, (np.sin(a) + 1) * 2 + 1, rtol=1e-5)


@pytest.mark.timeout(TIMEOUT)
def test_an_op_on_an_unknown_tensor_leaves_other_threads_queues_alone(client, monkeypatch):
    """An id no queue makes (its op cut by an interrupt before it was queued, or a bad
    handle) fails the op that reads it; other threads' queued ops stay queued, since
    registering them runs their blocks here, where an interrupt would fail their work."""
    monkeypatch.setattr(client, "channel", "inbox")
    a = rand(64)
    made, done = threading.Event(), threading.Event()
    box: dict = {}

    def recorder():
        box["y"] = clients.tanh(clients.asarray(a)) * 2.0  # queued in this thread's inbox
        box["queued"] = queued(client)
        made.set()
        done.wait(TIMEOUT)
        box["still"] = queued(client)

    th = threading.Thread(target=recorder)
    th.start()
    assert made.wait(TIMEOUT) and box["queued"] >= 2
    ghost = clients.Tensor._make(client, 10**10, (64,), np.dtype(np.float32))
    bad = clients.asarray(a) + ghost
    with pytest.raises(clients.TensorFailedError, match="unknown to this device"):
        bad.numpy()
    done.set()
    th.join(TIMEOUT)
    assert box["still"] == box["queued"]
    np.testing.assert_allclose(box["y"].numpy(), np.tanh(a) * 2, rtol=1e-5)  # run once it ended


@pytest.mark.timeout(TIMEOUT)
def test_ops_a_thread_leaves_in_the_inbox_run_after_it_ends(channel, baseline):
    box: dict = {}

    def worker():
        t = clients.asarray(rand(300, seed=3))
        for _ in range(5):
            t = clients.tanh(t) * 0.5
        box["t"] = t

    th = threading.Thread(target=worker)
    th.start()
    th.join(TIMEOUT)
    want = rand(300, seed=3)
    for _ in range(5):
        want = np.tanh(want) * np.float32(0.5)
    np.testing.assert_allclose(box.pop("t").numpy(), want, rtol=1e-5)
    settle()
    assert clients.stats()["buffers_live"] == baseline
    assert clients.stats()["pending_ops"] == 0


def test_an_op_the_server_refuses_fails_its_own_outputs_only(client, monkeypatch):
    monkeypatch.setattr(client, "channel", "inbox")
    x = clients.asarray(rand(8))
    ok = x * 2.0
    bogus_out = TensorIr(10**15, (8,), np.dtype(np.float32))
    bad = clients.Tensor._make(client, bogus_out.id, (8,), np.dtype(np.float32))
    # An op that reads a tensor the server never heard of (a bug this test stands in for).
    client.record(ElementwiseOp("exp", (10**15 + 1,), np.dtype(np.float32), bogus_out))
    after = ok + 1.0
    np.testing.assert_allclose(after.numpy(), rand(8) * 2 + 1, rtol=1e-6)
    with pytest.raises(clients.TensorFailedError, match="could not be queued"):
        bad.numpy()


def test_an_interrupt_while_registering_the_inbox_resumes_it(client, monkeypatch):
    monkeypatch.setattr(client, "channel", "inbox")
    a = rand(40)
    x = clients.asarray(a)
    y = clients.exp(x) * 2.0
    z = y + 1.0
    real = server_module.pending_entry
    calls = {"n": 0}

    def interrupted(ir, nbytes, stream_id):  # (after the op's reads are counted)
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(ir, nbytes, stream_id)

    monkeypatch.setattr(server_module, "pending_entry", interrupted)
    with pytest.raises(KeyboardInterrupt):
        clients.flush()
    monkeypatch.setattr(server_module, "pending_entry", real)
    assert not client.holds_lock()
    # The op the interrupt hit and the ones after it are registered by the next locked section.
    np.testing.assert_allclose(z.numpy(), np.exp(a) * 2 + 1, rtol=1e-5)
    np.testing.assert_allclose(y.numpy(), np.exp(a) * 2, rtol=1e-5)


@pytest.mark.timeout(TIMEOUT)
def test_a_full_batch_never_waits_for_a_lock_another_thread_holds(client, monkeypatch, baseline):
    """While another thread is inside a locked section, a recording thread whose queue
    passes a batch records on (no wait: the section ends only once it has), and its next
    locked section registers the whole queue in order."""
    monkeypatch.setattr(client, "channel", "inbox")
    settle()
    entered, done = threading.Event(), threading.Event()
    held = {}

    def hold(server):
        entered.set()
        held["released_in_time"] = done.wait(TIMEOUT / 2)

    x = clients.asarray(np.zeros(64, np.float32))  # (an upload takes the lock: first)
    holder = threading.Thread(target=client.call, args=(hold,))
    holder.start()
    try:
        assert entered.wait(TIMEOUT / 2)
        steps = 3 * client.batch_ops
        y = x
        for _ in range(steps):
            y = y + 1.0
        assert queued(client) == steps  # all of it recorded, none registered yet
    finally:
        done.set()
        holder.join(TIMEOUT / 2)
    assert held["released_in_time"], "the recording thread waited for the lock"
    np.testing.assert_array_equal(y.numpy(), np.full(64, steps, np.float32))
    del x, y
    settle()
    assert clients.stats()["buffers_live"] == baseline and clients.stats()["pending_ops"] == 0


def test_a_batch_call_that_finds_the_lock_taken_tries_again_some_ops_later(client, monkeypatch, baseline):
    """A lock that looks free may be another thread's already (handed to a thread blocked
    on it, which marks it taken once it has the GIL back): a failed batch call is tried
    again BATCH_RETRY ops later, not at every op; once the queue was registered, the next
    batch is tried at its size again."""
    monkeypatch.setattr(client, "channel", "inbox")
    settle()
    real = client._lock_if_free
    tries = []

    class Watched:  # (counts the tries; fails them, as for a lock the OS handed on, while `taken`)
        taken = True

        def __enter__(self):
            tries.append(queued(client))
            return False if self.taken else real.__enter__()

        def __exit__(self, *exc):
            return False

    watched = Watched()
    x = clients.asarray(np.zeros(64, np.float32))
    y = x + 1.0  # (the thread's first op sizes its batches)
    batch = client.batch_ops
    monkeypatch.setattr(client, "_lock_if_free", watched)
    for _ in range(batch + 2 * cc.BATCH_RETRY + 2):
        y = y + 1.0
    assert tries == [batch, batch + cc.BATCH_RETRY, batch + 2 * cc.BATCH_RETRY]
    watched.taken = False
    for _ in range(cc.BATCH_RETRY - 3):  # (the next try: the lock is free, the batches go)
        y = y + 1.0
    assert tries[3] == batch + 3 * cc.BATCH_RETRY  # (then again after a kernel build, if one was needed)
    left = queued(client)
    assert left < batch  # (registered from where the stream's blocks end: see _run_batches)
    del tries[:]
    for _ in range(batch - left):
        y = y + 1.0
    assert tries[:1] == [batch]  # (at the batch's size, not where the failed try put the next)
    steps = 2 * batch + 3 * cc.BATCH_RETRY - left
    np.testing.assert_array_equal(y.numpy(), np.full(64, steps, np.float32))
    del x, y
    settle()
    assert clients.stats()["buffers_live"] == baseline and clients.stats()["pending_ops"] == 0


def test_an_interrupt_inside_the_batch_call_gives_the_lock_back_and_keeps_the_batch(client, monkeypatch, baseline):
    monkeypatch.setattr(client, "channel", "inbox")
    settle()
    x = clients.asarray(rand(32))
    y = x * 1.0  # (the thread's queue exists: its batch size is set)
    batch = client.batch_ops
    real = cc.FusionClient._run_batches
    cuts = []

    def interrupted(self, stream_id):
        cuts.append(len(self.queues[stream_id]))
        raise KeyboardInterrupt

    monkeypatch.setattr(cc.FusionClient, "_run_batches", interrupted)
    made = 1
    with pytest.raises(KeyboardInterrupt):
        for _ in range(2 * batch):
            y = y * 1.0001
            made += 1
    monkeypatch.setattr(cc.FusionClient, "_run_batches", real)
    assert cuts == [batch] and made == batch - 1  # (the batch's last op is queued; its handle never bound)
    assert not client.holds_lock() and not client._lock.locked()
    assert queued(client) == batch  # the batch stays queued, in order
    np.testing.assert_allclose(y.numpy(), rand(32) * np.float32(1.0001) ** (made - 1), rtol=1e-4)
    del x, y
    settle()
    assert clients.stats()["buffers_live"] == baseline and clients.stats()["pending_ops"] == 0


def _cut_at_line_event(codes: tuple, cut_at: int, body) -> bool:
    """Run `body` under a tracer (as a debugger's or coverage's) that raises
    KeyboardInterrupt at line event `cut_at` (from 0) of the frames running `codes`;
    whether it did. The previous tracer is put back."""
    seen = 0

    def local(frame, event, arg):
        nonlocal seen
        if event == "line":
            seen += 1
            if seen == cut_at + 1:
                raise KeyboardInterrupt
        return local

    def tracer(frame, event, arg):
        return local if frame.f_code in codes else None

    before = sys.gettrace()
    sys.settrace(tracer)
    try:
        body()
    except KeyboardInterrupt:
        return True
    finally:
        sys.settrace(before)
    return False


def test_a_tracer_interrupting_the_batch_call_at_any_line_leaves_the_lock_free(client, monkeypatch, baseline):
    """A debugger's or coverage's tracer runs Python code at every line event, where a
    pending KeyboardInterrupt is raised: at each line of the batch call and its section
    in turn, the lock is given back and the values stay right."""
    monkeypatch.setattr(client, "channel", "inbox")
    settle()
    codes = tuple(getattr(cc.FusionClient, name).__code__ for name in ("_batch_if_free", "_batch", "_section"))
    cut_at = 0
    while True:
        x = clients.asarray(rand(32, seed=cut_at))
        y = x * 1.0  # (the thread's queue exists: its batch size is set)
        made = 1

        def record():
            nonlocal y, made
            for _ in range(2 * client.batch_ops):
                y = y * 1.0001
                made += 1

        cut = _cut_at_line_event(codes, cut_at, record)
        assert not client._lock.locked() and not client.holds_lock(), f"held after a cut at line event {cut_at}"
        np.testing.assert_allclose(y.numpy(), rand(32, seed=cut_at) * np.float32(1.0001) ** (made - 1), rtol=1e-4)
        if not cut:
            break  # (past the last line event)
        cut_at += 1
    assert cut_at > 3  # (the batch call has that many lines)
    del x, y
    settle()
    assert clients.stats()["buffers_live"] == baseline and clients.stats()["pending_ops"] == 0


def test_a_tracer_interrupting_a_locked_section_at_any_line_leaves_the_lock_free(client):
    """As above, for `call`'s sections (the same body, `_section`)."""
    codes = (cc.FusionClient.call.__code__, cc.FusionClient._section.__code__)
    seen = []
    cut_at = 0
    while True:
        cut = _cut_at_line_event(codes, cut_at, lambda k=cut_at: client.call(lambda server: seen.append(k)))
        assert not client._lock.locked() and not client.holds_lock(), f"held after a cut at line event {cut_at}"
        if not cut:
            break
        cut_at += 1
    assert cut_at > 3 and seen[-1] == cut_at  # (the last call ran whole)
    np.testing.assert_allclose((clients.asarray(rand(8)) + 1.0).numpy(), rand(8) + 1, rtol=1e-6)


def test_the_batch_calls_lock_is_taken_by_c_code_alone(client):
    """The batch call's `with` takes and gives back the lock by C code alone (the lock's
    own `acquire(False)` and `__exit__`), and only a lock it took."""
    import functools
    import inspect

    enter = inspect.getattr_static(type(client._lock_if_free), "__enter__")
    assert isinstance(enter, staticmethod)
    assert isinstance(enter.__func__, functools.partial) and enter.__func__.args == (False,)
    assert inspect.isbuiltin(enter.__func__.func) and enter.__func__.func.__self__ is client._lock
    release = inspect.getattr_static(type(client._lock_held), "__exit__")
    assert isinstance(release, staticmethod) and inspect.isbuiltin(release.__func__)
    assert release.__func__.__self__ is client._lock
    with client._lock_if_free as got, (client._lock_held if got else cc.NOT_HELD):
        assert got and client._lock.locked()
    assert not client._lock.locked()
    with client._lock:
        with client._lock_if_free as got, (client._lock_held if got else cc.NOT_HELD):
            assert got is False
        assert client._lock.locked()  # (not given back by a block that did not take it)
    assert not client._lock.locked()


@pytest.mark.timeout(TIMEOUT)
def test_eight_threads_recording_at_once_get_right_values(channel):
    def work(seed):
        a = rand(256, seed=seed)
        t = clients.asarray(a)
        want = a
        for _ in range(300):
            t = t * 1.001 + 0.01 * seed
            want = want * np.float32(1.001) + np.float32(0.01 * seed)
        return [] if np.allclose(t.numpy(), want, rtol=1e-4, atol=1e-4) else [f"thread {seed}"]

    errors = run_threads(work, 8, TIMEOUT)
    assert not errors, errors


def test_a_bad_channel_setting_raises(monkeypatch):
    monkeypatch.setenv("FUSION_CHANNEL", "pigeon")
    from clients.client import FusionClient

    with pytest.raises(clients.FusionError, match="FUSION_CHANNEL='pigeon'"):
        FusionClient(clients.client_for().server)


def test_a_queued_op_keeps_few_objects_for_the_cyclic_collector(client, monkeypatch):
    """Threads recording at once keep thousands of ops queued; each object an op makes that
    the collector tracks is promoted with them and walked by full collections (on a 2-core
    Zen 4, the collector cost 8 threads 0.9 us per op against 0.27 for one thread). A
    queued `y * c` holds its handle, the handle's drop ref, its op, the op's output and
    operands, and its queue entry, which holds the handles it reads: 6 objects, all handles
    sharing one drop callback."""
    monkeypatch.setattr(client, "channel", "inbox")
    x = clients.asarray(rand(64))
    y = x * 1.0001
    y.numpy()
    ops = cc.LONE_BATCH // 2  # (all stay queued)
    gc.collect()
    gc.disable()
    try:
        before = len(gc.get_objects())
        y = x
        for _ in range(ops):
            y = y * 1.0001
        made = len(gc.get_objects()) - before
        assert queued(client) == ops
    finally:
        gc.enable()
    assert made <= 6 * ops + 8, f"{made / ops:.2f} tracked objects per queued op"
    refs = client.server.handle_refs
    assert refs[y._id].__callback__ is refs[x._id].__callback__ is client.drop_callback
    np.testing.assert_allclose(y.numpy(), rand(64) * np.float32(1.0001) ** ops, rtol=1e-4)
