"""OpenCL C for a (batched) matrix product with its element-wise epilogue fused in.

A work-group of 16 x 16 work-items computes a 64 x 64 (or 128 x 128) tile of the output,
each work-item a 4 x 4 (8 x 8) block of rows and columns held in registers; tiles of A
and B, a K step deep, are staged in local memory, so every element loaded from global
memory is used 64 (128) times, and each work-item reads its share of a step as vectors.
Operands whose rows or columns are contiguous and aligned ("aligned tiles", see
ALIGNED_TILES) are read from global memory as 4-wide vectors, with a depth per layout
measured on the device; others element by element.
Operands are read through their strides (a transposed view costs no copy) and batch
dimensions broadcast. The epilogue (bias, activation, ...) runs on each result before
it is written, so `maximum(a @ w + bias, 0)` is one kernel.
"""

from __future__ import annotations

import functools
import hashlib
from typing import NamedTuple

import numpy as np

from .. import dtypes as dt
from . import complex_math
from . import elementwise as ew
from . import epilogue as ep
from . import expressions as ex
from . import signature as sig

TK = 8  # depth of a K step (8 ran 1.2x faster than 16 or 32 on an H200: less local memory, more groups per unit)
LOCAL = 16  # work-items per side of a work-group (the tile side / LOCAL outputs per work-item)


# The "rows" strategy (CPUs), per vector register size in bytes: (rows per register
# block, register blocks per work-item, depth of a step of K, vector registers across the
# columns); `rows_layout`. Large products read B from panels (codegen/panels.py).
# 64 (AVX-512 where the driver compiles 512-bit vectors right). PoCL 3.0, AMD Zen 5, 2
# cores, 1024^3 float32: 8 rows (19 of 32 registers) x 2 vectors, 8 blocks, depth 64 ran
# at 200 to 250 GFLOP/s against 15 to 30 for 8 x 16 outputs per work-item read straight
# from B. PoCL 3.0 on a 2-core Intel Xeon (AVX-512), B in panels, kernel time, medians of
# 7 to 9, one process per line (a probe of this kernel's loops; rows x vectors, rows per
# work-item, depth 128): at 1152^3 8 x 2, 64 rows 13.2 ms; 8 x 3, 96 rows 12.2; 6 x 4,
# 48 rows 12.4, 72 rows 12.2, 96 rows 12.2 (numpy 10.6 to 11.0); at 1024^3 8 x 2, 64
# rows 10.2 ms; 6 x 4, 96 rows 7.3 for 960 of the rows (depth 256: 7.5). In the library
# at 1024^3: 7.5 to 8.0 ms, and the copy into panels 0.25 to 0.35. 6 x 4 (24
# accumulators, 4 vectors of B and a broadcast of A: 29 registers) fills whole panels at
# sizes that are powers of 2, which 3 vectors (48 columns) do not.
# 32 (AVX2, or AVX-512 machines whose driver gets 512-bit vectors wrong: PoCL 3.0 on AMD
# Zen 4, 2 cores; maximum(a @ w + bias, 0) float32, medians of 12, numpy alongside):
# 6 rows (15 of AVX2's 16 registers); 8 rows and more spilled (33 ms at 1024^3 against
# 16). Blocks x depth at 1024^3: 8 x 64 15.3 ms (numpy 11.5), 8 x 128 13.7, 8 x 256 13.7,
# 16 x 64 14.1, 16 x 128 13.0, 16 x 256 13.9, 24 x 128 13.9; at 2048^3 8 x 64 161 ms,
# 16 x 128 121, 16 x 256 123 (numpy 89 to 91); at 512^3 3.5, 2.5 and 2.5 ms. Longer
# steps and more rows per work-item read B's slices from memory fewer times (these
# before B was read from panels; on the Intel Xeon with 32-byte vectors forced, 6 x 2 at
# 1024^3: 13.1 ms with B in panels against 14.2 copying it, medians of 14, alternated).
# With B in panels, steps of K 512 deep: PoCL 3.0 on the 2-core Zen 4, 16 blocks, wall
# ms against numpy's in the same process (7 of each in turn, three rounds, medians; two
# processes per line), depth 128 / 256 / 512: at 1024^3 11.5, 11.2 / 11.0, 10.9 / 10.8,
# 10.9 (numpy 10.8 to 11.3); at 1536^3 37.6, 37.4 / 36.9, 36.4 / 35.9, 35.5 (numpy 36);
# at 2048^3 96.9, 90.2 / 88.3, 86.4 / 85.3, 85.1 (numpy 89.5 to 93). 8 blocks at 512:
# 11.9, 13.0; 24 blocks at 128: 12.3, 12.7. A work-item copying its own panel (small
# products) keeps steps of 128: the panel is a private array of a step's rows. On
# Intel's CPU runtime (64-byte vectors) the depth changed nothing measurable.
ROWS_TUNING = {64: (6, 16, 128, 4), 32: (6, 16, 128, 2)}
ROWS_NARROW = (6, 8, 64, 2)  # narrower vectors (not measured since the table was made)
ROWS_PANEL_KSTEP = {32: 512}  # the depth of a step of K where B is read from panels, if not the table's


# Aligned tiles (GPUs): (depth of a K step, double-buffered) to try in order, per output
# tile side and operand layout ("kn": A contiguous along k, i.e. row-major, B along n; "m"
# for A, "k" for B: the transposed forms). The first depth that divides K, fills whole
# vectors for every work-item and fits the device's local memory is taken. Measured on an
# NVIDIA H200 (driver 580.159.04), 4096^3 float32, kernel time; cuBLAS with TF32 off takes
# 2.69 to 2.74 ms for the product, 2.81 to 2.86 ms for addmm + relu:
#   A along m, B along n (a standalone sweep, product only): depth 8 double-buffered
#     3.06 ms (0.88x cuBLAS); 16 3.36, 16 double 3.29, 32 3.32; 8 single 3.43. In this
#     kernel with bias + relu fused: 3.05 ms (0.92x cuBLAS's addmm + relu).
#   A along k, B along n, with bias + relu fused: depth 16 double-buffered 3.47 ms (0.81x),
#     8 double 3.50, 16 single 3.55, 32 single 4.08 (3.57 for the product alone: its
#     epilogue costs 0.5 ms more, where the others' costs nothing). Standalone, product
#     only: 32 single 3.42, 16 double 3.43. Swizzled stores into local memory (no bank
#     conflicts) gained nothing; nor did passing the results through local memory to a
#     row-ordered epilogue (4.11 ms, and 4.07 for the product alone), nor capping the
#     registers at 128.
#   The element-by-element tiled kernel: 4.46 ms (0.61x).
# The two transposed-B layouts take A along k's table. Tiles of 64 need a depth of 16 or
# more (a K step of a 64-wide tile is 256 vectors: one per work-item).
ALIGNED_TILES = {
    (128, "mn"): ((8, True), (16, True), (32, False)),
    (128, "kn"): ((16, True), (8, True), (32, False)),
    (128, "mk"): ((16, True), (8, True), (32, False)),
    (128, "kk"): ((16, True), (8, True), (32, False)),
    (64, "mn"): ((16, True), (32, False)),
    (64, "kn"): ((16, True), (32, False)),
    (64, "mk"): ((16, True), (32, False)),
    (64, "kk"): ((16, True), (32, False)),
}
ALIGNED_VECTOR = 4  # elements per global load of an aligned tile


FIXED_BINDINGS = 7  # parameters every matmul kernel has: M, N, K, nbatch, meta, A, B


class MatmulSpec(NamedTuple):
    dtype: np.dtype  # operands and accumulator
    epilogue: ew.KernelSpec  # input 0 is the product; outputs: -1 for the product itself
    batch_rank: int
    index: str
    out_rank: int  # for strided epilogue inputs (0 if none)
    strategy: str = "tiled"  # "tiled" (GPUs) or "rows" (CPUs)
    tile: int = 64  # tiled: output tile side per work-group (64, or 128 for large products)
    vector_bytes: int = 64  # rows: bytes of the CPU's vector registers (64: AVX-512)
    operands: str = ""  # tiled: "" (element by element) or an ALIGNED_TILES layout ("kn", ...)
    depth: int = TK  # tiled: elements of K per step
    double_buffer: bool = False  # tiled, aligned: the next step's tiles load while this one computes
    b_panels: bool = False  # rows: B arrives copied into panels of the strip's columns (codegen/panels.py)


def aligned_tiles(dtype: np.dtype, tile: int, a: tuple[int, int, int], b: tuple[int, int, int],
                  batch: list[tuple[int, int, int]], m: int, n: int, k: int,
                  local_bytes: int) -> tuple[str, int, bool] | None:
    """(operands, depth, double_buffer) of the aligned tiled kernel for operands with
    layouts `a` = (offset, row stride, column stride) of A (m x k), `b` likewise of B
    (k x n) and `batch` = (size, A's stride, B's stride) per batch dimension, or None when
    the element-by-element kernel must read them: a 4-byte dtype, each operand contiguous
    along one of its dimensions, every other offset and stride a whole number of vectors
    (each vector load is aligned), the vector dimension a multiple of the vector (rows
    past the edge are clamped to the last whole vector), a depth that divides K."""
    v = ALIGNED_VECTOR
    if np.dtype(dtype).itemsize != 4 or min(m, n, k) == 0:
        return None
    (off_a, s_am, s_ak), (off_b, s_bk, s_bn) = a, b
    kind_a = "k" if s_ak == 1 and s_am % v == 0 else "m" if s_am == 1 and s_ak % v == 0 and m % v == 0 else None
    kind_b = "n" if s_bn == 1 and s_bk % v == 0 and n % v == 0 else "k" if s_bk == 1 and s_bn % v == 0 else None
    if kind_a is None or kind_b is None or off_a % v or off_b % v or any(sa % v or sb % v for _, sa, sb in batch):
        return None
    operands = kind_a + kind_b
    for depth, double in ALIGNED_TILES.get((tile, operands), ()):
        local = (2 if double else 1) * 2 * depth * (tile + 4) * np.dtype(dtype).itemsize
        if k % depth == 0 and tile * depth % (v * LOCAL * LOCAL) == 0 and local <= local_bytes:
            return operands, depth, double
    return None


def scalar_variant(spec: MatmulSpec) -> MatmulSpec | None:
    """The "rows" kernel with scalar accumulators (the tiled one has no scalar form)."""
    scalar_bytes = np.dtype(spec.dtype).itemsize
    if spec.strategy != "rows" or spec.vector_bytes <= scalar_bytes:
        return None
    return spec._replace(vector_bytes=scalar_bytes)


def kernel_name(spec: MatmulSpec) -> str:
    return "matmul_" + hashlib.sha1(repr(spec).encode()).hexdigest()[:10]


def arg_dtypes(spec: MatmulSpec) -> list:
    index = np.int32 if spec.index == "int" else np.int64
    buffers = 1 + len(spec.epilogue.outputs) + 2 + len(spec.epilogue.inputs) - 1
    return [index, index, index, index] + [None] * buffers + list(spec.epilogue.scalars)


@functools.lru_cache(maxsize=1024)
def parameters(spec: MatmulSpec) -> tuple[sig.Param, ...]:
    """The kernel's parameters: M, N, K, the batch count, the metadata, the outputs,
    A and B, the epilogue's other inputs, its scalars."""
    epi = spec.epilogue
    params = [sig.size("M"), sig.size("N"), sig.size("K"), sig.size("nbatch"), sig.meta()]  # (and A, B: FIXED_BINDINGS)
    params += [sig.out(epi.inputs[0][0] if ref == -1 else epi.ops[ref].out, f"out{m}")
               for m, ref in enumerate(epi.outputs)]
    params += [sig.input_(spec.dtype, "A"), sig.input_(spec.dtype, "B")]
    params += [sig.input_(epi.inputs[k][0], f"in{k}") for k in range(1, len(epi.inputs))]
    params += [sig.scalar(sdt, f"a{k}") for k, sdt in enumerate(epi.scalars)]
    return tuple(params)


def metadata(a_layout: tuple[int, int, int], b_layout: tuple[int, int, int], batch: list[tuple[int, int, int]],
             out_shape: tuple[int, ...], out_rank: int, epi_layouts: list) -> tuple[int, ...]:
    """The int64 metadata of a launch, in the order the kernel reads it: A's offset and
    row and column strides, B's, per batch dimension (size, A's stride, B's stride), the
    output's dims when an epilogue input is strided, the epilogue inputs' layouts."""
    meta = [*a_layout, *b_layout]
    for d in batch:
        meta += list(d)
    if out_rank:
        meta += list(out_shape)
    return tuple(meta + ep.metadata(epi_layouts))


def generate(spec: MatmulSpec) -> tuple[str, str]:
    name = kernel_name(spec)
    TILE = spec.tile
    WPT = TILE // LOCAL
    t = dt.CL_NAME[spec.dtype]
    epi = spec.epilogue
    types = {spec.dtype} | {d for d, _ in epi.inputs} | set(epi.scalars) | {op.out for op in epi.ops}
    types |= {op.compute for op in epi.ops}
    # (complex products: the product of two values is the multiply op's)
    product = (ew.TraceOp("multiply", spec.dtype, spec.dtype, ()),) if spec.dtype.kind == "c" else ()
    src = ex.prelude(epi.ops + product, types)
    src.append(f"typedef {spec.index} IDX;")
    rows = spec.strategy == "rows"
    if not rows:
        src.append(f"__kernel __attribute__((reqd_work_group_size({LOCAL}, {LOCAL}, 1)))")
    else:
        src.append("__kernel")
    src.append(f"void {name}({sig.declare(parameters(spec))})")
    src.append("{")
    if rows:
        layout = rows_layout(spec)
        src.append(f"  const IDX col0 = (IDX)get_global_id(0) * {layout.cols}, "
                   f"row0 = (IDX)get_global_id(1) * {layout.rows};")
        src.append("  const IDX batch = (IDX)get_global_id(2);")
        src.append("  if (col0 >= N || row0 >= M) return;")
    else:
        src.append("  const int tx = get_local_id(0), ty = get_local_id(1);")
        src.append(f"  const IDX col0 = (IDX)get_group_id(0) * {TILE}, row0 = (IDX)get_group_id(1) * {TILE};")
        src.append("  const IDX batch = (IDX)get_group_id(2);")
    # Metadata: A offset and its row/col strides, B likewise, then batch dims with the
    # batch strides of A and B, then output dims, then strided epilogue inputs.
    src.append("  IDX offA = (IDX)meta[0], offB = (IDX)meta[3];")
    src.append("  const IDX sAm = (IDX)meta[1], sAk = (IDX)meta[2], sBk = (IDX)meta[4], sBn = (IDX)meta[5];")
    pos = 6
    if spec.batch_rank:
        src.append("  IDX brem = batch;")
        for d in range(spec.batch_rank - 1, -1, -1):
            dim, sa, sb = pos + 3 * d, pos + 3 * d + 1, pos + 3 * d + 2
            src.append(f"  {{ const IDX bd = (IDX)meta[{dim}]; const IDX c = brem % bd; brem /= bd;")
            src.append(f"    offA += c * (IDX)meta[{sa}]; offB += c * (IDX)meta[{sb}]; }}")
        pos += 3 * spec.batch_rank
    decls, pos = ep.declarations(epi, spec.out_rank, pos)
    src += decls
    if rows or spec.operands:
        src += _rows_body(spec, t) if rows else _aligned_body(spec, t)
        src.append("}")
        return "\n".join(src) + "\n", name
    # A is staged transposed (As[k][i]), B as is (Bs[k][j]). Each work-item owns WPT
    # consecutive rows and columns, so it reads its operands of a K step from local memory
    # as 4-wide vectors: a few wide loads per WPT x WPT multiply-adds. Rows are padded by
    # 4 elements: the transposing stores spread over the banks, and every 4-element group
    # a work-item reads stays aligned to its vector size (rows of TILE + 4 elements).
    pad = TILE + 4
    vec = f"{t}4"
    src.append(f"  __local {t} As[{TK}][{pad}] __attribute__((aligned(64)));")
    src.append(f"  __local {t} Bs[{TK}][{pad}] __attribute__((aligned(64)));")
    src.append(f"  {t} acc[{WPT}][{WPT}];")
    src.append(f"  for (int i = 0; i < {WPT}; ++i) for (int j = 0; j < {WPT}; ++j) acc[i][j] = ({t})0;")
    src.append("  const int lin = ty * 16 + tx;")
    src.append(f"  for (IDX k0 = 0; k0 < K; k0 += {TK}) {{")
    per = TILE * TK // (LOCAL * LOCAL)
    src.append(f"    for (int l = 0; l < {per}; ++l) {{")
    src.append(f"      const int e = lin + l * {LOCAL * LOCAL};")
    src.append(f"      const int ai = e / {TK}, ak = e % {TK};")
    src.append("      const IDX gi = row0 + ai, gk = k0 + ak;")
    src.append(f"      As[ak][ai] = (gi < M && gk < K) ? A[offA + gi * sAm + gk * sAk] : ({t})0;")
    src.append(f"      const int bk = e / {TILE}, bj = e % {TILE};")
    src.append("      const IDX gk2 = k0 + bk, gj = col0 + bj;")
    src.append(f"      Bs[bk][bj] = (gk2 < K && gj < N) ? B[offB + gk2 * sBk + gj * sBn] : ({t})0;")
    src.append("    }")
    src.append("    barrier(CLK_LOCAL_MEM_FENCE);")
    src.append(f"    for (int k = 0; k < {TK}; ++k) {{")
    src.append(f"      {t} a[{WPT}], b[{WPT}];")
    if spec.dtype.kind == "c":  # (a complex value is a vector already: element by element)
        src.append(f"      for (int q = 0; q < {WPT}; ++q) {{ a[q] = As[k][ty * {WPT} + q]; "
                   f"b[q] = Bs[k][tx * {WPT} + q]; }}")
        product = complex_math.call("multiply", ["a[i]", "b[j]"], dt.CL_NAME[dt.real_of(spec.dtype)])
        fold = f"acc[i][j] += {product};"
    else:
        for q in range(0, WPT, 4):
            src.append(f"      vstore4(*(__local const {vec}*)&As[k][ty * {WPT} + {q}], 0, a + {q});")
            src.append(f"      vstore4(*(__local const {vec}*)&Bs[k][tx * {WPT} + {q}], 0, b + {q});")
        fold = _fold_product(spec.dtype)
    src.append(f"      for (int i = 0; i < {WPT}; ++i) for (int j = 0; j < {WPT}; ++j) {fold}")
    src.append("    }")
    src.append("    barrier(CLK_LOCAL_MEM_FENCE);")
    src.append("  }")
    src += _outputs(spec, WPT, WPT, f"ty * {WPT} + wi", f"tx * {WPT} + wj")
    src.append("}")
    return "\n".join(src) + "\n", name


def _aligned_body(spec: MatmulSpec, t: str) -> list[str]:
    """The tiled kernel for aligned operands (see aligned_tiles). Each work-item loads the
    same few 4-wide vectors of A and B at every K step, so their addresses are pointers
    set up once and advanced by a step; a vector along k is stored into local memory
    transposed (As[k][m], Bs[k][n]: the compute loop reads both along its outputs).
    A work-item's outputs are groups of 4 rows (columns) 64 apart, not 8 consecutive ones:
    the 16 work-items of a row of the work-group then read 64 consecutive elements of
    local memory per vector load, with no bank conflicts.
    Double-buffered: the next step's vectors are loaded into registers before this step
    computes, and stored into the other buffer after it, one barrier per step."""
    T, D, vec = spec.tile, spec.depth, f"{t}4"
    wpt, groups = T // LOCAL, T // LOCAL // 4
    per = T * D // ALIGNED_VECTOR // (LOCAL * LOCAL)  # vectors of A (and of B) per work-item per step
    kind_a, kind_b = spec.operands
    nb = 2 if spec.double_buffer else 1
    lines = ["  const int tid = ty * 16 + tx;",
             f"  __local {t} As[{nb}][{D}][{T + 4}] __attribute__((aligned(16)));",
             f"  __local {t} Bs[{nb}][{D}][{T + 4}] __attribute__((aligned(16)));",
             f"  {t} acc[{wpt}][{wpt}];",
             f"  for (int i = 0; i < {wpt}; ++i) for (int j = 0; j < {wpt}; ++j) acc[i][j] = ({t})0;"]
    stores = []
    for name, kind, base, start, cap, s_outer, s_k in (("a", kind_a, "A", "row0", "M", "sAm", "sAk"),
                                                       ("b", kind_b, "B", "col0", "N", "sBn", "sBk")):
        local, off = name.upper() + "s", "off" + name.upper()
        for q in range(per):
            e = f"(tid + {q * LOCAL * LOCAL})"
            r, kk, p = f"{name}r{q}", f"{name}k{q}", f"p{name}{q}"
            if kind == "k":  # a vector along k of one row (column): stored transposed
                lines.append(f"  const int {r} = {e} / {D // 4}, {kk} = {e} % {D // 4} * 4;")
                at = f"min({start} + {r}, {cap} - 1) * {s_outer} + {kk}"
                lines.append(f"  __global const {t}* {p} = {base} + {off} + {at};")
                stores.append((q, [f"{local}[BUF][{kk} + {j}][{r}] = r{name}{q}.s{j};" for j in range(4)]))
            else:  # a vector along the output dimension, one k
                lines.append(f"  const int {kk} = {e} / {T // 4}, {r} = {e} % {T // 4} * 4;")
                at = f"{kk} * {s_k} + min({start} + {r}, {cap} - 4)"
                lines.append(f"  __global const {t}* {p} = {base} + {off} + {at};")
                stores.append((q, [f"vstore4(r{name}{q}, 0, &{local}[BUF][{kk}][{r}]);"]))
        step = D if kind == "k" else f"{D} * {s_k}"
        lines.append(f"  const IDX step_{name} = {step};")
    names = [f"r{n}{q}" for n in "ab" for q in range(per)]
    lines.append(f"  {vec} {', '.join(names)};")
    load = [f"{r} = vload4(0, p{r[1:]}); p{r[1:]} += step_{r[1]};" for r in names]
    store = {buf: [line.replace("BUF", buf) for _, block in stores for line in block]
             for buf in ("0", "cur", "cur ^ 1")}
    compute = ["    #pragma unroll", f"    for (int k = 0; k < {D}; ++k) {{", f"      {t} a[{wpt}], b[{wpt}];"]
    for g in range(groups):
        compute.append(f"      vstore4(vload4(0, &As[BUF][k][{g * 64} + ty * 4]), 0, a + {4 * g});")
        compute.append(f"      vstore4(vload4(0, &Bs[BUF][k][{g * 64} + tx * 4]), 0, b + {4 * g});")
    fold = _fold_product(spec.dtype)
    compute += [f"      for (int i = 0; i < {wpt}; ++i) for (int j = 0; j < {wpt}; ++j) {fold}", "    }"]
    if spec.double_buffer:
        lines += ["  " + x for x in load] + ["  " + x for x in store["0"]]
        lines += ["  barrier(CLK_LOCAL_MEM_FENCE);", "  int cur = 0;",
                  f"  for (IDX k0 = 0; k0 < K; k0 += {D}) {{",
                  f"    const bool more = k0 + {D} < K;",
                  "    if (more) {"] + ["      " + x for x in load] + ["    }"]
        lines += [x.replace("BUF", "cur") for x in compute]
        lines += ["    if (more) {"] + ["      " + x for x in store["cur ^ 1"]] + ["    }"]
        lines += ["    barrier(CLK_LOCAL_MEM_FENCE);", "    cur ^= 1;", "  }"]
    else:
        lines += [f"  for (IDX k0 = 0; k0 < K; k0 += {D}) {{"] + ["    " + x for x in load]
        lines += ["    " + x for x in store["0"]] + ["    barrier(CLK_LOCAL_MEM_FENCE);"]
        lines += [x.replace("BUF", "0") for x in compute] + ["    barrier(CLK_LOCAL_MEM_FENCE);", "  }"]
    return lines + _outputs(spec, wpt, wpt, "(wi / 4) * 64 + ty * 4 + wi % 4", "(wj / 4) * 64 + tx * 4 + wj % 4")


def _outputs(spec: MatmulSpec, rows: int, cols: int, row: str, col: str) -> list[str]:
    """The loop over a work-item's rows x cols results acc[wi][wj] that runs the epilogue
    on each and writes it: `row` and `col` give its row and column within the tile, in
    terms of wi and wj; results past the edges are not written."""
    return [f"  for (int wi = 0; wi < {rows}; ++wi) for (int wj = 0; wj < {cols}; ++wj) {{",
            f"    const IDX i = row0 + {row}, j = col0 + {col};",
            "    if (i >= M || j >= N) continue;",
            "    const IDX o = (batch * M + i) * N + j;",
            *_epilogue(spec, "acc[wi][wj]", "    "),
            "  }"]


def _epilogue(spec: MatmulSpec, value: str, indent: str) -> list[str]:
    """The epilogue and stores for output element `o` (row i, column j) whose product is
    `value`. Strided epilogue inputs take the coordinates from i, j and the batch index,
    not from divisions of `o` (each costs as much as many multiply-adds on a CPU)."""
    coords = None
    rank = spec.out_rank
    if rank:
        coords = ["IDX orem = batch;"]
        for d in range(rank - 3, 0, -1):
            coords.append(f"const IDX oc{d} = orem % OD{d}; orem /= OD{d};")
        if rank > 2:
            coords.append("const IDX oc0 = orem;")
        coords += [f"const IDX oc{rank - 2} = i;", f"const IDX oc{rank - 1} = j;"]
    return ep.body(spec.epilogue, rank, value, 1, 0, indent, coords)


def _rows_body(spec: MatmulSpec, t: str) -> list[str]:
    """CPU strategy: each work-item owns `rows` x `cols` outputs (`cols`: `vectors` vector
    registers of elements; see rows_layout), held in a private array. K is walked in
    steps of `kstep`; in each, the work-item sweeps its rows `micro` at a time, holding
    micro x vectors accumulators in registers while it streams that step's slice of its
    strip of B, and one element of each of the micro rows of A, broadcast.
    B's strip is read from panels (`b_panels`: a copy made first, codegen/panels.py) or,
    for products too small for the copy to pay, copied by the work-item itself into a
    private, aligned panel at each step (padding columns past N with zeros). That is what
    BLAS libraries call packing: rows of B lie a whole row of the matrix apart (4 KiB for
    a 1024-wide float32 matrix), so reading them directly missed the caches and their
    prefetchers on every step; a panel is read contiguously. No local memory or barriers,
    which CPU drivers emulate slowly.
    Floating-point products are contracted into fma instructions by the compiler
    (FP_CONTRACT ON in the inner loop): on PoCL the fma() built-in on vectors is a
    function call, not an instruction."""
    cols, rows, micro, kstep, vectors = rows_layout(spec)
    width = cols // vectors
    vec = t if width == 1 else f"{t}{width}"
    lines = [f"  {t} acc[{rows}][{cols}] __attribute__((aligned(64)));",
             f"  for (int i = 0; i < {rows}; ++i) for (int j = 0; j < {cols}; ++j) acc[i][j] = ({t})0;"]
    if spec.b_panels:  # (this strip's panel: K rows of `cols` elements; see codegen/panels.py)
        lines.append(f"  __global const {t}* strip = B + (IDX)get_global_id(0) * K * {cols};")
    else:
        lines.append(f"  {t} panel[{kstep}][{cols}] __attribute__((aligned(64)));")
    lines += [f"  for (IDX k0 = 0; k0 < K; k0 += {kstep}) {{",
              f"    const int kc = (int)min((IDX){kstep}, K - k0);"]
    if spec.b_panels:
        lines.append(f"    __global const {t}* panel = strip + k0 * {cols};")
        b_row = f"(__global const {vec}*)&panel[kk * {cols} + {{}}]"
    else:
        lines += [f"    if (sBn == 1 && col0 + {cols} <= N) {{",
                  "      for (int kk = 0; kk < kc; ++kk) {",
                  f"        __global const {t}* src = B + offB + (k0 + kk) * sBk + col0;",
                  f"        for (int j = 0; j < {cols}; ++j) panel[kk][j] = src[j];",
                  "      }",
                  f"    }} else if (sBk == 1 && col0 + {cols} <= N) {{",
                  *_transposed_panel(t, cols),
                  "    } else {",
                  f"      for (int kk = 0; kk < kc; ++kk) for (int j = 0; j < {cols}; ++j)",
                  f"        panel[kk][j] = col0 + j < N ? B[offB + (k0 + kk) * sBk + (col0 + j) * sBn] : ({t})0;",
                  "    }"]
        b_row = f"({vec}*)&panel[kk][{{}}]"
    lines.append(f"    for (int rb = 0; rb < {rows} && row0 + rb < M; rb += {micro}) {{")
    for r in range(micro):
        # Rows past M read row M - 1 (in bounds); their results are never written.
        lines.append(f"      __global const {t}* arow{r} = A + offA + min(row0 + rb + {r}, M - 1) * sAm + k0 * sAk;")
        for w in range(vectors):
            lines.append(f"      {vec} c{r}_{w} = *({vec}*)&acc[rb + {r}][{w * width}];")
    lines.append("      for (int kk = 0; kk < kc; ++kk) {")
    if dt.is_float(spec.dtype):
        lines.append("        #pragma OPENCL FP_CONTRACT ON")
    for w in range(vectors):
        lines.append(f"        const {vec} b{w} = *{b_row.format(w * width)};")
    for r in range(micro):
        lines.append(f"        const {vec} x{r} = ({vec})(arow{r}[kk * sAk]);")
        for w in range(vectors):
            lines.append(f"        c{r}_{w} = {_multiply_add(spec.dtype, f'x{r}', f'b{w}', f'c{r}_{w}', width)};")
    lines.append("      }")
    for r in range(micro):
        for w in range(vectors):
            lines.append(f"      *({vec}*)&acc[rb + {r}][{w * width}] = c{r}_{w};")
    lines.append("    }")
    lines.append("  }")
    return lines + _outputs(spec, rows, cols, "wi", "wj")


def _transposed_panel(t: str, cols: int) -> list[str]:
    """The rows kernel's panel copy for a B whose columns are contiguous (a `.T` view):
    down each column, `group` columns at a time. Across the rows of B instead, as for a
    row-major B, every load was a column apart (A @ B^T at 1024^3 on Intel's CPU runtime,
    Zen 5: 17.4 ms that way, 13.6 one column at a time, 12.7 four at a time; A @ B 9.4)."""
    group = 4 if cols % 4 == 0 else 1
    lines = [f"      for (int j = 0; j < {cols}; j += {group}) {{",
             f"        __global const {t}* s0 = B + offB + k0 + (col0 + j) * sBn;"]
    lines += [f"        __global const {t}* s{g} = s{g - 1} + sBn;" for g in range(1, group)]
    lines.append("        for (int kk = 0; kk < kc; ++kk) {")
    lines += [f"          panel[kk][j + {g}] = s{g}[kk];" for g in range(group)]
    return lines + ["        }", "      }"]


class RowsLayout(NamedTuple):
    """The "rows" strategy's work-item: `cols` output columns (`vectors` vector
    registers), `rows` output rows, `micro` rows per register block, steps of K `kstep`
    deep."""

    cols: int
    rows: int
    micro: int
    kstep: int
    vectors: int


def rows_layout(spec: MatmulSpec) -> RowsLayout:
    """The rows strategy's layout for `spec` (ROWS_TUNING). A register block holds micro x
    vectors accumulators, plus the vectors of B and one broadcast of A."""
    width = min(16, max(1, spec.vector_bytes // np.dtype(spec.dtype).itemsize))
    vector_bytes = min(spec.vector_bytes, 64)
    micro, blocks, kstep, vectors = ROWS_TUNING.get(vector_bytes, ROWS_NARROW)
    if spec.b_panels:
        kstep = ROWS_PANEL_KSTEP.get(vector_bytes, kstep)
    return RowsLayout(vectors * width, blocks * micro, micro, kstep, vectors)


def _multiply_add(dtype: np.dtype, x: str, y: str, acc: str, width: int) -> str:
    """x * y + acc: for floats as written (contracted into an fma where the kernel allows),
    for integers wrapping around as numpy's (expressions.wrapping)."""
    if not ex.wraps(dtype):
        return f"{x} * {y} + {acc}"
    return ex.wrapping("+", [ex.wrapping("*", [x, y], dtype, width), acc], dtype, width)


def _fold_product(dtype: np.dtype) -> str:
    """The statement adding a[i] * b[j] into acc[i][j] (a tile's inner loop)."""
    if dt.is_float(dtype):
        return "acc[i][j] = fma(a[i], b[j], acc[i][j]);"
    return f"acc[i][j] = {_multiply_add(dtype, 'a[i]', 'b[j]', 'acc[i][j]', 1)};"
