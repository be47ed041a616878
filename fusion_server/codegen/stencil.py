"""OpenCL C for a block whose dear values are staged in local memory: a stencil in one kernel.

A work-group owns a tile of TY x TX outputs. It first computes each staged value (the
ops of the block's first part, its `value_ops`) over the tile and its halo, the
value's elements its views read there, into one local array per value; after a barrier,
each work-item computes RY x RX outputs (the block's second part, `ops`), reading the
views ("taps") from the arrays at constant shifts. A value read by nine taps is computed
(TY + HY) (TX + HX) / (TY TX) times per output instead of nine times (recomputed) or
written and read back by a second kernel.

Coordinates are 2-D (a 1-D block is one row), with a batch of such planes along the
grid's third dimension (a 3-D block whose views do not shift along its first). Sizes,
the value's origin under the tile (LB, L0, L1), offsets and strides are metadata; the
taps' shifts, the tile and the halo are in the source.
"""

from __future__ import annotations

import hashlib
import re
from typing import NamedTuple

import numpy as np

from .. import dtypes as dt
from . import elementwise as cg
from . import expressions as ex
from . import signature as sig


class StencilSpec(NamedTuple):
    """Everything the generated source depends on; the program cache's key."""

    value_ops: tuple[cg.TraceOp, ...]  # the first part: 'i' refs are value inputs
    value_inputs: tuple[np.dtype, ...]
    staged: tuple[int, ...]  # positions in value_ops staged, one local array each
    ops: tuple[cg.TraceOp, ...]  # the second part: 'i' k >= len(inputs) is tap k - len(inputs)
    inputs: tuple[np.dtype, ...]
    taps: tuple[tuple[int, int, int], ...]  # (array, row shift, column shift) from the halo's corner
    scalars: tuple[np.dtype, ...]  # the first part's, then the second's
    value_scalars: int  # how many of the scalars are the first part's
    outputs: tuple[int, ...]  # positions in ops written (C-contiguous, the output shape)
    index: str  # "int" or "long"
    local: tuple[int, int]  # (LY, LX) work-items per group
    tile: tuple[int, int]  # (TY, TX) outputs per group, in rounds of the work-items over them
    halo: tuple[int, int]  # (HY, HX): the extra rows and columns of a staged array
    width: int = 1  # staged elements and outputs of a row per work-item, as one vector
    # per value input, how a vector of a row reads it: "row" (consecutive elements),
    # "splat" (one element, broadcast along the row) or "gather"
    value_classes: tuple[str, ...] = ()
    input_classes: tuple[str, ...] = ()  # the same, per input


def scalar_variant(spec: StencilSpec) -> StencilSpec | None:
    """The same kernel as scalar code (one staged element and one output per work-item
    and round, over the same tile and work-groups), if `spec` is vector code."""
    return spec._replace(width=1, value_classes=(), input_classes=()) if spec.width > 1 else None


def staged_shape(spec: StencilSpec) -> tuple[int, int]:
    """(rows, row pitch) of a staged array: the tile and its halo, rows padded to whole
    vectors in vector code (a row's last few elements cost one vector, not a scalar
    loop of the dear op each)."""
    w = spec.width
    return spec.tile[0] + spec.halo[0], -(-(spec.tile[1] + spec.halo[1]) // w) * w


def local_bytes(spec: StencilSpec) -> int:
    """The local memory the staged arrays take."""
    sy, sx = staged_shape(spec)
    return sum(sy * sx * spec.value_ops[j].out.itemsize for j in spec.staged)


def kernel_name(spec: StencilSpec) -> str:
    digest = hashlib.sha1(repr(spec).encode()).hexdigest()[:10]
    names = "_".join(op.name for op in (spec.value_ops + spec.ops)[:4])
    return re.sub(r"\W", "_", f"stencil_{names}")[:60] + f"_{digest}"


def parameters(spec: StencilSpec) -> list[sig.Param]:
    """The metadata, the outputs, the value inputs, the inputs, the scalars."""
    params = [sig.meta()]
    params += [sig.out(spec.ops[j].out, f"out{m}") for m, j in enumerate(spec.outputs)]
    params += [sig.input_(d, f"vin{k}") for k, d in enumerate(spec.value_inputs)]
    params += [sig.input_(d, f"in{k}") for k, d in enumerate(spec.inputs)]
    params += [sig.scalar(d, f"a{k}") for k, d in enumerate(spec.scalars)]
    return params


def arg_dtypes(spec: StencilSpec) -> list:
    return sig.arg_dtypes(parameters(spec))


def metadata(out_dims: tuple[int, int], value_dims: tuple[int, int], origin: tuple[int, int, int],
             value_layouts: list[tuple[int, tuple[int, int, int]]], layouts: list[tuple[int, tuple[int, int, int]]]
             ) -> tuple[int, ...]:
    """The int64 metadata of one launch: the output's and the value's rows and columns,
    the value's coordinates (batch, row, column) under output (0, 0, 0) less the halo's
    start, then (offset, batch, row and column strides) per value input and per input."""
    meta = [*out_dims, *value_dims, *origin]
    for offset, strides in (*value_layouts, *layouts):
        meta += [offset, *strides]
    return tuple(meta)


def _trace_spec(ops, inputs, scalars, index: str) -> cg.KernelSpec:
    """A KernelSpec that `cg._op_expr` can read dtypes from."""
    return cg.KernelSpec(ops=ops, inputs=tuple((d, "strided") for d in inputs), scalars=scalars, outputs=(),
                         width=1, index=index, rank=2)


def _shifted_scalars(ops: tuple[cg.TraceOp, ...], by: int) -> tuple[cg.TraceOp, ...]:
    if not by:
        return ops
    return tuple(op._replace(args=tuple(("s", k + by) if kind == "s" else (kind, k) for kind, k in op.args))
                 for op in ops)


def _load(array: str, dtype: np.dtype, cls: str, row: str, col: str, stride: str, width: int) -> str:
    """The `width` elements of a row of an input from column `col` on: `array[row + c * stride]`.
    One element of a "row" or "splat" input is read without the column stride, so that a
    CPU driver running work-items in lanes sees consecutive (or one) addresses, not a
    gather (Intel's CPU runtime on a Zen 4, where gathers are slow: the staged box blur of
    x * x over 2048^2 took 9.4 ms reading through the stride, against 5.4 for two kernels)."""
    if width == 1:
        return {"row": f"{array}[{row} + {col}]", "splat": f"{array}[{row}]"}.get(
            cls, f"{array}[{row} + {col} * {stride}]")
    if cls == "row":
        return ex.vload(f"{array} + {row} + {col}", dtype, width)
    if cls == "splat":
        return ex.splat(f"{array}[{row}]", dtype, width)
    lanes = ", ".join(f"{array}[{row} + ({col} + {e}) * {stride}]" for e in range(width))
    return f"(({ex.type_name(dtype, width)})({lanes}))"


def _scalar_lines(spec: StencilSpec, width: int) -> list[str]:
    return [f"const {ex.type_name(d, width)} s{k} = {ex.splat(f'a{k}', d, width)};"
            for k, d in enumerate(spec.scalars)]


def _value_body(spec: StencilSpec, first_spec: cg.KernelSpec, width: int, lane: str = "") -> list[str]:
    """Loads, ops and stores of the staged values at `width` elements from (gy, gx),
    or at the one element `lane` further along the row."""
    at = f"(gx + {lane})" if lane else "gx"
    lines = []
    for k, (d, cls) in enumerate(zip(spec.value_inputs, spec.value_classes or ("gather",) * len(spec.value_inputs))):
        load = _load(f"vin{k}", d, cls, f"VO{k} + gb * VC{k} + gy * VA{k}", at, f"VB{k}", width)
        lines.append(f"const {ex.type_name(d, width)} x{k} = {load};")
    lines += _scalar_lines(spec, width)
    for j, op in enumerate(spec.value_ops):
        lines += cg._op_expr(first_spec, op, j, width)
    t = f"t + {lane}" if lane else "t"
    for a, j in enumerate(spec.staged):
        if width == 1:
            lines.append(f"tile{a}[{t}] = v{j};")
        else:
            T = dt.CL_NAME[spec.value_ops[j].out]
            lines.append(f"VSTORE_LOCAL({T}, {width}, v{j}, tile{a} + t);")
    return lines


def _output_body(spec: StencilSpec, second_spec: cg.KernelSpec, tap_dtypes: tuple, width: int,
                 lane: str = "") -> list[str]:
    """Loads (the taps from the staged arrays), ops and stores of `width` outputs from
    (y, x), or of the one output `lane` further along the row."""
    sx = staged_shape(spec)[1]
    x, ox = (f"(x + {lane})", f"(ox + {lane})") if lane else ("x", "ox")
    lines = []
    for k, (d, cls) in enumerate(zip(spec.inputs, spec.input_classes or ("gather",) * len(spec.inputs))):
        load = _load(f"in{k}", d, cls, f"O{k} + b * C{k} + y * A{k}", x, f"B{k}", width)
        lines.append(f"const {ex.type_name(d, width)} x{k} = {load};")
    for t, (a, dy, dx) in enumerate(spec.taps):
        at = f"(oy + {dy}) * {sx} + {ox} + {dx}"
        load = f"tile{a}[{at}]" if width == 1 else f"VLOAD_LOCAL({dt.CL_NAME[tap_dtypes[t]]}, {width}, tile{a} + {at})"
        lines.append(f"const {ex.type_name(tap_dtypes[t], width)} x{len(spec.inputs) + t} = {load};")
    lines += _scalar_lines(spec, width)
    for j, op in enumerate(second_spec.ops):
        lines += cg._op_expr(second_spec, op, j, width)
    for m, j in enumerate(spec.outputs):
        if width == 1:
            lines.append(f"out{m}[(b * D0 + y) * D1 + {x}] = v{j};")
        else:
            lines.append(ex.vstore(f"v{j}", f"out{m} + (b * D0 + y) * D1 + x", spec.ops[j].out, width))
    return lines


def _vector_rounds(spec: StencilSpec, first_spec: cg.KernelSpec) -> list[str]:
    """The staging loop of vector code: one vector of a row per work-item and round, the
    value's last partial vector of a row element by element. The loops have the same
    trip count in every work-item, which CPU drivers need to run them across the
    work-items' lanes (PoCL 3.0 took 2.6x longer over a divided flat index)."""
    (ly, lx), W = spec.local, spec.width
    sy, sx = staged_shape(spec)
    src: list[str] = []
    src.append(f"  for (int i0 = 0; i0 < {sy}; i0 += {ly}) {{")
    src.append(f"   for (int j0 = 0; j0 < {sx}; j0 += {lx * W}) {{")
    src.append(f"    const int i = i0 + ly, j = j0 + lx * {W}, t = i * {sx} + j;")
    src.append("    const IDX gy = ty0 + L0 + i, gx = tx0 + L1 + j;")
    inside = " && ".join([f"i < {sy}"] * (sy % ly != 0) + [f"j < {sx}"] * (sx % (lx * W) != 0) + ["gy < G0"])
    src.append(f"    if ({inside}) {{")
    src.append(f"     if (gx + {W} <= G1) {{")
    src += ["      " + line for line in _value_body(spec, first_spec, W)]
    src.append("     } else {")
    src.append(f"      for (int e = 0; e < {W}; ++e) {{")
    src.append("       if (gx + e < G1) {")
    src += ["        " + line for line in _value_body(spec, first_spec, 1, "e")]
    src.append("       }")
    src.append("      }")
    src.append("     }")
    src.append("    }")
    src.append("   }")
    src.append("  }")
    return src


def generate(spec: StencilSpec) -> tuple[str, str]:
    """(source, kernel name) for `spec`."""
    name = kernel_name(spec)
    (ly, lx), (ty, tx) = spec.local, spec.tile
    W = spec.width
    ry, rx = -(-ty // ly), -(-tx // (lx * W))
    sy, sx = staged_shape(spec)
    second = _shifted_scalars(spec.ops, spec.value_scalars)
    tap_dtypes = tuple(spec.value_ops[spec.staged[a]].out for a, _, _ in spec.taps)
    first_spec = _trace_spec(spec.value_ops, spec.value_inputs, spec.scalars, spec.index)
    second_spec = _trace_spec(second, spec.inputs + tap_dtypes, spec.scalars, spec.index)
    every = {*spec.value_inputs, *spec.inputs, *cg.dtypes_of(spec.value_ops + spec.ops, spec.scalars)}
    src = ex.prelude(spec.value_ops + spec.ops, every)
    src.append(f"typedef {spec.index} IDX;")
    src += ex.vector_access({*spec.value_inputs, *spec.inputs, *(spec.ops[j].out for j in spec.outputs),
                             *tap_dtypes}, W)
    src.append(f"__kernel __attribute__((reqd_work_group_size({lx}, {ly}, 1)))")
    src.append(f"void {name}({sig.declare(parameters(spec))})")
    src.append("{")
    for a, j in enumerate(spec.staged):
        src.append(f"  __local {dt.CL_NAME[spec.value_ops[j].out]} tile{a}[{sy * sx}];")
    names = ["D0", "D1", "G0", "G1", "LB", "L0", "L1"]
    names += [f"{p}{k}" for k in range(len(spec.value_inputs)) for p in ("VO", "VC", "VA", "VB")]
    names += [f"{p}{k}" for k in range(len(spec.inputs)) for p in ("O", "C", "A", "B")]
    for pos, var in enumerate(names):
        src.append(f"  const IDX {var} = (IDX)meta[{pos}];")
    src.append(f"  const IDX ty0 = (IDX)get_group_id(1) * {ty}, tx0 = (IDX)get_group_id(0) * {tx};")
    src.append("  const int lx = get_local_id(0), ly = get_local_id(1);")
    src.append("  const IDX b = (IDX)get_group_id(2), gb = b + LB;  // (the batch: one per grid layer)")
    # The staged values over the tile and its halo (elements past the value's edge are
    # left unset: only outputs past the output's edge, which are not stored, read them).
    if W == 1 and sy % ly == 0 and sx % lx == 0:  # rows of work-items over whole rows
        # (a column index that follows the work-item's: consecutive addresses for a
        # driver that runs work-items in lanes, which the flat index's division hides)
        src.append(f"  for (int i = ly; i < {sy}; i += {ly}) {{")
        src.append(f"   for (int j = lx; j < {sx}; j += {lx}) {{")
        src.append(f"    const int t = i * {sx} + j;")
        src.append("    const IDX gy = ty0 + L0 + i, gx = tx0 + L1 + j;")
        src.append("    if (gy < G0 && gx < G1) {")
        src += ["      " + line for line in _value_body(spec, first_spec, 1)]
        src.append("    }")
        src.append("   }")
        src.append("  }")
    elif W == 1:  # one element per work-item and round, over the flat staged array
        # (a GPU's 34 x 34 array in rounds of 8 x 32 work-items left half of them idle)
        src.append(f"  for (int t = ly * {lx} + lx; t < {sy * sx}; t += {lx * ly}) {{")
        src.append(f"    const IDX gy = ty0 + L0 + t / {sx}, gx = tx0 + L1 + t % {sx};")
        src.append("    if (gy < G0 && gx < G1) {")
        src += ["      " + line for line in _value_body(spec, first_spec, 1)]
        src.append("    }")
        src.append("  }")
    else:
        src += _vector_rounds(spec, first_spec)
    src.append("  barrier(CLK_LOCAL_MEM_FENCE);")
    # The outputs: `width` consecutive ones of a row per work-item and round, a row's last
    # partial vector element by element.
    src.append(f"  for (int ry = 0; ry < {ry}; ++ry) {{")
    src.append(f"    for (int rx = 0; rx < {rx}; ++rx) {{")
    src.append(f"      const int oy = ly + ry * {ly}, ox = (lx + rx * {lx}) * {W};")
    src.append("      const IDX y = ty0 + oy, x = tx0 + ox;")
    inside = " && ".join([f"oy < {ty}"] * (ry * ly != ty) + [f"ox < {tx}"] * (rx * lx * W != tx) + ["y < D0"])
    src.append(f"      if ({inside}) {{")
    if W == 1:
        src.append("       if (x < D1) {")
        src += ["        " + line for line in _output_body(spec, second_spec, tap_dtypes, 1)]
        src.append("       }")
    else:
        src.append(f"       if (x + {W} <= D1) {{")
        src += ["        " + line for line in _output_body(spec, second_spec, tap_dtypes, W)]
        src.append("       } else {")
        src.append(f"        for (int e = 0; e < {W}; ++e) {{")
        src.append("         if (x + e < D1) {")
        src += ["          " + line for line in _output_body(spec, second_spec, tap_dtypes, 1, "e")]
        src.append("         }")
        src.append("        }")
        src.append("       }")
    src += ["      }", "    }", "  }", "}"]
    return "\n".join(src) + "\n", name

