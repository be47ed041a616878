"""Reductions (sum, prod, max, min, mean, argmax, argmin) against numpy.

Values, result dtypes and shapes for every dtype, axis form and keepdims; views; 0-d and
empty tensors; NaN and ties; and the fusion claims: the element-wise prologue and
epilogue run in the reduction's one kernel.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from _values import BOOL, DTYPES, FLOAT32, FLOAT64, FLOATS, INT32, INT64, assert_tensor
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import clients
from tests.conftest import assert_variants, rand, server_settings

SETTINGS = settings(max_examples=20, deadline=None, database=None)

REDUCTIONS = ("sum", "prod", "max", "min", "mean", "argmax", "argmin")
ARG = ("argmax", "argmin")
NO_IDENTITY = ("max", "min", "argmax", "argmin")
ACCUMULATING = ("sum", "prod", "mean")


# -- helpers ------------------------------------------------------------------------------
def values(shape, dtype, name: str = "sum", seed: int = 0) -> np.ndarray:
    """Random values of `dtype`; products stay far from overflow and underflow."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype == BOOL:
        out = rng.integers(0, 2, shape)
    elif dtype.kind == "i" and name == "prod":
        out = rng.choice(np.array([-1, 1, 1, -1, 2]), shape)
    elif dtype.kind == "i":
        out = rng.integers(-1000, 1000, shape)
    elif name == "prod":
        out = rng.choice(np.array([-1.0, 1.0]), shape) * rng.uniform(0.8, 1.25, shape)
    else:
        out = rng.standard_normal(shape)
    return np.asarray(out).astype(dtype)


def reference(name: str, a: np.ndarray, axis=None, keepdims: bool = False, **kwargs) -> np.ndarray:
    """numpy's result. float32 sum, prod and mean accumulate in float64 in the library, so
    their reference does too, rounded to numpy's result dtype."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # mean of an empty slice
        f = getattr(np, name)
        plain = np.asarray(f(a, axis=axis, keepdims=keepdims, **kwargs))
        if name in ACCUMULATING and a.dtype == FLOAT32 and plain.dtype == FLOAT32:
            exact = np.asarray(f(a.astype(FLOAT64), axis=axis, keepdims=keepdims))
            return exact.astype(FLOAT32)
        return plain


def reduce(name: str, t, axis=None, keepdims: bool = False, **kwargs):
    return getattr(clients, name)(t, axis=axis, keepdims=keepdims, **kwargs)


def check(name: str, a: np.ndarray, t, axis=None, keepdims: bool = False, via=None) -> None:
    """The reduction of tensor `t` (holding `a`, or a view equal to it) matches numpy's
    (run through `via`, the fixture, when given: lazily or as a clients.jit replay)."""
    def fn(t):
        return reduce(name, t, axis, keepdims)

    assert_tensor((via or (lambda f: f))(fn)(t), reference(name, a, axis, keepdims))


def supports(name: str, axis) -> bool:
    """argmax and argmin take one axis or None (as numpy)."""
    return name not in ARG or axis is None or isinstance(axis, int)


# -- every reduction, dtype and axis form -------------------------------------------------
AXES = [
    (None, False), (None, True), (0, False), (-1, False), (1, True), (-2, False),
    ((0, 2), False), ((2, 0), True), ((0, 1, 2), False), ((-1, 1), False),
]
MATRIX = [
    pytest.param(name, dtype, axis, keepdims, id=f"{name}-{dtype}-{axis}-{'keep' if keepdims else 'drop'}")
    for name in REDUCTIONS
    for dtype in DTYPES
    for axis, keepdims in AXES
    if supports(name, axis)
]


@pytest.mark.parametrize("name, dtype, axis, keepdims", MATRIX)
def test_reduction_matches_numpy(name, dtype, axis, keepdims, via):
    a = values((4, 5, 6), dtype, name, seed=1)
    check(name, a, clients.asarray(a), axis, keepdims, via)


SIZE_ONE = [
    ((1,), None), ((1,), 0), ((1, 1), 1), ((5, 1, 3), 1), ((5, 1, 3), 2), ((1, 5, 1, 3), None),
    ((1, 5, 1, 3), (0, 2)), ((1, 5, 1, 3), -1), ((2, 3, 1, 4, 1), (1, 3)), ((2, 3, 1, 4, 1), -3),
]


@pytest.mark.parametrize("name, shape, axis", [
    pytest.param(name, shape, axis, id=f"{name}-{shape}-{axis}")
    for name in REDUCTIONS for shape, axis in SIZE_ONE if supports(name, axis)
])
def test_size_one_dimensions(name, shape, axis):
    a = values(shape, FLOAT64, name, seed=2)
    t = clients.asarray(a)
    check(name, a, t, axis)
    check(name, a, t, axis, keepdims=True)


@pytest.mark.parametrize("name", REDUCTIONS)
@pytest.mark.parametrize("seed", range(4))
def test_random_shapes_and_axes(name, seed):
    rng = np.random.default_rng(100 + seed)
    ndim = int(rng.integers(1, 5))
    shape = tuple(int(n) for n in rng.integers(1, 7, ndim))
    if name in ARG:
        axis = None if seed == 0 else int(rng.integers(-ndim, ndim))
    else:
        k = int(rng.integers(1, ndim + 1))
        axis = tuple(int(d) for d in rng.choice(ndim, k, replace=False))
    a = values(shape, FLOAT64, name, seed=seed)
    check(name, a, clients.asarray(a), axis, keepdims=bool(seed % 2))


@pytest.mark.parametrize("name", ["sum", "prod", "max", "min", "mean"])
@pytest.mark.parametrize("dtype", [INT32, FLOAT32])
def test_empty_axis_tuple_reduces_nothing(name, dtype):
    a = values((3, 4), dtype, name, seed=3)
    check(name, a, clients.asarray(a), axis=())


# -- sum and prod with dtype= -------------------------------------------------------------
@pytest.mark.parametrize("name", ["sum", "prod"])
@pytest.mark.parametrize("src, dtype", [
    (INT32, INT64), (INT32, FLOAT64), (BOOL, INT64), (FLOAT32, FLOAT64), (INT64, FLOAT32),
    (FLOAT64, FLOAT32), (INT32, INT32), (BOOL, INT32),
])
def test_dtype_argument_sets_the_result_dtype(name, src, dtype):
    a = values((3, 5), src, name, seed=4)
    t = clients.asarray(a)
    for axis in (None, 1):
        assert_tensor(reduce(name, t, axis, dtype=dtype), reference(name, a, axis, dtype=dtype))


# -- 0-d tensors ----------------------------------------------------------------------------
# numpy takes axis 0 and -1 on a 0-d array for every reduction but mean.
@pytest.mark.parametrize("name, axis", [
    pytest.param(name, axis, id=f"{name}-{axis}")
    for name in REDUCTIONS for axis in (None, 0, -1) if name != "mean" or axis is None
])
@pytest.mark.parametrize("dtype", [BOOL, INT32, FLOAT32])
def test_zero_dimensional_tensor(name, axis, dtype):
    a = np.asarray(values((), dtype, name, seed=5))
    t = clients.asarray(a)
    assert t.shape == ()
    check(name, a, t, axis)
    check(name, a, t, axis, keepdims=True)


# -- empty tensors --------------------------------------------------------------------------
EMPTY_CASES = [((0,), None), ((0,), 0), ((3, 0), None), ((3, 0), 1), ((3, 0), 0), ((0, 4), 1), ((2, 0, 3), (0, 1))]


@pytest.mark.parametrize("name", ["sum", "prod", "mean"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, axis", EMPTY_CASES)
def test_empty_reduction_gives_the_identity(name, dtype, shape, axis):
    # sum of nothing is 0, prod 1, mean nan (as numpy); an empty output stays empty.
    a = np.zeros(shape, dtype)
    t = clients.asarray(a)
    check(name, a, t, axis)
    check(name, a, t, axis, keepdims=True)


@pytest.mark.parametrize("name", NO_IDENTITY)
@pytest.mark.parametrize("shape, axis", [((0,), None), ((0,), 0), ((3, 0), None), ((3, 0), 1), ((0, 4), 0)])
def test_empty_reduction_without_identity_raises_at_the_call(name, shape, axis):
    t = clients.asarray(np.zeros(shape, FLOAT32))
    with pytest.raises(ValueError):
        np.asarray(getattr(np, name)(np.zeros(shape, FLOAT32), axis=axis))
    with pytest.raises(ValueError):
        reduce(name, t, axis)


@pytest.mark.parametrize("name", NO_IDENTITY)
def test_empty_output_without_identity_is_fine(name):
    # Reducing a non-empty axis of a tensor with an empty other axis: empty result.
    a = np.zeros((0, 4), FLOAT32)
    t = clients.asarray(a)
    check(name, a, t, axis=1)
    check(name, a, t, axis=-1, keepdims=True)


def test_reduction_of_a_reversed_empty_tensor():
    a = np.zeros((3, 0), FLOAT32)
    t = clients.asarray(a)
    check("sum", a[::-1], t[::-1], axis=1)
    check("max", a[::-1, ::-1], t[::-1, ::-1], axis=0)


# -- views ----------------------------------------------------------------------------------
def _transposed(x):
    return clients.permute_dims(x, (2, 0, 1)) if isinstance(x, clients.Tensor) else np.transpose(x, (2, 0, 1))


VIEWS = {
    "transposed": _transposed,
    "step": lambda x: x[1:, ::2],
    "negative-step": lambda x: x[::-1, :, ::-2],
    "reversed-transposed": lambda x: _transposed(x)[:, ::-1],
    "broadcast": lambda x: (clients.broadcast_to if isinstance(x, clients.Tensor) else np.broadcast_to)(
        x[1:2, :, 1:], (3, 5, 5)),
    "inner-broadcast": lambda x: (clients.broadcast_to if isinstance(x, clients.Tensor) else np.broadcast_to)(
        x[:, :, :1], (4, 5, 3)),
}


@pytest.mark.parametrize("view", VIEWS)
@pytest.mark.parametrize("name, axis", [
    pytest.param(name, axis, id=f"{name}-{axis}")
    for name in REDUCTIONS for axis in (None, 0, -1, 1, (0, 2)) if supports(name, axis)
])
def test_reduction_of_a_view(view, name, axis, via):
    a = values((4, 5, 6), FLOAT64, name, seed=6)
    fn = VIEWS[view]
    va = fn(a)
    vt = fn(clients.asarray(a))
    assert vt.shape == va.shape
    check(name, np.ascontiguousarray(va), vt, axis, via=via)


def test_reduction_of_a_transposed_matrix():
    a = values((7, 9), FLOAT32, seed=7)
    t = clients.asarray(a)
    for name in REDUCTIONS:
        for axis in (None, 0, 1):
            check(name, a.T.copy(), t.T, axis)


# -- NaN, infinities, ties, extremes --------------------------------------------------------
NAN_ROWS = [
    [1.0, np.nan, 3.0, np.nan, -1.0],
    [np.nan, 5.0, -np.inf, np.inf, 0.0],
    [2.0, -3.0, 7.0, 7.0, -3.0],
    [-np.inf, -np.inf, np.nan, np.inf, np.inf],
    [np.nan, np.nan, np.nan, np.nan, np.nan],
    [4.0, 4.0, 4.0, 4.0, np.nan],
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", NO_IDENTITY)
def test_nan_propagates_and_wins_at_its_first_index(dtype, name):
    # max/min give NaN when one is there; argmax/argmin the first NaN's index (numpy).
    a = np.array(NAN_ROWS, dtype)
    t = clients.asarray(a)
    for axis in (None, 0, 1):
        check(name, a, t, axis)


@pytest.mark.parametrize("strategy", ["loop", "group"])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", NO_IDENTITY)
def test_nan_and_infinities_in_long_rows(dtype, name, strategy):
    """Rows long enough for the vector loop (up to 16 lanes on CPUs), with NaN in the
    vector part, in the scalar tail, everywhere, and infinities of both signs; both
    strategies (a work-group's tree must let the first NaN win over a later one)."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((7, 101)).astype(dtype)
    a[1, 37] = np.nan
    a[2, 100] = np.nan
    a[3] = np.nan
    a[4] = -np.inf
    a[5, :50] = np.inf
    a[6, ::2] = -0.0
    with server_settings(reduce_strategy=strategy), clients.inspect() as rec:
        t = clients.asarray(a)
        for axis in (None, 0, 1):
            check(name, a, t, axis)
    assert_variants(rec, "reduce", strategy, 3)


@pytest.mark.parametrize("strategy", ["loop", "group"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_arg_reductions_pick_the_first_of_tied_values_in_long_rows(dtype, name, strategy):
    """The vector loop keeps a best value per lane; lanes are not in index order, so ties
    between them must go to the smallest index, as numpy's do."""
    rng = np.random.default_rng(6)
    a = rng.integers(-3, 4, (9, 133)).astype(dtype)  # many ties everywhere
    a[0] = 2  # all equal: index 0
    a[1, 17], a[1, 3] = 9, 9  # the later lane holds the earlier index
    a[2, 50], a[2, 130] = -9, -9
    a[3, 129] = 9  # best in the scalar tail
    info = np.finfo(dtype) if a.dtype.kind == "f" else np.iinfo(dtype)
    a[4] = info.min  # all at the reduction's identity
    a[5] = info.max
    if a.dtype.kind == "f":
        a[6], a[7] = -np.inf, np.inf
    with server_settings(reduce_strategy=strategy), clients.inspect() as rec:
        t = clients.asarray(a)
        for axis in (None, 0, 1):
            check(name, a, t, axis)
    assert_variants(rec, "reduce", strategy, 3)


@pytest.mark.parametrize("name", NO_IDENTITY)
def test_nan_from_the_prologue(name):
    a = np.array([[1.0, -1.0, 2.0], [0.5, 3.0, 0.25], [-2.0, 4.0, -1.0]], FLOAT32)
    t = clients.asarray(a)
    with np.errstate(invalid="ignore"):
        expected = getattr(np, name)(np.log(a), axis=1)
    assert_tensor(getattr(clients, name)(clients.log(t), axis=1), expected)


@pytest.mark.parametrize("dtype", [BOOL, INT32, INT64, FLOAT32, FLOAT64])
@pytest.mark.parametrize("name", ARG)
def test_ties_give_the_first_index(dtype, name):
    rows = [[1, 3, 3, 2, 3], [0, 0, 0, 0, 0], [2, 1, 2, 1, 1], [1, 1, 0, 1, 0]]
    a = np.array(rows).astype(dtype)
    t = clients.asarray(a)
    for axis in (None, 0, 1):
        check(name, a, t, axis)


def test_signed_zeros_tie():
    a = np.array([[-0.0, 0.0, -0.0], [0.0, -0.0, 0.0]], FLOAT32)
    t = clients.asarray(a)
    for name in ARG:
        for axis in (None, 0, 1):
            check(name, a, t, axis)


def test_infinite_rows():
    a = np.array([[-np.inf] * 4, [np.inf] * 4, [np.inf, -np.inf, np.inf, -np.inf]], FLOAT64)
    t = clients.asarray(a)
    for name in NO_IDENTITY:
        for axis in (None, 0, 1):
            check(name, a, t, axis)


@pytest.mark.parametrize("dtype", [INT32, INT64])
def test_integer_extremes(dtype):
    info = np.iinfo(dtype)
    a = np.array([[info.min, info.min, info.min], [info.max, info.max, info.max], [info.min, info.max, 0]], dtype)
    t = clients.asarray(a)
    for name in NO_IDENTITY:
        for axis in (None, 0, 1):
            check(name, a, t, axis)


def test_int64_sums_are_exact():
    a = np.array([2**62, -(2**62), 3, 2**53 + 1, 2**53, -1], INT64)
    t = clients.asarray(a)
    check("sum", a, t)
    check("sum", a.reshape(2, 3), t.reshape(2, 3), axis=0)


def test_int32_sum_does_not_overflow():
    a = np.full((3, 1000), 2**30, INT32)
    t = clients.asarray(a)
    for axis in (None, 1):
        check("sum", a, t, axis)
        check("mean", a, t, axis)


# -- fusion ---------------------------------------------------------------------------------
def test_prologue_and_epilogue_fuse_into_one_reduce_kernel():
    a_np, b_np, c_np = rand((33, 65), seed=10), rand((33, 65), seed=11), rand(65, seed=12)
    a, b, c = clients.asarray(a_np), clients.asarray(b_np), clients.asarray(c_np)
    with clients.inspect() as rec:
        out = clients.sum(clients.exp(a * b + c), axis=-1) * 2
    assert_tensor(out, reference("sum", np.exp(a_np * b_np + c_np), axis=-1) * np.float32(2))
    assert len(rec.kernels) == 1, [k.ops for k in rec.kernels]
    kernel = rec.kernels[0]
    assert kernel.kind == "reduce"
    assert kernel.ops == ["multiply", "add", "exp", "sum", "multiply"]


@pytest.mark.parametrize("name", REDUCTIONS)
def test_lone_reduction_is_one_kernel(name):
    a = values((6, 7), FLOAT32, name, seed=13)
    t = clients.asarray(a)
    with clients.inspect() as rec:
        out = reduce(name, t, axis=1)
    assert [k.kind for k in rec.kernels] == ["reduce"]
    assert_tensor(out, reference(name, a, axis=1))


def _epilogue_operand(kind: str, rng):
    """(reduction axis, keepdims, numpy bias) for an epilogue input of layout `kind`; the
    reduction output of a (6, 5, 4) input has shape (6, 4) (or (6, 1, 4) with keepdims)."""
    if kind == "same-shape":
        return 1, False, rng.standard_normal((6, 4)).astype(FLOAT32)
    if kind == "0-d":
        return 1, False, np.asarray(np.float32(1.5))
    if kind == "row":
        return 1, False, rng.standard_normal(4).astype(FLOAT32)
    if kind == "column":
        return 1, False, rng.standard_normal((6, 1)).astype(FLOAT32)
    if kind == "keepdims":
        return 1, True, rng.standard_normal((6, 1, 4)).astype(FLOAT32)
    if kind == "int64":
        return 1, False, rng.integers(-5, 5, (6, 4))
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["same-shape", "0-d", "row", "column", "keepdims", "int64"])
@pytest.mark.parametrize("name", ["max", "sum"])
def test_epilogue_with_a_broadcast_tensor_is_one_kernel(name, kind):
    rng = np.random.default_rng(14)
    a = rand((6, 5, 4), seed=15)
    axis, keepdims, bias_np = _epilogue_operand(kind, rng)
    x, bias = clients.asarray(a), clients.asarray(bias_np)
    with clients.inspect() as rec:
        out = reduce(name, x, axis, keepdims) + bias
    assert_tensor(out, reference(name, a, axis, keepdims) + bias_np)
    assert [k.kind for k in rec.kernels] == ["reduce"], [k.ops for k in rec.kernels]


def test_epilogue_with_transposed_and_scalar_tensors_is_one_kernel():
    a = rand((4, 7, 5), seed=16)
    w_np = rand((5, 4), seed=17)
    x, w, s = clients.asarray(a), clients.asarray(w_np), clients.asarray(np.float32(-2.0))
    with clients.inspect() as rec:
        out = (clients.max(x, axis=1) + w.T) * s
    assert_tensor(out, (a.max(axis=1) + w_np.T) * np.float32(-2.0))
    assert len(rec.kernels) == 1
    assert rec.kernels[0].kind == "reduce"


def test_epilogue_reads_the_reduction_twice():
    a = rand((9, 11), seed=18)
    t = clients.asarray(a)
    with clients.inspect() as rec:
        m = clients.max(t, axis=0)
        out = m * m - m
        del m
    expected = a.max(axis=0)
    assert_tensor(out, expected * expected - expected)
    assert len(rec.kernels) == 1


def test_argmax_with_prologue_and_epilogue_is_one_kernel():
    a = rand((8, 13), seed=19)
    t = clients.asarray(a)
    with clients.inspect() as rec:
        out = clients.argmax(clients.abs(t) * -1.0, axis=1) + 1
    assert_tensor(out, np.argmax(np.abs(a) * np.float32(-1.0), axis=1) + 1)
    assert len(rec.kernels) == 1
    assert rec.kernels[0].kind == "reduce"


def test_epilogue_changes_the_dtype():
    a = rand((7, 10), seed=30)
    b_np = rand(7, seed=31)
    x, b = clients.asarray(a), clients.asarray(b_np)
    with clients.inspect() as rec:
        out = clients.where(clients.max(x, axis=1) > b, b, -1.0)
    assert_tensor(out, np.where(a.max(axis=1) > b_np, b_np, np.float32(-1)))
    assert [k.kind for k in rec.kernels] == ["reduce"]
    assert_tensor(clients.sum(x, axis=0) >= 0, a.astype(FLOAT64).sum(axis=0) >= 0)


def test_prologue_broadcasts_its_inputs():
    a = rand((6, 9), seed=32)
    x = clients.asarray(a)
    with clients.inspect() as rec:
        out = clients.sum(x[:, None, :] * x[None, :, :], axis=-1)  # a @ a.T
    assert_tensor(out, reference("sum", a[:, None, :] * a[None, :, :], axis=-1))
    assert [k.kind for k in rec.kernels] == ["reduce"]


def test_a_new_shape_axis_or_scalar_reuses_the_kernel():
    def run(shape, axis, scale):
        a = rand(shape, seed=33)
        out = clients.sum(clients.exp(clients.asarray(a) * scale), axis=axis) + 1.0
        expected = reference("sum", np.exp(a * np.float32(scale)), axis=axis) + np.float32(1)
        assert_tensor(out, expected)

    run((5, 7), 1, 0.5)
    before = clients.stats()["compiles"]
    run((9, 3), 1, 0.25)
    run((3, 11), -1, -1.5)
    assert clients.stats()["compiles"] == before
    # Reducing a leading axis reads with another stride: another layout class, one new
    # kernel, which a new size along it then reuses. (On CPUs, as many columns as a
    # vector's lanes or more take vectors across the columns, fewer a loop per column:
    # 11 and 13 columns fall on the same side of any width.)
    run((3, 11), 0, -1.5)
    after_axis = clients.stats()["compiles"]
    run((6, 13), 0, 3.0)
    assert clients.stats()["compiles"] == after_axis


def test_reduction_of_views_of_pending_values():
    a = rand((6, 8), seed=34)
    x = clients.asarray(a)
    assert_tensor(clients.sum((x * 2.0).reshape(12, 4), axis=1),
                  reference("sum", (a * np.float32(2)).reshape(12, 4), axis=1))
    assert_tensor(clients.max((x + 1.0).T[::-1], axis=0), (a + np.float32(1)).T[::-1].max(axis=0))
    assert_tensor(clients.sum(x, axis=1)[::2] + 1.0, reference("sum", a, axis=1)[::2] + np.float32(1))


def test_chained_reductions():
    a = rand((3, 4, 5), seed=35)
    x = clients.asarray(a)
    assert_tensor(clients.sum(clients.max(x, axis=2), axis=1), reference("sum", a.max(axis=2), axis=1))
    assert_tensor(clients.argmin(clients.mean(x, axis=0), axis=1), np.argmin(reference("mean", a, axis=0), axis=1))


def test_eager_mode_gives_the_same_values():
    a_np, b_np = rand((5, 9), seed=36), rand(9, seed=37)
    with server_settings(mode="eager"):
        a, b = clients.asarray(a_np), clients.asarray(b_np)
        with clients.inspect() as rec:
            out = clients.sum(clients.exp(a * b), axis=-1) * 2.0
            idx = clients.argmax(a - b, axis=0)
        assert_tensor(out, reference("sum", np.exp(a_np * b_np), axis=-1) * np.float32(2))
        assert_tensor(idx, np.argmax(a_np - b_np, axis=0))
    assert [k.kind for k in rec.kernels].count("reduce") == 2
    assert len(rec.kernels) == 6


@pytest.mark.parametrize("keep", [False, True])
def test_reduction_blocks_stay_within_the_binding_limit(keep):
    # 3 (sizes, metadata) + 2 inputs + the result: the limit. A kept prologue value is
    # one more output, so its block must close (or write it separately) to stay within.
    limit = 6
    a_np, b_np = rand((4, 5), seed=38), rand((4, 5), seed=39)
    a, b = clients.asarray(a_np), clients.asarray(b_np)
    with server_settings(max_bindings=limit):
        with clients.inspect() as rec:
            t = a + b
            s = clients.sum(t, axis=1)
            if not keep:
                del t
            s_np = s.numpy()
        assert all(k.bindings <= limit for k in rec.kernels), [(k.ops, k.bindings) for k in rec.kernels]
        np.testing.assert_allclose(s_np, reference("sum", a_np + b_np, axis=1), rtol=1e-5, atol=1e-6)
        if keep:
            assert_tensor(t, a_np + b_np)


def test_many_prologue_inputs_stay_within_the_binding_limit():
    limit = 8
    arrays = [rand((4, 5), seed=40 + k) for k in range(10)]
    tensors = [clients.asarray(a) for a in arrays]

    def column_sums():
        t = tensors[0]
        for x in tensors[1:]:
            t = t * 0.5 + x
        return clients.sum(t, axis=0)  # no prologue value outlives this call

    with server_settings(max_bindings=limit):
        with clients.inspect() as rec:
            out = column_sums() + tensors[0][0] + tensors[1][1]
            got = out.numpy()
        assert all(k.bindings <= limit for k in rec.kernels), [(k.ops, k.bindings) for k in rec.kernels]
    t_np = arrays[0]
    for a in arrays[1:]:
        t_np = t_np * np.float32(0.5) + a
    np.testing.assert_allclose(got, reference("sum", t_np, axis=0) + arrays[0][0] + arrays[1][1], rtol=1e-5, atol=1e-6)


# -- intermediates kept by the user ---------------------------------------------------------
def test_kept_prologue_value_is_correct():
    a_np, b_np = rand((10, 17), seed=20), rand((10, 17), seed=21)
    a, b = clients.asarray(a_np), clients.asarray(b_np)
    y = clients.exp(a * b)
    s = clients.sum(y, axis=1) + 1
    y_np = np.exp(a_np * b_np)
    assert_tensor(s, reference("sum", y_np, axis=1) + np.float32(1))
    assert_tensor(y, y_np)


def test_kept_prologue_value_read_later_by_other_work():
    a_np = rand((12, 9), seed=22)
    a = clients.asarray(a_np)
    y = a * 2.0 - 1.0
    m = clients.max(y, axis=0)
    u = clients.tanh(y) + m  # reads the prologue value and the reduction
    y_np = a_np * np.float32(2) - np.float32(1)
    assert_tensor(u, np.tanh(y_np) + y_np.max(axis=0))
    assert_tensor(m, y_np.max(axis=0))
    assert_tensor(y, y_np)


def test_prologue_value_read_before_the_reduction():
    a_np = rand((5, 8), seed=23)
    a = clients.asarray(a_np)
    y = clients.sqrt(clients.abs(a))
    y_np = np.sqrt(np.abs(a_np))
    assert_tensor(y, y_np)
    assert_tensor(clients.mean(y, axis=1), reference("mean", y_np, axis=1))
    assert_tensor(y, y_np)


def test_prologue_value_dropped_before_the_flush():
    a_np = rand((7, 6), seed=24)
    a = clients.asarray(a_np)
    y = clients.exp(a)
    s = clients.prod(y, axis=0)
    del y
    assert_tensor(s, reference("prod", np.exp(a_np), axis=0))


def test_several_prologue_values_kept():
    a_np = rand((6, 10), seed=25)
    a = clients.asarray(a_np)
    p = a + 1.0
    q = p * p
    r = clients.sum(q - p, axis=-1)
    p_np = a_np + np.float32(1)
    q_np = p_np * p_np
    assert_tensor(r, reference("sum", q_np - p_np, axis=-1))
    assert_tensor(q, q_np)
    assert_tensor(p, p_np)


def test_kept_reduction_result_used_by_the_epilogue():
    a_np = rand((9, 14), seed=26)
    a = clients.asarray(a_np)
    s = clients.sum(a, axis=1)
    out = s * 2.0 + 1.0
    s_np = reference("sum", a_np, axis=1)
    assert_tensor(out, s_np * np.float32(2) + np.float32(1))
    assert_tensor(s, s_np)


def test_two_reductions_of_one_prologue_value():
    a_np = rand((8, 12), seed=27)
    a = clients.asarray(a_np)
    y = clients.exp(a * 0.5)
    total = clients.sum(y, axis=1)
    peak = clients.max(y, axis=1)
    y_np = np.exp(a_np * np.float32(0.5))
    assert_tensor(peak, y_np.max(axis=1))
    assert_tensor(total, reference("sum", y_np, axis=1))


@pytest.mark.parametrize("name, axis", [
    ("sum", None), ("sum", (0, 2)), ("max", 1), ("argmax", 0), ("mean", (1, 2)), ("prod", -1),
])
@pytest.mark.parametrize("view", ["plain", "transposed", "negative-step"])
def test_kept_prologue_value_of_a_view(name, axis, view):
    a = values((4, 5, 6), FLOAT32, name, seed=41)
    fn = {"plain": lambda x: x, "transposed": _transposed, "negative-step": VIEWS["negative-step"]}[view]
    src = fn(clients.asarray(a))
    y = clients.abs(src * 0.5) + 1.0
    out = reduce(name, y, axis)
    y_np = np.abs(fn(a) * np.float32(0.5)) + np.float32(1)
    assert_tensor(out, reference(name, y_np, axis))
    assert_tensor(y, y_np)


def test_softmax():
    a_np = rand((16, 33), seed=28) * np.float32(4)
    x = clients.asarray(a_np)
    e = clients.exp(x - clients.max(x, axis=1, keepdims=True))
    out = e / clients.sum(e, axis=1, keepdims=True)
    e_np = np.exp(a_np - a_np.max(axis=1, keepdims=True))
    assert_tensor(out, e_np / reference("sum", e_np, axis=1, keepdims=True))


# -- a large-ish row reduction --------------------------------------------------------------
@pytest.mark.parametrize("name", ["sum", "max"])
def test_large_odd_rows(name):
    a = rand((512, 4097), seed=29)
    t = clients.asarray(a)
    check(name, a, t, axis=-1)
    check(name, a, t, axis=0)
    check(name, a, t)


# -- property: random shapes and axes -------------------------------------------------------
@st.composite
def shapes_and_axes(draw):
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=6))
    ndim = len(shape)
    if ndim == 0 or draw(st.booleans()):
        # axis -1 of a 0-d tensor has its own test (test_zero_dimensional_tensor).
        axis = draw(st.sampled_from([None, 0])) if ndim == 0 else None
    elif draw(st.booleans()):
        axis = draw(st.integers(-ndim, ndim - 1))
    else:
        axes = draw(st.lists(st.integers(0, ndim - 1), min_size=1, max_size=ndim, unique=True))
        axis = tuple(d - ndim if draw(st.booleans()) else d for d in axes)
    return shape, axis, draw(st.booleans())


@SETTINGS
@given(case=shapes_and_axes(), seed=st.integers(0, 2**16))
def test_property_sum_and_max_float32(case, seed):
    shape, axis, keepdims = case
    a = values(shape, FLOAT32, seed=seed)
    t = clients.asarray(a)
    check("sum", a, t, axis, keepdims)
    try:
        expected = reference("max", a, axis, keepdims)
    except ValueError:
        with pytest.raises(ValueError):
            clients.max(t, axis=axis, keepdims=keepdims)
    else:
        assert_tensor(clients.max(t, axis=axis, keepdims=keepdims), expected)


@pytest.mark.parametrize("strategy", ["group", "loop"])
@pytest.mark.parametrize("cols", [1, 3, 5, 255, 1028, 1030, 4099])
def test_vector_steps_with_tails_in_both_strategies(strategy, cols):
    """The loop strategy reads W elements per step, then the tail one by one; the group
    strategy strides by its work-group: every row length must add up in both."""
    a, b = rand((3, cols)), rand((3, cols), seed=1)
    with server_settings(reduce_strategy=strategy), clients.inspect() as rec:
        x, y = clients.asarray(a), clients.asarray(b)
        got = clients.sum(clients.exp(x * 0.5) * y, axis=-1).numpy()
        got_max = clients.max(x + y, axis=1).numpy()
        strided = clients.sum(x[:, ::2] * 2.0, axis=1).numpy()  # no vector loads: a stride of 2
    want = (np.exp(a * np.float32(0.5)) * b).sum(axis=-1)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-5)
    np.testing.assert_array_equal(got_max, (a + b).max(axis=1))
    np.testing.assert_allclose(strided, (a[:, ::2] * np.float32(2)).sum(axis=1), rtol=2e-5, atol=1e-5)
    assert_variants(rec, "reduce", strategy, 3)
    if strategy == "loop" and cols > 16 and clients.client_for().server.widths.w4 > 1:
        assert rec.kernels[0].variant != "loop, width 1"  # contiguous rows: vector steps
        assert rec.kernels[2].variant.startswith("loop, width 1")  # a stride of 2: one by one



def test_row_reductions_spread_over_every_cpu_core(server, monkeypatch):
    """A CPU driver runs a work-group on one core: a reduction's rows (heavy work-items)
    go in groups small enough that every compute unit gets several."""
    if server.info.kind != "CPU":
        pytest.skip("the work-group size of heavy launches changes on CPU devices only")
    launches = []
    real = server.ctx.launch

    def spy(kernel, global_size, local, *rest, **kw):
        launches.append((global_size, local))
        return real(kernel, global_size, local, *rest, **kw)

    monkeypatch.setattr(server.ctx, "launch", spy)
    a = rand((1024, 64))
    with server_settings(reduce_strategy="loop"):
        assert_tensor(clients.sum(clients.asarray(a), axis=1), a.sum(axis=1))
    (global_size, local), = launches
    assert global_size // local >= 4 * server.info.compute_units
