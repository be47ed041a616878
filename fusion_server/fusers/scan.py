"""Cumulative sums and products along rows (`codegen/scan.py`): the plan, and the fuser
that gives a scan the element-wise ops computing its input.

A row is cut into chunks so that the device has work enough; a row that gives one chunk
needs one kernel, others three. CPUs take chunks a work-item scans alone ("chunks": a few
per core); GPUs tiles a work-group scans in local memory with loads that coalesce
("tiles"). A scan alone reads its input; one the ScanFuser took (in tiles: see why there)
computes it, in each phase that reads it, from the prologue's inputs
(`cumulative_sum(exp(x) * w)` is one kernel per phase, and the product is never written).
"""

from __future__ import annotations

import numpy as np
import pyopencl as cl

from ..codegen import elementwise as cg
from ..codegen import scan as sc
from ..codegen import signature as sig
from ..context import BlockContext
from ..handles import PENDING, Entry
from ..ir import ElementwiseOp, OperationIr, ScanOp, size_of
from .base import LimitedFuser, LonePlan
from .sort import check_rows
from .trace import relative_form
from .values import liveness, needed_values

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


def strategy_of(ctx: BlockContext) -> str:
    """"tiles" (GPUs) or "chunks" (other devices), unless the server's setting says."""
    return ctx.scan_strategy or ("tiles" if ctx.info.kind == "GPU" else "chunks")


def layout(ctx: BlockContext, n: int, rows: int, acc: np.dtype) -> tuple[tuple[str, ...], int, int, int, int]:
    """How `rows` rows of `n` are scanned: the phases, the tile's work-group and elements per
    work-item (0, 0 for chunks), the chunk (or tile) length, and chunks per row."""
    if strategy_of(ctx) == "tiles":
        group, per_item = tile_shape(ctx, acc)
        chunk, phases = group * per_item, sc.TILE_PHASES
    else:
        group = per_item = 0
        chunk = chunk_length(n, rows, ctx.info.kind, ctx.info.compute_units) if n else 1
        phases = sc.PHASES
    return phases, group, per_item, chunk, -(-n // chunk) if n else 1


class ScanFuser(LimitedFuser):
    """Claims element-wise ops and the scan that reads the last one's value: the scan
    computes them where it reads its input, and writes those needed after the block in
    its last phase. Taken where their tensor inputs are C-ordered tensors of the scan's
    shape, read at the same flat index, and where the scan runs in tiles; otherwise the
    element-wise fuser takes the ops and the scan runs alone.

    Why only in tiles (GPUs): there each work-item computes its elements in parallel, as
    an element-wise kernel would, and the prologue's value is never written or read back:
    cumulative_sum(exp(x) * 0.5) over 4096^2 float32 took 0.215 ms of kernel time fused
    against 0.252 for the element-wise kernel and the scan (H200). In chunks (CPUs) a
    work-item walks its chunk in order, twice, so the prologue runs twice as scalar code
    that the compiler cannot vectorize across the scan's dependency: 7.2 ms fused against
    2.0 for the two kernels over 1024^2 (PoCL 3.0, 2 cores), and 2.2 against 1.8 for a
    prologue as cheap as x * 0.5 + 1."""

    name = "scan"

    def reset(self) -> None:
        self.prologue: list[ElementwiseOp] = []
        self.scan: ScanOp | None = None
        super().reset()

    def score(self) -> int:
        return 0 if self.scan is None else len(self.prologue) + 1

    def offer(self, op: OperationIr, ctx: BlockContext) -> bool:
        if self.closed:
            return False
        if self.scan is not None:
            return self._close("a scan ends its block")
        if not self.prologue and strategy_of(ctx) != "tiles":
            # (closed at once: on the per-op path of CPUs it would only collect ops in vain)
            return self._close("scans in chunks take no prologue")
        if type(op) is ElementwiseOp:
            if len(self.prologue) + 1 >= self.max_ops:
                return self._close("prologue is too long")
            self.prologue.append(op)
            return True
        if type(op) is ScanOp and self.prologue:
            why = self._refusal(op, ctx)
            if why:
                return self._close(why)
            self.scan = op
            return True
        return self._close(f"{type(op).__name__} is no scan of the ops before it")

    def _refusal(self, op: ScanOp, ctx: BlockContext) -> str:
        """Why the scan cannot take the prologue ('' if it can)."""
        prologue = self.prologue
        last = prologue[-1].out
        if op.inputs[0] != last.id:
            return "the scan reads no value of the ops before it"
        if any(p.out.shape != last.shape for p in prologue):
            return "prologue ops of another shape than the scan's"
        entries = ctx.entries
        values = {p.out.id for p in prologue}
        inputs = {t for p in prologue for t in p.inputs if type(t) is int and t not in values}
        for t in inputs:
            e = entries[t]
            if e.storage.status == PENDING or not e.contiguous or e.ir.shape != last.shape:
                return f"input {t} is not a C-ordered tensor of the scan's shape"
        if len(inputs) + len(prologue) + 8 > self.max_bindings:  # (every value may have to be written)
            return "too many inputs"
        return ""

    def finish(self, ctx: BlockContext) -> ScanPlan:
        return ScanPlan(self.scan, self.prologue)


class ScanPlan(LonePlan):
    """A scan, alone or with the element-wise ops that compute its input (`prologue`)."""

    op: ScanOp

    def __init__(self, op: ScanOp, prologue: list[ElementwiseOp] | None = None):
        super().__init__(op)
        self.prologue = list(prologue or [])
        self.ops = [*self.prologue, op]

    def _reads(self, ctx: BlockContext) -> tuple[list[Entry], list, cg.KernelSpec | None, list[Entry]]:
        """The entries the kernels read, the prologue's scalars, its trace, and the
        prologue values needed after the block (written by the last phase)."""
        if not self.prologue:
            return [ctx.entries[self.op.inputs[0]]], [], None, []
        ops = self.prologue
        last = len(ops) - 1
        entries = ctx.live_values()  # (drops applied: which values are still needed)
        needed = sorted(needed_values(ops, entries, more_reads={ops[last].out.id: 1}))
        live = liveness(ops, {last, *needed})
        trace, in_entries, scalars, scalar_dtypes, vmap = relative_form(ops, live, entries)
        spec = cg.KernelSpec(tuple(trace), tuple((e.ir.dtype, "contig") for e in in_entries), tuple(scalar_dtypes),
                             (vmap[last], *(vmap[j] for j in needed)), 1, "long", 0)
        return in_entries, scalars, spec, [entries[ops[j].out.id] for j in needed]

    def execute(self, ctx: BlockContext) -> None:
        op = self.op
        entries = ctx.entries
        ins, pro_scalars, prologue, written = self._reads(ctx)
        out = entries[op.out.id]
        what = f"cumulative_{op.name}"
        if ctx.fail_if_inputs_failed(what, ins, [out, *written]):
            return
        shape = op.out.shape
        n = shape[-1]
        rows = size_of(shape) // n if n else 0
        phases, group, per_item, chunk, chunks = layout(ctx, n, rows, op.acc)
        specs = {p: sc.ScanSpec("scan", op.name, p, op.out.dtype, op.acc, group, per_item,
                                prologue if p in sc.READS else None) for p in phases}
        totals_phase, offsets_phase, write_phase = phases
        kernels = {p: ctx.kernel_for(specs[p]) for p in (phases if chunks > 1 else (write_phase,))}
        ctx.allocate(out.storage)  # (every kernel built before anything changes: NeedsCompile)
        for e in written:
            ctx.allocate(e.storage)
        done = [out.storage, *(e.storage for e in written)]
        if rows == 0 or n == 0:
            ctx.mark_ready(done)
            return
        if prologue is None:
            check_rows(ins[0])
        pool = ctx.pool
        names = [*(p.name for p in self.prologue), what]
        sizes = [np.int64(v) for v in (n, rows, chunk, chunks)]
        totals_bytes = rows * chunks * op.acc.itemsize if chunks > 1 else 0
        totals = pool.alloc(totals_bytes) if totals_bytes else out.storage.buffer  # (unread with one chunk)
        try:
            if prologue is None:
                data = dict(input=[ins[0].storage.buffer], scalar=[np.int64(ins[0].offset), *sizes],
                            out=[out.storage.buffer, totals])
            else:
                data = dict(input=[e.storage.buffer for e in ins], scalar=[*sizes, *pro_scalars],
                            out=[out.storage.buffer, totals])
            writes = [e.storage.buffer for e in written]
            def run(phase: str, **more) -> None:
                outs = {"out": data["out"] + writes} if phase in sc.WRITES else {}
                args = sig.bind(sc.parameters(specs[phase]), **{**data, **outs}, **more)
                if group:  # a work-group per tile
                    ctx.launch(kernels[phase], rows * chunks * group, group, args, "scan", names, len(args))
                else:
                    ctx.launch_items(kernels[phase], rows * chunks, args, "scan", names, len(args), heavy=True)

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
        ctx.mark_ready(done)
