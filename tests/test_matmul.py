"""Matmul against numpy: 2-D, batched, 1-D operands, views, dtypes; the epilogue fuses."""

from __future__ import annotations

import numpy as np
import pytest

import clients
from tests.conftest import rand

TOL = {np.float32: dict(rtol=1e-4, atol=1e-4), np.float64: dict(rtol=1e-10, atol=1e-10)}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mkn", [(1, 1, 1), (3, 5, 2), (64, 64, 64), (67, 130, 33), (8, 1, 9)])
def test_2d_against_numpy(dtype, mkn, via):
    m, k, n = mkn
    a, b = rand((m, k), dtype, 1), rand((k, n), dtype, 2)
    got = via(clients.matmul)(clients.asarray(a), clients.asarray(b)).numpy()
    assert got.dtype == dtype and got.shape == (m, n)
    np.testing.assert_allclose(got, a @ b, **TOL[dtype])


def test_integers_exactly():
    rng = np.random.default_rng(0)
    a, b = rng.integers(-9, 9, (6, 11), dtype=np.int64), rng.integers(-9, 9, (11, 5), dtype=np.int64)
    np.testing.assert_array_equal(clients.matmul(clients.asarray(a), clients.asarray(b)).numpy(), a @ b)


@pytest.mark.parametrize("sa, sb", [((2, 3, 4), (2, 4, 5)), ((3, 1, 4, 6), (2, 6, 3)), ((4, 6), (5, 6, 2)),
                                    ((2, 1, 3, 4), (1, 4, 4, 2))])
def test_batched_with_broadcast(sa, sb, via):
    a, b = rand(sa, np.float64, 3), rand(sb, np.float64, 4)
    got = via(clients.matmul)(clients.asarray(a), clients.asarray(b)).numpy()
    np.testing.assert_allclose(got, a @ b, rtol=1e-10)


def test_vector_operands_follow_numpy():
    v, w, m = rand(7, np.float64, 1), rand(7, np.float64, 2), rand((7, 3), np.float64, 3)
    tv, tw, tm = clients.asarray(v), clients.asarray(w), clients.asarray(m)
    np.testing.assert_allclose((tv @ tm).numpy(), v @ m, rtol=1e-12)
    np.testing.assert_allclose((tm.T @ tv).numpy(), m.T @ v, rtol=1e-12)
    dot = tv @ tw
    assert dot.shape == ()
    np.testing.assert_allclose(float(dot), v @ w, rtol=1e-12)


def test_transposed_and_strided_views_need_no_copy(via):
    a = rand((40, 30), np.float64, 5)
    x = clients.asarray(a)
    run = via(lambda x: x[::2].T @ x[::2])
    with clients.inspect() as rec:
        got = run(x).numpy()
    np.testing.assert_allclose(got, a[::2].T @ a[::2], rtol=1e-10)
    assert len(rec.kernels) == 1 and rec.kernels[0].kind == "matmul"


def test_mixed_dtypes_promote():
    a, b = rand((4, 3), np.float32), rand((3, 2), np.float64)
    got = clients.asarray(a) @ clients.asarray(b)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got.numpy(), a.astype(np.float64) @ b, rtol=1e-6)


def test_empty_dimensions():
    a, b = np.zeros((0, 4), np.float32), rand((4, 3))
    assert (clients.asarray(a) @ clients.asarray(b)).numpy().shape == (0, 3)
    a, b = np.zeros((3, 0), np.float32), np.zeros((0, 2), np.float32)
    np.testing.assert_array_equal((clients.asarray(a) @ clients.asarray(b)).numpy(), np.zeros((3, 2)))


def test_bias_and_relu_epilogue_is_one_kernel(via):
    a, w, bias = rand((50, 70), seed=1), rand((70, 45), seed=2), rand(45, seed=3)
    x, tw, tb = clients.asarray(a), clients.asarray(w), clients.asarray(bias)
    run = via(lambda x, tw, tb: clients.maximum(x @ tw + tb, 0.0))
    with clients.inspect() as rec:
        got = run(x, tw, tb).numpy()
    np.testing.assert_allclose(got, np.maximum(a @ w + bias, 0), rtol=1e-4, atol=1e-4)
    assert len(rec.kernels) == 1
    assert rec.kernels[0].kind == "matmul" and rec.kernels[0].ops == ["matmul", "add", "maximum"]


def test_product_kept_by_the_user_is_written_too():
    a, w = rand((20, 30), seed=4), rand((30, 10), seed=5)
    x, tw = clients.asarray(a), clients.asarray(w)
    with clients.inspect() as rec:
        prod = x @ tw
        act = clients.tanh(prod)
        got_act = act.numpy()
    np.testing.assert_allclose(got_act, np.tanh(a @ w), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(prod.numpy(), a @ w, rtol=1e-4, atol=1e-4)
    assert len(rec.kernels) == 1


def test_bad_shapes_and_dtypes_raise_at_the_call():
    x = clients.asarray(rand((3, 4)))
    with pytest.raises(ValueError, match="do not align"):
        x @ clients.asarray(rand((5, 2)))
    with pytest.raises(ValueError, match="at least one dimension"):
        x @ clients.asarray(np.float32(2))
    with pytest.raises(TypeError, match="bool"):
        clients.asarray([[True]]) @ clients.asarray([[False]])
    with pytest.raises(ValueError, match="do not broadcast"):
        clients.asarray(rand((2, 3, 4))) @ clients.asarray(rand((3, 4, 5)))
    np.testing.assert_allclose((x @ x.T).numpy(), rand((3, 4)) @ rand((3, 4)).T, rtol=1e-5)


@pytest.mark.parametrize("mkn", [(70, 33, 130), (2100, 20, 2050)])
@pytest.mark.parametrize("strategy", ["tiled", "rows"])
def test_both_matmul_strategies_agree_with_numpy(strategy, mkn):
    """The tiled kernels (GPUs; 64 and 128 tiles) and the row kernel (CPUs), forced."""
    from tests.conftest import server_settings

    m, k, n = mkn
    a, w, bias = rand((m, k), seed=6), rand((k, n), seed=7), rand(n, seed=8)
    with server_settings(matmul_strategy=strategy):
        x, tw, tb = clients.asarray(a), clients.asarray(w), clients.asarray(bias)
        with clients.inspect() as rec:
            got = clients.maximum(x @ tw + tb, 0.0).numpy()
            got_t = (x[:5].T @ tw[:5]).numpy()
    np.testing.assert_allclose(got, np.maximum(a @ w + bias, 0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got_t, a[:5].T @ w[:5], rtol=1e-4, atol=1e-4)
    assert [r.kind for r in rec.kernels] == ["matmul", "matmul"]
    assert all(r.variant.startswith(strategy) for r in rec.kernels), [r.variant for r in rec.kernels]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("width", [1, 2, 4, 8, 16])
def test_row_kernel_at_every_cpu_vector_width(dtype, width):
    """The CPU kernel's layout follows the vector registers (64-byte ones: 8-row register
    blocks; narrower: 6-row blocks; width 1 is the scalar fallback); every layout covers
    ragged edges, batches and strided operands."""
    from fusion_server.runtime.widths import VectorWidths
    from tests.conftest import server_settings

    rng = np.random.default_rng(width)
    a = rng.integers(-3, 4, (2, 53, 70)).astype(dtype)
    w = rng.integers(-3, 4, (70, 37)).astype(dtype)
    with server_settings(matmul_strategy="rows", widths=VectorWidths.uniform(width)), clients.inspect() as rec:
        x, tw = clients.asarray(a), clients.asarray(w)
        got = (x @ tw + 1).numpy()
        got_t = (tw.T @ x[0].T).numpy()
    vector = min(64, np.dtype(dtype).itemsize * width)
    assert [r.variant for r in rec.kernels if r.kind == "matmul"] == [f"rows, {vector}-byte vectors"] * 2
    np.testing.assert_array_equal(got, a @ w + 1)
    np.testing.assert_array_equal(got_t, w.T @ a[0].T)


def test_index_dependent_work_after_a_matmul_runs_in_its_own_kernel():
    """tril, eye and item assignment read the element's flat index, which a matmul
    kernel's epilogue does not have: they run after it, with numpy's values."""
    a = rand((5, 5))
    x = clients.asarray(a)
    np.testing.assert_allclose(clients.tril(x @ x).numpy(), np.tril(a @ a), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(((x @ x) * clients.eye(5)).numpy(), (a @ a) * np.eye(5), rtol=1e-5, atol=1e-5)
    y = x @ x
    y[0] = 5.0
    want = a @ a
    want[0] = 5.0
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-5)
