"""The plan that runs an opaque custom kernel: the user's launch function, in its place."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyopencl.array as cla

from ..errors import TensorFailedError, after_failed_input
from ..handles import FAILED
from ..ir import CustomKernelOp

if TYPE_CHECKING:
    from ..handles import Entry
    from ..server import FusionServer


def array_of(server: FusionServer, entry: Entry) -> cla.Array:
    """A pyopencl array over `entry`'s buffer with its shape, strides and offset; no copy."""
    itemsize = entry.ir.dtype.itemsize
    return cla.Array(
        server.runtime.queue,
        entry.ir.shape,
        entry.ir.dtype,
        data=entry.storage.buffer,
        offset=entry.offset * itemsize,
        strides=tuple(s * itemsize for s in entry.strides),
    )


class CustomKernelPlan:
    """Calls `launch(queue, inputs, outputs, **params)` with the server lock held."""

    kind = "custom"

    def __init__(self, op: CustomKernelOp):
        self.ops = [op]
        self.op = op

    def execute(self, server: FusionServer) -> None:
        op = self.op
        entries = server.handles.entries
        ins = [entries[t] for t in op.inputs]
        outs = [entries[o.id] for o in op.outputs]
        for e in ins:
            if e.storage.status == FAILED:
                err = after_failed_input(f"custom kernel {op.name!r}", e.ir.id, e.storage.error)
                server.fail_storages([o.storage for o in outs], err)
                return
        for e in outs:
            server.allocate(e.storage)
        in_arrays = [array_of(server, e) for e in ins]
        out_arrays = [array_of(server, e) for e in outs]
        try:
            op.launch(server.runtime.queue, in_arrays, out_arrays, **dict(op.params))
        except Exception as exc:
            err = TensorFailedError(f"custom kernel {op.name!r} failed in its launch function: {exc!r}")
            err.__cause__ = exc
            server.fail_storages([o.storage for o in outs], err)
            return
        server.note_launch("custom", [op.name], len(ins) + len(outs) + len(op.params), op.name, 0)
        server.mark_ready([o.storage for o in outs])
