"""Generated kernels of every kind on small shapes, for the memory-checking lane.

Run with FUSION_DEVICE=oclgrind (see test_oclgrind.py); prints one line per check and
exits non-zero on a value mismatch. Oclgrind itself reports memory errors on stderr.
"""

from __future__ import annotations

import dataclasses
import sys

import numpy as np

import clients

FLOAT_UNARY = ["exp", "log1p", "sqrt", "tanh", "sin", "floor", "round", "sign", "abs", "negative", "isnan"]
# (abs of ints is left out: Oclgrind cannot run the llvm.abs intrinsic its compiler emits)
INT_UNARY = ["negative", "sign", "square", "bitwise_invert"]
BINARY = ["add", "subtract", "multiply", "maximum", "minimum", "less", "equal"]
INT_ONLY = ["floor_divide", "remainder", "pow", "bitwise_and"]


def check(label: str, got: clients.Tensor, want: np.ndarray) -> None:
    value = got.numpy()
    ok = value.shape == want.shape and np.allclose(value, want, rtol=1e-5, atol=1e-6, equal_nan=True)
    print(f"{'ok ' if ok else 'BAD'} {label}")
    if not ok:
        sys.exit(f"mismatch in {label}: {value} vs {want}")


def numpy_op(name: str):
    return getattr(np, {"bitwise_invert": "invert", "pow": "power"}.get(name, name))


def main() -> None:
    rng = np.random.default_rng(0)
    for n in (1, 5, 37):  # below, at and across the vector width, with tails
        f = rng.uniform(0.5, 3, n).astype(np.float32)
        g = rng.uniform(-3, 3, n).astype(np.float32)
        i = rng.integers(-9, 9, n).astype(np.int32)
        j = rng.integers(1, 5, n).astype(np.int32)
        tf, tg, ti, tj = (clients.asarray(a) for a in (f, g, i, j))
        for name in FLOAT_UNARY:
            check(f"{name} f32 n={n}", getattr(clients, name)(tf), numpy_op(name)(f))
        for name in INT_UNARY:
            check(f"{name} i32 n={n}", getattr(clients, name)(ti), numpy_op(name)(i))
        for name in BINARY:
            check(f"{name} f32 n={n}", getattr(clients, name)(tf, tg), numpy_op(name)(f, g))
        for name in INT_ONLY:
            check(f"{name} i32 n={n}", getattr(clients, name)(ti, tj), numpy_op(name)(i, j))
        check(f"where n={n}", clients.where(tg > 0, tf, tg * 2.0), np.where(g > 0, f, g * 2))
        check(f"clip n={n}", clients.clip(tg, -1.0, 1.0), np.clip(g, -1, 1))
        check(f"cast n={n}", (tg * 3.0).astype(np.int32) + ti, (g * 3).astype(np.int32) + i)
        check(f"f64 n={n}", clients.exp(tf.astype(np.float64)) * 0.5, np.exp(f.astype(np.float64)) * 0.5)
        check(f"bool n={n}", clients.logical_xor(tg > 0, ti > 0), np.logical_xor(g > 0, i > 0))
        check(f"arange n={n}", clients.arange(n) * 2 + 1, np.arange(n) * 2 + 1)
    m = rng.standard_normal((6, 8)).astype(np.float32)
    row = rng.standard_normal(8).astype(np.float32)
    col = rng.standard_normal((6, 1)).astype(np.float32)
    tm, trow, tcol = clients.asarray(m), clients.asarray(row), clients.asarray(col)
    check("broadcast row+col", tm * trow + tcol, m * row + col)
    check("transpose", tm.T + 1.0, m.T + 1)
    check("strided slice", tm[1:, ::2] * 2.0, m[1:, ::2] * 2)
    check("negative step", tm[::-1, ::-3] - 1.0, m[::-1, ::-3] - 1)
    check("view of view", tm.T[2:5][:, ::2] + tm.T[2:5][:, 1::2], m.T[2:5][:, ::2] + m.T[2:5][:, 1::2])
    check("scalar tensor", tm + clients.asarray(np.float32(2.5)), m + np.float32(2.5))
    check("reshape copy", tm.T.reshape(4, 12) * 1.0, m.T.reshape(4, 12))
    check("broadcast_to", clients.broadcast_to(trow, (3, 8)) * 2.0, np.broadcast_to(row, (3, 8)) * 2)
    soft = clients.custom.elementwise("soft", "x > 20 ? x : log1p(exp(x))")
    check("custom vector", soft(tm * 4.0), np.where(m * 4 > 20, m * 4, np.log1p(np.exp(m * 4))))
    mixed = clients.custom.elementwise("mixed", "select(a, b, (int)(a > b))", inputs=("a", "b"))
    check("custom scalar-only", mixed(tm, tcol), np.where(m > col, col, m))
    # Complex values (scalar code over float2): the functions' helpers, reductions, matmul,
    # a scan.
    z = (rng.standard_normal((4, 9)) + 1j * rng.standard_normal((4, 9))).astype(np.complex64)
    tz = clients.asarray(z)
    check("complex chain", clients.exp(tz * 0.5j) / (tz + 2) + clients.abs(tz), np.exp(z * 0.5j) / (z + 2) + np.abs(z))
    check("complex sqrt log", clients.sqrt(tz) + clients.log(tz) * clients.conj(tz),
          np.sqrt(z) + np.log(z) * np.conj(z))
    check("complex sum", clients.sum(tz, axis=1), z.sum(axis=1))
    check("complex prod", clients.prod(tz[:, :4], axis=0), z[:, :4].prod(axis=0))
    check("complex matmul", tz @ tz.T, z @ z.T)
    check("complex cumsum", clients.cumulative_sum(tz, axis=1), np.cumsum(z, axis=1))
    # Stencils over a dear value, staged in local memory (a barrier between the parts):
    # one tile, ragged tiles, a single row.
    for shape in ((5, 7), (40, 90), (1, 300)):
        p = rng.uniform(0.5, 2, shape).astype(np.float32)
        tp = clients.asarray(p)
        if shape[0] == 1:
            check(f"staged 1-D {shape}", _blur_1d(tp ** 2.2), _blur_1d(p ** np.float32(2.2)))
        else:
            check(f"staged blur {shape}", _blur(tp ** 2.2), _blur(p ** np.float32(2.2)))
    planes = rng.uniform(0.5, 2, (3, 9, 40)).astype(np.float32)
    check("staged planes", _blur_1d(clients.asarray(planes) ** 2.2), _blur_1d(planes ** np.float32(2.2)))
    # Sorts: the device's own stages (tiles and merge passes), then those of a CPU of four
    # cores: a row per work-item, and two long rows by buckets (with empty buckets).
    keys = rng.integers(-50, 50, (2, 4500)).astype(np.float32)
    keys[:, ::7] = -0.0
    ctx = clients.client_for().server.ctx
    own = ctx.info
    for label, info in (("own", own), ("cpu", dataclasses.replace(own, kind="CPU", compute_units=4))):
        ctx.info = info
        try:
            for shape in ((3, 70), (2, 4500)):
                a = keys[: shape[0], : shape[1]]
                check(f"sort {label} {shape}", clients.sort(clients.asarray(a)), np.sort(a, axis=-1))
                check(f"argsort {label} {shape}", clients.argsort(clients.asarray(a), descending=True),
                      np.argsort(-a, axis=-1, kind="stable"))
        finally:
            ctx.info = own


def _blur(g):
    return (g[:-2, :-2] + g[1:-1, :-2] + g[2:, :-2] + g[:-2, 1:-1] + g[1:-1, 1:-1] + g[2:, 1:-1]
            + g[:-2, 2:] + g[1:-1, 2:] + g[2:, 2:]) / 9


def _blur_1d(g):  # along the last axis (five taps of pow cost more than any recompute budget)
    return (g[..., :-4] + g[..., 1:-3] + g[..., 2:-2] + g[..., 3:-1] + g[..., 4:]) / 5


if __name__ == "__main__":
    main()
