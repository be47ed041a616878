"""Vectorized against scalar element-wise kernels, on a chain of transcendental functions.

    out = sqrt(log1p(exp(tanh(x)) + abs(sin(x))))      x: float32, standard normal

2^24 elements with --size large, 2^20 with --size small. The same fused chain runs with
the server's element-wise vector width at the device's default W (4 on GPUs, the native
float vector on CPUs: 16 with AVX-512; 4 if the process set 1) and at 1 (scalar code, one
element per work-item), in one process: changing the width makes the next block build a
kernel for that width (asserted: the launch covers n/W work-items, then n).
FUSION_VECTOR_WIDTH=1 sets the scalar width for a whole process.

Reported for both: kernel time on the device (from `clients.inspect()` records of the
timed runs) and wall time (build + `clients.sync()`), and their ratios, scalar / vector:
above 1, vector code is faster.

    python -m benchmarks.vectorization [--size small|large] [--repeat N] [--out DIR]
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

import clients

from . import common

NAME = "vectorization"
EXPRESSION = "sqrt(log1p(exp(tanh(x)) + abs(sin(x))))"
BUDGET_S = 10.0  # seconds of samples per variant at most (never fewer than MIN_REPEAT)
MIN_REPEAT = 3
RTOL, ATOL = 1e-5, 1e-6


def chain(x: Any, ns: Any) -> Any:
    return ns.sqrt(ns.log1p(ns.exp(ns.tanh(x)) + ns.abs(ns.sin(x))))


def set_width(width: int) -> None:
    """The element-wise vector width of the default device's server, for kernels built
    from now on (taken under the client's lock, as every server change is)."""
    from fusion_server.runtime.widths import VectorWidths

    def change(server) -> None:
        server.widths = VectorWidths.uniform(width)
        server.pack_lanes = False  # (a driver that packs lanes would get scalar code at every width)

    clients.client_for().call(change)


def get_width() -> int:
    """The width of float32 kernels (the chain's)."""
    return clients.client_for().call(lambda server: server.widths.of_size(4))


def run(size: str = "large", repeat: int = 10) -> dict:
    """Both widths, checked against numpy; the results."""
    n = common.SIZES[size]
    host = np.random.default_rng(4).standard_normal(n, dtype=np.float32)
    want = chain(host.astype(np.float64), np)
    clients.set_mode("lazy")
    x = clients.asarray(host)
    default = get_width()
    widths = {"vector": default if default > 1 else 4, "scalar": 1}
    records: dict[str, list] = {name: [] for name in widths}

    def variant(name: str) -> Callable[[], clients.Tensor]:
        def call() -> clients.Tensor:
            with clients.inspect() as rec:
                out = chain(x, clients)
            clients.sync()
            records[name].append(rec.kernels)
            return out  # kept alive until the sync: a dropped result is never computed
        return call

    variants = {name: variant(name) for name in widths}
    setup = {name: (lambda w=width: set_width(w)) for name, width in widths.items()}
    before = clients.client_for().call(lambda server: (server.widths, server.pack_lanes))
    errors, counts, facts = {}, {}, {}
    try:
        for name, fn in variants.items():
            setup[name]()
            got = fn().numpy()
            np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=f"{name} kernel differs from numpy")
            errors[name] = float(np.max(np.abs(got - want)))
            kernels = records[name][-1]
            if len(kernels) != 1:
                raise AssertionError(f"{name}: the chain launched {len(kernels)} kernels, expected 1")
            facts[name] = {"work_items": kernels[0].items, "kernel": kernels[0].name, "ops": kernels[0].ops}
            start = time.perf_counter()
            fn()
            counts[name] = max(MIN_REPEAT, min(repeat, int(BUDGET_S / (time.perf_counter() - start))))
        if facts["scalar"]["work_items"] != n or facts["vector"]["work_items"] * widths["vector"] < n \
                or facts["vector"]["work_items"] >= n:
            raise AssertionError(f"work-items per launch: {facts}; expected n/{widths['vector']} and n = {n}")
        for recs in records.values():
            recs.clear()
        wall = common.time_rounds(variants, repeat, warmup=0, setup=setup, repeats=counts)
    finally:
        clients.client_for().call(lambda server: (setattr(server, "widths", before[0]),
                                                  setattr(server, "pack_lanes", before[1])))

    device = {}
    for name, recs in records.items():
        seconds = [k.device_seconds for kernels in recs for k in kernels]
        if seconds and all(s is not None for s in seconds):
            device[name] = common.Timing(seconds)
    nbytes = 2 * n * host.itemsize
    result: dict[str, Any] = {
        "benchmark": NAME,
        "expression": EXPRESSION,
        "size": size,
        "elements": n,
        "dtype": "float32",
        "widths": widths,
        "kernels": facts,
        "variants": {
            name: {**t.to_dict(), "gb_per_s": nbytes / t.median / 1e9, "max_abs_error": errors[name]}
            for name, t in wall.items()
        },
        "device_kernel_time": {name: t.to_dict() for name, t in device.items()} or None,
        "scalar_over_vector": {"wall": common.ratio(wall["scalar"], wall["vector"])},
        "ratio_meaning": "time with scalar code / time with vector code: above 1, vector code is faster",
    }
    if len(device) == len(widths):
        result["scalar_over_vector"]["device"] = common.ratio(device["scalar"], device["vector"])
    return result


HEADERS = ["kernels", "width", "work-items", "kernel ms", "wall ms", "GB/s (wall)"]


def summary_rows(result: dict) -> list[list[Any]]:
    rows = []
    dev = result["device_kernel_time"] or {}
    for name, width in result["widths"].items():
        v = result["variants"][name]
        d = dev.get(name)
        rows.append([name, width, result["kernels"][name]["work_items"],
                     None if d is None else common.ms(d["median_s"]), common.ms(v["median_s"]), v["gb_per_s"]])
    return rows


def report(result: dict) -> None:
    common.print_table(f"vectorization: {result['expression']}, {result['elements']} float32 (medians)",
                       HEADERS, summary_rows(result))
    r = result["scalar_over_vector"]
    parts = [f"wall {r['wall']['of_medians']:.2f}x"]
    if "device" in r:
        parts.insert(0, f"kernel time {r['device']['of_medians']:.2f}x")
    print("vector code's speed-up over scalar code: " + ", ".join(parts))


def main(argv: list[str] | None = None) -> dict:
    return common.run_main(NAME, __doc__, run, report, argv)


if __name__ == "__main__":
    main()
