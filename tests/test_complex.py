"""complex64 and complex128 against numpy: promotion, creation, casts, arithmetic and every
element-wise function through fusion, reductions, scans, matmul, views, indexing, errors.

The special cases of the functions (infinities, NaNs, signed zeros) are the kernels' own
tests (test_complex_math.py); here the values flow through the library."""

from __future__ import annotations

import numpy as np
import pytest

import clients
from tests.conftest import server_settings

COMPLEX = [np.complex64, np.complex128]
# A relative error fitting each dtype's precision after a few roundings.
RTOL = {np.complex64: 2e-5, np.complex128: 1e-12}


def needs_device_dtype(dtype) -> None:
    if np.dtype(dtype) == np.complex128 and not clients.client_for().fp64:
        pytest.skip("no fp64 on this device: no complex128")


def values(dtype, n: int, seed: int, scale: float = 2.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    real = np.dtype(dtype).type(0).real.dtype
    return (rng.uniform(-scale, scale, n).astype(real) + 1j * rng.uniform(-scale, scale, n).astype(real)).astype(dtype)


def close(got: clients.Tensor, want: np.ndarray, rtol: float | None = None) -> None:
    host = got.numpy()
    assert host.dtype == want.dtype, (host.dtype, want.dtype)
    assert host.shape == want.shape, (host.shape, want.shape)
    rtol = RTOL[want.dtype.type] if rtol is None and want.dtype.kind == "c" else rtol or 1e-5
    got128, want128 = host.astype(np.complex128), want.astype(np.complex128)
    finite = np.isfinite(want128)
    for part in (np.real, np.imag):  # (infinities and NaNs where numpy has them)
        np.testing.assert_array_equal(part(got128[~finite]), part(want128[~finite]))
    err = np.abs(got128[finite] - want128[finite])
    bound = rtol * np.maximum(np.abs(want128[finite]), 1.0)
    assert np.all(err <= bound), f"max error {err.max()} (at {np.argmax(err - bound)})"


@pytest.fixture(params=COMPLEX, ids=lambda d: d.__name__)
def dtype(request):
    needs_device_dtype(request.param)
    return request.param


def test_the_namespace_has_both_complex_dtypes_and_lists_them():
    info = clients.__array_namespace_info__()
    fp64 = clients.client_for().fp64
    listed = info.dtypes(kind="complex floating")
    assert listed == ({"complex64": clients.complex64, "complex128": clients.complex128} if fp64
                      else {"complex64": clients.complex64})
    assert info.default_dtypes()["complex floating"] == (clients.complex128 if fp64 else clients.complex64)
    assert clients.isdtype(clients.complex64, "complex floating")
    assert clients.isdtype(clients.complex128, "numeric")
    assert not clients.isdtype(clients.complex64, "real floating")
    assert clients.finfo(clients.complex64).bits == 32  # (its components': the standard's rule)


@pytest.mark.parametrize(("left", "right", "want"), [
    (np.complex64, np.float32, np.complex64),
    (np.complex64, np.float64, np.complex128),
    (np.complex64, np.int32, np.complex128),
    (np.complex64, np.uint8, np.complex64),
    (np.complex128, np.complex64, np.complex128),
    (np.float32, np.complex64, np.complex64),
])
def test_promotion_follows_numpy(left, right, want):
    for d in (left, right, want):
        needs_device_dtype(d)
    needs_device_dtype(np.float64) if np.float64 in (left, right) else None
    a, b = values(np.complex128, 5, 1).astype(left) if np.dtype(left).kind == "c" else np.arange(5).astype(left), \
        values(np.complex128, 5, 2).astype(right) if np.dtype(right).kind == "c" else np.arange(5).astype(right)
    got = clients.asarray(a) + clients.asarray(b)
    assert got.dtype == want
    assert clients.result_type(clients.asarray(a), clients.asarray(b)) == want
    close(got, (a + b).astype(want))


def test_python_complex_scalars_are_weak():
    x32 = clients.asarray(np.arange(4, dtype=np.float32))
    assert (x32 + 1j).dtype == clients.complex64  # (a complex scalar takes the float's precision)
    assert (2j * x32).dtype == clients.complex64
    close(x32 * (2 - 1j), np.arange(4, dtype=np.float32) * np.complex64(2 - 1j))
    z = clients.asarray(values(np.complex64, 4, 3))
    assert (z + 1.5).dtype == clients.complex64 and (z * 2).dtype == clients.complex64
    assert clients.result_type(clients.float32, 1j) == clients.complex64
    if clients.client_for().fp64:
        assert clients.full((2,), 1 + 2j).dtype == clients.complex128
        assert (clients.asarray(np.arange(3)) * 1j).dtype == clients.complex128  # (int64 with complex)


def test_creation_and_casts(dtype):
    a = values(dtype, 7, 4)
    x = clients.asarray(a)
    assert x.dtype == dtype
    close(x, a)
    close(clients.full((2, 3), 1.5 - 2j, dtype=dtype), np.full((2, 3), 1.5 - 2j, dtype=dtype))
    close(clients.zeros((3,), dtype=dtype), np.zeros(3, dtype))
    close(clients.ones((3,), dtype=dtype), np.ones(3, dtype))
    close(clients.eye(3, dtype=dtype), np.eye(3, dtype=dtype))
    close(clients.linspace(0, 1 + 2j, 5, dtype=dtype), np.linspace(0, 1 + 2j, 5, dtype=dtype))
    ints = np.array([-3, 0, 7], np.int16)
    close(clients.astype(clients.asarray(ints), dtype), ints.astype(dtype))
    close(clients.astype(clients.asarray(np.array([True, False])), dtype), np.array([1, 0], dtype))
    nonzero = np.array([0, 1j, 2, 0j], dtype)
    np.testing.assert_array_equal(clients.astype(clients.asarray(nonzero), clients.bool).numpy(), nonzero != 0)
    other = np.complex64 if dtype == np.complex128 else np.complex128
    if clients.client_for().fp64:
        close(clients.astype(x, other), a.astype(other))
    assert complex(x[1]) == complex(a[1])


def test_a_chain_over_complex_values_is_one_kernel(dtype):
    a, b = values(dtype, 1000, 5), values(dtype, 1000, 6)
    x, y = clients.asarray(a), clients.asarray(b)
    with clients.inspect() as rec:
        got = clients.exp(x * y - 0.5j) / (clients.conj(y) + 3) + clients.abs(x) * clients.real(y)
        host = got.numpy()
    assert len(rec.kernels) == 1, rec.explain()
    want = np.exp(a * b - dtype(0.5j)) / (np.conj(b) + 3) + np.abs(a) * b.real
    close(got, want.astype(dtype))
    assert host.dtype == dtype


UNARY = ["exp", "expm1", "log", "log1p", "log2", "log10", "sqrt", "sin", "cos", "tan", "sinh", "cosh", "tanh",
         "asin", "acos", "atan", "asinh", "acosh", "atanh", "square", "negative", "positive", "conj", "round"]


@pytest.mark.parametrize("name", UNARY)
def test_unary_functions_match_numpy(dtype, name):
    a = values(dtype, 257, 7, scale=1.5)
    a[:4] = [0, 1, -1j, 0.5 + 0.5j]
    got = getattr(clients, name)(clients.asarray(a))
    with np.errstate(all="ignore"):
        want = getattr(np, {"asin": "arcsin", "acos": "arccos", "atan": "arctan", "asinh": "arcsinh",
                            "acosh": "arccosh", "atanh": "arctanh"}.get(name, name))(a)
    close(got, want, rtol=5 * RTOL[dtype])


def test_abs_real_imag_give_the_real_dtype_and_sign_reciprocal_predicates(dtype):
    a = values(dtype, 100, 8)
    a[:3] = [0, np.nan + 1j, complex(np.inf, 1)]
    real = np.dtype(dtype).type(0).real.dtype
    x = clients.asarray(a)
    with np.errstate(all="ignore"):
        for name, want in (("abs", np.abs(a)), ("real", a.real), ("imag", a.imag)):
            got = getattr(clients, name)(x)
            assert got.dtype == real
            np.testing.assert_allclose(got.numpy(), want, rtol=RTOL[dtype])
        for name in ("isnan", "isinf", "isfinite"):
            np.testing.assert_array_equal(getattr(clients, name)(x).numpy(), getattr(np, name)(a))
        want_sign = np.where(a == 0, 0, a / np.abs(a))
        close(clients.sign(x[3:]), want_sign[3:].astype(dtype))
        assert complex(clients.sign(x[0])) == 0
        close(clients.reciprocal(x[3:]), (1 / a[3:]).astype(dtype))


def test_arithmetic_pow_and_comparisons(dtype):
    a, b = values(dtype, 300, 9), values(dtype, 300, 10)
    b[::7] = a[::7]
    x, y = clients.asarray(a), clients.asarray(b)
    close(x + y, a + b)
    close(x - y, a - b)
    close(x * y, a * b)
    close(x / y, a / b)
    close(-x, -a)
    close(x ** y, a ** b, rtol=20 * RTOL[dtype])
    close(x ** 2, a ** 2)
    close(x ** 3, a ** 3)
    close(x ** 0.5, np.sqrt(a))
    close(x ** -1, (1 / a).astype(dtype))
    np.testing.assert_array_equal((x == y).numpy(), a == b)
    np.testing.assert_array_equal((x != y).numpy(), a != b)
    np.testing.assert_array_equal(clients.equal(x, 1j).numpy(), a == 1j)
    np.testing.assert_array_equal(clients.logical_and(x, y).numpy(), np.logical_and(a, b))


@pytest.mark.parametrize("axis", [None, 0, 1, (0, 1)])
def test_sum_prod_mean(dtype, axis):
    a = values(dtype, 12 * 40, 11, scale=1.0).reshape(12, 40)
    x = clients.asarray(a)
    close(clients.sum(x, axis=axis), np.asarray(a.sum(axis=axis)), rtol=10 * RTOL[dtype])
    close(clients.mean(x, axis=axis), np.asarray(a.mean(axis=axis)), rtol=10 * RTOL[dtype])
    p = a[:, :6] * 1.2  # (products of few factors near 1: no overflow, no underflow)
    close(clients.prod(clients.asarray(p), axis=axis), np.asarray(p.prod(axis=axis)), rtol=10 * RTOL[dtype])
    assert clients.sum(x, axis=axis).dtype == dtype


def test_reduction_of_a_fused_prologue_and_a_long_row(dtype):
    a = values(dtype, 3 * 100_000, 12, scale=1.0).reshape(3, 100_000)
    x = clients.asarray(a)
    with clients.inspect() as rec:
        got = clients.sum(x * 1j + 1, axis=1)
        got.numpy()
    assert "reduce" in {k.kind for k in rec.kernels}
    close(got, (a * 1j + 1).sum(axis=1), rtol=100 * RTOL[dtype])
    close(clients.sum(clients.asarray(a.ravel())), np.asarray(a.sum()), rtol=100 * RTOL[dtype])


def test_variance_is_real(dtype):
    a = values(dtype, 64, 13)
    got = clients.var(clients.asarray(a))
    assert got.dtype == np.dtype(dtype).type(0).real.dtype
    np.testing.assert_allclose(got.numpy(), np.var(a), rtol=10 * RTOL[dtype])


def test_cumulative_sum_and_prod(dtype):
    a = values(dtype, 5 * 9, 14, scale=1.0).reshape(5, 9)
    x = clients.asarray(a)
    close(clients.cumulative_sum(x, axis=1), np.cumsum(a, axis=1), rtol=10 * RTOL[dtype])
    close(clients.cumulative_prod(x, axis=0), np.cumprod(a, axis=0), rtol=10 * RTOL[dtype])
    close(clients.cumulative_sum(x, axis=1, include_initial=True),
          np.concatenate([np.zeros((5, 1), dtype), np.cumsum(a, axis=1)], axis=1), rtol=10 * RTOL[dtype])
    long = values(dtype, 70_000, 15, scale=1.0)
    close(clients.cumulative_sum(clients.asarray(long)), np.cumsum(long.astype(np.complex128)).astype(dtype),
          rtol=100 * RTOL[dtype])


@pytest.mark.parametrize("case", ["plain", "batched", "transposed", "epilogue"])
def test_matmul(dtype, case):
    a, b = values(dtype, 3 * 33 * 70, 16).reshape(3, 33, 70), values(dtype, 3 * 70 * 41, 17).reshape(3, 70, 41)
    x, y = clients.asarray(a), clients.asarray(b)
    if case == "plain":
        got, want = x[0] @ y[0], a[0] @ b[0]
    elif case == "batched":
        got, want = x @ y, a @ b
    elif case == "transposed":
        got, want = clients.matrix_transpose(y[0]) @ clients.matrix_transpose(x[0]), b[0].T @ a[0].T
    else:
        with clients.inspect() as rec:
            got = clients.exp((x[1] @ y[1]) * 0.01j) + 1
            got.numpy()
        assert len(rec.kernels) == 1, rec.explain()
        want = np.exp((a[1] @ b[1]) * dtype(0.01j)) + 1
    close(got, want.astype(dtype), rtol=20 * RTOL[dtype])


def test_vecdot_conjugates_its_first_argument(dtype):
    a, b = values(dtype, 4 * 30, 18).reshape(4, 30), values(dtype, 4 * 30, 19).reshape(4, 30)
    close(clients.vecdot(clients.asarray(a), clients.asarray(b)), np.sum(np.conj(a) * b, axis=-1),
          rtol=10 * RTOL[dtype])


def test_views_indexing_where_concat(dtype):
    a, b = values(dtype, 6 * 8, 20).reshape(6, 8), values(dtype, 6 * 8, 21).reshape(6, 8)
    x, y = clients.asarray(a), clients.asarray(b)
    close(x[1:5:2, ::-3], a[1:5:2, ::-3])
    close(x.T + 1, a.T + 1)
    close(clients.where(clients.real(x) > 0, x, y), np.where(a.real > 0, a, b))
    close(clients.concat([x, y], axis=1), np.concatenate([a, b], axis=1))
    close(clients.take(x, clients.asarray(np.array([5, 0, 2])), axis=0), a[[5, 0, 2]])
    close(x[clients.asarray(a.real > 0)], a[a.real > 0])
    z = clients.asarray(a)
    z[2:4, 1] = 7 - 1j
    want = a.copy()
    want[2:4, 1] = 7 - 1j
    close(z, want)
    close(clients.reshape(clients.flip(x, axis=0), (-1,)), np.flip(a, axis=0).ravel())


@pytest.mark.parametrize("call", [
    lambda x: x < x, lambda x: clients.maximum(x, x), lambda x: clients.max(x), lambda x: clients.argmin(x),
    lambda x: clients.sort(x), lambda x: clients.argsort(x), lambda x: clients.floor(x), lambda x: x // x,
    lambda x: x % x, lambda x: clients.atan2(x, x), lambda x: clients.signbit(x), lambda x: x & x,
    lambda x: clients.astype(x, clients.float32), lambda x: clients.searchsorted(x, x), lambda x: float(x[0]),
    lambda x: clients.clip(x, 0),
], ids=["less", "maximum", "max", "argmin", "sort", "argsort", "floor", "floor_divide", "remainder", "atan2",
        "signbit", "bitwise_and", "astype_real", "searchsorted", "float", "clip"])
def test_what_complex_numbers_do_not_have_raises_type_error(call):
    x = clients.asarray(values(np.complex64, 4, 22))
    before = clients.stats()["pending_ops"]
    with pytest.raises(TypeError):
        call(x)
    assert clients.stats()["pending_ops"] == before  # (nothing queued by the refused call)
    close(x + 1, values(np.complex64, 4, 22) + 1)  # the tensor and the server are intact


def test_complex128_without_fp64_is_a_device_error(monkeypatch):
    client = clients.client_for()
    monkeypatch.setattr(client, "fp64", False)
    with pytest.raises(clients.DeviceError, match="complex128"):
        clients.asarray(np.zeros(2, np.complex128))
    with pytest.raises(clients.DeviceError, match="complex128"):
        clients.full((2,), 1j)  # (a Python complex is complex128 on its own)


def test_jit_replays_complex_work_with_new_scalars(dtype):
    @clients.jit
    def f(x, s):
        return clients.sum(clients.exp(x * s) * clients.conj(x), axis=-1)

    a = values(dtype, 4 * 50, 23, scale=0.5).reshape(4, 50)
    before = clients.stats()
    for s in (0.5j, 1 - 1j, -2 + 0.25j):
        close(f(clients.asarray(a), s), np.sum(np.exp(a * dtype(s)) * np.conj(a), axis=-1), rtol=50 * RTOL[dtype])
    after = clients.stats()
    assert after["jit_traces"] - before["jit_traces"] == 1
    assert after["jit_replays"] - before["jit_replays"] == 2


def test_a_custom_op_over_complex_values_sees_float2_and_fuses():
    # (a complex value in a custom expression is its OpenCL vector: .x real, .y imaginary)
    swap = clients.custom.elementwise("swap_parts", "(float2)(z.y, z.x)", inputs=("z",))
    a = values(np.complex64, 50, 24)
    x = clients.asarray(a)
    with clients.inspect() as rec:
        got = swap(x * 2) + 1j
        got.numpy()
    assert len(rec.kernels) == 1, rec.explain()
    close(got, (a.imag * 2 + 1j * a.real * 2 + 1j).astype(np.complex64))


def test_a_recurring_complex_block_replays_from_the_plan_store(dtype):
    a = values(dtype, 64, 25)
    x = clients.asarray(a)
    results = []
    with server_settings(run_cache_enabled=False):  # (else the third run is replayed from the run cache)
        for _ in range(3):  # (the first explores, the next ones replay its decision)
            before = clients.stats()
            got = clients.sqrt(x * x + 1j) - clients.conj(x)
            results.append(got.numpy())
            after = clients.stats()
    assert after["plan_hits"] > before["plan_hits"] and after["explorations"] == before["explorations"]
    for r in results:
        np.testing.assert_allclose(r, np.sqrt(a * a + 1j) - np.conj(a), rtol=10 * RTOL[dtype])
