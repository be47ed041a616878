"""The plan that runs cumulative sums and products along rows (`codegen/scan.py`).

No fuser takes a ScanOp: it runs alone, in its place in the stream, like a sort. A row is
cut into chunks so that the device has work-items enough: a GPU wants thousands, a CPU a
few per core; a row that gives one chunk needs one kernel, others three.
"""

from __future__ import annotations

import numpy as np

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
        chunk = chunk_length(n, rows, ctx.info.kind, ctx.info.compute_units) if n else 1
        chunks = -(-n // chunk) if n else 1
        specs = {p: sc.ScanSpec("scan", op.name, p, op.out.dtype, op.acc) for p in sc.PHASES}
        kernels = {p: ctx.kernel_for(specs[p]) for p in (sc.PHASES if chunks > 1 else ("write",))}
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
            if chunks > 1:
                args = sig.bind(sc.parameters(specs["totals"]), **data)
                ctx.launch_items(kernels["totals"], rows * chunks, args, "scan", [what], len(args), heavy=True)
                args = sig.bind(sc.parameters(specs["offsets"]), scalar=sizes, out=[totals])
                ctx.launch_items(kernels["offsets"], rows, args, "scan", [what], len(args), heavy=True)
            args = sig.bind(sc.parameters(specs["write"]), **data)
            ctx.launch_items(kernels["write"], rows * chunks, args, "scan", [what], len(args), heavy=True)
        finally:  # also when a launch fails: the totals go back to the pool (the queue is in order)
            if totals_bytes:
                pool.free(totals, totals_bytes)
        ctx.mark_ready([out.storage])
