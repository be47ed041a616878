"""Stencils over computed values: slices and transposes of values inside one block.

    box blur (image pipeline)  g = x ** 2.2; (g[:-2, :-2] + g[1:-1, :-2] + ... 9 taps) / 9
    box blur of x * x          the same taps over a cheap value
    box blur of exp(x)         ... over a value of one library call
    heat step (Laplacian)      u = x * 0.5 + 0.25; u[1:-1, 1:-1] + 0.1 * (5-point Laplacian of u)
    x - x.T                    y = x * 3 + 1; y - y.T

x: float32, 2048 x 2048 (--size large) or 1024 x 1024 (small). The fuser reads each
view of the computed value by recomputing the value at the view's coordinates; when the
value's views would cost more to recompute than the device's budget, it stages the
value in local memory where the views only shift it (fusers/staging.py), else writes it
and reads it back (fusers/remap.py); `explain()` says which, and the kernels per run
are counted with `clients.inspect()`.

Variants, side by side in interleaved rounds: fused (the library, input on the device,
waiting for it), each of the fuser's three ways forced (recomputed, staged where the
views allow it, written and read back), numpy (the same code on the host array),
hand-written (one OpenCL kernel on the library's queue computing each output from x
directly, the value recomputed for every tap, as a newcomer writes it) and torch (the
same code on torch tensors on the GPU where CUDA is there, else on the CPU; when
installed). Reported: wall times, device kernel times (FUSION_PROFILE=1) and ratios
against the fused run.

    python -m benchmarks.stencils [--size small|large] [--repeat N] [--out DIR]
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyopencl as cl

import clients

from . import common
from . import device_timing as dtime

NAME = "stencils"
SIDES = {"small": 1024, "large": 2048}


def box_blur(g):
    return (g[:-2, :-2] + g[1:-1, :-2] + g[2:, :-2] + g[:-2, 1:-1] + g[1:-1, 1:-1] + g[2:, 1:-1]
            + g[:-2, 2:] + g[1:-1, 2:] + g[2:, 2:]) / 9


def heat_step(u):
    lap = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4 * u[1:-1, 1:-1]
    return u[1:-1, 1:-1] + 0.1 * lap


def _pow(x, p):
    return x ** p


# name -> (the value computed first, the stencil over it, the value in OpenCL C of `v`,
# the taps (row, column) offsets and weights, the constant the taps' sum is scaled by)
_BLUR_TAPS = [(i, j, 1.0) for j in range(3) for i in range(3)]
CASES: dict[str, dict] = {
    "box blur (image pipeline)": {"value": lambda x: _pow(x, 2.2), "stencil": box_blur,
                                  "cl_value": "pow(v, 2.2f)", "taps": _BLUR_TAPS, "scale": 1 / 9},
    "box blur of x * x": {"value": lambda x: x * x, "stencil": box_blur,
                          "cl_value": "(v * v)", "taps": _BLUR_TAPS, "scale": 1 / 9},
    "box blur of exp(x)": {"value": clients.exp, "stencil": box_blur, "numpy_value": np.exp, "torch_value": "exp",
                           "cl_value": "exp(v)", "taps": _BLUR_TAPS, "scale": 1 / 9},
    "heat step (Laplacian)": {"value": lambda x: x * 0.5 + 0.25, "stencil": heat_step,
                              "cl_value": "(v * 0.5f + 0.25f)",
                              "taps": [(0, 1, 0.1), (2, 1, 0.1), (1, 0, 0.1), (1, 2, 0.1), (1, 1, 1 - 0.4)],
                              "scale": 1.0},
    "x - x.T": {"value": lambda x: x * 3 + 1, "stencil": lambda y: y - y.T, "cl_value": "(v * 3.0f + 1.0f)",
                "taps": None, "scale": 1.0},
}


def _hand_source(case: dict) -> str:
    """One kernel: each work-item computes one output from x, the value again per tap."""
    if case["taps"] is None:  # y - y.T over a square
        body = ("float v = x[i * n + j]; const float a = VALUE; v = x[j * n + i]; const float b = VALUE;\n"
                "  out[i * m + j] = a - b;")
    else:
        terms = []
        for r, c, w in case["taps"]:
            terms.append(f"  v = x[(i + {r}) * n + j + {c}]; acc += {w!r}f * VALUE;")
        body = "float v, acc = 0.0f;\n" + "\n".join(terms) + f"\n  out[i * m + j] = acc * {case['scale']!r}f;"
    return (f"#define VALUE {case['cl_value']}\n"
            "__kernel void stencil(__global float *out, __global const float *x, int n, int m) {\n"
            "  const int j = get_global_id(0), i = get_global_id(1);\n"
            "  if (j >= m || i >= m) return;\n"
            f"  {body}\n}}\n")


def _torch_variant(case: dict, a: np.ndarray) -> tuple[str, Any] | None:
    try:
        import torch
    except ImportError:
        return None
    device = "cuda" if torch.cuda.is_available() else "cpu"
    t = torch.from_numpy(a).to(device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    value = getattr(torch, case["torch_value"]) if "torch_value" in case else case["value"]

    def call() -> Any:
        out = case["stencil"](value(t))
        sync()
        return out

    return f"torch ({device})", call


def run_case(name: str, case: dict, side: int, repeat: int) -> dict:
    a = np.random.default_rng(3).random((side, side), dtype=np.float32)
    x = clients.asarray(a)
    host_value = case.get("numpy_value", case["value"])
    want = case["stencil"](host_value(a))
    with clients.inspect() as rec:
        got = case["stencil"](case["value"](x)).numpy()
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-5, err_msg=f"{name} differs from numpy")
    kernels = len(rec.kernels)
    how = rec.explain()

    queue = clients.client_for().server.runtime.queue
    (kernel,) = dtime.build(queue, _hand_source(case), "stencil")
    m = side - 2 if case["taps"] is not None else side
    out = cl.Buffer(queue.context, cl.mem_flags.WRITE_ONLY, 4 * m * m)
    xbuf = cl.Buffer(queue.context, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR, hostbuf=a)
    local = (32, 8) if dtime.is_gpu(queue) else None
    grid = (-(-m // 32) * 32, -(-m // 8) * 8) if local else (m, m)

    def enqueue() -> cl.Event:
        return kernel(queue, grid, local, out, xbuf, np.int32(side), np.int32(m))

    check = np.empty((m, m), np.float32)
    enqueue().wait()
    cl.enqueue_copy(queue, check, out)
    np.testing.assert_allclose(check, want, rtol=2e-5, atol=1e-5, err_msg=f"hand-written {name} differs")

    def fused() -> Any:
        result = case["stencil"](case["value"](x))
        clients.sync()
        return result

    def hand() -> Any:
        enqueue().wait()

    # The fuser's three ways, each forced, measured beside its own choice: recompute the
    # value at every view, stage it in local memory (where the views only shift it), or
    # write it and read it back (settings are read when a block runs).
    client = clients.client_for()

    def with_settings(fn, **settings):
        def call() -> Any:
            client.call(lambda server: [setattr(server, k, v) for k, v in settings.items()])
            try:
                return fn()
            finally:
                client.call(lambda server: [setattr(server, k, d) for k, d in
                                            (("recompute_budget", None), ("stencil_staging", True))])
        return call

    forced = {"recomputed": {"recompute_budget": 10**6}, "staged": {"recompute_budget": 0},
              "written + read back": {"recompute_budget": 0, "stencil_staging": False}}
    choices = {}
    for label, settings in forced.items():
        with clients.inspect() as rec:
            with_settings(fused, **settings)()
        choices[label] = {"settings": settings, "kernels_per_run": len(rec.kernels),
                          "staged": any(k.variant.startswith("staged") for k in rec.kernels)}
    # (where the views do not only shift the value, "staged" runs as written + read back)
    variants = {"fused": fused, **{f"fused, {label}": with_settings(fused, **settings)
                                   for label, settings in forced.items() if label != "staged"
                                   or choices[label]["staged"]},
                "numpy": lambda: case["stencil"](host_value(a)), "hand-written": hand}
    peer = _torch_variant(case, a)
    if peer is not None:
        variants[peer[0]] = peer[1]
    wall = common.time_rounds(variants, repeat, warmup=1, apart=("torch (cuda)",))
    device = None
    if dtime.profiling(queue):
        fused_sampler = dtime.fused_seconds(lambda: case["stencil"](case["value"](x)))
        samplers = {"fused": fused_sampler,
                    **{k: with_settings(fused_sampler, **forced[k[len("fused, "):]])
                       for k in variants if k.startswith("fused, ")},
                    "hand-written": dtime.enqueued_seconds(enqueue)}
        device = {k: t.to_dict() for k, t in dtime.device_rounds(samplers, repeat).items()}
    return {
        "side": side,
        "kernels_per_run": kernels,
        "choices": choices,
        "explain": how,
        "variants": {k: t.to_dict() for k, t in wall.items()},
        "device_kernel_time": device,
        "ratios": {f"fused_vs_{k}": common.ratio(t, wall["fused"]) for k, t in wall.items() if k != "fused"},
    }


def run(size: str = "large", repeat: int = 10) -> dict:
    clients.set_mode("lazy")
    side = SIDES.get(size, SIDES["large"])
    return {
        "benchmark": NAME,
        "dtype": "float32",
        "cases": {name: run_case(name, case, side, repeat) for name, case in CASES.items()},
        "ratio_meaning": "time of the other / time of the fused run: above 1, fused is faster",
    }


def report(result: dict) -> None:
    forced = ("fused, recomputed", "fused, staged", "fused, written + read back")
    rows = []
    for name, c in result["cases"].items():
        v, r = c["variants"], c["ratios"]
        dev = c["device_kernel_time"] or {}
        peer = next((k for k in v if k.startswith("torch")), None)

        def kernel_ms(k: str, dev: dict = dev):
            return common.ms(dev[k]["median_s"]) if k in dev else None

        rows.append([name, c["kernels_per_run"], common.ms(v["fused"]["median_s"]), kernel_ms("fused"),
                     *(kernel_ms(k) for k in forced), kernel_ms("hand-written"),
                     r["fused_vs_numpy"]["of_medians"], r["fused_vs_hand-written"]["of_medians"],
                     None if peer is None else r[f"fused_vs_{peer}"]["of_medians"]])
    side = next(iter(result["cases"].values()))["side"]
    common.print_table(f"stencils over a computed {side}^2 float32 value (medians; ratios: other / fused; "
                       "kernel times in ms)",
                       ["case", "kernels", "fused ms", "fused", "recomputed", "staged", "written + read",
                        "hand", "vs numpy", "vs hand-written", "vs torch"], rows)
    for name, c in result["cases"].items():
        print(f"{name}:\n  " + c["explain"].replace("\n", "\n  "))


def main(argv: list[str] | None = None) -> dict:
    return common.run_main(NAME, __doc__, run, report, argv)


if __name__ == "__main__":
    main()
