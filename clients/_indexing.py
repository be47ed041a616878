"""Indexing beyond views: assignment (`x[key] = value`), in-place operators, integer-array
gathers, boolean masks and `take`.

Tensors are immutable on the server, so assignment is a functional update: the new value
is computed on the device and the handle is rebound to it (copy-on-write). Basic keys
assign with one fused `where`; integer arrays read and write through one small device
kernel (a gather or a scatter) that runs in stream order like any custom kernel. A
scatter writes into the old value's buffer when the assignment kills it and nothing else
sees it (MoveOp.old_dies), and small regions of large written tensors scatter too
(SCATTER_REGION_MIN).
"""

from __future__ import annotations

import math
import operator
from typing import Any, NamedTuple

import numpy as np

from fusion_server import dtypes as dt
from fusion_server import opset
from fusion_server.handles import READY
from fusion_server.ir import MoveOp, contiguous_strides

from . import _functions as F
from . import _reductions as R
from . import _traced
from .tensor import Tensor, swap_ids

_PY_SCALARS = (bool, int, float, complex)


# -- keys -------------------------------------------------------------------------------------
def _is_basic(key: Any) -> bool:
    """Whether every item of `key` is an int, a slice, None or ... (a bool is a mask)."""
    for k in key if isinstance(key, tuple) else (key,):
        if k is None or k is Ellipsis or type(k) is slice:
            continue
        if isinstance(k, (int, np.integer)) and not isinstance(k, bool):
            continue
        return False
    return True


def _as_mask(k: Any) -> Tensor | np.ndarray | None:
    """k when it is a boolean index: a tensor (selected on the device, see
    `nonzero_on_device`), or the values of an array or list, else None."""
    if type(k) is Tensor:
        return k if dt.is_bool(k.dtype) else None
    if isinstance(k, (list, np.ndarray)):
        host = np.asarray(k)
        return host if host.dtype.kind == "b" else None
    return None


def _scalar_mask(k: Any) -> bool | None:
    """The value of a 0-d boolean index (True, np.bool_, a 0-d bool tensor or array), else None."""
    if isinstance(k, (bool, np.bool_)):
        return bool(k)
    if type(k) is Tensor or isinstance(k, np.ndarray):
        return bool(k) if k.ndim == 0 and (dt.is_bool(k.dtype) if type(k) is Tensor else k.dtype.kind == "b") else None
    return None


def _key_dims(k: Any) -> int:
    """How many of x's dimensions key item k indexes: a mask its ndim, None, ... and 0-d masks none."""
    if k is None or k is Ellipsis or _scalar_mask(k) is not None:
        return 0
    if type(k) is Tensor or isinstance(k, np.ndarray):
        is_bool = dt.is_bool(k.dtype) if type(k) is Tensor else k.dtype.kind == "b"
        return k.ndim if is_bool else 1
    if isinstance(k, list):
        host = np.asarray(k)
        return host.ndim if host.dtype.kind == "b" else 1
    return 1


def _lift_scalar_masks(x: Tensor, key: Any) -> tuple[Tensor, Any]:
    """x and key with every 0-d boolean index spelled as numpy reads it: a new size-1
    dimension where it stands, indexed by [0] when True and by [] when False."""
    items = list(key) if isinstance(key, tuple) else [key]
    for i, k in enumerate(items):
        flag = _scalar_mask(k)
        if flag is None:
            continue
        if any(item is Ellipsis for item in items[:i]):
            axis = x.ndim - sum(_key_dims(item) for item in items[i + 1:])
        else:
            axis = sum(_key_dims(item) for item in items[:i])
        if not 0 <= axis <= x.ndim:
            raise IndexError(f"too many indices for a tensor of {x.ndim} dimensions")
        x = F.expand_dims(x, axis=axis)
        items[i] = np.arange(int(flag), dtype=np.int64)
    return x, tuple(items)


def _drop_scalar_masks(key: Any) -> tuple[Any, bool]:
    """key without its 0-d boolean indices, and whether it still selects anything (no
    False among them). Assigning through True is assigning through the rest of the key."""
    items = key if isinstance(key, tuple) else (key,)
    flags = [_scalar_mask(k) for k in items]
    if all(f is None for f in flags):
        return key, True
    rest = tuple(k for k, f in zip(items, flags) if f is None)
    return rest, all(f is not False for f in flags)


def _mask_fits(mask_shape: tuple[int, ...], dims: tuple[int, ...]) -> bool:
    """Whether a mask of `mask_shape` can index dimensions `dims`: equal sides, or (as numpy
    allows) an empty side that selects nothing."""
    return len(mask_shape) == len(dims) and all(m in (d, 0) for m, d in zip(mask_shape, dims))


def _as_index(k: Any) -> Tensor | np.ndarray:
    """An integer index array: a device tensor as it is, host data as an int64 array."""
    if type(k) is Tensor:
        if not dt.is_int(k.dtype):
            raise IndexError(f"index tensors must have an integer or bool dtype, not {k.dtype.name}")
        return k
    if isinstance(k, (int, np.integer)):
        return np.asarray(k, np.int64)
    if isinstance(k, (list, tuple, np.ndarray)):
        host = np.asarray(k)
        if host.dtype.kind not in "iu" and not (host.size == 0 and host.dtype.kind == "f"):
            raise IndexError(f"index arrays must have an integer or bool dtype, not {host.dtype}")
        return host.astype(np.int64)
    raise IndexError(
        "only integers, slices, None, ..., integer arrays and boolean masks index a tensor, "
        f"not {type(k).__name__}"
    )


class _Selection(NamedTuple):
    """What an advanced key selects: the basic part as a view, then index arrays.

    `basic` (index arrays replaced by full slices) selects a region of `region_shape`;
    `adv` are the dimensions of that region the `indices` (broadcast to `b_shape`) pick
    along. Each dimension of the result walks a region dimension (`region_map`) or an
    index dimension (`b_map`); -1 where it walks none.
    """

    basic: tuple
    region_shape: tuple[int, ...]
    adv: tuple[int, ...]
    indices: tuple[Tensor, ...]
    out_shape: tuple[int, ...]
    region_map: tuple[int, ...]
    b_map: tuple[int, ...]


class _Mask(NamedTuple):
    host: Tensor | np.ndarray  # a boolean index: a tensor, or an array's values on the host


class _InRange(NamedTuple):
    index: Tensor  # an index tensor made in range (a mask's positions): not checked again


# -- selecting by values on the device ----------------------------------------------------------
def selected_positions(mask: Tensor) -> Tensor:
    """The flat positions (int64, C order) of `mask`'s non-zero elements, found on the
    device with one read of their count (the result's shape depends on it)."""
    return ranked_positions(mask)[1]


def ranked_positions(mask: Tensor) -> tuple[Tensor, Tensor]:
    """`selected_positions(mask)`, after each element's rank: how many selected elements
    there are up to it, itself included (int32 where that holds every count).

    A running count of the selected elements gives each its place in the result; the
    others fill the result's tail backwards, so every place is written exactly once (a
    stable partition: no two work-items write one element) by one scatter, queued
    before the count is read, and the tail is cut off as a view."""
    n = mask.size
    if n == 0:
        return F.empty((0,), dt.int32, mask.device), F.empty((0,), dt.int64, mask.device)
    flat = F.reshape(mask, (n,))
    chosen = flat if dt.is_bool(flat.dtype) else flat != 0
    count_dtype = dt.int32 if n < 2**31 else dt.int64  # (half the bytes, where they suffice)
    ranks = R.cumulative_sum(chosen, dtype=count_dtype)  # (inclusive: the k-th selected has rank k)
    # (unselected: the number of them up to here, counted from the end)
    slot = F.where(chosen, ranks - 1, ranks + (n - 1) - F.arange(n, dtype=count_dtype, device=mask.device))
    at = F.arange(n, dtype=dt.int64, device=mask.device)
    positions = scatter_positions(at, slot, at)
    return ranks, positions[:int(ranks[n - 1])]


def _along(n: int, index: Tensor) -> _Selection:
    """The selection of a 1-d region of n elements by one tensor of positions."""
    return _Selection((slice(None),), (n,), (0,), (index,), index.shape, (-1,), (0,))


def gather_positions(src: Tensor, index: Tensor) -> Tensor:
    """src[index] for a 1-d src and positions the caller made in range (not checked: no
    read)."""
    return _move("gather", [src, index], index.shape, src.dtype, _along(src.size, index))


def scatter_positions(old: Tensor, index: Tensor, value: Tensor) -> Tensor:
    """A contiguous 1-d `old` with `value` written at `index` (positions the caller made
    in range and distinct: not checked)."""
    sel = _along(old.size, index)
    region = F.basic_layout(old.shape, (1,), 0, sel.basic)
    return _move("scatter", [old, value, index], old.shape, old.dtype, sel, region)


# Where tensor masks become positions: None decides by the device's kind (see
# selects_on_device); True or False forces one way (benchmarks and tests compare both).
MASKS_ON_DEVICE: bool | None = None


def selects_on_device(x: Tensor) -> bool:
    """Whether a boolean mask on x's device becomes positions there (`selected_positions`)
    rather than read: on GPUs and other accelerators, where the mask and the positions
    would cross the bus. A CPU device shares the host's memory and cores, and numpy's
    nonzero over the read mask is the faster (x[x > 0.5] over 2^22 float32 on Intel's
    CPU runtime: 11 ms read, 22 ms in the five kernels)."""
    if MASKS_ON_DEVICE is not None:
        return MASKS_ON_DEVICE
    return x._client.server.info.kind != "CPU"


def nonzero_on_device(x: Tensor) -> tuple[Tensor, ...]:
    """numpy.nonzero(x) for a tensor of at least one dimension: an index tensor (int64)
    per dimension, from `selected_positions` and one element-wise kernel that unravels
    them (a 1-d x needs none)."""
    positions = selected_positions(x)
    if x.ndim == 1 or x.size == 0:
        return (positions,) * x.ndim  # (every one empty, for an empty x)
    out = []
    inner = x.size
    for n in x.shape:
        inner //= n
        out.append(positions // inner % n)
    return tuple(out)


def _select(x: Tensor, key: Any) -> _Selection:
    """Parse a key with numpy's rules and check its indices against x's shape.

    Masks become their `nonzero()` indices (see `selects_on_device`). Host indices are checked
    on the host; device index tensors with one fused reduction whose result is read.
    """
    key = tuple(_Mask(m) if (m := _as_mask(k)) is not None else k
                for k in (key if isinstance(key, tuple) else (key,)))
    # numpy's rule is about the key as written: index arrays with anything between them
    # (a slice, None, or an ellipsis, even one that stands for no dimension) are separated.
    spots = [i for i, k in enumerate(key) if k is not None and k is not Ellipsis and type(k) is not slice]
    separated = bool(spots) and spots != list(range(spots[0], spots[-1] + 1))
    expanded = F.expand_ellipsis(key, x.ndim, lambda k: k.host.ndim if type(k) is _Mask else 1)
    items: list[Any] = []
    axis = 0
    for k in expanded:
        if type(k) is _Mask:
            m = k.host
            if not _mask_fits(m.shape, x.shape[axis:axis + m.ndim]):
                raise IndexError(
                    f"boolean index of shape {m.shape} does not match the indexed dimensions "
                    f"{tuple(range(axis, axis + m.ndim))} of shape {x.shape[axis:axis + m.ndim]}"
                )
            if type(m) is not Tensor:
                items.extend(m.nonzero())
            elif m._client is x._client and selects_on_device(m):
                items.extend(map(_InRange, nonzero_on_device(m)))
            else:  # (its values, read; another device's mask too)
                items.extend(m.numpy().nonzero())
            axis += m.ndim
        elif k is None:
            items.append(None)
        else:
            items.append(k if type(k) is slice else _as_index(k))
            axis += 1
    # Every item but an int array adds a dimension to the region the basic part selects.
    basic, adv, arrays = [], [], []
    for d, k in enumerate(items):
        if k is None or type(k) is slice:
            basic.append(k)
        else:
            basic.append(slice(None))
            adv.append(d)
            arrays.append(k)
    region_shape, _, _ = F.basic_layout(x.shape, contiguous_strides(x.shape), 0, tuple(basic))
    indices = [_index_on_device(a, region_shape[d], _x_axis(items, i), x)
               for i, (a, d) in enumerate(zip(arrays, adv))]
    try:
        b_shape = F.broadcast_shapes(*(t.shape for t in indices)) if indices else ()
    except ValueError:
        shapes = ", ".join(str(t.shape) for t in indices)
        raise IndexError(f"index arrays of shapes {shapes} do not broadcast together") from None
    indices = [F.broadcast_to(t, b_shape) if t.shape != b_shape else t for t in indices]
    rest = [d for d in range(len(region_shape)) if d not in adv]
    b_dims = list(range(len(b_shape)))
    if not adv or not separated:
        # Adjacent index arrays replace their dimensions in place (numpy's rule) ...
        before = [d for d in rest if not adv or d < adv[0]]
        after = [d for d in rest if adv and d > adv[-1]]
        region_map = before + [-1] * len(b_shape) + after
        b_map = [-1] * len(before) + b_dims + [-1] * len(after)
    else:  # ... separated ones put theirs first.
        region_map = [-1] * len(b_shape) + rest
        b_map = b_dims + [-1] * len(rest)
    out_shape = tuple(b_shape[b] if b >= 0 else region_shape[r] for r, b in zip(region_map, b_map))
    return _Selection(tuple(basic), region_shape, tuple(adv), tuple(indices), out_shape,
                      tuple(region_map), tuple(b_map))


def _x_axis(items: list, i: int) -> int:
    """The axis of x that the i-th index array indexes (for error messages)."""
    seen = axis = 0
    for k in items:
        if k is None:
            continue
        if type(k) is not slice:
            if seen == i:
                return axis
            seen += 1
        axis += 1
    return axis


def _index_on_device(index: Tensor | np.ndarray | _InRange, n: int, axis: int, x: Tensor) -> Tensor:
    """`index` checked against an axis of size n, as a tensor on x's device. Inside a
    clients.jit trace an index tensor is not checked (that reads its values, which are
    not the next call's): the kernel clamps indices into the axis, as JAX does."""
    if type(index) is _InRange:
        return index.index
    if type(index) is Tensor:
        if index._client is not x._client:
            F._client_of((x, index))  # raises, naming both devices
        if index.size and not (_traced.tracing and _traced.current()):
            # A tensor's values never change under its id: one check serves every later
            # use of the same index tensor along an axis at least as long (a loop's
            # gathers and scatters by one index wait for no read).
            checked = getattr(index, "_checked_bound", None)
            if checked is None or checked[0] != index._id or checked[1] > n:
                if _any_outside(index, n):
                    raise IndexError(f"an index in the index tensor is out of bounds for axis {axis} with size {n}")
                index._checked_bound = (index._id, n)
        return index
    if index.size:
        bad = index[(index < -n) | (index >= n)]
        if bad.size:
            raise IndexError(f"index {int(bad.flat[0])} is out of bounds for axis {axis} with size {n}")
    return F.asarray(index, device=x.device)


def _any_outside(index: Tensor, n: int) -> bool:
    """Whether any element of a device index lies outside [-n, n): one fused reduction, read."""
    from ._array_api import any as any_

    return bool(any_((index < -n) | (index >= n)))


# -- the gather / scatter op --------------------------------------------------------------------
def _move(name: str, inputs: list[Tensor], out_shape: tuple[int, ...], dtype: np.dtype, sel: _Selection,
          region: tuple | None = None, old_dies: bool = False, fill: tuple | None = None) -> Tensor:
    """Queue a MoveOp (the server's gather / scatter kernel) and return its output.
    `old_dies`, `fill`: see MoveOp; with `old_dies` every op recorded before it, on any
    thread, is registered first, so that each read of the old value is counted when the
    scatter runs."""
    client = inputs[0]._client
    ir = F._new(client, out_shape, dtype)
    out = Tensor._make(client, ir.id, ir.shape, ir.dtype)
    if old_dies:
        client.register_other_threads()
    client.register(MoveOp(name, tuple(t._id for t in inputs), ir, sel.region_map, sel.adv, sel.b_map, region,
                           old_dies, fill))
    return out


def _gather(x: Tensor, sel: _Selection) -> Tensor:
    y = F.getitem(x, sel.basic)
    return _move("gather", [y, *sel.indices], sel.out_shape, x.dtype, sel)


def _scatter(x: Tensor, sel: _Selection, value: Any) -> Tensor:
    """x with `value` written into it, for `setitem`, which rebinds x's handle to the
    result: x's old value dies with the scatter, which may then write into its buffer
    (MoveOp.old_dies). `value` is a tensor of x's dtype and the selection's shape, or a
    scalar checked against x's dtype (a jitted call's too): the kernel's argument
    (MoveOp.fill)."""
    from ._array_api import _contiguous

    region = F.basic_layout(x.shape, contiguous_strides(x.shape), 0, sel.basic)
    # The old value is copied whole into the result (unless the scatter writes into it),
    # so it must be one run of elements.
    old = _contiguous(x)
    if type(value) is Tensor:
        return _move("scatter", [old, value, *sel.indices], x.shape, x.dtype, sel, region, old_dies=True)
    fill = (F.scalar_operand(value, x.dtype), sel.out_shape)
    return _move("scatter", [old, *sel.indices], x.shape, x.dtype, sel, region, old_dies=True, fill=fill)


# -- reading -----------------------------------------------------------------------------------
def getitem(x: Tensor, key: Any) -> Tensor:
    """`x[key]` with numpy's rules.

    Basic keys (ints, slices, None, ...) give a view without a copy. Integer arrays (device
    tensors, numpy arrays or lists; negative values count from the end) gather on the
    device into a new tensor, after an out-of-bounds check: host indices are checked on
    the host, a device index tensor with one fused reduction whose result is read (so the
    call waits for the index values and raises IndexError here, not later). The shape a
    boolean mask selects depends on its values: on GPUs the selected positions are found
    on the device and their count is read (`selected_positions`), on CPU devices the mask
    is read; the selected elements are then gathered on the device.
    """
    if _is_basic(key):
        return F.getitem(x, key)
    x, key = _lift_scalar_masks(x, key)
    return _gather(x, _select(x, key))


def take(x: Tensor, indices: Any, axis: int | None = None) -> Tensor:
    """Elements of x at `indices` along `axis` (x flattened when None), as numpy.take."""
    if axis is None:
        x, axis = F.reshape(x, (-1,)), 0
    axis = F._axis(operator.index(axis), x.ndim)
    if type(indices) is not Tensor and isinstance(indices, (int, np.integer)):
        indices = np.asarray(indices)
    return getitem(x, (slice(None),) * axis + (indices,))


def take_along_axis(x: Tensor, indices: Any, axis: int = -1) -> Tensor:
    """Elements of x at `indices` along `axis`, position by position, as
    numpy.take_along_axis: `indices` has x's rank and broadcasts with it along the other
    axes (one gather, each other axis indexed by its own positions)."""
    client = x._client
    if type(indices) is not Tensor:
        indices = F._as_tensor(indices, client)
    if not dt.is_int(indices.dtype):
        raise TypeError(f"take_along_axis: indices must be integers, got {indices.dtype.name}")
    if indices.ndim != x.ndim:
        raise ValueError(f"take_along_axis: indices have {indices.ndim} dimensions, x has {x.ndim}")
    axis = F._axis(operator.index(axis), x.ndim)
    key = []
    for d in range(x.ndim):
        if d == axis:
            key.append(indices)
        else:
            lined = (1,) * d + (x.shape[d],) + (1,) * (x.ndim - d - 1)
            key.append(np.arange(x.shape[d], dtype=np.int64).reshape(lined))
    return getitem(x, tuple(key))


# -- assignment ---------------------------------------------------------------------------------
def _value_for(x: Tensor, value: Any) -> Tensor | bool | int | float:
    """`value` as x's dtype: a Python scalar checked against it (the standard's rule for
    mixing scalars with arrays), or a tensor cast to it (arrays of any real dtype cast, as
    numpy casts them)."""
    if type(value) is Tensor:
        if value._client is not x._client:
            F._client_of((x, value))
        return value if value.dtype == x.dtype else F.astype(value, x.dtype)
    kind = x.dtype.kind
    if type(value) is F.TracedScalar:  # a clients.jit argument: checked as its traced value is
        _value_for(x, value.value)
        return value
    if isinstance(value, np.generic):  # before Python scalars: np.float64 is a float
        return x.dtype.type(value).item()  # cast as numpy does, then a kernel argument
    if isinstance(value, _PY_SCALARS):
        # (the standard's rule: a scalar of a kind the tensor's dtype holds, complex taking all)
        ok = kind == "b" if isinstance(value, bool) else kind in "iufc" if isinstance(value, int) else \
            kind in "fc" if isinstance(value, float) else kind == "c"
        if not ok:
            raise TypeError(f"cannot assign a Python {type(value).__name__} to a {x.dtype.name} tensor")
        dt.scalar_value(value, x.dtype)  # OverflowError for an int that does not fit
        return value
    if isinstance(value, (list, tuple, np.ndarray)):
        host = np.asarray(value)
        if host.dtype.kind not in "biufc" or host.dtype.kind == "c" and kind != "c":
            raise TypeError(f"cannot assign an array of {host.dtype} to a {x.dtype.name} tensor")
        return F.asarray(host, dtype=x.dtype, device=x.device)
    raise TypeError(f"cannot assign a {type(value).__name__} to a tensor")


def _fits(value: Any, shape: tuple[int, ...]) -> Any:
    """`value` broadcast to `shape` (scalars stay scalars), or ValueError naming both."""
    if type(value) is not Tensor:
        return value
    extra = len(value.shape) - len(shape)
    if extra > 0 and all(side == 1 for side in value.shape[:extra]):
        # Leading size-1 dimensions are dropped, as numpy does (x[0] = v[None]; x[True] = v).
        value = F.reshape(value, value.shape[extra:])
    vs = value.shape
    if len(vs) > len(shape) or any(a != 1 and a != b for a, b in zip(vs[::-1], shape[::-1])):
        raise ValueError(f"could not broadcast a value of shape {vs} into the selection of shape {shape}")
    return value if vs == shape else F.broadcast_to(value, shape)


def setitem(x: Tensor, key: Any, value: Any) -> None:
    """`x[key] = value`: x's handle is rebound to a new value computed on the device.

    The value is cast to x's dtype; a Python scalar must suit it (bool for bool tensors,
    int for int and float tensors, float for float tensors) and fit. Every check runs
    before anything changes, so a bad key or value raises here and leaves x as it was.
    Other tensors that are views of x's buffer (or that x was a view of) are not
    modified: x takes a new buffer (copy-on-write), or keeps its own when nothing else
    sees the old value (a scatter writes into it: MoveOp.old_dies).

    Basic keys assign with one fused `where(selected, value, x)` (the selection computed
    from each element's flat index), which fuses with the work around it; a tensor value
    that varies along a dimension selected only in part is written with one scatter
    kernel instead, as is a small region of a large tensor computed already (see
    SCATTER_REGION_MIN). Integer-array keys scatter on the device (with duplicate indices, which
    value lands is unspecified); boolean masks select on the device when the value does
    not vary along the selected elements, else the mask is read as for `x[mask]`.
    """
    x._checked_bound = None  # (an interrupted assignment may leave x's id with the new values)
    value = _value_for(x, value)
    key, selects = _drop_scalar_masks(key)
    if not selects:
        return
    if _is_basic(key):
        new = _assign_basic(x, key, value)
    else:
        new = _assign_mask(x, key, value) if _is_single_mask(x, key) else None
        if new is None:
            sel = _select(x, key)
            new = _scatter(x, sel, _fits(value, sel.out_shape))
    if new is not None:
        _rebind(x, new)


def _rebind(x: Tensor, new: Tensor) -> None:
    """Point handle x at new's value; `new` takes x's old id, which is dropped with it.

    Ops still queued in the client (its inbox channel) may read the old id: `new` stays
    alive until they are registered as its readers."""
    swap_ids(x, new)
    if x._client.queues:
        x._client.keep_until_registered(new)
    x._strides, new._strides = new._strides, x._strides
    x._offset, new._offset = new._offset, x._offset
    x._dense_base, new._dense_base = getattr(new, "_dense_base", None), getattr(x, "_dense_base", None)


def _per_axis(x: Tensor, key: Any) -> list[Any]:
    """A basic key as one item per axis of x and None: an int (non-negative) or a range."""
    out: list[Any] = []
    axis = 0
    for k in F.expand_ellipsis(key, x.ndim):
        if k is None:
            out.append(None)
            continue
        n = x.shape[axis]
        out.append(range(*k.indices(n)) if type(k) is slice else operator.index(k) % n)
        axis += 1
    return out


def _assign_basic(x: Tensor, key: Any, value: Any) -> Tensor | None:
    region_shape, _, _ = F.basic_layout(x.shape, contiguous_strides(x.shape), 0, key)
    value = _fits(value, region_shape)
    if 0 in region_shape:
        return None  # nothing selected: x stays as it is
    if _scatters_region(x, math.prod(region_shape), value):
        sel = _region_selection(x, key)
        if type(value) is Tensor and value.shape != sel.region_shape:
            value = F.reshape(value, sel.region_shape)
        return _scatter(x, sel, _fits(value, sel.region_shape))
    items = _per_axis(x, key)
    spread = _spread(x, items, value) if type(value) is Tensor else value
    if spread is None:  # the value varies where the selection is partial: scatter it
        return _scatter(x, _select(x, key), value)
    mask = _selected(x, items)
    if mask is None:  # everything is selected
        return F.astype(spread, x.dtype) if type(spread) is Tensor else F.full(x.shape, spread, x.dtype, x.device)
    return F.where(mask, spread, x)


# A basic assignment to at most 1/SCATTER_REGION_SHARE of a tensor that is written already
# and has SCATTER_REGION_MIN elements or more (by device kind) scatters into the region, in
# place where the old value dies (MoveOp.old_dies), instead of computing where(selected,
# value, x) at every element. The scatter is one launch (a scalar is its argument), and
# alone it is the faster at every size, but it runs by itself where the `where` fuses with
# the ops around it: a loop's assignments and the reads after them become one pass over x,
# and on a value still to be computed the `where` costs no pass of its own. Measured on a
# Zen 4 (`x[5] = 2.5` then a sync, float32, us): Intel's CPU runtime, where 70 up to
# 2^16 elements, 148 at 2^20, 260 at 2^22, the scatter 56 to 57 at every size; PoCL 3.0,
# where 89 to 122 up to 2^16, 414 at 2^20, 1244 at 2^22, the scatter 85 to 152.
SCATTER_REGION_MIN = {"CPU": 1 << 20, "other": 1 << 24}
SCATTER_REGION_SHARE = 16


def _scatters_region(x: Tensor, selected: int, value: Any) -> bool:
    """Whether `x[key] = value` over `selected` elements scatters (see SCATTER_REGION_MIN)."""
    if selected * SCATTER_REGION_SHARE > x.size or _traced.tracing or type(value) is F.TracedScalar:
        return False
    server = x._client.server
    if x.size < SCATTER_REGION_MIN.get(server.info.kind, SCATTER_REGION_MIN["other"]):
        return False
    # (a look without the lock: a hint for the choice, which is right either way)
    e = server.handles.entries.get(x._id)
    return e is not None and e.storage.status == READY and e.storage.buffer is not None


def _region_selection(x: Tensor, key: Any) -> _Selection:
    """A basic key as a scatter's selection with no index array: each int becomes a slice
    of one element (its dimension stays, of size 1, in the region)."""
    basic = []
    axis = 0
    for k in F.expand_ellipsis(key, x.ndim):
        if k is not None:
            if type(k) is not slice:
                k = operator.index(k) % x.shape[axis]
                k = slice(k, k + 1)
            axis += 1
        basic.append(k)
    shape, _, _ = F.basic_layout(x.shape, contiguous_strides(x.shape), 0, tuple(basic))
    dims = tuple(range(len(shape)))
    return _Selection(tuple(basic), shape, (), (), shape, dims, (-1,) * len(shape))


def _whole(r: Any, n: int) -> bool:
    return type(r) is range and len(r) == n and abs(r.step) == 1


def _spread(x: Tensor, items: list[Any], value: Tensor) -> Tensor | None:
    """A view of `value` (of the selection's shape) over x's shape that holds the value's
    element at every selected position, or None when no strided view can: along an axis
    selected in part, the value must not vary (a stride-0 view is all it can be)."""
    vst = value.strides_elements
    offset = value._offset
    strides = []
    j = 0
    for item, in_x in zip(items, _axes_of(items)):
        if item is None:
            j += 1
            continue
        n = x.shape[in_x]
        if type(item) is int:
            strides.append(0)
            continue
        s = vst[j]
        if _whole(item, n):
            if item.step < 0:
                offset += (n - 1) * s
                s = -s
            strides.append(s)
        elif s == 0 or value.shape[j] == 1:
            strides.append(0)
        else:
            return None
        j += 1
    return F._view(value, x.shape, tuple(strides), offset)


def _axes_of(items: list[Any]) -> list[int]:
    """For each item of a per-axis key, the axis of x it indexes (None: the next one)."""
    out, axis = [], 0
    for item in items:
        out.append(axis)
        if item is not None:
            axis += 1
    return out


def _selected(x: Tensor, items: list[Any]) -> Tensor | None:
    """A bool tensor of x's shape: true where a basic key selects (None: everywhere).

    Each axis's coordinate comes from one flat index, as `eye` and `tril` build theirs,
    so the mask fuses with the `where` that uses it.
    """
    flat = mask = None
    for axis, item in enumerate(item for item in items if item is not None):
        n = x.shape[axis]
        if _whole(item, n):
            continue
        if flat is None:
            flat = F.flat_index(x.shape, dt.int32 if x.size < 2**31 else dt.int64, x.device, fused=True)
        inner = math.prod(x.shape[axis + 1:])
        coord = flat // inner if inner > 1 else flat
        if axis > 0:
            coord = coord % n
        if type(item) is int or len(item) == 1:
            parts = [coord == item[0] if type(item) is range else coord == item]
        else:
            lo, hi, step = min(item[0], item[-1]), max(item[0], item[-1]), abs(item.step)
            parts = ([coord >= lo] if lo > 0 else []) + ([coord <= hi] if hi < n - 1 else [])
            if step > 1:
                parts.append((coord - lo if lo else coord) % step == 0)
        for p in parts:
            mask = p if mask is None else mask & p
    return mask


def _is_single_mask(x: Tensor, key: Any) -> bool:
    k = key[0] if isinstance(key, tuple) and len(key) == 1 else key
    if type(k) is Tensor:
        return dt.is_bool(k.dtype) and k.ndim >= 1
    return isinstance(k, np.ndarray) and k.dtype.kind == "b" and k.ndim >= 1


def _assign_mask(x: Tensor, key: Any, value: Any) -> Tensor | None:
    """`x[mask] = value` without reading the mask, when the value is the same for every
    selected element: where(mask, value, x). None when the value varies along them."""
    mask = key[0] if isinstance(key, tuple) else key
    m = mask.ndim
    if mask.shape != x.shape[:m] and _mask_fits(mask.shape, x.shape[:m]):
        return x  # an empty mask side selects nothing
    if mask.shape != x.shape[:m]:
        raise IndexError(f"boolean index of shape {mask.shape} does not match the indexed dimensions "
                         f"of shape {x.shape[:m]}")
    rest = x.shape[m:]
    if type(value) is Tensor:
        if value.ndim > len(rest):
            if value.ndim > len(rest) + 1 or value.shape[0] != 1:
                return None
            value = F.reshape(value, value.shape[1:])
        value = _fits(value, rest)
    if type(mask) is not Tensor:
        mask = F.asarray(mask, device=x.device)
    mask = F.reshape(mask, mask.shape + (1,) * len(rest))
    return F.where(mask, value, x)


# -- in-place operators -------------------------------------------------------------------------
def inplace(name: str, x: Tensor, other: Any) -> Tensor:
    """`x op= other`: x rebound to `name(x, other)`, which must keep x's shape and dtype
    (the standard's rule; numpy would cast, the standard says raise). Views of x's old
    buffer keep their values, as for assignment."""
    if type(other) is not Tensor and not F._is_scalar(other):
        other = F._as_tensor(other, x._client)
    if type(other) is Tensor and F.broadcast_shapes(x.shape, other.shape) != x.shape:
        raise ValueError(f"in-place {name} would change the shape {x.shape} to "
                         f"{F.broadcast_shapes(x.shape, other.shape)}")
    _, out_dtype = opset.resolve(name, (F._promote((x, other)),))
    if out_dtype != x.dtype:
        raise TypeError(f"in-place {name} of a {x.dtype.name} tensor would give {out_dtype.name}; "
                        "in-place operators keep the left operand's dtype")
    _rebind(x, F.binary(name, x, other))
    return x


def inplace_matmul(x: Tensor, other: Any) -> Tensor:
    """`x @= other`: allowed when the product has x's shape and dtype."""
    from ._linalg import matmul

    out = matmul(x, other)
    if out.shape != x.shape or out.dtype != x.dtype:
        raise ValueError(f"in-place matmul would change {x.shape} {x.dtype.name} to {out.shape} {out.dtype.name}")
    _rebind(x, out)
    return x
