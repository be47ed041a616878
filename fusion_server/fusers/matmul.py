"""The matmul fuser: one matrix product and the element-wise epilogue on its result."""

from __future__ import annotations

import numpy as np

from ..codegen import elementwise as cg
from ..codegen import epilogue as ep
from ..codegen import matmul as mg
from ..codegen import panels as pg
from ..codegen import signature as sig
from ..codegen import transpose as tg
from ..codegen.layout import broadcast_strides
from ..context import BlockContext
from ..handles import FAILED, PENDING
from ..ir import ElementwiseOp, MatmulOp, OperationIr, size_of
from .base import LimitedFuser, uses_flat_index
from .elementwise import run_around_failures
from .trace import index_type, relative_form
from .values import epilogue_outputs, liveness, needed_values


class MatmulFuser(LimitedFuser):
    name = "matmul"

    def reset(self) -> None:
        self.matmul: MatmulOp | None = None
        self.epilogue: list[ElementwiseOp] = []
        self.values: set[int] = set()
        self.inputs: set[int] = set()
        self.n_scalars = 0
        super().reset()

    def score(self) -> int:
        return 0 if self.matmul is None else 1 + len(self.epilogue)

    def offer(self, op: OperationIr, ctx: BlockContext) -> bool:
        if self.closed:
            return False
        entries = ctx.entries
        if self.matmul is None:
            if type(op) is not MatmulOp:
                return self._close("a matmul block starts with a matmul")
            if entries[op.a].storage.status == PENDING or entries[op.b].storage.status == PENDING:
                return self._close("operands still being computed")
            self.matmul = op
            self.values.add(op.out.id)
            return True
        if type(op) is not ElementwiseOp or op.out.shape != self.matmul.out.shape:
            return self._close("epilogue ends")
        if uses_flat_index(op):
            return self._close("epilogue uses the element's flat index")
        new = set()
        scalars = 0
        for operand in op.inputs:
            if type(operand) is int:
                if operand in self.values or operand in self.inputs:
                    continue
                if entries[operand].storage.status == PENDING:
                    return self._close("epilogue reads a value being computed elsewhere")
                new.add(operand)
            else:
                scalars += 1
        bindings = mg.FIXED_BINDINGS + len(self.inputs) + len(new) + self.n_scalars + scalars + len(self.epilogue) + 1
        if len(self.epilogue) + 1 >= self.max_ops or bindings > self.max_bindings:
            return self._close("limits")
        self.inputs |= new
        self.n_scalars += scalars
        self.epilogue.append(op)
        self.values.add(op.out.id)
        return True

    def finish(self, ctx: BlockContext) -> MatmulPlan:
        assert self.matmul is not None
        return MatmulPlan(self.matmul, list(self.epilogue))


class MatmulPlan:
    """One matmul kernel that computes its element-wise epilogue before writing."""

    def __init__(self, matmul: MatmulOp, epilogue: list[ElementwiseOp]):
        self.matmul = matmul
        self.epilogue = epilogue
        self.ops: list[OperationIr] = [matmul, *epilogue]

    def execute(self, ctx: BlockContext) -> None:
        entries = ctx.entries
        mm, epi = self.matmul, self.epilogue
        ea, eb, prod = entries[mm.a], entries[mm.b], entries[mm.out.id]
        needed = needed_values(epi, entries) if epi else set()
        live = liveness(epi, needed) if epi else []
        trace, epi_entries, scalars, sdt, vmap = relative_form(epi, live, entries, first_inputs=(mm.out.id,))
        outputs, out_entries = epilogue_outputs(mm.out.id, epi, needed, vmap, entries)
        if not out_entries:
            return
        if any(e.storage.status == FAILED for e in [ea, eb, *epi_entries[1:]]):
            run_around_failures(ctx, self.ops)
            return
        out_shape = mm.out.shape
        m, k = ea.ir.shape[-2:]
        n = eb.ir.shape[-1]
        batch_shape = out_shape[:-2]
        nbatch = size_of(batch_shape)
        sa = broadcast_strides(ea.ir.shape[:-2], ea.strides[:-2], batch_shape)
        sb = broadcast_strides(eb.ir.shape[:-2], eb.strides[:-2], batch_shape)
        classes, layouts, out_rank = ep.layouts(prod.ir.dtype, epi_entries[1:], out_shape)
        a_layout, b_layout = (ea.offset, ea.strides[-2], ea.strides[-1]), (eb.offset, eb.strides[-2], eb.strides[-1])
        batch = list(zip(batch_shape, sa, sb))
        biggest = max(size_of(out_shape), ea.storage.nbytes // ea.ir.dtype.itemsize,
                      eb.storage.nbytes // eb.ir.dtype.itemsize, k * (n + 64))  # (B's panels, padded)
        index = index_type(biggest)
        strategy = ctx.matmul_strategy or ("tiled" if ctx.info.kind == "GPU" else "rows")
        if mm.compute.kind == "c":
            strategy = "tiled"  # (the rows kernel holds vectors of elements: none of complex values)
        tile = 128 if strategy == "tiled" and m * n * nbatch >= 2048 * 2048 and mm.compute.kind != "c" else 64
        aligned = mg.aligned_tiles(mm.compute, tile, a_layout, b_layout, batch, m, n, k, ctx.info.local_mem_bytes) \
            if strategy == "tiled" else None
        packed = packed_operands(strategy, mm.compute, tile, aligned, a_layout, b_layout, batch, m, n, k,
                                 ctx.info.local_mem_bytes)
        packs = {}
        if packed is not None:
            packs, (a_layout, b_layout, aligned) = packed
        meta = mg.metadata(a_layout, b_layout, batch, out_shape, out_rank, layouts)
        operands, depth, double = aligned or ("", mg.TK, False)
        spec = mg.MatmulSpec(
            dtype=mm.compute,
            epilogue=cg.KernelSpec(tuple(trace), tuple(classes), tuple(sdt), tuple(outputs), 1, index, out_rank),
            batch_rank=len(batch_shape),
            index=index,
            out_rank=out_rank,
            strategy=strategy,
            tile=tile,
            # (at most 64 bytes: the register block of the rows layout fills AVX-512's registers)
            vector_bytes=min(64, mm.compute.itemsize * ctx.widths.of_size(mm.compute.itemsize))
            if strategy == "rows" else 64,
            operands=operands,
            depth=depth,
            double_buffer=double,
        )
        if strategy == "rows":
            spec = spec._replace(b_panels=b_in_panels(batch, m, n, k, mg.rows_layout(spec)))
        transpose = ctx.build_or_fail(tg.TransposeSpec(mm.compute, index, blocks=strategy == "rows"),
                                      "matmul block", out_entries) if packs else None
        if packs and transpose is None:
            return
        built = ctx.build_or_fail(spec, "matmul block", out_entries)  # its scalar variant if the vector build failed
        if built is None:
            return
        kernel, spec = built.kernel, built.spec
        panels = None
        if spec.b_panels:  # (the layout of the kernel built: its scalar variant's where the vector one failed)
            panels = ctx.build_or_fail(pg.PanelSpec(mm.compute, index, mg.rows_layout(spec).cols),
                                       "matmul block", out_entries)
            if panels is None:
                return
        buffers = [ctx.allocate(e.storage) for e in out_entries]
        operand_buffers = [ea.storage.buffer, eb.storage.buffer]
        scratch = []
        idx = np.int32 if index == "int" else np.int64
        try:
            if size_of(out_shape):
                for which, (rows, cols, layout) in packs.items():
                    nbytes = rows * cols * mm.compute.itemsize
                    scratch.append((ctx.pool.alloc(nbytes), nbytes))
                    source = operand_buffers[which]
                    operand_buffers[which] = scratch[-1][0]
                    args = [scratch[-1][0], source, *map(idx, (*layout, rows, cols))]
                    ctx.launch(transpose.kernel, *tg.grid(transpose.spec, rows, cols), args, "matmul",
                               [f"pack {'AB'[which]} for matmul"], len(args))
                if panels is not None:
                    nbytes = pg.nbytes(panels.spec, k, n)
                    scratch.append((ctx.pool.alloc(nbytes), nbytes))
                    off, s_bk, s_bn = b_layout
                    args = [scratch[-1][0], operand_buffers[1], *map(idx, (off, s_bk, s_bn, k, n))]
                    operand_buffers[1] = scratch[-1][0]
                    ctx.launch(panels.kernel, *pg.grid(panels.spec, k, n), args, "matmul",
                               ["pack B in panels for matmul"], len(args))
            self._launch(ctx, kernel, spec, out_shape, idx, (m, n, k, nbatch), meta, buffers, scalars,
                         [*operand_buffers, *(e.storage.buffer for e in epi_entries[1:])])
        finally:  # (the in-order queue runs the packs and the product before any later use)
            for buffer, nbytes in scratch:
                ctx.pool.free(buffer, nbytes)
        ctx.mark_ready([e.storage for e in out_entries])

    def _launch(self, ctx: BlockContext, kernel, spec: mg.MatmulSpec, out_shape: tuple, idx: type,
                sizes: tuple[int, int, int, int], meta: tuple, buffers: list, scalars: list, inputs: list) -> None:
        """Enqueue the matmul kernel over its grid (nothing for an empty product); `idx` is
        the numpy type of its size arguments."""
        m, n, k, nbatch = sizes
        if size_of(out_shape):
            args = sig.bind(mg.parameters(spec), size=[idx(m), idx(n), idx(k), idx(nbatch)],
                            meta=[ctx.metadata_buffer(meta)], out=buffers, scalar=scalars, input=inputs)
            if spec.strategy == "rows":
                layout = mg.rows_layout(spec)
                # Column strips vary fastest: consecutive work-items share A's rows, which stay in
                # the core's L2 (rows varying fastest, each work-item's strip of B shared instead:
                # 13.8 to 15.9 ms of kernel time against 11.0 to 11.3 at 1024^3, PoCL 3.0 on a
                # 2-core Intel Xeon).
                groups = ((n + layout.cols - 1) // layout.cols, (m + layout.rows - 1) // layout.rows, nbatch)
                # One work-item per group: its private panels stay with it (larger groups
                # made PoCL interleave work-items and their panels).
                local = (1, 1, 1)
            else:
                tile = spec.tile
                groups = ((n + tile - 1) // tile * mg.LOCAL, (m + tile - 1) // tile * mg.LOCAL, nbatch)
                local = (mg.LOCAL, mg.LOCAL, 1)
            ctx.launch(kernel, groups, local, args, "matmul", [getattr(op, "name", "matmul") for op in self.ops],
                       len(args))


# The "rows" kernel (CPUs) packs an A it reads across rows, and B into panels, from
# products of this many multiply-adds (smaller ones, a launch's cost more than the copy
# saves).
ROWS_PACK_MIN = 1 << 21


def b_in_panels(batch: list, m: int, n: int, k: int, layout: mg.RowsLayout) -> bool:
    """Whether the rows kernel reads B from panels copied first (codegen/panels.py): for
    a large product that is not batched, whose work-items share each strip of B (more
    than one of them down M; a single one copies its strip as fast itself)."""
    return not batch and m * n * k >= ROWS_PACK_MIN and m > layout.rows


def packed_operands(strategy: str, dtype: np.dtype, tile: int, aligned: tuple | None, a_layout: tuple,
                    b_layout: tuple, batch: list, m: int, n: int, k: int, local_bytes: int) -> tuple | None:
    """({operand (0: A, 1: B): (rows, cols, (offset, row stride, column stride)) of the
    transpose that packs it}, (A's layout, B's layout, aligned tiles) then), or None where
    the operands stay as they are. Not for batched products.

    - GPUs: a large product (128-wide tiles) whose tiled kernel would read an operand
      along k (a row-major A, a transposed B) copies it transposed first, into the layout
      read along the output (A^T contiguous, B row-major): on an H200 at 4096^3 the kernel
      reading A along k took 4.58 ms, along m 3.67 (3.47 and 3.06 on another start), and
      the copy of 64 MiB about 0.05 (see BENCHMARKS.md).
    - CPUs: the rows kernel streams each row of A along k; an A whose rows are not
      contiguous (a transposed view) is copied row-major first (A^T @ B at 1024^3 on a
      2-core Zen 3: 78.6 ms, against 39 for A @ B). Its B^T is read by columns already."""
    if batch:
        return None
    if strategy == "rows":
        off, s_am, s_ak = a_layout
        if s_ak == 1 or m * n * k < ROWS_PACK_MIN:
            return None
        return {0: (k, m, (off, s_ak, s_am))}, ((0, k, 1), b_layout, None)  # (A row-major: A^T's transpose)
    if aligned is None or tile != 128:
        return None
    pack_a, pack_b = aligned[0][0] == "k", aligned[0][1] == "k"
    if not (pack_a or pack_b):
        return None
    a2 = (0, 1, m) if pack_a else a_layout
    b2 = (0, n, 1) if pack_b else b_layout
    repacked = mg.aligned_tiles(dtype, tile, a2, b2, batch, m, n, k, local_bytes)
    if repacked is None or repacked[0] != "mn":
        return None
    packs = {}
    if pack_a:  # A (m x k) read along k: its transpose, k x m
        packs[0] = (m, k, a_layout)
    if pack_b:  # B (k x n) read along k is B^T (n x k) row-major: its transpose, k x n
        off, s_bk, s_bn = b_layout
        packs[1] = (n, k, (off, s_bn, s_bk))
    return packs, (a2, b2, repacked)
