"""The plan that runs an opaque custom kernel: the user's launch function, in its place."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyopencl.array as cla

from ..context import BlockContext
from ..errors import TensorFailedError
from ..ir import CustomKernelOp
from .base import LonePlan

if TYPE_CHECKING:
    from ..handles import Entry


def array_of(ctx: BlockContext, entry: Entry) -> cla.Array:
    """A pyopencl array over `entry`'s buffer with its shape, strides and offset; no copy."""
    itemsize = entry.ir.dtype.itemsize
    return cla.Array(
        ctx.queue,
        entry.ir.shape,
        entry.ir.dtype,
        data=entry.storage.buffer,
        offset=entry.offset * itemsize,
        strides=tuple(s * itemsize for s in entry.strides),
    )


class CustomKernelPlan(LonePlan):
    """Calls `launch(queue, inputs, outputs, **params)` with the server lock held."""

    op: CustomKernelOp

    def execute(self, ctx: BlockContext) -> None:
        op = self.op
        entries = ctx.entries
        ins = [entries[t] for t in op.inputs]
        outs = [entries[o.id] for o in op.outputs]
        if ctx.fail_if_inputs_failed(f"custom kernel {op.name!r}", ins, outs):
            return
        for e in outs:
            ctx.allocate(e.storage)
        in_arrays = [array_of(ctx, e) for e in ins]
        out_arrays = [array_of(ctx, e) for e in outs]
        try:
            ctx.enqueue(op.launch, in_arrays, out_arrays, **dict(op.params))
        except Exception as exc:
            err = TensorFailedError(f"custom kernel {op.name!r} failed in its launch function: {exc!r}")
            err.__cause__ = exc
            ctx.fail([o.storage for o in outs], err)
            return
        ctx.record_launch("custom", [op.name], len(ins) + len(outs) + len(op.params), op.name, 0)
        ctx.mark_ready([o.storage for o in outs])
