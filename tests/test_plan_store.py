"""The plan store: recurring sequences replay the fusers' decisions without exploring."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import clients
from fusion_server import plans
from fusion_server.ir import ElementwiseOp, Scalar, TensorIr
from fusion_server.plans import FLUSH, BlockSigner, Decision, PlanStore
from tests.conftest import counted_since, counters, rand, run_python, server_settings


@pytest.fixture(autouse=True)
def without_run_cache():
    """The plan store's own behaviour: runs that recur are not replayed from the run
    cache (fusion_server/runs.py), which would take them before the store sees them."""
    with server_settings(run_cache_enabled=False):
        yield


@pytest.fixture
def fresh_store(client):
    """An empty plan store for this test's streams (the server and its kernels stay)."""

    def clear(server):
        server.flush_all("test")
        server.plan_stores.clear()
        server.streams.clear()

    client.call(clear)
    yield client.server
    client.call(clear)


def counts() -> dict:
    return counters(("plan_hits", "plan_misses", "explorations", "compiles", "kernels_launched", "failed_blocks"))


def delta(before: dict) -> dict:
    return counted_since(before)


def graph(x, y, a: float, b: float):
    """Element-wise work, a reduction with its epilogue, and a read: four blocks."""
    t = clients.tanh(x * a + y) - b
    u = clients.exp(t) * y
    s = clients.sum(u * u, axis=-1) * 0.5
    return t, s


def graph_np(x, y, a, b):
    t = np.tanh(x * np.float32(a) + y) - np.float32(b)
    u = np.exp(t) * y
    return t, np.sum(u * u, axis=-1) * np.float32(0.5)


def check(x, y, a, b):
    t, s = graph(clients.asarray(x), clients.asarray(y), a, b)
    want_t, want_s = graph_np(x, y, a, b)
    np.testing.assert_allclose(t.numpy(), want_t, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(s.numpy(), want_s, rtol=1e-4, atol=1e-5)


def test_recurring_sequence_hits_with_other_ids_scalars_and_sizes(fresh_store):
    start, stored = counts(), clients.stats()["plans_stored"]
    check(rand((4, 33)), rand((4, 33), seed=1), 0.5, 0.25)  # explores and stores
    assert delta(start)["explorations"] > 0 and clients.stats()["plans_stored"] > stored
    before = counts()
    # New tensors (new ids), new scalar values, new sizes of the same pattern.
    check(rand((7, 100), seed=2), rand((7, 100), seed=3), -1.5, 2.0)
    d = delta(before)
    assert d["explorations"] == 0 and d["plan_misses"] == 0
    assert d["plan_hits"] == d["kernels_launched"] >= 1  # every block came from the store
    assert d["compiles"] == 0  # sizes and scalars are kernel arguments


def test_steady_state_explores_and_compiles_nothing(fresh_store):
    x, y = rand((8, 64)), rand((8, 64), seed=1)
    for _ in range(2):
        check(x, y, 0.5, 0.25)
    before = counts()
    for i in range(5):
        check(x, y, 0.1 * i, 0.2 * i)
    d = delta(before)
    assert d["explorations"] == 0 and d["compiles"] == 0 and d["plan_misses"] == 0
    assert d["plan_hits"] == d["kernels_launched"] >= 5  # one stored block per kernel


def test_a_sequence_that_diverges_half_way_is_explored(fresh_store):
    a = rand(500)
    x = clients.asarray(a)
    for _ in range(2):
        (clients.exp(x * 2.0 + 1.0) - 3.0).numpy()
    before = counts()
    # The same first ops, then something else: the block is cut differently.
    y = clients.sqrt(clients.abs(clients.exp(x * 2.0 + 1.0))) * x
    np.testing.assert_allclose(y.numpy(), np.sqrt(np.abs(np.exp(a * 2 + 1))) * a, rtol=1e-5)
    d = delta(before)
    assert d["plan_misses"] == 1 and d["explorations"] == 1 and d["plan_hits"] == 0
    before = counts()  # the new sequence is stored too
    y = clients.sqrt(clients.abs(clients.exp(x * 3.0 + 1.0))) * x
    np.testing.assert_allclose(y.numpy(), np.sqrt(np.abs(np.exp(a * 3 + 1))) * a, rtol=1e-5)
    assert delta(before)["plan_hits"] == 1 and delta(before)["explorations"] == 0


def test_different_operand_structure_does_not_match(fresh_store):
    a, b = rand(64), rand(64, seed=1)
    x, y = clients.asarray(a), clients.asarray(b)
    (x * y + x).numpy()
    before = counts()
    got = (x * y + y).numpy()  # same ops, another operand: another sequence
    np.testing.assert_allclose(got, a * b + b, rtol=1e-6)
    assert delta(before)["plan_hits"] == 0 and delta(before)["explorations"] == 1


def test_replayed_block_that_no_longer_fits_the_bindings_is_explored(fresh_store, channel):
    """A block stored while its intermediates were dead replays where they are kept: it no
    longer fits the bindings, and is explored once, split, with right values. The inbox
    registers a batch after the chain's drops (as a read does): a chain of tensor operands
    fuses whole, then needs a binding per kept value. The lock channel fuses each op as it
    registers, while the intermediates are still alive (their drops come with the next
    block), so such a chain is split either way; a chain with scalar operands, which take
    bindings of their own, is where keeping the values makes the difference there."""
    a = rand(256)
    if channel == "lock":
        limit = 8

        def step(t, k):
            return t * 1.5 + float(k)

        def step_np(t, k):
            return t * np.float32(1.5) + np.float32(k)
    else:
        limit = 4  # tensor operands only: scalars would take bindings in both chains

        def step(t, k):
            return t * x + x

        def step_np(t, k):
            return t * a + a
    with server_settings(max_bindings=limit):
        x = clients.asarray(a)

        def chain(keep: bool):
            kept, t = [], x
            for k in range(6):
                t = step(t, k)
                if keep:
                    kept.append(t)
            return t, kept

        for _ in range(2):  # stored while no intermediate is kept
            t, _ = chain(False)
            t.numpy()
        before = counts()
        t, kept = chain(True)  # now every value must be written: over the bindings
        with clients.inspect() as rec:
            got = t.numpy()
        want = a
        for k in range(6):
            want = step_np(want, k)
            np.testing.assert_allclose(kept[k].numpy(), want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        assert all(k.bindings <= limit for k in rec.kernels)
        assert delta(before)["plan_misses"] >= 1 and delta(before)["failed_blocks"] == 0


def test_views_of_values_in_the_block_replay_with_their_value_recomputed(fresh_store):
    a, b = rand((6, 8)), rand((8, 6), seed=2)
    x, y = clients.asarray(a), clients.asarray(b)
    before = counts()
    for scale in (2.0, 3.0, 4.0):
        with clients.inspect() as rec:
            t = x * scale
            v = clients.permute_dims(t, (1, 0))  # a view of a value computed in the block
            got = (v + y).numpy()  # (with a row-major operand: `v + 1.0` alone runs in t's order)
        np.testing.assert_allclose(got, (a * np.float32(scale)).T + b, rtol=1e-6)
        # t is still held: written, and computed again at the transposed coordinates for v
        assert [k.ops for k in rec.kernels] == [["multiply", "multiply", "add"]]
    assert delta(before)["plan_hits"] == 2 and delta(before)["explorations"] == 1


def test_flush_ended_blocks_replay(fresh_store):
    a = rand(100)
    x = clients.asarray(a)
    before = counts()
    for k in range(4):
        y = clients.log1p(clients.abs(x)) * float(k)
        clients.sync()
        np.testing.assert_allclose(y.numpy(), np.log1p(np.abs(a)) * np.float32(k), rtol=1e-6)
    assert delta(before)["plan_hits"] == 3 and delta(before)["explorations"] == 1


def test_threads_share_the_store(fresh_store):
    a = rand(300)
    x = clients.asarray(a)
    (clients.cos(x) * 2.0 - x).numpy()  # stored by this thread
    before = counts()
    results = {}
    barrier = threading.Barrier(2)

    def work(k: int) -> None:
        barrier.wait()
        results[k] = (clients.cos(x) * float(k) - x).numpy()

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(2):
        np.testing.assert_allclose(results[k], np.cos(a) * np.float32(k) - a, rtol=1e-5, atol=1e-6)
    assert delta(before)["plan_hits"] == 2 and delta(before)["explorations"] == 0


def test_matmul_blocks_replay(fresh_store):
    a, w, bias = rand((5, 7)), rand((7, 3), seed=1), rand(3, seed=2)
    x, wt, bt = clients.asarray(a), clients.asarray(w), clients.asarray(bias)
    before = counts()
    for _ in range(3):
        got = clients.maximum(x @ wt + bt, 0.0).numpy()
        np.testing.assert_allclose(got, np.maximum(a @ w + bias, 0), rtol=1e-4, atol=1e-5)
    assert delta(before)["plan_hits"] == 2  # explored the first time, replayed twice


def test_gathers_scatters_and_concatenations_replay(fresh_store):
    """Ops that run alone take part in stored sequences: the element-wise work around a
    gather, a scatter and a concatenation is replayed, not explored, when it recurs."""
    a = rand((6, 5))
    idx = np.array([4, 0, 2])

    def step(x):
        y = x[clients.asarray(idx)] * 2.0 + 1.0  # gather, then a block reading it
        z = clients.concat([y, x[:2]], axis=0) - 0.5
        w = clients.asarray(a)
        w[[1, 3]] = z[:2] * 3.0  # a scatter
        return (w + 1.0).numpy(), z.numpy()

    def want():
        y = a[idx] * 2 + 1
        z = np.concatenate([y, a[:2]]) - 0.5
        w = a.copy()
        w[[1, 3]] = z[:2] * 3
        return w + 1, z

    x = clients.asarray(a)
    step(x)
    before = counts()
    for _ in range(3):
        got_w, got_z = step(x)
        want_w, want_z = want()
        np.testing.assert_allclose(got_w, want_w, rtol=1e-6)
        np.testing.assert_allclose(got_z, want_z, rtol=1e-6)
    d = delta(before)
    assert d["explorations"] == 0 and d["plan_misses"] == 0
    assert d["plan_hits"] >= 3 * 6  # per step: the gather, its block, concat, its block, scatter, the last block


def test_custom_fusers_turn_the_store_off(fresh_store):
    from fusion_server.fusers import PatternFuser

    def launch(queue, inputs, out, scalars):
        raise AssertionError("never chosen: the pattern below never completes")

    clients.custom.register_fuser(lambda ctx: PatternFuser("never", ["sin", "cos", "tan"], launch))
    try:
        x = clients.asarray(rand(10))
        before = counts()
        for _ in range(3):
            (clients.exp(x) + 1.0).numpy()
        assert delta(before)["plan_hits"] == 0 and delta(before)["explorations"] == 3
    finally:
        clients.custom.unregister_fusers()


def test_the_store_can_be_turned_off():
    code = (
        "import numpy as np, clients\n"
        "x = clients.asarray(np.ones(10, np.float32))\n"
        "for _ in range(3): (x * 2.0 + 1.0).numpy()\n"
        "s = clients.stats(); print(s['plan_hits'], s['explorations'])\n"
    )
    out = run_python(code, FUSION_PLAN_STORE="0", FUSION_RUN_CACHE="0")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "3"]


# -- the relative form, directly --------------------------------------------------------
def _op(name, inputs, out_id, shape, dtype=np.dtype(np.float32)):
    return ElementwiseOp(name, tuple(inputs), dtype, TensorIr(out_id, shape, dtype))


class _Entry:
    def __init__(self, tid, shape, contiguous=True, pending=False):
        self.ir = TensorIr(tid, shape, np.dtype(np.float32))
        self.contiguous = contiguous
        self.storage = type("S", (), {"status": 0 if pending else 1})()


def _signs(ops, entries):
    signer = BlockSigner(entries)
    return [signer.sign(op) for op in ops]


def test_signatures_abstract_ids_sizes_and_scalars():
    f32 = np.dtype(np.float32)
    e1 = {1: _Entry(1, (4, 5)), 2: _Entry(2, (5,))}
    e2 = {10: _Entry(10, (9, 3)), 20: _Entry(20, (3,))}
    ops1 = [_op("multiply", [1, Scalar(np.float32(2), f32)], 3, (4, 5)), _op("add", [3, 2], 4, (4, 5))]
    ops2 = [_op("multiply", [10, Scalar(np.float32(7), f32)], 30, (9, 3)), _op("add", [30, 20], 40, (9, 3))]
    assert _signs(ops1, e1) == _signs(ops2, e2)
    # Sizes keep their equalities: (4, 4) is not the pattern of (4, 5).
    e3 = {1: _Entry(1, (4, 4)), 2: _Entry(2, (4,))}
    ops3 = [_op("multiply", [1, Scalar(np.float32(2), f32)], 3, (4, 4)), _op("add", [3, 2], 4, (4, 4))]
    assert _signs(ops3, e3) != _signs(ops1, e1)
    # Size 1 stays literal (it broadcasts); layouts and pending inputs are part of the form.
    assert _signs(ops1, {1: _Entry(1, (4, 5)), 2: _Entry(2, (1,))}) != _signs(ops1, e1)
    assert _signs(ops1, {1: _Entry(1, (4, 5), contiguous=False), 2: _Entry(2, (5,))}) != _signs(ops1, e1)
    assert _signs(ops1, {1: _Entry(1, (4, 5), pending=True), 2: _Entry(2, (5,))}) != _signs(ops1, e1)


def test_store_keeps_the_first_decision_and_forgets_when_full(monkeypatch):
    store = PlanStore()
    store.store([("a",), ("b",), FLUSH], Decision(0, 2, "flush"))
    store.store([("a",), ("b",), FLUSH], Decision(1, 1, "other"))
    node = store.root.children[("a",)].children[("b",)].children[FLUSH]
    assert node.decision == Decision(0, 2, "flush") and store.stored == 1
    monkeypatch.setattr(plans, "MAX_NODES", 5)
    store.store([("c",), ("d",), FLUSH], Decision(0, 2, "flush"))
    assert ("a",) not in store.root.children and store.nodes == 4


# -- found in review --------------------------------------------------------------------
def test_register_interrupted_by_another_streams_build_counts_readers_once(fresh_store, baseline):
    """Registering `w + a`, where `a` waits in another thread's queue for a kernel nobody
    built yet: the flush stops for the build and the op registers again from the start.
    `w`'s reader must be counted once, or its buffer never goes back."""
    import uuid

    twist = clients.custom.elementwise(f"twist_{uuid.uuid4().hex[:8]}", "x * 0.5f + 0.25f")
    w = clients.asarray(np.ones(1000, np.float32))
    box = {"x": clients.asarray(np.arange(1000, dtype=np.float32))}
    queued, finish = threading.Event(), threading.Event()

    def other() -> None:
        box["a"] = clients.cos(twist(box["x"] * 0.001))  # queued in this thread's stream, unbuilt
        queued.set()
        box["released"] = finish.wait(timeout=60)

    t = threading.Thread(target=other)
    t.start()
    assert queued.wait(timeout=60)
    before = clients.stats()["compiles"]
    c = w + box["a"]
    assert clients.stats()["compiles"] > before  # the flush did build a kernel
    want = 1 + np.cos(np.arange(1000, dtype=np.float32) * np.float32(0.001) * np.float32(0.5) + np.float32(0.25))
    np.testing.assert_allclose(c.numpy(), want, rtol=1e-6)
    finish.set()
    t.join(60)
    assert box.get("released"), "the other thread was never released"
    box.clear()
    del w, c
    from tests.conftest import settle

    settle()
    assert clients.stats()["buffers_live"] == baseline


def test_a_rejected_replay_does_not_replace_the_usual_plan(fresh_store):
    a = rand(256)
    with server_settings(max_bindings=18):
        x = clients.asarray(a)

        def kernels(keep: bool) -> int:
            kept, t = [], x
            with clients.inspect() as rec:
                for k in range(6):
                    t = t * 1.5 + float(k)
                    if keep:
                        kept.append(t)
                t.numpy()
            return len(rec.kernels)

        assert kernels(False) == 1 and kernels(False) == 1
        assert kernels(True) == 2  # every intermediate written: over 18 bindings
        assert [kernels(False) for _ in range(3)] == [1, 1, 1]


def test_ops_that_run_alone_replay_without_waiting_for_the_next_op(fresh_store):
    a = rand((4, 50))
    x = clients.asarray(a)
    for k in range(2):
        np.testing.assert_array_equal(clients.sort(x * float(k + 1)).numpy(), np.sort(a * np.float32(k + 1)))
    before = counts()
    for k in range(3):
        np.testing.assert_array_equal(clients.sort(x * float(k + 3)).numpy(), np.sort(a * np.float32(k + 3)))
    d = delta(before)
    assert d["plan_misses"] == 0 and d["explorations"] == 0 and d["plan_hits"] == d["kernels_launched"] == 6
