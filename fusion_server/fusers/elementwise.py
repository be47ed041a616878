"""The element-wise fuser and the plan that runs a fused element-wise block.

A block is a run of element-wise ops over one output shape. Its inputs are tensors that
already exist (any layout that broadcasts to the shape) or values computed earlier in the
block. Only values still needed after the block (a live handle, a later reader, a view)
are written; the rest stay in registers, and ops nobody needs are not computed.
"""

from __future__ import annotations

import logging

from ..codegen import elementwise as cg
from ..codegen import signature as sig
from ..codegen.expressions import needs_scalar_code
from ..codegen.layout import broadcast_strides, classify, collapse
from ..context import BlockContext
from ..errors import TensorFailedError, after_failed_input
from ..handles import FAILED, PENDING, Entry
from ..ir import ElementwiseOp, OperationIr, outputs_of, size_of, tensor_inputs
from ..plans import PlanRejected
from .base import LimitedFuser
from .trace import bind_slots, index_type, relative_slots, spec_index_value
from .values import alias_slots, flat_alias, flat_readable, inblock_reads, liveness, needed_values

log = logging.getLogger("fusion_server")

class ElementwiseFuser(LimitedFuser):
    """Claims consecutive element-wise ops with one output shape, within the limits."""

    name = "elementwise"

    def reset(self) -> None:
        self.ops: list[ElementwiseOp] = []
        self.shape: tuple[int, ...] | None = None  # the first op's
        self.size = 0  # elements of every op's shape
        # The shape whose coordinates the kernel computes: that of the ops with an input
        # that is not read at the flat index (broadcast, strided). None while there is none.
        self.coords: tuple[int, ...] | None = None
        self.values: set[int] = set()  # ids computed in the block
        self.aliases: set[int] = set()  # ids of flat aliases of block values (see flat_alias)
        self.inputs: set[int] = set()  # ids read from outside the block
        self.n_scalars = 0
        self.meta = False
        self.outputs_bound = 0  # upper bound on values that must be written
        # Whether every op so far computes one value from one-element inputs: such a block
        # can grow to a bigger shape, each work-item computing the value again.
        self.all_single = True
        super().reset()

    def score(self) -> int:
        return len(self.ops)

    def _count_outputs(self, ctx: BlockContext) -> int:
        entries = ctx.live_values()  # the count looks at which values are still alive
        reads: dict[int, int] = {}
        for op in self.ops:
            for operand in op.inputs:
                if type(operand) is int:
                    reads[operand] = reads.get(operand, 0) + 1
        count = 0
        for tid in self.values:
            e = entries[tid]
            if e.alive or e.readers > reads.get(tid, 0) or e.storage.refs > 1:
                count += 1  # (counts a value read through a flat alias: an upper bound)
        return count

    def offer(self, op: OperationIr, ctx: BlockContext) -> bool:
        if self.closed:
            return False
        if type(op) is not ElementwiseOp:
            return self._close(f"{type(op).__name__} is not element-wise")
        shape = op.out.shape
        ops = self.ops
        size = self.size
        entries = ctx.entries
        single = size_of(shape) == 1 and _single_value(op, entries)
        grows = False
        if ops:
            if shape != self.shape:
                size = size_of(shape)
                if size != self.size:
                    if single:  # a value broadcast to the block (max(b) - min(b)): computed at every element
                        size = self.size
                    elif self.size == 1 and self.all_single:
                        grows = True  # the block so far is such values: it takes this op's shape
                    else:
                        return self._close(f"shape {shape} differs in size from the block's {self.shape}")
            if len(ops) >= self.max_ops:
                return self._close(f"max ops per kernel ({self.max_ops}) reached")
        else:
            size = size_of(shape)
        values, inputs, aliases = self.values, self.inputs, self.aliases
        new_ids: list[int] = []
        new_aliases: list[int] = []
        new_scalars = 0
        meta = self.meta
        coords = False  # whether this op reads an input at coordinates of its shape
        for operand in op.inputs:
            if type(operand) is int:
                if operand in values or operand in aliases or operand in new_aliases:
                    continue
                entry = entries[operand]
                if operand in inputs or operand in new_ids:
                    coords = coords or not flat_readable(entry, size)
                    continue
                if entry.storage.status == PENDING:
                    # Written by this block (other streams' writers were flushed at register),
                    # but read through another layout: a view of an in-block value.
                    # (Rare: the map of the block's storages is made here, off the hot path.)
                    storages = {id(entries[o.out.id].storage): o.out.id for o in ops if o.out.id in entries}
                    if flat_alias(entry, storages, entries) is None:
                        return self._close("reads a view of a value computed in this block, "
                                           "in another element order")
                    new_aliases.append(operand)
                    continue
                new_ids.append(operand)
                if not meta and not (entry.contiguous and entry.ir.shape == shape):
                    meta = True
                coords = coords or not flat_readable(entry, size)
            else:
                new_scalars += 1
        if coords and self.coords is not None and shape != self.coords:
            return self._close(f"reads at coordinates of {shape}, the block's are {self.coords}")
        # n, the metadata buffer, inputs, scalars, outputs.
        fixed = 1 + meta + len(inputs) + len(new_ids) + self.n_scalars + new_scalars
        if ops and fixed + self.outputs_bound + 1 > self.max_bindings:
            self.outputs_bound = self._count_outputs(ctx)
            if fixed + self.outputs_bound + 1 > self.max_bindings:
                # (A lone op always runs, whatever it needs.)
                return self._close(f"binding limit ({self.max_bindings}) reached")
        ops.append(op)
        if self.shape is None or grows:
            self.shape = shape
            self.size = size
        self.all_single = self.all_single and single
        if coords:
            self.coords = shape
        values.add(op.out.id)
        if new_ids:
            inputs.update(new_ids)
        if new_aliases:
            aliases.update(new_aliases)
        self.n_scalars += new_scalars
        self.meta = meta
        self.outputs_bound += 1
        return True

    def finish(self, ctx: BlockContext) -> ElementwisePlan:
        return ElementwisePlan(list(self.ops), self.max_bindings)

    def replay(self, ops: list[ElementwiseOp], cache: dict) -> ElementwisePlan:
        """The plan for a stored block, without offering its ops again: the store's
        signatures fix everything the rules look at but the binding count, which the
        plan checks (and rejects the replay when it is over)."""
        return ElementwisePlan(ops, self.max_bindings, replayed=True, cache=cache)


def _single_value(op: ElementwiseOp, entries: dict) -> bool:
    """Whether `op` computes one value from inputs of one element (no flat index)."""
    if op.name == "iota":
        return False
    for t in op.inputs:
        if type(t) is int:
            e = entries.get(t)
            if e is None or size_of(e.ir.shape) != 1:
                return False
    return True


class ElementwisePlan:
    """One fused kernel over a block of element-wise ops.

    `cache` is the plan-store node's dict when the block recurs: what the block's
    structure alone decides (which ops run, the trace, where inputs and scalars sit
    among the operands, the built kernel per layout) is derived once and reused.
    """

    def __init__(self, ops: list[ElementwiseOp], max_bindings: int, replayed: bool = False,
                 cache: dict | None = None):
        self.ops = ops
        self.max_bindings = max_bindings
        self.replayed = replayed  # from the plan store: no fuser has checked the limits
        self.cache = cache

    def _recipe(self, entries: dict, scalar_exprs: set) -> _Recipe:
        ops, cache = self.ops, self.cache
        if cache is None:
            slots = alias_slots(ops, entries)
            aliases = {ops[j].inputs[s]: target for j, s, target in slots} if slots else None
            return _Recipe(ops, needed_values(ops, entries, None, aliases), scalar_exprs, aliases)
        reads = cache.get("reads")
        if reads is None:
            reads = inblock_reads(ops)
            cache["aliases"] = alias_slots(ops, entries)  # the store's signatures fix them
            cache["reads"] = reads  # last: the node is shared, and an interrupt may fall in between
        slots = cache["aliases"]
        aliases = {ops[j].inputs[s]: target for j, s, target in slots} if slots else None
        needed = needed_values(ops, entries, reads, aliases)
        key = tuple(sorted(needed))
        recipe = cache.get(key)
        if recipe is None:
            recipe = cache[key] = _Recipe(ops, needed, scalar_exprs, aliases)
        return recipe

    def execute(self, ctx: BlockContext) -> None:
        ops = self.ops
        entries = ctx.entries
        recipe = self._recipe(entries, ctx.scalar_exprs)
        if not recipe.trace:
            return
        in_entries, scalars = bind_slots(ops, recipe.in_slots, recipe.scalar_slots, entries)
        out_entries = [entries[ops[j].out.id] for j in recipe.needed]
        if any(e.storage.status == FAILED for e in in_entries):
            run_around_failures(ctx, ops)
            return

        # Every op has as many elements, or one value broadcast to the block's; inputs
        # read at coordinates are read by ops of one shape (the fuser's rule), whose
        # coordinates the kernel computes.
        shape = ops[recipe.big].out.shape
        n = size_of(shape)
        classes: list[str] = []
        strides_of: list[tuple[int, ...]] = []
        for (j, _), e in zip(recipe.in_slots, in_entries):
            op_shape = ops[j].out.shape
            if j in recipe.singles:
                op_shape = shape  # its inputs (one element each) are read broadcast
            if e.contiguous and e.ir.shape == op_shape:
                classes.append("contig")
                strides_of.append(())
                continue
            bs = broadcast_strides(e.ir.shape, e.strides, op_shape)
            cls = classify(op_shape, bs, e.offset)
            if cls == "strided":
                shape = op_shape
            classes.append(cls)
            strides_of.append(bs)
        strided = [k for k, c in enumerate(classes) if c == "strided"]
        rank = 0
        dims: tuple[int, ...] = ()
        layouts = [(e.offset, ()) for e in in_entries]
        width = 1 if recipe.scalar_code else ctx.widths.for_dtypes(
            recipe.dtypes.union([e.ir.dtype for e in in_entries]))
        if strided:
            dims, sets = collapse(shape, [strides_of[k] for k in strided])
            rank = len(dims)
            for k, st in zip(strided, sets):
                layouts[k] = (in_entries[k].offset, st)
                if st[-1] == 1:
                    classes[k] = "strided1"
                elif st[-1] == 0:
                    classes[k] = "strided0"
                else:
                    width = 1
            if dims[-1] % width:
                width = 1
        index = index_type(max((n, *(e.storage.nbytes // e.ir.dtype.itemsize for e in in_entries))))
        key = (tuple(classes), width, index, rank)
        built = recipe.kernels.get(key)
        if built is None:
            spec = cg.KernelSpec(
                ops=recipe.trace,
                inputs=tuple((e.ir.dtype, c) for e, c in zip(in_entries, classes)),
                scalars=recipe.scalar_dtypes,
                outputs=recipe.outputs,
                width=width,
                index=index,
                rank=rank,
                single=recipe.single_outputs,
            )
            params = cg.parameters(spec)
            bindings = len(params)
            what = f"element-wise block ({', '.join(recipe.names)})"
            if bindings > self.max_bindings and len(recipe.live_ops) > 1:
                over = f"needs {bindings} bindings, over the limit of {self.max_bindings}"
                if self.replayed:  # more values alive than when it was stored: explore instead
                    raise PlanRejected(over)
                ctx.fail([e.storage for e in out_entries], TensorFailedError(f"{what} failed to build: {over}"))
                return
            # (its scalar variant if the vector build failed: the same parameters, one element each)
            kernel_spec = ctx.build_or_fail(spec, what, out_entries)
            if kernel_spec is None:
                return
            built = recipe.kernels[key] = (kernel_spec.spec, kernel_spec.kernel, params)
        spec, kernel, params = built
        in_buffers = [e.storage.buffer for e in in_entries]  # before any is donated
        if None in in_buffers:  # a bug, never a crash on the device: fail the block instead
            raise RuntimeError("an input of the block has no buffer")
        try:
            donors = _donors(ctx, ops, in_entries, classes)
            out_buffers = [_take_donor(ctx, donors, e) or ctx.allocate(e.storage) for e in out_entries]
        except Exception as exc:
            ctx.fail([e.storage for e in out_entries], exc)
            return
        if n:
            meta = [ctx.metadata_buffer(cg.metadata(spec, dims, layouts))] if cg.has_metadata(spec) else []
            args = sig.bind(params, size=[spec_index_value(index, n)], meta=meta, out=out_buffers,
                            scalar=scalars, input=in_buffers)
            ctx.launch_items(kernel, (n + spec.width - 1) // spec.width, args, "elementwise", recipe.names, len(args))
        ctx.mark_ready([e.storage for e in out_entries])


class _Recipe:
    """What a block's structure and its set of needed values decide, whatever the ids,
    sizes and scalar values: the ops that run, the trace, the operand slots of inputs and
    scalars, the values written, and the kernels built for it per layout."""

    __slots__ = ("needed", "live_ops", "names", "trace", "in_slots", "scalar_slots", "scalar_dtypes",
                 "outputs", "scalar_code", "dtypes", "kernels", "big", "singles", "single_outputs")

    def __init__(self, ops: list[ElementwiseOp], needed: set[int], scalar_exprs: set,
                 aliases: dict[int, int] | None = None):
        live = liveness(ops, needed, aliases)
        self.needed = sorted(needed)
        self.live_ops = [op for j, op in enumerate(ops) if live[j]]
        self.names = [op.name for op in self.live_ops]
        trace, self.in_slots, self.scalar_slots, scalar_dtypes, vmap = relative_slots(ops, live, (), aliases)
        self.trace = tuple(trace)
        self.scalar_dtypes = tuple(scalar_dtypes)
        self.outputs = tuple(vmap[j] for j in self.needed)
        self.scalar_code = any(needs_scalar_code(t.name, t.compute) or (t.expr, t.compute) in scalar_exprs
                               for t in trace)
        self.dtypes = frozenset(cg.dtypes_of(trace, self.scalar_dtypes))  # (inputs' are added per launch)
        # The block's shape (its biggest op's), and the ops that compute one value broadcast
        # to it (their outputs are written once).
        # (an op's position, not its shape: a recipe serves every block of its plan-store
        # node, whose sizes differ)
        self.big = max(range(len(ops)), key=lambda j: size_of(ops[j].out.shape))
        big = size_of(ops[self.big].out.shape)
        self.singles = frozenset(j for j, op in enumerate(ops) if big > 1 and size_of(op.out.shape) == 1)
        self.single_outputs = tuple(m for m, j in enumerate(self.needed) if j in self.singles)
        self.kernels: dict[tuple, tuple] = {}


def run_around_failures(ctx: BlockContext, ops: list) -> None:
    """Some input of a block failed: fail the values that depend on it, and compute the
    rest (ops that share a kernel do not share a failure): element-wise runs as fused
    blocks, any other op as its own plan, in order."""
    entries = ctx.entries
    bad = {id(e.storage) for op in ops for t in tensor_inputs(op)
           if (e := entries.get(t)) is not None and e.storage.status == FAILED}
    cause = next((entries[t] for op in ops for t in tensor_inputs(op)
                  if t in entries and id(entries[t].storage) in bad), None)
    clean, tainted, names = [], [], []
    for op in ops:
        if any(t in entries and id(entries[t].storage) in bad for t in tensor_inputs(op)):
            names.append(getattr(op, "name", type(op).__name__))
            for o in outputs_of(op):
                out = entries.get(o.id)
                if out is not None:
                    bad.add(id(out.storage))
                    tainted.append(out)
        else:
            clean.append(op)
    if cause is not None:
        err = after_failed_input(f"block ({', '.join(names)})", cause.ir.id, cause.storage.error)
        ctx.fail([e.storage for e in tainted], err)
    run: list[ElementwiseOp] = []
    for op in [*clean, None]:
        if type(op) is ElementwiseOp:
            run.append(op)
            continue
        if run:
            ElementwisePlan(run, ctx.max_bindings).execute(ctx)
            run = []
        if op is not None:
            ctx.single_plan(op).execute(ctx)


def _donors(ctx: BlockContext, ops: list[ElementwiseOp], in_entries: list[Entry], classes: list[str]) -> list[Entry]:
    """Inputs whose buffer dies with this block and is read at each element's own index:
    an output may take the buffer over instead of allocating (in-place reuse)."""
    donors = []
    for e, cls in zip(in_entries, classes):
        st = e.storage
        if cls != "contig" or e.alive or st.refs != 1 or st.pins or not st.owned or st.buffer is None \
                or not ctx.may_donate(st):
            continue
        reads_here = sum(1 for op in ops for i in op.inputs if i == e.ir.id)
        if e.readers == reads_here:  # nobody after this block reads it
            donors.append(e)
    return donors


def _take_donor(ctx: BlockContext, donors: list[Entry], out: Entry):
    """The buffer of a donor matching `out` in size and element size, moved to `out`."""
    for k, donor in enumerate(donors):
        st = donor.storage
        if st.nbytes == out.storage.nbytes and donor.ir.dtype.itemsize == out.ir.dtype.itemsize:
            del donors[k]
            # Same size: the pool's accounting holds; the donor hands nothing back later.
            out.storage.buffer, st.buffer = st.buffer, None
            ctx.counters["inplace_reuses"] += 1
            return out.storage.buffer
    return None


