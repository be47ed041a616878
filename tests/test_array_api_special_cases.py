"""Array API 2021.12 special cases where the device's math or numpy's semantics differ from
the standard: floor division with infinite operands, tanh at infinity, and reductions
of values written by `x[key] = v` (whose kernels read the element's flat index)."""

import numpy as np
import pytest

import clients

INF = np.inf


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_floor_divide_with_infinite_operands_is_floor_of_the_quotient(dtype):
    a = np.array([INF, INF, -INF, -INF, 1.0, -1.0, 1.0, -1.0, 0.0, -0.0], dtype)
    b = np.array([2.0, -2.0, 2.0, -2.0, -INF, INF, INF, -INF, INF, INF], dtype)
    # The standard's table: inf // finite keeps the sign rule, finite // inf is a signed 0
    # (numpy gives NaN and -1 there).
    want = np.array([INF, -INF, -INF, INF, -0.0, -0.0, 0.0, 0.0, 0.0, -0.0], dtype)
    ta, tb = clients.asarray(a), clients.asarray(b)
    for got in ((ta // tb).numpy(), clients.floor_divide(ta, tb).numpy()):
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_floor_divide_of_finite_values_still_matches_numpy(dtype):
    rng = np.random.default_rng(3)
    a = (rng.standard_normal(257) * 50).astype(dtype)
    b = (rng.standard_normal(257) * 5).astype(dtype)
    b[b == 0] = 1
    np.testing.assert_array_equal((clients.asarray(a) // clients.asarray(b)).numpy(), a // b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tanh_of_infinity_is_exactly_one(dtype):
    x = np.array([INF, -INF, -0.0, np.nan], dtype)
    got = clients.tanh(clients.asarray(x)).numpy()
    np.testing.assert_array_equal(got, np.tanh(x))
    assert np.signbit(got[2])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tanh_of_large_arguments_is_exactly_one(dtype):
    """numpy rounds tanh to exactly +-1 from 10 (float32) or 19 (float64) on;
    some device libraries stop one ulp short. Below, results agree to an ulp."""
    x = np.concatenate([np.linspace(8.0, 40.0, 161), -np.linspace(8.0, 40.0, 161), [1e30, -1e30]]).astype(dtype)
    got = clients.tanh(clients.asarray(x)).numpy()
    want = np.tanh(x)
    np.testing.assert_allclose(got, want, rtol=2 * np.finfo(dtype).eps, atol=0)
    far = np.abs(x) >= (10.0 if dtype == np.float32 else 19.0)
    np.testing.assert_array_equal(got[far], want[far])


@pytest.mark.parametrize("shape", [(), (1,), (2, 3)])
@pytest.mark.parametrize("name", ["sum", "prod", "max", "min", "mean", "var", "std"])
def test_reductions_read_values_written_by_setitem(shape, name):
    host = np.arange(1, 1 + int(np.prod(shape)), dtype=np.float32).reshape(shape)
    t = clients.asarray(host)
    key = (0,) * len(shape)
    t[key] = 7.0
    host[key] = 7.0
    got = getattr(clients, name)(t).numpy()
    np.testing.assert_allclose(got, getattr(np, name)(host), rtol=1e-6)
    t[key] = float("nan")
    assert np.isnan(getattr(clients, name)(t).numpy())
