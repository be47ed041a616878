"""Crossing to pyopencl: a tensor's concrete buffer (`resolve`), its host memory on CPU
devices (`host_view`), and imports (`from_cl`)."""

from __future__ import annotations

import numpy as np
import pyopencl.array as cla

from fusion_server import dtypes as dt
from fusion_server.fusers.custom_kernel import array_of
from fusion_server.handles import span_of
from fusion_server.runtime import waits

from . import _functions as F
from . import _traced
from .devices import client_for
from .tensor import Tensor


def resolve(x: Tensor) -> cla.Array:
    """x's device buffer as a `pyopencl.array.Array` (shape, dtype, strides right; no copy).

    Runs exactly what `x` depends on first (without waiting: the array's queue is the
    device's in-order queue, so work enqueued on it sees the value). The buffer is not
    recycled while the returned array is alive, even after `x` is dropped. Writing into
    the array changes `x` and every view of its buffer.
    """
    if type(x) is not Tensor:
        raise TypeError(f"resolve() takes a Tensor, not {type(x).__name__}")
    if _traced.tracing:
        _traced.refuse_read("exports a tensor's buffer")
    client = x._client

    def leased(server):
        entry = server.resolve(x._id)
        array = array_of(server.ctx, entry)
        server.lease(entry.storage, array)  # (the buffer is the array's until it is collected)
        return array

    return client.call(leased)


def host_view(x: Tensor) -> np.ndarray:
    """x's values as a numpy array over the device buffer itself, no copy: on a CPU device,
    whose buffers are host memory, the buffer is mapped (BufferError on other devices,
    where the values would have to be copied). Writes go both ways while the array lives;
    the buffer is not recycled until it is collected, then unmapped. For zero-copy
    exports (`__dlpack__(copy=False)`)."""
    client = x._client
    if client.server.info.kind != "CPU":
        raise BufferError(f"the values live in the memory of device {client.server.info.name!r}: a host "
                          "array of them is a copy (copy=False cannot hold)")
    if _traced.tracing:
        _traced.refuse_read("maps a tensor's buffer")
    span, event, start = client.call(lambda server: server.map_to_host(x._id))
    if span is None:
        return np.empty(x.shape, x.dtype)
    waits.wait(event, client.spin_seconds)  # (the device wait, with the lock released)
    strides = tuple(s * x.dtype.itemsize for s in x.strides_elements)
    # (the map and the span's lease end with the last array over it)
    return np.lib.stride_tricks.as_strided(span[start:], x.shape, strides)


def from_cl(array: cla.Array, device=None) -> Tensor:
    """A tensor over an existing `pyopencl.array.Array`'s buffer, without a copy.

    The array must live in the device's context, have a supported dtype, and strides and
    offset that are whole elements and stay inside its buffer. Work the array's owner
    enqueued on another queue must be finished first; the buffer is read, never recycled.
    """
    if not isinstance(array, cla.Array):
        raise TypeError(f"from_cl() takes a pyopencl.array.Array, not {type(array).__name__}")
    client = client_for(device) if device is not None else client_for()
    runtime = client.server.runtime
    if array.context != runtime.context:
        raise ValueError(
            "the array belongs to another OpenCL context than the device's; create it with "
            "clients.client_for().server.runtime.context (or copy it with asarray(array.get()))"
        )
    dtype = dt.normalize(array.dtype)
    itemsize = dtype.itemsize
    if array.offset % itemsize or any(s % itemsize for s in array.strides):
        raise ValueError(f"offset {array.offset} and strides {array.strides} must be multiples of {itemsize}")
    buffer = array.base_data
    if buffer is None:
        if array.size:
            raise ValueError("the array has no buffer")
        return F.asarray(np.empty(array.shape, dtype), device=device)
    strides = tuple(s // itemsize for s in array.strides)
    offset = array.offset // itemsize
    shape = tuple(int(d) for d in array.shape)
    lo, hi = span_of(shape, strides, offset)
    if lo < 0 or hi * itemsize > buffer.size:
        raise ValueError(
            f"the array's layout (shape {shape}, strides {array.strides}, offset {array.offset}) "
            f"reaches bytes [{lo * itemsize}, {hi * itemsize}) outside its buffer of {buffer.size} bytes"
        )
    ir = F._new(client, shape, dtype)
    contiguous = offset == 0 and strides == F.contiguous_strides(shape)
    t = Tensor._make(client, ir.id, shape, dtype, None if contiguous else strides, offset)
    client.call(lambda server: server.adopt(ir, buffer, buffer.size, strides, offset))
    return t


__all__ = ["from_cl", "host_view", "resolve"]
