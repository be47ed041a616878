"""The run cache: a thread's recurring runs of ops, replayed as captures (fusion_server/runs.py)."""

from __future__ import annotations

import gc
import threading
from contextlib import contextmanager
from functools import partial

import numpy as np
import pytest

import clients
from clients import client as client_module
from clients.client import INBOX_BATCH, LONE_BATCH
from fusion_server import runs
from fusion_server.errors import TensorFailedError
from fusion_server.ir import Scalar, scalar
from tests._values import box_blur
from tests.conftest import counted_since, counters, exploding_kernel, rand, run_python, server_settings, settle


@pytest.fixture(autouse=True)
def fresh_cache():
    """An empty run cache (reconfiguring empties it): the counts below start from nothing."""
    with server_settings(run_cache_enabled=True):
        yield


@pytest.fixture
def one_block_batches(client, monkeypatch):
    """A thread recording alone batches INBOX_BATCH ops, one block of the element-wise
    fuser (max_ops), as threads do when several record: the tests that use it follow a
    batch to a block's edge."""
    monkeypatch.setattr(client_module, "LONE_BATCH", INBOX_BATCH)
    client._size_batches()
    yield
    monkeypatch.undo()
    client._size_batches()


def counts() -> dict:
    return counters(("run_captures", "run_replays", "kernels_launched", "inplace_reuses", "plan_hits", "explorations"))


def delta(before: dict) -> dict:
    return counted_since(before)


def chain(a, b, c, ns):
    return ns.tanh(a * b + c) * 0.5 + ns.exp(-abs(a)) * ns.sqrt(b * b + 1) - c / (1 + a * a)


def recurring(fn, times: int = 4):
    """`fn()` read `times` times; the deltas of the counters at each read."""
    deltas, values = [], []
    for _ in range(times):
        before = counts()
        values.append(fn())
        deltas.append(delta(before))
    return deltas, values


def assert_recurs_as_one_kernel(read, want: np.ndarray, explained: str = "replayed from the run cache") -> None:
    """`read()` four times: noted, captured, then replayed twice, each time one kernel and
    no op through a stream; once more under inspect(), whose explanation names the replay."""
    deltas, values = recurring(read)
    for got in values:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert [d["run_captures"] for d in deltas] == [0, 1, 0, 0]
    assert [d["run_replays"] for d in deltas] == [0, 0, 1, 1]
    assert all(d["kernels_launched"] == 1 for d in deltas)
    for d in deltas[2:]:
        assert d["plan_hits"] == d["explorations"] == 0  # (no op reached a stream)
    with clients.inspect() as rec:
        got = read()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert len(rec.kernels) == 1
    assert explained in rec.explain()


def test_a_recurring_run_is_noted_then_captured_then_replayed_as_one_kernel():
    a, b, c = (rand(1000, seed=s) for s in range(3))
    ta, tb, tc = (clients.asarray(v) for v in (a, b, c))
    assert_recurs_as_one_kernel(lambda: chain(ta, tb, tc, clients).numpy(), chain(a, b, c, np),
                                "replayed from the run cache: a recurring run of 16 ops")


def test_new_inputs_and_new_scalar_values_give_their_own_values():
    x = clients.asarray(rand(256))
    for k in range(6):
        host = rand(256, seed=k)
        t = clients.asarray(host)
        s = 0.25 * k  # a new scalar each time: a new key, never the last capture's value
        np.testing.assert_allclose((t * s + x * 2.0).numpy(), host * np.float32(s) + x.numpy() * 2, rtol=1e-6)
    before = counts()
    for k in range(4):  # new tensors, the same scalar: replayed from the third on
        host = rand(256, seed=10 + k)
        np.testing.assert_allclose((clients.asarray(host) * 3.0 + 1.0).numpy(), host * 3 + 1, rtol=1e-6)
    assert delta(before)["run_replays"] == 2


def test_other_shapes_and_layouts_are_other_runs():
    before = counts()
    for shape in [(64,), (32, 2), (64,), (32, 2), (64,), (32, 2), (2, 32)]:
        host = rand(shape, seed=len(shape))
        np.testing.assert_allclose(clients.exp(clients.asarray(host) - 1.0).numpy(), np.exp(host - 1), rtol=1e-6)
    assert delta(before)["run_replays"] == 2
    base = rand((8, 8))
    t = clients.asarray(base)
    for view, want in [(t, base), (t.T, base.T), (t, base), (t.T, base.T), (t, base), (t.T, base.T)]:
        np.testing.assert_allclose((view * 2.0).numpy(), want * 2, rtol=1e-6)


def test_a_value_kept_by_the_user_is_written_by_the_replay():
    a = rand(512)
    x = clients.asarray(a)
    for _ in range(3):
        (clients.sin(x) * 2.0 + 1.0).numpy()  # the intermediate dies: not written
    before = counts()
    for _ in range(4):
        s = clients.sin(x) * 2.0  # now held: the capture of this liveness writes it
        y = s + 1.0
        np.testing.assert_allclose(y.numpy(), np.sin(a) * 2 + 1, rtol=1e-6)
        np.testing.assert_allclose(s.numpy(), np.sin(a) * 2, rtol=1e-6)
    d = delta(before)
    assert d["run_captures"] == 1 and d["run_replays"] == 2


def test_a_loop_takes_over_the_dead_input_in_place_and_keeps_a_held_one(baseline):
    a = rand(4096)
    x = clients.asarray(a)
    want = a
    before = counts()
    for _ in range(6):
        x = x * 2.0 + 1.0  # the old x dies: its buffer becomes the new x's
        want = want * np.float32(2) + np.float32(1)
        np.testing.assert_allclose(x.numpy(), want, rtol=1e-6)
    d = delta(before)
    assert d["run_replays"] == 4 and d["inplace_reuses"] == 6
    for _ in range(4):  # the old value held by another name: not taken over
        old, old_values = x, x.numpy()
        x = x * 2.0 + 1.0
        want = want * np.float32(2) + np.float32(1)
        np.testing.assert_allclose(x.numpy(), want, rtol=1e-6)
        np.testing.assert_array_equal(old.numpy(), old_values)
    for _ in range(4):  # a view of the old value keeps its buffer too
        view, view_values = x[1:], x.numpy()[1:]
        x = x * 2.0 + 1.0
        want = want * np.float32(2) + np.float32(1)
        np.testing.assert_allclose(x.numpy(), want, rtol=1e-6)
        np.testing.assert_array_equal(view.numpy(), view_values)
    del x, old, view
    settle()
    assert clients.stats()["buffers_live"] == baseline


@pytest.mark.parametrize("case", ["row sum", "full sum", "matmul epilogue", "mean and max"])
def test_reductions_and_matmul_replay(case):
    a, b = rand((64, 48), seed=1), rand((48, 32), seed=2)
    ta, tb = clients.asarray(a), clients.asarray(b)
    fns = {
        "row sum": (lambda ns: ns.sum(ns.exp(ta * 0.5) * ta, axis=-1),
                    lambda: np.sum(np.exp(a * 0.5) * a, axis=-1)),
        "full sum": (lambda ns: ns.sum(ta * ta) * 0.5, lambda: np.sum(a * a) * 0.5),
        "matmul epilogue": (lambda ns: ns.maximum(ta @ tb + 1.0, 0.0), lambda: np.maximum(a @ b + 1, 0)),
        "mean and max": (lambda ns: ns.mean(ta, axis=0) - ns.max(ta, axis=0), lambda: a.mean(0) - a.max(0)),
    }
    fn, reference = fns[case]
    deltas, values = recurring(lambda: fn(clients).numpy(), times=5)
    for got in values:
        np.testing.assert_allclose(got, reference(), rtol=1e-4, atol=1e-4)
    assert [d["run_replays"] for d in deltas] == [0, 0, 1, 1, 1]
    assert deltas[2]["kernels_launched"] == deltas[1]["kernels_launched"] >= 1


def test_sync_and_flush_end_a_run_and_a_read_of_an_older_tensor_does_not():
    x = clients.asarray(rand(128))
    before = counts()
    for _ in range(3):
        y = x * 3.0 - 1.0
        clients.sync()
    for _ in range(3):
        z = x * 5.0 - 1.0
        clients.flush()
    assert delta(before)["run_replays"] == 2
    np.testing.assert_allclose(y.numpy(), x.numpy() * 3 - 1, rtol=1e-6)
    np.testing.assert_allclose(z.numpy(), x.numpy() * 5 - 1, rtol=1e-6)
    older = clients.asarray(rand(128, seed=4))
    for _ in range(3):
        with clients.inspect() as rec:
            y = x * 2.0
            older.numpy()  # reads something else: the queue stays for what follows
            w = y + 1.0
            got = w.numpy()
        np.testing.assert_allclose(got, x.numpy() * 2 + 1, rtol=1e-6)
        assert len([k for k in rec.kernels if k.kind == "elementwise"]) == 1


def test_threads_replay_one_run_with_their_own_inputs():
    n = 8
    barrier = threading.Barrier(n)
    errors = []

    def work(i: int) -> None:
        try:
            host = rand(300, seed=i)
            t = clients.asarray(host)
            barrier.wait()
            for _ in range(20):
                got = (clients.exp(t * 0.5) + t).numpy()
                np.testing.assert_allclose(got, np.exp(host * 0.5) + host, rtol=1e-5, atol=1e-6)
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(f"thread {i}: {exc!r}")

    before = counts()
    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not errors, errors
    assert delta(before)["run_replays"] > 0


def test_a_settings_change_captures_again():
    x = clients.asarray(rand(64))
    for _ in range(3):
        (x * 4.0).numpy()
    with server_settings(max_ops=16):
        before = counts()
        for _ in range(3):
            np.testing.assert_allclose((x * 4.0).numpy(), x.numpy() * 4, rtol=1e-6)
        d = delta(before)
    assert d["run_captures"] == 1 and d["run_replays"] == 1


def test_a_failed_input_fails_each_run_and_later_runs_go_on():
    boom = exploding_kernel("run_cache_boom")
    x = clients.asarray(rand(32))
    bad = boom(x)
    for _ in range(4):
        with pytest.raises(TensorFailedError, match="producer exploded"):
            (bad * 2.0 + 1.0).numpy()
    for _ in range(3):
        np.testing.assert_allclose((x * 2.0 + 1.0).numpy(), x.numpy() * 2 + 1, rtol=1e-6)


def test_many_replays_leave_buffers_and_tensors_at_baseline(baseline):
    a, b, c = (rand(1024, seed=s) for s in range(3))
    ta, tb, tc = (clients.asarray(v) for v in (a, b, c))
    settle()
    tensors = clients.stats()["tensors_live"]
    before = counts()
    for _ in range(200):
        chain(ta, tb, tc, clients).numpy()
    assert delta(before)["run_replays"] >= 198
    settle()
    s = clients.stats()
    assert s["buffers_live"] == baseline + 3  # the inputs'
    assert s["tensors_live"] == tensors


def test_a_misjudged_handle_fails_its_tensor_with_a_clear_error(monkeypatch):
    x = clients.asarray(rand(64))
    for _ in range(2):
        (x * 7.0 + 2.0).numpy()
    monkeypatch.setattr(runs, "_BASE", 1 << 30)  # every handle taken for dead
    with server_settings(run_cache_enabled=True):  # (a fresh cache)
        for _ in range(2):
            (x * 7.0 + 2.0).numpy()
        with pytest.raises(TensorFailedError, match="taken for dead by the run cache"):
            (x * 7.0 + 2.0).numpy()
    monkeypatch.undo()
    np.testing.assert_allclose((x * 7.0 + 2.0).numpy(), x.numpy() * 7 + 2, rtol=1e-6)
    gc.collect()


def test_the_run_cache_can_be_turned_off():
    code = (
        "import numpy as np, clients\n"
        "x = clients.asarray(np.ones(10, np.float32))\n"
        "for _ in range(4): (x * 2.0 + 1.0).numpy()\n"
        "s = clients.stats(); print(s['run_replays'], s['run_captures'], s['plan_hits'])\n"
    )
    on = run_python(code)
    off = run_python(code, FUSION_RUN_CACHE="0")
    assert on.returncode == 0 and off.returncode == 0, on.stderr + off.stderr
    assert on.stdout.split() == ["2", "1", "1"]
    assert off.stdout.split() == ["0", "0", "3"]


def test_ops_registered_while_still_queued_are_not_a_run(client):
    """A section cut short (a kernel build, an interrupt), or another thread, may have
    registered and run the queue's ops before they left it: the run cache must not take
    them for a run it computes (its capture would hold no kernel, and replay old values)."""
    me = threading.get_ident()
    for k in range(4):
        host = rand(48, seed=k)
        y = clients.asarray(host) * 3.0 - 1.0
        queue = client.queues[me]
        with client._lock:  # as a cut-short section leaves it: registered, run, still queued
            client.server.compile_under_lock = True
            try:
                for _, op, *_ in list(queue):
                    client.server.register(me, op)
                client.server.flush_stream(me)
            finally:
                client.server.compile_under_lock = False
        np.testing.assert_allclose(y.numpy(), host * 3 - 1, rtol=1e-6)
        assert not queue


def test_a_build_during_the_capture_leaves_it_for_the_next_time(client, monkeypatch):
    from fusion_server.compiling import NeedsCompile

    class NothingToBuild:
        def run(self) -> None:
            pass

    x = clients.asarray(rand(40))
    server = client.server
    real_end = server.end_run_capture
    stops = []

    def end_after_a_build(*args):  # the capture's flush stops for a build, once
        if not stops:
            stops.append(args)
            raise NeedsCompile(NothingToBuild())
        return real_end(*args)

    np.testing.assert_allclose((x * 6.0 - 2.0).numpy(), x.numpy() * 6 - 2, rtol=1e-6)
    monkeypatch.setattr(server, "end_run_capture", end_after_a_build)
    before = counts()
    for _ in range(4):
        np.testing.assert_allclose((x * 6.0 - 2.0).numpy(), x.numpy() * 6 - 2, rtol=1e-6)
    d = delta(before)
    assert stops and d["run_captures"] == 1 and d["run_replays"] == 2
    assert not server.tapes and not server.ctx.tapes


def test_a_value_dropped_before_the_flush_and_inputs_sharing_a_buffer():
    a = rand(64)
    x = clients.asarray(a)
    low, high = x[:32], x[32:]  # two views of one buffer
    server = clients.client_for().server
    early = set(server.early_drops)
    before = counts()
    for _ in range(4):
        x * 9.0  # made and dropped at once: dead before the run is flushed
        y = low + high * 2.0
        np.testing.assert_allclose(y.numpy(), a[:32] + a[32:] * 2, rtol=1e-6)
    assert delta(before)["run_replays"] == 2
    settle()
    assert not server.gone and server.early_drops <= early  # (each drop applied, none kept)


def test_runs_with_other_ops_are_not_cached_and_the_cache_is_bounded(monkeypatch):
    x = clients.asarray(rand((4, 16)))
    before = counts()
    for _ in range(3):
        np.testing.assert_allclose(clients.cumulative_sum(x * 2.0, axis=-1).numpy(),
                                   np.cumsum(x.numpy() * 2, axis=-1), rtol=1e-5, atol=1e-5)
    assert delta(before)["run_replays"] == 0
    monkeypatch.setattr(runs, "MAX_SEEN", 2)
    monkeypatch.setattr(runs, "MAX_CAPTURES", 1)
    cache = clients.client_for().server.runs
    for scale in (2.0, 3.0, 4.0, 2.0, 3.0, 3.0, 3.0):
        np.testing.assert_allclose((x * scale).numpy(), x.numpy() * scale, rtol=1e-6)
        assert len(cache.seen) <= 2 and len(cache.captures) <= 1
        assert all(type(noted) is int for noted in cache.seen)  # (hashes: a key is 11 kB per 64 ops)


def test_a_stale_capture_is_captured_again(client):
    x = clients.asarray(rand(24))
    for _ in range(3):
        (x + 5.0).numpy()
    client.server.generation += 1  # as a settings change would (which also empties the cache)
    before = counts()
    for _ in range(3):
        np.testing.assert_allclose((x + 5.0).numpy(), x.numpy() + 5, rtol=1e-6)
    d = delta(before)
    assert d["run_captures"] == 1 and d["run_replays"] == 2


def test_an_interrupt_as_the_capture_begins_is_ended_by_the_recovery(client, monkeypatch, baseline):
    server = client.server
    real_begin = server.begin_capture
    cut = []

    def begin_then_interrupted(*args, **kwargs):  # an interrupt lands as the tape is handed back
        tape = real_begin(*args, **kwargs)
        if not cut:
            cut.append(tape)
            raise KeyboardInterrupt
        return tape

    x = clients.asarray(rand(56))
    (x * 8.0 + 3.0).numpy()
    monkeypatch.setattr(server, "begin_capture", begin_then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        (x * 8.0 + 3.0).numpy()
    assert cut and not server.tapes and not server.ctx.tapes  # (ended: its pins released)
    for _ in range(3):
        np.testing.assert_allclose((x * 8.0 + 3.0).numpy(), x.numpy() * 8 + 3, rtol=1e-6)
    del x
    settle()
    assert clients.stats()["buffers_live"] == baseline


def test_an_input_taken_over_by_a_dead_value_is_checked_before_each_replay(baseline):
    """The capture wrote a dead intermediate into a dying input's buffer: a replay for an
    input that is another view's buffer (its handle dead, its storage not) must not."""
    m, k, n = 16, 8, 4
    w = clients.asarray(rand((k, n), seed=1))
    for s in range(3):  # noted, captured, replayed: `x * 2.0` written in place into x's buffer
        host = rand((m, k), seed=10 + s)
        y = (clients.asarray(host) * 2.0) @ w
        np.testing.assert_allclose(y.numpy(), (host * 2) @ w.numpy(), rtol=1e-5, atol=1e-5)
    base_host = rand(m * k, seed=20)
    base = clients.asarray(base_host)
    y = (base.reshape((m, k)) * 2.0) @ w  # the view dies with the run; base does not
    np.testing.assert_allclose(y.numpy(), (base_host.reshape(m, k) * 2) @ w.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(base.numpy(), base_host)
    del y, base, w
    settle()
    assert clients.stats()["buffers_live"] == baseline


def test_an_ended_thread_that_registers_the_run_as_it_is_flushed(client, baseline):
    """A thread that ended with an op reading the run's value (drained as the run is
    flushed) registers the run's ops first: the run is then not replayed as well."""
    x = clients.asarray(rand(32))
    for k in range(4):
        y = x * 3.0 - 1.0
        made = []
        worker = threading.Thread(target=lambda y=y, k=k, made=made: made.append(y + float(k)))
        worker.start()
        worker.join()
        del worker
        assert client.server.ended_streams  # (its queue waits for the next locked section)
        np.testing.assert_allclose(y.numpy(), x.numpy() * 3 - 1, rtol=1e-6)
        np.testing.assert_allclose(made[0].numpy(), x.numpy() * 3 - 1 + k, rtol=1e-6)
    del x, y
    made.clear()
    settle()
    assert clients.stats()["buffers_live"] == baseline


def test_a_value_dropped_while_its_run_is_captured_leaves_the_capture_out(client, monkeypatch, baseline):
    server = client.server
    real_capture = server.capture_run
    held = []

    def capture_then_drop(*args):  # the last other reference goes as the capture starts
        tape = real_capture(*args)
        held.clear()
        return tape

    x = clients.asarray(rand(40))
    monkeypatch.setattr(server, "capture_run", capture_then_drop)
    for _ in range(4):
        held.append(x * 5.0)
        y = held[0] + 2.0
        np.testing.assert_allclose(y.numpy(), x.numpy() * 5 + 2, rtol=1e-6)
        assert not server.tapes
    monkeypatch.undo()
    del x, y
    settle()
    assert clients.stats()["buffers_live"] == baseline


@pytest.mark.parametrize("cut_at", [1, 2])
def test_an_interrupt_as_a_replay_makes_its_entries_leaks_nothing(client, monkeypatch, baseline, cut_at):
    from fusion_server import capture

    real_entry = capture.Entry
    made = []

    def entry_then_interrupted(*args):
        made.append(args)
        if len(made) == cut_at:
            raise KeyboardInterrupt
        return real_entry(*args)

    a = rand(256)
    x = clients.asarray(a)
    want = a
    for _ in range(3):  # noted, captured, replayed: the old x's buffer taken over
        s = x * 2.0
        x = s + 1.0
        want = want * np.float32(2) + np.float32(1)
        np.testing.assert_allclose(x.numpy(), want, rtol=1e-6)
    monkeypatch.setattr(capture, "Entry", entry_then_interrupted)
    s = x * 2.0
    x = s + 1.0
    with pytest.raises(KeyboardInterrupt):
        x.numpy()
    monkeypatch.undo()
    assert made
    for t, value in ((s, want * np.float32(2)), (x, want * np.float32(2) + np.float32(1))):
        try:
            np.testing.assert_allclose(t.numpy(), value, rtol=1e-6)
        except TensorFailedError as exc:
            assert "interrupted by KeyboardInterrupt" in str(exc)
    del t
    made.clear()
    x = clients.asarray(a)
    for _ in range(3):
        x = x * 2.0 + 1.0
    np.testing.assert_allclose(x.numpy(), ((a * 2 + 1) * 2 + 1) * 2 + 1, rtol=1e-6)
    del x, s
    settle()
    assert clients.stats()["buffers_live"] == baseline


def test_a_capture_that_cannot_be_kept_is_tried_again_a_few_times(client, monkeypatch):
    server = client.server
    real_end = server.end_capture
    ends = []

    def end_failing(*args, fail: int):  # as a block failing during the capture would
        ends.append(args)
        if len(ends) <= fail:
            args[1].broken = "a block failed while tracing"
        return real_end(*args)

    x = clients.asarray(rand(72))
    monkeypatch.setattr(server, "end_capture", lambda *args: end_failing(*args, fail=1))
    before = counts()
    for _ in range(5):  # noted, not kept, captured, replayed twice
        np.testing.assert_allclose((x * 4.0 - 3.0).numpy(), x.numpy() * 4 - 3, rtol=1e-6)
    d = delta(before)
    assert len(ends) == 2 and d["run_captures"] == 1 and d["run_replays"] == 2
    ends.clear()
    monkeypatch.setattr(server, "end_capture", lambda *args: end_failing(*args, fail=99))
    for _ in range(3 + runs.MAX_CAPTURE_TRIES):  # never kept: tried so many times, then left alone
        np.testing.assert_allclose((x * 6.0 + 3.0).numpy(), x.numpy() * 6 + 3, rtol=1e-6)
    assert len(ends) == runs.MAX_CAPTURE_TRIES


def test_a_trace_on_another_thread_does_not_take_a_replayed_value_for_a_constant():
    shared = []
    x = clients.asarray(rand(64, seed=1))
    tracing, replayed = threading.Event(), threading.Event()

    @clients.jit
    def f(t):
        y = t * 2.0
        tracing.set()
        assert replayed.wait(30)
        return y + shared[0]

    def replay_meanwhile():
        assert tracing.wait(30)
        for _ in range(3):  # the third is a replay, while f is traced
            shared[:] = [x * 3.0 + 1.0]
            shared[0].numpy()
        replayed.set()

    worker = threading.Thread(target=replay_meanwhile)
    before = clients.stats()
    worker.start()
    out = f(x)
    worker.join()
    after = clients.stats()
    np.testing.assert_allclose(out.numpy(), x.numpy() * 2 + x.numpy() * 3 + 1, rtol=1e-6)
    assert after["run_replays"] - before["run_replays"] == 1
    assert after["jit_traces"] == before["jit_traces"]  # (not kept: it read another thread's new value)


def steps(y, n: int):
    """`n` steps of two element-wise ops each (a loop with no read)."""
    for _ in range(n):
        y = y * 1.0001 + 0.5
    return y


def flushed_steps(x, n: int, want: np.ndarray) -> dict:
    """`steps(x, n)` flushed, then read and checked against `want`: the counters' deltas,
    and under "explained" what `rec.explain()` said of the launches."""
    before = counts()
    with clients.inspect() as rec:
        y = steps(x, n)
        clients.flush()
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5)
    return delta(before) | {"explained": rec.explain()}


@pytest.mark.usefixtures("one_block_batches")
def test_a_recurring_batch_is_replayed_on_the_way_without_a_read():
    host = rand(512)
    x = clients.asarray(host)
    batches = 5
    n = batches * INBOX_BATCH // 2
    want = steps(host, n)
    loop = partial(flushed_steps, x, n, want)

    loop()  # (its kernels built: a build during a capture leaves it for the next batch)
    with server_settings(run_cache_enabled=True):  # (an empty cache)
        d = loop()
        # The first batch is noted, the second captured (the first runs before it), the
        # rest replayed; a batch is as many ops as a kernel fuses.
        assert (d["run_captures"], d["run_replays"], d["kernels_launched"]) == (1, batches - 2, batches)
        assert d["plan_hits"] + d["explorations"] == 2  # (the replays reached no stream)
        assert f"a batch of {INBOX_BATCH} ops that recurs follows" in d["explained"]
        assert f"replayed from the run cache: a recurring run of {INBOX_BATCH} ops" in d["explained"]
        # The first batch reads a held tensor (the others a dead one, whose buffer they
        # take over): another variant, captured, then replayed too.
        d = loop()
        assert (d["run_captures"], d["run_replays"], d["kernels_launched"]) == (1, batches - 1, batches)
        d = loop()
        assert (d["run_captures"], d["run_replays"], d["kernels_launched"]) == (0, batches, batches)


def test_a_thread_recording_alone_replays_batches_of_several_blocks():
    host = rand(256)
    x = clients.asarray(host)
    batches, blocks = 3, LONE_BATCH // INBOX_BATCH
    n = batches * LONE_BATCH // 2
    want = steps(host, n)
    loop = partial(flushed_steps, x, n, want)

    loop()
    with server_settings(run_cache_enabled=True):
        loop()
        loop()
        d = loop()
        # Every batch is LONE_BATCH ops, one replay of `blocks` kernels.
        assert (d["run_captures"], d["run_replays"], d["kernels_launched"]) == (0, batches, batches * blocks)
        assert f"replayed from the run cache: a recurring run of {LONE_BATCH} ops" in d["explained"]


def test_batches_are_long_while_one_thread_records_and_short_while_others_do(client):
    x = clients.asarray(rand(16))
    y = x + 1  # (this thread's queue: it records alone)
    assert client.batch_ops == LONE_BATCH
    recorded, release = threading.Event(), threading.Event()
    seen = {}

    def other() -> None:
        z = x * 2
        seen["during"] = client.batch_ops
        recorded.set()
        release.wait()
        seen["value"] = z.numpy()

    worker = threading.Thread(target=other)
    worker.start()
    recorded.wait()
    w = y * 3  # (two threads hold queues)
    assert seen["during"] == client.batch_ops == INBOX_BATCH
    release.set()
    worker.join()
    np.testing.assert_allclose(seen["value"], x.numpy() * 2, rtol=1e-6)
    np.testing.assert_allclose(w.numpy(), (x.numpy() + 1) * 3, rtol=1e-6)
    v = w + 1  # (the other thread's queue went as it was flushed: alone again)
    assert client.batch_ops == LONE_BATCH
    np.testing.assert_allclose(v.numpy(), (x.numpy() + 1) * 3 + 1, rtol=1e-6)


@pytest.mark.usefixtures("one_block_batches")
def test_recurring_batches_after_new_ops_and_before_a_read(baseline):
    host = rand(300)
    x = clients.asarray(host)
    replays = []
    for k in range(6):
        before = counts()
        p = x * float(k)  # a new scalar: the first batch of each round is a new run
        got = steps(p, 3 * INBOX_BATCH // 2).numpy()
        replays.append(delta(before)["run_replays"])
        np.testing.assert_allclose(got, steps(host * np.float32(k), 3 * INBOX_BATCH // 2), rtol=1e-5)
    # The batch after the new ops, the next (its key the same) and the read's run of one
    # op are noted, then captured (where a capture waits for a kernel build, a round
    # later), then replayed: three replays a round once every capture is made.
    assert replays[-2:] == [3, 3]
    del p
    settle()
    assert clients.stats()["buffers_live"] == baseline + 1


@pytest.mark.usefixtures("one_block_batches")
def test_a_batch_whose_input_fails_as_the_stream_runs_first_is_not_replayed(client, monkeypatch):
    host = rand(64)
    x = clients.asarray(host)
    real = client.server.ctx.launch

    def failing(kernel, global_size, local, args, kind, ops, *rest, **kw):
        if "sqrt" in ops:
            raise RuntimeError("sqrt's block exploded")
        return real(kernel, global_size, local, args, kind, ops, *rest, **kw)

    def round(k: int):
        # Two batches: one with new ops (a new scalar), left in the stream; then one that
        # recurs, whose input the stream writes.
        return steps(clients.sqrt(x * float(k)), INBOX_BATCH - 1)

    with monkeypatch.context() as patch:
        patch.setattr(client.server.ctx, "launch", failing)
        before = counts()
        for k in range(4):
            with pytest.raises(TensorFailedError, match="sqrt's block exploded"):
                round(k).numpy()
        assert delta(before)["run_replays"] == 0
    before = counts()
    got = [round(k).numpy() for k in range(1, 5)]
    assert delta(before)["run_replays"] >= 2  # (the batch goes on as a run once its input is written)
    for k, values in enumerate(got, 1):
        np.testing.assert_allclose(values, steps(np.sqrt(host * np.float32(k)), INBOX_BATCH - 1), rtol=1e-5)


def test_a_zero_scalar_of_the_other_sign_is_another_run():
    x = clients.asarray(np.abs(rand(64)) + 0.5)  # (positive: x * -0.0 is -0.0 everywhere)
    for s in (0.0, -0.0, 0.0, -0.0):
        for _ in range(3):  # (captured and replayed for the first sign)
            got = (x * s).numpy()
            assert (np.signbit(got) == np.signbit(np.float32(s))).all(), s
    # The same for the parts of complex scalars, which equal values cannot tell apart.
    one, i = np.complex64(1), np.complex64(1j)
    for a, b in ((np.float32(0.0), np.float32(-0.0)), (one, np.conj(one)), (i, -np.conj(i))):
        assert a == b and scalar(a, a.dtype) != scalar(b, b.dtype)
        assert scalar(a, a.dtype) == scalar(a.copy(), a.dtype) and hash(scalar(a, a.dtype)) == hash(scalar(a, a.dtype))
    assert type(scalar(np.float32(2.0), np.dtype(np.float32))) is Scalar  # (the common case: by value)


def test_a_nan_scalar_recurs_as_a_run():
    """NaN is unequal to itself, but its Scalar compares by bits: a loop that multiplies
    by NaN replays like any other."""
    x = clients.asarray(rand(64))
    before = counts()
    for _ in range(4):
        assert np.isnan((x * float("nan")).numpy()).all()
    assert delta(before)["run_replays"] >= 2


@contextmanager
def lock_held_elsewhere(client):
    """The server lock held by another thread for the duration (what this thread records
    meanwhile stays queued: it finds the lock taken)."""
    held, release = threading.Event(), threading.Event()

    def hold(server) -> None:
        held.set()
        assert release.wait(30)

    holder = threading.Thread(target=client.call, args=(hold,))
    holder.start()
    assert held.wait(30)
    try:
        yield
    finally:
        release.set()
        holder.join(30)


@pytest.mark.usefixtures("one_block_batches")
def test_a_queue_that_grew_while_the_lock_was_held_runs_as_batches(client):
    """A thread that records while another holds the lock registers more than a batch at
    once: it goes to the run cache a batch at a time (the tail stays queued), so a loop
    that contention lengthened still replays."""
    x = clients.asarray(rand(64))
    before = counts()
    for round_ in range(3):
        with clients.inspect() as rec:  # (first: entering it is a locked section)
            with lock_held_elsewhere(client):
                y = steps(x, INBOX_BATCH)  # (the queue grows to two batches: the lock is taken)
            y = y + 1.0  # (the lock is free: two batches go to the run cache, one op stays)
            assert len(client.queues[threading.get_ident()]) == 1
            np.testing.assert_allclose(y.numpy(), steps(x.numpy(), INBOX_BATCH) + 1, rtol=1e-5)
        assert [len(k.ops) for k in rec.kernels] == [INBOX_BATCH, INBOX_BATCH, 1]
        if round_ == 0:  # (the two batches alike: the first is noted, the second captured)
            assert delta(before)["run_captures"] == 1
    assert delta(before)["run_replays"] >= 4
    assert "replayed from the run cache" in rec.explain()


@pytest.mark.usefixtures("one_block_batches")
def test_a_read_of_a_queue_that_grew_while_the_lock_was_held_replays_it_by_batches(client):
    """The read itself finds more than a batch queued: the batches go to the run cache
    as they would have on the way, not as one run of the whole queue, met only once."""
    x = clients.asarray(rand(64))
    before = counts()
    for round_ in range(3):
        with clients.inspect() as rec:
            with lock_held_elsewhere(client):
                y = steps(x, INBOX_BATCH)  # (two batches queued: the lock is taken)
            np.testing.assert_allclose(y.numpy(), steps(x.numpy(), INBOX_BATCH), rtol=1e-5)
        assert [len(k.ops) for k in rec.kernels] == [INBOX_BATCH, INBOX_BATCH]
        if round_ == 0:  # (the first batch noted, the second, alike, captured)
            assert delta(before)["run_captures"] == 1
    # The first batch reads a held tensor, the second a dead one: the first's variant is
    # captured in the second round, and both are replayed in the third.
    assert delta(before)["run_replays"] == 3


@pytest.mark.usefixtures("one_block_batches")
def test_a_stream_that_holds_part_of_a_block_has_batches_begin_at_its_edge():
    """Batches a few ops off the stream's blocks (an op registered alone before them):
    the ops up to the block's edge are registered first, and the batches begin there, so
    that the blocks stay the fusers' (cut where a batch begins, a block would be a kernel
    of a length that timing chose) and the batches replay."""
    x = clients.asarray(rand(64))
    before = counts()
    for _ in range(4):
        p = x * 2.0
        clients.stats()  # (a locked section: it registers `p` alone)
        with clients.inspect() as rec:
            y = steps(p, 3 * INBOX_BATCH // 2)
            clients.flush()
        assert [len(k.ops) for k in rec.kernels] == [INBOX_BATCH] * 3 + [1]
        np.testing.assert_allclose(y.numpy(), steps(x.numpy() * 2, 3 * INBOX_BATCH // 2), rtol=1e-5)
    assert delta(before)["run_replays"] >= 2


@pytest.mark.usefixtures("one_block_batches")
def test_batches_that_never_recur_are_looked_up_less_often_and_a_loop_is_still_found(client, monkeypatch):
    from fusion_server.server import BATCH_BACKOFF

    x = clients.asarray(rand(64))
    looked = []
    real = client.server.runs.find
    monkeypatch.setattr(client.server.runs, "find", lambda *a: looked.append(a) or real(*a))
    batches = 6 * BATCH_BACKOFF
    y = x
    for k in range(batches * INBOX_BATCH):  # (a new scalar in every op: no batch recurs)
        y = y + (1.0 + k) * 1e-6
    np.testing.assert_allclose(y.numpy(), x.numpy() + np.float32(1e-6) * np.arange(1, batches * INBOX_BATCH + 1).sum(),
                               rtol=1e-3)
    # The first BATCH_BACKOFF batches are looked up, then one in BATCH_BACKOFF (and the read).
    assert len(looked) <= BATCH_BACKOFF + batches // BATCH_BACKOFF + 1
    before = counts()
    for _ in range(3 * BATCH_BACKOFF):  # a loop of 64 ops: its batch is found, then replayed
        steps(x, INBOX_BATCH // 2)
    assert delta(before)["run_replays"] > BATCH_BACKOFF


@pytest.mark.usefixtures("one_block_batches")
def test_a_batch_that_does_not_end_with_a_block_is_left_to_the_usual_path():
    """Blocks that close inside a batch (here at the binding limit: every op reads another
    tensor) leave its last ops queued: flushed at the batch's end, they would be a kernel
    the fusers never chose. The capture is given up and the blocks stay as they were."""
    hosts = [rand(64, seed=s) for s in range(40)]
    ts = [clients.asarray(h) for h in hosts]

    def body(y, xp_ts):
        for k in range(INBOX_BATCH):
            y = y + xp_ts[k % len(xp_ts)]
        return y

    x = clients.asarray(rand(64))
    blocks = []
    with server_settings(max_bindings=8, run_cache_enabled=True):
        before = counts()
        for _ in range(6):
            with clients.inspect() as rec:
                y = body(body(x, ts), ts)
                clients.flush()
            blocks.append([len(k.ops) for k in rec.kernels])
            np.testing.assert_allclose(y.numpy(), body(body(x.numpy(), hosts), hosts), rtol=1e-5)
        assert delta(before)["run_captures"] == delta(before)["run_replays"] == 0
    assert len(blocks[0]) > 2 and all(b == blocks[0] for b in blocks)


@pytest.mark.usefixtures("one_block_batches")
def test_reconfiguring_forgets_what_the_cache_knew_of_each_streams_batches(client):
    from fusion_server.server import BATCH_BACKOFF

    server = client.server
    me = threading.get_ident()
    server.batch_misses[me] = 5 * BATCH_BACKOFF + 1  # (a stream whose batches never recurred)
    with server_settings(run_cache_enabled=True):
        assert me not in server.batch_misses
        x = clients.asarray(rand(64))
        before = counts()
        for _ in range(4):  # looked up from the first batch again: noted, captured, replayed
            steps(x, INBOX_BATCH // 2)
        assert delta(before)["run_replays"] >= 1


def test_setting_the_mode_it_has_keeps_the_cache():
    """set_mode with the mode in force changes nothing: a loop that sets it every round
    (as code alternating with eager sections might) still replays."""
    x = clients.asarray(rand(64))
    before = counts()
    for _ in range(4):
        clients.set_mode("lazy")
        np.testing.assert_allclose((x * 3.0 + 1.0).numpy(), x.numpy() * 3 + 1, rtol=1e-6)
    assert delta(before)["run_replays"] >= 2 and delta(before)["run_captures"] == 1


# -- runs with views: slices, transposes and reshapes are recorded with the ops -----------------
def _blur_of_square(x) -> np.ndarray:
    return box_blur(x * x).numpy()


def test_a_stencil_of_slices_recurs_as_one_run_replayed_as_one_kernel(baseline):
    img = rand((40, 56))
    x = clients.asarray(img)
    assert_recurs_as_one_kernel(partial(_blur_of_square, x), box_blur(img * img))
    del x
    settle()
    assert clients.stats()["buffers_live"] == baseline


def test_views_the_user_holds_come_out_of_a_replay_with_their_layouts(baseline):
    a = rand((6, 10))
    x = clients.asarray(a)
    before = counts()
    for _ in range(4):
        y = clients.exp(x) * 2.0
        column, transposed, strided = y[:, 3], y.T, x[1:, ::2]  # of a run's value, of its input
        s = transposed[1:4] + 1.0
        np.testing.assert_allclose(s.numpy(), (np.exp(a) * 2).T[1:4] + 1, rtol=1e-5)
        np.testing.assert_allclose(column.numpy(), np.exp(a[:, 3]) * 2, rtol=1e-5)
        np.testing.assert_allclose(transposed.numpy(), (np.exp(a) * 2).T, rtol=1e-5)
        np.testing.assert_array_equal(strided.numpy(), a[1:, ::2])
        np.testing.assert_allclose(y.numpy(), np.exp(a) * 2, rtol=1e-5)
        assert transposed.strides_elements == (1, 10) and strided.strides_elements == (10, 2)
    d = delta(before)
    assert d["run_captures"] == 1 and d["run_replays"] == 2
    del x, y, column, transposed, strided, s
    settle()
    assert clients.stats()["buffers_live"] == baseline


def test_slices_alike_but_for_their_layout_are_other_runs():
    a = rand(64)
    x = clients.asarray(a)
    cases = [(slice(1, 64), 1), (slice(0, 63), 1), (slice(0, 64, 2), 1), (slice(0, 32), 1), (slice(32, 64), 2)]
    before = counts()
    for _ in range(3):
        for key, scale in cases:
            np.testing.assert_allclose((x[key] * 2.0 + scale).numpy(), a[key] * 2 + scale, rtol=1e-6)
    assert delta(before)["run_replays"] == len(cases)
    m = clients.asarray(a.reshape(8, 8))
    for _ in range(3):  # a reshape, and a transpose of the same shape
        np.testing.assert_allclose((x.reshape(8, 8) - 1.0).numpy(), a.reshape(8, 8) - 1, rtol=1e-6)
        np.testing.assert_allclose((m.T - 1.0).numpy(), a.reshape(8, 8).T - 1, rtol=1e-6)


def test_assignments_in_a_loop_replay_and_views_of_the_old_value_keep_it(baseline):
    """`y[k] = v` rebinds y to a new value and keeps the old one's handle queued until
    the ops before it are registered; such a queue is still a run."""
    a = rand((12, 16))
    x = clients.asarray(a)
    before = counts()
    for _ in range(4):
        y = x * 2.0
        old_row = y[1]  # a view of the value before the assignment: it keeps its values
        y[:, 0] = 1.0
        y[2:4, ::3] = -1.0
        want = a * 2
        want[:, 0] = 1
        want[2:4, ::3] = -1
        np.testing.assert_allclose(y.numpy(), want, rtol=1e-6)
        np.testing.assert_allclose(old_row.numpy(), a[1] * 2, rtol=1e-6)
    assert delta(before)["run_replays"] == 2
    del x, y, old_row
    settle()
    assert clients.stats()["buffers_live"] == baseline


@pytest.mark.parametrize("form", ["upload", "dropped input"])
def test_a_value_and_its_views_over_a_dying_inputs_buffer_share_it_in_a_replay(form, baseline):
    """The run's input dies and its buffer is taken over by the run's value; the user
    holds that value and views of it: the replay takes the buffer over once, for all of
    them (one storage per input taken over, as per slot)."""
    a = np.arange(48, dtype=np.float32).reshape(6, 8)
    before = counts()
    for _ in range(4):
        if form == "upload":
            y = clients.asarray(a) * 1.0  # (the upload dies in the run)
        else:
            x = clients.asarray(a)
            y = x * 2.0
            del x
        rows, cols = y[2:], y[:, ::2]
        scale = 1 if form == "upload" else 2
        np.testing.assert_array_equal(rows.numpy(), a[2:] * scale)
        np.testing.assert_array_equal((cols + 0.0).numpy(), a[:, ::2] * scale)
        np.testing.assert_array_equal(y.numpy(), a * scale)
    assert delta(before)["run_replays"] == 4  # (two runs a pass: the read of rows, and cols + 0)
    del y, rows, cols
    settle()
    assert clients.stats()["buffers_live"] == baseline


def test_outliving_counts_the_references_beyond_the_queue():
    class Handle:
        pass

    handles = [Handle(), Handle(), Handle(), None]  # (no other name for them: a name is a reference)
    keep = handles[0]  # a reference from beyond the queue
    queue_item = (0, None, handles[1], handles[1])  # an op that reads the second twice
    held = {id(handles[1]): 2}
    assert runs.outliving(handles, held) == [True, False, False, False]
    queue_item += (handles[2],)  # held by the queue now too, but not counted in `held`
    assert runs.outliving(handles, held) == [True, False, True, False]
    assert runs.outliving(handles, held, base=1 << 30) == [False] * 4
    del keep, queue_item


@pytest.mark.parametrize("run", [True, False])
def test_a_tensors_buffer_read_by_reference_breaks_a_runs_capture_and_pins_a_traces(client, baseline, run):
    """A run's blocks read tensors through its inputs alone: a tensor's buffer met as a
    constant (an interrupt's recovery can reshuffle the queues so) leaves the run's tape
    broken, with nothing pinned; a jit trace's pins it, until the tape is collected."""
    from fusion_server import capture as cap

    x = clients.asarray(rand(16, seed=5)) * 3.0
    x.numpy()
    tid = x._id

    def hold(server):
        tape = cap.Tape("t", [], server.generation, server.lease)
        tape.run = run
        entries = server.handles.entries
        return tape, tape.hold(entries[tid].storage.buffer, entries), entries[tid].storage

    tape, held, storage = client.call(hold)
    if run:
        assert held is None and "not one of the run's inputs" in tape.broken
        assert storage.pins == 0 and not client.server.leases
    else:
        assert held is storage and not tape.broken
        assert storage.pins == 1 and len(client.server.leases) == 1
    del tape, x
    settle()
    assert storage.pins == 0 and not client.server.leases
    assert clients.stats()["buffers_live"] == baseline
