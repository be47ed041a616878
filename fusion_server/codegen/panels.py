"""OpenCL C for B copied into column panels: the layout the CPU matmul kernel streams.

The "rows" matmul kernel (codegen/matmul.py) gives each work-item a strip of `cols`
output columns and walks all of K for it. Read from B itself, a strip's K rows lie a
whole row of B apart (4 KiB for a 1024-wide float32 matrix): each step of the walk
touches another cache line and another page, which neither the caches nor their
prefetchers hide. Copied first into panels (strip after strip, each its K rows of `cols`
elements, contiguous, the columns past N zero), a strip is one sequential stream.

Measured on PoCL 3.0 (a 2-core Intel Xeon with AVX-512, maximum(a @ w + bias, 0) at
1024^3 float32, kernel time, medians of 14, the two alternated in one process): the copy
and the product reading the panels 8.5 ms, against 8.9 for the same kernel copying each
strip's slice of B into a private panel at every step of K; with 32-byte vectors forced,
13.1 against 14.2.

A work-item copies a tile of DEPTH rows of several strips: row segments of about 1 KiB
(BYTES_PER_ROW) read along B's rows. One strip of 16 rows each, as first written, was
three to five times slower on PoCL 3.0 (64-byte reads, each a row of B apart, and 64
times as many groups). 1024 x 1024 float32, kernel us, medians of 25, a 2-core AMD Zen 4
(a copy of the whole buffer, for scale: PoCL 3.0 96 to 100, Intel's CPU runtime 75 to
86):

rows x strips per work-item: 16 x 1, 64 x 1, 16 x 4, 64 x 4, 32 x 8, 64 x 16, 128 x 4
  PoCL 3.0, 16-column panels (its matmul's): 419, 622; 437, 597; 150, 169; 142, 149;
    145, 158; 125, 129; 124, 132
  Intel's runtime, 64-column panels (its matmul's): 253, 255; 192, 192; 198, 205;
    176, 179; 179, 183; 196, 200; 170, 171
(pairs: 64-bit and 32-bit indices.) In the product at 1024^3 the copy took 0.5 to 1.1 ms
of kernel time before (caches holding the previous product's data, not B).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .. import dtypes as dt

DEPTH = 64  # rows of B (steps of K) a work-item copies
BYTES_PER_ROW = 1024  # of a row of B, in whole strips, that a work-item copies


class PanelSpec(NamedTuple):
    """Everything the kernel's source depends on; the program cache's key."""

    dtype: np.dtype
    index: str  # "int" or "long"
    cols: int  # columns per panel: the matmul kernel's strip (codegen/matmul.py, rows_layout)


def kernel_name(spec: PanelSpec) -> str:
    return f"panels_{spec.dtype}_{spec.index}_{spec.cols}"


def arg_dtypes(spec: PanelSpec) -> list:
    index = np.int32 if spec.index == "int" else np.int64
    return [None, None] + [index] * 5


def scalar_variant(spec: PanelSpec) -> None:
    return None  # scalar copies already


def strips_per_item(spec: PanelSpec) -> int:
    """Strips (panels) a work-item copies: row segments of about BYTES_PER_ROW."""
    return max(1, BYTES_PER_ROW // (spec.cols * np.dtype(spec.dtype).itemsize))


def generate(spec: PanelSpec) -> tuple[str, str]:
    """(source, kernel name): `dst[(c / cols) * K * cols + k * cols + c % cols] =
    src[off + k * s_k + c * s_n]` for the K x N matrix `src`, zero for the columns of
    the last panel past N. One work-item copies DEPTH rows of `strips_per_item` panels:
    along B's rows where they are contiguous, down its columns where those are (a
    transposed view)."""
    name = kernel_name(spec)
    t, i, cols, strips = dt.CL_NAME[spec.dtype], spec.index, spec.cols, strips_per_item(spec)
    src = f"""__kernel void {name}(__global {t} *dst, __global const {t} *src, const {i} off, const {i} s_k,
                   const {i} s_n, const {i} K, const {i} N)
{{
  const {i} s0 = ({i})get_global_id(0) * {strips}, k0 = ({i})get_global_id(1) * {DEPTH};
  const {i} s1 = min(s0 + {strips}, (N + {cols - 1}) / {cols}), k1 = min(k0 + {DEPTH}, K);
  if (s_n == 1 && s1 * {cols} <= N) {{
    for ({i} k = k0; k < k1; ++k) {{
      __global const {t} *row = src + off + k * s_k;
      for ({i} s = s0; s < s1; ++s) for (int j = 0; j < {cols}; ++j)
        dst[(s * K + k) * {cols} + j] = row[s * {cols} + j];
    }}
  }} else if (s_k == 1 && s1 * {cols} <= N) {{
    for ({i} s = s0; s < s1; ++s) for (int j = 0; j < {cols}; ++j) {{
      __global const {t} *column = src + off + (s * {cols} + j) * s_n;
      for ({i} k = k0; k < k1; ++k) dst[(s * K + k) * {cols} + j] = column[k];
    }}
  }} else {{
    for ({i} k = k0; k < k1; ++k) for ({i} s = s0; s < s1; ++s) for (int j = 0; j < {cols}; ++j) {{
      const {i} c = s * {cols} + j;
      dst[(s * K + k) * {cols} + j] = c < N ? src[off + k * s_k + c * s_n] : ({t})0;
    }}
  }}
}}
"""
    return src, name


def grid(spec: PanelSpec, k: int, n: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """(global size, local size) of the kernel for a k x n source: one work-item per
    group (CPU drivers run a group's work-items one after the other anyway)."""
    strips = (n + spec.cols - 1) // spec.cols
    per_item = strips_per_item(spec)
    return ((strips + per_item - 1) // per_item, (k + DEPTH - 1) // DEPTH), (1, 1)


def nbytes(spec: PanelSpec, k: int, n: int) -> int:
    """Bytes of the panels of a k x n matrix (its columns padded to whole panels)."""
    return (n + spec.cols - 1) // spec.cols * spec.cols * k * np.dtype(spec.dtype).itemsize
