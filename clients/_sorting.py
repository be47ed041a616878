"""Sorting, searching and set functions of the Array API: sort, argsort, searchsorted,
unique_*, nonzero.

`sort` and `argsort` run on the device (see fusion_server/codegen/sort.py): the axis is
moved last with a view (a copy when the rows are not in C order then), every row is
sorted stably, and the result is viewed back. The unique_* functions and `nonzero` have
output shapes that depend on the values: on GPUs they run on the device with one read
of a count (see _indexing.selected_positions); on CPU devices `nonzero` and small
unique_* inputs are read once and finished by numpy (their results are device tensors
again), large unique_* inputs run on the device (see UNIQUE_ON_DEVICE_MIN).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from fusion_server import dtypes as dt
from fusion_server.fusers.sort import MAX_ROW
from fusion_server.ir import SearchOp, SortOp

from . import _functions as F
from . import _indexing
from ._array_api import _contiguous
from .tensor import Tensor


class UniqueAllResult(NamedTuple):
    values: Tensor
    indices: Tensor
    inverse_indices: Tensor
    counts: Tensor


class UniqueCountsResult(NamedTuple):
    values: Tensor
    counts: Tensor


class UniqueInverseResult(NamedTuple):
    values: Tensor
    inverse_indices: Tensor


def _tensor(x: Any, what: str) -> Tensor:
    if type(x) is Tensor:
        return x
    if isinstance(x, (np.ndarray, list, tuple)):
        return F.asarray(x)
    raise TypeError(f"{what}() takes a tensor, not {type(x).__name__}")


def _sorted(name: str, x: Any, axis: Any, descending: Any, stable: Any) -> Tensor:
    """One SortOp over `axis` of x: the sorted values ("sort") or positions ("argsort")."""
    x = _tensor(x, name)
    if x.dtype.kind == "c":
        raise TypeError(f"{name} needs a real-valued tensor; complex numbers ({x.dtype.name}) have no order")
    axis = F._one_axis(x, axis, name)
    descending = F._flag(descending, "descending", name)
    F._flag(stable, "stable", name)  # always stable: a stable order is also a valid unstable one
    n_rows = x.size // x.shape[axis] if x.shape[axis] else 0
    if x.shape[axis] > MAX_ROW or n_rows >= 2**31:
        raise ValueError(f"{name}: rows of {x.shape[axis]} elements ({n_rows} rows) are more than the device "
                         f"sort supports (rows of at most {MAX_ROW} elements, fewer than 2**31 rows)")
    order = [d for d in range(x.ndim) if d != axis] + [axis]
    rows = _contiguous(x if axis == x.ndim - 1 else F.permute_dims(x, order))
    client = rows._client
    dtype = rows.dtype if name == "sort" else dt.int64
    out = F._new(client, rows.shape, dtype)
    result = Tensor._make(client, out.id, rows.shape, dtype)
    client.register(SortOp(name, rows._id, descending, (out,)))
    if axis == x.ndim - 1:
        return result
    back = [0] * x.ndim
    for pos, d in enumerate(order):
        back[d] = pos
    return F.permute_dims(result, back)


def sort(x: Tensor, /, *, axis: int = -1, descending: bool = False, stable: bool = True) -> Tensor:
    """x sorted along `axis`, on the device. NaNs go last (descending too); equal elements
    keep their order (the sort is always stable); -0.0 and 0.0 are equal."""
    return _sorted("sort", x, axis, descending, stable)


def argsort(x: Tensor, /, *, axis: int = -1, descending: bool = False, stable: bool = True) -> Tensor:
    """Positions (int64) that sort x along `axis`, on the device; like `sort`, stable, NaNs
    last, and for `descending` equal elements keep their original order."""
    return _sorted("argsort", x, axis, descending, stable)


def searchsorted(x1: Tensor, x2: Any, /, *, side: str = "left", sorter: Any = None) -> Tensor:
    """For each element of x2, the index in the sorted one-dimensional x1 where it would be
    inserted to keep x1 sorted (side "left": before equal elements; "right": after them),
    as numpy.searchsorted; int64, x2's shape. `sorter`: indices that sort x1. NaN counts
    as larger than every number, where the sort puts it. On the device: a binary search
    per element, in its place in the stream (the work around it fuses, not across it)."""
    x1 = _tensor(x1, "searchsorted")
    if x1.ndim != 1:
        raise ValueError(f"searchsorted: x1 must be one-dimensional, got shape {x1.shape}")
    if side not in ("left", "right"):
        raise ValueError(f"searchsorted: side must be 'left' or 'right', not {side!r}")
    if dt.is_bool(x1.dtype) or x1.dtype.kind == "c":
        raise TypeError(f"searchsorted: x1 must have a real-valued dtype, not {x1.dtype.name}")
    client = x1._client
    if sorter is not None:
        from ._indexing import take

        x1 = take(x1, sorter)
    if F._is_scalar(x2):  # (a Python scalar is weak: it takes x1's dtype where its kind fits)
        dtype = F._promote((x1, x2))
        values = F.full((), x2, dtype, device=x1.device)
    else:
        values = x2 if type(x2) is Tensor else F._as_tensor(x2, client)
        dtype = F._promote((x1, values))
    shape = values.shape
    if values.size == 0 or x1.size == 0:
        return F.full(shape, 0, dt.int64, device=x1.device)
    row = _contiguous(F.astype(x1, dtype, copy=False))
    flat = _contiguous(F.reshape(F.astype(values, dtype, copy=False), (-1,)))
    out = F._new(client, flat.shape, dt.int64)
    found = Tensor._make(client, out.id, flat.shape, dt.int64)
    client.register(SearchOp(side, (row._id, flat._id), out))
    return F.reshape(found, shape)


def _host(x: Any, what: str) -> tuple[np.ndarray, Any]:
    """x's values on the host (one read) and its device."""
    x = _tensor(x, what)
    return x.numpy(), x.device


def _unique(x: Any, what: str, *fields: str) -> tuple[Tensor, ...]:
    """`fields` of np.unique over x's values (each NaN distinct): on the device
    (`_unique_on_device`: GPUs, and large x on CPU devices), or by numpy after one read,
    back on x's device.

    Always computed with the first indices: numpy then sorts stably, so the k-th NaN of x
    is the k-th NaN of the values whichever function asks.
    """
    x = _tensor(x, what)
    if x.size and x.dtype.kind != "c" and _unique_on_device_for(x):
        return _unique_on_device(x, fields)
    host, device = _host(x, what)
    values, indices, inverse, counts = np.unique(
        host.reshape(-1), return_index=True, return_inverse=True, return_counts=True, equal_nan=False)
    found = {
        "values": values,
        "indices": indices.astype(np.int64),
        "inverse_indices": inverse.astype(np.int64).reshape(host.shape),  # the standard's shape
        "counts": counts.astype(np.int64),
    }
    return tuple(F.asarray(found[f], device=device) for f in ("values", *fields))


# CPU devices run unique_* on the device from this many elements: below it numpy's unique
# (its stable argsort a scalar timsort) is the faster. unique_inverse of int32 labels on
# a Zen 4, read against on the device, ms: Intel's CPU runtime 2^13 0.73 against 2.2,
# 2^16 4.8 against 2.2, 2^18 26 against 5.0; PoCL 3.0 2^13 1.0 against 3.9, 2^16 4.8
# against 2.6, 2^18 18 against 7.1.
UNIQUE_ON_DEVICE_MIN = 1 << 15


def _unique_on_device_for(x: Tensor) -> bool:
    """Whether unique_* of x run on the device: on GPUs (see _indexing.selects_on_device),
    and on CPU devices from UNIQUE_ON_DEVICE_MIN elements."""
    return _indexing.selects_on_device(x) or (_indexing.MASKS_ON_DEVICE is None and x.size >= UNIQUE_ON_DEVICE_MIN)


def _unique_on_device(x: Tensor, fields: tuple[str, ...]) -> tuple[Tensor, ...]:
    """The values and `fields` of `_unique`, computed on the device with one read (the
    number of distinct values): a stable argsort, the sorted values' first elements of
    each run of equals (a NaN equals nothing: each is its own), their positions and
    ranks (_indexing.ranked_positions), and gathers and a scatter from there."""
    n = x.size
    flat = F.reshape(x, (n,))
    order = _sorted("argsort", flat, -1, False, True)  # (stable: the first of equals first)
    ordered = _indexing.gather_positions(flat, order)
    first = F.full((n,), True, dt.bool_, x.device)  # (assigned: one fused where, no copy)
    first[1:] = ordered[1:] != ordered[:-1]
    runs, starts = _indexing.ranked_positions(first)  # (runs: each sorted element's run, from 1)
    found = {"values": _indexing.gather_positions(ordered, starts)}
    if "indices" in fields:
        found["indices"] = _indexing.gather_positions(order, starts)
    if "counts" in fields:
        ends = F.full(starts.shape, n, dt.int64, x.device)
        ends[:-1] = starts[1:]
        found["counts"] = ends - starts
    if "inverse_indices" in fields:  # (each element's run, written back to its place)
        inverse = F.astype(runs - 1, dt.int64)
        found["inverse_indices"] = F.reshape(_indexing.scatter_positions(inverse, order, inverse), x.shape)
    return tuple(found[f] for f in ("values", *fields))


def unique_values(x: Tensor, /) -> Tensor:
    """The distinct values of x, sorted (NaNs each distinct, last). One read: the result's
    length depends on the values (see `_unique`)."""
    return _unique(x, "unique_values")[0]


def unique_counts(x: Tensor, /) -> UniqueCountsResult:
    """Distinct values and how often each occurs (each NaN once); one read (see `_unique`)."""
    return UniqueCountsResult(*_unique(x, "unique_counts", "counts"))


def unique_inverse(x: Tensor, /) -> UniqueInverseResult:
    """Distinct values and, for each element of x, the position of its value among them
    (shape of x); one read (see `_unique`)."""
    return UniqueInverseResult(*_unique(x, "unique_inverse", "inverse_indices"))


def unique_all(x: Tensor, /) -> UniqueAllResult:
    """Distinct values, the flat index of each one's first occurrence, the inverse
    indices (shape of x) and the counts; one read (see `_unique`)."""
    return UniqueAllResult(*_unique(x, "unique_all", "indices", "inverse_indices", "counts"))


def nonzero(x: Tensor, /) -> tuple[Tensor, ...]:
    """Indices (int64, one tensor per dimension, C order) of x's non-zero elements: on
    GPUs found on the device with one read of their count, on CPU devices by numpy after
    one read of x (see _indexing.selects_on_device)."""
    x = _tensor(x, "nonzero")
    if x.ndim == 0:
        raise ValueError("nonzero() of a 0-d tensor is not defined; use expand_dims or reshape first")
    if _indexing.selects_on_device(x):
        return _indexing.nonzero_on_device(x)
    return tuple(F.asarray(i.astype(np.int64), device=x.device) for i in np.nonzero(x.numpy()))


__all__ = ["UniqueAllResult", "UniqueCountsResult", "UniqueInverseResult", "argsort", "nonzero", "sort",
           "unique_all", "unique_counts", "unique_inverse", "unique_values"]
