"""Reductions: sum, prod, max, min, mean, argmax, argmin over axes, with keepdims.

Each is one ReduceOp (mean adds a multiply by 1/n); element-wise work before and after
fuses into the reduction's kernel.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from fusion_server import dtypes as dt
from fusion_server.ir import ReduceOp

from . import _functions as F
from .tensor import Tensor


def _axes(x: Tensor, axis: int | tuple[int, ...] | None) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(x.ndim))
    items = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    out = []
    for a in items:
        a = operator.index(a)
        if x.ndim == 0:
            if a not in (0, -1):  # numpy lets a 0-d array be reduced over axis 0 / -1
                raise np.exceptions.AxisError(f"axis {a} is out of bounds for a 0-d tensor")
            continue
        if not -x.ndim <= a < x.ndim:
            raise np.exceptions.AxisError(f"axis {a} is out of bounds for a tensor of {x.ndim} dimensions")
        out.append(a % x.ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"repeated axis in {axis}")
    return tuple(sorted(out))


def _out_shape(x: Tensor, axes: tuple[int, ...], keepdims: bool) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if d in axes else n for d, n in enumerate(x.shape))
    return tuple(n for d, n in enumerate(x.shape) if d not in axes)


def _accumulator(name: str, dtype: np.dtype, client) -> np.dtype:
    if name in ("sum", "prod"):
        if dt.is_float(dtype):
            # float32 sums accumulate in float64 where the device has it: more exact than
            # numpy's pairwise float32 sum, and free on bandwidth-bound reductions.
            return dt.float64 if client.fp64 else dtype
        return dt.uint64 if dt.is_unsigned(dtype) else dt.int64
    return dtype


def _reduce(name: str, x: Any, axis: Any, keepdims: bool, dtype: Any = None) -> Tensor:
    if type(x) is not Tensor:
        x = F._as_tensor(x, None)
    requested = None
    if dtype is not None:
        requested = dt.normalize(dtype)
        x = F.astype(x, requested, copy=False)
    axes = _axes(x, axis)
    nred = 1
    for d in axes:
        nred *= x.shape[d]
    if nred == 0 and name in ("max", "min", "argmax", "argmin"):
        raise ValueError(f"zero-size tensor to reduction operation {name}, which has no identity")
    if name in ("argmax", "argmin") and axis is not None and not isinstance(axis, (int, np.integer)):
        raise TypeError(f"{name} takes one axis (an int) or None")
    client = x._client
    acc = _accumulator(name, x.dtype, client)
    if name in ("argmax", "argmin"):
        out_dtype = dt.int64
    elif name in ("sum", "prod"):
        out_dtype = requested or (x.dtype if dt.is_float(x.dtype) else acc)
    else:
        out_dtype = x.dtype
    shape = _out_shape(x, axes, keepdims)
    out = F._new(client, shape, out_dtype)
    t = Tensor._make(client, out.id, shape, out_dtype)
    client.record(ReduceOp(name, x._id, axes, acc, out), x)
    return t


def sum(x: Any, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Sum over `axis` (None: all); signed ints and bools sum to int64, unsigned ints to
    uint64, as numpy."""
    return _reduce("sum", x, axis, keepdims, dtype)


def prod(x: Any, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Tensor:
    """Product over `axis` (None: all); signed ints and bools multiply to int64, unsigned
    ints to uint64, as numpy."""
    return _reduce("prod", x, axis, keepdims, dtype)


def max(x: Any, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Largest element over `axis`; NaN propagates; an empty reduction raises."""
    return _reduce("max", x, axis, keepdims)


def min(x: Any, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Smallest element over `axis`; NaN propagates; an empty reduction raises."""
    return _reduce("min", x, axis, keepdims)


def argmax(x: Any, axis: int | None = None, keepdims: bool = False) -> Tensor:
    """Index of the first largest element (flat index when axis is None); int64."""
    return _reduce("argmax", x, axis, keepdims)


def argmin(x: Any, axis: int | None = None, keepdims: bool = False) -> Tensor:
    """Index of the first smallest element (flat index when axis is None); int64."""
    return _reduce("argmin", x, axis, keepdims)


def mean(x: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    """Arithmetic mean over `axis`; ints and bools give float64, as numpy."""
    if type(x) is not Tensor:
        x = F._as_tensor(x, None)
    axes = _axes(x, axis)
    n = 1
    for d in axes:
        n *= x.shape[d]
    if not dt.is_float(x.dtype):
        x = F.astype(x, dt.float64)
    total = _reduce("sum", x, axis, keepdims)
    return total * (1.0 / n) if n else total * float("nan")
