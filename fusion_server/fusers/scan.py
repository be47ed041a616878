"""The plan that runs cumulative sums and products along rows (`codegen/scan.py`).

No fuser takes a ScanOp: it runs alone, in its place in the stream, like a sort. A row is
cut into chunks so that the device has work enough; a row that gives one chunk needs one
kernel, others three. CPUs take chunks a work-item scans alone ("chunks": a few per core);
GPUs tiles a work-group scans in local memory with loads that coalesce ("tiles").
"""

from __future__ import annotations

import numpy as np
import pyopencl as cl

from ..codegen import scan as sc
from ..codegen import signature as sig
from ..context import BlockContext
from ..ir import ScanOp, size_of
from .base import LonePlan
from .sort import check_rows

MIN_CHUNK = 256  # elements a work-item scans at least: below that, launches cost more than they save
ITEMS = {"GPU": 16384}  # work-items to aim for, by device kind; others: 4 per compute unit


def chunk_length(n: int, rows: int, kind: str, compute_units: int) -> int:
    """Elements per chunk of a row of `n`, for `rows` rows on a device of `kind`."""
    wanted = ITEMS.get(kind, 4 * max(1, compute_units))
    per_row = max(1, -(-wanted // max(1, rows)))  # chunks per row that give the wanted work-items
    return max(MIN_CHUNK, -(-n // per_row))


def tile_shape(ctx: BlockContext, acc: np.dtype) -> tuple[int, int]:
    """(work-items per work-group, elements per work-item) of the tile strategy: groups of
    up to 256, 16 elements each where the tile and its carries fit half the local memory."""
    group = 1
    while group * 2 <= min(256, ctx.local_size):
        group *= 2
    per_item = 16
    while per_item > 1 and (group * per_item + group) * acc.itemsize > ctx.info.local_mem_bytes // 2:
        per_item //= 2
    return group, per_item


def layout(ctx: BlockContext, n: int, rows: int, acc: np.dtype) -> tuple[tuple[str, ...], int, int, int, int]:
    """How `rows` rows of `n` are scanned: the phases, the tile's work-group and elements per
    work-item (0, 0 for chunks), the chunk (or tile) length, and chunks per row."""
    strategy = ctx.scan_strategy or ("tiles" if ctx.info.kind == "GPU" else "chunks")
    if strategy == "tiles":
        group, per_item = tile_shape(ctx, acc)
        chunk, phases = group * per_item, sc.TILE_PHASES
    else:
        group = per_item = 0
        chunk = chunk_length(n, rows, ctx.info.kind, ctx.info.compute_units) if n else 1
        phases = sc.PHASES
    return phases, group, per_item, chunk, -(-n // chunk) if n else 1


class ScanPlan(LonePlan):
    op: ScanOp

    def execute(self, ctx: BlockContext) -> None:
        op = self.op
        entries = ctx.entries
        src = entries[op.inputs[0]]
        out = entries[op.out.id]
        what = f"cumulative_{op.name}"
        if ctx.fail_if_inputs_failed(what, [src], [out]):
            return
        shape = src.ir.shape
        n = shape[-1]
        rows = size_of(shape) // n if n else 0
        phases, group, per_item, chunk, chunks = layout(ctx, n, rows, op.acc)
        specs = {p: sc.ScanSpec("scan", op.name, p, op.out.dtype, op.acc, group, per_item) for p in phases}
        totals_phase, offsets_phase, write_phase = phases
        kernels = {p: ctx.kernel_for(specs[p]) for p in (phases if chunks > 1 else (write_phase,))}
        ctx.allocate(out.storage)  # (every kernel built before anything changes: NeedsCompile)
        if rows == 0 or n == 0:
            ctx.mark_ready([out.storage])
            return
        check_rows(src)
        pool = ctx.pool
        sizes = [np.int64(v) for v in (n, rows, chunk, chunks)]
        totals_bytes = rows * chunks * op.acc.itemsize if chunks > 1 else 0
        totals = pool.alloc(totals_bytes) if totals_bytes else out.storage.buffer  # (unread with one chunk)
        try:
            data = dict(input=[src.storage.buffer], scalar=[np.int64(src.offset), *sizes],
                        out=[out.storage.buffer, totals])
            def run(phase: str, **more) -> None:
                args = sig.bind(sc.parameters(specs[phase]), **data, **more)
                if group:  # a work-group per tile
                    ctx.launch(kernels[phase], rows * chunks * group, group, args, "scan", [what], len(args))
                else:
                    ctx.launch_items(kernels[phase], rows * chunks, args, "scan", [what], len(args), heavy=True)

            size = op.acc.itemsize
            if chunks > 1:
                run(totals_phase, **({"local": [cl.LocalMemory(group * size)]} if group else {}))
                if group:  # a work-group per row
                    args = sig.bind(sc.parameters(specs[offsets_phase]), scalar=sizes, out=[totals],
                                    local=[cl.LocalMemory(group * size)])
                    ctx.launch(kernels[offsets_phase], rows * group, group, args, "scan", [what], len(args))
                else:
                    args = sig.bind(sc.parameters(specs[offsets_phase]), scalar=sizes, out=[totals])
                    ctx.launch_items(kernels[offsets_phase], rows, args, "scan", [what], len(args), heavy=True)
            run(write_phase, **({"local": [cl.LocalMemory(chunk * size), cl.LocalMemory(group * size)]}
                                if group else {}))
        finally:  # also when a launch fails: the totals go back to the pool (the queue is in order)
            if totals_bytes:
                pool.free(totals, totals_bytes)
        ctx.mark_ready([out.storage])
