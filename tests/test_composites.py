"""Softmax and layer-norm written with clients functions: numpy's values, at most 3 kernels."""

from __future__ import annotations

import numpy as np
import pytest

import clients
from tests.conftest import rand


def softmax(x, axis=-1):
    m = clients.max(x, axis=axis, keepdims=True)
    e = clients.exp(x - m)
    return e / clients.sum(e, axis=axis, keepdims=True)


def layer_norm(x, gamma, beta, eps=1e-5):
    mu = clients.mean(x, axis=-1, keepdims=True)
    xc = x - mu
    var = clients.mean(xc * xc, axis=-1, keepdims=True)
    return xc / clients.sqrt(var + eps) * gamma + beta


def np_softmax(a, axis=-1):
    e = np.exp(a - a.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def np_layer_norm(a, g, b, eps=1e-5):
    mu = a.mean(-1, keepdims=True)
    xc = a - mu
    return xc / np.sqrt((xc * xc).mean(-1, keepdims=True) + eps) * g + b


@pytest.mark.parametrize("shape", [(7, 33), (64, 256), (3, 4, 129)])
def test_softmax_in_three_kernels(shape):
    a = rand(shape) * 4
    with clients.inspect() as rec:
        got = softmax(clients.asarray(a)).numpy()
    np.testing.assert_allclose(got, np_softmax(a), rtol=1e-5, atol=1e-7)
    assert len(rec.kernels) <= 3
    assert [k.kind for k in rec.kernels].count("reduce") == 2


def test_softmax_over_a_leading_axis():
    a = rand((40, 6))
    with clients.inspect() as rec:
        got = softmax(clients.asarray(a), axis=0).numpy()
    np.testing.assert_allclose(got, np_softmax(a, axis=0), rtol=1e-5, atol=1e-7)
    assert len(rec.kernels) <= 3


@pytest.mark.parametrize("shape", [(5, 48), (128, 300)])
def test_layer_norm_in_three_kernels(shape):
    a = rand(shape) * 3 + 1
    g, b = rand(shape[-1], seed=1), rand(shape[-1], seed=2)
    x, tg, tb = clients.asarray(a), clients.asarray(g), clients.asarray(b)
    with clients.inspect() as rec:
        got = layer_norm(x, tg, tb).numpy()
    np.testing.assert_allclose(got, np_layer_norm(a, g, b), rtol=1e-4, atol=1e-5)
    assert len(rec.kernels) <= 3


def test_prologue_value_kept_by_the_user_is_written_by_the_reduction():
    a = rand((9, 70))
    x = clients.asarray(a)
    with clients.inspect() as rec:
        e = clients.exp(x * 0.5)  # kept: the reduction kernel writes it as it reads it
        total = clients.sum(e, axis=1)
        got_total = total.numpy()
    got_e = e.numpy()
    assert len(rec.kernels) == 1
    np.testing.assert_allclose(got_total, np.exp(a * 0.5).sum(axis=1), rtol=1e-5)
    np.testing.assert_allclose(got_e, np.exp(a * 0.5), rtol=1e-6)


@pytest.mark.parametrize("strategy", ["group", "loop"])
def test_both_reduction_strategies_agree_with_numpy(strategy):
    """The work-group tree (the GPU strategy) and the row loop (the CPU one), forced."""
    from tests.conftest import server_settings

    a = rand((5, 700)) * 3
    a[2, 13] = np.nan
    with server_settings(reduce_strategy=strategy), clients.inspect() as rec:
        x = clients.asarray(a)
        got = {
            "sum": clients.sum(clients.exp(x * 0.1), axis=1).numpy(),
            "max": clients.max(x, axis=1).numpy(),
            "min": clients.min(x * 2.0, axis=-1, keepdims=True).numpy(),
            "argmax": clients.argmax(x, axis=1).numpy(),
            "argmin": clients.argmin(x, axis=1).numpy(),
            "prod": clients.prod(x[:, :20] * 0.5 + 1.0, axis=1).numpy(),
        }
        soft = softmax(clients.asarray(a[[0, 1, 3, 4]])).numpy()
    from tests.conftest import assert_variants

    assert_variants(rec, "reduce", strategy, 8)
    np.testing.assert_allclose(got["sum"], np.exp(a * np.float32(0.1)).sum(axis=1), rtol=1e-5)
    np.testing.assert_array_equal(got["max"], a.max(axis=1))
    np.testing.assert_array_equal(got["min"], (a * np.float32(2)).min(axis=-1, keepdims=True))
    np.testing.assert_array_equal(got["argmax"], a.argmax(axis=1))
    np.testing.assert_array_equal(got["argmin"], a.argmin(axis=1))
    np.testing.assert_allclose(got["prod"], (a[:, :20] * np.float32(0.5) + 1).prod(axis=1), rtol=1e-4)
    np.testing.assert_allclose(soft, np_softmax(a[[0, 1, 3, 4]]), rtol=1e-5, atol=1e-7)
