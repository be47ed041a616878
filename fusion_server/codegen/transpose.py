"""OpenCL C for a matrix copied transposed into a contiguous buffer.

The matmul plan packs an operand this way when its kernel reads the packed layout faster
than the operand's own (see fusers/matmul.py, `packed_operands`). Two forms:

- tiles (GPUs): a work-group of 32 x 8 work-items moves a 32 x 32 tile through local
  memory: it reads the tile's rows and writes its columns, both along consecutive
  addresses, and the tile's rows are padded by one element so that reading a column of
  it touches 32 different banks;
- blocks (CPU devices, `TransposeSpec.blocks`): one work-item per work-group moves a
  16 x 16 block through private memory, no barriers, which CPU drivers emulate slowly.
  A 1024 x 1024 float32 matrix on PoCL 3.0 (AMD Zen 4, 2 cores), kernel time: tiles
  1.05 ms; blocks of 8 0.43, of 16 0.29, of 32 0.57 (0.28 with the driver's choice of
  work-group); numpy's ascontiguousarray of the transpose 3.3 ms (one thread). Four
  blocks of 16 side by side per work-item (64 elements of each source row read at once),
  the same machine, kernel us, medians of 25, one block / four side by side / 2 x 2 /
  four stacked / one of 32: PoCL 3.0 501 / 314 / 328 / 325 / 283; Intel's CPU runtime
  636 / 259 / 277 / 553 / 352.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .. import dtypes as dt

TILE = 32  # elements per side of the tile a work-group moves
ROWS = 8  # work-items per column of the work-group (each moves TILE / ROWS rows)
BLOCK = 16  # elements per side of the blocks a work-item moves (the CPU form)
BLOCKS_PER_ITEM = 4  # blocks a work-item moves, side by side along the source's rows


class TransposeSpec(NamedTuple):
    """Everything the kernel's source depends on; the program cache's key."""

    dtype: np.dtype
    index: str  # "int" or "long"
    blocks: bool = False  # the CPU form (module docstring)


def kernel_name(spec: TransposeSpec) -> str:
    return f"transpose_{spec.dtype}_{spec.index}{'_blocks' if spec.blocks else ''}"


def arg_dtypes(spec: TransposeSpec) -> list:
    index = np.int32 if spec.index == "int" else np.int64
    return [None, None] + [index] * 5


def scalar_variant(spec: TransposeSpec) -> None:
    return None  # one element per work-item and row already


def generate(spec: TransposeSpec) -> tuple[str, str]:
    """(source, kernel name): `dst[c * rows + r] = src[off + r * s_row + c * s_col]` for
    the rows x cols matrix `src`, i.e. dst holds it transposed, contiguous."""
    name = kernel_name(spec)
    t, i = dt.CL_NAME[spec.dtype], spec.index
    if spec.blocks:
        return _blocks(t, i, name), name
    src = f"""__kernel __attribute__((reqd_work_group_size({TILE}, {ROWS}, 1)))
void {name}(__global {t} *dst, __global const {t} *src, const {i} off, const {i} s_row, const {i} s_col,
            const {i} rows, const {i} cols)
{{
  __local {t} tile[{TILE}][{TILE + 1}];
  const int tx = get_local_id(0), ty = get_local_id(1);
  const {i} r0 = ({i})get_group_id(1) * {TILE}, c0 = ({i})get_group_id(0) * {TILE};
  for (int q = ty; q < {TILE}; q += {ROWS}) {{
    const {i} r = r0 + q, c = c0 + tx;
    if (r < rows && c < cols) tile[q][tx] = src[off + r * s_row + c * s_col];
  }}
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int q = ty; q < {TILE}; q += {ROWS}) {{
    const {i} c = c0 + q, r = r0 + tx;
    if (r < rows && c < cols) dst[c * rows + r] = tile[tx][q];
  }}
}}
"""
    return src, name


def _blocks(t: str, i: str, name: str) -> str:
    """The CPU form: BLOCKS_PER_ITEM blocks of BLOCK x BLOCK side by side along the
    source's rows per work-item, each read along its rows into a private array and
    written along the destination's rows; partial blocks element by element."""
    return f"""__kernel void {name}(__global {t} *dst, __global const {t} *src, const {i} off, const {i} s_row,
                   const {i} s_col, const {i} rows, const {i} cols)
{{
  const {i} r0 = ({i})get_global_id(1) * {BLOCK};
  for (int b = 0; b < {BLOCKS_PER_ITEM}; ++b) {{
    const {i} c0 = (({i})get_global_id(0) * {BLOCKS_PER_ITEM} + b) * {BLOCK};
    if (r0 + {BLOCK} <= rows && c0 + {BLOCK} <= cols) {{
      {t} block[{BLOCK}][{BLOCK}];
      for (int r = 0; r < {BLOCK}; ++r) for (int c = 0; c < {BLOCK}; ++c)
        block[c][r] = src[off + (r0 + r) * s_row + (c0 + c) * s_col];
      for (int c = 0; c < {BLOCK}; ++c) for (int r = 0; r < {BLOCK}; ++r)
        dst[(c0 + c) * rows + r0 + r] = block[c][r];
    }} else {{
      for (int r = 0; r < {BLOCK} && r0 + r < rows; ++r) for (int c = 0; c < {BLOCK} && c0 + c < cols; ++c)
        dst[(c0 + c) * rows + r0 + r] = src[off + (r0 + r) * s_row + (c0 + c) * s_col];
    }}
  }}
}}
"""


def grid(spec: TransposeSpec, rows: int, cols: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """(global size, local size) of the kernel for a rows x cols source."""
    if spec.blocks:
        items = (cols + BLOCK * BLOCKS_PER_ITEM - 1) // (BLOCK * BLOCKS_PER_ITEM)
        return (items, (rows + BLOCK - 1) // BLOCK), (1, 1)
    return ((cols + TILE - 1) // TILE * TILE, (rows + TILE - 1) // TILE * ROWS), (TILE, ROWS)
