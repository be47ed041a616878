"""The element-wise epilogue that reductions and matmul run on each result before writing.

Input 0 of the epilogue is the result itself; the other inputs are read at output
element `o` (contiguous, offset, broadcast scalar, a row vector along the last
dimension, or strided through the output's coordinates). Outputs are value indices, -1
being the result itself.
"""

from __future__ import annotations

from .. import dtypes as dt
from . import elementwise as ew
from .layout import broadcast_strides, classify


def layouts(first_dtype, entries: list, out_shape: tuple[int, ...]):
    """(input classes with input 0 first, metadata layouts of the non-contiguous ones,
    out_rank) for epilogue input entries (input 0 excluded)."""
    classes = [(first_dtype, "contig")]
    metas = []
    for e in entries:
        if e.contiguous and e.ir.shape == out_shape:
            classes.append((e.ir.dtype, "contig"))
            continue
        bs = broadcast_strides(e.ir.shape, e.strides, out_shape)
        cls = classify(out_shape, bs, e.offset)
        if cls == "strided" and bs[-1] == 1 and not any(bs[:-1]):
            # A vector along the last dimension, the same for every row (a bias): its
            # loads depend on the column alone, which a kernel holding several rows of a
            # column (the matmul's) loads once (at 4096^3 on an H200, the product with
            # its bias read through strides took 3.72 ms, by column 3.19).
            cls = "row"
        classes.append((e.ir.dtype, cls))
        metas.append((e.offset, bs if cls == "strided" else ()))
    out_rank = len(out_shape) if any(c in ("strided", "row") for _, c in classes) else 0
    return classes, metas, out_rank


def metadata(metas: list) -> list[int]:
    out: list[int] = []
    for offset, strides in metas:
        out.append(offset)
        out += list(strides)
    return out


def declarations(epi: ew.KernelSpec, out_rank: int, pos: int) -> tuple[list[str], int]:
    """Kernel-start reads of the output dims and the epilogue inputs' layouts from
    `meta`, starting at `pos`; returns the lines and the next position."""
    lines = []
    for d in range(out_rank):
        lines.append(f"  const IDX OD{d} = (IDX)meta[{pos}];")
        pos += 1
    for k in range(1, len(epi.inputs)):
        cls = epi.inputs[k][1]
        if cls == "contig":
            continue
        lines.append(f"  const IDX EO{k} = (IDX)meta[{pos}];")
        pos += 1
        if cls.startswith("strided"):
            for d in range(out_rank):
                lines.append(f"  const IDX ES{k}_{d} = (IDX)meta[{pos}];")
                pos += 1
    return lines, pos


def body(epi: ew.KernelSpec, out_rank: int, value: str, first_param: int, first_scalar: int,
         indent: str, coords: list[str] | None = None) -> list[str]:
    """Loads at output element `o`, the ops, and the stores. Epilogue input k >= 1 is
    kernel parameter `in{first_param + k - 1}`, scalar k is `a{first_scalar + k}`.
    `coords`: lines that declare the output coordinates `oc0`, ... when the caller knows
    them (else they are divided out of `o`)."""
    lines = [f"{indent}const {dt.CL_NAME[epi.inputs[0][0]]} x0 = {value};"]
    if out_rank and coords is not None:
        lines += [indent + line for line in coords]
    elif out_rank:
        lines.append(f"{indent}IDX orem = o;")
        for d in range(out_rank - 1, 0, -1):
            lines.append(f"{indent}const IDX oc{d} = orem % OD{d}; orem /= OD{d};")
        lines.append(f"{indent}const IDX oc0 = orem;")
    for k in range(1, len(epi.inputs)):
        dtype, cls = epi.inputs[k]
        if cls == "contig":
            at = "o"
        elif cls == "offset":
            at = f"EO{k} + o"
        elif cls == "scalar":
            at = f"EO{k}"
        elif cls == "row":
            at = f"EO{k} + oc{out_rank - 1}"
        else:
            at = " + ".join([f"EO{k}"] + [f"oc{d} * ES{k}_{d}" for d in range(out_rank)])
        lines.append(f"{indent}const {dt.CL_NAME[dtype]} x{k} = in{first_param + k - 1}[{at}];")
    for k, dtype in enumerate(epi.scalars):
        lines.append(f"{indent}const {dt.CL_NAME[dtype]} s{k} = a{first_scalar + k};")
    for j, op in enumerate(epi.ops):
        lines += [indent + line for line in ew._op_expr(epi, op, j, 1)]
    for m, ref in enumerate(epi.outputs):
        lines.append(f"{indent}out{m}[o] = {'x0' if ref == -1 else f'v{ref}'};")
    return lines
