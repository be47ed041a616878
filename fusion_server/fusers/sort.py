"""The plan that sorts rows on the device: a first stage, then merge passes for long rows.

The first stage sorts tiles in local memory on GPUs (a bitonic network), and on CPU
devices a row, or a segment of one, per work-item (a radix sort); see `codegen/sort.py`.

No fuser takes a SortOp, so it runs alone, in its place in the stream: the block before
it is launched first and later ops read its outputs like any tensor. Every launch is
recorded (kind "sort"), so `inspect()` counts the passes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyopencl as cl

from ..codegen import signature as sig
from ..codegen import sort as sg
from ..context import BlockContext
from ..errors import FusionError
from ..ir import SortOp, size_of
from .base import LonePlan

if TYPE_CHECKING:
    from ..handles import Entry

# Work-items per work-group of the tile kernel; each sorts two pairs, so a tile holds
# twice as many. On a GPU, 512 items keep a tile of 1024 pairs (8 to 12 KiB of local
# memory) on one compute unit with room for several groups, and a 1024-element row
# needs no merge pass. Other devices that are not CPUs (CPUs take the radix stage) get
# 1024 items: 2048 pairs (16 to 24 KiB).
TILE_ITEMS = {"GPU": 512}
TILE_ITEMS_OTHER = 1024
# Merged pairs per work-item of a merge pass: a binary search starts each chunk, so longer
# chunks search less; a GPU wants many short ones for parallelism, a CPU few long ones.
MERGE_CHUNK = {"GPU": 8}
MERGE_CHUNK_OTHER = 32
MAX_ROW = 1 << 30  # positions and run bounds are 32-bit ints in the kernels
# CPU devices: a row is cut into radix-sorted segments (powers of two, so that the merge
# passes' runs double from them) only as far as it takes to give every core one (as many
# segments as cores, rounded up to a power of two, fewer for many rows): a merge
# pass costs more than the radix passes it saves (2^20 floats on 2 cores: 38 ms in
# segments of 2^12, 31 of 2^14, 23 of 2^16, 15 of 2^18, 11 of 2^19, 13 in one segment).
# Rows up to RUN_SPLIT_MIN are never cut.
RUN_SPLIT_MIN = 1 << 12


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _pow2_floor(n: int) -> int:
    return 1 << (max(n, 1).bit_length() - 1)


def _pow2_ceil(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def first_stage_for(kind: str) -> str:
    """The first stage of a sort on a device of `kind`: "runs" on CPUs, "tiles" else."""
    return "runs" if kind == "CPU" else "tiles"


def run_segment(n: int, rows: int, compute_units: int) -> int:
    """CPU devices: the length of the segments of a row that work-items radix-sort."""
    if n <= RUN_SPLIT_MIN:
        return _pow2_ceil(n)
    return max(RUN_SPLIT_MIN, _pow2_ceil(_ceil_div(n, max(1, _ceil_div(compute_units, rows)))))


def check_rows(entry: Entry) -> None:
    """Raise unless `entry`'s rows are C-ordered (size-1 dimensions aside)."""
    expected = 1
    for n, s in zip(reversed(entry.ir.shape), reversed(entry.strides)):
        if n != 1 and s != expected:
            raise FusionError(f"sort input {entry.ir.id} is not in C order (strides {entry.strides})")
        expected *= n


class SortPlan(LonePlan):
    """Sorts every row of the op's input; see `codegen/sort.py` for the kernels."""

    op: SortOp

    def execute(self, ctx: BlockContext) -> None:
        op = self.op
        entries = ctx.entries
        src = entries[op.input]
        outs = [entries[o.id] for o in op.outputs]
        if ctx.fail_if_inputs_failed(f"sort ({op.name})", [src], outs):
            return
        shape = src.ir.shape
        n = shape[-1] if shape else 1
        rows = size_of(shape) // n if n else 0
        if n > MAX_ROW:
            raise FusionError(f"rows of {n} elements are longer than the sort supports ({MAX_ROW})")
        values = op.name == "sort"
        first_stage = first_stage_for(ctx.info.kind)
        first_spec = sg.SortSpec("sort", first_stage, src.ir.dtype, values, not values)
        merge_spec = first_spec._replace(stage="merge")
        first = ctx.kernel_for(first_spec)  # both built before anything changes (NeedsCompile)
        merge = ctx.kernel_for(merge_spec)
        for e in outs:
            ctx.allocate(e.storage)
        if rows == 0 or n == 0:
            ctx.mark_ready([e.storage for e in outs])
            return
        check_rows(src)
        result = outs[0].storage.buffer
        out_values, out_indices = (result, None) if values else (None, result)
        device = ctx.info.device
        kbytes = sg.key_bytes(src.ir.dtype)
        in_off = np.int64(src.offset)

        if first_stage == "runs":
            seg = run_segment(n, rows, ctx.info.compute_units)
            per_row = _ceil_div(n, seg)
            items = rows * per_row
            # Several work-groups per core (a CPU driver runs one on one core at a time);
            # a driver that packs work-items into lanes runs them alone (ctx.group_size).
            local = 1 if ctx.info.packs_work_items else \
                _pow2_floor(max(1, min(64, items // (4 * ctx.info.compute_units))))
        else:
            # The tile kernel: segments of a power of two no longer than a tile.
            most = TILE_ITEMS.get(ctx.info.kind, TILE_ITEMS_OTHER)
            most = min(most, first.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, device),
                       device.local_mem_size // (2 * (kbytes + 4)))
            most = _pow2_floor(most)
            seg = min(_pow2_ceil(n), 2 * most)
            per_row = _ceil_div(n, seg)
            # Few short rows need no big work-group: a tile of at least one segment is enough.
            items = max(seg // 2, min(most, _pow2_ceil(rows * per_row * seg) // 2), 1)
            n_tiles = _ceil_div(rows * per_row * seg, 2 * items)
        final = per_row == 1
        pool = ctx.pool
        # Scratch: the sorted runs and their positions (merge passes and runs ping-pong
        # between two pairs); the radix sort's second copy is the second pair, in which
        # 4-byte keys travel packed with their positions, 8 bytes each (codegen/sort.py).
        size = rows * n
        packed = first_stage == "runs" and kbytes == 4
        sizes = []
        if not final or first_stage == "runs":
            # (packed rows that fit one segment go from the second pair to the results)
            first_pair = (0, 0) if final and packed else (size * kbytes, size * 4)
            sizes = [first_pair, (size * 8, size * 8) if packed else (size * kbytes, size * 4)]
        scratch: list = []
        held: list = []  # (buffer, nbytes) taken so far: an allocation failing frees them
        try:
            for k_bytes, i_bytes in sizes:
                pair = tuple(pool.alloc(b) if b else None for b in (k_bytes, i_bytes))
                held += [(buf, b) for buf, b in zip(pair, (k_bytes, i_bytes)) if buf is not None]
                scratch.append(pair)
            keys, idx = scratch[0] if scratch else (None, None)
            scalars = [in_off, *map(np.int32, (rows, n, seg, op.descending, final))]
            if first_stage == "runs":
                args = sig.bind(sg.parameters(first_spec), input=[src.storage.buffer], scalar=scalars,
                                out=[keys, idx, out_values, out_indices, *scratch[1]])
                ctx.launch(first, _ceil_div(items, local) * local, local, args, "sort", [op.name], len(args))
            else:
                args = sig.bind(sg.parameters(first_spec), input=[src.storage.buffer], scalar=scalars,
                                out=[keys, idx, out_values, out_indices],
                                local=[cl.LocalMemory(2 * items * kbytes), cl.LocalMemory(2 * items * 4)])
                ctx.launch(first, n_tiles * items, items, args, "sort", [op.name], len(args))

            # Merge passes: runs of `seg` pairs double until one covers the row.
            most = _pow2_floor(min(ctx.local_size,
                                   merge.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, device)))
            run, k = seg, 0
            while run < n:
                (k_in, i_in), (k_out, i_out) = scratch[k % 2], scratch[(k + 1) % 2]
                last = 2 * run >= n
                chunk = min(MERGE_CHUNK.get(ctx.info.kind, MERGE_CHUNK_OTHER), 2 * run)  # a power of two
                per_row = _ceil_div(n, chunk)
                local = min(most, _pow2_ceil(per_row))  # a short row's work-group is no wider than it
                groups = rows * _ceil_div(per_row, local)
                args = sig.bind(sg.parameters(merge_spec), input=[k_in, i_in, src.storage.buffer],
                                scalar=[*map(np.int32, (rows, n, run, chunk, last)), in_off],
                                out=[k_out, i_out, out_values, out_indices])
                ctx.launch(merge, groups * local, local, args, "sort", [op.name], len(args))
                run, k = 2 * run, k + 1
        finally:  # also when a launch fails: the scratch goes back to the pool
            # The in-order queue runs the passes before any later use of these buffers.
            for buf, nbytes in held:
                pool.free(buf, nbytes)
        ctx.mark_ready([e.storage for e in outs])
