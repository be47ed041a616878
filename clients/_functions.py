"""The functions of the `clients` namespace: validation at the call site, then descriptors.

Every check (shapes, dtypes, devices, values) happens here, before anything is queued,
so bad input raises at the line that wrote it and the server never sees it.
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from fusion_server import dtypes as dt
from fusion_server import opset
from fusion_server.errors import DeviceError, DeviceMemoryError
from fusion_server.ir import ElementwiseOp, Scalar, TensorIr, ViewOp, contiguous_strides, scalar

from ._traced import TracedScalar
from .client import FusionClient
from .devices import Device, client_for
from .tensor import DropRef as _DropRef
from .tensor import Tensor

_ids = itertools.count(1)
_PY_SCALARS = (bool, int, float, complex)


# -- helpers --------------------------------------------------------------------------------
_tuple_new = tuple.__new__


def _new(client: FusionClient, shape: tuple[int, ...], dtype: np.dtype) -> TensorIr:
    if dtype in dt.FP64 and not client.fp64:
        raise DeviceError(f"device {client.server.info.name!r} has no {dtype.name} support (no fp64)")
    if len(shape) > 1 or (shape and shape[0] > 1 << 24):
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes > client.server.info.max_alloc_bytes:
            raise DeviceMemoryError(
                f"a {dtype.name} tensor of shape {shape} needs {nbytes} bytes; the device "
                f"allows at most {client.server.info.max_alloc_bytes} in one buffer"
            )
    return _tuple_new(TensorIr, (next(_ids), shape, dtype))


_object_new = object.__new__


def _result(client: FusionClient, tid: int, shape: tuple[int, ...], dtype: np.dtype) -> Tensor:
    """A contiguous tensor handle: Tensor._make's common case, for the hot paths."""
    t = _object_new(Tensor)
    t._id = tid
    t._client = client
    t.shape = shape
    t.dtype = dtype
    t._strides = None
    t._offset = 0
    ref = _DropRef(t, client.drop_callback)  # (tensor.track, inlined)
    ref.tid = tid
    client.server.handle_refs[tid] = ref
    return t


_BCAST: dict[tuple, tuple[int, ...]] = {}


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """numpy's broadcast of `shapes` (of none: ()), or ValueError naming them."""
    if not shapes:
        return ()
    key = shapes
    out = _BCAST.get(key)
    if out is not None:
        return out
    ndim = max(len(s) for s in shapes)
    dims = []
    for axis in range(ndim):
        size = 1
        for s in shapes:
            i = axis - (ndim - len(s))
            if i < 0:
                continue
            d = s[i]
            if d != 1:
                if size != 1 and d != size:
                    raise ValueError(
                        "shapes " + ", ".join(str(tuple(s)) for s in shapes) + " do not broadcast"
                    )
                size = d
        dims.append(size)
    out = tuple(dims)
    if len(_BCAST) < 4096:
        _BCAST[key] = out
    return out


def _client_of(values: Sequence[Any]) -> FusionClient:
    client = None
    for v in values:
        if type(v) is Tensor:
            if client is None:
                client = v._client
            elif v._client is not client:
                raise ValueError(
                    f"tensors on different devices ({client.server.info.name!r} and "
                    f"{v._client.server.info.name!r}); move one with asarray(x, device=...)"
                )
    return client if client is not None else client_for()


def _is_scalar(v: Any) -> bool:
    return isinstance(v, _PY_SCALARS) or isinstance(v, np.generic) or type(v) is TracedScalar


def _scalar_dtype(v: Any) -> np.dtype:
    """The dtype a scalar has on its own (Python bool/int/float: numpy's defaults)."""
    if type(v) is TracedScalar:
        v = v.value
    if isinstance(v, np.generic):
        return _default_dtype(v.dtype)
    if isinstance(v, bool):
        return dt.bool_
    if isinstance(v, int):
        return dt.int64
    if isinstance(v, float):
        return dt.float64
    if isinstance(v, complex):
        return dt.complex128
    raise TypeError(f"unsupported operand type {type(v).__name__}")


def _as_tensor(v: Any, client: FusionClient | None) -> Tensor:
    if type(v) is Tensor:
        return v
    if isinstance(v, (np.ndarray, list, tuple)):
        return asarray(v, device=None if client is None else Device(client.server.info))
    raise TypeError(f"unsupported operand type {type(v).__name__}; expected a Tensor or a scalar")


def _promote(values: Sequence[Any]) -> np.dtype:
    """The common dtype of tensors and scalars: numpy's rules, Python scalars weak."""
    dtype = None
    for v in values:
        if type(v) is Tensor:
            dtype = v.dtype if dtype is None else dt.promote(dtype, v.dtype)
        elif isinstance(v, np.generic):
            d = _default_dtype(v.dtype)
            dtype = d if dtype is None else dt.promote(dtype, d)
    for v in values:
        if type(v) is TracedScalar:
            v = v.value  # (a traced call's scalars have the same classes: see clients.jit)
        if isinstance(v, _PY_SCALARS) and not isinstance(v, np.generic):
            dtype = _scalar_dtype(v) if dtype is None else dt.promote_scalar(dtype, v)
    return dtype


def _operand(v: Any, dtype: np.dtype) -> int | Scalar:
    if type(v) is Tensor:
        return v._id
    return scalar_operand(v, dtype)


# (value, dtype) -> its Scalar, for values whose Scalars compare by value (see ir.scalar):
# a loop's constants are then one object each, which the run cache's keys compare by
# identity, and the recording makes no new numpy scalar for them.
_SCALARS: dict[tuple[Any, np.dtype], Scalar] = {}
MAX_SCALARS = 4096


def scalar_operand(v: Any, dtype: np.dtype) -> Scalar:
    """A scalar operand of `dtype`: a kernel argument (a traced scalar's, in a trace)."""
    if type(v) is TracedScalar:
        return scalar(v.value_in(dtype), dtype)  # (a new object: a replay finds it by identity)
    key = (v, dtype)
    found = _SCALARS.get(key)
    if found is None:
        # (Equal Python and numpy numbers convert alike: 1, 1.0 and True are one key.)
        found = scalar(dt.scalar_value(v, dtype), dtype)
        if type(found) is Scalar:
            if len(_SCALARS) >= MAX_SCALARS:
                _SCALARS.clear()
            _SCALARS[key] = found
    return found


_RESOLVED: dict[tuple[str, np.dtype], tuple[np.dtype, np.dtype]] = {}


def _resolve(name: str, dtype: np.dtype) -> tuple[np.dtype, np.dtype]:
    key = (name, dtype)
    out = _RESOLVED.get(key)
    if out is None:
        out = _RESOLVED[key] = opset.resolve(name, (dtype,))
    return out


def _elementwise(name: str, args: Sequence[Any], dtype: np.dtype, compute: np.dtype,
                 out_dtype: np.dtype, client: FusionClient, shape: tuple[int, ...]) -> Tensor:
    operands = tuple(_operand(a, dtype) for a in args)
    out = _new(client, shape, out_dtype)
    t = Tensor._make(client, out.id, shape, out_dtype)  # (before the op: see FusionClient.register)
    client.record(ElementwiseOp(name, operands, compute, out), *args)
    return t


# -- element-wise ---------------------------------------------------------------------------
_COMPARISONS = frozenset(("equal", "not_equal", "less", "less_equal", "greater", "greater_equal"))


def _wide_enough(dtype: np.dtype, value: int) -> np.dtype:
    """A dtype in which an integer tensor compares exactly with `value` (as numpy 2 does)."""
    # (every integer dtype but uint64 fits in int64; float64 orders a negative value below
    # every uint64 and one past the range above it)
    for candidate in (dtype, dt.int64) if dtype != dt.uint64 else (dtype,):
        info = np.iinfo(candidate)
        if info.min <= value <= info.max:
            return candidate
    return dt.float64


def _dense_order(t: Tensor) -> tuple[int, ...] | None:
    """The axis order in which view `t` is a dense block of its buffer (the axes that
    `permute_dims` makes C-contiguous, as `x.T` of a contiguous x), where that order is not
    the identity; else None (contiguous, strided, broadcast, reversed, or with axes of
    size 1, left as they are)."""
    base = getattr(t, "_dense_base", None)
    if base is not None:
        return base[1]
    st = t._strides
    if st is None or len(st) < 2 or 1 in t.shape or 0 in t.shape:
        return None
    order = tuple(sorted(range(len(st)), key=lambda d: -st[d]))
    expected = 1
    for d in reversed(order):
        if st[d] != expected:
            return None
        expected *= t.shape[d]
    return None if order == tuple(range(len(st))) else order


def _in_dense_order(op, order: tuple[int, ...], *operands: Tensor) -> Tensor:
    """`op` of operands that are all one dense block permuted alike (`x.T + 1`, `exp(x.T)`),
    computed over the blocks in their memory order and permuted back: the result keeps the
    operands' order as numpy's does (a view of a contiguous result), and the kernel reads
    and writes in memory order instead of transposing."""
    return in_given_order(op(*(_block_of(x, order) for x in operands)), order)


def _block_of(t: Tensor, order: tuple[int, ...]) -> Tensor:
    """The dense block that view `t` permutes by `order`: the value it was made from where
    it came from in_given_order (no view of a view: fusers see the value itself)."""
    base = getattr(t, "_dense_base", None)
    return base[0] if base is not None and base[1] == order else permute_dims(t, order)


def in_given_order(block: Tensor, order: tuple[int, ...]) -> Tensor:
    """The view of `block` that `permute_dims(view, order)` turns back into it, marked as
    such: element-wise ops and reductions of it then work on `block` itself."""
    view = permute_dims(block, inverse_permutation(order))
    view._dense_base = (block, order)
    return view


def inverse_permutation(order: Sequence[int]) -> tuple[int, ...]:
    """The axes that undo `permute_dims(x, order)`."""
    return tuple(sorted(range(len(order)), key=order.__getitem__))


def _binary_in_dense_order(name: str, a: Tensor, b: Tensor) -> Tensor | None:
    """`a op b` in the memory order of its full-size operands (see _in_dense_order), where
    they are one dense block permuted alike and any other operand holds at most one axis of
    more than one element (a scalar, a row or a column broadcast: cheap in any order);
    None otherwise (a row-major operand beside a transposed one: one of them is read
    across its rows either way)."""
    shape = broadcast_shapes(a.shape, b.shape)
    orders = [_dense_order(t) if t.shape == shape else None for t in (a, b)]
    found = set(orders) - {None}
    if len(found) != 1:
        return None
    order = found.pop()
    for t, o in zip((a, b), orders):
        if o != order and sum(n > 1 for n in t.shape) > 1:
            return None
    a, b = (t if t.shape == shape else broadcast_to(t, shape) for t in (a, b))
    return _in_dense_order(lambda x, y: binary(name, x, y), order, a, b)


def binary(name: str, a: Any, b: Any) -> Tensor:
    """Apply binary element-wise op `name` with broadcasting and numpy's promotion."""
    ta, tb = type(a) is Tensor, type(b) is Tensor
    if ta and tb:
        if a._strides is not None or b._strides is not None:
            permuted = _binary_in_dense_order(name, a, b)
            if permuted is not None:
                return permuted
        client = a._client
        if b._client is not client:
            _client_of((a, b))
        da, db = a.dtype, b.dtype
        dtype = da if da is db else dt.promote(da, db)
        sa, sb = a.shape, b.shape
        shape = sa if sa == sb else broadcast_shapes(sa, sb)
        compute, out_dtype = _RESOLVED.get((name, dtype)) or _resolve(name, dtype)
        if out_dtype is da and shape is sa:  # like `a`, which passed _new's checks
            out = _tuple_new(TensorIr, (next(_ids), shape, out_dtype))
        else:
            out = _new(client, shape, out_dtype)
        t = _result(client, out.id, shape, out_dtype)
        client.record(_tuple_new(ElementwiseOp, (name, (a._id, b._id), compute, out, None, ())), a, b)
        return t
    if tb and not ta and type(a) in _PY_SCALARS:  # `1.0 - x`: the same, operands swapped
        return _tensor_scalar(name, b, a, True)
    if ta and type(b) in _PY_SCALARS:  # the common `x * 2.0`
        if name == "pow" and b in _SMALL_POWERS and dt.promote_scalar(a.dtype, b) is a.dtype:
            power = _small_power(a, b)
            if power is not None:
                return power
        return _tensor_scalar(name, a, b, False)
    if ta and _is_scalar(b) or tb and _is_scalar(a):
        t = a if ta else b
        dtype = _promote((a, b))
        s = b if ta else a
        if type(s) is TracedScalar:
            s = s.value
        if type(s) is int and name in _COMPARISONS and dtype.kind in "iu":
            dtype = _wide_enough(dtype, s)
        compute, out_dtype = _resolve(name, dtype)
        return _elementwise(name, (a, b), dtype, compute, out_dtype, t._client, t.shape)
    if not ta and not tb and _is_scalar(a) and _is_scalar(b):
        raise TypeError(f"{name} needs at least one tensor operand")
    client = _client_of((a, b))
    return binary(name, _as_tensor(a, client), _as_tensor(b, client))


# Exponents whose power is cheaper ops (as numpy and hand-written code do): a kernel
# argument exponent runs the device's general pow, 60 to 100x dearer than x * x on PoCL.
_SMALL_POWERS = frozenset((1, 2, 3, 4, -1, 0.5))


def _small_power(x: Tensor, p: int | float) -> Tensor | None:
    """x ** p for an exponent of _SMALL_POWERS, as the cheaper ops giving pow's values
    (its special cases included: (-inf) ** 0.5 is +inf and (-0.0) ** 0.5 is +0.0); None
    where none fits (an integer tensor's negative or fractional power)."""
    if p == 2:
        return unary("square", x)
    if p == 3:
        return binary("multiply", unary("square", x), x)
    if p == 4:
        return unary("square", unary("square", x))
    if p == 1:
        return unary("positive", x)
    if x.dtype.kind not in "fc":
        return None
    if p == -1:
        return _tensor_scalar("divide", x, 1.0, True)
    if x.dtype.kind == "c":
        return unary("sqrt", x)  # (the principal root, as pow's)
    root = _tensor_scalar("add", unary("sqrt", x), 0.0, False)  # (+ 0: -0.0 becomes +0.0)
    return where(_tensor_scalar("equal", x, -math.inf, False), math.inf, root)


def _tensor_scalar(name: str, a: Tensor, b: bool | int | float, swapped: bool) -> Tensor:
    """Op `name` of tensor `a` and Python scalar `b` (`b op a` when swapped): the hot path."""
    if a._strides is not None:
        order = _dense_order(a)
        if order is not None:
            return _in_dense_order(lambda x: _tensor_scalar(name, x, b, swapped), order, a)
    da = a.dtype
    if type(b) is float and da.kind == "f":
        dtype = da
        # (Making a numpy scalar costs more than the rest of this function: code repeats
        # its constants, and scalar_operand keeps their Scalars.)
        scalar = _SCALARS.get((b, da)) or scalar_operand(b, da)
    else:
        dtype = dt.promote_scalar(da, b)
        if type(b) is int and name in _COMPARISONS and dtype.kind in "iu":
            dtype = _wide_enough(dtype, b)
        scalar = scalar_operand(b, dtype)
    compute, out_dtype = _RESOLVED.get((name, dtype)) or _resolve(name, dtype)
    client = a._client
    shape = a.shape
    if out_dtype is da:  # like `a`, which passed _new's checks
        out = _tuple_new(TensorIr, (next(_ids), shape, out_dtype))
    else:
        out = _new(client, shape, out_dtype)
    # (tuple.__new__ builds the descriptors without the named tuples' Python-level __new__)
    operands = (scalar, a._id) if swapped else (a._id, scalar)
    t = _result(client, out.id, shape, out_dtype)
    client.record(_tuple_new(ElementwiseOp, (name, operands, compute, out, None, ())), a)
    return t


def unary(name: str, x: Any) -> Tensor:
    """Apply unary element-wise op `name`."""
    if type(x) is not Tensor:
        x = _as_tensor(x, None)
    if x._strides is not None and name != "copy":  # (a copy is asked for to get C order)
        order = _dense_order(x)
        if order is not None:
            return _in_dense_order(lambda v: unary(name, v), order, x)
    compute, out_dtype = _RESOLVED.get((name, x.dtype)) or _resolve(name, x.dtype)
    client = x._client
    if out_dtype is x.dtype:  # like `x`, which passed _new's checks
        out = _tuple_new(TensorIr, (next(_ids), x.shape, out_dtype))
    else:
        out = _new(client, x.shape, out_dtype)
    t = _result(client, out.id, x.shape, out_dtype)
    client.record(_tuple_new(ElementwiseOp, (name, (x._id,), compute, out, None, ())), x)
    return t


def _unary_fn(name: str):
    def fn(x: Any) -> Tensor:
        return unary(name, x)

    fn.__name__ = name
    fn.__doc__ = f"Element-wise {name}, as numpy.{name} (lazy, fusable)."
    return fn


def _binary_fn(name: str):
    def fn(x1: Any, x2: Any) -> Tensor:
        return binary(name, x1, x2)

    fn.__name__ = name
    fn.__doc__ = f"Element-wise {name} with broadcasting, as numpy (lazy, fusable)."
    return fn


def where(condition: Any, x1: Any, x2: Any) -> Tensor:
    """Elements of x1 where condition is true, else of x2 (broadcast together)."""
    client = _client_of((condition, x1, x2))
    if type(condition) is not Tensor:
        condition = _as_tensor(condition, client)
    vals = [v if type(v) is Tensor or _is_scalar(v) else _as_tensor(v, client) for v in (x1, x2)]
    dtype = _promote(vals)
    shape = broadcast_shapes(condition.shape, *(v.shape for v in vals if type(v) is Tensor))
    operands = (condition._id,) + tuple(_operand(v, dtype) for v in vals)
    out = _new(client, shape, dtype)
    t = Tensor._make(client, out.id, shape, dtype)
    client.record(ElementwiseOp("where", operands, dtype, out), condition, *vals)
    return t


def clip(x: Any, min: Any = None, max: Any = None) -> Tensor:
    """x limited to [min, max] (either may be None), as numpy.clip; NaN propagates."""
    if type(x) is not Tensor:
        x = _as_tensor(x, None)
    if dt.is_int(x.dtype):  # (numpy's rule: a Python int bound past x's range bounds nothing)
        info = np.iinfo(x.dtype)
        if type(min) is int and min <= info.min:
            min = None
        if type(max) is int and max >= info.max:
            max = None
    out = x
    if min is not None:
        out = binary("maximum", out, min)
    if max is not None:
        out = binary("minimum", out, max)
    if out is x:
        out = astype(x, x.dtype)
    return out


def astype(x: Tensor, dtype: Any, /, *, copy: bool = True, device: Any = None) -> Tensor:
    """x converted to `dtype` (C-style truncation for float to int, as numpy), on `device`
    (None: x's; another device's copy is made there)."""
    if device is not None and client_for(device) is not x._client:
        return asarray(astype(x, dtype), device=device)
    target = dt.normalize(dtype)
    if target == x.dtype and not copy:
        return x
    if x.dtype.kind == "c" and target.kind not in "cb":
        raise TypeError(f"astype from {x.dtype.name} to {target.name}: the standard permits no cast of complex "
                        "values to a real dtype (take real(x), imag(x) or abs(x) first)")
    if x._strides is not None:
        order = _dense_order(x)
        if order is not None:
            return _in_dense_order(lambda v: astype(v, target), order, x)
    client = x._client
    out = _new(client, x.shape, target)
    t = Tensor._make(client, out.id, x.shape, target)
    client.record(ElementwiseOp("cast", (x._id,), target, out), x)
    return t


# -- creation -------------------------------------------------------------------------------
def _device_client(device: Any) -> FusionClient:
    return client_for(device) if device is not None else client_for()


def asarray(obj: Any, dtype: Any = None, device: Any = None, copy: bool | None = None) -> Tensor:
    """A tensor holding `obj` (a Tensor, numpy array, nested list or scalar).

    The data is copied to the device without waiting for it (the host copy is kept alive
    until the transfer completes).
    """
    client = _device_client(device) if device is not None else None
    if type(obj) is Tensor:
        target = dt.normalize(dtype) if dtype is not None else obj.dtype
        if client is None or client is obj._client:
            if target == obj.dtype and not copy:
                return obj
            return astype(obj, target)
        obj = obj.numpy()
    if client is None:
        client = client_for()
    target = dt.normalize(dtype) if dtype is not None else _default_dtype(np.asarray(obj).dtype)
    if target in dt.FP64 and not client.fp64:
        raise DeviceError(f"device {client.server.info.name!r} has no {target.name} support (no fp64)")
    try:
        host = np.array(obj, dtype=target, order="C", copy=True)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"cannot make a {target.name} tensor from {type(obj).__name__}: {exc}") from exc
    shape = tuple(int(d) for d in host.shape)
    ir = _new(client, shape, target)
    t = Tensor._make(client, ir.id, shape, target)
    client.upload(ir, host)
    return t


def _default_dtype(source: np.dtype) -> np.dtype:
    """The supported dtype closest to numpy's dtype for the same data."""
    if source.kind == "b":
        return dt.bool_
    if source.kind in "iu":
        return np.dtype(source.newbyteorder("="))
    if source.kind == "f":
        return dt.float32 if source.itemsize <= 4 else dt.float64
    if source.kind == "c":
        return dt.complex64 if source.itemsize <= 8 else dt.complex128
    return dt.normalize(source)


def _shape_arg(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    try:
        out = tuple(operator.index(d) for d in shape)
    except TypeError:
        raise TypeError(f"shape must be an int or a sequence of ints, not {shape!r}") from None
    if any(d < 0 for d in out):
        raise ValueError(f"negative dimensions are not allowed: {out}")
    return out


def full(shape: Any, fill_value: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """A tensor of `shape` filled with `fill_value` (computed on the device, fusable)."""
    shape = _shape_arg(shape)
    client = _device_client(device)
    if type(fill_value) is Tensor:
        if fill_value.size != 1:
            raise ValueError(f"fill_value must have one element, not shape {fill_value.shape}")
        one = reshape(fill_value, ())
        if dtype is not None:
            one = astype(one, dtype)
        return astype(broadcast_to(one, shape), one.dtype)  # stays on the device, fuses
    target = dt.normalize(dtype) if dtype is not None else _scalar_dtype(fill_value)
    out = _new(client, shape, target)
    value = scalar_operand(fill_value, target)
    t = Tensor._make(client, out.id, shape, target)
    client.record(ElementwiseOp("fill", (value,), target, out))
    return t


def zeros(shape: Any, dtype: Any = None, device: Any = None) -> Tensor:
    return full(shape, 0, dt.float64 if dtype is None else dtype, device)


def ones(shape: Any, dtype: Any = None, device: Any = None) -> Tensor:
    return full(shape, 1, dt.float64 if dtype is None else dtype, device)


def empty(shape: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """Like zeros (the contents of a new tensor are always defined here)."""
    return zeros(shape, dtype, device)


def _like(x: Tensor, dtype: Any, device: Any) -> tuple[np.dtype, Any]:
    return (x.dtype if dtype is None else dtype), (x.device if device is None else device)


def zeros_like(x: Tensor, dtype: Any = None, device: Any = None) -> Tensor:
    return zeros(x.shape, *_like(x, dtype, device))


def ones_like(x: Tensor, dtype: Any = None, device: Any = None) -> Tensor:
    return ones(x.shape, *_like(x, dtype, device))


def empty_like(x: Tensor, dtype: Any = None, device: Any = None) -> Tensor:
    return zeros(x.shape, *_like(x, dtype, device))


def full_like(x: Tensor, fill_value: Any, dtype: Any = None, device: Any = None) -> Tensor:
    return full(x.shape, fill_value, *_like(x, dtype, device))


def flat_index(shape: Any, dtype: Any = None, device: Any = None, fused: bool = False) -> Tensor:
    """Each element's C-order flat index, as a tensor of `shape` (fusable, no view).

    `fused`: an intermediate of a fused block (a mask, say) that is never written, so no
    buffer of its size is checked for."""
    shape = _shape_arg(shape)
    target = dt.normalize(dtype) if dtype is not None else dt.int64
    client = _device_client(device)
    out = _tuple_new(TensorIr, (next(_ids), shape, target)) if fused else _new(client, shape, target)
    t = Tensor._make(client, out.id, shape, target)
    client.record(_tuple_new(ElementwiseOp, ("iota", (), target, out, None, ())))
    return t


def arange(start: Any, stop: Any = None, step: Any = 1, dtype: Any = None, device: Any = None) -> Tensor:
    """Evenly spaced values in [start, stop), as numpy.arange (computed on the device)."""
    if stop is None:
        start, stop = 0, start
    if step == 0:
        raise ValueError("arange step must not be zero")
    if dtype is None:
        dtype = dt.int64 if all(isinstance(v, (int, np.integer)) for v in (start, stop, step)) else dt.float64
    target = dt.normalize(dtype)
    n = max(0, math.ceil((stop - start) / step))
    t = flat_index((n,), target, device)
    if step != 1:
        t = binary("multiply", t, dt.scalar_value(step, target).item())
    if start != 0:
        t = binary("add", t, dt.scalar_value(start, target).item())
    return t


# -- views ----------------------------------------------------------------------------------
def _view(x: Tensor, shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> Tensor:
    client = x._client
    dtype = x.dtype
    tid = next(_ids)
    out = _tuple_new(TensorIr, (tid, shape, dtype))  # (as _result: a NamedTuple's __new__ is Python code)
    contiguous = offset == 0 and strides == contiguous_strides(shape)
    t = Tensor._make(client, tid, shape, dtype, None if contiguous else strides, offset)
    client.record(_tuple_new(ViewOp, (x._id, out, strides, offset)), x)
    return t


def _one_axis(x: Tensor, axis: Any, what: str) -> int:
    """`axis` as a non-negative int, or numpy's AxisError (a 0-d tensor has no axis)."""
    if isinstance(axis, bool):
        raise TypeError(f"{what}(): axis must be an int, not bool")
    try:
        axis = operator.index(axis)
    except TypeError:
        raise TypeError(f"{what}(): axis must be an int, not {type(axis).__name__}") from None
    if not -x.ndim <= axis < x.ndim:
        raise np.exceptions.AxisError(f"{what}(): axis {axis} is out of bounds for a tensor of {x.ndim} dimensions")
    return axis % x.ndim


def _flag(value: Any, name: str, what: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{what}(): {name} must be a bool, not {type(value).__name__}")
    return bool(value)


def _axis(axis: int, ndim: int) -> int:
    if not -ndim <= axis < max(ndim, 1):
        raise IndexError(f"axis {axis} is out of range for {ndim} dimensions")
    return axis % ndim if ndim else 0


def reshape(x: Tensor, shape: Any, copy: bool | None = None) -> Tensor:
    """x with a new shape (one dimension may be -1); a view when the layout allows."""
    shape = tuple(operator.index(d) for d in ((shape,) if isinstance(shape, int) else shape))
    if shape.count(-1) > 1:
        raise ValueError("reshape: only one dimension can be -1")
    known = math.prod(d for d in shape if d != -1)
    if -1 in shape:
        if known == 0 or x.size % known:
            raise ValueError(f"cannot reshape a tensor of size {x.size} into shape {shape}")
        shape = tuple(x.size // known if d == -1 else d for d in shape)
    if any(d < 0 for d in shape) or math.prod(shape) != x.size:
        raise ValueError(f"cannot reshape a tensor of shape {x.shape} (size {x.size}) into shape {shape}")
    if copy:
        x = astype(x, x.dtype)
    if x._strides is None:
        return _view(x, shape, contiguous_strides(shape), x._offset)
    strides = _nocopy_strides(x.shape, x.strides_elements, shape)
    if strides is None:
        if copy is False:
            raise ValueError(f"reshape of this strided view to {shape} needs a copy (copy=False)")
        x = unary("copy", x)  # materialize once, visibly
        return _view(x, shape, contiguous_strides(shape), 0)
    return _view(x, shape, strides, x._offset)


def _nocopy_strides(old_shape, old_strides, new_shape) -> tuple[int, ...] | None:
    """Strides for viewing a strided layout with `new_shape`, or None when impossible.

    numpy's rule: split the old dimensions (size-1 dims dropped) into runs that are
    contiguous among themselves and match runs of new dimensions with equal products.
    """
    old = [(n, s) for n, s in zip(old_shape, old_strides) if n != 1]
    new = list(new_shape)
    out = [0] * len(new)
    if math.prod(new) == 0:
        return contiguous_strides(tuple(new_shape))
    i = j = 0
    while i < len(old) and j < len(new):
        if new[j] == 1:
            out[j] = 0
            j += 1
            continue
        oi, nj = i + 1, j + 1
        po, pn = old[i][0], new[j]
        while po != pn:
            if po < pn:
                if oi >= len(old):
                    return None
                po *= old[oi][0]
                oi += 1
            else:
                if nj >= len(new):
                    return None
                pn *= new[nj]
                nj += 1
        for k in range(i, oi - 1):
            if old[k][1] != old[k + 1][1] * old[k + 1][0]:
                return None
        stride = old[oi - 1][1]
        for k in range(nj - 1, j - 1, -1):
            out[k] = stride
            stride *= new[k]
        i, j = oi, nj
    while j < len(new):
        if new[j] != 1:
            return None
        j += 1
    return tuple(out)


def permute_dims(x: Tensor, axes: Sequence[int]) -> Tensor:
    """x with its axes reordered (a view)."""
    axes = tuple(_axis(operator.index(a), x.ndim) for a in axes)
    if sorted(axes) != list(range(x.ndim)):
        raise ValueError(f"axes {axes} are not a permutation of {x.ndim} dimensions")
    st = x.strides_elements
    return _view(x, tuple(x.shape[a] for a in axes), tuple(st[a] for a in axes), x._offset)


def expand_dims(x: Tensor, axis: int | Sequence[int] = 0) -> Tensor:
    """x with new size-1 dimensions at `axis` (an int, or a tuple of positions in the
    result, negative ones counted from its end): a view."""
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    ndim = x.ndim + len(axes)
    places = []
    for a in axes:
        a = operator.index(a)
        if not -ndim <= a < ndim:
            raise IndexError(f"axis {a} is out of range for {ndim} dimensions")
        places.append(a % ndim)
    if len(set(places)) != len(places):
        raise ValueError(f"expand_dims: repeated axes {tuple(axes)}")
    shape, strides = list(x.shape), list(x.strides_elements)
    for a in sorted(places):
        shape.insert(a, 1)
        strides.insert(a, 0)
    return _view(x, tuple(shape), tuple(strides), x._offset)


def squeeze(x: Tensor, axis: int | Sequence[int] | None = None) -> Tensor:
    """x without the given size-1 dimensions (all of them when axis is None)."""
    if axis is None:
        axes = {i for i, d in enumerate(x.shape) if d == 1}
    else:
        axes = {_axis(a, x.ndim) for a in ((axis,) if isinstance(axis, int) else axis)}
        for a in axes:
            if x.shape[a] != 1:
                raise ValueError(f"cannot squeeze axis {a} of size {x.shape[a]}")
    st = x.strides_elements
    keep = [i for i in range(x.ndim) if i not in axes]
    return _view(x, tuple(x.shape[i] for i in keep), tuple(st[i] for i in keep), x._offset)


def broadcast_to(x: Tensor, shape: Any) -> Tensor:
    """x repeated to `shape` without copying (stride 0 along the new dimensions)."""
    shape = _shape_arg(shape)
    if len(shape) < x.ndim or any(n != 1 and n != m for n, m in zip(x.shape[::-1], shape[::-1])):
        raise ValueError(f"cannot broadcast shape {x.shape} to {shape}")
    pad = len(shape) - x.ndim
    st = x.strides_elements
    strides = (0,) * pad + tuple(0 if n == 1 and m != 1 else s for n, m, s in zip(x.shape, shape[pad:], st))
    return _view(x, shape, strides, x._offset)


def broadcast_arrays(*arrays: Tensor) -> tuple[Tensor, ...]:
    """The arrays broadcast against each other: views of a common shape, no copies (a
    tuple, as the standard has it since 2024.12)."""
    if not arrays:
        return ()
    shape = broadcast_shapes(*(a.shape for a in arrays))
    return tuple(broadcast_to(a, shape) for a in arrays)


def from_dlpack(x: Any, /, *, device: Any = None, copy: bool | None = None) -> Tensor:
    """A tensor holding the values of `x`, any object with `__dlpack__`, on `device` (the
    default device if None). Values from elsewhere are copied to the device, so copy=False
    raises BufferError unless `x` is a tensor already on `device` (then it is returned);
    copy=True always gives a new tensor."""
    if not hasattr(x, "__dlpack__"):
        raise TypeError(f"from_dlpack needs an object with __dlpack__, got {type(x).__name__}")
    if copy not in (None, True, False):
        raise TypeError(f"copy must be None, True or False, not {copy!r}")
    if type(x) is Tensor:
        target = x._client if device is None else _device_client(device)
        if copy is False and target is not x._client:
            raise BufferError("the tensor is on another device: moving it copies (copy=False)")
        return x if target is x._client and not copy else asarray(x, device=device or x.device, copy=True)
    if copy is False:
        raise BufferError(f"the values of a {type(x).__name__} are copied to the device: copy=False cannot hold")
    return asarray(np.from_dlpack(x), device=device)


def getitem(x: Tensor, key: Any) -> Tensor:
    """Basic indexing: ints, slices (any step), None and Ellipsis; a view, no copy."""
    shape, strides, offset = basic_layout(x.shape, x.strides_elements, x._offset, key)
    return _view(x, shape, strides, offset)


def expand_ellipsis(key: Any, ndim: int, dims_of: Any = None) -> tuple:
    """`key` as a tuple with its ellipsis (or the trailing dimensions it leaves out) spelled
    out as full slices. `dims_of(k)` is how many dimensions item k indexes (default 1;
    None and ... index none); IndexError for two ellipses or too many indices."""
    if not isinstance(key, tuple):
        key = (key,)
    if sum(k is Ellipsis for k in key) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(0 if k is None or k is Ellipsis else 1 if dims_of is None else dims_of(k) for k in key)
    if used > ndim:
        raise IndexError(f"too many indices: {used} for a tensor of {ndim} dimensions")
    # Identity, not `in` / `index`: those compare with ==, which is element-wise on tensors.
    for i, k in enumerate(key):
        if k is Ellipsis:
            return key[:i] + (slice(None),) * (ndim - used) + key[i + 1:]
    return key + (slice(None),) * (ndim - used)


def basic_layout(
    x_shape: tuple[int, ...], strides: tuple[int, ...], offset: int, key: Any
) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """The layout (shape, strides, offset in elements) that basic key `key` selects from
    the layout given; IndexError for keys that are not basic or out of bounds."""
    if type(key) is not tuple:
        key = (key,)
    # One pass checks the items and counts what they index (every slice of a stencil
    # comes through here: expand_ellipsis's three passes cost a slice a third more).
    used, ellipsis = 0, -1
    for i, k in enumerate(key):
        if type(k) is slice or isinstance(k, (int, np.integer)):
            used += 1
        elif k is Ellipsis:
            if ellipsis >= 0:
                raise IndexError("an index can only have a single ellipsis ('...')")
            ellipsis = i
        elif k is not None:
            raise IndexError(
                f"only integers, slices, None and ... index a tensor here, not {type(k).__name__}"
            )
    ndim = len(x_shape)
    if used > ndim:
        raise IndexError(f"too many indices: {used} for a tensor of {ndim} dimensions")
    if ellipsis >= 0:
        key = key[:ellipsis] + (slice(None),) * (ndim - used) + key[ellipsis + 1:]
    elif used < ndim:
        key = key + (slice(None),) * (ndim - used)
    out_shape: list[int] = []
    out_strides: list[int] = []
    dim = 0
    for k in key:
        if k is None:
            out_shape.append(1)
            out_strides.append(0)
            continue
        n = x_shape[dim]
        if type(k) is slice:
            start, stop, step = k.indices(n)
            count = len(range(start, stop, step))
            if count:
                offset += start * strides[dim]
            out_shape.append(count)
            out_strides.append(strides[dim] * step)
        else:
            i = operator.index(k)
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for axis {dim} with size {n}")
            offset += (i % n) * strides[dim]
        dim += 1
    return tuple(out_shape), tuple(out_strides), offset
