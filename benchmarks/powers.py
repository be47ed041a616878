"""Small powers against the ops they equal: `x ** 2` against `x * x`, `x ** 0.5` against
`sqrt(x)`, and the device's general pow (`x ** 2.2`) for scale.

    x: float32, 2^24 elements (--size large) or 2^20 (small), on the device

Variants, side by side in interleaved rounds, each a fused run waited for: x ** 2,
x * x, x ** 0.5, sqrt(x), x ** 2.2. With FUSION_PROFILE=1 the kernels' device time is
measured too. Reported: times, and x ** 2 / x * x and x ** 0.5 / sqrt(x) (1: the same
cost).

    python -m benchmarks.powers [--size small|large] [--repeat N] [--out DIR]
"""

from __future__ import annotations

from typing import Any

import numpy as np

import clients

from . import common
from . import device_timing as dtime

NAME = "powers"
VARIANTS = {
    "x ** 2": lambda x: x ** 2,
    "x * x": lambda x: x * x,
    "x ** 0.5": lambda x: x ** 0.5,
    "sqrt(x)": clients.sqrt,
    "x ** 2.2": lambda x: x ** 2.2,
}


def run(size: str = "large", repeat: int = 10) -> dict:
    clients.set_mode("lazy")
    n = common.SIZES[size]
    a = np.random.default_rng(5).random(n, dtype=np.float32) + np.float32(0.5)
    x = clients.asarray(a)
    np.testing.assert_allclose((x ** 2).numpy(), a * a, rtol=1e-6)
    np.testing.assert_allclose((x ** 0.5).numpy(), np.sqrt(a), rtol=1e-6)

    def waited(fn) -> Any:
        def call() -> Any:
            out = fn(x)
            clients.sync()
            return out
        return call

    wall = common.time_rounds({k: waited(f) for k, f in VARIANTS.items()}, repeat, warmup=1)
    device = None
    if dtime.profiling(clients.client_for().server.runtime.queue):
        samplers = {k: dtime.fused_seconds(lambda f=f: f(x)) for k, f in VARIANTS.items()}
        device = {k: t.to_dict() for k, t in dtime.device_rounds(samplers, repeat).items()}
    times = device or {k: t.to_dict() for k, t in wall.items()}
    return {
        "benchmark": NAME,
        "elements": n,
        "variants": {k: t.to_dict() for k, t in wall.items()},
        "device_kernel_time": device,
        "square_over_multiply": times["x ** 2"]["median_s"] / times["x * x"]["median_s"],
        "root_over_sqrt": times["x ** 0.5"]["median_s"] / times["sqrt(x)"]["median_s"],
        "ratio_basis": "device kernel time" if device else "wall time",
    }


def report(result: dict) -> None:
    dev = result["device_kernel_time"]
    rows = [[k, common.ms(v["median_s"]), None if dev is None else common.ms(dev[k]["median_s"])]
            for k, v in result["variants"].items()]
    common.print_table(f"powers of {result['elements']} float32 elements (medians)", ["variant", "ms", "kernel ms"],
                       rows)
    print(f"x ** 2 / x * x: {result['square_over_multiply']:.3f}; x ** 0.5 / sqrt(x): {result['root_over_sqrt']:.3f}"
          f" ({result['ratio_basis']})")


def main(argv: list[str] | None = None) -> dict:
    return common.run_main(NAME, __doc__, run, report, argv)


if __name__ == "__main__":
    main()
