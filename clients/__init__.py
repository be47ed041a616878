"""fusion-server's user API: lazy tensors on OpenCL devices, fused into generated kernels.

    import clients
    x = clients.asarray(np.random.rand(1_000_000).astype(np.float32))
    y = clients.exp(x) * 2 + 1          # queued, not run
    y.numpy()                            # one fused kernel, then a copy to the host
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any

from fusion_server.dtypes import bool_ as bool
from fusion_server.dtypes import (
    complex64,
    complex128,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint16,
    uint32,
    uint64,
)
from fusion_server.errors import (
    DeviceError,
    DeviceMemoryError,
    DroppedTensorError,
    FusionError,
    ReentrancyError,
    TensorFailedError,
)

from . import _functions as _f
from . import custom, fft, linalg
from ._array_api import (
    __array_api_version__,
    all,
    any,
    can_cast,
    concat,
    count_nonzero,
    diff,
    e,
    eye,
    finfo,
    flip,
    iinfo,
    inf,
    isdtype,
    isin,
    linspace,
    matrix_transpose,
    moveaxis,
    nan,
    pi,
    reciprocal,
    result_type,
    signbit,
    stack,
    std,
    tril,
    triu,
    unstack,
    var,
    vecdot,
)
from ._buffers import from_cl, resolve
from ._functions import (
    arange,
    asarray,
    astype,
    broadcast_arrays,
    broadcast_shapes,
    broadcast_to,
    clip,
    empty,
    empty_like,
    expand_dims,
    from_dlpack,
    full,
    full_like,
    ones,
    ones_like,
    permute_dims,
    reshape,
    squeeze,
    where,
    zeros,
    zeros_like,
)
from ._indexing import take, take_along_axis
from ._inspection import __array_namespace_info__
from ._linalg import matmul
from ._manipulation import meshgrid, repeat, roll, tensordot, tile
from ._reductions import argmax, argmin, cumulative_prod, cumulative_sum, max, mean, min, prod, sum
from ._sorting import (
    UniqueAllResult,
    UniqueCountsResult,
    UniqueInverseResult,
    argsort,
    nonzero,
    searchsorted,
    sort,
    unique_all,
    unique_counts,
    unique_inverse,
    unique_values,
)
from .devices import Device, client_for, default_device, devices
from .jit import JitFunction, jit
from .tensor import Tensor

_UNARY = (
    "exp expm1 log log1p log2 log10 sqrt sin cos tan asin acos atan sinh cosh tanh asinh "
    "acosh atanh floor ceil trunc round abs negative positive sign square logical_not "
    "bitwise_invert isnan isinf isfinite conj real imag"
).split()
_BINARY = (
    "add subtract multiply divide floor_divide remainder pow maximum minimum atan2 hypot "
    "copysign logaddexp nextafter equal not_equal less less_equal greater greater_equal logical_and "
    "logical_or logical_xor bitwise_and bitwise_or bitwise_xor bitwise_left_shift bitwise_right_shift"
).split()
for _name in _UNARY:
    globals()[_name] = _f._unary_fn(_name)
for _name in _BINARY:
    globals()[_name] = _f._binary_fn(_name)


def _client(device: Any = None):
    return client_for(device)


def sync(device: Any = None) -> None:
    """Run this thread's queued work on the device and wait until the device is idle."""
    _client(device).sync()


def flush(device: Any = None) -> None:
    """Launch this thread's queued work and submit it to the device, without waiting for it."""
    _client(device).flush()


def stats(device: Any = None) -> dict:
    """Counters of the device's server: ops_registered, kernels_launched, compiles,
    buffers_live, inplace_reuses, plan_hits (blocks replayed from the plan store),
    plan_misses, explorations (blocks the fusers decided), and more."""
    return _client(device).stats()


@contextmanager
def inspect(device: Any = None):
    """Record every kernel launched while the block runs: `rec.kernels`, one entry per
    launch with `.kind`, `.ops` and `.bindings`. On exit this thread's queue is launched."""
    with _client(device).inspect() as rec:
        yield rec


def set_mode(mode: str, device: Any = None) -> None:
    """"lazy" (fuse, the default) or "eager" (one kernel per op: the unfused baseline)."""
    _client(device).set_mode(mode)


# The standard's name for a new axis in an index: x[:, newaxis].
newaxis = None

__all__ = [
    "custom", "fft", "linalg", "from_cl", "jit", "JitFunction", "matmul", "resolve", "__array_api_version__",
    "__array_namespace_info__", "newaxis", "all", "any",
    "can_cast", "concat", "eye",
    "finfo", "flip", "iinfo", "isdtype", "linspace", "matrix_transpose", "result_type", "stack", "std", "tril", "triu",
    "count_nonzero", "diff", "moveaxis", "reciprocal", "signbit", "unstack",
    "var", "vecdot", "take", "take_along_axis", "meshgrid", "repeat", "roll", "tensordot", "tile", "isin",
    "searchsorted",
    "cumulative_sum",
    "cumulative_prod",
    "argmax", "argmin", "max", "mean", "min", "prod", "sum",
    "UniqueAllResult", "UniqueCountsResult", "UniqueInverseResult", "argsort", "nonzero", "sort", "unique_all",
    "unique_counts", "unique_inverse", "unique_values", "e", "inf", "nan", "pi",
    "Device", "DeviceError", "DeviceMemoryError", "DroppedTensorError", "FusionError",
    "ReentrancyError", "Tensor", "TensorFailedError", "arange", "asarray", "astype", "bool",
    "broadcast_arrays", "broadcast_shapes", "broadcast_to", "client_for", "clip", "default_device", "devices",
    "from_dlpack",
    "empty", "empty_like", "expand_dims", "flush", "float32", "float64", "complex64", "complex128", "full", "full_like",
    "inspect", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "ones", "ones_like", "permute_dims", "reshape", "set_mode",
    "squeeze", "stats", "sync", "where", "zeros", "zeros_like", *_UNARY, *_BINARY,
]
