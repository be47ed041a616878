"""Every integer dtype of the standard (int8 ... int64, uint8 ... uint64) against numpy:
wraparound arithmetic over the whole range, numpy's promotion between signed and
unsigned, Python scalars, casts, reductions, sort, indexing, views, matmul, fusion."""

from __future__ import annotations

import numpy as np
import pytest

import clients
from tests.conftest import server_settings

SMALL = [np.int8, np.int16, np.uint8, np.uint16, np.uint32, np.uint64]
INTEGERS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


def full_range(dtype, n: int, seed: int) -> np.ndarray:
    """n values over the dtype's whole range, its extremes and 0, 1, -1 (where it has them)."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(seed)
    a = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    a[:5] = [info.min, info.max, 0, 1, info.max - 1]
    return a


def same(got: clients.Tensor, want: np.ndarray) -> None:
    host = got.numpy()
    assert host.dtype == want.dtype, (host.dtype, want.dtype)
    np.testing.assert_array_equal(host, want)


@pytest.mark.parametrize("dtype", INTEGERS, ids=lambda d: d.__name__)
def test_arithmetic_wraps_as_numpy(dtype):
    a, b = full_range(dtype, 1031, 1), full_range(dtype, 1031, 2)
    b[7:12] = 0  # division by zero gives 0, as numpy (which warns)
    if np.iinfo(dtype).min < 0:
        b[12], a[12] = -1, np.iinfo(dtype).min  # MIN // -1 wraps
    x, y = clients.asarray(a), clients.asarray(b)
    assert x.dtype == dtype
    safe = np.where(b == 0, 1, b)
    with np.errstate(all="ignore"):
        same(x + y, a + b)
        same(x - y, a - b)
        same(x * y, a * b)
        same(-x, -a)
        same(abs(x), np.abs(a))
        same(x // y, np.where(b == 0, 0, a // safe))
        same(x % y, np.where(b == 0, 0, a % safe))
        same(x ** 3, a ** 3)
        same(clients.square(x), np.square(a))
        same(clients.sign(x), np.sign(a))
        same(clients.maximum(x, y), np.maximum(a, b))
        same(clients.minimum(x, y), np.minimum(a, b))
    same(x & y, a & b)
    same(x | y, a | b)
    same(x ^ y, a ^ b)
    same(~x, ~a)
    bits = np.iinfo(dtype).bits
    counts = (b % (bits + 3)).astype(dtype)  # counts past the width shift every bit out
    same(x << clients.asarray(counts), np.left_shift(a, counts))
    same(x >> clients.asarray(counts), np.right_shift(a, counts))
    for name in ("equal", "less", "greater_equal"):
        same(getattr(clients, name)(x, y), getattr(np, name)(a, b))


@pytest.mark.parametrize("dtype", INTEGERS, ids=lambda d: d.__name__)
def test_overflow_wraps_where_the_compiler_could_assume_it_does_not(dtype):
    """A wrapped value widened, compared or tested for its sign: with signed arithmetic
    spelled plainly in C, the drivers' compilers assumed no overflow (an int32 sum cast to
    int64 kept its carry, abs(INT_MIN) < 0 was false, the sign of a wrapped square was 1),
    in vector code and scalar tails alike."""
    info = np.iinfo(dtype)
    a = np.resize(np.array([info.max, info.min, info.max - 1, info.min + 1, -1 if info.min else 1, 3, 0],
                           dtype), 37)
    b = np.resize(np.array([1, info.min, 2, info.max, info.max, -7 if info.min else 7, 5], dtype), 37)
    x, y = clients.asarray(a), clients.asarray(b)
    wide = np.float64 if dtype == np.uint64 else np.int64
    with np.errstate(over="ignore"):
        same((x + y).astype(wide), (a + b).astype(wide))
        same((x - y).astype(wide), (a - b).astype(wide))
        same((x * y).astype(wide), (a * b).astype(wide))
        same(x * y < 0, a * b < 0)
        same(x + 1 > x, a + dtype(1) > a)
        same(clients.sign(clients.square(x)), np.sign(np.square(a)))
        # (NVIDIA's compiler widened -(short)-32768 to +32768 without the shifts)
        same((-x).astype(wide), (-a).astype(wide))
        same(clients.abs(x).astype(wide), np.abs(a).astype(wide))
        same(clients.abs(x) < 0, np.abs(a) < 0)
        same((x ** 3).astype(wide), (a ** 3).astype(wide))
        counts = np.resize(np.arange(7, dtype=dtype), 37)
        same((x << clients.asarray(counts)).astype(wide), np.left_shift(a, counts).astype(wide))
        if info.min < 0:
            same((x // clients.asarray(np.full(37, -1, dtype))).astype(wide), (a // dtype(-1)).astype(wide))


@pytest.mark.parametrize("dtype", INTEGERS, ids=lambda d: d.__name__)
def test_sums_and_products_that_wrap_follow_numpy(dtype):
    """Accumulators wrap as numpy's (in its dtype when asked): rows, columns, everything."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(11)
    a = rng.integers(info.max // 4, info.max, (9, 203), dtype=dtype, endpoint=True)
    x = clients.asarray(a)
    with np.errstate(over="ignore"):
        for axis in (None, 0, 1):
            same(clients.sum(x, axis=axis, dtype=dtype), np.sum(a, axis=axis, dtype=dtype))
            same(clients.prod(x, axis=axis, dtype=dtype), np.prod(a, axis=axis, dtype=dtype))
            same(clients.sum(x * 3, axis=axis, dtype=dtype) < 0, np.sum(a * dtype(3), axis=axis, dtype=dtype) < 0)
        for axis in (0, 1):
            same(clients.cumulative_sum(x, axis=axis, dtype=dtype), np.cumsum(a, axis=axis, dtype=dtype))
            same(clients.cumulative_prod(x, axis=axis, dtype=dtype), np.cumprod(a, axis=axis, dtype=dtype))


@pytest.mark.parametrize("n", [5, 13, 1031], ids=lambda n: f"n{n}")
@pytest.mark.parametrize("dtype", INTEGERS, ids=lambda d: d.__name__)
def test_the_not_of_a_min_max_or_select_keeps_its_not(dtype, n):
    """Every element, the tail past the vectors included: Intel's CPU runtime dropped the
    not of a scalar integer min, max or min-like select (it returned the min itself)."""
    a, b = full_range(dtype, n, 3), full_range(dtype, n, 4)[::-1].copy()
    x, y = clients.asarray(a), clients.asarray(b)
    same(~clients.minimum(x, y), ~np.minimum(a, b))
    same(~clients.maximum(x, y), ~np.maximum(a, b))
    same(clients.bitwise_xor(clients.minimum(x, y), ~clients.zeros_like(x)), ~np.minimum(a, b))
    same(~clients.clip(x, y, None), ~np.maximum(a, b))
    same(clients.where(x < y, ~x, ~y), np.where(a < b, ~a, ~b))
    same(~clients.where(x > y, x, y), ~np.maximum(a, b))
    if np.iinfo(dtype).min < 0:
        with np.errstate(over="ignore"):
            same(-clients.minimum(x, y) - 1, -np.minimum(a, b) - 1)
    m = full_range(dtype, 3 * n, 5).reshape(3, n)  # (columns past the last whole vector too)
    same(~clients.max(clients.asarray(m), axis=0), ~np.max(m, axis=0))
    same(~clients.min(clients.asarray(m), axis=1), ~np.min(m, axis=1))


@pytest.mark.parametrize("dtype", SMALL, ids=lambda d: d.__name__)
def test_a_chain_over_a_small_dtype_is_one_kernel(dtype):
    a, b = full_range(dtype, 4099, 3), full_range(dtype, 4099, 4)
    x, y = clients.asarray(a), clients.asarray(b)
    with clients.inspect() as rec:
        got = ((x * y + 7) ^ (x - 3)) & 0x5F
        host = got.numpy()
    with np.errstate(all="ignore"):
        want = ((a * b + dtype(7)) ^ (a - dtype(3))) & dtype(0x5F)
    np.testing.assert_array_equal(host, want)
    assert host.dtype == dtype
    assert len(rec.kernels) == 1 and rec.kernels[0].kind == "elementwise"


@pytest.mark.parametrize("pair", [(np.uint8, np.int8), (np.uint16, np.int8), (np.uint32, np.int32),
                                  (np.uint64, np.int64), (np.uint8, np.uint64), (np.int16, np.uint32),
                                  (np.uint64, np.float32), (np.int8, np.float32), (np.uint8, np.bool_)],
                         ids=lambda p: f"{p[0].__name__}-{p[1].__name__}")
def test_mixed_dtypes_promote_as_numpy(pair):
    da, db = pair
    a = np.array([0, 1, 5, 100, 127], da)
    b = np.array([1, 0, 3, 7, 1], db)
    x, y = clients.asarray(a), clients.asarray(b)
    want = a + b
    same(x + y, want)
    same(y * x, b * a)
    same(x < y, a < b)


def test_python_scalars_are_weak_and_must_fit():
    a = np.array([0, 1, 200, 255], np.uint8)
    x = clients.asarray(a)
    with np.errstate(over="ignore"):
        same(x + 100, a + np.uint8(100))  # stays uint8, wraps
    same(x - 1, a - np.uint8(1))
    with pytest.raises(OverflowError, match="out of bounds for uint8"):
        x + 300
    with pytest.raises(OverflowError, match="out of bounds for uint8"):
        x + -1
    # comparisons take the exact value of an out-of-range int, as numpy 2
    same(x < 300, a < 300)
    same(x > -1, a > -1)
    big = np.array([0, 2**63, 2**64 - 1], np.uint64)
    same(clients.asarray(big) > -1, big > -1)
    same(clients.asarray(big) == 2**64 - 1, big == 2**64 - 1)
    same(x * 2.5, a * 2.5)  # a float scalar with an int tensor gives float64


@pytest.mark.parametrize("dtype", INTEGERS + [np.bool_], ids=lambda d: np.dtype(d).name)
def test_casts_between_all_integer_dtypes_and_bool(dtype):
    if dtype is np.bool_:
        a = np.array([True, False, True, True])
    else:
        a = full_range(dtype, 257, 5)
    x = clients.asarray(a)
    for target in INTEGERS + [np.bool_, np.float64]:
        same(clients.astype(x, target), a.astype(target))


@pytest.mark.parametrize("dtype", INTEGERS, ids=lambda d: d.__name__)
def test_reductions_follow_numpy(dtype):
    a = full_range(dtype, 6 * 173, 6).reshape(6, 173)
    x = clients.asarray(a)
    with np.errstate(over="ignore"):
        same(clients.sum(x), a.sum())  # int64 or uint64, wrapping
        same(clients.sum(x, axis=1), a.sum(axis=1))
        same(clients.prod(x[:, :3], axis=1), a[:, :3].prod(axis=1))
        same(clients.sum(x, axis=0, dtype=dtype), a.sum(axis=0, dtype=dtype))
    same(clients.max(x, axis=1), a.max(axis=1))
    same(clients.min(x, axis=0), a.min(axis=0))
    same(clients.min(x), a.min())
    same(clients.argmax(x, axis=1), a.argmax(axis=1))
    same(clients.argmin(x), np.int64(a.argmin()))


@pytest.mark.parametrize("dtype", INTEGERS, ids=lambda d: d.__name__)
def test_sort_and_argsort_are_stable_and_exact(dtype):
    a = full_range(dtype, 3 * 700, 7).reshape(3, 700)
    a[:, 100:200] = a[:, 50:51]  # runs of equal keys: positions stay in order
    x = clients.asarray(a)
    same(clients.sort(x, axis=1), np.sort(a, axis=1))
    same(clients.sort(x, axis=1, descending=True), np.flip(np.sort(a, axis=1), axis=1))
    same(clients.argsort(x, axis=1, stable=True), np.argsort(a, axis=1, kind="stable"))


@pytest.mark.parametrize("dtype", SMALL, ids=lambda d: d.__name__)
def test_indexing_views_and_assignment(dtype):
    a = full_range(dtype, 48, 8).reshape(6, 8)
    x = clients.asarray(a)
    same(x[1:5, ::3].T, a[1:5, ::3].T)
    idx = np.array([5, 0, 3], np.uint16)
    same(x[clients.asarray(idx)], a[idx])  # an unsigned index array
    same(x[x > x[0, 0]], a[a > a[0, 0]])
    want = a.copy()
    want[2, 1:4] = 9
    y = clients.asarray(a)
    y[2, 1:4] = 9
    same(y, want)
    same(clients.where(x > x[1, 1], x, clients.asarray(a[::-1].copy())), np.where(a > a[1, 1], a, a[::-1]))
    same(clients.concat([x, x[:2]]), np.concatenate([a, a[:2]]))


@pytest.mark.parametrize("strategy", ["tiled", "rows"])
@pytest.mark.parametrize("dtype", INTEGERS, ids=lambda d: d.__name__)
def test_matmul_wraps_as_numpy(dtype, strategy):
    rng = np.random.default_rng(9)
    a = rng.integers(0, 40, (19, 33)).astype(dtype)
    b = rng.integers(0, 40, (33, 21)).astype(dtype)
    info = np.iinfo(dtype)  # products and sums past the range, widened and compared after
    big = rng.integers(info.max // 8, info.max, (19, 33), dtype=dtype, endpoint=True)
    wide = np.float64 if dtype == np.uint64 else np.int64
    with server_settings(matmul_strategy=strategy), np.errstate(over="ignore"):
        same(clients.asarray(a) @ clients.asarray(b), a @ b)
        x, y = clients.asarray(big), clients.asarray(big.T.copy())
        same((x @ y).astype(wide), (big @ big.T).astype(wide))
        same(x @ y < 0, big @ big.T < 0)


@pytest.mark.parametrize("dtype", SMALL, ids=lambda d: d.__name__)
def test_float_functions_take_numpys_float_widths(dtype):
    a = np.array([0, 1, 2, 9, 100], dtype)
    x = clients.asarray(a)
    want = np.float32 if np.dtype(dtype).itemsize <= 2 else np.float64  # (numpy: float16 for 1 byte)
    got = clients.sqrt(x).numpy()
    assert got.dtype == want
    np.testing.assert_allclose(got, np.sqrt(a.astype(want)), rtol=1e-6)
    assert (x / x[1]).dtype == np.float64  # int / int is float64, as numpy


def test_iinfo_and_the_namespace_know_every_integer_dtype():
    for dtype in INTEGERS:
        info = clients.iinfo(dtype)
        assert (info.min, info.max, info.bits) == (np.iinfo(dtype).min, np.iinfo(dtype).max, np.iinfo(dtype).bits)
        assert getattr(clients, np.dtype(dtype).name) == np.dtype(dtype)
    assert clients.isdtype(clients.uint16, "unsigned integer")
    assert not clients.isdtype(clients.uint16, "signed integer")
    assert clients.isdtype(clients.int8, ("signed integer", "real floating"))
    assert clients.result_type(clients.uint8, clients.int8) == np.int16


def test_a_flat_index_counts_for_the_width_of_a_one_byte_kernel():
    """arange over uint8 computes an int index per element: its kernel runs at the 4-byte
    width, not the 1-byte one (PoCL 3.0 on Zen 4 botches 16-wide int vectors)."""
    from fusion_server.runtime.widths import VectorWidths
    from tests.conftest import server_settings

    with server_settings(widths=VectorWidths(16, 16, 8, 4)), clients.inspect() as rec:
        got = clients.arange(1000, dtype=clients.uint8).numpy()
        plain = (clients.asarray(np.arange(1000, dtype=np.uint8)) + 1).numpy()
    np.testing.assert_array_equal(got, np.arange(1000).astype(np.uint8))
    np.testing.assert_array_equal(plain, (np.arange(1000) + 1).astype(np.uint8))
    assert [r.variant for r in rec.kernels if r.kind == "elementwise"] == ["width 8", "width 16"]
