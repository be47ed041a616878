"""Transposed inputs of element-wise blocks on CPU devices, copied row-major first.

A block that reads a matrix down its columns (`m.T + 1`, `m - m.T`) touches one element
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


CASES = {
    "plus a scalar": (lambda m, w: m.T + 1, (37, 21)),
    "minus its own transpose": (lambda m, w: m - m.T, (40, 40)),
    "a slice with an offset, transposed": (lambda m, w: m[3:, 5:].T * 2, (45, 33)),
    "times a row broadcast": (lambda m, w: m.T * w[None, :], (24, 50)),
    "read twice, copied once": (lambda m, w: m.T + m.T * 3, (30, 20)),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
@pytest.mark.parametrize("case", CASES)
def test_blocks_reading_a_transposed_input_give_numpys_values(case, dtype, small_copies):
    build, shape = CASES[case]
    a = (rand(shape, seed=3) * 50).astype(dtype)
    w = (rand(shape[0], seed=4) * 10).astype(dtype)
    m, tw = clients.asarray(a), clients.asarray(w)
    with clients.inspect() as rec:
        got = build(m, tw).numpy()
    np.testing.assert_allclose(got, build(a, w), rtol=1e-6)
    copies = [k for k in rec.kernels if COPY in " ".join(k.ops)]
    assert len(copies) == (1 if on_cpu() else 0)
    assert len(rec.kernels) == len(copies) + 1
    if copies:
        assert COPY in rec.explain()


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
