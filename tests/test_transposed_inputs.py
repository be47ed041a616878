"""Transposed inputs of element-wise blocks: computed in memory order, or copied row-major.

Where every full-size operand of an element-wise op is one dense block permuted alike
(`m.T + 1`, `exp(x.mT) * w`), the op runs on the blocks in their memory order and its
result is their permutation (clients/_functions.py, `_in_dense_order`), as numpy's result
keeps its operands' order.

Otherwise a block that reads a matrix down its columns (`m - m.T`) touches one element
per cache line on a CPU: 11.7 to 13.3 ms for 2048^2 float32 on two cores, against numpy's
0.85. There the fuser copies such an input row-major with the blocked transpose kernel
(codegen/transpose.py) and the block reads the copy (fusers/elementwise.py,
PACK_TRANSPOSED_MIN). Values against numpy; the copy against inspect().
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import rand, settle

import clients
from fusion_server.fusers import elementwise as ew

COPY = "row-major (a transposed input)"


def on_cpu() -> bool:
    return clients.client_for().server.info.kind == "CPU"


@pytest.fixture
def small_copies(monkeypatch):
    """Copies from 64 elements on (the tests' matrices are small)."""
    monkeypatch.setattr(ew, "PACK_TRANSPOSED_MIN", 64)


CASES = {  # name: (the block, the matrix's shape, whether a CPU copies the matrix row-major first)
    "plus a scalar and a row broadcast": (lambda m, w: m.T + 1 + w[None, :], (37, 21), False),
    "minus its own transpose": (lambda m, w: m - m.T, (40, 40), True),
    "a slice with an offset, transposed": (lambda m, w: m[3:, 5:].T * 2, (45, 33), True),
    "times a row broadcast": (lambda m, w: m.T * w[None, :], (24, 50), False),
    "read twice": (lambda m, w: m.T + m.T * 3 + w[None, :], (30, 20), False),
    "three axes, permuted": (lambda m, w: clients.exp(m.reshape(3, 4, -1).mT) * 2
                             if isinstance(m, clients.Tensor) else np.exp(m.reshape(3, 4, -1).mT) * 2, (12, 30), False),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
@pytest.mark.parametrize("case", CASES)
def test_blocks_reading_a_transposed_input_give_numpys_values(case, dtype, small_copies):
    """Operands all permuted alike (and vectors) run in their memory order: one kernel,
    no copy, the result in their order as numpy's is; a row-major operand beside a
    transposed one, or a transposed slice, is copied row-major first on a CPU."""
    build, shape, copied = CASES[case]
    a = (rand(shape, seed=3) * 50).astype(dtype)
    if case == "three axes, permuted":
        a = rand(shape, seed=3).astype(np.float64 if dtype == np.float64 else np.float32)
    w = (rand(shape[0], seed=4) * 10).astype(dtype)
    m, tw = clients.asarray(a), clients.asarray(w)
    with clients.inspect() as rec:
        got = build(m, tw)
        values = got.numpy()
    want = build(a, w)
    np.testing.assert_allclose(values, want, rtol=1e-6)
    copies = [k for k in rec.kernels if COPY in " ".join(k.ops)]
    assert len(copies) == (1 if on_cpu() and copied else 0)
    assert len(rec.kernels) == len(copies) + 1
    if copies:
        assert COPY in rec.explain()
    if not copied:  # (numpy's result keeps its operands' order: so does ours)
        assert got.strides_elements == tuple(s // want.itemsize for s in want.strides)


def test_small_transposes_and_recomputed_values_are_read_in_place():
    a = rand((30, 40))
    m = clients.asarray(a)
    with clients.inspect() as rec:  # below PACK_TRANSPOSED_MIN
        np.testing.assert_allclose((m.T + 1.0).numpy(), a.T + 1, rtol=1e-6)
    assert len(rec.kernels) == 1
    row = rand((1, 70000))
    r = clients.asarray(row)
    with clients.inspect() as rec:  # a row's transpose is a column, in order already: no copy
        np.testing.assert_allclose((r.T * 2.0).numpy(), row.T * 2, rtol=1e-6)
    assert len(rec.kernels) == 1
    b = rand((300, 300))
    t = clients.asarray(b)
    with clients.inspect() as rec:  # a value of the block read transposed: recomputed, one kernel
        y = t * 3.0 + 1.0
        np.testing.assert_allclose((y - y.T).numpy(), (b * 3 + 1) - (b * 3 + 1).T, rtol=1e-5, atol=1e-5)
    assert len(rec.kernels) == 1


def test_copies_replay_under_jit_and_the_run_cache_and_give_their_buffers_back(small_copies, baseline):
    f = clients.jit(lambda m: m - m.T * 0.5)
    for seed in range(4):
        a = rand((33, 33), seed=seed)
        m = clients.asarray(a)
        np.testing.assert_allclose(f(m).numpy(), a - a.T * np.float32(0.5), rtol=1e-6)
        np.testing.assert_allclose((m.T + 2.0).numpy(), a.T + 2, rtol=1e-6)  # (lazy: a run replayed)
    stats = clients.stats()
    assert stats["jit_replays"] >= 2 and stats["run_replays"] >= 1
    del m
    settle()
    assert clients.stats()["buffers_live"] == baseline


PERMUTED = [((5, 7), (1, 0)), ((3, 4, 6), (2, 0, 1)), ((3, 4, 6), (0, 2, 1)), ((2, 3, 4, 5), (3, 1, 0, 2))]


@pytest.mark.parametrize("shape, order", PERMUTED)
@pytest.mark.parametrize("name", ["sum", "prod", "max", "min", "mean", "argmax", "argmin"])
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions_of_a_permuted_block_run_in_its_memory_order(shape, order, name, keepdims):
    """A reduction of a permuted dense block (what an element-wise op of `x.T` leaves)
    reduces the block in memory order and puts the kept axes back in the view's order:
    numpy's values and shapes for every axis choice; the work before it stays its prologue."""
    a = rand(shape, seed=7).astype(np.float64) + 0.5
    x = clients.permute_dims(clients.asarray(a), order)
    v = np.transpose(a, order)
    ndim = len(shape)
    choices = [None, 0, ndim - 1, -2, (0, ndim - 1)] if name not in ("argmax", "argmin") else [0, 1, -1]
    for axis in choices:
        fn, ref = getattr(clients, name), getattr(np, name)
        with clients.inspect() as rec:
            got = fn(clients.exp(x) * 0.5, axis=axis, keepdims=keepdims)
            values = got.numpy()
        want = ref(np.exp(v) * 0.5, axis=axis, keepdims=keepdims)
        assert values.shape == want.shape, (axis, values.shape, want.shape)
        np.testing.assert_allclose(values, want, rtol=1e-9)
        assert all(k.kind == "reduce" for k in rec.kernels), (axis, rec.kernels)


def test_a_matrix_times_vector_of_a_transposed_value_is_one_reduction():
    a, v = rand((300, 200), seed=8), rand(300, seed=9)
    x, w = clients.asarray(a), clients.asarray(v)
    with clients.inspect() as rec:
        got = ((x.T * 2.0) @ w).numpy()
    np.testing.assert_allclose(got, (a.T * 2) @ v, rtol=1e-4, atol=1e-4)
    assert {k.kind for k in rec.kernels} == {"reduce"} and len(rec.kernels) <= 2
    assert rec.kernels[0].ops[:3] == ["multiply", "multiply", "sum"]


def test_a_requested_dtype_and_an_in_place_update_keep_their_meaning():
    a = np.arange(12 * 7, dtype=np.int32).reshape(12, 7) - 40
    t = clients.asarray(a)
    got = clients.sum(t.T * 3, axis=1, dtype=clients.int32)
    want = np.sum(a.T * 3, axis=1, dtype=np.int32)
    assert got.dtype == np.int32 and got.shape == want.shape
    np.testing.assert_array_equal(got.numpy(), want)
    y = t.T + 1  # a view of a value run in memory order
    y += 5  # rebinding: later ops read the updated value, not the one the view came from
    y[0, :] = 0
    want = np.vstack([np.zeros((1, 12)), (a.T + 6)[1:]])
    np.testing.assert_array_equal((y * 2).numpy(), want * 2)
    np.testing.assert_array_equal(clients.sum(y, axis=0).numpy(), want.sum(0))


def test_a_value_run_in_memory_order_then_read_transposed_is_written_and_copied_on_a_cpu(small_copies):
    """`x - y.T * 2`: y.T * 2 runs in y's memory order; the subtraction reads that value
    transposed. On a CPU the value is written and copied row-major before the block
    (recomputed, y would be read down its columns); a value the block also reads in its
    own order (`y - y.T`: test_small_transposes_...) is recomputed still; a GPU recomputes."""
    a, b = rand((40, 30), seed=1), rand((30, 40), seed=2)
    x, y = clients.asarray(a), clients.asarray(b)
    with clients.inspect() as rec:
        got = (x - y.T * 2.0).numpy()
    np.testing.assert_allclose(got, a - b.T * 2, rtol=1e-6)
    if on_cpu():
        assert [k.ops[0] for k in rec.kernels][0::2] == ["multiply", "subtract"]
        assert COPY in rec.kernels[1].ops[0] and len(rec.kernels) == 3
    else:
        assert [k.ops for k in rec.kernels] == [["multiply", "subtract"]]


def test_a_split_block_whose_second_part_reads_no_view_of_the_value_runs():
    """Transposes around a where and a cast (found by fuzzing): the block splits after a
    value its second part reads through no view; staging had no view to place and
    failed the block."""
    rng = np.random.default_rng(0)
    x, y = rng.uniform(-1.5, 1.5, (300, 300)), rng.integers(-3, 4, (300, 300))
    t = clients.asarray(x).T
    w = clients.astype(clients.where(t > 0, t, -t).T, clients.int64)
    got = clients.abs(clients.minimum(clients.asarray(y).T, w).T).numpy()
    nt = x.T
    want = np.abs(np.minimum(y.T, np.where(nt > 0, nt, -nt).T.astype(np.int64)).T)
    np.testing.assert_array_equal(got, want)
