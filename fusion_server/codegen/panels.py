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
13.1 against 14.2. The copy alone takes 0.25 to 0.35 ms.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .. import dtypes as dt

DEPTH = 16  # rows of B (steps of K) a work-item copies


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


def generate(spec: PanelSpec) -> tuple[str, str]:
    """(source, kernel name): `dst[(c / cols) * K * cols + k * cols + c % cols] =
    src[off + k * s_k + c * s_n]` for the K x N matrix `src`, zero for the columns of
    the last panel past N. One work-item copies DEPTH rows of one panel: along B's rows
    where they are contiguous, down its columns where those are (a transposed view)."""
    name = kernel_name(spec)
    t, i, cols = dt.CL_NAME[spec.dtype], spec.index, spec.cols
    src = f"""__kernel void {name}(__global {t} *dst, __global const {t} *src, const {i} off, const {i} s_k,
                   const {i} s_n, const {i} K, const {i} N)
{{
  const {i} strip = get_global_id(0), k0 = ({i})get_global_id(1) * {DEPTH};
  const {i} c0 = strip * {cols}, k1 = min(k0 + {DEPTH}, K);
  __global {t} *panel = dst + strip * K * {cols};
  if (s_n == 1 && c0 + {cols} <= N) {{
    for ({i} k = k0; k < k1; ++k) for (int j = 0; j < {cols}; ++j)
      panel[k * {cols} + j] = src[off + k * s_k + c0 + j];
  }} else if (s_k == 1 && c0 + {cols} <= N) {{
    for (int j = 0; j < {cols}; ++j) for ({i} k = k0; k < k1; ++k)
      panel[k * {cols} + j] = src[off + k + (c0 + j) * s_n];
  }} else {{
    for ({i} k = k0; k < k1; ++k) for (int j = 0; j < {cols}; ++j)
      panel[k * {cols} + j] = c0 + j < N ? src[off + k * s_k + (c0 + j) * s_n] : ({t})0;
  }}
}}
"""
    return src, name


def grid(spec: PanelSpec, k: int, n: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """(global size, local size) of the kernel for a k x n source: one work-item per
    group (CPU drivers run a group's work-items one after the other anyway)."""
    return ((n + spec.cols - 1) // spec.cols, (k + DEPTH - 1) // DEPTH), (1, 1)


def nbytes(spec: PanelSpec, k: int, n: int) -> int:
    """Bytes of the panels of a k x n matrix (its columns padded to whole panels)."""
    return (n + spec.cols - 1) // spec.cols * spec.cols * k * np.dtype(spec.dtype).itemsize
