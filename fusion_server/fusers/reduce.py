"""The reduction fuser: element-wise prologue, one reduction, element-wise epilogue.

`clients.sum(clients.exp(a * b + c), axis=-1) * 2` is one kernel: the prologue ops are
computed while reading the reduction's input, the epilogue ops before writing. The fuser
competes with the element-wise one: it scores nothing until it holds a reduction, then
covers more ops than the element-wise fuser (which stops at the reduction).
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from ..codegen import elementwise as cg
from ..codegen import epilogue as ep
from ..codegen import reduce as rg
from ..codegen import signature as sig
from ..codegen.layout import broadcast_strides, collapse
from ..context import BlockContext
from ..handles import FAILED, PENDING
from ..ir import ElementwiseOp, OperationIr, ReduceOp, contiguous_strides, size_of
from .base import LimitedFuser, uses_flat_index
from .elementwise import run_around_failures
from .trace import bind_slots, index_type, needs_scalar_trace, relative_form, relative_slots
from .values import epilogue_outputs, flat_alias, flat_readable, liveness, needed_values

# The columns strategy's vectors per work-item, at most: their accumulators stay in a
# private array (32 vectors of 16 floats: 2 KiB).
MAX_COLUMN_VECTORS = 32
# Where the reduced axis is long enough to be cut into chunks of at least
# CPU_COLUMN_CHUNK_MIN rows (from COLUMN_SPLIT_MIN elements on), the columns strategy
# takes strips of up to MAX_CHUNKED_COLUMN_VECTORS vectors instead (16 KiB of float
# accumulators: whole rows of a 4096-wide matrix, read one after another) and as many
# chunks as give every core four work-items; a second pass sums the chunks. A sum down
# the columns of 4096^2 float32 on 2 Zen 4 cores took 7.4 ms of kernel time (Intel's CPU
# runtime) and 10.7 (PoCL 3.0) in 8 or 16 strips of every row, numpy 5.0 and 6.6.
MAX_CHUNKED_COLUMN_VECTORS = 256
CPU_COLUMN_CHUNK_MIN = 64
# A full reduction is cut into chunks of at least this many elements, reduced in parallel
# (see chunks_for): one work-group had summed 2^24 floats on an H200 at 16 GB/s, and one
# work-item at 8 GB/s on 16 CPU cores.
FULL_CHUNK_MIN = {"GPU": 16 * 256}
FULL_CHUNK_MIN_OTHER = 1 << 15
# Column reductions on GPUs: work-items wanted per compute unit, and the fewest rows a
# chunk takes (4096 columns of 4096 rows: 4096 work-items read at 0.14 of the limit).
COLUMN_ITEMS_PER_CU = 2048
COLUMN_CHUNK_MIN = 16
COLUMN_SPLIT_MIN = 1 << 16  # elements: below, a second launch costs more than it saves


class ReduceFuser(LimitedFuser):
    """Claims an element-wise prologue, one reduction of one of its values, and an
    element-wise epilogue over the reduction's output shape.

    Prologue ops may have different shapes of one element count, as in the element-wise
    fuser: the kernel computes every prologue value at the same position of the
    reduction's input, and reads a flat alias of a prologue value (see flat_alias), the
    reduction's input included, from the value's register. An op reading an input at
    coordinates (broadcast, strided) must have the reduction input's shape, since the
    kernel addresses inputs by strides over that shape. Everything is checked when the
    reduction comes (the plan store replays a decision by offering its ops again).
    """

    name = "reduce"

    def reset(self) -> None:
        self.prologue: list[ElementwiseOp] = []
        self.size = 0  # elements of every prologue op's shape
        self.reduce: ReduceOp | None = None
        self.epilogue: list[ElementwiseOp] = []
        self.values: set[int] = set()  # prologue values
        self.aliases: set[int] = set()  # flat aliases of prologue values read in the block
        self.epi_values: set[int] = set()
        self.inputs: set[int] = set()
        self.n_scalars = 0
        self.writes_bound = 0  # prologue values that may have to be written too
        super().reset()

    def score(self) -> int:
        if self.reduce is None:
            return 0
        return len(self.prologue) + 1 + len(self.epilogue)

    def _fits(self, op: ElementwiseOp, ctx: BlockContext, inside: set[int]) -> bool:
        """Whether `op`'s tensor inputs are block values (or, in `inside`, their flat
        aliases) or existing tensors (not views of block values), and the block stays
        within the binding and op limits."""
        new = set()
        scalars = 0
        for operand in op.inputs:
            if type(operand) is int:
                if operand in inside or operand in self.inputs:
                    continue
                if ctx.entries[operand].storage.status == PENDING:
                    return False
                new.add(operand)
            else:
                scalars += 1
        ops = len(self.prologue) + len(self.epilogue) + (self.reduce is not None)
        outputs = len(self.epilogue) + 1 + self.writes_bound
        bindings = rg.FIXED_BINDINGS + len(self.inputs) + len(new) + self.n_scalars + scalars + outputs
        if ops >= self.max_ops or bindings > self.max_bindings:
            return False
        self.inputs |= new
        self.n_scalars += scalars
        return True

    def offer(self, op: OperationIr, ctx: BlockContext) -> bool:
        if self.closed:
            return False
        if self.reduce is None:
            if type(op) is ElementwiseOp:
                # Cheap while no reduction is in sight: the prologue is checked when one comes.
                prologue = self.prologue
                if not prologue:
                    self.size = size_of(op.out.shape)
                elif len(prologue) >= self.max_ops:
                    return self._close("prologue is too long")
                elif op.out.shape != prologue[-1].out.shape and size_of(op.out.shape) != self.size:
                    return self._close(f"prologue shape {op.out.shape} differs in size from {prologue[0].out.shape}")
                prologue.append(op)
                return True
            if type(op) is ReduceOp:
                return self._take_reduce(op, ctx)
            return self._close(f"{type(op).__name__} before any reduction")
        if type(op) is not ElementwiseOp or op.out.shape != self.reduce.out.shape:
            return self._close("epilogue ends")
        if any(type(i) is int and i in self.values for i in op.inputs):
            return self._close("epilogue reads a prologue value")
        if uses_flat_index(op):
            return self._close("epilogue uses the element's flat index")
        if not self._fits(op, ctx, self.epi_values):
            return self._close("epilogue input or limits")
        self.epilogue.append(op)
        self.epi_values.add(op.out.id)
        return True

    def _take_reduce(self, op: ReduceOp, ctx: BlockContext) -> bool:
        entries = ctx.live_values()  # the bound below looks at which values are still alive
        prologue = self.prologue
        if not prologue:
            if entries[op.input].storage.status == PENDING:
                return self._close("reduction of a view of a pending value")
            self.inputs.add(op.input)
            self.reduce = op
            self.epi_values.add(op.out.id)
            return True
        if any(uses_flat_index(p) for p in prologue):
            return self._close("prologue uses the element's flat index")
        found = prologue_reads(prologue, op.input, entries)
        if isinstance(found, str):
            return self._close(found)
        aliases, reads, _ = found
        # Inputs read at coordinates are addressed by strides over the reduction's input
        # shape: only ops of that shape may read them.
        in_shape = entries[op.input].ir.shape
        size = self.size
        values = self.values
        values.update(p.out.id for p in prologue)
        for p in prologue:
            if p.out.shape == in_shape:
                continue
            for operand in p.inputs:
                if (type(operand) is int and operand not in values and operand not in aliases
                        and not flat_readable(entries[operand], size)):
                    return self._close(f"prologue reads at coordinates of {p.out.shape}, "
                                       f"the reduction's input is {in_shape}")
        self.aliases = set(aliases)
        # Liveness only decreases from here, so this bound holds when the block runs.
        self.writes_bound = len(prologue_needed(prologue, op.input, entries, aliases, reads))
        inside = values | self.aliases
        for p in prologue:
            if not self._fits(p, ctx, inside):
                return self._close("prologue input or limits")
        self.reduce = op
        self.epi_values.add(op.out.id)
        return True

    def finish(self, ctx: BlockContext) -> ReducePlan:
        assert self.reduce is not None
        return ReducePlan(list(self.prologue), self.reduce, list(self.epilogue), self.max_bindings)


def prologue_reads(prologue: list[ElementwiseOp], red_input: int,
                   entries: dict) -> tuple[dict[int, int], list[int], int] | str:
    """How the block reads its prologue values: (the flat aliases of them (see flat_alias)
    read by prologue ops or by the reduction, each -> the position of the op computing its
    value; per op, the block's direct reads of its value, the reduction's included; the
    position of the value reduced). Or, as a string, why the block cannot be one kernel:
    a pending tensor read in another element order, or a reduction of no prologue value."""
    positions: dict[int, int] = {}  # prologue value -> its op
    aliases: dict[int, int] = {}
    reads = [0] * len(prologue)

    def storages(upto: int) -> dict[int, int]:  # id(storage) of a value computed before op `upto` -> the value
        return {id(entries[q.out.id].storage): q.out.id for q in prologue[:upto]}

    for j, p in enumerate(prologue):
        for operand in p.inputs:
            if type(operand) is int:
                k = positions.get(operand)
                if k is not None:
                    reads[k] += 1
                elif operand not in aliases:
                    e = entries[operand]
                    if e.storage.status == PENDING:  # only this block writes it: a view of a value
                        tid = flat_alias(e, storages(j), entries)
                        if tid is None:
                            return "prologue reads a view of a prologue value in another element order"
                        aliases[operand] = positions[tid]
        positions[p.out.id] = j
    red_pos = positions.get(red_input)
    if red_pos is not None:
        reads[red_pos] += 1
    else:
        e = entries[red_input]
        if e.storage.status != PENDING:
            return "the reduction does not read the prologue"
        tid = flat_alias(e, storages(len(prologue)), entries)
        if tid is None:
            return "reduction of a view of a prologue value in another element order"
        red_pos = aliases[red_input] = positions[tid]
    return aliases, reads, red_pos


def prologue_needed(prologue: list[ElementwiseOp], red_input: int, entries: dict, aliases: dict[int, int],
                    reads: list[int]) -> set[int]:
    """Positions of the prologue values that must be written (see needed_values): the
    reduction's read is one in the block, so the value reduced, or its flat alias, is
    written only if it lives on after the block."""
    if not aliases:
        return needed_values(prologue, entries, reads)
    return needed_values(prologue, entries, reads, aliases, {red_input: 1} if red_input in aliases else None)


class ReducePlan:
    """One kernel: the prologue computed as the input is read, the reduction, the epilogue."""

    def __init__(self, prologue: list[ElementwiseOp], reduce: ReduceOp, epilogue: list[ElementwiseOp],
                 max_bindings: int):
        self.prologue = prologue
        self.reduce = reduce
        self.epilogue = epilogue
        self.max_bindings = max_bindings
        self.ops: list[OperationIr] = [*prologue, reduce, *epilogue]

    def execute(self, ctx: BlockContext) -> None:
        entries = ctx.entries
        red = self.reduce
        prologue = self.prologue
        in_shape = entries[red.input].ir.shape
        # Prologue trace: the value reduced, plus any prologue value needed elsewhere,
        # which the kernel writes as it goes (each input element is visited once).
        writes: tuple[int, ...] = ()
        write_entries: list = []
        if prologue:
            found = prologue_reads(prologue, red.input, entries)
            if isinstance(found, str):  # the fuser checked this: a bug, never wrong values
                raise RuntimeError(f"reduction block cannot run as one kernel: {found}")
            aliases, reads, red_pos = found
            pro_needed = prologue_needed(prologue, red.input, entries, aliases, reads)
            live = liveness(prologue, pro_needed | {red_pos}, aliases or None)
            trace, in_slots, scalar_slots, pro_sdt, vmap = relative_slots(prologue, live, (), aliases or None)
            pro_entries, pro_scalars = bind_slots(prologue, in_slots, scalar_slots, entries)
            pro_outputs = (vmap[red_pos],)
            writes = tuple(vmap[j] for j in sorted(pro_needed))
            write_entries = [entries[prologue[j].out.id] for j in sorted(pro_needed)]
        else:
            trace, pro_entries, pro_scalars, pro_sdt, pro_outputs = [], [entries[red.input]], [], [], ()
        # Epilogue trace: input 0 is the reduction's result.
        epi = self.epilogue
        epi_needed = needed_values(epi, entries) if epi else set()
        red_entry = entries[red.out.id]
        epi_live = liveness(epi, epi_needed) if epi else []
        epi_trace, epi_entries, epi_scalars, epi_sdt, epi_vmap = relative_form(
            epi, epi_live, entries, first_inputs=(red.out.id,)
        )
        outputs, out_entries = epilogue_outputs(red.out.id, epi, epi_needed, epi_vmap, entries)
        if not out_entries and not write_entries:
            return
        all_ops = [*prologue, red, *epi]
        if any(e.storage.status == FAILED for e in pro_entries + epi_entries[1:]):
            run_around_failures(ctx, all_ops)
            return

        # Iteration space: the input shape split into kept and reduced dimensions.
        axes = red.axes
        kept_axes = [d for d in range(len(in_shape)) if d not in axes]
        kept_shape = tuple(in_shape[d] for d in kept_axes)
        red_shape = tuple(in_shape[d] for d in axes)
        nout, nred = size_of(kept_shape), size_of(red_shape)
        # Every prologue op has as many elements as in_shape, and computes its value at the
        # same position: an input read at the flat index has its strides over in_shape
        # (written values likewise); one read at coordinates is read by ops of in_shape
        # alone (the fuser's rule).
        flat = contiguous_strides(in_shape)
        size = size_of(in_shape)
        stride_sets = []
        for e in pro_entries:
            st = flat_strides(e, size, flat)
            stride_sets.append(broadcast_strides(e.ir.shape, e.strides, in_shape) if st is None else st)
        stride_sets += [flat for _ in write_entries]
        kdims, kept_sets = collapse(kept_shape, [tuple(s[d] for d in kept_axes) for s in stride_sets])
        rdims, red_sets = collapse(red_shape, [tuple(s[d] for d in axes) for s in stride_sets])
        kept_rank = 0 if nout <= 1 else len(kdims)
        out_shape = red.out.shape
        epi_classes, epi_layouts, out_rank = ep.layouts(red_entry.ir.dtype, epi_entries[1:], out_shape)
        gpu = ctx.info.kind == "GPU"
        if nout == 0 or nred == 0:
            nred = 0
        # Down the columns (a contiguous kept axis, a strided reduced one), a GPU reads
        # consecutive columns in consecutive work-items ("loop"): a work-group per column
        # read one float per row at 0.14 of the bandwidth limit.
        n_pro = len(pro_entries)
        down_columns = (kept_rank >= 1 and all(ks[-1] in (0, 1) for ks in kept_sets[:n_pro])
                        and any(rs[-1] not in (0, 1) for rs in red_sets[:n_pro]))
        strategy = ctx.reduce_strategy or ("group" if gpu and nred >= rg.GROUP_SIZE and not down_columns
                                           else "loop")
        # The prologue may read no tensor at all (a fill): max() of one tuple, never of one int.
        largest = max((nout * max(nred, 1), *(e.storage.nbytes // e.ir.dtype.itemsize for e in pro_entries)))
        index = index_type(largest)
        # Vector steps along the reduced axis where it is one contiguous (or broadcast) run.
        n_in = len(pro_entries)
        # The prologue's width; a sum or product that widens (float32 into float64) keeps
        # it with several accumulators when the wider size qualified narrower.
        width = ctx.widths.for_dtypes(cg.dtypes_of(trace, tuple(pro_sdt)).union(
            [e.ir.dtype for e in pro_entries]) or {red.acc})
        acc_width = min(width, ctx.widths.of_size(red.acc.itemsize))
        if acc_width < width and red.name not in ("sum", "prod"):
            width = acc_width
        vectorize = (
            strategy == "loop" and width > 1 and len(rdims) == 1
            # (argmax/argmin keep lane indices in the value's integer width: 1- and 2-byte
            # values reduce one element at a time)
            and (red.name not in ("argmax", "argmin") or (index == "int" and red.acc.itemsize == 4)
                 or red.acc.itemsize == 8)
            and not dt.is_bool(red.acc)
            and all(st[0] in (0, 1) for st in red_sets[:n_in]) and all(st[0] == 1 for st in red_sets[n_in:])
            and not needs_scalar_trace(trace, ctx.scalar_exprs)
        )
        # CPUs: a reduction whose one kept axis is contiguous (a sum down the columns)
        # reads vectors across the outputs instead (see codegen/reduce.py, "columns").
        columns = (
            not vectorize and ctx.reduce_strategy in (None, "columns") and strategy != "group"
            and kept_rank == 1 and width > 1 and nout >= width and (strategy == "columns" or not gpu)
            and red.name in ("sum", "prod", "max", "min") and not dt.is_bool(red.acc)
            and all(ks[0] in (0, 1) for ks in kept_sets[:n_in]) and all(ks[0] == 1 for ks in kept_sets[n_in:])
            and not needs_scalar_trace(trace, ctx.scalar_exprs)
        )
        if strategy == "columns" and not columns:
            strategy = "loop"  # (asked for where it does not apply: the loop does it)
        vectors = 1
        column_chunks = 0
        if columns:
            strategy = "columns"
            # Several vectors per work-item, as far as every core still gets four of them;
            # or wide strips over chunks of the rows (MAX_CHUNKED_COLUMN_VECTORS).
            items = 4 * ctx.info.compute_units
            vectors = max(1, min(MAX_COLUMN_VECTORS, nout // (width * items)))
            vectors = 1 << (vectors.bit_length() - 1)
            wide = min(MAX_CHUNKED_COLUMN_VECTORS, -(-nout // width))
            wide = 1 << (wide.bit_length() - 1)
            groups = -(-nout // (wide * width))
            if nout * nred >= COLUMN_SPLIT_MIN and groups < items:
                column_chunks = min(-(-items // groups), nred // CPU_COLUMN_CHUNK_MIN)
                # (wide strips only in two passes: in one they would leave cores idle)
                if column_chunks >= 2 and indexes_two_passes(index, nout, nred, column_chunks, width):
                    vectors = wide
                else:
                    column_chunks = 0
            classes = tuple((e.ir.dtype, "strided1" if ks[0] == 1 else "strided0")
                            for e, ks in zip(pro_entries, kept_sets[:n_in]))
        elif vectorize:
            classes = tuple((e.ir.dtype, "strided1" if st[0] == 1 else "strided0")
                            for e, st in zip(pro_entries, red_sets[:n_in]))
        else:
            classes = tuple((e.ir.dtype, "strided") for e in pro_entries)
            width = 1
        spec = rg.ReduceSpec(
            kind=red.name,
            acc=red.acc,
            prologue=cg.KernelSpec(tuple(trace), classes, tuple(pro_sdt), pro_outputs, width, index, 0),
            epilogue=cg.KernelSpec(tuple(epi_trace), tuple(epi_classes), tuple(epi_sdt), tuple(outputs),
                                   1, index, out_rank),
            kept_rank=kept_rank,
            red_rank=len(rdims),
            strategy=strategy,
            index=index,
            out_rank=out_rank,
            writes=writes,
            width=width,
            acc_width=acc_width if vectorize and 1 < width and acc_width < width else 0,
            vectors=vectors,
        )
        meta_inputs = [(e.offset, ks, rs) for e, ks, rs in zip(pro_entries, kept_sets, red_sets)]
        meta_writes = list(zip(kept_sets[n_in:], red_sets[n_in:]))
        chunks = column_chunks or chunks_for(ctx.info, nout, nred, red.name, strategy, down_columns)
        if chunks and indexes_two_passes(index, nout, nred, chunks, width):
            self._run_in_two_passes(ctx, spec, chunks, kdims, rdims, meta_inputs=meta_inputs,
                                    meta_writes=meta_writes, out_shape=out_shape, epi_layouts=epi_layouts,
                                    out_entries=out_entries, write_entries=write_entries,
                                    pro_entries=pro_entries, epi_entries=epi_entries, pro_scalars=pro_scalars,
                                    epi_scalars=epi_scalars, names=[op.name for op in all_ops], nred=nred)
            return
        meta = rg.metadata(spec, kdims, rdims, meta_inputs, meta_writes, out_shape, epi_layouts)
        built = ctx.build_or_fail(spec, f"reduction block ({red.name})", out_entries + write_entries)
        if built is None:
            return
        kernel = built.kernel
        buffers = [ctx.allocate(e.storage) for e in out_entries + write_entries]
        if nout:
            idx = np.int32 if index == "int" else np.int64
            args = sig.bind(rg.parameters(spec), size=[idx(nout), idx(nred)], meta=[ctx.metadata_buffer(meta)],
                            out=buffers, scalar=[*pro_scalars, *epi_scalars],
                            input=[e.storage.buffer for e in pro_entries + epi_entries[1:]])
            bindings = len(args)
            names = [op.name for op in all_ops]
            if strategy == "group":
                ctx.launch(kernel, nout * rg.GROUP_SIZE, rg.GROUP_SIZE, args, "reduce", names, bindings)
            elif strategy == "columns":
                ctx.launch_items(kernel, column_strips(built.spec, nout), args, "reduce", names, bindings,
                                 heavy=True)
            else:
                ctx.launch_items(kernel, nout, args, "reduce", names, bindings, heavy=True)
        ctx.mark_ready([e.storage for e in out_entries + write_entries])

    def _run_in_two_passes(self, ctx: BlockContext, spec: rg.ReduceSpec, chunks: int, kdims, rdims, *,
                           meta_inputs, meta_writes, out_shape, epi_layouts, out_entries, write_entries,
                           pro_entries, epi_entries, pro_scalars, epi_scalars, names, nred) -> None:
        """A reduction over many elements into few outputs: the first kernel reduces
        `chunks` equal chunks of each output's elements (the prologue, and the prologue
        values written, as in one pass) into partial results (chunks x outputs); the
        second reduces those and runs the epilogue."""
        acc, index = spec.acc, spec.index
        nout = size_of(kdims) if spec.kept_rank else 1
        first = spec._replace(chunked=True, out_rank=0,
                              epilogue=cg.KernelSpec((), ((acc, "contig"),), (), (-1,), 1, index, 0))
        gpu = ctx.info.kind == "GPU"
        second = spec._replace(
            prologue=cg.KernelSpec((), ((acc, "strided"),), (), (), 1, index, 0), kept_rank=min(1, spec.kept_rank),
            red_rank=1, strategy="group" if gpu and nout == 1 and chunks >= rg.GROUP_SIZE else "loop", writes=(),
            width=1, acc_width=0, vectors=1)
        what = f"reduction block ({spec.kind}, in two passes)"
        built = ctx.build_or_fail(first, what, out_entries + write_entries)
        if built is None:
            return
        built_second = ctx.build_or_fail(second, what, out_entries + write_entries)
        if built_second is None:
            return
        meta1 = rg.metadata(first, kdims, rdims, meta_inputs, meta_writes, out_shape, [])
        kept = (nout,) if second.kept_rank else ()
        meta2 = rg.metadata(second, kept, (chunks,), [(0, (1,) if kept else (), (nout,))], [], out_shape,
                            epi_layouts)
        idx = np.int32 if index == "int" else np.int64
        out_buffers = [ctx.allocate(e.storage) for e in out_entries]
        write_buffers = [ctx.allocate(e.storage) for e in write_entries]
        nbytes = chunks * nout * acc.itemsize
        partials = ctx.pool.alloc(nbytes)
        try:
            args = sig.bind(rg.parameters(first), size=[idx(chunks * nout), idx(nred)],
                            meta=[ctx.metadata_buffer(meta1)],
                            out=[partials, *write_buffers], scalar=list(pro_scalars),
                            input=[e.storage.buffer for e in pro_entries])
            if first.strategy == "group":
                ctx.launch(built.kernel, chunks * nout * rg.GROUP_SIZE, rg.GROUP_SIZE, args, "reduce", names,
                           len(args))
            elif first.strategy == "columns":  # (a strip of outputs per work-item and chunk)
                ctx.launch_items(built.kernel, chunks * column_strips(built.spec, nout), args, "reduce", names,
                                 len(args), heavy=True)
            else:
                ctx.launch_items(built.kernel, chunks * nout, args, "reduce", names, len(args), heavy=True)
            args = sig.bind(rg.parameters(second), size=[idx(nout), idx(chunks)], meta=[ctx.metadata_buffer(meta2)],
                            out=out_buffers, scalar=list(epi_scalars),
                            input=[partials, *(e.storage.buffer for e in epi_entries[1:])])
            if second.strategy == "group":
                ctx.launch(built_second.kernel, rg.GROUP_SIZE, rg.GROUP_SIZE, args, "reduce", names, len(args))
            else:
                ctx.launch_items(built_second.kernel, nout, args, "reduce", names, len(args), heavy=True)
        finally:  # (the in-order queue runs both passes before any later use of the buffer)
            ctx.pool.free(partials, nbytes)
        ctx.mark_ready([e.storage for e in out_entries + write_entries])


def chunks_for(info, nout: int, nred: int, kind: str, strategy: str, down_columns: bool) -> int:
    """How many chunks each output's `nred` elements are cut into, each reduced by a
    work-group or work-item, before a second kernel reduces their results; 0: one kernel.

    - A full reduction (one output): a GPU wants several work-groups per compute unit, a
      CPU a few chunks per core; a chunk is never shorter than FULL_CHUNK_MIN elements.
    - Down the columns on a GPU (a work-item per column): as many chunks as it takes to
      give the device COLUMN_ITEMS_PER_CU work-items per compute unit, of at least
      COLUMN_CHUNK_MIN rows each, from COLUMN_SPLIT_MIN elements on.
    Argmax and argmin keep one kernel: their partial results would need indices too."""
    if kind in ("argmax", "argmin") or nout == 0:
        return 0
    if nout == 1:
        most = info.compute_units * (8 if info.kind == "GPU" else 4)
        chunks = min(most, nred // FULL_CHUNK_MIN.get(info.kind, FULL_CHUNK_MIN_OTHER))
    elif info.kind == "GPU" and down_columns and strategy == "loop" and nout * nred >= COLUMN_SPLIT_MIN:
        chunks = min(info.compute_units * COLUMN_ITEMS_PER_CU // nout, nred // COLUMN_CHUNK_MIN)
        chunks = 1 << (max(chunks, 1).bit_length() - 1)
    else:
        return 0
    return chunks if chunks >= 2 else 0


def indexes_two_passes(index: str, nout: int, nred: int, chunks: int, width: int) -> bool:
    """Whether a first pass of `chunks` chunks (of `width`-aligned lengths) over `nred`
    elements for each of `nout` outputs keeps its positions within the `index` type."""
    return index == "long" or (nred + chunks * width) * nout < 2**31 - 1


def column_strips(spec: rg.ReduceSpec, nout: int) -> int:
    """Work-items of a columns kernel over `nout` outputs (per chunk, in a first pass):
    one per strip of `vectors` x `width` outputs (of the spec built: its scalar
    variant's width is 1)."""
    per_item = spec.width * spec.vectors
    return -(-nout // per_item)


def flat_strides(entry, size: int, flat: tuple[int, ...]) -> tuple[int, ...] | None:
    """Strides over a shape of `size` elements (`flat`: its contiguous strides) of an
    input read at the flat index (see flat_readable), or None if it is not."""
    if not flat_readable(entry, size):
        return None
    return (0,) * len(flat) if size_of(entry.ir.shape) == 1 else flat


__all__ = ["ReduceFuser", "ReducePlan"]

