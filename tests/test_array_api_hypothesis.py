"""Property tests through Hypothesis' Array API strategies: arrays generated in `clients`
(the namespace the standard describes, version 2021.12), compared with numpy for
element-wise functions, reductions, indexing and assignment."""

from __future__ import annotations

import warnings

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import clients as xp

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from hypothesis.extra.array_api import make_strategies_namespace

    xps = make_strategies_namespace(xp, api_version="2021.12")  # (the real dtypes these tests draw)

FAST = settings(max_examples=25, deadline=None)
SHAPES = xps.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5)
FLOATS = st.sampled_from([xp.float32, xp.float64])
INTS = st.sampled_from([xp.int8, xp.int16, xp.int32, xp.int64, xp.uint8, xp.uint16, xp.uint32, xp.uint64])
# Finite, normal values: no subnormals (a CPU device may flush them to zero in kernels).
BOUNDED = {"min_value": -100, "max_value": 100, "allow_nan": False, "allow_subnormal": False}
# (rtol, atol) per dtype for results that round differently on the device.
TOL = {np.dtype(np.float32): (2e-5, 1e-5), np.dtype(np.float64): (1e-12, 1e-12)}


def _arrays(dtype, shape=SHAPES, elements=None):
    return xps.arrays(dtype=dtype, shape=shape, elements=elements)


def _close(got, expected, scale: float = 1.0):
    """Equal dtype and shape; floats within the dtype's tolerance (atol times `scale`)."""
    expected = np.asarray(expected)
    assert got.dtype == expected.dtype and got.shape == expected.shape, (got.dtype, got.shape, expected.shape)
    values = got.numpy()
    if expected.dtype.kind == "f":
        rtol, atol = TOL[expected.dtype]
        np.testing.assert_allclose(values, expected, rtol=rtol, atol=atol * scale, equal_nan=True)
    else:
        np.testing.assert_array_equal(values, expected)


@FAST
@given(data=st.data(), name=st.sampled_from(["exp", "sin", "tanh", "abs", "floor", "square", "negative"]))
def test_unary_functions(data, name):
    x = data.draw(_arrays(data.draw(FLOATS), elements={**BOUNDED, "min_value": -20, "max_value": 20}))
    _close(getattr(xp, name)(x), getattr(np, name)(np.asarray(x)))


@FAST
@given(data=st.data(), name=st.sampled_from(["add", "subtract", "multiply", "maximum", "less", "equal"]))
def test_binary_functions_broadcast(data, name):
    shapes = data.draw(xps.mutually_broadcastable_shapes(2, max_dims=3, max_side=4))
    dtype = data.draw(st.sampled_from([xp.float32, xp.float64, xp.int32, xp.int64]))
    a, b = (data.draw(_arrays(dtype, shape, BOUNDED)) for shape in shapes.input_shapes)
    _close(getattr(xp, name)(a, b), getattr(np, name)(np.asarray(a), np.asarray(b)))


@FAST
@given(data=st.data(), name=st.sampled_from(["bitwise_and", "bitwise_xor", "bitwise_left_shift",
                                             "bitwise_right_shift", "floor_divide", "remainder"]))
def test_integer_functions(data, name):
    dtype = data.draw(INTS)
    shapes = data.draw(xps.mutually_broadcastable_shapes(2, max_dims=2, max_side=4))
    a = data.draw(_arrays(dtype, shapes.input_shapes[0]))
    info = np.iinfo(dtype)
    b = data.draw(_arrays(dtype, shapes.input_shapes[1], {"min_value": max(-70, int(info.min)),
                                                          "max_value": min(70, int(info.max))}))
    with np.errstate(all="ignore"):  # numpy gives 0 for a zero divisor, and so do these
        expected = getattr(np, name)(np.asarray(a), np.asarray(b))
    _close(getattr(xp, name)(a, b), expected)


@FAST
@given(data=st.data(), name=st.sampled_from(["sum", "max", "min", "mean", "prod"]), keepdims=st.booleans())
def test_reductions(data, name, keepdims):
    dtype = data.draw(FLOATS)
    shape = data.draw(xps.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=5))
    x = data.draw(_arrays(dtype, shape, {**BOUNDED, "min_value": -2, "max_value": 2}))
    axis = data.draw(st.none() | st.integers(-len(shape), len(shape) - 1))
    a = np.asarray(x)
    # Sums of n terms round n times: the absolute tolerance grows with the count.
    _close(getattr(xp, name)(x, axis=axis, keepdims=keepdims), getattr(np, name)(a, axis=axis, keepdims=keepdims),
           scale=a.size)


@FAST
@given(data=st.data())
def test_basic_indexing_and_assignment(data):
    dtype = data.draw(st.sampled_from([xp.float32, xp.int64, xp.bool]))
    x = data.draw(_arrays(dtype, xps.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=5)))
    key = data.draw(xps.indices(x.shape, allow_newaxis=True))
    a = np.asarray(x)
    _close(x[key], a[key])
    value = data.draw(_arrays(dtype, st.just(a[key].shape[1:])))  # broadcasts over the first axis
    x[key] = value
    a[key] = np.asarray(value)
    _close(x, a)


@FAST
@given(data=st.data())
def test_integer_array_indexing_and_assignment(data):
    x = data.draw(_arrays(xp.float32, xps.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=5)))
    axis = data.draw(st.integers(0, x.ndim - 1))
    n = x.shape[axis]
    index = data.draw(st.lists(st.integers(-n, n - 1), min_size=0, max_size=6))
    key = (slice(None),) * axis + (np.array(index, dtype=np.int64),)
    a = np.asarray(x)
    _close(x[key], a[key])
    _close(xp.take(x, xp.asarray(np.array(index, dtype=np.int64)), axis=axis), np.take(a, index, axis=axis))
    x[key] = -1.0
    a[key] = -1.0
    _close(x, a)


@FAST
@given(data=st.data())
def test_mask_indexing(data):
    x = data.draw(_arrays(xp.int32, xps.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=4)))
    mask = data.draw(_arrays(xp.bool, st.just(x.shape[:data.draw(st.integers(1, x.ndim))])))
    a, m = np.asarray(x), np.asarray(mask)
    _close(x[mask], a[m])
    x[mask] = 7
    a[m] = 7
    _close(x, a)
