"""Indexing beyond views: integer arrays, masks, assignment, in-place operators, take,
roll, meshgrid, tensordot and numpy's array protocol; values against numpy."""

from __future__ import annotations

import numpy as np
import pytest

import clients as xp
from tests.conftest import rand, settle


def _pair(shape=(4, 6), dtype=np.float32):
    """A numpy array (normal floats, or 0, 1, 2, ... of another dtype) and its tensor."""
    if np.dtype(dtype).kind == "f":
        a = rand(shape).astype(dtype)
    else:
        a = np.arange(np.prod(shape)).reshape(shape).astype(dtype)
    return a, xp.asarray(a)


def _equal(t, expected):
    expected = np.asarray(expected)
    assert t.shape == expected.shape and t.dtype == expected.dtype, (t.shape, t.dtype, expected.shape)
    np.testing.assert_array_equal(t.numpy(), expected)


# -- integer-array gathers ----------------------------------------------------------------------
GATHER_KEYS = [
    np.s_[[0, 2, -1]],
    np.s_[:, [1, -1, 1]],
    np.s_[[[0, 1], [2, 3]]],
    np.s_[[0, 1], [2, 3]],
    np.s_[[0, 1], 1:3, [2, 3]],       # separated index arrays: their dimension goes first
    np.s_[1:, [[0], [2]], [1, 3]],    # adjacent ones broadcast and stay in place
    np.s_[..., [3, 0]],
    np.s_[None, [1, 0], ::-1],
    np.s_[2, [1, 0]],                 # an int with an array counts as an index array
    np.s_[[], :],
]


@pytest.mark.parametrize("key", GATHER_KEYS, ids=repr)
def test_integer_array_gather_matches_numpy(key, via):
    a = rand((4, 5, 6))
    x = xp.asarray(a)
    _equal(via(lambda x: x[key])(x), a[key])


def test_gather_from_strided_views_with_device_indices():
    a, x = _pair((5, 6))
    idx = np.array([[4, -5], [0, 2]])
    _equal(x.T[::-1][xp.asarray(idx)], a.T[::-1][idx])
    _equal(x[1:, ::2][:, xp.asarray(np.array([2, 0], np.int32))], a[1:, ::2][:, [2, 0]])
    # The gather is one move kernel; what follows fuses as usual.
    with xp.inspect() as rec:
        y = x[[3, 1]] * 2.0 + 1.0
        y.numpy()
    assert [k.kind for k in rec.kernels] == ["move", "elementwise"]
    np.testing.assert_allclose(y.numpy(), a[[3, 1]] * 2 + 1, rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.bool_, np.int32, np.int64, np.float64])
def test_gather_keeps_every_dtype(dtype):
    a, x = _pair((3, 4), dtype)
    _equal(x[[2, 0], [1, 3]], a[[2, 0], [1, 3]])


def test_out_of_bounds_indices_raise_and_leave_the_server_usable():
    a, x = _pair((4, 6))
    with pytest.raises(IndexError, match="index 7 is out of bounds for axis 0 with size 4"):
        x[[0, 7]]
    with pytest.raises(IndexError, match="index -7 is out of bounds for axis 1 with size 6"):
        x[:, [-7]]
    # A device index tensor is checked with one reduction, read at the call.
    with pytest.raises(IndexError, match="index tensor is out of bounds for axis 1 with size 6"):
        x[:, xp.asarray(np.array([0, 6]))]
    with pytest.raises(IndexError, match="integer or bool dtype"):
        x[xp.asarray(np.array([0.0]))]
    with pytest.raises(IndexError, match="do not broadcast"):
        x[[0, 1], [0, 1, 2]]
    with pytest.raises(IndexError, match="too many indices"):
        x[[0], [0], [0]]
    _equal(x[[1]] + 1.0, a[[1]] + np.float32(1))


def test_a_device_index_tensor_is_checked_once_per_value():
    """The check reads one number; an index tensor used again along an axis at least as
    long is not checked again (its values never change under its id), a shorter axis or
    a new value of the handle is."""
    a, x = _pair((8, 6))
    idx = xp.asarray(np.array([5, 0, -3]))
    reads = xp.stats()["reads"]
    _equal(x[idx], a[[5, 0, -3]])
    assert xp.stats()["reads"] == reads + 2  # the check, and the result
    for _ in range(3):
        _equal(x[idx] * 2.0, a[[5, 0, -3]] * 2)
    x[idx] = 1.0
    assert xp.stats()["reads"] == reads + 2 + 3  # the results alone (the scatter reads nothing)
    with pytest.raises(IndexError, match="index tensor is out of bounds for axis 1 with size 4"):
        x[:, :4][:, idx]  # a shorter axis: checked again
    idx[0] = 9  # a new value, under a new id
    with pytest.raises(IndexError, match="index tensor is out of bounds for axis 0 with size 8"):
        x[idx]
    a[[5, 0, -3]] = 1
    _equal(x, a)


# -- boolean masks --------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["tensor", "numpy", "list"])
def test_boolean_masks_match_numpy(kind, selecting):
    a, x = _pair((4, 6))
    full, rows = a > 0, np.array([True, False, True, True])
    wrap = {"tensor": xp.asarray, "numpy": lambda m: m, "list": lambda m: m.tolist()}[kind]
    _equal(x[wrap(full)], a[full])
    _equal(x[wrap(rows)], a[rows])
    _equal(x[wrap(rows), 1:4], a[rows, 1:4])
    _equal(x[:, wrap(full[0])], a[:, full[0]])
    _equal(x[wrap(np.zeros(4, bool))], a[np.zeros(4, bool)])


def test_bad_masks_raise():
    _, x = _pair((4, 6))
    with pytest.raises(IndexError, match=r"shape \(3,\) does not match"):
        x[np.array([True, False, True])]


def test_zero_dimensional_bool_index_adds_a_dimension():
    a, x = _pair((4, 6))
    _equal(x[True], a[True])
    _equal(x[False], a[False])


# -- assignment with basic keys -------------------------------------------------------------------
SET_KEYS = [
    np.s_[1:3],
    np.s_[::-2],
    np.s_[-1],
    np.s_[1, 2:5],
    np.s_[:, ::3],
    np.s_[..., 4],
    np.s_[None, 2],
    np.s_[5:1:-2, -3:],
    np.s_[...],
    np.s_[2:2],
]


@pytest.mark.parametrize("key", SET_KEYS, ids=repr)
def test_setitem_scalar_matches_numpy(key, via):
    a, x = _pair((6, 7))

    def assign(x, value):
        x[key] = value
        return x

    y = via(assign)(x, 2.5)
    a[key] = 2.5
    _equal(x, a)  # x itself is rebound, jitted or not
    _equal(y, a)


@pytest.mark.parametrize("key", SET_KEYS, ids=repr)
def test_setitem_broadcast_tensor_matches_numpy(key):
    a, x = _pair((6, 7))
    shape = a[key].shape
    v = rand(shape[1:] if shape else (), seed=3)  # one dimension fewer: it broadcasts
    x[key] = xp.asarray(v)
    a[key] = v
    _equal(x, a)
    w = rand(shape, seed=4)  # the selection's full shape
    x[key] = xp.asarray(w)
    a[key] = w
    _equal(x, a)


def test_setitem_casts_arrays_and_checks_scalars():
    a, x = _pair((3, 4), np.int32)
    x[0] = xp.asarray(np.array([1.9, -2.9, 3.5, 0.0]))  # arrays cast as numpy casts them
    x[1, 1:3] = np.array([7, 8], np.int64)
    x[2] = np.float64(4.0)
    x[2, 0] = 2**31 - 1
    a[0] = [1, -2, 3, 0]
    a[1, 1:3] = [7, 8]
    a[2] = 4
    a[2, 0] = 2**31 - 1
    _equal(x, a)
    for bad, error in [(1.5, TypeError), (True, TypeError), (2**31, OverflowError), ("s", TypeError)]:
        with pytest.raises(error):
            x[0] = bad
    flags = xp.asarray(np.zeros(3, bool))
    flags[1] = True
    with pytest.raises(TypeError, match="Python int to a bool tensor"):
        flags[0] = 1
    _equal(flags, np.array([False, True, False]))
    _equal(x, a)  # every failed assignment left x as it was


def test_setitem_value_that_does_not_broadcast_raises_and_leaves_x():
    a, x = _pair((4, 6))
    with pytest.raises(ValueError, match=r"shape \(4,\) into the selection of shape \(2, 6\)"):
        x[1:3] = xp.asarray(np.ones(4, np.float32))
    with pytest.raises(IndexError, match="out of bounds"):
        x[4] = 1.0
    _equal(x, a)
    x[0] = 1.0  # still usable
    a[0] = 1.0
    _equal(x, a)


def test_setitem_with_a_scalar_is_one_fused_kernel():
    a, x = _pair((64, 33))
    xp.sync()
    with xp.inspect() as rec:
        x[1:3] = 0
        y = x * 2.0 + 1.0
        y.numpy()
    a[1:3] = 0
    np.testing.assert_allclose(y.numpy(), a * 2 + 1, rtol=1e-6)
    _equal(x, a)
    # The row index from a flat index (iota, //), two bounds and their &, the where, and
    # the multiply-add after it: one kernel that writes both x and y.
    assert len(rec.kernels) == 1
    assert rec.kernels[0].ops == ["iota", "floor_divide", "greater_equal", "less_equal", "bitwise_and",
                                  "where", "multiply", "add"]


def test_setitem_fuses_a_value_that_varies_only_along_whole_axes():
    a, x = _pair((8, 5))
    v = rand((5,), seed=2)
    row = xp.asarray(v)
    xp.sync()
    with xp.inspect() as rec:
        x[2:7:2] = row  # the row varies along the whole second axis: a stride-0 view of it
        x.numpy()
    a[2:7:2] = v
    _equal(x, a)
    assert [k.kind for k in rec.kernels] == ["elementwise"]
    # A value still to be computed is written first: the where reads it through a view.
    with xp.inspect() as rec:
        x[2:7:2] = row * 2.0
        x.numpy()
    a[2:7:2] = v * 2
    np.testing.assert_allclose(x.numpy(), a, rtol=1e-6)
    assert [k.kind for k in rec.kernels] == ["elementwise", "elementwise"]
    # A value that varies along a partly selected axis is written by the scatter kernel.
    w = rand((3, 2), seed=5)
    with xp.inspect() as rec:
        x[2:7:2, 1:3] = xp.asarray(w)
        x.numpy()
    a[2:7:2, 1:3] = w
    _equal(x, a)
    assert [k.kind for k in rec.kernels] == ["move"]


def test_setitem_is_copy_on_write():
    a, base = _pair((4, 6))
    view = base[1:]
    row = view[0]
    view[0] = 9.0
    _equal(base, a)  # the tensor view was taken from keeps its values ...
    _equal(row, a[1])  # ... and so does another view of the same buffer
    b = a[1:].copy()
    b[0] = 9.0
    _equal(view, b)


# -- assignment with arrays and masks ---------------------------------------------------------------
@pytest.mark.parametrize("key", [np.s_[[0, 3]], np.s_[[2, -1], 1], np.s_[:, [[0], [4]]], np.s_[[0, 1], 1:3, [2, 3]]],
                         ids=repr)
def test_setitem_with_index_arrays_matches_numpy(key):
    a = rand((4, 5, 6))
    x = xp.asarray(a)
    x[key] = -1.0
    a[key] = -1.0
    _equal(x, a)
    v = rand(a[key].shape, seed=6)
    x[key] = xp.asarray(v)
    a[key] = v
    _equal(x, a)
    with pytest.raises(IndexError, match="out of bounds"):
        x[[0, 4]] = 0.0
    _equal(x, a)


def test_mask_assignment_of_one_value_stays_on_the_device(selecting):
    a, x = _pair((5, 6))
    m = a > 0.5
    mask = xp.asarray(m)
    xp.sync()
    with xp.inspect() as rec:
        x[mask] = 0.0
        x.numpy()
    a[m] = 0.0
    _equal(x, a)
    assert [k.kind for k in rec.kernels] == ["elementwise"]  # no read of the mask, no scatter
    rows = np.array([True, False, True, False, False])
    x[xp.asarray(rows)] = xp.asarray(np.arange(6, dtype=np.float32))  # a row for every selected row
    a[rows] = np.arange(6)
    _equal(x, a)
    x[rows] = xp.asarray(np.ones((2, 6), np.float32) * 3)  # a value per row: read the mask, scatter
    a[rows] = 3
    _equal(x, a)
    x[xp.asarray(rows)] = xp.asarray(np.arange(12, dtype=np.float32).reshape(2, 6))  # a tensor mask, scattered
    a[rows] = np.arange(12).reshape(2, 6)
    _equal(x, a)
    with pytest.raises(IndexError, match="does not match"):
        x[np.ones(4, bool)] = 1.0


# -- in-place operators ---------------------------------------------------------------------------
INPLACE = [
    ("__iadd__", np.float32), ("__isub__", np.float32), ("__imul__", np.float64), ("__itruediv__", np.float32),
    ("__ifloordiv__", np.int32), ("__imod__", np.int64), ("__ipow__", np.int32), ("__iand__", np.int64),
    ("__ior__", np.int32), ("__ixor__", np.bool_), ("__ilshift__", np.int64), ("__irshift__", np.int32),
]


@pytest.mark.parametrize("name, dtype", INPLACE, ids=lambda v: v if isinstance(v, str) else np.dtype(v).name)
def test_inplace_operators_match_numpy(name, dtype, via):
    a, x = _pair((3, 4), dtype)
    b = (np.arange(4) % 3 + 1).astype(dtype)
    view = x[0]
    before = a.copy()
    out = via(lambda x, b: getattr(x, name)(b))(x, xp.asarray(b))
    assert out is x
    expected = getattr(a, name)(b)
    _equal(x, expected)
    _equal(view, before[0])  # views of the old buffer keep their values
    if dtype != np.bool_:
        scalar = 2 if np.dtype(dtype).kind == "i" else 2.0
        getattr(x, name)(scalar)
        _equal(x, getattr(expected, name)(scalar))


def test_inplace_operators_keep_dtype_and_shape_or_raise():
    a, x = _pair((3, 4), np.int32)
    with pytest.raises(TypeError, match="would give float64"):
        x /= 2
    with pytest.raises(TypeError, match="would give float64"):
        x += 1.5
    with pytest.raises(TypeError, match="would give int64"):
        x += xp.asarray(np.ones(4, np.int64))
    with pytest.raises(ValueError, match="shape"):
        x += xp.asarray(np.ones((2, 3, 4), np.int32))
    _equal(x, a)
    x += xp.asarray(np.ones(4, np.int32))  # broadcasting within x's shape is fine
    _equal(x, a + 1)
    m, y = _pair((3, 3))
    y @= xp.asarray(np.eye(3, dtype=np.float32))
    np.testing.assert_allclose(y.numpy(), m, rtol=1e-6)
    with pytest.raises(ValueError, match="in-place matmul"):
        y @= xp.asarray(np.ones((3, 2), np.float32))


def test_assignment_leaks_no_buffers(baseline):
    for _ in range(3):
        a, x = _pair((8, 8))
        x[2:4] = 1.0
        x[[0, 5]] = xp.asarray(np.zeros(8, np.float32))
        x += 1.0
        x.numpy()
    del a, x
    settle()
    assert xp.stats()["buffers_live"] == baseline


# -- take, roll, meshgrid, tensordot ----------------------------------------------------------------
def test_take_matches_numpy():
    a, x = _pair((3, 4, 5))
    for indices, axis in [([1, -1], 0), ([[0, 4], [2, 2]], 2), (7, None), ([0, 59], None)]:
        _equal(xp.take(x, indices, axis=axis), np.take(a, indices, axis=axis))
    _equal(xp.take(x, xp.asarray(np.array([3, 0])), axis=1), np.take(a, [3, 0], axis=1))


@pytest.mark.parametrize("shift, axis", [(1, None), (-13, None), (-2, 0), (7, 2), ((1, 2), (0, 2)), (1, (0, 1)),
                                         ((3, -1), (1, 1)), (0, 1), (4, 1)])
def test_roll_matches_numpy(shift, axis):
    a, x = _pair((2, 4, 5))
    _equal(xp.roll(x, shift, axis=axis), np.roll(a, shift, axis=axis))


def test_roll_errors():
    _, x = _pair((2, 4))
    with pytest.raises(ValueError, match="2 shifts for 3 axes"):
        xp.roll(x, (1, 2), axis=(0, 1, 1))
    with pytest.raises(IndexError, match="out of range"):
        xp.roll(x, 1, axis=2)


@pytest.mark.parametrize("indexing", ["xy", "ij"])
def test_meshgrid_is_views(indexing):
    vs = [np.arange(3, dtype=np.float32), np.arange(4, dtype=np.float32) * 2, np.arange(2, dtype=np.float32)]
    ts = [xp.asarray(v) for v in vs]
    xp.sync()
    with xp.inspect() as rec:
        grids = xp.meshgrid(*ts, indexing=indexing)
    assert rec.kernels == []
    for g, w in zip(grids, np.meshgrid(*vs, indexing=indexing)):
        _equal(g, w)
    assert xp.meshgrid() == ()
    _equal(xp.meshgrid(ts[0])[0], vs[0])
    with pytest.raises(ValueError, match="indexing"):
        xp.meshgrid(ts[0], indexing="yx")
    with pytest.raises(ValueError, match="one-dimensional"):
        xp.meshgrid(xp.asarray(np.ones((2, 2))))


@pytest.mark.parametrize("axes, b_shape", [(2, (4, 5, 3)), (1, (5, 2)), (0, (2,)), (((0, 2), (1, 0)), (5, 3)),
                                           (3, (3, 4, 5))])
def test_tensordot_matches_numpy(axes, b_shape):
    a = rand((3, 4, 5))
    b = rand(b_shape, seed=1)
    got = xp.tensordot(xp.asarray(a), xp.asarray(b), axes=axes)
    want = np.tensordot(a, b, axes=axes)
    assert got.shape == want.shape
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-5)


def test_tensordot_errors():
    x, y = xp.asarray(rand((3, 4))), xp.asarray(rand((5, 4)))
    with pytest.raises(ValueError, match="axis 1 of x1 has size 4, axis 0 of x2 5"):
        xp.tensordot(x, y, axes=1)
    with pytest.raises(ValueError, match="axes=3"):
        xp.tensordot(x, y, axes=3)


# -- numpy's array protocol ------------------------------------------------------------------------
def test_array_protocol():
    a, x = _pair((2, 3))
    got = np.asarray(x)
    assert got.shape == a.shape and got.dtype == a.dtype
    np.testing.assert_array_equal(got, a)
    assert np.asarray(x, dtype=np.float64).dtype == np.float64
    got = np.array(x, copy=True)
    got[0, 0] = 100.0
    _equal(x, a)  # a copy, not the tensor
    with pytest.raises(ValueError, match="always a copy"):
        np.asarray(x, copy=False)


@pytest.mark.parametrize("key", [
    (slice(None), [[0], [0]], Ellipsis, -1),  # an ellipsis for no dimension still separates
    (slice(None), [0, 1], Ellipsis, np.array(-1)),
    ([0, 1], Ellipsis, [0, 0]),
    ([0, 2], slice(None), 0),
    (0, slice(None), [0, 1]),
    ([1], None, [0]),
])
def test_index_arrays_separated_in_the_key_put_their_dimensions_first(key):
    a = np.arange(27, dtype=np.float32).reshape(3, 3, 3)
    np.testing.assert_array_equal(xp.asarray(a)[key].numpy(), a[key])
