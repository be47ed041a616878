"""The element-wise fuser and the plan that runs a fused element-wise block.

A block is a run of element-wise ops over one output shape. Its inputs are tensors that
already exist (any layout that broadcasts to the shape) or values computed earlier in the
block. Only values still needed after the block (a live handle, a later reader, a view)
are written; the rest stay in registers, and ops nobody needs are not computed.
"""

from __future__ import annotations

import collections
import logging

from .. import dtypes as dt
from ..codegen import elementwise as cg
from ..codegen import signature as sig
from ..codegen import transpose as tg
from ..codegen.layout import broadcast_strides, classify, collapse
from ..context import BlockContext
from ..errors import TensorFailedError, after_failed_input
from ..handles import FAILED, PENDING, Entry
from ..ir import ElementwiseOp, OperationIr, contiguous_strides, outputs_of, size_of, tensor_inputs
from ..plans import PlanRejected
from .base import LimitedFuser
from .remap import budget_of, composed_layout, cone_cost, cone_of, plan_remap, size_runs, value_target, view_map
from .staging import StagedParts, staged_launch, stages_first
from .staging import note as staged_note
from .trace import bind_slots, index_type, needs_scalar_trace, relative_slots, spec_index_value
from .values import flat_alias, flat_readable, inblock_reads, liveness, needed_values, view_slots

log = logging.getLogger("fusion_server")

# Rows of a strided block shorter than this many vectors run as scalar code rather than
# vectors along each row with a scalar tail (see KernelSpec.rows).
ROW_VECTORS_MIN = 4
# Strided blocks on drivers that run work-items in lanes take a 2-D grid (KernelSpec.grid)
# for rows of this many elements or more; shorter rows keep scalar code over the flat
# index. Kernel us on Intel's CPU runtime, 2 Zen 4 cores, the grid against vectors along
# rows (the choice for rows under 256 before 2026-12-06), two processes each, the box blur
# and the heat step of x * x by (rows, columns) of x: blur (4098, 66) 185, 290 against
# 780, 747; (65538, 66) 2323, 2285 against 15450, 14389; (16386, 18) 360, 349 against 734,
# 625; (8194, 34) 253, 240 against 727, 648; (256, 256) 47, 62 against 571, 795; heat
# (65538, 66) 1829, 1825 against 7970, 8742; (16386, 18) 294, 404 against 646, 511. Rows
# of 3 and 8 went the other way (blur (65538, 5) 1312, 1500 against 588, 921 for scalar
# code; (32770, 10) 918, 1219 against 772, 1211).
GRID_ROW_MIN = 16
# On CPU devices a block input that is a transposed matrix (`m.T`, read down its columns)
# of this many elements or more is first copied row-major by the blocked transpose kernel
# (codegen/transpose.py), and the block reads the copy as a contiguous input. 2048^2
# float32 on 2 Zen 4 cores, kernel us: `m.T + 1` 11706 (PoCL 3.0) and 13347 (Intel's CPU
# runtime) read in place, against numpy's 852 (its result keeps the input's order); see
# BENCHMARKS.md (2026-12-06, before midnight) for the packed figures.
# (Operands all permuted alike, as `m.T + 1`, never get here: the client runs such an op
# in their memory order, see clients/_functions.py, _in_dense_order.)
PACK_TRANSPOSED_MIN = 1 << 16


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
        # Reads of block values through views in another element order, recomputed (see
        # remap.py): view id -> the cone it recomputes; the values computed before the
        # block changed size (readable only through such views), if it did.
        self.remaps: dict[int, tuple[int, ...]] = {}
        self.earlier: set[int] | None = None
        self.remap_bindings = 0
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
        resizes = False  # the block changes size here, if this op reads its values through views only
        if ops:
            if shape != self.shape:
                size = size_of(shape)
                if size != self.size:
                    if not size or not self.size:
                        # (an empty op has no element to compute a value broadcast to the
                        # block, nor may its outputs be written at the block's elements)
                        return self._close(f"shape {shape} and the block's {self.shape}: one is empty")
                    if single:  # a value broadcast to the block (max(b) - min(b)): computed at every element
                        size = self.size
                    elif self.size == 1 and self.all_single:
                        grows = True  # the block so far is such values: it takes this op's shape
                    elif self.earlier is None:
                        resizes = True
                    else:
                        return self._close(f"shape {shape} differs in size from the block's {self.shape}")
            if len(ops) >= self.max_ops:
                return self._close(f"max ops per kernel ({self.max_ops}) reached")
        else:
            size = size_of(shape)
        values, inputs, aliases = self.values, self.inputs, self.aliases
        earlier = values | aliases if resizes else self.earlier
        new_ids: list[int] = []
        new_aliases: list[int] = []
        new_remaps: dict[int, tuple[int, ...]] = {}
        new_scalars = 0
        meta = self.meta
        coords = False  # whether this op reads an input at coordinates of its shape
        for operand in op.inputs:
            if type(operand) is int:
                if operand in values or operand in aliases or operand in new_aliases:
                    if resizes:
                        return self._close(f"shape {shape} differs in size from the block's {self.shape}")
                    if earlier is not None and operand in earlier:
                        return self._close(f"reads a value of shape {entries[operand].ir.shape} other than "
                                           f"through a slice or transpose, in a block of shape {shape}")
                    continue
                if operand in self.remaps or operand in new_remaps:
                    coords = True
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
                    of = flat_alias(entry, storages, entries)
                    if of is not None and not (earlier and of in earlier):
                        new_aliases.append(operand)
                        continue
                    remap = self._remap(entry, ctx)
                    if type(remap) is str:
                        return self._close(remap)
                    new_remaps[operand] = remap
                    coords = True
                    continue
                new_ids.append(operand)
                if not meta and not (entry.contiguous and entry.ir.shape == shape):
                    meta = True
                coords = coords or not flat_readable(entry, size)
            else:
                new_scalars += 1
        if resizes and not new_remaps:
            return self._close(f"shape {shape} differs in size from the block's {self.shape}")
        # Once the block changes size, its earlier ops run in this kernel only as cones recomputed
        # at the coordinates of the ops that read them.
        block_coords = None if resizes else self.coords
        if coords and block_coords is not None and shape != block_coords:
            return self._close(f"reads at coordinates of {shape}, the block's are {block_coords}")
        remap_bindings = self.remap_bindings + sum(self._cone_bindings(cone) for cone in new_remaps.values())
        if new_remaps:
            meta = True
        # n, the metadata buffer, inputs, scalars, outputs.
        fixed = 1 + meta + len(inputs) + len(new_ids) + self.n_scalars + new_scalars + remap_bindings
        if ops and fixed + self.outputs_bound + 1 > self.max_bindings:
            self.outputs_bound = self._count_outputs(ctx)
            if fixed + self.outputs_bound + 1 > self.max_bindings:
                # (A lone op always runs, whatever it needs.)
                return self._close(f"binding limit ({self.max_bindings}) reached")
        ops.append(op)
        if self.shape is None or grows or resizes:
            self.shape = shape
            self.size = size
        if resizes:
            self.earlier = earlier
        self.all_single = self.all_single and single
        self.coords = shape if coords else block_coords
        values.add(op.out.id)
        if new_ids:
            inputs.update(new_ids)
        if new_aliases:
            aliases.update(new_aliases)
        if new_remaps:
            self.remaps.update(new_remaps)
            self.remap_bindings = remap_bindings
        self.n_scalars += new_scalars
        self.meta = meta
        self.outputs_bound += 1
        return True

    def _remap(self, view: Entry, ctx: BlockContext) -> tuple[int, ...] | str:
        """The cone to recompute for the block value `view` reads in another element order,
        or why the block closes instead. (Whether recomputing costs more than writing the
        value and reading it back is the plan's decision, from the whole block: see _Recipe.)"""
        ops, entries = self.ops, ctx.entries
        target = value_target(view, ops, entries)
        if target is None:
            return "reads a view of a value being computed elsewhere"
        return plan_remap(view, target, ops, entries)

    def _cone_bindings(self, cone: tuple[int, ...]) -> int:
        """The arguments a recomputed cone adds: its inputs from outside the block and its scalars."""
        produced = {self.ops[j].out.id for j in cone}
        tensors = set()
        scalars = 0
        for j in cone:
            for operand in self.ops[j].inputs:
                if type(operand) is int:
                    if operand not in produced:
                        tensors.add(operand)
                else:
                    scalars += 1
        return len(tensors) + scalars

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

    def _views(self, entries: dict) -> tuple[list, list]:
        """view_slots of the block (flat aliases, remapped reads), kept in the store's node:
        its signatures fix them."""
        cache = self.cache
        if cache is None:
            return view_slots(self.ops, entries)
        views = cache.get("views")
        if views is None:
            views = cache["views"] = view_slots(self.ops, entries)
        return views

    def _recipe(self, ctx: BlockContext, views: tuple[list, list]) -> _Recipe:
        ops, cache, entries = self.ops, self.cache, ctx.entries
        slots, remap_slots = views
        aliases = {ops[j].inputs[s]: target for j, s, target in slots} if slots else None
        remaps = {ops[j].inputs[s]: target for j, s, target in remap_slots} if remap_slots else None
        counted = {**aliases, **remaps} if aliases and remaps else aliases or remaps
        budget = budget_of(ctx) if remaps else 0
        if remaps and ctx.recompute_budget is None and _transposes_a_large_value(ctx, remap_slots, ops, entries):
            budget = -1
        first = bool(remaps) and stages_first(ctx)
        if cache is None:
            return _Recipe(ops, needed_values(ops, entries, None, counted), ctx.scalar_exprs, aliases, remaps, budget,
                           first)
        reads = cache.get("reads")
        if reads is None:
            reads = cache["reads"] = inblock_reads(ops)
        needed = needed_values(ops, entries, reads, counted)
        key = (*sorted(needed), -1 - budget, first)
        recipe = cache.get(key)
        if recipe is None:
            recipe = cache[key] = _Recipe(ops, needed, ctx.scalar_exprs, aliases, remaps, budget, first)
        return recipe

    def execute(self, ctx: BlockContext) -> None:
        for launch in self._launches(ctx, top=True):
            launch()

    def _launches(self, ctx: BlockContext, top: bool = False) -> list:
        """The block's launches, every kernel built: one, or those of the two parts of a
        block that must write a value its later ops read through views (see _Recipe):
        the ops up to the split run as one kernel, the rest as another that reads what the
        first wrote. Everything is built before anything runs: a build, or a replayed
        plan found not to fit, stops the block, which runs again (or is explored) from
        the start, so nothing may have changed by then. `top`: the block itself, whose
        inputs may have failed (a part's inputs are the block's or the first part's)."""
        ops, entries = self.ops, ctx.entries
        views = self._views(entries)
        recipe = self._recipe(ctx, views)
        parts, unstaged = recipe.staging, recipe.why_unstaged
        if (parts is not None and ctx.stencil_staging) or recipe.split is not None:
            if top and any(entries[t].storage.status == FAILED
                           for op in ops for t in tensor_inputs(op) if t in entries):
                run_around_failures(ctx, ops)
                return []
        if parts is not None and ctx.stencil_staging:
            launch = staged_launch(ctx, ops, parts, self.max_bindings)
            if launch is None:
                return []
            if type(launch) is not str:
                return [_noted(ctx, staged_note(ops, parts), launch)]
            unstaged = launch  # (these views or sizes do not stage: the block runs as it would otherwise)
        if recipe.split is not None:
            split = recipe.split
            launches = []
            for part, cache in zip((ops[:split], ops[split:]), recipe.part_caches):
                launches += ElementwisePlan(part, self.max_bindings, self.replayed, cache)._launches(ctx)
            why = recipe.why_split
            if why and unstaged and ctx.stencil_staging:
                why = f"{why} (not staged in local memory: {unstaged})"
            return [_noted(ctx, why, launch) for launch in launches] if why else launches
        if not recipe.trace:
            return []
        in_entries, scalars = bind_slots(ops, recipe.in_slots, recipe.scalar_slots, entries)
        if top and any(e.storage.status == FAILED for e in in_entries):
            run_around_failures(ctx, ops)
            return []
        launch = self._prepare(ctx, recipe, views[1], in_entries, scalars)
        if launch is None:
            return []
        return [_noted(ctx, recipe.recomputed, launch) if recipe.recomputed else launch]

    def _prepare(self, ctx: BlockContext, recipe: _Recipe, remap_slots: list, in_entries: list[Entry],
                 scalars: list):
        """Everything up to the launch, the kernel built: the launch itself, to call, or
        None when the block has failed (a build error)."""
        ops, entries = self.ops, ctx.entries
        out_entries = [entries[ops[j].out.id] for j in recipe.needed]

        views = tuple(entries[ops[j].inputs[s]] for j, s, _ in remap_slots)
        packs = _transposed_inputs(ctx, ops, recipe, in_entries)
        memo_key = (tuple((e.ir.shape, e.strides, e.offset, e.storage.nbytes) for e in in_entries),
                    tuple((v.ir.shape, v.strides, v.offset) for v in views),
                    tuple(op.out.shape for op in ops), ctx.widths, ctx.pack_lanes, tuple(packs))
        layout = recipe.layouts.get(memo_key)
        if layout is None:
            maps = self._view_maps(remap_slots, entries) if remap_slots else None
            layout = _layout(ctx, ops, recipe, [_Packed(e) if k in packs else e for k, e in enumerate(in_entries)],
                             maps)
            if len(recipe.layouts) >= 64:  # (sizes that never recur would grow it without bound)
                recipe.layouts.clear()
            recipe.layouts[memo_key] = layout
        n, classes, layouts, dims, width, index, rank, rows, shares, grid = layout
        key = (classes, width, index, rank, rows, shares, grid)
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
                rows=rows,
                shares=shares,
                grid=grid,
            )
            params = cg.parameters(spec)
            bindings = len(params)
            what = f"element-wise block ({', '.join(recipe.names)})"
            if bindings > self.max_bindings and len(recipe.live_ops) > 1:
                over = f"needs {bindings} bindings, over the limit of {self.max_bindings}"
                if self.replayed:  # more values alive than when it was stored: explore instead
                    raise PlanRejected(over)
                ctx.fail([e.storage for e in out_entries], TensorFailedError(f"{what} failed to build: {over}"))
                return None
            # (its scalar variant if the vector build failed: the same parameters, one element each)
            kernel_spec = ctx.build_or_fail(spec, what, out_entries)
            if kernel_spec is None:
                return None
            built = recipe.kernels[key] = (kernel_spec.spec, kernel_spec.kernel, params)
        spec, kernel, params = built
        transposes = {}  # input number -> its copy's kernel (every kernel built before anything runs)
        for k, (_, _, _, transpose_spec) in packs.items():
            transposes[k] = ctx.build_or_fail(transpose_spec, f"element-wise block ({', '.join(recipe.names)})",
                                              out_entries)
            if transposes[k] is None:
                return None
        # (a packed input's buffer is read through its copy: never taken over by an output)
        donor_classes = tuple("packed" if k in packs else c for k, c in enumerate(classes)) if packs else classes

        def launch() -> None:
            failed = next((e for e in in_entries if e.storage.status == FAILED), None)
            if failed is not None:  # (the kernel before it, in a block run as two, failed)
                ctx.fail([e.storage for e in out_entries], after_failed_input(
                    f"block ({', '.join(recipe.names)})", failed.ir.id, failed.storage.error))
                return
            in_buffers = [e.storage.buffer for e in in_entries]  # before any is donated
            if None in in_buffers:  # a bug, never a crash on the device: fail the block instead
                raise RuntimeError("an input of the block has no buffer")
            try:
                donors = _donors(ctx, in_entries, donor_classes, recipe.in_slots, recipe.input_reads)
                out_buffers = [_take_donor(ctx, donors, e) or ctx.allocate(e.storage) for e in out_entries]
            except Exception as exc:
                ctx.fail([e.storage for e in out_entries], exc)
                return
            scratch = []
            try:
                if n:
                    copies: dict[tuple, object] = {}  # one copy per layout of a storage (`m.T + m.T * 3`)
                    for k, (rows, cols, source, _) in packs.items():
                        e, transpose = in_entries[k], transposes[k]
                        read = (id(e.storage), e.offset, e.strides, e.ir.shape)
                        if read not in copies:
                            nbytes = rows * cols * e.ir.dtype.itemsize
                            scratch.append((ctx.pool.alloc(nbytes), nbytes))
                            sizes = (spec_index_value(transpose.spec.index, v) for v in (*source, rows, cols))
                            args = [scratch[-1][0], in_buffers[k], *sizes]
                            ctx.launch(transpose.kernel, *tg.grid(transpose.spec, rows, cols), args, "elementwise",
                                       [f"copy tensor {e.ir.id} row-major (a transposed input)"], len(args))
                            copies[read] = scratch[-1][0]
                        in_buffers[k] = copies[read]
                    meta = [ctx.metadata_buffer(cg.metadata(spec, dims, layouts))] if cg.has_metadata(spec) else []
                    args = sig.bind(params, size=[spec_index_value(index, n)], meta=meta, out=out_buffers,
                                    scalar=scalars, input=in_buffers)
                    W = spec.width
                    if spec.grid:
                        ctx.launch_grid(kernel, n // dims[-1], dims[-1], args, "elementwise", recipe.names,
                                        len(args))
                    else:
                        items = n // dims[-1] * ((dims[-1] + W - 1) // W) if spec.rows else (n + W - 1) // W
                        ctx.launch_items(kernel, items, args, "elementwise", recipe.names, len(args))
            finally:  # (the in-order queue runs the copies before any later use of their buffers)
                for buffer, nbytes in scratch:
                    ctx.pool.free(buffer, nbytes)
            ctx.mark_ready([e.storage for e in out_entries])

        return launch

    def _view_maps(self, remap_slots: list, entries: dict) -> dict:
        """For each view read in another element order, how it maps onto its value (see
        view_map). A replayed block whose view no longer maps (same structure, other
        strides) is explored again; a block the fuser took always maps."""
        ops = self.ops
        maps = {}
        for j, s, target in remap_slots:
            view_id = ops[j].inputs[s]
            vm = view_map(entries[view_id], ops[target].out.shape)
            if vm is None:
                if self.replayed:
                    raise PlanRejected("a view of a block value no longer maps onto it")
                raise RuntimeError("a remapped view of a block value does not map onto it")
            maps[view_id] = vm
        return maps


class _Recipe:
    """What a block's structure and its set of needed values decide, whatever the ids,
    sizes and scalar values: the ops that run, the trace, the operand slots of inputs and
    scalars, the values written, and the kernels built for it per layout."""

    __slots__ = ("needed", "live_ops", "names", "trace", "in_slots", "input_reads", "scalar_slots", "scalar_dtypes",
                 "outputs", "scalar_code", "dtypes", "flat_index", "kernels", "big", "singles", "single_outputs",
                 "split", "why_split", "recomputed", "layouts", "part_caches", "staging",
                 "why_unstaged")

    def __init__(self, ops: list[ElementwiseOp], needed: set[int], scalar_exprs: set,
                 aliases: dict[int, int] | None = None, remaps: dict[int, int] | None = None, budget: int = 0,
                 stage_first: bool = False):
        self.kernels: dict[tuple, tuple] = {}
        self.layouts: dict[tuple, tuple] = {}  # (see _layout)
        self.recomputed = self.why_split = ""
        self.split = None
        self.staging = None
        self.why_unstaged = ""  # why a block that splits does not stage instead
        cones = None
        if remaps:
            produced = {op.out.id: j for j, op in enumerate(ops)}
            cones = {view: cone_of(ops, target, produced) for view, target in remaps.items()}
            self.split, self.why_split = _split_point(ops, needed, remaps, cones, budget)
            # Staging in local memory (staging.py) where the views only shift their
            # values: over the budget, or before recomputing where the device stages
            # first (its launches decide whether these views stage).
            cut = self.split
            if cut is None and stage_first:
                cut = _split_point(ops, needed, remaps, cones, -1)[0]
            if cut is not None:
                parts = StagedParts(ops, cut, sorted(needed), remaps, aliases)
                # (under the budget, only values read through several views: one view
                # recomputes each element once, as staging would)
                if not parts.why_not and (self.split is not None or parts.overlapping):
                    self.staging = parts
                self.why_unstaged = parts.why_not
            if self.split is not None:
                self.trace = ()
                # What each part's plan keeps between runs, as a store node's cache does:
                # a recipe with this split always cuts the same parts.
                self.part_caches = ({}, {})
                return
            names = sorted({ops[t].name for t in remaps.values()})
            self.recomputed = (f"recomputes {', '.join(names)} at {len(remaps)} "
                               f"view{'s' if len(remaps) > 1 else ''} in another element order")
        live = liveness(ops, needed, aliases)
        self.needed = sorted(needed)
        self.live_ops = [op for j, op in enumerate(ops) if live[j]]
        trace, self.in_slots, self.scalar_slots, scalar_dtypes, vmap = relative_slots(ops, live, (), aliases, cones)
        # How many operands of the block, live ops or not, read each input (see _donors).
        reads = collections.Counter(t for op in ops for t in op.inputs if type(t) is int)
        self.input_reads = [reads[ops[slot[0]].inputs[slot[1]]] for slot in self.in_slots]
        self.names = [t.name for t in trace]  # (recomputed ops included)
        self.trace = tuple(trace)
        self.scalar_dtypes = tuple(scalar_dtypes)
        self.outputs = tuple(vmap[j] for j in self.needed)
        self.scalar_code = needs_scalar_trace(trace, scalar_exprs)
        self.dtypes = frozenset(cg.dtypes_of(trace, self.scalar_dtypes))  # (inputs' are added per launch)
        self.flat_index = "iota" in self.names  # (its index vectors count for the width: see _layout)
        # The block's shape (its biggest live op's), and the ops that compute one value
        # broadcast to it (their outputs are written once).
        # (an op's position, not its shape: a recipe serves every block of its plan-store
        # node, whose sizes differ)
        runs = [j for j in range(len(ops)) if live[j]] or list(range(len(ops)))
        self.big = max(runs, key=lambda j: size_of(ops[j].out.shape))
        big = size_of(ops[self.big].out.shape)
        self.singles = frozenset(j for j, op in enumerate(ops) if big > 1 and size_of(op.out.shape) == 1)
        self.single_outputs = tuple(m for m, j in enumerate(self.needed) if j in self.singles)


def _noted(ctx: BlockContext, why: str, launch):
    """`launch`, with `why` added to the note inspect() records for its kernel."""
    def run() -> None:
        note = ctx.note
        if ctx.recorders:
            ctx.note = f"{note}; {why}" if note else why
        try:
            launch()
        finally:
            ctx.note = note
    return run


def _layout(ctx: BlockContext, ops: list[ElementwiseOp], recipe: _Recipe, in_entries: list[Entry],
            maps: dict | None) -> tuple:
    """How a block's kernel reads its inputs at these sizes and layouts: (elements,
    layout classes, per input (offset, collapsed strides), collapsed dims, vector width,
    index type, rank, rows, shares, grid), the part of the kernel's key and metadata that the
    entries decide. Kept per recipe by the layouts it was derived from (a replayed block
    sees the same ones every time)."""
    entries = ctx.entries
    # Every op has as many elements, or one value broadcast to the block's; inputs
    # read at coordinates are read by ops of one shape (the fuser's rule), whose
    # coordinates the kernel computes.
    shape = ops[recipe.big].out.shape
    n = size_of(shape)
    classes: list[str] = []
    strides_of: list[tuple[int, ...]] = []
    offsets = [e.offset for e in in_entries]
    for k, (slot, e) in enumerate(zip(recipe.in_slots, in_entries)):
        j = slot[0]
        if len(slot) == 4:  # an input of a recomputed cone, read at the view's coordinates
            reader = ops[slot[2]]
            view_id = reader.inputs[slot[3]]
            view = entries[view_id]
            offsets[k], composed = composed_layout(e, ops[j].out.shape, maps[view_id])
            op_shape = reader.out.shape
            bs = broadcast_strides(view.ir.shape, composed, op_shape)
        else:
            op_shape = ops[j].out.shape
            if j in recipe.singles:
                op_shape = shape  # its inputs (one element each) are read broadcast
            if e.contiguous and e.ir.shape == op_shape:
                classes.append("contig")
                strides_of.append(())
                continue
            bs = broadcast_strides(e.ir.shape, e.strides, op_shape)
        cls = classify(op_shape, bs, offsets[k])
        if cls == "strided":
            shape = op_shape
        classes.append(cls)
        strides_of.append(bs)
    strided = [k for k, c in enumerate(classes) if c == "strided"]
    rows = False
    rank = 0
    dims: tuple[int, ...] = ()
    layouts = [(o, ()) for o in offsets]
    index = index_type(max((n, *(e.storage.nbytes // e.ir.dtype.itemsize for e in in_entries))))
    if ctx.pack_lanes:
        # (Intel's vectorizer turns every load and store at a 32-bit index made from the
        # work-item's id into a gather or a scatter: "16-way vectorized, 1 gathers 1
        # scatters" for `out[i] = in[i] * a + 1` with an int i, none with a 64-bit one)
        index = "long"
    # A flat index is a vector of the index type: a uint8 arange touches 4- or 8-byte
    # elements too (PoCL 3.0 on Zen 4 botches 16-wide int vectors, which 1-byte values qualify at).
    index_dtypes = [dt.int32 if index == "int" else dt.int64] if recipe.flat_index else []
    width = 1 if recipe.scalar_code else ctx.widths.for_dtypes(
        recipe.dtypes.union([e.ir.dtype for e in in_entries], index_dtypes))
    if not strided and ctx.pack_lanes:
        width = 1  # the driver's lanes hold work-items (DeviceInfo.packs_work_items)
    if strided:
        dims, sets = collapse(shape, [strides_of[k] for k in strided])
        rank = len(dims)
        for k, st in zip(strided, sets):
            layouts[k] = (offsets[k], st)
            if st[-1] == 1:
                classes[k] = "strided1"
            elif st[-1] == 0:
                classes[k] = "strided0"
            elif st[-1] == -1 and in_entries[k].ir.dtype.kind != "c":
                classes[k] = "stridedm1"  # (a reversed row: `x[..., ::-1]`, `flip`)
            else:
                width = 1
        if dims[-1] % width:
            # Vectors along each row, its tail element by element, for rows of a few
            # vectors at least; shorter rows run as scalar code.
            rows = dims[-1] >= ROW_VECTORS_MIN * width
            if not rows:
                width = 1
    grid = bool(strided) and ctx.pack_lanes and rank >= 2 and dims[-1] >= GRID_ROW_MIN
    if grid:
        width, rows = 1, False
    shares: tuple[int, ...] = ()
    if len(strided) > 1:
        first: dict[tuple[int, ...], int] = {}
        shares = tuple(first.setdefault(layouts[k][1], k) if classes[k].startswith("strided") else k
                       for k in range(len(classes)))
        if all(j == k for k, j in enumerate(shares)):
            shares = ()
    return n, tuple(classes), layouts, dims, width, index, rank, rows, shares, grid


class _Packed:
    """An input's layout as the block reads it once copied row-major (see
    PACK_TRANSPOSED_MIN): contiguous, from offset 0, in a buffer of its own size."""

    __slots__ = ("ir", "strides", "offset", "contiguous", "storage")

    def __init__(self, entry: Entry):
        self.ir = entry.ir
        self.strides = contiguous_strides(entry.ir.shape)
        self.offset = 0
        self.contiguous = True
        self.storage = _Size(size_of(entry.ir.shape) * entry.ir.dtype.itemsize)


_Size = collections.namedtuple("_Size", "nbytes")  # (what _layout reads of a storage)


def _transposes_a_large_value(ctx: BlockContext, remap_slots: list, ops: list[ElementwiseOp], entries: dict) -> bool:
    """Whether, on a CPU device, a view read in another element order runs across the rows
    of a value of PACK_TRANSPOSED_MIN elements or more (`(y * 2).T`, as an op of `y.T` run
    in memory order leaves it). Recomputed there, the value's inputs are read down their
    columns, one element per cache line; written instead, the next kernel copies it
    row-major with the transpose kernel (_transposed_inputs) and reads the copy."""
    if ctx.info.kind != "CPU":
        return False
    for j, s, target in remap_slots:
        view = entries[ops[j].inputs[s]]
        shape, strides = view.ir.shape, view.strides
        value = ops[target].out.id
        # (a value the block also reads in its own order, as y in `y - y.T`, is recomputed:
        # written, it would be read twice)
        if len(shape) >= 2 and strides[-1] not in (0, 1, -1) and shape[-1] > 1 \
                and size_of(shape) >= PACK_TRANSPOSED_MIN and not any(value in op.inputs for op in ops):
            return True
    return False


def _transposed_inputs(ctx: BlockContext, ops: list[ElementwiseOp], recipe: _Recipe,
                       in_entries: list[Entry]) -> dict[int, tuple]:
    """The inputs to copy row-major before the block on a CPU device (PACK_TRANSPOSED_MIN):
    {input number: (rows, cols, (offset, row stride, column stride) of the source, the
    kernel's TransposeSpec)}, as the transpose kernel takes them (codegen/transpose.py; its
    rows x cols source is the input's transpose). An input qualifies when it is a matrix whose
    elements lie down its columns (strides (1, s), s at least its rows), read by its op at
    its own shape (not broadcast, nor at a recomputed view's coordinates)."""
    if ctx.info.kind != "CPU":
        return {}
    packs = {}
    for k, (slot, e) in enumerate(zip(recipe.in_slots, in_entries)):
        shape, strides = e.ir.shape, e.strides
        if len(shape) != 2 or len(slot) == 4 or slot[0] in recipe.singles or ops[slot[0]].out.shape != shape \
                or shape[0] * shape[1] < PACK_TRANSPOSED_MIN or strides[0] != 1 or strides[1] < shape[0] \
                or shape[0] == 1 or shape[1] == 1 or e.ir.dtype.kind == "c":  # (one row or column: in order)
            continue
        index = index_type(max(size_of(shape), e.storage.nbytes // e.ir.dtype.itemsize))
        packs[k] = (shape[1], shape[0], (e.offset, strides[1], 1), tg.TransposeSpec(e.ir.dtype, index, blocks=True))
    return packs


def _split_point(ops: list[ElementwiseOp], needed: set[int], remaps: dict[int, int],
                 cones: dict[int, tuple[int, ...]], budget: int) -> tuple[int | None, str]:
    """Where a block with remapped reads runs as two kernels, if it must, and why.

    A value whose views would cost more to recompute than `budget` per element (every
    view recomputes the value's cone) is written instead, and read back by a second
    kernel holding every op after it. A block that changed size (size_runs) and must
    write a value of its first size runs each size as its own kernel."""
    work: dict[int, int] = {}
    for view, target in remaps.items():
        work[target] = work.get(target, 0) + cone_cost(ops, cones[view])
    dear = [t for t, w in work.items() if w > budget]
    resize = size_runs(ops)
    if resize is not None and any(j < resize for j in needed):
        return resize, "a value of the first shape lives on after the block: each shape runs as its own kernel"
    if not dear:
        return None, ""
    t = min(dear)
    if resize is None or t >= resize:
        t = max(dear)  # (every op up to the last dear value runs in the first kernel)
        split = t + 1
    else:
        split = resize
    return split, (f"recomputing {ops[t].name} at its views would cost {work[t]} per element, over the budget of "
                   f"{budget}: written, and read back by the next kernel")


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
    # The rest's kernels are built here, under the lock: the block has changed, and a build
    # that stopped it now (NeedsCompile) would have it run again from the start, finding
    # gone a failed value whose handle died meanwhile (its op still queued).
    under, ctx.compile_under_lock = ctx.compile_under_lock, True
    try:
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
    finally:
        ctx.compile_under_lock = under


def _donors(ctx: BlockContext, in_entries: list[Entry], classes: list[str], in_slots: list,
            input_reads: list[int]) -> list[Entry]:
    """Inputs whose buffer dies with this block and is read at each element's own index
    only (not also by a recomputed cone, at other coordinates): an output may take the
    buffer over instead of allocating (in-place reuse). `input_reads`: how many of the
    block's operands read each input."""
    donors = []
    remapped = {id(e.storage) for e, slot in zip(in_entries, in_slots) if len(slot) == 4}
    for e, cls, reads_here in zip(in_entries, classes, input_reads):
        st = e.storage
        if cls != "contig" or id(st) in remapped or e.alive or st.refs != 1 or st.pins or not st.owned \
                or st.buffer is None or not ctx.may_donate(st):
            continue
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
            return ctx.take_over(st, out.storage)
    return None


