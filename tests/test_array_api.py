"""The Array API pieces: namespace introspection, dtype helpers, composed functions."""

from __future__ import annotations

import numpy as np
import pytest

import clients as xp
from tests.conftest import exploding_kernel, rand


def test_tensors_name_their_namespace():
    x = xp.asarray([1.0, 2.0])
    assert x.__array_namespace__() is xp
    for version in ("2021.12", "2022.12", "2023.12", "2024.12", "2025.12"):
        assert x.__array_namespace__(api_version=version) is xp
    assert xp.__array_api_version__ == "2025.12"
    with pytest.raises(ValueError, match="2025.12"):
        x.__array_namespace__(api_version="2099.01")


def test_dtype_helpers_follow_numpy():
    assert xp.finfo(xp.float32).eps == np.finfo(np.float32).eps
    assert xp.iinfo(xp.asarray(np.int32(1))).max == 2**31 - 1
    assert xp.result_type(xp.asarray(np.ones(2, np.int32)), xp.float32) == np.float64
    assert xp.result_type(xp.asarray(np.ones(2, np.float32)), 2.0) == np.float32
    assert xp.can_cast(xp.int32, xp.int64) and not xp.can_cast(xp.float64, xp.float32)
    assert xp.isdtype(xp.int64, "integral") and xp.isdtype(xp.bool, "bool")
    assert xp.isdtype(xp.float32, ("real floating", "bool")) and not xp.isdtype(xp.float32, "integral")
    with pytest.raises(ValueError, match="unknown dtype kind"):
        xp.isdtype(xp.float32, "quaternion")


@pytest.mark.parametrize("args", [(0, 1, 5), (-2.5, 3.0, 7), (1, 1, 1), (0, 10, 0)])
@pytest.mark.parametrize("endpoint", [True, False])
def test_linspace(args, endpoint):
    np.testing.assert_allclose(xp.linspace(*args, endpoint=endpoint).numpy(),
                               np.linspace(*args, endpoint=endpoint), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n, m, k", [(3, None, 0), (3, 5, 1), (4, 2, -1), (0, 3, 0)])
def test_eye_is_one_kernel(n, m, k):
    with xp.inspect() as rec:
        got = xp.eye(n, m, k=k, dtype=xp.float32).numpy()
    np.testing.assert_array_equal(got, np.eye(n, m, k=k, dtype=np.float32))
    assert len(rec.kernels) == (1 if n * (n if m is None else m) else 0)  # nothing to compute when empty


@pytest.mark.parametrize("k", [-1, 0, 2])
def test_tril_triu(k):
    a = rand((2, 4, 5))
    x = xp.asarray(a)
    np.testing.assert_array_equal(xp.tril(x, k).numpy(), np.tril(a, k))
    np.testing.assert_array_equal(xp.triu(x, k).numpy(), np.triu(a, k))
    with pytest.raises(ValueError, match="2 dimensions"):
        xp.tril(xp.asarray([1.0]))


def test_flip_is_a_view():
    a = rand((3, 4, 5))
    x = xp.asarray(a)
    for axis in (None, 0, -1, (0, 2)):
        np.testing.assert_array_equal(xp.flip(x, axis=axis).numpy(), np.flip(a, axis=axis))
    with xp.inspect() as rec:
        xp.flip(x, axis=1)
    assert rec.kernels == []


def test_all_any():
    a = rand((4, 6)) > 0
    x = xp.asarray(a)
    for axis in (None, 0, 1):
        np.testing.assert_array_equal(xp.all(x, axis=axis).numpy(), np.all(a, axis=axis))
        np.testing.assert_array_equal(xp.any(x, axis=axis).numpy(), np.any(a, axis=axis))
    empty = xp.zeros((0, 3), dtype=xp.bool)
    np.testing.assert_array_equal(xp.all(empty, axis=0).numpy(), np.all(np.zeros((0, 3), bool), axis=0))
    np.testing.assert_array_equal(xp.any(empty).numpy(), False)
    np.testing.assert_array_equal(xp.all(xp.asarray(np.arange(4))).numpy(), False)


@pytest.mark.parametrize("axis", [None, 0, 1, (0, 1)])
@pytest.mark.parametrize("correction", [0, 1])
def test_var_std(axis, correction):
    a = rand((5, 7)) * 3 + 1
    x = xp.asarray(a)
    np.testing.assert_allclose(xp.var(x, axis=axis, correction=correction).numpy(),
                               np.var(a, axis=axis, ddof=correction), rtol=1e-4)
    np.testing.assert_allclose(xp.std(x, axis=axis, correction=correction).numpy(),
                               np.std(a, axis=axis, ddof=correction), rtol=1e-4)
    ints = np.arange(10, dtype=np.int32)
    np.testing.assert_allclose(xp.var(xp.asarray(ints)).numpy(), np.var(ints), rtol=1e-12)


def test_matrix_transpose_and_vecdot():
    a, b = rand((2, 3, 4)), rand((3, 4), seed=1)
    x, y = xp.asarray(a), xp.asarray(b)
    np.testing.assert_array_equal(xp.matrix_transpose(x).numpy(), np.swapaxes(a, -1, -2))
    with xp.inspect() as rec:
        got = xp.vecdot(x, y).numpy()
    np.testing.assert_allclose(got, (a * b).sum(-1), rtol=1e-5)
    assert len(rec.kernels) == 1


@pytest.mark.parametrize("axis", [0, 1, 2, -1, None])
def test_concat_against_numpy(axis):
    a, b = rand((2, 3, 4), seed=1), rand((2, 3, 4), seed=2)
    got = xp.concat([xp.asarray(a), xp.asarray(b) * 2.0], axis=axis).numpy()
    np.testing.assert_array_equal(got, np.concatenate([a, b * np.float32(2)], axis=axis))


def test_concat_of_views_mixed_dtypes_and_empty_pieces():
    a = rand((4, 5))
    x = xp.asarray(a)
    ints = np.arange(8, dtype=np.int32).reshape(4, 2)
    empty = np.zeros((4, 0), np.float32)
    got = xp.concat([x.T[::2].T, xp.asarray(ints), xp.asarray(empty), x[:, 1:]], axis=1)
    want = np.concatenate([a.T[::2].T, ints, empty, a[:, 1:]], axis=1)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.numpy(), want)
    # The result fuses into what follows like any tensor.
    np.testing.assert_allclose((got * 2.0 + 1.0).numpy(), want * 2 + 1, rtol=1e-12)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_stack_against_numpy(axis):
    arrays = [rand((3, 4), seed=s) for s in range(3)]
    got = xp.stack([xp.asarray(a) for a in arrays], axis=axis).numpy()
    np.testing.assert_array_equal(got, np.stack(arrays, axis=axis))


def test_concat_and_stack_errors():
    a, b = xp.asarray(rand((2, 3))), xp.asarray(rand((3, 3)))
    with pytest.raises(ValueError, match="differ elsewhere"):
        xp.concat([a, b], axis=1)
    with pytest.raises(ValueError, match="dimensions"):
        xp.concat([a, xp.asarray(rand(3))])
    with pytest.raises(ValueError, match="at least one"):
        xp.concat([])
    with pytest.raises(ValueError, match="one shape"):
        xp.stack([a, b])
    np.testing.assert_array_equal(xp.concat([a, b]).numpy(), np.concatenate([a.numpy(), b.numpy()]))


# -- the inspection API -----------------------------------------------------------------------
def test_the_inspection_namespace_describes_devices_dtypes_and_capabilities():
    info = xp.__array_namespace_info__()
    assert info.capabilities() == {"boolean indexing": True, "data-dependent shapes": True, "max dimensions": None}
    assert info.default_device() == xp.default_device()
    assert xp.default_device() in info.devices()
    fp64 = xp.client_for().fp64
    defaults = info.default_dtypes()
    assert defaults == {"real floating": np.dtype(np.float64 if fp64 else np.float32),
                        "complex floating": np.dtype(np.complex128 if fp64 else np.complex64),
                        "integral": np.dtype(np.int64), "indexing": np.dtype(np.int64)}
    ints = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
    names = ["bool", *ints, "float32"] + (["float64"] if fp64 else []) + ["complex64"] + \
        (["complex128"] if fp64 else [])
    assert list(info.dtypes()) == names
    assert list(info.dtypes(kind="integral")) == ints
    assert list(info.dtypes(kind="unsigned integer")) == ints[4:]
    assert list(info.dtypes(kind=("bool", "real floating"))) == ["bool", "float32"] + (["float64"] if fp64 else [])
    assert list(info.dtypes(kind="complex floating")) == ["complex64"] + (["complex128"] if fp64 else [])
    assert info.dtypes(device=xp.default_device()) == info.dtypes()
    for dtype in info.dtypes().values():  # every dtype it names works
        assert xp.zeros((2,), dtype=dtype).numpy().dtype == dtype


def test_the_inspection_namespace_refuses_unknown_kinds_and_devices():
    info = xp.__array_namespace_info__()
    with pytest.raises(ValueError, match="unknown dtype kind 'floating'"):
        info.dtypes(kind="floating")
    with pytest.raises(ValueError, match="not a device of this namespace"):
        info.dtypes(device="cpu")


def test_newaxis_adds_an_axis():
    a = np.arange(6.0, dtype=np.float32)
    x = xp.asarray(a)
    assert xp.newaxis is None
    np.testing.assert_array_equal(x[:, xp.newaxis].numpy(), a[:, np.newaxis])


# -- moveaxis, signbit, reciprocal, diff (2023.12 and 2024.12) --------------------------------
@pytest.mark.parametrize("source, destination", [(0, -1), (-1, 0), ((0, 2), (2, 0)), ((0, 1), (-1, -2)), (1, 1)])
def test_moveaxis_matches_numpy(source, destination):
    a = rand((2, 3, 4))
    np.testing.assert_array_equal(xp.moveaxis(xp.asarray(a), source, destination).numpy(),
                                  np.moveaxis(a, source, destination))


def test_moveaxis_refuses_bad_axes():
    x = xp.asarray(rand((2, 3)))
    with pytest.raises(ValueError, match="repeated axes"):
        xp.moveaxis(x, (0, 0), (0, 1))
    with pytest.raises(ValueError, match="2 source axes but 1 destinations"):
        xp.moveaxis(x, (0, 1), 0)
    with pytest.raises(IndexError):
        xp.moveaxis(x, 2, 0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.bool_])
def test_signbit_matches_numpy(dtype):
    if dtype in (np.float32, np.float64):
        a = np.array([0.0, -0.0, 1.5, -2.0, np.inf, -np.inf, np.nan, -np.nan], dtype)
    else:
        a = np.array([-3, 0, 2, -1], dtype)
    got = xp.signbit(xp.asarray(a)).numpy()
    np.testing.assert_array_equal(got, np.signbit(a))
    assert got.dtype == np.bool_


def test_reciprocal_of_floats_only():
    a = np.array([2.0, -0.0, 0.0, np.inf, 3e-39], np.float32)
    np.testing.assert_array_equal(xp.reciprocal(xp.asarray(a)).numpy(), np.reciprocal(a))
    with pytest.raises(TypeError, match="floating-point"):
        xp.reciprocal(xp.asarray(np.array([1, 2], np.int32)))


@pytest.mark.parametrize("axis, n", [(-1, 1), (0, 1), (1, 2), (2, 3), (1, 0)])
def test_diff_matches_numpy(axis, n):
    a = rand((4, 5, 6))
    np.testing.assert_allclose(xp.diff(xp.asarray(a), axis=axis, n=n).numpy(), np.diff(a, axis=axis, n=n),
                               rtol=1e-6, atol=1e-6)


def test_diff_of_a_computed_value_is_one_kernel():
    a = rand((6, 7))
    with xp.inspect() as rec:
        got = xp.diff(xp.exp(xp.asarray(a)), axis=0).numpy()
    np.testing.assert_allclose(got, np.diff(np.exp(a), axis=0), rtol=1e-5, atol=1e-6)
    assert len(rec.kernels) == 1


def test_diff_with_prepend_append_ints_and_booleans():
    i = np.array([1, 5, 2, 9], np.int32)
    np.testing.assert_array_equal(xp.diff(xp.asarray(i), prepend=3).numpy(), np.diff(i, prepend=3))
    a = rand((3, 4))
    got = xp.diff(xp.asarray(a), axis=0, prepend=xp.asarray(a[:1]), append=0.5).numpy()
    np.testing.assert_allclose(got, np.diff(a, axis=0, prepend=a[:1], append=np.float32(0.5)), rtol=1e-6, atol=1e-6)
    b = np.array([True, False, False, True])
    np.testing.assert_array_equal(xp.diff(xp.asarray(b)).numpy(), np.diff(b))
    with pytest.raises(ValueError, match="at least one dimension"):
        xp.diff(xp.asarray(np.float32(1.0)))
    with pytest.raises(ValueError, match="non-negative"):
        xp.diff(xp.asarray(i), n=-1)


@pytest.mark.parametrize("axis", [0, -1, (0, -1), (1, 3), (-1, -2), (0, 1, 2)])
def test_expand_dims_with_several_axes_matches_numpy(axis):
    a = rand((2, 3))
    got = xp.expand_dims(xp.asarray(a), axis=axis)
    np.testing.assert_array_equal(got.numpy(), np.expand_dims(a, axis))


def test_expand_dims_refuses_repeated_and_out_of_range_axes():
    x = xp.asarray(rand((2, 3)))
    with pytest.raises(ValueError, match="repeated axes"):
        xp.expand_dims(x, axis=(1, -3))
    with pytest.raises(IndexError, match="out of range"):
        xp.expand_dims(x, axis=(0, 4))


@pytest.mark.parametrize("axis, keepdims", [(None, False), (0, False), (1, True), ((0, 2), False), (-1, True)])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_])
def test_count_nonzero_matches_numpy(axis, keepdims, dtype):
    a = (np.arange(2 * 3 * 4).reshape(2, 3, 4) % 3).astype(dtype)
    if dtype == np.float32:
        a[0, 0, 0] = np.nan  # not zero
        a[1, 1, 1] = -0.0  # zero
    got = xp.count_nonzero(xp.asarray(a), axis=axis, keepdims=keepdims)
    want = np.count_nonzero(a, axis=axis, keepdims=keepdims)
    np.testing.assert_array_equal(got.numpy(), want)
    assert got.dtype == np.int64


def test_count_nonzero_is_one_kernel():
    a = rand((8, 16))
    with xp.inspect() as rec:
        got = xp.count_nonzero(xp.asarray(a) > 0.5, axis=1).numpy()
    np.testing.assert_array_equal(got, np.count_nonzero(a > 0.5, axis=1))
    assert len(rec.kernels) == 1


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_unstack_matches_numpy(axis):
    a = rand((2, 3, 4))
    parts = xp.unstack(xp.asarray(a), axis=axis)
    want = [np.take(a, i, axis=axis) for i in range(a.shape[axis])]
    assert isinstance(parts, tuple) and len(parts) == len(want)
    for got, w in zip(parts, want):
        np.testing.assert_array_equal(got.numpy(), w)
    with pytest.raises(ValueError, match="at least one dimension"):
        xp.unstack(xp.asarray(np.float32(1.0)))


# -- tile, repeat, take_along_axis, nextafter, isin (2023.12 to 2025.12) -------------------------
@pytest.mark.parametrize("reps", [(2, 1, 3), (2,), (1, 1), (2, 1, 1, 2), (0, 2)])
def test_tile_matches_numpy(reps):
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(xp.tile(xp.asarray(a), reps).numpy(), np.tile(a, reps))
    with pytest.raises(ValueError, match="non-negative"):
        xp.tile(xp.asarray(a), (-1,))


def test_repeat_by_one_count_or_one_per_element():
    a = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    x = xp.asarray(a)
    np.testing.assert_array_equal(xp.repeat(x, 3, axis=1).numpy(), np.repeat(a, 3, axis=1))
    np.testing.assert_array_equal(xp.repeat(x, 2).numpy(), np.repeat(a, 2))  # flattened
    np.testing.assert_array_equal(xp.repeat(x, [1, 0, 2], axis=1).numpy(), np.repeat(a, [1, 0, 2], axis=1))
    counts = xp.asarray(np.array([2, 1, 0, 3]))  # a tensor of counts: read, since it decides the shape
    np.testing.assert_array_equal(xp.repeat(x, counts, axis=-1).numpy(), np.repeat(a, [2, 1, 0, 3], axis=-1))
    np.testing.assert_array_equal(xp.repeat(x, [4], axis=0).numpy(), np.repeat(a, 4, axis=0))
    with pytest.raises(ValueError, match="2 repeats for an axis of size 3"):
        xp.repeat(x, [1, 2], axis=1)
    with pytest.raises(ValueError, match="non-negative"):
        xp.repeat(x, -1)
    with pytest.raises(TypeError, match="integers"):
        xp.repeat(x, [1.5, 2.0, 1.0], axis=1)


def test_take_along_axis_matches_numpy():
    rng = np.random.default_rng(4)
    a = rng.standard_normal((3, 5, 4)).astype(np.float32)
    x = xp.asarray(a)
    for axis in (0, 1, -1):
        order = np.argsort(a, axis=axis)
        np.testing.assert_array_equal(xp.take_along_axis(x, xp.asarray(order), axis=axis).numpy(),
                                      np.take_along_axis(a, order, axis=axis))
    top = np.argsort(-a, axis=1)[:, :2]  # fewer positions than the axis has; numpy's arrays work too
    np.testing.assert_array_equal(xp.take_along_axis(x, top, axis=1).numpy(), np.take_along_axis(a, top, axis=1))
    sorted_ = xp.take_along_axis(x, xp.argsort(x, axis=-1), axis=-1)
    np.testing.assert_array_equal(sorted_.numpy(), np.sort(a, axis=-1))
    with pytest.raises(ValueError, match="indices have 2 dimensions, x has 3"):
        xp.take_along_axis(x, np.zeros((3, 5), np.int64))
    with pytest.raises(TypeError, match="must be integers"):
        xp.take_along_axis(x, np.zeros((3, 5, 1), np.float32))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nextafter_is_bit_exact(dtype):
    if dtype is np.float64 and not xp.client_for().fp64:
        pytest.skip("no fp64 on this device")
    info = np.finfo(dtype)
    special = np.array([0.0, -0.0, 1.0, np.inf, -np.inf, np.nan, info.smallest_subnormal, info.max, 5, -2],
                       dtype)
    toward = np.array([1, -1, 0, 0, 0, 1, 0, np.inf, 5, np.nan], dtype)
    rng = np.random.default_rng(5)
    a = np.concatenate([special, rng.standard_normal(3000).astype(dtype)])
    b = np.concatenate([toward, rng.standard_normal(3000).astype(dtype)])
    got = xp.nextafter(xp.asarray(a), xp.asarray(b)).numpy()
    want = np.nextafter(a, b)
    bits = np.uint32 if dtype is np.float32 else np.uint64
    same = (got.view(bits) == want.view(bits)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), (a[~same][:5], b[~same][:5], got[~same][:5], want[~same][:5])


def test_isin_is_one_kernel_and_matches_numpy():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    a[0, 0, 0] = np.nan
    x = xp.asarray(a)
    with xp.inspect() as rec:
        got = xp.isin(x, xp.asarray(np.array([3.0, 7, 100, 5, np.nan]))).numpy()
    np.testing.assert_array_equal(got, np.isin(a, [3, 7, 100, 5, np.nan]))  # NaN is in nothing
    assert len(rec.kernels) == 1
    np.testing.assert_array_equal(xp.isin(x, [1, 2], invert=True).numpy(), np.isin(a, [1, 2], invert=True))
    np.testing.assert_array_equal(xp.isin(x, xp.asarray(np.zeros((0,), np.float32))).numpy(), np.zeros(a.shape, bool))
    ints = np.array([1, 5, 9, 300], np.int64)
    np.testing.assert_array_equal(xp.isin(xp.asarray(ints), xp.asarray(np.array([9, 1], np.uint8))).numpy(),
                                  np.isin(ints, np.array([9, 1], np.uint8)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.uint8, np.int16])
@pytest.mark.parametrize("side", ["left", "right"])
def test_searchsorted_matches_numpy(dtype, side):
    if dtype is np.float64 and not xp.client_for().fp64:
        pytest.skip("no fp64 on this device")
    rng = np.random.default_rng(6)
    a = np.sort(rng.integers(0, 50, 1000).astype(dtype))  # runs of equal values: the sides differ
    v = rng.integers(-5, 60, (7, 9)).astype(dtype)
    if np.dtype(dtype).kind == "f":
        a[-3:] = np.nan  # NaN sorts last and counts as larger than every number
        v[0, :3] = [np.nan, np.inf, -np.inf]
    with xp.inspect() as rec:
        got = xp.searchsorted(xp.asarray(a), xp.asarray(v), side=side).numpy()
    np.testing.assert_array_equal(got, np.searchsorted(a, v, side=side))
    assert got.dtype == np.int64
    assert [k.kind for k in rec.kernels] == ["search"]


def test_searchsorted_with_views_sorters_scalars_and_bad_input():
    rng = np.random.default_rng(7)
    a = rng.standard_normal(300).astype(np.float32)
    order = np.argsort(a)
    x = xp.asarray(a)
    np.testing.assert_array_equal(xp.searchsorted(x, x[:10], sorter=xp.asarray(order)).numpy(),
                                  np.searchsorted(a, a[:10], sorter=order))
    grid = np.arange(20.0, dtype=np.float32)
    g = xp.asarray(grid)
    np.testing.assert_array_equal(xp.searchsorted(g[::2], g[3:9] * 1.5).numpy(),  # strided x1, computed x2
                                  np.searchsorted(grid[::2], grid[3:9] * np.float32(1.5)))
    assert int(xp.searchsorted(g, 3.5)) == 4 and int(xp.searchsorted(g, 3, side="right")) == 4
    assert xp.searchsorted(g, xp.asarray(np.zeros((2, 0), np.float32))).shape == (2, 0)
    with pytest.raises(ValueError, match="one-dimensional"):
        xp.searchsorted(xp.asarray(np.zeros((2, 2), np.float32)), 1.0)
    with pytest.raises(ValueError, match="side must be"):
        xp.searchsorted(g, 1.0, side="middle")
    jitted = xp.jit(lambda s, v: xp.searchsorted(s, v + 0.5))
    for shift in (0.0, 2.0):
        np.testing.assert_array_equal(jitted(g, g[:5] + shift).numpy(), np.searchsorted(grid, grid[:5] + shift + 0.5))


def test_searchsorted_of_a_failed_input_fails_its_result_alone():
    grid = xp.asarray(np.arange(8.0, dtype=np.float32))

    boom = exploding_kernel("boom_before_search")
    failed = xp.searchsorted(boom(grid), xp.asarray(np.array([2.5], np.float32)))
    also = xp.searchsorted(grid, boom(grid))
    for t in (failed, also):
        with pytest.raises(xp.TensorFailedError, match="producer exploded"):
            t.numpy()
    np.testing.assert_array_equal(xp.searchsorted(grid, grid[2:4] + 0.5).numpy(), [3, 4])  # the server goes on
