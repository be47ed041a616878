"""Softmax and layer-norm over the last axis, written with clients functions, against numpy.

    softmax(x)    = e / sum(e, -1)          e = exp(x - max(x, -1))
    layer_norm(x) = (x - mu) / sqrt(var + 1e-5) * gamma + beta
                    mu = mean(x, -1), var = mean((x - mu)^2, -1)

x: float32, 4096 x 4096 with --size large, 1024 x 1024 with --size small; gamma, beta:
one row each. Each composite must run in at most 3 kernels per call (asserted with
`clients.inspect()`): the reductions read their element-wise prologues, and a reduction
also writes a prologue value that a later kernel needs (softmax's `e`).

Variants: fused (build + `clients.sync()`) and numpy. Reported: wall time of both, the
fused kernels' time on the device, and the speed-up over numpy.

    python -m benchmarks.composites [--size small|large] [--repeat N] [--out DIR]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import clients

from . import common
from . import device_timing as dtime
from .reductions import shape_for

NAME = "composites"
MAX_KERNELS = 3
EPS = 1e-5


def softmax(x: Any, ns: Any) -> Any:
    """Softmax over the last axis for clients (ns=clients) or numpy (ns=np)."""
    m = ns.max(x, axis=-1, keepdims=True)
    e = ns.exp(x - m)
    return e / ns.sum(e, axis=-1, keepdims=True)


def layer_norm(x: Any, gamma: Any, beta: Any, ns: Any) -> Any:
    """Layer-norm over the last axis (no fused op of its own: mean, subtract, multiply, sqrt)."""
    mu = ns.mean(x, axis=-1, keepdims=True)
    xc = x - mu
    var = ns.mean(xc * xc, axis=-1, keepdims=True)
    return xc / ns.sqrt(var + EPS) * gamma + beta


def _check(name: str, got: np.ndarray, want: np.ndarray) -> float:
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6, err_msg=f"{name} differs from numpy")
    return float(np.max(np.abs(got.astype(np.float64) - want)))


def run(size: str = "large", repeat: int = 10) -> dict:
    """Both composites, fused and numpy, checked against numpy; the results."""
    rows, cols = shape_for(size)
    rng = np.random.default_rng(2)
    a = rng.standard_normal((rows, cols), dtype=np.float32) * 3
    g = rng.standard_normal(cols, dtype=np.float32)
    b = rng.standard_normal(cols, dtype=np.float32)
    clients.set_mode("lazy")
    x, tg, tb = clients.asarray(a), clients.asarray(g), clients.asarray(b)

    cases: dict[str, tuple[Callable[[], Any], Callable[[], np.ndarray]]] = {
        "softmax": (lambda: softmax(x, clients), lambda: softmax(a, np)),
        "layer_norm": (lambda: layer_norm(x, tg, tb, clients), lambda: layer_norm(a, g, b, np)),
    }
    out: dict[str, Any] = {"benchmark": NAME, "size": size, "shape": [rows, cols], "dtype": "float32",
                           "cases": {}}
    queue = clients.client_for().server.runtime.queue
    for case, (build, host) in cases.items():
        want = host()
        with clients.inspect() as rec:
            got = build()
        clients.sync()
        kernels = [(k.kind, k.ops) for k in rec.kernels]
        if len(kernels) > MAX_KERNELS:
            raise AssertionError(f"{case} launched {len(kernels)} kernels, at most {MAX_KERNELS} expected: {kernels}")
        error = _check(case, got.numpy(), want.astype(np.float64))
        del got

        def fused(build: Callable[[], Any] = build) -> Any:
            result = build()
            clients.sync()
            return result  # kept alive until the sync: a dropped result is never computed

        wall = common.time_rounds({"fused": fused, "numpy": host}, repeat, warmup=1)
        device = None
        if dtime.profiling(queue):
            device = dtime.device_rounds({"fused": dtime.fused_seconds(build)}, repeat)["fused"].to_dict()
        out["cases"][case] = {
            "kernels_per_call": len(kernels),
            "kernels": [{"kind": kind, "ops": ops} for kind, ops in kernels],
            "max_abs_error": error,
            "variants": {name: t.to_dict() for name, t in wall.items()},
            "device_kernel_time": device,
            "fused_vs_numpy": common.ratio(wall["numpy"], wall["fused"]),
        }
    out["ratio_meaning"] = "time of numpy / time of fused: above 1, fused is faster"
    return out


HEADERS = ["composite", "kernels", "fused ms", "fused kernels ms", "numpy ms", "fused speed-up"]


def summary_rows(result: dict) -> list[list[Any]]:
    rows = []
    for case, c in result["cases"].items():
        dev = c["device_kernel_time"]
        rows.append([case, c["kernels_per_call"], common.ms(c["variants"]["fused"]["median_s"]),
                     None if dev is None else common.ms(dev["median_s"]),
                     common.ms(c["variants"]["numpy"]["median_s"]), c["fused_vs_numpy"]["of_medians"]])
    return rows


def report(result: dict) -> None:
    rows, cols = result["shape"]
    common.print_table(f"composites over the last axis, {rows}x{cols} float32 (medians)", HEADERS,
                       summary_rows(result))
    for case, c in result["cases"].items():
        print(f"{case}: " + "; ".join(f"{k['kind']} ({', '.join(k['ops'])})" for k in c["kernels"]))


def main(argv: list[str] | None = None) -> dict:
    return common.run_main(NAME, __doc__, run, report, argv)


if __name__ == "__main__":
    main()
