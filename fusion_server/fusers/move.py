"""Plans that move elements: integer-array gathers and scatters (one generated kernel,
see codegen/gather.py) and concatenation (per input, a plain copy or the same kernel with
no index array).

No fuser takes these ops: each runs alone, in its place in the stream, and later ops
read its output like any tensor.
"""

from __future__ import annotations

import math

import pyopencl as cl

from ..codegen import gather as gg
from ..context import BlockContext
from ..handles import READY, Entry
from ..ir import ConcatOp, MoveOp
from .base import LonePlan


def _layout(e) -> gg.Layout:
    return e.ir.shape, e.offset, e.strides


def _spec(ctx: BlockContext, dtype, index_dtypes: tuple, walked: tuple[int, ...],
          units: tuple[int | None, ...], fill: bool = False) -> gg.MoveSpec:
    """The move kernel for a space `walked` on this device: CPU devices launch exactly its
    work-items, unguarded (see MoveSpec.guarded), in the layout that suits their driver."""
    cpu = ctx.info.kind == "CPU"
    return gg.MoveSpec(dtype, index_dtypes, len(walked), gg.layout_for(walked, cpu, ctx.pack_lanes), units, not cpu,
                       fill)


def _launch_move(ctx: BlockContext, kernel: cl.Kernel, spec: gg.MoveSpec, walked: tuple[int, ...], args: list,
                 kind: str, name: str) -> None:
    """Launch a move kernel over the space `walked`: exactly its work-items (unguarded),
    or padded to whole groups; a work-item per element (a flat index, a 2-D grid) or per
    row (see MoveSpec.layout)."""
    n = math.prod(walked)
    row = 1 if spec.layout == "flat" else walked[-1]  # (elements a work-item's id stands for, along the last axis)
    if spec.layout == "grid":
        if spec.guarded:
            ctx.launch_grid(kernel, n // row, row, args, kind, [name], len(args))
        else:
            ctx.launch(kernel, (row, n // row), None, args, kind, [name], len(args), n)
    elif spec.guarded:
        ctx.launch_items(kernel, n // row, args, kind, [name], len(args), heavy=row > 1)
    else:
        ctx.launch(kernel, n // row, None, args, kind, [name], len(args), n)


def _writes_in_place(ctx: BlockContext, op: MoveOp, old: Entry, out: Entry) -> bool:
    """Whether a scatter may write into its old value's buffer instead of a copy of it:
    the old value dies with the op (`old_dies`: the client rebinds the handle that named
    it), nothing else reads it or shares, pins or owns its buffer, and it has the
    result's layout. Not while capturing (a capture's outputs live in buffers of its own)."""
    st = old.storage
    return (op.old_dies and ctx.tape is None and old.contiguous and old.readers == 1
            and op.inputs.count(op.inputs[0]) == 1 and st.refs == 1 and not st.pins and st.owned
            and st.status == READY and st.buffer is not None and st.nbytes == out.storage.nbytes
            and old.ir.shape == out.ir.shape and old.ir.dtype == out.ir.dtype)


def _share(old: Entry, out: Entry) -> None:
    """Make `out` name `old`'s storage, which now holds out's values: the old value (dead
    once the client rebinds its handle) shows them meanwhile, a state as consistent as
    any should an interrupt keep the handle from being rebound."""
    shared, fresh = old.storage, out.storage
    shared.refs += 1  # (first: cut here, one reference too many, which the recovery recounts)
    out.storage = shared
    fresh.refs -= 1
    fresh.nbytes = -1  # (never given a buffer: nothing to hand back, see handles.maybe_release)


class MovePlan(LonePlan):
    """A gather or scatter: the old values copied first (scatter), then the move kernel.
    A scatter whose old value dies with it writes into that buffer instead (`x[k] = v` on
    a large x costs the selection's elements, not a copy of x)."""

    op: MoveOp

    def execute(self, ctx: BlockContext) -> None:
        op = self.op
        entries = ctx.entries
        ins = [entries[t] for t in op.inputs]
        out = entries[op.out.id]
        what = f"{op.name} ({op.name})"
        if ctx.fail_if_inputs_failed(what, ins, [out]):
            return
        scatter, fill = op.name == "scatter", op.fill
        layouts = [_layout(e) for e in ins]
        if fill is not None:  # (the value as a layout that stays at its one element)
            layouts.insert(1, (fill[1], 0, (0,) * len(fill[1])))
        indices = ins[2:] if scatter and fill is None else ins[1:]  # (after the old value and the value tensor)
        walked = layouts[1][0] if scatter else op.out.shape  # a scatter walks its value, a gather its output
        n, args, units = gg.move_arguments(layouts, _layout(out), scatter=scatter,
                                          region_map=op.region_map, adv=op.adv, b_map=op.b_map, region=op.region)
        spec = _spec(ctx, op.out.dtype, tuple(e.ir.dtype for e in indices), walked, units, fill is not None)
        built = ctx.build_or_fail(spec, what, [out])
        if built is None:
            return
        old, itemsize = ins[0], op.out.dtype.itemsize
        in_place = scatter and _writes_in_place(ctx, op, old, out)
        if in_place:
            target = old.storage.buffer
            ctx.counters["inplace_reuses"] += 1
        else:
            target = ctx.allocate(out.storage)
            if scatter and math.prod(old.ir.shape):  # the old values first (one run of elements), in queue order
                ctx.enqueue(cl.enqueue_copy, target, old.storage.buffer,
                            byte_count=math.prod(old.ir.shape) * itemsize, src_offset=old.offset * itemsize,
                            dst_offset=out.offset * itemsize)
        if n:
            gg.set_buffers(args, target, fill[0].value if fill is not None else ins[1 if scatter else 0].storage.buffer,
                           [e.storage.buffer for e in indices])
            if in_place and ctx.recorders:
                ctx.note += "; written into the old value's buffer, which dies with it (no copy)"
            _launch_move(ctx, built.kernel, spec, walked, args, "move", op.name)
        if in_place:  # (after the launch: cut before it, the old value keeps its own values)
            _share(old, out)
        ctx.mark_ready([out.storage])


class ConcatPlan(LonePlan):
    """Each input copied into its slab of the output: one plain copy where the input and its
    slab are each one run of elements (along the first axis), else the move kernel with no
    index array, reading the input in its own layout (a view needs no copy first) and
    writing through the output's strides. (Copies of rectangles instead, `clEnqueueCopy
    BufferRect` over (outer, length, inner) blocks of contiguous inputs, ran on the host
    under PoCL 3.0: concatenating two 2048^2 float32 along the columns took 38 ms, against
    8 for numpy, on 2 Zen 3 cores.)"""

    op: ConcatOp

    def execute(self, ctx: BlockContext) -> None:
        op = self.op
        entries = ctx.entries
        ins = [entries[t] for t in op.inputs]
        out = entries[op.out.id]
        if ctx.fail_if_inputs_failed("concat", ins, [out]):
            return
        axis, itemsize = op.axis, op.out.dtype.itemsize
        copies = []  # (input, offset of its slab, the kernel's arguments and spec, or None: a plain copy)
        at = out.offset
        for e in ins:
            n = math.prod(e.ir.shape)
            if n:
                if e.contiguous and math.prod(op.out.shape[:axis]) == 1:
                    copies.append((e, at, None))
                else:
                    _, args, units = gg.move_arguments([_layout(e)], (e.ir.shape, at, out.strides), scatter=False,
                                                       region_map=tuple(range(len(e.ir.shape))), adv=(),
                                                       b_map=(-1,) * len(e.ir.shape), region=None)
                    spec = _spec(ctx, op.out.dtype, (), e.ir.shape, units)
                    copies.append((e, at, (args, spec)))
            at += e.ir.shape[axis] * out.strides[axis]
        built = {}
        for _, _, kernel in copies:  # (every build first: nothing has changed yet)
            if kernel is not None and kernel[1] not in built:
                built[kernel[1]] = ctx.build_or_fail(kernel[1], "concat", [out])
                if built[kernel[1]] is None:
                    return
        ctx.allocate(out.storage)
        for e, offset, kernel in copies:
            if kernel is None:
                ctx.enqueue(cl.enqueue_copy, out.storage.buffer, e.storage.buffer,
                            byte_count=math.prod(e.ir.shape) * itemsize, src_offset=e.offset * itemsize,
                            dst_offset=offset * itemsize)
                # (recorded like a kernel: inspect() shows every command a block enqueues)
                ctx.record_launch("copy", ["concat"], 2, "copy", math.prod(e.ir.shape))
                continue
            args, spec = kernel
            gg.set_buffers(args, out.storage.buffer, e.storage.buffer, [])
            _launch_move(ctx, built[spec].kernel, spec, e.ir.shape, args, "copy", "concat")
        ctx.mark_ready([out.storage])
