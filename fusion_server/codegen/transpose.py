"""OpenCL C for a matrix copied transposed into a contiguous buffer.

The matmul plan packs an operand this way when the tiled kernel reads the packed layout
faster than the operand's own (see fusers/matmul.py, `packed_operands`). A work-group of
32 x 8 work-items moves a 32 x 32 tile through local memory: it reads the tile's rows and
writes its columns, both along consecutive addresses, and the tile's rows are padded by
one element so that reading a column of it touches 32 different banks.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .. import dtypes as dt

TILE = 32  # elements per side of the tile a work-group moves
ROWS = 8  # work-items per column of the work-group (each moves TILE / ROWS rows)


class TransposeSpec(NamedTuple):
    """Everything the kernel's source depends on; the program cache's key."""

    dtype: np.dtype
    index: str  # "int" or "long"


def kernel_name(spec: TransposeSpec) -> str:
    return f"transpose_{spec.dtype}_{spec.index}"


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


def grid(rows: int, cols: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """(global size, local size) of the kernel for a rows x cols source."""
    return ((cols + TILE - 1) // TILE * TILE, (rows + TILE - 1) // TILE * ROWS), (TILE, ROWS)
