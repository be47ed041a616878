"""OpenCL C for a fused element-wise block, from its specialization key.

One work-item computes one element, or one vector of `width` elements with the last
partial vector done element by element. Scalars, sizes, offsets and strides are kernel
arguments (metadata in one int64 buffer), so the source depends only on the key.
"""

from __future__ import annotations

import hashlib
import re
from typing import NamedTuple

import numpy as np

from .. import dtypes as dt
from . import expressions as ex
from . import signature as sig


class TraceOp(NamedTuple):
    """One op of a fused block in relative form: operands are ('i'|'s'|'v', index)."""

    name: str
    compute: np.dtype
    out: np.dtype
    args: tuple[tuple[str, int], ...]
    expr: str | None = None  # custom ops: an OpenCL C expression over `params`
    params: tuple[str, ...] = ()


class KernelSpec(NamedTuple):
    """Everything the generated source depends on; the program cache's key."""

    ops: tuple[TraceOp, ...]
    inputs: tuple[tuple[np.dtype, str], ...]  # (dtype, layout class)
    scalars: tuple[np.dtype, ...]
    outputs: tuple[int, ...]  # value indices (op positions) written out
    width: int
    index: str  # "int" or "long"
    rank: int  # collapsed rank used by strided inputs, 0 if none
    single: tuple[int, ...] = ()  # outputs (positions in `outputs`) of one value, written by element 0
    # Vectors run along rows of the collapsed shape (its last dimension), each row's last
    # partial vector element by element: strided inputs whose rows are no multiple of the
    # width still load whole vectors (a stencil over 2046-wide rows).
    rows: bool = False
    # Per input, the earlier strided input whose strides it has (the views of one tensor a
    # stencil reads differ in offset only): its position is computed once. Empty: none.
    shares: tuple[int, ...] = ()
    # One work-item per element over a 2-D grid: the collapsed shape's last dimension
    # along the first grid axis, its rows along the second. For drivers that run
    # work-items in vector lanes (Intel's CPU runtime): neighbouring work-items read
    # neighbouring elements of inputs whose last stride is 1 and share their row, where
    # a flat index's division by the row length hides both and every load is a gather.
    grid: bool = False


def scalar_variant(spec: KernelSpec) -> KernelSpec | None:
    """The same kernel as scalar code (one element per work-item), if `spec` is a vector one."""
    return spec._replace(width=1) if spec.width > 1 else None


def dtypes_of(ops: tuple[TraceOp, ...] | list[TraceOp], scalars: tuple[np.dtype, ...] = ()) -> set[np.dtype]:
    """Every dtype the ops of a trace compute in or produce, with their scalars'."""
    out = set(scalars)
    for op in ops:
        out.add(op.compute)
        out.add(op.out)
    return out


def value_dtype(spec: KernelSpec, ref: tuple[str, int]) -> np.dtype:
    kind, k = ref
    if kind == "i":
        return spec.inputs[k][0]
    if kind == "s":
        return spec.scalars[k]
    return spec.ops[k].out


def kernel_name(spec: KernelSpec) -> str:
    digest = hashlib.sha1(repr(spec).encode()).hexdigest()[:10]
    names = "_".join(op.name for op in spec.ops[:4])
    return re.sub(r"\W", "_", f"fused_{names}")[:60] + f"_{digest}"


def uses_strided(spec: KernelSpec) -> bool:
    return any(cls.startswith("strided") for _, cls in spec.inputs)


def has_metadata(spec: KernelSpec) -> bool:
    return any(cls != "contig" for _, cls in spec.inputs)


def parameters(spec: KernelSpec) -> list[sig.Param]:
    """The kernel's parameters: the size, the metadata (when an input is not
    contiguous), the outputs, the inputs, the scalars."""
    params = [sig.size("n")]
    if has_metadata(spec):
        params.append(sig.meta())
    params += [sig.out(spec.ops[j].out, f"out{m}") for m, j in enumerate(spec.outputs)]
    params += [sig.input_(dtype, f"in{k}") for k, (dtype, _) in enumerate(spec.inputs)]
    params += [sig.scalar(dtype, f"a{k}") for k, dtype in enumerate(spec.scalars)]
    return params


def arg_dtypes(spec: KernelSpec) -> list:
    """pyopencl's scalar argument dtypes for the kernel (None for buffers)."""
    index = np.int32 if spec.index == "int" else np.int64
    buffers = int(has_metadata(spec)) + len(spec.outputs) + len(spec.inputs)
    return [index] + [None] * buffers + list(spec.scalars)


def metadata(
    spec: KernelSpec, dims: tuple[int, ...], layouts: list[tuple[int, tuple[int, ...]]]
) -> tuple[int, ...]:
    """The int64 metadata for one launch: dims, then each input's offset and strides."""
    meta: list[int] = list(dims) if spec.rank else []
    for (_, cls), (offset, strides) in zip(spec.inputs, layouts):
        if cls == "contig":
            continue
        meta.append(offset)
        if cls.startswith("strided"):
            meta.extend(strides)
    return tuple(meta)


def _op_expr(spec: KernelSpec, op: TraceOp, j: int, width: int) -> list[str]:
    """Statements that define value v{j}."""
    args = []
    for ref in op.args:
        src = value_dtype(spec, ref)
        name = f"{'xsv'['isv'.index(ref[0])]}{ref[1]}"
        args.append((name, src))
    T = ex.type_name(op.out, width)
    if op.expr is not None:
        lines = [f"{T} v{j};", "{"]
        for (arg, src), param in zip(args, op.params):
            lines.append(
                f"  const {ex.type_name(op.compute, width)} {param} = "
                f"{ex.cast(arg, src, op.compute, width)};"
            )
        lines.append(f"  v{j} = {ex.cast('(' + op.expr + ')', op.compute, op.out, width)};")
        lines.append("}")
        return lines
    if op.name == "fill":
        return [f"const {T} v{j} = {ex.cast(args[0][0], args[0][1], op.out, width)};"]
    if op.name == "iota":
        idx = "IDX" if width == 1 else f"IDX{width}"
        lanes = ", ".join(str(k) for k in range(width))
        flat = "idx" if width == 1 else f"(({idx})(idx) + ({idx})({lanes}))"
        flat_dtype = dt.int32 if spec.index == "int" else dt.int64
        return [f"const {T} v{j} = {ex.cast(flat, flat_dtype, op.out, width)};"]
    if op.name == "cast":
        return [f"const {T} v{j} = {ex.cast(args[0][0], args[0][1], op.out, width)};"]
    if op.name == "where":
        cond = ex.cast(args[0][0], args[0][1], dt.bool_, width)
        a = ex.cast(args[1][0], args[1][1], op.compute, width)
        b = ex.cast(args[2][0], args[2][1], op.compute, width)
        return [f"const {T} v{j} = {ex.select(cond, a, b, op.compute, width)};"]
    target = dt.bool_ if op.name.startswith("logical_") else op.compute
    cast_args = [ex.cast(a, s, target, width) for a, s in args]
    expr, kind = ex.emit(op.name, cast_args, target, width)
    expr = ex.to_bool(expr, width) if kind is None else ex.cast(expr, kind, op.out, width)
    return [f"const {T} v{j} = {expr};"]


def _body(spec: KernelSpec, width: int) -> list[str]:
    """Loads, ops and stores for the element (or vector) starting at flat index `idx`."""
    lines: list[str] = []
    if spec.rank and uses_strided(spec):
        # The coordinates from the flat index, or, over a grid, the last from the column
        # and the others from the row (see `generate`).
        top, flat = spec.rank - 1, "idx"
        if spec.grid:
            lines.append(f"const IDX c{top} = col;")
            top, flat = top - 1, "row"
        if top >= 0:
            lines.append(f"IDX rem = {flat};")
            for d in range(top, 0, -1):
                lines.append(f"const IDX c{d} = rem % D{d}; rem /= D{d};")
            lines.append("const IDX c0 = rem;")
    for k, (dtype, cls) in enumerate(spec.inputs):
        T = ex.type_name(dtype, width)
        if cls in ("contig", "offset"):
            at = "idx" if cls == "contig" else f"O{k} + idx"
            load = f"in{k}[{at}]" if width == 1 else ex.vload(f"in{k} + {at}", dtype, width)
        elif cls == "scalar":
            load = ex.splat(f"in{k}[O{k}]", dtype, width)
        else:
            lead = spec.shares[k] if spec.shares else k
            if lead == k:
                # (a last stride known to be 1 or 0 is left out of the source: the compiler
                # then sees consecutive or equal addresses along a row)
                r = spec.rank - 1
                last = {"strided1": [f"c{r}"], "strided0": [], "stridedm1": [f"(-c{r})"]}.get(cls, [f"c{r} * S{k}_{r}"])
                walk = " + ".join([f"c{d} * S{k}_{d}" for d in range(r)] + last) or "0"
                lines.append(f"const IDX q{k} = {walk};")
            lines.append(f"const IDX p{k} = O{k} + q{lead};")
            if width == 1 or cls == "strided":
                # Width > 1 only reaches here for strided1 / strided0 / stridedm1 (see `choose_width`).
                load = f"in{k}[p{k}]"
            elif cls == "strided1":
                load = ex.vload(f"in{k} + p{k}", dtype, width)
            elif cls == "stridedm1":  # (a vector of elements read backwards: the compilers make a load and a shuffle)
                load = f"(({T})({', '.join(f'in{k}[p{k} - {i}]' for i in range(width))}))"
            else:
                load = ex.splat(f"in{k}[p{k}]", dtype, width)
        lines.append(f"const {T} x{k} = {load};")
    for k, dtype in enumerate(spec.scalars):
        lines.append(f"const {ex.type_name(dtype, width)} s{k} = {ex.splat(f'a{k}', dtype, width)};")
    for j, op in enumerate(spec.ops):
        lines.extend(_op_expr(spec, op, j, width))
    for m, j in enumerate(spec.outputs):
        if m in spec.single:  # one value, the same at every element: element 0 writes it
            lines.append(f"if (idx == 0) out{m}[0] = v{j}{'' if width == 1 else '.s0'};")
        elif width == 1:
            lines.append(f"out{m}[idx] = v{j};")
        else:
            lines.append(ex.vstore(f"v{j}", f"out{m} + idx", spec.ops[j].out, width))
    return lines


def generate(spec: KernelSpec) -> tuple[str, str]:
    """(source, kernel name) for `spec`."""
    name = kernel_name(spec)
    W = spec.width
    all_dtypes = {d for d, _ in spec.inputs} | dtypes_of(spec.ops, spec.scalars)
    src = ex.prelude(spec.ops, all_dtypes)
    src.append(f"typedef {spec.index} IDX;")
    if W > 1:
        src.append(f"typedef {spec.index}{W} IDX{W};")
        src += ex.vector_access({d for d, _ in spec.inputs} | {spec.ops[j].out for j in spec.outputs}, W)
    src.append(f"__kernel void {name}({sig.declare(parameters(spec))})")
    src.append("{")
    if spec.grid:
        src.append("  const IDX col = (IDX)get_global_id(0), row = (IDX)get_global_id(1);")
    elif not spec.rows:
        src.append(f"  const IDX idx0 = (IDX)get_global_id(0) * {W};")
        src.append("  if (idx0 >= n) return;")
    pos = 0
    if spec.rank and uses_strided(spec):
        for d in range(spec.rank):
            src.append(f"  const IDX D{d} = (IDX)meta[{pos}];")
            pos += 1
    for k, (_, cls) in enumerate(spec.inputs):
        if cls == "contig":
            continue
        src.append(f"  const IDX O{k} = (IDX)meta[{pos}];")
        pos += 1
        if cls.startswith("strided"):
            for d in range(spec.rank):
                src.append(f"  const IDX S{k}_{d} = (IDX)meta[{pos}];")
                pos += 1
    if spec.grid:
        last = f"D{spec.rank - 1}"
        src.append(f"  if (col >= {last}) return;")
        src.append("  {")
        src.append(f"    const IDX idx = row * {last} + col;")
        src.extend("    " + line for line in _body(spec, 1))
        src.append("  }")
    elif spec.rows:
        last = f"D{spec.rank - 1}"
        src.append(f"  const IDX chunks = ({last} + {W - 1}) / {W};")
        src.append("  const IDX gid = (IDX)get_global_id(0);")
        src.append("  const IDX row = gid / chunks;")
        src.append(f"  const IDX col = (gid - row * chunks) * {W};")
        src.append(f"  const IDX idx0 = row * {last} + col;")
        src.append("  if (idx0 >= n) return;")
        src.append(f"  if (col + {W} <= {last}) {{")
        src.append("    const IDX idx = idx0;")
        src.extend("    " + line for line in _body(spec, W))
        src.append("  } else {")
        src.append(f"    for (IDX idx = idx0; idx < idx0 - col + {last}; ++idx) {{")
        src.extend("      " + line for line in _body(spec, 1))
        src.append("    }")
        src.append("  }")
    elif W == 1:
        src.append("  {")
        src.append("    const IDX idx = idx0;")
        src.extend("    " + line for line in _body(spec, 1))
        src.append("  }")
    else:
        src.append(f"  if (idx0 <= n - {W}) {{")  # (idx0 + W could overflow the index type)
        src.append("    const IDX idx = idx0;")
        src.extend("    " + line for line in _body(spec, W))
        src.append("  } else {")
        src.append("    for (IDX idx = idx0; idx < n; ++idx) {")
        src.extend("      " + line for line in _body(spec, 1))
        src.append("    }")
        src.append("  }")
    src.append("}")
    return "\n".join(src) + "\n", name
