"""Plans that move elements: integer-array gathers and scatters (one generated kernel,
see codegen/gather.py) and concatenation (one rectangular device copy per input).

No fuser takes these ops: each runs alone, in its place in the stream, and later ops
read its output like any tensor.
"""

from __future__ import annotations

import math

import pyopencl as cl

from ..codegen import gather as gg
from ..context import BlockContext
from ..ir import ConcatOp, MoveOp
from .base import LonePlan


def _layout(e) -> gg.Layout:
    return e.ir.shape, e.offset, e.strides


class MovePlan(LonePlan):
    """A gather or scatter: the old values copied first (scatter), then the move kernel."""

    op: MoveOp

    def execute(self, ctx: BlockContext) -> None:
        op = self.op
        entries = ctx.entries
        ins = [entries[t] for t in op.inputs]
        out = entries[op.out.id]
        what = f"{op.name} ({op.name})"
        if ctx.fail_if_inputs_failed(what, ins, [out]):
            return
        scatter = op.name == "scatter"
        indices = ins[2:] if scatter else ins[1:]
        walked = ins[1].ir.shape if scatter else op.out.shape  # a scatter walks its value, a gather its output
        n, args, units = gg.move_arguments([_layout(e) for e in ins], _layout(out), scatter=scatter,
                                          region_map=op.region_map, adv=op.adv, b_map=op.b_map, region=op.region)
        exact = ctx.info.kind == "CPU"  # (launched over exactly its work-items: see MoveSpec.guarded)
        spec = gg.MoveSpec(op.out.dtype, tuple(e.ir.dtype for e in indices), len(walked), gg.use_grid(walked), units,
                           not exact)
        built = ctx.build_or_fail(spec, what, [out])
        if built is None:
            return
        ctx.allocate(out.storage)
        old, itemsize = ins[0], op.out.dtype.itemsize
        if scatter and math.prod(old.ir.shape):  # the old values first (one run of elements), in queue order
            ctx.enqueue(cl.enqueue_copy, out.storage.buffer, old.storage.buffer,
                        byte_count=math.prod(old.ir.shape) * itemsize, src_offset=old.offset * itemsize,
                        dst_offset=out.offset * itemsize)
        if n:
            gg.set_buffers(args, out.storage.buffer, ins[1 if scatter else 0].storage.buffer,
                           [e.storage.buffer for e in indices])
            row = walked[-1] if spec.grid else n
            if exact:
                ctx.launch(built.kernel, (row, n // row) if spec.grid else n, None, args, "move", [op.name], len(args))
            elif spec.grid:
                ctx.launch_grid(built.kernel, n // row, row, args, "move", [op.name], len(args))
            else:
                ctx.launch_items(built.kernel, n, args, "move", [op.name], len(args))
        ctx.mark_ready([out.storage])


class ConcatPlan(LonePlan):
    """The inputs copied into their slabs of the output, one rectangular copy each: the
    arrays seen as (outer, length along the axis, inner) blocks."""

    op: ConcatOp

    def execute(self, ctx: BlockContext) -> None:
        op = self.op
        entries = ctx.entries
        ins = [entries[t] for t in op.inputs]
        out = entries[op.out.id]
        if ctx.fail_if_inputs_failed("concat", ins, [out]):
            return
        ctx.allocate(out.storage)
        shape = op.out.shape
        itemsize = op.out.dtype.itemsize
        if math.prod(shape):
            outer = math.prod(shape[:op.axis])
            inner = math.prod(shape[op.axis + 1:]) * itemsize
            total = shape[op.axis]
            at = 0
            for e in ins:
                length = e.ir.shape[op.axis]
                if length and outer and inner:
                    ctx.enqueue(
                        cl.enqueue_copy, out.storage.buffer, e.storage.buffer,
                        src_origin=(e.offset * itemsize, 0, 0), dst_origin=(0, at, 0),
                        region=(inner, length, outer),
                        src_pitches=(inner, inner * length), dst_pitches=(inner, inner * total),
                    )
                at += length
        # (recorded like a kernel: inspect() shows every command a block enqueues)
        ctx.record_launch("copy", ["concat"], len(ins) + 1, "concat", math.prod(shape))
        ctx.mark_ready([out.storage])
