"""Values of every element-wise op against numpy, for every dtype it accepts.

Each op and dtype pair compiles one kernel; every size reuses it (sizes are runtime
arguments), so results are read one at a time to keep each launch a single-op kernel.
"""

from __future__ import annotations

import numpy as np
import pytest
from _values import (
    BOOL,
    DTYPES,
    FLOAT32,
    FLOAT64,
    FLOATS,
    INT32,
    INT64,
    INTS,
    ODD_SIZES,
    SIGNED_ZERO_OPS,
    SMALL_INTS,
    accepts,
    assert_tensor,
    assert_values,
    binary_inputs,
    expected_binary,
    expected_unary,
    unary_input,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import clients

SETTINGS = settings(max_examples=25, deadline=None)

UNARY_CASES = [(n, d) for n in clients._UNARY for d in DTYPES + SMALL_INTS if accepts(n, d)]
UNARY_REFUSED = [(n, d) for n in clients._UNARY for d in DTYPES + SMALL_INTS if not accepts(n, d)]
BINARY_CASES = [(n, d) for n in clients._BINARY for d in DTYPES + SMALL_INTS if accepts(n, d)]
BINARY_REFUSED = [(n, d) for n in clients._BINARY for d in DTYPES + SMALL_INTS if not accepts(n, d)]


def _id(case) -> str:
    name, dtype = case
    return f"{name}-{dtype.name}"


def test_op_lists_are_the_documented_ones():
    assert set(clients._UNARY) >= {
        "exp", "log", "sqrt", "sin", "cos", "tanh", "abs", "negative", "logical_not"
    }
    assert set(clients._BINARY) >= {
        "add", "subtract", "multiply", "divide", "pow", "maximum", "minimum", "equal",
        "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_and", "logical_or",
    }
    for name in clients._UNARY + clients._BINARY:
        assert callable(getattr(clients, name))


# -- unary ------------------------------------------------------------------------------
@pytest.mark.parametrize("case", UNARY_CASES, ids=_id)
def test_unary_matches_numpy(case):
    name, dtype = case
    fn = getattr(clients, name)
    full = unary_input(name, dtype, max(ODD_SIZES))
    for n in ODD_SIZES:
        x = full[:n]
        assert_tensor(fn(clients.asarray(x)), expected_unary(name, x), name in SIGNED_ZERO_OPS)


@pytest.mark.parametrize("case", UNARY_REFUSED, ids=_id)
def test_unary_refuses_dtype(case):
    name, dtype = case
    x = clients.asarray(np.zeros(3, dtype))
    with pytest.raises(TypeError):
        getattr(clients, name)(x)


def test_float_functions_of_bool_give_float32():
    # numpy would give float16, which the library does not have.
    x = clients.asarray(np.array([True, False, True]))
    for name in ("exp", "sqrt", "sin"):
        y = getattr(clients, name)(x)
        assert y.dtype == FLOAT32
        assert_values(y.numpy(), getattr(np, name)(np.array([1.0, 0.0, 1.0], np.float32)))


def test_positive_and_round_of_bool_stay_bool():
    x = np.array([True, False, True])
    assert_tensor(clients.positive(clients.asarray(x)), x)
    assert_tensor(clients.round(clients.asarray(x)), x)


def test_sign_of_nan_is_nan():
    x = np.array([np.nan, -np.nan, 1.0, -2.0, 0.0], np.float64)
    assert_tensor(clients.sign(clients.asarray(x)), np.sign(x))


def test_sign_of_float32_nan_is_nan():
    x = np.array([np.nan, 3.0, -3.0], np.float32)
    assert_tensor(clients.sign(clients.asarray(x)), np.sign(x))


def test_sign_of_negative_zero_is_positive_zero():
    # numpy: sign(-0.0) is 0.0, not -0.0.
    x = np.array([-0.0, 0.0, -1.0], np.float64)
    assert_tensor(clients.sign(clients.asarray(x)), np.sign(x), signed_zeros=True)


def test_round_is_half_to_even():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, 0.49999997], np.float32)
    assert_tensor(clients.round(clients.asarray(x)), np.array([0, 2, 2, -0.0, -2, -2, 4, 0], np.float32))


def test_predicates_of_integers_are_constant():
    x = np.array([0, -5, 7], np.int64)
    t = clients.asarray(x)
    assert_tensor(clients.isnan(t), np.array([False] * 3))
    assert_tensor(clients.isinf(t), np.array([False] * 3))
    assert_tensor(clients.isfinite(t), np.array([True] * 3))


def test_integer_abs_and_negative():
    x = np.array([-7, 0, 7, -2**31 + 1, 2**31 - 1], np.int32)
    assert_tensor(abs(clients.asarray(x)), np.abs(x))
    assert_tensor(-clients.asarray(x), -x)


def test_invert_of_bool_is_logical_not():
    x = np.array([True, False, False, True, True])
    assert_tensor(~clients.asarray(x), ~x)


# -- binary -----------------------------------------------------------------------------
@pytest.mark.parametrize("case", BINARY_CASES, ids=_id)
def test_binary_matches_numpy(case):
    name, dtype = case
    fn = getattr(clients, name)
    a_full, b_full = binary_inputs(name, dtype, max(ODD_SIZES))
    for n in ODD_SIZES:
        # Small sizes take pairs from the start (edge values) and from the random tail.
        a, b = (a_full[:n], b_full[:n]) if n != 3 else (a_full[-3:], b_full[-3:])
        got = fn(clients.asarray(a), clients.asarray(b))
        assert_tensor(got, expected_binary(name, a, b), name in SIGNED_ZERO_OPS)


@pytest.mark.parametrize("case", BINARY_REFUSED, ids=_id)
def test_binary_refuses_dtype(case):
    name, dtype = case
    a = clients.asarray(np.zeros(3, dtype))
    with pytest.raises(TypeError):
        getattr(clients, name)(a, a)


@pytest.mark.parametrize("name", ["floor_divide", "remainder"])
@pytest.mark.parametrize("dtype", INTS, ids=lambda d: d.name)
def test_integer_division_signs_and_zero_divisor(name, dtype):
    a = np.array([7, -7, 7, -7, 6, -6, 0, 0, 5, -5, 1, -1], dtype)
    b = np.array([2, 2, -2, -2, 3, -3, 4, -4, 0, 0, 0, 0], dtype)
    with np.errstate(all="ignore"):
        expected = getattr(np, name)(a, b)
    # Division or remainder by zero gives 0, numpy's result.
    assert list(expected[-4:]) == [0, 0, 0, 0]
    assert_tensor(getattr(clients, name)(clients.asarray(a), clients.asarray(b)), expected)


@pytest.mark.parametrize("name", ["floor_divide", "remainder"])
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
def test_float_division_signs(name, dtype):
    a = np.array([7.5, -7.5, 7.5, -7.5, 0.0, -0.0, 5.0, -5.0, np.inf, 5.0, 1.0, -1.0], dtype)
    b = np.array([2.0, 2.0, -2.0, -2.0, 3.0, 3.0, np.inf, np.inf, 2.0, 0.0, -0.0, np.nan], dtype)
    # numpy's values, except floor division with an infinite operand (the Array API's).
    expected = expected_binary(name, a, b)
    assert_tensor(getattr(clients, name)(clients.asarray(a), clients.asarray(b)), expected, True)


@pytest.mark.parametrize("name", ["maximum", "minimum"])
def test_maximum_minimum_propagate_nan_from_either_side(name):
    a = np.array([np.nan, 1.0, np.nan, 2.0, -np.inf], np.float32)
    b = np.array([1.0, np.nan, np.nan, -3.0, np.nan], np.float32)
    expected = getattr(np, name)(a, b)
    assert np.isnan(expected).sum() == 4
    assert_tensor(getattr(clients, name)(clients.asarray(a), clients.asarray(b)), expected)


@pytest.mark.parametrize("dtype", INTS, ids=lambda d: d.name)
def test_integer_pow_with_non_negative_exponents(dtype):
    a = np.array([2, -2, 3, -3, 0, 0, 1, -1, -1, 10, 7], dtype)
    b = np.array([10, 3, 4, 5, 0, 3, 100, 7, 8, 5, 0], dtype)
    assert_tensor(clients.pow(clients.asarray(a), clients.asarray(b)), np.power(a, b))


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
def test_float_pow_with_zero_bases_beside_others_in_a_vector(dtype):
    # PoCL 3.0 on an AVX-512 Xeon returned wrong lanes from pow on double8 vectors that
    # held a zero in another lane: every lane of every vector width is checked here.
    rng = np.random.default_rng(5)
    a = rng.uniform(0, 1, 4096 + 13).astype(dtype)
    a[rng.random(a.size) < 0.2] = 0
    b = rng.uniform(0.5, 3, a.size).astype(dtype)
    x = clients.asarray(a)
    assert_tensor(x ** 3.5, a ** dtype.type(3.5))
    assert_tensor(x ** clients.asarray(b), a ** b)


def test_int64_pow_beyond_int32_range():
    a = np.array([3, -3, 2], np.int64)
    b = np.array([30, 31, 62], np.int64)
    assert_tensor(clients.asarray(a) ** clients.asarray(b), a**b)


def test_int64_values_beyond_int32_range():
    a = np.array([2**40, -(2**40) - 3, 2**62, 5, -(2**53) - 1], np.int64)
    b = np.array([3, 2**33, -1, 2**45, 1], np.int64)
    ta, tb = clients.asarray(a), clients.asarray(b)
    assert_tensor(ta + tb, a + b)
    assert_tensor(ta * 3, a * 3)
    assert_tensor(ta // tb, a // b)
    assert_tensor(ta < tb, a < b)
    assert_tensor(ta + 2**40, a + 2**40)
    assert_tensor(ta.astype(FLOAT64), a.astype(np.float64))


def test_comparisons_return_bool_tensors():
    a = np.array([1.0, 2.0, np.nan, -0.0, np.inf], np.float64)
    b = np.array([2.0, 2.0, np.nan, 0.0, 1.0], np.float64)
    ta, tb = clients.asarray(a), clients.asarray(b)
    assert_tensor(ta < tb, a < b)
    assert_tensor(ta <= tb, a <= b)
    assert_tensor(ta > tb, a > b)
    assert_tensor(ta >= tb, a >= b)
    assert_tensor(ta == tb, a == b)
    assert_tensor(ta != tb, a != b)


def test_comparison_with_scalars():
    a = np.array([-1, 0, 1, 2, 3], np.int32)
    t = clients.asarray(a)
    assert_tensor(t == 2, a == 2)
    assert_tensor(t < 1.5, a < 1.5)
    assert_tensor(2 > t, 2 > a)


def test_logical_ops_on_non_bool_use_truthiness():
    a = np.array([0.0, -0.0, 2.5, np.nan, 0.0], np.float32)
    b = np.array([0, 3, 0, 0, -1], np.int32)
    ta, tb = clients.asarray(a), clients.asarray(b)
    assert_tensor(clients.logical_and(ta, tb), np.logical_and(a, b))
    assert_tensor(clients.logical_or(ta, tb), np.logical_or(a, b))
    assert_tensor(clients.logical_xor(ta, tb), np.logical_xor(a, b))
    assert_tensor(clients.logical_not(ta), np.logical_not(a))


def test_bitwise_operators():
    a = np.array([0b1100, -1, 7, 0, -8], np.int64)
    b = np.array([0b1010, 5, -3, 9, 3], np.int64)
    ta, tb = clients.asarray(a), clients.asarray(b)
    assert_tensor(ta & tb, a & b)
    assert_tensor(ta | tb, a | b)
    assert_tensor(ta ^ tb, a ^ b)
    assert_tensor(~ta, ~a)


@pytest.mark.parametrize("dtype", INTS, ids=lambda d: d.name)
def test_shifts_follow_numpy_at_and_past_the_width(dtype):
    bits = dtype.itemsize * 8
    # Counts inside the width, at it, past it and negative, at scalar and vector widths.
    a = np.resize(np.array([5, -5, 1, -1, 2**20, -(2**20)], dtype), 37)
    b = np.resize(np.array([0, 1, bits - 1, bits, bits + 3, -1, -bits, 7, 100], dtype), 37)
    ta, tb = clients.asarray(a), clients.asarray(b)
    assert_tensor(ta << tb, np.left_shift(a, b))
    assert_tensor(ta >> tb, np.right_shift(a, b))
    assert_tensor(ta << 3, a << 3)
    assert_tensor(3 >> tb, np.right_shift(dtype.type(3), b))
    # int32 with int64 promotes first, as numpy does.
    assert_tensor(clients.asarray(a.astype(INT32)) << clients.asarray(b.astype(INT64) % 8),
                  np.left_shift(a.astype(INT32), b.astype(INT64) % 8))
    with pytest.raises(TypeError, match="integer"):
        clients.asarray([True]) << clients.asarray([True])
    with pytest.raises(TypeError, match="integer"):
        clients.bitwise_right_shift(clients.asarray([1.0]), 1)


# -- promotion ----------------------------------------------------------------------------
@pytest.mark.parametrize("da", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("db", DTYPES, ids=lambda d: d.name)
def test_add_promotes_as_numpy(da, db):
    a = np.array([1, 0, 1, 1, 0, 1, 1], da)
    b = np.array([0, 1, 1, 0, 0, 1, 1], db)
    if da != BOOL:
        a = np.array([3, -2, 0, 5, 7, -1, 100], da)
    if db != BOOL:
        b = np.array([0.5, 4, -6, 2, 0, 1, -100], np.float64).astype(db)
    assert_tensor(clients.asarray(a) + clients.asarray(b), a + b)


@pytest.mark.parametrize(
    "name, da, db",
    [
        ("divide", INT32, INT64),
        ("divide", INT32, FLOAT32),
        ("maximum", INT64, FLOAT32),
        ("less", INT64, FLOAT32),
        ("subtract", BOOL, INT32),
        ("floor_divide", INT32, FLOAT32),
        ("pow", FLOAT32, INT32),
    ],
    ids=lambda v: getattr(v, "name", v),
)
def test_mixed_dtype_ops_promote_as_numpy(name, da, db):
    a = np.array([7, -3, 1, 0, 9], da)
    b = np.array([2, 4, 1, 5, 1], db)
    assert_tensor(getattr(clients, name)(clients.asarray(a), clients.asarray(b)), expected_binary(name, a, b))


# -- Python and numpy scalars -----------------------------------------------------------
@pytest.mark.parametrize("dtype", [INT32, INT64, FLOAT32, FLOAT64], ids=lambda d: d.name)
def test_python_scalars_on_either_side(dtype):
    a = np.array([1, -2, 3, 4, -5, 6, 7], dtype)
    t = clients.asarray(a)
    with np.errstate(all="ignore"):
        assert_tensor(2 - t, 2 - a)
        assert_tensor(t - 2, a - 2)
        assert_tensor(t**2, a**2)
        assert_tensor(1 / t, 1 / a)
        assert_tensor(t * 3, a * 3)
        assert_tensor(7 // t, 7 // a)
        assert_tensor(t % 3, a % 3)
        assert_tensor(t + 0.25, a + 0.25)


def test_python_scalars_with_bool_tensor():
    a = np.array([True, False, True])
    t = clients.asarray(a)
    assert_tensor(t + 1, a + 1)
    assert_tensor(t * 2.5, a * 2.5)
    assert_tensor(t & True, a & True)
    assert_tensor(2 - t, 2 - a)


def test_float_scalar_keeps_float32():
    a = np.array([1.0, 2.0, 3.0], np.float32)
    t = clients.asarray(a) + 0.1
    assert t.dtype == FLOAT32
    assert_tensor(t, a + np.float32(0.1))
    assert (clients.asarray(a) * 2.5).dtype == FLOAT32


def test_int32_tensor_with_python_float_gives_float64():
    a = np.array([1, 2, 3], np.int32)
    assert_tensor(clients.asarray(a) + 0.5, a + 0.5)
    assert (clients.asarray(a) * 2.0).dtype == FLOAT64


def test_int32_tensor_with_python_int_stays_int32():
    a = np.array([1, -2, 3], np.int32)
    assert_tensor(clients.asarray(a) + 5, (a + 5).astype(np.int32))


def test_python_int_out_of_int32_range_raises_overflow():
    t = clients.asarray(np.array([1, 2], np.int32))
    with pytest.raises(OverflowError):
        t + 2**40
    with pytest.raises(OverflowError):
        2**40 - t


@pytest.mark.parametrize(
    "scalar, dtype",
    [
        (np.float64(2.5), FLOAT32),
        (np.float32(2.5), INT32),
        (np.int64(3), INT32),
        (np.int32(3), FLOAT32),
        (np.bool_(True), INT64),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, np.generic) else v.name,
)
def test_numpy_scalars_are_strong(scalar, dtype):
    a = np.array([1, -2, 4, 0, 9], dtype)
    t = clients.asarray(a)
    assert_tensor(t * scalar, a * scalar)
    assert_tensor(scalar + t, scalar + a)


@pytest.mark.parametrize(
    "scalar, dtype",
    [(np.int8(3), INT32), (np.uint8(3), INT64), (np.int16(-3), INT32), (np.float16(1.5), FLOAT32)],
    ids=lambda v: type(v).__name__ if isinstance(v, np.generic) else v.name,
)
def test_numpy_scalars_of_other_dtypes_promote_as_numpy(scalar, dtype):
    # asarray maps int8/uint8/int16/float16 arrays to supported dtypes; their scalars are
    # operands like any other, with numpy's promotion.
    a = np.array([1, -2, 4, 0, 9], dtype)
    assert_tensor(clients.asarray(a) + scalar, a + scalar)


def test_comparison_with_python_int_beyond_dtype_range_matches_numpy():
    # numpy 2 compares with the exact value of an out-of-range Python int.
    a = np.array([1, -5, 7], np.int32)
    t = clients.asarray(a)
    assert_tensor(t < 2**40, a < 2**40)
    assert_tensor(t == 2**40, a == 2**40)
    assert_tensor(t > -(2**40), a > -(2**40))


def test_scalar_only_operands_raise():
    with pytest.raises(TypeError):
        clients.add(1, 2)


# -- where ------------------------------------------------------------------------------
def test_where_with_tensors():
    c = np.array([True, False, True, False, False])
    a = np.arange(5, dtype=np.float32)
    b = -np.arange(5, dtype=np.float32)
    assert_tensor(clients.where(clients.asarray(c), clients.asarray(a), clients.asarray(b)), np.where(c, a, b))


def test_where_with_scalars_and_non_bool_condition():
    c = np.array([0.0, 2.0, np.nan, -0.0, 1.0], np.float64)
    a = np.array([1, 2, 3, 4, 5], np.int32)
    tc, ta = clients.asarray(c), clients.asarray(a)
    assert_tensor(clients.where(tc, ta, -1), np.where(c, a, np.int32(-1)))
    assert_tensor(clients.where(tc, 0.5, ta), np.where(c, 0.5, a))


def test_where_promotes_branches():
    c = np.array([True, False, True])
    a = np.array([1, 2, 3], np.int32)
    b = np.array([0.5, 1.5, 2.5], np.float32)
    assert_tensor(clients.where(clients.asarray(c), clients.asarray(a), clients.asarray(b)), np.where(c, a, b))


@pytest.mark.parametrize("cond_dtype", [BOOL, INT64, FLOAT32], ids=lambda d: d.name)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_where_for_every_dtype_on_odd_sizes(cond_dtype, dtype):
    rng = np.random.default_rng(3)
    for n in ODD_SIZES:
        c = rng.integers(-1, 2, n).astype(cond_dtype)
        a = rng.integers(-100, 100, n).astype(dtype)
        b = rng.integers(-100, 100, n).astype(dtype)
        got = clients.where(clients.asarray(c), clients.asarray(a), clients.asarray(b))
        assert_tensor(got, np.where(c, a, b))


def test_where_broadcasts_condition_and_branches():
    c = np.array([[True], [False], [True]])
    a = np.arange(4, dtype=np.float64)
    b = np.array(-1.0)
    got = clients.where(clients.asarray(c), clients.asarray(a), clients.asarray(b))
    assert_tensor(got, np.where(c, a, b))


def test_where_float32_branches_with_python_float_stay_float32():
    c = np.array([True, False])
    a = np.array([1.5, 2.5], np.float32)
    assert_tensor(clients.where(clients.asarray(c), clients.asarray(a), 0.1), np.where(c, a, np.float32(0.1)))


# -- clip -------------------------------------------------------------------------------
def test_clip_with_scalars():
    a = np.array([-3.0, -1.0, 0.0, 0.5, 2.0, 9.0, np.nan], np.float32)
    t = clients.asarray(a)
    assert_tensor(clients.clip(t, -1.0, 2.0), np.clip(a, -1.0, 2.0))


def test_clip_with_one_side_none():
    a = np.array([-3, -1, 0, 2, 9], np.int64)
    t = clients.asarray(a)
    assert_tensor(clients.clip(t, None, 1), np.clip(a, None, 1))
    assert_tensor(clients.clip(t, 0, None), np.clip(a, 0, None))


def test_clip_with_neither_side_is_a_copy():
    a = np.array([-3, -1, 0, 2, 9], np.int32)
    assert_tensor(clients.clip(clients.asarray(a)), a)


def test_clip_with_tensor_bounds_broadcast():
    a = np.arange(12, dtype=np.float64).reshape(3, 4) - 5
    lo = np.array([[-1.0], [0.0], [-4.0]])
    hi = np.array([0.0, 1.0, 5.0, 100.0])
    got = clients.clip(clients.asarray(a), clients.asarray(lo), clients.asarray(hi))
    assert_tensor(got, np.clip(a, lo, hi))


def test_clip_ignores_a_python_int_bound_past_the_dtypes_range_as_numpy():
    a = np.array([5, -3, 0], np.int16)
    lo = np.array([100000, 7, -70000], np.int32)
    t = clients.asarray(a)
    assert_tensor(clients.clip(t, 0, 100000), np.clip(a, 0, 100000))
    assert_tensor(clients.clip(t, -100000, 4), np.clip(a, -100000, 4))
    assert_tensor(clients.clip(t, clients.asarray(lo), 32767), np.clip(a, lo, 32767))
    for bounds in ((100000, None), (None, -100000)):  # (a bound inside nothing: numpy raises too)
        with pytest.raises(OverflowError):
            np.clip(a, *bounds)
        with pytest.raises(OverflowError):
            clients.clip(t, *bounds)


# -- astype -----------------------------------------------------------------------------
_CAST_SOURCE = {
    BOOL: np.array([True, False, True, True, False]),
    INT32: np.array([-7, 0, 1, 2, 100000], np.int32),
    INT64: np.array([-7, 0, 1, 2, 100000], np.int64),
    FLOAT32: np.array([-3.75, -0.5, 0.0, 0.999, 1e5 + 0.5], np.float32),
    FLOAT64: np.array([-3.75, -0.5, -0.0, 2.999, 123456.875], np.float64),
}


@pytest.mark.parametrize("src", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("dst", DTYPES, ids=lambda d: d.name)
def test_astype_between_every_pair(src, dst):
    a = _CAST_SOURCE[src]
    got = clients.astype(clients.asarray(a), dst)
    assert_tensor(got, a.astype(dst))


def test_float_to_int_truncates_toward_zero():
    a = np.array([-2.9, -2.5, -0.9, 0.9, 2.5, 2.9, 1e9 + 0.5], np.float64)
    assert_tensor(clients.asarray(a).astype(INT32), np.array([-2, -2, 0, 0, 2, 2, 1000000000], np.int32))


def test_anything_to_bool_is_nonzero():
    a = np.array([0.0, -0.0, np.nan, np.inf, 1e-30, -2.0], np.float64)
    assert_tensor(clients.asarray(a).astype(BOOL), np.array([False, False, True, True, True, True]))
    b = np.array([0, -1, 2**40, 0], np.int64)
    assert_tensor(clients.asarray(b).astype(BOOL), b.astype(bool))


def test_astype_on_odd_sizes_reuses_one_kernel_per_pair():
    for n in ODD_SIZES:
        a = np.linspace(-50, 50, n).astype(np.float32)
        assert_tensor(clients.asarray(a).astype(INT64), a.astype(np.int64))


# -- broadcasting and shapes ------------------------------------------------------------
def test_broadcast_column_by_row():
    a = np.arange(3, dtype=np.float32).reshape(3, 1)
    b = np.arange(4, dtype=np.float32).reshape(1, 4) * 10
    assert_tensor(clients.asarray(a) + clients.asarray(b), a + b)
    assert_tensor(clients.asarray(a) - clients.asarray(b), a - b)


def test_broadcast_vector_against_matrix():
    a = np.array([1, 2, 3, 4, 5], np.int32)
    b = np.arange(10, dtype=np.int32).reshape(2, 5)
    assert_tensor(clients.asarray(a) * clients.asarray(b), a * b)
    assert_tensor(clients.asarray(b) * clients.asarray(a), b * a)


def test_zero_dim_tensor_broadcasts():
    s = np.array(2.5)
    a = np.array([1.0, -1.0, 4.0, 0.0])
    assert_tensor(clients.asarray(s) * clients.asarray(a), s * a)
    assert_tensor(clients.asarray(s) + clients.asarray(s), s + s)


def test_zero_dim_results():
    s = np.array(3, np.int64)
    out = clients.asarray(s) * 2 + 1
    assert out.shape == ()
    assert_tensor(out, np.array(7, np.int64))


def test_size_zero_tensors():
    a = np.zeros((0, 3), np.float32)
    b = np.array([1.0, 2.0, 3.0], np.float32)
    assert_tensor(clients.asarray(a) + clients.asarray(b), a + b)
    assert_tensor(clients.exp(clients.asarray(np.zeros(0, np.float64))), np.zeros(0))
    assert_tensor(clients.asarray(np.zeros((2, 0), np.int32)) < 1, np.zeros((2, 0), bool))


def test_size_zero_broadcast_with_size_one():
    a = np.zeros((0,), np.int64)
    b = np.array([5], np.int64)
    assert_tensor(clients.asarray(a) + clients.asarray(b), a + b)


@pytest.mark.parametrize("sa, sb", [((3,), (4,)), ((2, 3), (3, 2)), ((0,), (2,))])
def test_shape_mismatch_raises_at_the_call(sa, sb):
    a, b = clients.asarray(np.zeros(sa)), clients.asarray(np.zeros(sb))
    with pytest.raises(ValueError, match="broadcast"):
        a + b
    with pytest.raises(ValueError, match="broadcast"):
        clients.where(clients.asarray(np.zeros(sa, bool)), a, b)


@SETTINGS
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=5))
def test_broadcast_shape_pairs_match_numpy(shapes):
    sa, sb = shapes.input_shapes
    a = np.arange(int(np.prod(sa)), dtype=np.float32).reshape(sa) - 3
    b = np.arange(int(np.prod(sb)), dtype=np.float32).reshape(sb) * 0.5
    assert clients.broadcast_shapes(sa, sb) == shapes.result_shape
    assert_tensor(clients.asarray(a) * clients.asarray(b), a * b)


@SETTINGS
@given(
    a=hnp.arrays(np.float64, st.integers(0, 60), elements=st.floats(-1e6, 1e6, allow_subnormal=False)),
)
def test_fused_expression_matches_numpy(a):
    t = clients.asarray(a)
    got = clients.tanh(t * 0.5 - 1.0) + clients.abs(t) / 3.0
    assert_tensor(got, np.tanh(a * 0.5 - 1.0) + np.abs(a) / 3.0)


@SETTINGS
@given(
    a=hnp.arrays(np.float32, st.integers(1, 40), elements=st.floats(width=32)),
    data=st.data(),
)
def test_random_float32_maximum_and_comparison(a, data):
    b = data.draw(hnp.arrays(np.float32, a.shape, elements=st.floats(width=32)))
    ta, tb = clients.asarray(a), clients.asarray(b)
    assert_tensor(clients.maximum(ta, tb), np.maximum(a, b))
    assert_tensor(ta <= tb, a <= b)


def test_repeated_python_float_scalars_keep_their_sign_and_value():
    """Python floats are turned into numpy scalars once and kept: -0.0 and 0.0 (equal as
    keys) must stay apart, NaN and infinities must survive, dtypes must not mix."""
    a32 = np.array([1.0, -2.0, 3.5], np.float32)
    x = clients.asarray(a32)
    for _ in range(2):
        assert np.array_equal(np.signbit((x * -0.0).numpy()), np.signbit(a32 * np.float32(-0.0)))
        assert np.array_equal(np.signbit((x * 0.0).numpy()), np.signbit(a32 * np.float32(0.0)))
        assert np.isnan((x + float("nan")).numpy()).all()
        assert ((x * float("inf")).numpy() == a32 * np.float32(np.inf)).all()
        got = (x * 0.1).numpy()
        assert got.dtype == np.float32 and np.array_equal(got, a32 * np.float32(0.1))
    if clients.client_for().fp64:
        y = clients.asarray(a32.astype(np.float64))
        got = (y * 0.1).numpy()
        assert got.dtype == np.float64 and np.array_equal(got, a32.astype(np.float64) * 0.1)


# -- small powers ---------------------------------------------------------------------------
@pytest.mark.parametrize("p, ops", [
    (2, ["square"]), (2.0, ["square"]), (3, ["square", "multiply"]), (4, ["square", "square"]),
    (1, ["positive"]), (-1, ["divide"]), (0.5, ["sqrt", "add", "equal", "where"]),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_small_float_powers_are_cheaper_ops_with_pows_values(p, ops, dtype):
    """x ** 2 is x * x, not the device's general pow; the values stay pow's (C99's and
    the Array API's special cases: (-0.0) ** 0.5 is +0.0, (-inf) ** 0.5 is +inf)."""
    vals = np.array([0.0, -0.0, 1.5, -2.5, np.inf, -np.inf, np.nan, 3e19, 1e-20, 7.0, -1e-3], dtype)
    t = clients.asarray(vals)
    with clients.inspect() as rec:
        got = (t ** p).numpy()
    assert [k.ops for k in rec.kernels] == [ops]
    assert got.dtype == dtype
    with np.errstate(all="ignore"):
        want = np.array([_c99_pow(float(v), p) for v in vals], dtype)
    np.testing.assert_allclose(got, want, rtol=2e-7 if dtype == np.float32 else 1e-15, equal_nan=True)
    zeros = want == 0
    assert (np.signbit(got[zeros]) == np.signbit(want[zeros])).all()


def _c99_pow(v: float, p: float) -> float:
    """C99's pow for the exponents tested (math.pow raises where C99 returns inf or nan)."""
    import math
    if math.isnan(v):
        return 1.0 if p == 0 else math.nan
    if v == 0 and p < 0:
        return math.copysign(math.inf, v) if float(p).is_integer() and int(p) % 2 else math.inf
    if v < 0 and not float(p).is_integer():
        return math.inf if v == -math.inf else math.nan
    try:
        return math.pow(v, p)
    except OverflowError:
        return math.copysign(math.inf, v) if float(p).is_integer() and int(p) % 2 else math.inf


@pytest.mark.parametrize("p", [2, 3, 4, 1])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_small_integer_powers_wrap_as_numpy(p, dtype):
    vals = np.array([-3, 0, 2, 7, 40000, -46341, np.iinfo(dtype).max], dtype)
    t = clients.asarray(vals)
    with clients.inspect() as rec:
        got = (t ** p).numpy()
    assert "pow" not in rec.kernels[0].ops
    np.testing.assert_array_equal(got, vals ** p)
    assert got.dtype == dtype


def test_other_exponents_keep_the_general_pow():
    vals = np.array([0.5, 2.0, 3.0], np.float32)
    t = clients.asarray(vals)
    for p in (2.2, -2, 0, 5, 1.5):
        with clients.inspect() as rec:
            got = (t ** p).numpy()
        assert rec.kernels[0].ops == ["pow"]
        np.testing.assert_allclose(got, vals.astype(np.float64) ** p, rtol=1e-6)
    ti = clients.asarray(np.array([2, 3], np.int32))
    assert (ti ** -1).numpy().tolist() == [0, 0]  # an integer's negative power: the general pow's value
