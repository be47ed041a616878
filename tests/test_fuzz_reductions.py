"""Differential fuzzing of reductions and matmul with their fused neighbours.

Hypothesis draws a random input (dtype, shape, maybe a transposed or strided view), a short
element-wise prologue, a reduction over random axes (or a matrix product), and a short
epilogue; the value must match numpy's in lazy and in eager mode. Prologues before argmax
and argmin use exact ops only, so that both sides see identical values (ties included).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import clients
from tests.conftest import server_settings

FUZZ = settings(max_examples=25, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

EXACT = {
    "abs": (clients.abs, np.abs),
    "neg": (lambda x: -x, lambda x: -x),
    "double": (lambda x: x * 2, lambda x: x * 2),
    "plus1": (lambda x: x + 1, lambda x: x + 1),
}
INEXACT = {
    "tanh": (clients.tanh, np.tanh),
    "sin": (clients.sin, np.sin),
    "half": (lambda x: x * 0.5, lambda x: x * 0.5),
}
REDUCTIONS = ["sum", "max", "min", "mean", "prod", "argmax", "argmin"]
TOL = {np.dtype(np.float32): dict(rtol=2e-4, atol=1e-5), np.dtype(np.float64): dict(rtol=1e-9, atol=1e-12)}


@st.composite
def reduction_cases(draw):
    dtype = np.dtype(draw(st.sampled_from([np.float32, np.float64, np.int32, np.int64])))
    shape = tuple(draw(st.lists(st.integers(1, 9), min_size=1, max_size=3)))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    if dtype.kind == "f":
        data = rng.uniform(-2, 2, shape).astype(dtype)
    else:
        data = rng.integers(-4, 5, shape).astype(dtype)
    view = draw(st.sampled_from(["plain", "transposed", "reversed"]))
    name = draw(st.sampled_from(REDUCTIONS))
    if name == "prod":
        data = (data % 3 if dtype.kind == "i" else data * 0.5).astype(dtype)  # keep products small
    pool = dict(EXACT)
    if dtype.kind == "f" and not name.startswith("arg"):
        pool.update(INEXACT)
    prologue = draw(st.lists(st.sampled_from(sorted(pool)), max_size=3))
    ndim = len(shape)
    if name.startswith("arg"):
        axis = draw(st.one_of(st.none(), st.integers(-ndim, ndim - 1)))
    else:
        axis = draw(st.one_of(st.none(), st.integers(-ndim, ndim - 1),
                              st.lists(st.integers(0, ndim - 1), min_size=1, max_size=ndim, unique=True)
                              .map(tuple)))
    keepdims = draw(st.booleans())
    epilogue = draw(st.lists(st.sampled_from(["plus1", "double", "neg"]), max_size=2))
    return data, view, prologue, pool, name, axis, keepdims, epilogue


def _view(x, view):
    if view == "transposed":
        return x.T
    if view == "reversed":
        return x[::-1]
    return x


def _evaluate(xp_is_numpy, case):
    data, view, prologue, pool, name, axis, keepdims, epilogue = case
    x = data if xp_is_numpy else clients.asarray(data)
    x = _view(x, view)
    for step in prologue:
        x = pool[step][1 if xp_is_numpy else 0](x)
    if xp_is_numpy:
        out = getattr(np, name)(x, axis=axis, keepdims=keepdims)
        if name in ("sum", "prod") and x.dtype.kind == "i":
            out = np.asarray(out, dtype=np.int64)
    else:
        out = getattr(clients, name)(x, axis=axis, keepdims=keepdims)
    for step in epilogue:
        out = EXACT[step][1 if xp_is_numpy else 0](out)
    return np.asarray(out) if xp_is_numpy else out.numpy()


@pytest.mark.parametrize("mode", ["lazy", "eager"])
@FUZZ
@given(case=reduction_cases())
def test_random_reductions_match_numpy(mode, case):
    want = _evaluate(True, case)
    with server_settings(mode=mode):
        got = _evaluate(False, case)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.dtype, got.shape, want.dtype, want.shape)
    if want.dtype.kind == "f":
        np.testing.assert_allclose(got, want, **TOL[want.dtype])
    else:
        np.testing.assert_array_equal(got, want)


@st.composite
def matmul_cases(draw):
    dtype = np.dtype(draw(st.sampled_from([np.float32, np.float64])))
    m, k, n = (draw(st.integers(1, 20)) for _ in range(3))
    batch = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, batch + (m, k)).astype(dtype)
    b = rng.uniform(-1, 1, (k, n) if draw(st.booleans()) else batch + (k, n)).astype(dtype)
    transpose_b = draw(st.booleans())
    epilogue = draw(st.lists(st.sampled_from(["plus1", "double", "neg", "abs"]), max_size=3))
    return a, b, transpose_b, epilogue


@pytest.mark.parametrize("mode", ["lazy", "eager"])
@FUZZ
@given(case=matmul_cases())
def test_random_matmuls_match_numpy(mode, case):
    a, b, transpose_b, epilogue = case
    if transpose_b:
        b = np.ascontiguousarray(np.swapaxes(b, -1, -2))
    want = a @ (np.swapaxes(b, -1, -2) if transpose_b else b)
    for step in epilogue:
        want = EXACT[step][1](want)
    with server_settings(mode=mode):
        tb = clients.asarray(b)
        got = clients.asarray(a) @ (clients.permute_dims(tb, tuple(range(b.ndim - 2)) + (b.ndim - 1, b.ndim - 2))
                                    if transpose_b else tb)
        for step in epilogue:
            got = EXACT[step][0](got)
        got = got.numpy()
    np.testing.assert_allclose(got, want, **TOL[want.dtype])
