"""Dear values read through shifted views, staged in local memory: the stencil as one kernel.

A block whose views of a value would cost more to recompute than the budget (remap.py)
runs as two kernels: the first writes the value, the second reads it back through its
views. When every view only shifts the value (slices with unit steps, no transpose,
flip or broadcast), the value is 1- or 2-D (or 3-D, unshifted along its first
dimension: a batch of planes), and the shifts span a small halo, the two
parts run as one kernel instead (codegen/stencil.py): each work-group computes the value
over its tile of outputs and the halo into local memory, then the second part reads
the views from there. The value is never written; each element is computed about once
(once per tile it borders, at the halo), where recomputing costs it once per view.

Everything here is decided per launch from the entries (which views, their offsets,
the sizes); a block that does not qualify runs as the two kernels it would otherwise.
"""

from __future__ import annotations

from ..codegen import elementwise as cg
from ..codegen import signature as sig
from ..codegen import stencil as sg
from ..codegen.layout import broadcast_strides
from ..context import BlockContext
from ..errors import after_failed_input
from ..handles import FAILED, Entry
from ..ir import ElementwiseOp, size_of
from .remap import view_map
from .trace import bind_slots, index_type, needs_scalar_trace, relative_slots
from .values import liveness

# The widest halo (rows or columns past the tile, the spread of the views' shifts) that
# is staged; wider stencils run as two kernels.
MAX_HALO = 8
# The most planes of a 3-D value (grid layers: NVIDIA's grids hold 65535 along their third axis).
MAX_PLANES = 65535

# Work-items per group (LY, LX) and outputs per group (TY, TX), per device kind and
# rank (`geometry`). GPUs: 256 work-items over a 32 x 32 tile, four rows each (a 3 x 3
# stencil computes its value 34 * 34 / 32^2 = 1.13 times per output). CPUs whose
# kernels are scalar code (the driver packs work-items into lanes): one work-item per
# element of a 16 x 64 staged array, the tile that array less the halo, so that no loop
# inside a work-item keeps lanes waiting.
GEOMETRY = {
    ("GPU", 2): ((8, 32), (32, 32)),
    ("GPU", 1): ((1, 256), (1, 1024)),
    ("CPU", 2): ((16, 64), None),
    ("CPU", 1): ((1, 1024), None),
}
# CPUs whose kernels are vector code (PoCL): VECTOR_ROWS rows of work-items, each
# computing one vector of its staged row and one of its outputs per round, over
# VECTOR_ROW outputs per row. The box blur of x ** 2.2 over 2048^2 on PoCL 3.0 (2 Xeon
# cores), staged kernel ms by (VECTOR_ROW, VECTOR_ROWS): (64, 16) 26.5, (128, 16) 24.7,
# (256, 16) 23.9, (128, 32) 31, (256, 32) 23.1, (64, 64) 32.7; the blur of x * x: 1.68,
# 1.69, 1.87, 2.4, 1.9, 2.4 (more rows of work-items make the driver loop inside them).
VECTOR_ROW, VECTOR_ROWS = 256, 16
# The staged rows of a tile (its rows and the halo's), in rounds of VECTOR_ROWS: a taller
# tile computes fewer halo rows twice. PoCL 3.0 on 2 Zen 4 cores, 2048^2 float32, kernel
# ms (medians of four processes each, alternated; one tile of 16 staged rows against 64):
# the box blur of x ** 2.2 30.3 against 27.2, of exp(x) 5.8 against 3.83, of x * x 4.9
# against 3.09; written and read back by two kernels instead: 26.6, 4.3, 4.3.
VECTOR_TILE_ROWS = 64


def geometry(kind: str, rank: int, halo: tuple[int, int], width: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """(work-items per group, outputs per group) of a staged launch whose work-items
    compute `width` staged elements each."""
    (ly, lx), tile = GEOMETRY[("GPU" if kind == "GPU" else "CPU", 1 if rank == 1 else 2)]
    if tile is not None:
        return (ly, lx), tile
    if width == 1:
        return (ly, lx), (max(1, ly - halo[0]), lx - halo[1])
    # (whole vectors of outputs per row; the staged row's last vector, past them, takes a
    # second round of the staging loop)
    if rank == 1:
        lanes = max(1, lx // width)
        return (1, lanes), (1, lanes * width)
    lanes = max(1, VECTOR_ROW // width)
    return (VECTOR_ROWS, lanes), (max(1, VECTOR_TILE_ROWS - halo[0]), lanes * width)


# Device kinds that stage a value whose views only shift it even where recomputing it
# at every view stays under the budget. The H200 (kernel ms over 2048^2, staged against
# recomputed): box blur of x * x 0.020 against 0.034, of exp(x) 0.021 against 0.035, the
# heat step 0.017 against 0.025. Intel's CPU runtime (2 Xeon cores): the blur of x * x
# 2.43 against 2.11, the heat step 2.19 against 1.66, so CPUs stage over the budget only.
STAGE_FIRST = {"GPU": True, "CPU": False}


def stages_first(ctx: BlockContext) -> bool:
    """Whether the context's device stages before it recomputes (STAGE_FIRST)."""
    return STAGE_FIRST.get(ctx.info.kind, False) and ctx.recompute_budget is None


def width_of(ctx: BlockContext, trace, dtypes: set) -> int:
    """Elements per work-item of the staging loop: the device's vector width on CPU
    drivers that run vector code, else 1."""
    if ctx.info.kind == "GPU" or ctx.pack_lanes or ctx.info.packs_work_items:
        return 1
    if needs_scalar_trace(trace, ctx.scalar_exprs):
        return 1
    return ctx.widths.for_dtypes(dtypes)


class StagedParts:
    """What a block's structure decides for staging it at `split`: the first part's
    trace (the staged values' cones), the second's (its views of them as taps), the
    operand slots to bind. Built once per recipe; `why_not` says why it cannot stage."""

    __slots__ = ("why_not", "split", "targets", "value_trace", "value_slots", "value_scalar_slots",
                 "value_scalar_dtypes", "staged", "trace", "in_slots", "tap_slots", "scalar_slots",
                 "scalar_dtypes", "outputs", "needed", "names", "kernels", "layouts", "overlapping")

    def __init__(self, ops: list[ElementwiseOp], split: int, needed: list[int], remaps: dict[int, int],
                 aliases: dict[int, int] | None):
        self.why_not = ""
        self.kernels: dict = {}
        self.layouts: dict = {}
        first, second = ops[:split], ops[split:]
        produced = {op.out.id: j for j, op in enumerate(first)}
        reason = _structure_refusal(ops, split, needed, remaps, aliases, produced)
        if reason:
            self.why_not = reason
            return
        self.split = split
        # The values the second part reads, through views or as they are.
        read: dict[int, int] = {}  # operand id -> the first part's op position
        for op in second:
            for operand in op.inputs:
                if type(operand) is int:
                    t = remaps.get(operand, produced.get(operand))
                    if t is not None:
                        read[operand] = t
        self.targets = sorted(set(read.values()))
        live = liveness(first, set(self.targets))
        (self.value_trace, self.value_slots, self.value_scalar_slots, self.value_scalar_dtypes,
         vmap) = relative_slots(first, live)
        self.staged = tuple(vmap[t] for t in self.targets)
        self.needed = [j - split for j in needed]
        live2 = liveness(second, set(self.needed))
        trace, slots, self.scalar_slots, self.scalar_dtypes, vmap2 = relative_slots(second, live2)
        # Inputs from outside first, then the taps (the stencil codegen's numbering).
        external = [k for k, (j, s) in enumerate(slots) if second[j].inputs[s] not in read]
        taps = [k for k, (j, s) in enumerate(slots) if second[j].inputs[s] in read]
        renumber = {k: n for n, k in enumerate(external + taps)}
        self.trace = tuple(op._replace(args=tuple(("i", renumber[k]) if kind == "i" else (kind, k)
                                                  for kind, k in op.args)) for op in trace)
        self.in_slots = [slots[k] for k in external]
        self.tap_slots = [(slots[k], self.targets.index(read[second[slots[k][0]].inputs[slots[k][1]]]))
                          for k in taps]
        self.outputs = tuple(vmap2[j] for j in self.needed)
        arrays = [a for _, a in self.tap_slots]
        self.overlapping = any(arrays.count(a) > 1 for a in set(arrays))  # a value read by several views
        self.names = [t.name for t in self.value_trace] + [t.name for t in self.trace]


def _structure_refusal(ops, split, needed, remaps, aliases, produced) -> str:
    """Why the block's structure rules staging out ('' if it does not)."""
    if not needed:
        return "the block writes nothing"
    if any(j < split for j in needed):
        return "a value of the first part lives on after the block"
    if any(t >= split for t in remaps.values()):
        return "the second part reads views of its own values"
    if aliases and any(t < split for t in aliases.values()):
        return "the second part reads a reshape of a value of the first"
    if any(op.name == "iota" for op in ops):
        return "the block computes from the flat index"
    shapes = {op.out.shape for op in ops[split:]}
    if len(shapes) != 1 or size_of(next(iter(shapes))) == 1:
        return "the second part's ops differ in shape"
    reads = [remaps.get(o, produced.get(o)) for op in ops[split:] for o in op.inputs if type(o) is int]
    if len({ops[t].out.shape for t in reads if t is not None}) != 1:
        return "the staged values differ in shape"
    return ""


def _pad3(shape_or_strides: tuple[int, ...], fill: int) -> tuple[int, int, int]:
    """A 1-, 2- or 3-D shape (fill 1) or strides (fill 0) as (batch, rows, columns)."""
    return (fill,) * (3 - len(shape_or_strides)) + tuple(shape_or_strides)


def _layout(ctx: BlockContext, ops: list[ElementwiseOp], parts: StagedParts, value_entries: list[Entry],
            in_entries: list[Entry]) -> tuple | str:
    """The launch's geometry and metadata, or why these views do not stage: (spec
    fields decided here, metadata, grid, local size)."""
    entries = ctx.entries
    first, second = ops[: parts.split], ops[parts.split:]
    value_shape = first[parts.targets[0]].out.shape
    out_shape = second[parts.needed[0]].out.shape
    rank = len(value_shape)
    if rank not in (1, 2, 3) or len(out_shape) != rank:
        return f"the staged value has {rank} dimensions (1 to 3 stage)"
    starts = []
    for (j, s), _ in parts.tap_slots:
        view = entries[second[j].inputs[s]]
        if view.ir.shape != out_shape:
            return "a view is broadcast to the second part's shape"
        vm = view_map(view, value_shape)
        if vm is None:
            return "a view does not map onto its value"
        for d, ax in enumerate(vm.axes):
            if ax != (d, 1) and not (ax is None and out_shape[d] == 1):
                return "a view transposes, flips or strides its value"
        starts.append(_pad3(vm.start, 0))
    if not starts:  # (the second part reads the value through no view: nothing to stage)
        return "no view of the value is read after it"
    lo = tuple(min(s[d] for s in starts) for d in range(3))
    if any(s[0] != lo[0] for s in starts):
        return "the views shift the value along its first of three dimensions"
    halo = tuple(max(s[d] for s in starts) - lo[d] for d in (1, 2))
    if max(halo) > MAX_HALO:
        return f"the views' shifts span {max(halo)} elements, over {MAX_HALO}"
    taps = tuple((a, s[1] - lo[1], s[2] - lo[2]) for (_, a), s in zip(parts.tap_slots, starts))
    trace = (*parts.value_trace, *parts.trace)
    width = width_of(ctx, trace, {*cg.dtypes_of(trace), *(e.ir.dtype for e in (*value_entries, *in_entries))})
    value_dims, out_dims = _pad3(value_shape, 1), _pad3(out_shape, 1)
    rows = 1 if value_dims[1] == out_dims[1] == 1 else 2  # (one row: the 1-D geometry)
    local, tile = geometry(ctx.info.kind, rows, halo, width)
    if local[0] * local[1] > ctx.info.max_work_group_size:
        return "the device's work-groups are too small"
    if out_dims[0] > MAX_PLANES:
        return f"{out_dims[0]} planes, over {MAX_PLANES}"
    value_layouts = [(e.offset, _pad3(broadcast_strides(e.ir.shape, e.strides, value_shape), 0))
                     for e in value_entries]
    layouts = [(e.offset, _pad3(broadcast_strides(e.ir.shape, e.strides, out_shape), 0)) for e in in_entries]
    largest = max(size_of(value_shape), size_of(out_shape),
                  *(e.storage.nbytes // e.ir.dtype.itemsize for e in (*value_entries, *in_entries)))
    meta = sg.metadata(out_dims[1:], value_dims[1:], lo, value_layouts, layouts)
    grid = (-(-out_dims[2] // tile[1]) * local[1], -(-out_dims[1] // tile[0]) * local[0], out_dims[0])
    classes = tuple(_row_class(st) for _, st in value_layouts)
    in_classes = tuple(_row_class(st) for _, st in layouts)
    return (taps, index_type(largest), local, tile, halo, width, classes, in_classes), meta, grid, \
        (local[1], local[0], 1)


def _row_class(strides: tuple[int, int, int]) -> str:
    """How a vector along a row reads an input of these (batch, row, column) strides."""
    return "row" if strides[2] == 1 else "splat" if strides[2] == 0 else "gather"


def staged_launch(ctx: BlockContext, ops: list[ElementwiseOp], parts: StagedParts, max_bindings: int):
    """The block's one launch, its kernel built, or a string: why it runs as two kernels
    instead (these views, sizes or limits). None: the block failed to build."""
    entries = ctx.entries
    first, second = ops[: parts.split], ops[parts.split:]
    value_entries, value_scalars = bind_slots(first, parts.value_slots, parts.value_scalar_slots, entries)
    in_entries, scalars = bind_slots(second, parts.in_slots, parts.scalar_slots, entries)
    taps = tuple(entries[second[j].inputs[s]] for (j, s), _ in parts.tap_slots)
    memo_key = (tuple((e.ir.shape, e.strides, e.offset, e.storage.nbytes) for e in (*value_entries, *in_entries)),
                tuple((v.ir.shape, v.strides, v.offset) for v in taps), tuple(op.out.shape for op in ops))
    layout = parts.layouts.get(memo_key)
    if layout is None:
        layout = _layout(ctx, ops, parts, value_entries, in_entries)
        if len(parts.layouts) >= 64:
            parts.layouts.clear()
        parts.layouts[memo_key] = layout
    if type(layout) is str:
        return layout
    (tap_spec, index, local, tile, halo, width, classes, in_classes), meta, grid, group = layout
    kernel_key = layout[0]
    out_entries = [entries[second[j].out.id] for j in parts.needed]
    built = parts.kernels.get(kernel_key)
    if built is None:
        spec = sg.StencilSpec(
            value_ops=tuple(parts.value_trace), value_inputs=tuple(e.ir.dtype for e in value_entries),
            staged=parts.staged, ops=parts.trace, inputs=tuple(e.ir.dtype for e in in_entries), taps=tap_spec,
            scalars=tuple(parts.value_scalar_dtypes) + tuple(parts.scalar_dtypes),
            value_scalars=len(parts.value_scalar_dtypes), outputs=parts.outputs, index=index, local=local,
            tile=tile, halo=halo, width=width, value_classes=classes,
            input_classes=in_classes)
        if sg.local_bytes(spec) > ctx.info.local_mem_bytes // 2:
            return "the staged tiles would take more than half the device's local memory"
        params = sg.parameters(spec)
        if len(params) > max_bindings:
            return f"staging needs {len(params)} bindings, over the limit of {max_bindings}"
        kernel_spec = ctx.build_or_fail(spec, f"staged stencil ({', '.join(parts.names)})", out_entries)
        if kernel_spec is None:
            return None
        built = parts.kernels[kernel_key] = (kernel_spec.kernel, params)
    kernel, params = built
    all_inputs = [*value_entries, *in_entries]
    all_scalars = [*value_scalars, *scalars]

    def launch() -> None:
        failed = next((e for e in all_inputs if e.storage.status == FAILED), None)
        if failed is not None:
            ctx.fail([e.storage for e in out_entries], after_failed_input(
                f"block ({', '.join(parts.names)})", failed.ir.id, failed.storage.error))
            return
        buffers = [e.storage.buffer for e in all_inputs]
        if None in buffers:
            raise RuntimeError("an input of the block has no buffer")
        try:
            out_buffers = [ctx.allocate(e.storage) for e in out_entries]
        except Exception as exc:
            ctx.fail([e.storage for e in out_entries], exc)
            return
        args = sig.bind(params, meta=[ctx.metadata_buffer(meta)], out=out_buffers, input=buffers,
                        scalar=all_scalars)
        ctx.launch(kernel, grid, group, args, "elementwise", parts.names, len(args),
                   size_of(second[parts.needed[0]].out.shape))
        ctx.mark_ready([e.storage for e in out_entries])

    return launch


def note(ops: list[ElementwiseOp], parts: StagedParts) -> str:
    """What inspect() says of a staged launch."""
    names = sorted({ops[t].name for t in parts.targets})
    n = len(parts.tap_slots)
    return (f"stages {', '.join(names)} in local memory for its {n} view{'s' if n > 1 else ''}: "
            f"one kernel, the value computed once per tile and halo")

