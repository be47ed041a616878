"""Creating tensors (asarray, zeros, full, arange, ...) and reading them back."""

from __future__ import annotations

import numpy as np
import pytest
from _values import BOOL, DTYPES, FLOAT32, FLOAT64, INT32, INT64, assert_tensor, assert_values
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import clients

SETTINGS = settings(max_examples=25, deadline=None)


# -- asarray ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "obj, dtype",
    [
        ([1, 2, 3], INT64),
        ([1.5, -2.0], FLOAT64),
        ([True, False, True], BOOL),
        ([1, 2.5], FLOAT64),
        ([[1, 2, 3], [4, 5, 6]], INT64),
        ([[[1.0], [2.0]], [[3.0], [4.0]]], FLOAT64),
        ([], FLOAT64),
        ([[]], FLOAT64),
    ],
    ids=repr,
)
def test_asarray_from_lists(obj, dtype):
    t = clients.asarray(obj)
    assert_tensor(t, np.asarray(obj, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_asarray_from_numpy_keeps_dtype(dtype):
    a = np.array([[0, 1, -2], [3, -4, 5]]).astype(dtype)
    assert_tensor(clients.asarray(a), a)


@pytest.mark.parametrize(
    "source, expected",
    [
        (np.int8, np.dtype(np.int8)),
        (np.int16, np.dtype(np.int16)),
        (np.uint8, np.dtype(np.uint8)),
        (np.uint16, np.dtype(np.uint16)),
        (np.uint32, np.dtype(np.uint32)),
        (np.uint64, np.dtype(np.uint64)),
        (np.dtype(">i2"), np.dtype(np.int16)),
        (np.float16, FLOAT32),
    ],
    ids=lambda v: getattr(v, "__name__", getattr(v, "name", v)),
)
def test_asarray_keeps_integer_dtypes_and_widens_others_to_the_closest_supported(source, expected):
    # Every integer dtype is supported (in native byte order); float16 is not, and the
    # closest supported dtype is the smallest one that holds every value exactly.
    info = np.finfo(source) if np.dtype(source).kind == "f" else np.iinfo(source)
    a = np.array([0, 1, info.max, info.min, 7], source)
    t = clients.asarray(a)
    assert t.dtype == expected
    assert_tensor(t, a.astype(expected))


@pytest.mark.parametrize(
    "value, dtype", [(3, INT64), (-2.5, FLOAT64), (True, BOOL), (np.float32(1.5), FLOAT32), (np.int32(-4), INT32)]
)
def test_asarray_of_scalar_is_zero_d(value, dtype):
    t = clients.asarray(value)
    assert t.shape == ()
    assert t.ndim == 0
    assert t.size == 1
    assert_tensor(t, np.array(value, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_asarray_dtype_argument(dtype):
    values = [0, 1, 3, 2]
    assert_tensor(clients.asarray(values, dtype=dtype), np.asarray(values, dtype=dtype))


def test_asarray_dtype_argument_converts_floats():
    a = np.array([1.75, -1.75, 0.0, 2.5])
    assert_tensor(clients.asarray(a, dtype=clients.int32), a.astype(np.int32))
    assert_tensor(clients.asarray(a, dtype="float32"), a.astype(np.float32))
    assert_tensor(clients.asarray(a, dtype=bool), a.astype(bool))


def test_asarray_of_tensor_with_new_dtype():
    t = clients.asarray([1, 2, 3])
    assert_tensor(clients.asarray(t, dtype=clients.float32), np.array([1, 2, 3], np.float32))
    assert clients.asarray(t) is t


@pytest.mark.parametrize("obj", [np.array(["a"]), np.array(["2020-01-01"], "datetime64[D]"), [b"x"]], ids=repr)
def test_asarray_of_unsupported_dtype_raises(obj):
    with pytest.raises(TypeError, match="not supported"):
        clients.asarray(obj)


def test_asarray_unsupported_dtype_argument_raises():
    with pytest.raises(TypeError, match="not supported"):
        clients.asarray([1, 2], dtype=np.float16)


def test_mutating_the_source_after_asarray_changes_nothing():
    a = np.arange(1001, dtype=np.float32)
    expected = a.copy()
    t = clients.asarray(a)
    u = t * 2  # queued before the mutation
    a[:] = -1
    assert_tensor(t, expected)
    assert_tensor(u, expected * 2)


def test_asarray_of_non_contiguous_numpy_array():
    a = np.arange(24, dtype=np.int64).reshape(4, 6)[::2, ::-1].T
    assert_tensor(clients.asarray(a), a)


@SETTINGS
@given(a=hnp.arrays(st.sampled_from(DTYPES), hnp.array_shapes(min_dims=0, max_dims=3, min_side=0)))
def test_asarray_round_trips(a):
    assert_tensor(clients.asarray(a), a)


# -- zeros, ones, full, empty -----------------------------------------------------------
@pytest.mark.parametrize("shape", [3, (2, 3), (), (0,), (2, 0, 4), [5]], ids=repr)
def test_zeros_and_ones_default_float64(shape):
    assert_tensor(clients.zeros(shape), np.zeros(shape))
    assert_tensor(clients.ones(shape), np.ones(shape))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_zeros_ones_with_dtype(dtype):
    assert_tensor(clients.zeros((37,), dtype=dtype), np.zeros(37, dtype))
    assert_tensor(clients.ones((2, 3), dtype=dtype), np.ones((2, 3), dtype))


@pytest.mark.parametrize("value", [7, -2.5, True, np.float32(1.25), np.int32(9)], ids=repr)
def test_full_infers_dtype_from_value(value):
    assert_tensor(clients.full((3, 2), value), np.full((3, 2), value))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_full_with_dtype(dtype):
    assert_tensor(clients.full((5,), 3, dtype=dtype), np.full(5, 3, dtype))


@pytest.mark.parametrize("value", [np.float32(2.5), np.int32(4), np.int64(-3), np.float64(0.5)], ids=repr)
def test_full_with_zero_d_tensor_value_keeps_its_dtype(value):
    # numpy.full takes the dtype of a 0-d array fill value.
    fill = clients.asarray(value)
    assert_tensor(clients.full((3,), fill), np.full((3,), np.asarray(value)))


def test_full_with_nan_and_inf():
    assert_tensor(clients.full(4, np.nan, dtype=clients.float32), np.full(4, np.nan, np.float32))
    assert_tensor(clients.full((), -np.inf), np.full((), -np.inf))


def test_full_of_int32_out_of_range_raises():
    with pytest.raises(OverflowError):
        clients.full(3, 2**40, dtype=clients.int32)


def test_empty_has_shape_and_dtype():
    t = clients.empty((2, 5), dtype=clients.int32)
    assert t.shape == (2, 5)
    assert t.dtype == INT32
    assert t.numpy().shape == (2, 5)
    # Documented: the contents of a new tensor are defined (zeros).
    assert_tensor(t, np.zeros((2, 5), np.int32))


def test_negative_shape_raises():
    with pytest.raises(ValueError, match="negative"):
        clients.zeros((2, -1))


def test_like_functions_keep_shape_and_dtype():
    src = clients.asarray(np.arange(6, dtype=np.int32).reshape(2, 3))
    assert_tensor(clients.zeros_like(src), np.zeros((2, 3), np.int32))
    assert_tensor(clients.ones_like(src), np.ones((2, 3), np.int32))
    assert_tensor(clients.full_like(src, 4), np.full((2, 3), 4, np.int32))
    empty = clients.empty_like(src)  # its values are unspecified: only the shape and dtype are
    assert empty.shape == (2, 3) and empty.dtype == np.int32
    assert empty.numpy().shape == (2, 3) and empty.numpy().dtype == np.int32


def test_like_functions_with_dtype():
    src = clients.asarray(np.zeros((3,), np.float32))
    assert_tensor(clients.zeros_like(src, dtype=clients.int64), np.zeros(3, np.int64))
    assert_tensor(clients.ones_like(src, dtype=clients.bool), np.ones(3, bool))
    assert_tensor(clients.full_like(src, 2.5, dtype=clients.float64), np.full(3, 2.5))


def test_full_like_casts_value_to_tensor_dtype():
    src = clients.asarray(np.array([1, 2, 3], np.int64))
    assert_tensor(clients.full_like(src, 2.7), np.full_like(np.array([1, 2, 3], np.int64), 2.7))


def test_like_of_a_view():
    a = np.arange(12.0).reshape(3, 4)
    v = clients.asarray(a)[:, ::2].T
    assert_tensor(clients.ones_like(v), np.ones((2, 3)))


# -- arange -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args",
    [(5,), (2, 11), (2, 11, 3), (10, 0, -3), (-5, 5, 2), (5, 5), (5, 0), (0, 5, -1), (0,), (-4,), (1001,)],
    ids=repr,
)
def test_arange_int(args):
    assert_tensor(clients.arange(*args), np.arange(*args))


@pytest.mark.parametrize(
    "args",
    [(0, 1, 0.1), (1.5, -2.0, -0.5), (0.5, 7), (3.0,), (1, 2, 0.3), (2.5, 2.5), (0.0, -1.0, 0.25), (-1.0, 1.0, 0.001)],
    ids=repr,
)
def test_arange_float(args):
    got = clients.arange(*args)
    expected = np.arange(*args)
    assert got.shape == expected.shape
    assert got.dtype == expected.dtype
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [INT32, INT64, FLOAT32, FLOAT64], ids=lambda d: d.name)
def test_arange_with_dtype(dtype):
    got = clients.arange(-3, 7, 2, dtype=dtype)
    assert_tensor(got, np.arange(-3, 7, 2, dtype=dtype))


def test_arange_float32_fractional_step():
    got = clients.arange(-3, 3, 0.7, dtype=clients.float32)
    expected = np.arange(-3, 3, 0.7, dtype=np.float32)
    assert got.shape == expected.shape
    assert got.dtype == FLOAT32
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_arange_zero_step_raises():
    with pytest.raises(ValueError, match="step"):
        clients.arange(0, 5, 0)


def test_arange_feeds_element_wise_ops():
    assert_tensor(clients.arange(37) * 2 - 1, np.arange(37) * 2 - 1)


# -- reading back ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_numpy_returns_a_new_array(dtype):
    a = np.array([1, 0, 1, 1]).astype(dtype)
    t = clients.asarray(a)
    got = t.numpy()
    assert isinstance(got, np.ndarray)
    assert_values(got, a)
    got[:] = 0
    assert_values(t.numpy(), a)


def test_np_asarray_of_tensor():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = clients.asarray(a)
    assert_values(np.asarray(t), a)
    assert_values(np.asarray(t, dtype=np.int64), a.astype(np.int64))
    assert_values(np.array(t), a)


@pytest.mark.parametrize("shape", [(), (1,), (1, 1)], ids=repr)
def test_python_scalar_conversions(shape):
    assert float(clients.asarray(np.full(shape, 2.5))) == 2.5
    assert int(clients.asarray(np.full(shape, -7, np.int64))) == -7
    assert int(clients.asarray(np.full(shape, -2.75))) == -2
    assert bool(clients.asarray(np.full(shape, True))) is True
    assert bool(clients.asarray(np.full(shape, 0.0))) is False
    assert float(clients.asarray(np.full(shape, 3, np.int32))) == 3.0


def test_int_conversion_keeps_int64_precision():
    assert int(clients.asarray(np.int64(2**62 + 1))) == 2**62 + 1


def test_scalar_conversion_of_computed_tensor():
    t = clients.asarray(np.float64(1.5)) * 4 - 1
    assert float(t) == 5.0


@pytest.mark.parametrize("conv", [float, int, bool], ids=lambda f: f.__name__)
def test_scalar_conversion_of_multi_element_tensor_raises(conv):
    with pytest.raises(TypeError, match="one-element"):
        conv(clients.asarray([1.0, 2.0]))
    with pytest.raises(TypeError, match="one-element"):
        conv(clients.zeros((0,)))


# -- attributes ---------------------------------------------------------------------------
def test_attributes():
    t = clients.asarray(np.zeros((2, 3, 4), np.float32))
    assert t.shape == (2, 3, 4)
    assert isinstance(t.shape, tuple)
    assert t.dtype == np.float32
    assert isinstance(t.dtype, np.dtype)
    assert t.ndim == 3
    assert t.size == 24
    assert len(t) == 2
    assert t.T.shape == (4, 3, 2)


def test_attributes_of_zero_d_and_empty():
    s = clients.asarray(1.0)
    assert (s.shape, s.ndim, s.size) == ((), 0, 1)
    with pytest.raises(TypeError):
        len(s)
    e = clients.zeros((3, 0))
    assert (e.shape, e.ndim, e.size, len(e)) == ((3, 0), 2, 0, 3)


def test_result_attributes_are_known_before_running():
    t = clients.asarray(np.zeros((5, 1), np.int32)) + clients.asarray(np.zeros((4,), np.float32))
    assert t.shape == (5, 4)
    assert t.dtype == np.float64
    assert t.size == 20


def test_repr_shows_shape_and_dtype():
    t = clients.asarray(np.zeros((2, 3), np.int32))
    text = repr(t)
    assert "(2, 3)" in text
    assert "int32" in text
    assert "float64" in repr(clients.zeros(()))


def test_dtype_constants_are_numpy_dtypes():
    assert clients.bool == np.dtype(bool)
    assert clients.int32 == np.dtype(np.int32)
    assert clients.int64 == np.dtype(np.int64)
    assert clients.float32 == np.dtype(np.float32)
    assert clients.float64 == np.dtype(np.float64)


def test_iteration_yields_rows():
    a = np.arange(6, dtype=np.int64).reshape(3, 2)
    rows = list(clients.asarray(a))
    assert len(rows) == 3
    for row, expected in zip(rows, a):
        assert_tensor(row, expected)


@SETTINGS
@given(n=st.integers(0, 300), value=st.floats(-1e6, 1e6))
def test_full_and_arange_sizes(n, value):
    assert_tensor(clients.full((n,), value), np.full((n,), value))
    assert_tensor(clients.arange(n), np.arange(n))
