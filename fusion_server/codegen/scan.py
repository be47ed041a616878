"""OpenCL C for cumulative sums and products along C-ordered rows: reduce, then scan.

A row of n elements is cut into chunks; each phase is one kernel:

- `totals`: work-item (row, chunk) folds its chunk into one value, written to a totals
  array of `chunks` values per row;
- `offsets`: work-item `row` turns its row of totals into their exclusive scan, in place
  (what every chunk of the row starts from);
- `write`: work-item (row, chunk) scans its chunk again from its offset and writes each
  prefix. A row of one chunk needs this phase alone (it starts from the identity).

Each element is read twice and written once, and the association differs from a
sequential scan only at chunk boundaries. Values are accumulated in `acc` (double for
float32 where the device has it; for integers the unsigned type of their size, so that
overflow wraps as numpy's does, then read back as the signed type).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .. import dtypes as dt
from . import signature as sig

PHASES = ("totals", "offsets", "write")
IDENTITY = {"sum": "0", "prod": "1"}
COMBINE = {"sum": "(a) + (b)", "prod": "(a) * (b)"}


class ScanSpec(NamedTuple):
    kind: str  # always "scan": keeps these keys apart from other kernels' in the cache
    name: str  # "sum" or "prod"
    phase: str  # one of PHASES
    dtype: np.dtype  # of the input and the output
    acc: np.dtype  # what values accumulate in


def scalar_variant(spec: ScanSpec) -> None:
    """The scan has no vector form to fall back from."""
    return None


def kernel_name(spec: ScanSpec) -> str:
    return f"scan_{spec.name}_{spec.phase}_{spec.dtype.name}_{spec.acc.name}"


def parameters(spec: ScanSpec) -> tuple[sig.Param, ...]:
    """Input (and its offset), output, the totals (of `chunks` values per row), the row
    length, rows, chunk length and chunks per row."""
    i64 = np.dtype(np.int64)
    sizes = (sig.scalar(i64, "n"), sig.scalar(i64, "rows"), sig.scalar(i64, "chunk"), sig.scalar(i64, "chunks"))
    if spec.phase == "offsets":
        return (sig.raw("out", "__global ACC *totals"), *sizes)
    return (sig.raw("input", "__global const T *x"), sig.scalar(i64, "x0"), sig.raw("out", "__global T *y"),
            sig.raw("out", "__global ACC *totals"), *sizes)


def arg_dtypes(spec: ScanSpec) -> list:
    return sig.arg_dtypes(parameters(spec))


def _acc_name(acc: np.dtype) -> str:
    return ("u" + dt.CL_MASK_NAME[acc]) if dt.is_int(acc) else dt.CL_NAME[acc]


def _store(spec: ScanSpec) -> str:
    """The accumulator as the output type (a reinterpretation for signed integers)."""
    if dt.is_int(spec.dtype) and not dt.is_unsigned(spec.dtype):
        return f"as_{dt.CL_NAME[spec.dtype]}(s)"
    return "(T)s"


def generate(spec: ScanSpec) -> tuple[str, str]:
    """OpenCL C source of `spec`'s kernel and the kernel's name."""
    name = kernel_name(spec)
    src = ["#pragma OPENCL EXTENSION cl_khr_fp64 : enable"] if dt.float64 in (spec.dtype, spec.acc) else []
    src += [
        f"typedef {dt.CL_NAME[spec.dtype]} T;",
        f"typedef {_acc_name(spec.acc)} ACC;",
        f"#define COMBINE(a, b) ({COMBINE[spec.name]})",
        f"__kernel void {name}({sig.declare(parameters(spec))})",
        "{",
    ]
    if spec.phase == "offsets":
        src += [
            "  const long row = get_global_id(0);",
            "  if (row >= rows) return;",
            "  __global ACC *t = totals + row * chunks;",
            f"  ACC s = (ACC){IDENTITY[spec.name]};",
            "  for (long c = 0; c < chunks; ++c) {",
            "    const ACC here = t[c];",
            "    t[c] = s;",
            "    s = COMBINE(s, here);",
            "  }",
            "}",
        ]
        return "\n".join(src) + "\n", name
    src += [
        "  const long item = get_global_id(0);",
        "  if (item >= rows * chunks) return;",
        "  const long row = item / chunks, c = item - row * chunks;",
        "  const long start = c * chunk;",
        "  const long stop = min(n, start + chunk);",
        "  __global const T *in = x + x0 + row * n;",
    ]
    if spec.phase == "totals":
        src += [
            f"  ACC s = (ACC){IDENTITY[spec.name]};",
            "  for (long i = start; i < stop; ++i) s = COMBINE(s, (ACC)in[i]);",
            "  totals[item] = s;",
            "}",
        ]
    else:
        src += [
            f"  ACC s = chunks > 1 ? totals[item] : (ACC){IDENTITY[spec.name]};",
            "  __global T *out = y + row * n;",
            "  for (long i = start; i < stop; ++i) {",
            "    s = COMBINE(s, (ACC)in[i]);",
            f"    out[i] = {_store(spec)};",
            "  }",
            "}",
        ]
    return "\n".join(src) + "\n", name
