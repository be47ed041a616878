"""Array API standard pieces built on the core: dtype introspection and functions that
compose from element-wise ops, views and reductions (so they fuse like the rest)."""

from __future__ import annotations

import builtins
import math
import operator
from typing import Any, NamedTuple

import numpy as np

from fusion_server import dtypes as dt
from fusion_server.ir import ConcatOp

from . import _functions as F
from . import _reductions as R
from .tensor import Tensor

__array_api_version__ = "2025.12"
# Every version this namespace serves (each later one adds to the ones before).
API_VERSIONS = ("2021.12", "2022.12", "2023.12", "2024.12", "2025.12")

# The standard's constants, as Python floats.
e = math.e
inf = math.inf
nan = math.nan
pi = math.pi

_KINDS = {
    "bool": ("b",),
    "signed integer": ("i",),
    "unsigned integer": ("u",),
    "integral": ("i", "u"),
    "real floating": ("f",),
    "complex floating": ("c",),
    "numeric": ("i", "u", "f", "c"),
}


class FInfo(NamedTuple):
    """Machine limits of a float dtype, as the standard's finfo object: Python numbers."""

    bits: int
    eps: float
    max: float
    min: float
    smallest_normal: float
    dtype: np.dtype


def finfo(dtype: Any) -> FInfo:
    """Machine limits of a float dtype (or of a float tensor's dtype)."""
    info = np.finfo(dtype.dtype if isinstance(dtype, Tensor) else dt.normalize(dtype))
    # numpy gives numpy scalars; the standard asks for Python floats.
    return FInfo(int(info.bits), float(info.eps), float(info.max), float(info.min),
                 float(info.smallest_normal), info.dtype)


def iinfo(dtype: Any) -> np.iinfo:
    """Machine limits of an integer dtype (or of an integer tensor's dtype)."""
    return np.iinfo(dtype.dtype if isinstance(dtype, Tensor) else dt.normalize(dtype))


def result_type(*arrays_and_dtypes: Any) -> np.dtype:
    """The dtype numpy's promotion gives for tensors and dtypes (Python scalars weak)."""
    dtypes, scalars = [], []
    for v in arrays_and_dtypes:
        if isinstance(v, Tensor):
            dtypes.append(v.dtype)
        elif isinstance(v, (bool, int, float, complex)):
            scalars.append(v)
        else:
            dtypes.append(dt.normalize(v))
    if not dtypes:
        raise TypeError("result_type needs at least one tensor or dtype")
    out = dtypes[0]
    for d in dtypes[1:]:
        out = dt.promote(out, d)
    for s in scalars:
        out = dt.promote_scalar(out, s)
    return out


def can_cast(from_: Any, to: Any) -> bool:
    """Whether `from_` (a dtype or tensor) casts to `to` without loss, as numpy says."""
    src = from_.dtype if isinstance(from_, Tensor) else dt.normalize(from_)
    return bool(np.can_cast(src, dt.normalize(to), casting="safe"))


def isdtype(dtype: Any, kind: Any) -> bool:
    """Whether `dtype` is `kind`: a dtype, a kind name ("real floating", ...) or a tuple."""
    d = dt.normalize(dtype)
    if isinstance(kind, tuple):
        return builtins.any(isdtype(d, k) for k in kind)
    if isinstance(kind, str):
        if kind not in _KINDS:
            raise ValueError(f"unknown dtype kind {kind!r}; expected one of {sorted(_KINDS)}")
        return d.kind in _KINDS[kind]
    return d == dt.normalize(kind)


def linspace(start: float, stop: float, num: int, dtype: Any = None, device: Any = None,
             endpoint: bool = True) -> Tensor:
    """`num` evenly spaced values from start to stop (computed on the device, fusable).
    An integer dtype takes the floor of the float64 values, as numpy does."""
    num = operator.index(num)
    if num < 0:
        raise ValueError(f"num must be non-negative, got {num}")
    target = dt.normalize(dtype) if dtype is not None else dt.float64
    if dt.is_bool(target):
        raise TypeError("linspace needs a numeric dtype, not bool")
    work = dt.float64 if dt.is_int(target) else target
    div = (num - 1) if endpoint else num
    step = (stop - start) / div if div > 0 else 0.0
    t = F.arange(num, dtype=work, device=device) * step + start
    if endpoint and num > 1:
        # The last value is exactly `stop`, as numpy makes it.
        t = F.where(F.arange(num, device=device) == num - 1, F.full((), stop, work, device), t)
    if work != target:
        t = F.astype(F.unary("floor", t), target)
    return t


def _row_col(n_rows: int, n_cols: int, device: Any) -> tuple[Tensor, Tensor]:
    """Row and column index of every element of an (n_rows, n_cols) grid, computed from
    one flat index so that they fuse with what uses them (views would not)."""
    flat = F.flat_index((n_rows, n_cols), device=device)
    if n_cols == 0:
        return flat, flat
    return flat // n_cols, flat % n_cols


def eye(n_rows: int, n_cols: int | None = None, k: int = 0, dtype: Any = None, device: Any = None) -> Tensor:
    """Ones on the k-th diagonal, zeros elsewhere (one fused kernel)."""
    n_cols = n_rows if n_cols is None else n_cols
    target = dt.float64 if dtype is None else dtype
    if not -n_rows < k < n_cols:  # (no element on that diagonal: k may be any Python int)
        return F.zeros((n_rows, n_cols), target, device)
    rows, cols = _row_col(n_rows, n_cols, device)
    return F.astype(rows + k == cols, target)


def _triangle(x: Tensor, k: int, lower: bool) -> Tensor:
    if x.ndim < 2:
        raise ValueError("tril and triu need at least 2 dimensions")
    rows, cols = _row_col(x.shape[-2], x.shape[-1], x.device)
    keep = (cols <= rows + k) if lower else (cols >= rows + k)
    return F.where(keep, x, F.zeros((), x.dtype, x.device))


def tril(x: Tensor, k: int = 0) -> Tensor:
    """The lower triangle of the last two dimensions (others zeroed)."""
    return _triangle(x, k, True)


def triu(x: Tensor, k: int = 0) -> Tensor:
    """The upper triangle of the last two dimensions (others zeroed)."""
    return _triangle(x, k, False)


def flip(x: Tensor, axis: int | tuple[int, ...] | None = None) -> Tensor:
    """x with the order of elements reversed along `axis` (all axes when None): a view."""
    axes = range(x.ndim) if axis is None else ((axis,) if isinstance(axis, int) else axis)
    key = [slice(None)] * x.ndim
    for a in axes:
        key[F._axis(a, x.ndim)] = slice(None, None, -1)
    return F.getitem(x, tuple(key))


def all(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Whether every element (along `axis`) is true."""
    return R.min(F.astype(x, dt.bool_), axis=axis, keepdims=keepdims) if x.size else F.full(
        R._out_shape(x, R._axes(x, axis), keepdims), True, dt.bool_)


def any(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Whether any element (along `axis`) is true."""
    return R.max(F.astype(x, dt.bool_), axis=axis, keepdims=keepdims) if x.size else F.full(
        R._out_shape(x, R._axes(x, axis), keepdims), False, dt.bool_)


def var(x: Tensor, axis: Any = None, correction: float = 0.0, keepdims: bool = False) -> Tensor:
    """Variance with `correction` degrees of freedom removed (numpy's ddof); of complex
    values, the mean of |x - mean|^2 (real), as numpy."""
    mu = R.mean(x, axis=axis, keepdims=True)
    dev = (x if dt.is_inexact(x.dtype) else F.astype(x, dt.float64)) - mu
    n = math.prod(x.shape[d] for d in R._axes(x, axis))
    square = F.unary("real", dev * F.unary("conj", dev)) if dev.dtype.kind == "c" else dev * dev
    total = R.sum(square, axis=axis, keepdims=keepdims)
    return total * (1.0 / (n - correction)) if n - correction > 0 else total * float("nan")


def std(x: Tensor, axis: Any = None, correction: float = 0.0, keepdims: bool = False) -> Tensor:
    """Standard deviation (the square root of `var`)."""
    return F.unary("sqrt", var(x, axis=axis, correction=correction, keepdims=keepdims))


def matrix_transpose(x: Tensor) -> Tensor:
    """The last two dimensions swapped (a view)."""
    return x.mT


def vecdot(x1: Tensor, x2: Tensor, axis: int = -1) -> Tensor:
    """Dot products along `axis`, broadcasting the rest (one fused reduction), in the
    operands' promoted dtype; complex x1 is conjugated first, as the standard says. The
    sizes along `axis` must match (they do not broadcast)."""
    x1, x2 = (t if type(t) is Tensor else F._as_tensor(t, None) for t in (x1, x2))
    n = min(x1.ndim, x2.ndim)
    if n == 0 or not -n <= axis < n:
        raise ValueError(f"vecdot: axis {axis} is out of range for shapes {x1.shape} and {x2.shape}")
    if x1.shape[axis] != x2.shape[axis]:
        raise ValueError(f"vecdot: the sizes along axis {axis} differ ({x1.shape} and {x2.shape})")
    if x1.dtype.kind == "c":
        x1 = F.unary("conj", x1)
    product = x1 * x2
    # sum alone would widen int32 and bool to int64; vecdot keeps the promoted dtype.
    return R.sum(product, axis=axis, dtype=product.dtype)


def _contiguous(x: Tensor) -> Tensor:
    """x itself when its elements are in C order (size-1 dims ignored), else a copy."""
    expected = 1
    for n, s in zip(reversed(x.shape), reversed(x.strides_elements)):
        if n == 1:
            continue
        if s != expected:
            return F.unary("copy", x)
        expected *= n
    return x


def concat(arrays: Any, axis: int | None = 0) -> Tensor:
    """The tensors joined along `axis` (None: flattened first), numpy's promotion.

    One rectangular device copy per input into the result; inputs that are not in C
    order are copied into it first.
    """
    arrays = list(arrays)
    if not arrays:
        raise ValueError("concat needs at least one tensor")
    client = F._client_of(arrays)
    ts = [a if type(a) is Tensor else F._as_tensor(a, client) for a in arrays]
    if axis is None:
        ts = [F.reshape(t, (-1,)) for t in ts]
        axis = 0
    ndim = ts[0].ndim
    if ndim == 0:
        raise ValueError("zero-dimensional tensors cannot be concatenated")
    for t in ts[1:]:
        if t.ndim != ndim:
            raise ValueError(f"concat: all tensors need {ndim} dimensions, got one with {t.ndim}")
    axis = F._axis(axis, ndim)
    for t in ts[1:]:
        if t.shape[:axis] + t.shape[axis + 1:] != ts[0].shape[:axis] + ts[0].shape[axis + 1:]:
            raise ValueError(f"concat along axis {axis}: shapes {ts[0].shape} and {t.shape} differ elsewhere")
    dtype = result_type(*ts)
    ts = [t if t.dtype == dtype else F.astype(t, dtype) for t in ts]  # (read in their own layouts)
    shape = ts[0].shape[:axis] + (builtins.sum(t.shape[axis] for t in ts),) + ts[0].shape[axis + 1:]
    ir = F._new(client, shape, dtype)
    out = Tensor._make(client, ir.id, ir.shape, ir.dtype)
    client.register(ConcatOp(tuple(t._id for t in ts), axis, ir))
    return out


def stack(arrays: Any, axis: int = 0) -> Tensor:
    """The tensors (all of one shape) stacked along a new axis."""
    arrays = list(arrays)
    if not arrays:
        raise ValueError("stack needs at least one tensor")
    client = F._client_of(arrays)
    ts = [a if type(a) is Tensor else F._as_tensor(a, client) for a in arrays]
    for t in ts[1:]:
        if t.shape != ts[0].shape:
            raise ValueError(f"stack: all tensors need one shape, got {ts[0].shape} and {t.shape}")
    ndim = ts[0].ndim + 1
    if not -ndim <= axis < ndim:
        raise IndexError(f"axis {axis} is out of range for {ndim} dimensions")
    return concat([F.expand_dims(t, axis % ndim) for t in ts], axis=axis % ndim)


def moveaxis(x: Tensor, source: int | tuple[int, ...], destination: int | tuple[int, ...]) -> Tensor:
    """x with the axes `source` moved to `destination` (the others keep their order): a view."""
    src = (source,) if isinstance(source, int) else tuple(source)
    dst = (destination,) if isinstance(destination, int) else tuple(destination)
    if len(src) != len(dst):
        raise ValueError(f"moveaxis: {len(src)} source axes but {len(dst)} destinations")
    src = tuple(F._axis(a, x.ndim) for a in src)
    dst = tuple(F._axis(a, x.ndim) for a in dst)
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise ValueError("moveaxis: repeated axes")
    order = [a for a in range(x.ndim) if a not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return F.permute_dims(x, tuple(order))


def signbit(x: Tensor) -> Tensor:
    """Whether each element's sign bit is set (True for -0.0 and negative NaNs too)."""
    if type(x) is not Tensor:
        x = F._as_tensor(x, None)
    if x.dtype.kind == "c":
        raise TypeError(f"signbit needs a real-valued tensor, not {x.dtype.name}")
    if x.dtype.kind == "f":
        return F.binary("less", F.binary("copysign", 1.0, x), 0.0)
    if x.dtype.kind == "b":
        return F.full_like(x, False, dtype=dt.bool_)
    return F.binary("less", x, 0)


def reciprocal(x: Tensor) -> Tensor:
    """1 / x, element-wise, for floating-point tensors."""
    if type(x) is not Tensor:
        x = F._as_tensor(x, None)
    if x.dtype.kind not in "fc":
        raise TypeError(f"reciprocal needs a floating-point tensor, not {x.dtype}")
    return F.binary("divide", 1.0, x)


def diff(x: Tensor, /, *, axis: int = -1, n: int = 1, prepend: Any = None, append: Any = None) -> Tensor:
    """The n-th forward difference along `axis`, as numpy.diff: `x[1:] - x[:-1]` there,
    `n` times, after joining `prepend` and `append`. Slices of a value computed in the same
    block fuse with it (diff(exp(x)) is one kernel)."""
    if type(x) is not Tensor:
        x = F._as_tensor(x, None)
    n = operator.index(n)
    if n < 0:
        raise ValueError(f"diff: n must be non-negative, got {n}")
    if x.ndim == 0:
        raise ValueError("diff needs a tensor of at least one dimension")
    axis = F._axis(axis, x.ndim)
    if prepend is not None or append is not None:
        parts = [] if prepend is None else [_slab(prepend, x, axis)]
        parts.append(x)
        if append is not None:
            parts.append(_slab(append, x, axis))
        x = concat(parts, axis=axis)
    head = (slice(None),) * axis
    step = "not_equal" if x.dtype.kind == "b" else "subtract"  # (numpy's diff of booleans)
    for _ in range(n):
        x = F.binary(step, F.getitem(x, head + (slice(1, None),)), F.getitem(x, head + (slice(None, -1),)))
    return x


def _slab(value: Any, x: Tensor, axis: int) -> Tensor:
    """`value` to join to x along `axis`: a scalar becomes one slice of x's other sizes."""
    shape = x.shape[:axis] + (1,) + x.shape[axis + 1:]
    if F._is_scalar(value):
        return F.full(shape, value, result_type(x, value), device=x.device)
    t = value if type(value) is Tensor else F._as_tensor(value, x._client)
    return F.broadcast_to(t, shape) if t.ndim == 0 else t


def count_nonzero(x: Tensor, /, *, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Tensor:
    """How many elements along `axis` (None: all) are not zero, as int64: one fused
    comparison and sum."""
    if type(x) is not Tensor:
        x = F._as_tensor(x, None)
    return R.sum(F.binary("not_equal", x, False if x.dtype.kind == "b" else 0), axis=axis, keepdims=keepdims)


def isin(x1: Any, x2: Any, /, *, invert: bool = False) -> Tensor:
    """For each element of x1, whether it equals an element of x2 (not, with `invert`), as
    numpy.isin; NaN is in nothing. One kernel: the comparison of each element of x1 with
    every element of x2, reduced by `any` as it is computed (len(x2) steps per element).
    Either may be a Python scalar (2025.12): a scalar x2 is one comparison."""
    client = F._client_of((x1, x2))
    if F._is_scalar(x1) and F._is_scalar(x2):
        raise TypeError("isin needs at least one tensor operand")
    if F._is_scalar(x2):
        hit = F.binary("equal", x1 if type(x1) is Tensor else F._as_tensor(x1, client), x2)
        return F.unary("logical_not", hit) if invert else hit
    t2 = x2 if type(x2) is Tensor else F._as_tensor(x2, client)
    if F._is_scalar(x1):
        t1 = F.full((), x1, F._promote((x1, t2)), device=t2.device)
    else:
        t1 = x1 if type(x1) is Tensor else F._as_tensor(x1, client)
    if t2.size == 0 or t1.size == 0:
        return F.full(t1.shape, bool(invert), dt.bool_, device=t1.device)
    flat = F.reshape(t2, (-1,))
    hit = any(F.binary("equal", F.reshape(t1, t1.shape + (1,)), flat), axis=-1)
    return F.unary("logical_not", hit) if invert else hit


def unstack(x: Tensor, /, *, axis: int = 0) -> tuple[Tensor, ...]:
    """The slices of x along `axis`, as a tuple of views."""
    if type(x) is not Tensor:
        x = F._as_tensor(x, None)
    if x.ndim == 0:
        raise ValueError("unstack needs a tensor of at least one dimension")
    axis = F._axis(axis, x.ndim)
    head = (slice(None),) * axis
    return tuple(F.getitem(x, head + (i,)) for i in range(x.shape[axis]))
