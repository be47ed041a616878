"""OpenCL C for cumulative sums and products along C-ordered rows: reduce, then scan.

A row of n elements is cut into chunks; each phase is one kernel:

- `totals`: work-item (row, chunk) folds its chunk into one value, written to a totals
  array of `chunks` values per row;
- `offsets`: work-item `row` turns its row of totals into their exclusive scan, in place
  (what every chunk of the row starts from);
- `write`: work-item (row, chunk) scans its chunk again from its offset and writes each
  prefix. A row of one chunk needs this phase alone (it starts from the identity).

GPUs take the tile phases instead: a work-group per tile of a row (loads and stores that
coalesce), and a work-group per row for the tile totals.

Each element is read twice and written once, and the association differs from a
sequential scan only at chunk boundaries. Values are accumulated in `acc` (double for
float32 where the device has it; for integers the unsigned type of their size, so that
overflow wraps as numpy's does, then read back as the signed type).

A scan may have an element-wise prologue (`prologue`, the trace of the ops that compute
its input): the phases that read the input compute it instead, at each element, from the
prologue's inputs (C-ordered tensors of the scan's shape) and scalars.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

import numpy as np

from .. import dtypes as dt
from . import complex_math
from . import elementwise as ew
from . import expressions as ex
from . import signature as sig

PHASES = ("totals", "offsets", "write")
TILE_PHASES = ("tile_totals", "tile_offsets", "tile_write")  # GPUs: a work-group per tile of a row
IDENTITY = {"sum": "0", "prod": "1"}
OPERATOR = {"sum": "+", "prod": "*"}
# Complex values: the identity of a product is 1 + 0i, and their product no lane-wise one.
COMPLEX_IDENTITY = {"sum": "(0, 0)", "prod": "(1, 0)"}


class ScanSpec(NamedTuple):
    kind: str  # always "scan": keeps these keys apart from other kernels' in the cache
    name: str  # "sum" or "prod"
    phase: str  # one of PHASES
    dtype: np.dtype  # of the input and the output
    acc: np.dtype  # what values accumulate in
    group: int = 0  # tile phases: work-items per work-group (a power of two)
    per_item: int = 0  # tile phases: elements per work-item (a tile holds group * per_item)
    # The element-wise ops that compute the input (the phases that read it), or None: the
    # input is a tensor. Its inputs are "contig"; its outputs, the scanned value and then
    # the values the write phase writes too (needed after the block).
    prologue: ew.KernelSpec | None = None


READS = ("totals", "write", "tile_totals", "tile_write")  # the phases that read the input
WRITES = ("write", "tile_write")  # the phases that write prologue values (each element once)


def _written(spec: ScanSpec) -> tuple[int, ...]:
    """The prologue values this phase writes (value indices)."""
    return spec.prologue.outputs[1:] if spec.prologue is not None and spec.phase in WRITES else ()


def scalar_variant(spec: ScanSpec) -> None:
    """The scan has no vector form to fall back from."""
    return None


def kernel_name(spec: ScanSpec) -> str:
    tile = f"_{spec.group}x{spec.per_item}" if spec.group else ""
    fused = f"_{hashlib.sha1(repr(spec.prologue).encode()).hexdigest()[:10]}" if spec.prologue else ""
    return f"scan_{spec.name}_{spec.phase}_{spec.dtype.name}_{spec.acc.name}{tile}{fused}"


def parameters(spec: ScanSpec) -> tuple[sig.Param, ...]:
    """Input (and its offset), output, the totals (of `chunks` values per row), the row
    length, rows, chunk length and chunks per row."""
    i64 = np.dtype(np.int64)
    sizes = (sig.scalar(i64, "n"), sig.scalar(i64, "rows"), sig.scalar(i64, "chunk"), sig.scalar(i64, "chunks"))
    if spec.phase == "offsets":
        return (sig.raw("out", "__global ACC *totals"), *sizes)
    if spec.phase == "tile_offsets":
        return (sig.raw("out", "__global ACC *totals"), *sizes, sig.raw("local", "__local ACC *carry"))
    local: tuple[sig.Param, ...] = ()
    if spec.phase == "tile_totals":
        local = (sig.raw("local", "__local ACC *part"),)
    elif spec.phase == "tile_write":
        local = (sig.raw("local", "__local ACC *buf"), sig.raw("local", "__local ACC *carry"))
    pro = spec.prologue
    if pro is None:
        reads: tuple[sig.Param, ...] = (sig.raw("input", "__global const T *x"), sig.scalar(i64, "x0"))
    else:
        reads = tuple(sig.input_(dtype, f"in{k}") for k, (dtype, _) in enumerate(pro.inputs))
    scalars = () if pro is None else tuple(sig.scalar(dtype, f"a{k}") for k, dtype in enumerate(pro.scalars))
    writes = tuple(sig.out(pro.ops[j].out, f"w{m}") for m, j in enumerate(_written(spec)))
    return (*reads, sig.raw("out", "__global T *y"), sig.raw("out", "__global ACC *totals"), *writes, *sizes,
            *local, *scalars)


def arg_dtypes(spec: ScanSpec) -> list:
    return sig.arg_dtypes(parameters(spec))


def _acc_type(acc: np.dtype) -> np.dtype:
    """What a scan accumulates `acc` values in: integers in the unsigned type of their
    size (they wrap as numpy's), anything else as itself."""
    return dt.unsigned_of(acc) if dt.is_int(acc) else acc


def _acc_name(acc: np.dtype) -> str:
    return dt.CL_NAME[_acc_type(acc)]


def _store(spec: ScanSpec) -> str:
    """The accumulator as the output type (a reinterpretation for signed integers)."""
    if dt.is_int(spec.dtype) and not dt.is_unsigned(spec.dtype):
        return f"as_{dt.CL_NAME[spec.dtype]}(v)"
    if spec.dtype.kind == "c":  # (OpenCL C casts no vector to another vector type)
        return f"convert_{dt.CL_NAME[spec.dtype]}(v)"
    return "(T)(v)"


def _load(spec: ScanSpec) -> str:
    """An input value as the accumulator type."""
    return f"convert_{dt.CL_NAME[spec.acc]}(v)" if spec.acc.kind == "c" else "(ACC)(v)"


def _identity(spec: ScanSpec) -> str:
    if spec.acc.kind == "c":
        return f"(ACC){COMPLEX_IDENTITY[spec.name]}"
    return f"(ACC){IDENTITY[spec.name]}"


def _combine(spec: ScanSpec) -> str:
    if spec.acc.kind == "c" and spec.name == "prod":
        return complex_math.call("multiply", ["(a)", "(b)"], dt.CL_NAME[dt.real_of(spec.acc)])
    # (1- and 2-byte integers wrap as uint: C would multiply them as int)
    return ex.arithmetic(OPERATOR[spec.name], ["a", "b"], _acc_type(spec.acc), 1)


def _row_input(spec: ScanSpec) -> list[str]:
    """The row's input, which AT(i) reads: a pointer to the tensor's row, or nothing (the
    prologue computes each element, see `_prologue`)."""
    return [] if spec.prologue is not None else ["  __global const T *in = x + x0 + row * n;"]


def _prologue(spec: ScanSpec) -> list[str]:
    """Source defining AT(i), element i of the current row: read, or computed by the
    prologue's ops from its inputs at the element's flat index."""
    pro = spec.prologue
    if pro is None:
        return ["#define AT(i) in[i]"]
    written = _written(spec)
    params = [f"__global const {dt.CL_NAME[d]} *in{k}" for k, (d, _) in enumerate(pro.inputs)]
    params += [f"const {dt.CL_NAME[d]} a{k}" for k, d in enumerate(pro.scalars)]
    params += [f"__global {dt.CL_NAME[pro.ops[j].out]} *w{m}" for m, j in enumerate(written)]
    args = [f"in{k}" for k in range(len(pro.inputs))] + [f"a{k}" for k in range(len(pro.scalars))]
    args += [f"w{m}" for m in range(len(written))]
    lines = [f"static T scan_value({', '.join(['const long idx', *params])})", "{"]
    lines += [f"  const {dt.CL_NAME[d]} x{k} = in{k}[idx];" for k, (d, _) in enumerate(pro.inputs)]
    lines += [f"  const {dt.CL_NAME[d]} s{k} = a{k};" for k, d in enumerate(pro.scalars)]
    for j, op in enumerate(pro.ops):
        lines += ["  " + line for line in ew._op_expr(pro, op, j, 1)]
    lines += [f"  w{m}[idx] = v{j};" for m, j in enumerate(written)]
    lines += [f"  return v{pro.outputs[0]};", "}"]
    return lines + [f"#define AT(i) scan_value(row * n + (i){''.join(', ' + a for a in args)})"]


def _hillis_steele(ident: str) -> list[str]:
    """carry[0..L) becomes its inclusive scan (every work-item of the group takes part)."""
    return [
        "  barrier(CLK_LOCAL_MEM_FENCE);",
        "  for (int d = 1; d < L; d <<= 1) {",
        f"    const ACC left = lid >= d ? carry[lid - d] : {ident};",
        "    barrier(CLK_LOCAL_MEM_FENCE);",
        "    carry[lid] = COMBINE(left, carry[lid]);",
        "    barrier(CLK_LOCAL_MEM_FENCE);",
        "  }",
    ]


def _tile_offsets(spec: ScanSpec) -> list[str]:
    """A work-group per row turns its tile totals into their exclusive scan, L at a time."""
    ident = _identity(spec)
    return [
        f"  const int L = {spec.group};",
        "  const long row = get_group_id(0);",
        "  const int lid = get_local_id(0);",
        "  __global ACC *t = totals + row * chunks;",
        f"  ACC run = {ident};",
        "  for (long b = 0; b < chunks; b += L) {",
        "    const long i = b + lid;",
        f"    carry[lid] = i < chunks ? t[i] : {ident};",
        *["  " + line for line in _hillis_steele(ident)],
        f"    const ACC before = lid > 0 ? carry[lid - 1] : {ident};",
        "    if (i < chunks) t[i] = COMBINE(run, before);",
        "    run = COMBINE(run, carry[L - 1]);",
        "    barrier(CLK_LOCAL_MEM_FENCE);",
        "  }",
    ]


def _tile_body(spec: ScanSpec) -> list[str]:
    """A work-group per tile of `chunk` = L * K elements of a row: loads and stores that
    coalesce (work-item `lid` takes elements lid, lid + L, ...); in `tile_write`, the tile
    is scanned in local memory (each work-item K consecutive elements, then the work-items'
    totals by a Hillis-Steele scan) from the tile's offset."""
    ident = _identity(spec)
    head = [
        f"  const int L = {spec.group}, K = {spec.per_item};",
        "  const long g = get_group_id(0);",
        "  const int lid = get_local_id(0);",
        "  const long row = g / chunks, c = g - row * chunks;",
        "  const long start = c * chunk;",
        *_row_input(spec),
    ]
    if spec.phase == "tile_totals":
        return head + [
            f"  ACC s = {ident};",
            "  for (int j = 0; j < K; ++j) {",
            "    const long i = start + (long)j * L + lid;",
            "    if (i < n) s = COMBINE(s, LOAD(AT(i)));",
            "  }",
            "  part[lid] = s;",
            "  barrier(CLK_LOCAL_MEM_FENCE);",
            "  for (int w = L / 2; w > 0; w >>= 1) {",
            "    if (lid < w) part[lid] = COMBINE(part[lid], part[lid + w]);",
            "    barrier(CLK_LOCAL_MEM_FENCE);",
            "  }",
            "  if (lid == 0) totals[g] = part[0];",
        ]
    return head + [
        "  __global T *out = y + row * n;",
        "  for (int j = 0; j < K; ++j) {",
        "    const long i = start + (long)j * L + lid;",
        f"    buf[j * L + lid] = i < n ? LOAD(AT(i)) : {ident};",
        "  }",
        "  barrier(CLK_LOCAL_MEM_FENCE);",
        f"  ACC s = {ident};",
        "  for (int j = 0; j < K; ++j) {",
        "    s = COMBINE(s, buf[lid * K + j]);",
        "    buf[lid * K + j] = s;",
        "  }",
        "  carry[lid] = s;",
        *_hillis_steele(ident),
        f"  ACC before = lid > 0 ? carry[lid - 1] : {ident};",
        "  if (chunks > 1) before = COMBINE(totals[g], before);",
        "  for (int j = 0; j < K; ++j) buf[lid * K + j] = COMBINE(before, buf[lid * K + j]);",
        "  barrier(CLK_LOCAL_MEM_FENCE);",
        "  for (int j = 0; j < K; ++j) {",
        "    const long i = start + (long)j * L + lid;",
        "    if (i < n) { const ACC v = buf[j * L + lid]; out[i] = STORE(v); }",
        "  }",
    ]


def generate(spec: ScanSpec) -> tuple[str, str]:
    """OpenCL C source of `spec`'s kernel and the kernel's name."""
    name = kernel_name(spec)
    pro = spec.prologue
    if pro is not None and spec.phase in READS:
        dtypes = {spec.dtype, spec.acc, *ew.dtypes_of(pro.ops, pro.scalars), *(d for d, _ in pro.inputs)}
        src = ex.prelude(pro.ops, dtypes)
    else:
        src = dt.fp64_pragma((spec.dtype, spec.acc))
    if spec.acc.kind == "c" and spec.name == "prod":
        src.append(complex_math.source(["multiply"], dt.CL_NAME[dt.real_of(spec.acc)]))
    src += [
        f"typedef {dt.CL_NAME[spec.dtype]} T;",
        f"typedef {_acc_name(spec.acc)} ACC;",
        f"#define COMBINE(a, b) ({_combine(spec)})",
        f"#define STORE(v) {_store(spec)}",
        f"#define LOAD(v) {_load(spec)}",
        *(_prologue(spec) if spec.phase in READS else []),
        f"__kernel void {name}({sig.declare(parameters(spec))})",
        "{",
    ]
    if spec.phase == "offsets":
        src += [
            "  const long row = get_global_id(0);",
            "  if (row >= rows) return;",
            "  __global ACC *t = totals + row * chunks;",
            f"  ACC s = {_identity(spec)};",
            "  for (long c = 0; c < chunks; ++c) {",
            "    const ACC here = t[c];",
            "    t[c] = s;",
            "    s = COMBINE(s, here);",
            "  }",
            "}",
        ]
        return "\n".join(src) + "\n", name
    if spec.phase == "tile_offsets":
        return "\n".join(src + _tile_offsets(spec) + ["}"]) + "\n", name
    if spec.phase in ("tile_totals", "tile_write"):
        return "\n".join(src + _tile_body(spec) + ["}"]) + "\n", name
    src += [
        "  const long item = get_global_id(0);",
        "  if (item >= rows * chunks) return;",
        "  const long row = item / chunks, c = item - row * chunks;",
        "  const long start = c * chunk;",
        "  const long stop = min(n, start + chunk);",
        *_row_input(spec),
    ]
    if spec.phase == "totals":
        src += [
            f"  ACC s = {_identity(spec)};",
            "  for (long i = start; i < stop; ++i) s = COMBINE(s, LOAD(AT(i)));",
            "  totals[item] = s;",
            "}",
        ]
    else:
        src += [
            f"  ACC s = chunks > 1 ? totals[item] : {_identity(spec)};",
            "  __global T *out = y + row * n;",
            "  for (long i = start; i < stop; ++i) {",
            "    s = COMBINE(s, LOAD(AT(i)));",
            "    out[i] = STORE(s);",
            "  }",
            "}",
        ]
    return "\n".join(src) + "\n", name
