"""Reductions: sum, prod, max, min, mean, argmax, argmin over axes, with keepdims.

Each is one ReduceOp (mean adds a multiply by 1/n); element-wise work before and after
fuses into the reduction's kernel.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from fusion_server import dtypes as dt
from fusion_server.ir import ReduceOp, ScanOp

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
        if dt.is_inexact(dtype):
            # float32 sums accumulate in float64 where the device has it (complex64 in
            # complex128): more exact than numpy's pairwise float32 sum, and free on
            # bandwidth-bound reductions.
            return _wide(dtype, client)
        return dt.uint64 if dt.is_unsigned(dtype) else dt.int64
    return dtype


def _wide(dtype: np.dtype, client) -> np.dtype:
    """What values of an inexact `dtype` accumulate in: the double-precision dtype of its
    kind where the device has fp64."""
    if not client.fp64:
        return dtype
    return dt.complex128 if dtype.kind == "c" else dt.float64 if dtype.kind == "f" else dtype


def _reduce(name: str, x: Any, axis: Any, keepdims: bool, dtype: Any = None,
            out_shape: tuple[int, ...] | None = None) -> Tensor:
    if type(x) is not Tensor:
        x = F._as_tensor(x, None)
    if x.dtype.kind == "c" and name not in ("sum", "prod"):
        raise TypeError(f"{name} needs a real-valued tensor; complex numbers ({x.dtype.name}) have no order")
    requested = None
    if dtype is not None:
        requested = dt.normalize(dtype)
        x = F.astype(x, requested, copy=False)
    axes = _axes(x, axis)
    if x._strides is not None and (name not in ("argmax", "argmin") or len(axes) == 1):
        order = F._dense_order(x)
        if order is not None:
            return _in_dense_order(name, x, order, axes, keepdims, requested)
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
        out_dtype = requested or (x.dtype if dt.is_inexact(x.dtype) else acc)
    else:
        out_dtype = x.dtype
    shape = out_shape or _out_shape(x, axes, keepdims)
    out = F._new(client, shape, out_dtype)
    t = Tensor._make(client, out.id, shape, out_dtype)
    client.record(ReduceOp(name, x._id, axes, acc, out), x)
    return t


def _in_dense_order(name: str, x: Tensor, order: tuple[int, ...], axes: tuple[int, ...],
                    keepdims: bool, dtype: np.dtype | None) -> Tensor:
    """Reduction `name` of a view that is one dense block permuted (`y.T`, as an
    element-wise op on `x.T` leaves its result: see _functions._in_dense_order) over the
    block in its memory order, the result's axes put back in x's order: the reduction
    then reads its input, and the element-wise work before it fuses, as for a row-major
    value. (argmax / argmin over several axes keep x's order: their flat index is x's.)"""
    position = {d: i for i, d in enumerate(order)}  # x's axis d is the block's axis position[d]
    block = F._block_of(x, order)
    block_axes = tuple(position[d] for d in axes)
    block_axis = block_axes[0] if name in ("argmax", "argmin") else block_axes
    kept = [d for d in range(x.ndim) if d not in axes]  # x's axes in the result
    in_block = sorted(kept, key=position.__getitem__)  # the same axes as the block reduction leaves them
    if keepdims and in_block == kept:  # (the same elements in the same order: only the 1s move)
        return _reduce(name, block, block_axis, True, dtype, out_shape=_out_shape(x, axes, True))
    reduced = _reduce(name, block, block_axis, keepdims, dtype)
    if keepdims:
        kept = list(range(x.ndim))
        in_block = sorted(kept, key=position.__getitem__)
    back = [in_block.index(d) for d in kept]  # result axis i is the block result's axis back[i]
    if back == sorted(back):
        return reduced
    return F.in_given_order(reduced, F.inverse_permutation(back))


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
    if not dt.is_inexact(x.dtype):
        x = F.astype(x, dt.float64)
    total = _reduce("sum", x, axis, keepdims)
    return total * (1.0 / n) if n else total * float("nan")


def _cumulative(name: str, x: Any, axis: Any, dtype: Any, include_initial: Any) -> Tensor:
    from ._array_api import _contiguous

    what = f"cumulative_{name}"
    if type(x) is not Tensor:
        x = F._as_tensor(x, None)
    if x.ndim == 0:
        raise ValueError(f"{what}: x must have at least one dimension, got a 0-d tensor")
    if axis is None:
        if x.ndim > 1:
            raise ValueError(f"{what}: axis is required for a tensor of {x.ndim} dimensions")
        axis = 0
    axis = F._one_axis(x, axis, what)
    include_initial = F._flag(include_initial, "include_initial", what)
    if dtype is not None:
        out_dtype = dt.normalize(dtype)
    elif dt.is_inexact(x.dtype):
        out_dtype = x.dtype
    else:  # signed ints and bools to int64, unsigned ints to uint64, as sum (and numpy)
        out_dtype = dt.uint64 if dt.is_unsigned(x.dtype) else dt.int64
    x = F.astype(x, out_dtype, copy=False)
    last = x.ndim - 1
    order = [d for d in range(x.ndim) if d != axis] + [axis]
    rows = _contiguous(F.permute_dims(x, order) if axis != last else x)
    client = x._client
    if rows.size == 0:
        result = F.full(rows.shape, 0, out_dtype, device=x.device)
    else:
        acc = _wide(out_dtype, client)
        out = F._new(client, rows.shape, out_dtype)
        result = Tensor._make(client, out.id, rows.shape, out_dtype)
        client.record(ScanOp(name, acc, (rows._id,), out), rows)
    if include_initial:
        from ._array_api import concat

        start = F.full((*rows.shape[:-1], 1), 0 if name == "sum" else 1, out_dtype, device=x.device)
        result = concat([start, result], axis=-1)
    if axis != last:
        result = F.permute_dims(result, [order.index(d) for d in range(x.ndim)])
    return result


def cumulative_sum(x: Any, /, *, axis: int | None = None, dtype: Any = None, include_initial: bool = False) -> Tensor:
    """Running sums along `axis` (optional for a 1-d tensor); `include_initial` starts each
    with 0 (one element longer). Signed ints and bools sum to int64, unsigned ints to
    uint64, floats in their dtype (float32 accumulated in float64 where the device has it).
    On the device: each row cut into chunks, folded, then scanned from the chunk's offset."""
    return _cumulative("sum", x, axis, dtype, include_initial)


def cumulative_prod(x: Any, /, *, axis: int | None = None, dtype: Any = None, include_initial: bool = False) -> Tensor:
    """Running products along `axis`, as `cumulative_sum` (with 1 to start from)."""
    return _cumulative("prod", x, axis, dtype, include_initial)
