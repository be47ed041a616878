"""OpenCL C for searchsorted: a binary search per element of the values.

Work-item i finds where value i would go in the sorted row: the first position whose
element is not less than it ("left") or greater than it ("right"). NaN counts as larger
than every number, where the sort puts it.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .. import dtypes as dt
from . import signature as sig


class SearchSpec(NamedTuple):
    kind: str  # always "search": keeps these keys apart from other kernels' in the cache
    side: str  # "left" or "right"
    dtype: np.dtype


_STEP = {"left": "LESS(y, x)", "right": "!LESS(x, y)"}


def scalar_variant(spec: SearchSpec) -> None:
    """The search has no vector form to fall back from."""
    return None


def kernel_name(spec: SearchSpec) -> str:
    return f"search_{spec.side}_{spec.dtype.name}"


def parameters(spec: SearchSpec) -> tuple[sig.Param, ...]:
    """The sorted row and its offset and length; the values and their offset and count;
    the positions out."""
    i64 = np.dtype(np.int64)
    return (sig.raw("input", "__global const T *a"), sig.scalar(i64, "a0"), sig.scalar(i64, "n"),
            sig.raw("input", "__global const T *v"), sig.scalar(i64, "v0"), sig.scalar(i64, "m"),
            sig.raw("out", "__global long *out"))


def arg_dtypes(spec: SearchSpec) -> list:
    return sig.arg_dtypes(parameters(spec))


def generate(spec: SearchSpec) -> tuple[str, str]:
    """OpenCL C source of `spec`'s kernel and the kernel's name."""
    name = kernel_name(spec)
    less = "((p) < (q) || (isnan(q) && !isnan(p)))" if dt.is_float(spec.dtype) else "((p) < (q))"
    src = dt.fp64_pragma((spec.dtype,))
    src += [
        f"typedef {dt.CL_NAME[spec.dtype]} T;",
        f"#define LESS(p, q) {less}",
        f"__kernel void {name}({sig.declare(parameters(spec))})",
        "{",
        "  const long i = get_global_id(0);",
        "  if (i >= m) return;",
        "  const T x = v[v0 + i];",
        "  long lo = 0, hi = n;",
        "  while (lo < hi) {",
        "    const long mid = lo + ((hi - lo) >> 1);",
        "    const T y = a[a0 + mid];",
        f"    if ({_STEP[spec.side]}) lo = mid + 1; else hi = mid;",
        "  }",
        "  out[i] = lo;",
        "}",
    ]
    return "\n".join(src) + "\n", name
