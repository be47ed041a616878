"""Run every benchmark, print a short table of the headline numbers, write all as JSON.

    python -m benchmarks.run [--size small|large] [--repeat N] [--out DIR]

The JSON file (results-<size>.json) goes to DIR: --out, else $OUT, else benchmarks/results/.
"""

from __future__ import annotations

import argparse
import os
import time
import traceback
from typing import Any

from . import (
    common,
    complex_chain,
    composites,
    elementwise_chain,
    host_cost,
    jit,
    matmul,
    plot,
    powers,
    recurring,
    reductions,
    scans,
    sorting,
    stencils,
    vectorization,
)

# (what, where in the results, comparison, target): the goals the numbers are held to.
TARGETS = [
    ("fused vs hand-written (speed)", ("chain", "ratios", "fused_vs_hand-written"), ">=", 0.9),
    ("fused vs numexpr (speed)", ("chain", "ratios", "fused_vs_numexpr"), ">=", 5.0),
    ("fused vs pyopencl.array (speed)", ("chain", "ratios", "fused_vs_pyopencl.array"), ">=", 50.0),
    ("fused vs eager (speed)", ("chain", "ratios", "fused_vs_eager"), ">=", None),
    ("fused vs numpy (speed)", ("chain", "ratios", "fused_vs_numpy"), ">=", None),
    ("host us per op, record only", ("host", "recording", "record_only"), "<=", 5.0),
    ("host us per op, with launches", ("host", "recording", "with_launches"), "<=", None),
    ("16-op chain x1024: fused / pyopencl.array (time)", ("host", "small_chain", "fused_over_pyopencl_array"),
     "<=", 0.2),
    ("row reduction: fused reads / bandwidth limit", ("reductions", "fraction_of_limit"), ">=", 0.85),
    ("row reduction: sum(x*y) reads / bandwidth limit", ("reductions", "plain_fraction_of_limit"), ">=", None),
    ("row reduction: fused reads / reading alone", ("reductions", "fraction_of_read_limit"), ">=", None),
    ("column sum (axis=0): reads / bandwidth limit", ("reductions", "column_fraction_of_limit"), ">=", None),
    ("full sum: reads / bandwidth limit", ("reductions", "full_fraction_of_limit"), ">=", None),
    ("row reduction: fused vs best hand-written (kernel time)",
     ("reductions", "device_kernel_time", "fused_vs_hand_written_best"), ">=", None),
    ("row reduction: fused vs numpy (speed)", ("reductions", "ratios", "fused_vs_numpy"), ">=", None),
    ("softmax: kernels per call", ("composites", "cases", "softmax", "kernels_per_call"), "<=", 3),
    ("softmax: fused vs numpy (speed)", ("composites", "cases", "softmax", "fused_vs_numpy"), ">=", 2.0),
    ("layer-norm: kernels per call", ("composites", "cases", "layer_norm", "kernels_per_call"), "<=", 3),
    ("layer-norm: fused vs numpy (speed)", ("composites", "cases", "layer_norm", "fused_vs_numpy"), ">=", 2.0),
    ("matmul + bias + relu: product kernels per fused run", ("matmul", "product_kernels_per_fused_run"), "==", 1),
    ("matmul + bias + relu: fused GFLOP/s", ("matmul", "variants", "fused", "gflop_per_s"), ">=", None),
    ("matmul + bias + relu: fused vs eager (speed)", ("matmul", "ratios", "fused_vs_eager"), ">=", None),
    ("matmul + bias + relu: fused vs numpy (speed)", ("matmul", "ratios", "fused_vs_numpy"), ">=", None),
    ("matmul + bias + relu: ours / cuBLAS (speed)", ("matmul", "ours_over_cublas"), ">=", 0.5),
    ("transcendental chain: vector / scalar code (kernel speed)",
     ("vectorization", "scalar_over_vector", "device"), ">=", None),
    ("200-op graph: steady state, host us per op", ("recurring", "graph", "steady_us_per_op"), "<=", 3.0),
    ("200-op graph: compiles after the 2nd iteration", ("recurring", "graph", "compiles_after_second"), "==", 0),
    ("200-op graph: explorations after the 2nd iteration", ("recurring", "graph", "explorations_after_second"),
     "==", 0),
    ("8 threads registering: ops/s", ("recurring", "threads", "8", "ops_per_s"), ">=", None),
    ("sort of 2^20 in 1024 rows: numpy / device (speed)", ("sorting", "cases", "1024 rows", "device_vs_numpy"),
     ">=", None),
    ("cumulative_sum, one row: numpy / fused (speed)", ("scans", "cases", "one row", "numpy_over_fused",
                                                        "paired_median"), ">=", None),
    ("cumulative_sum, many rows: torch / fused (speed)", ("scans", "cases", "many rows", "torch_over_fused",
                                                          "paired_median"), ">=", None),
    ("x ** 2 / x * x (time)", ("powers", "square_over_multiply"), "<=", 1.1),
    ("complex64 chain: kernels per fused run", ("complex", "kernels_per_fused_run"), "==", 1),
    ("complex64 chain: fused vs numpy (speed)", ("complex", "ratios", "fused_vs_numpy"), ">=", 1.0),
    ("complex64 chain: fused vs torch (speed)", ("complex", "ratios", "fused_vs_torch"), ">=", None),
    ("complex64 chain: fused vs torch CUDA (speed)", ("complex", "ratios", "fused_vs_torch-cuda"), ">=", None),
    ("x ** 0.5 / sqrt(x) (time)", ("powers", "root_over_sqrt"), "<=", None),
    ("box blur of x ** 2.2: kernels per run", ("stencils", "cases", "box blur (image pipeline)", "kernels_per_run"),
     "==", 1),
    ("box blur of x ** 2.2: fused vs numpy (speed)",
     ("stencils", "cases", "box blur (image pipeline)", "ratios", "fused_vs_numpy"), ">=", 1.0),
    ("heat step: kernels per run", ("stencils", "cases", "heat step (Laplacian)", "kernels_per_run"), "==", 1),
    ("heat step: fused vs numpy (speed)", ("stencils", "cases", "heat step (Laplacian)", "ratios", "fused_vs_numpy"),
     ">=", 1.0),
    ("x - x.T: kernels per run", ("stencils", "cases", "x - x.T", "kernels_per_run"), "==", 1),
    ("8 threads registering: ops/s vs 1 thread", ("recurring", "threads", "8_over_1"), ">=", 1.0),
    ("jit: 200-op graph, host us per op", ("jit", "graph", "jit_cpu_us_per_op"), "<=", 0.5),
    ("jit: call, fixed CPU us", ("jit", "call_overhead", "fixed_us"), "<=", 15.0),
    ("jit: call, CPU us per kernel", ("jit", "call_overhead", "per_kernel_us"), "<=", 2.0),
    ("jit: driver's enqueue of a tiny kernel, CPU us", ("jit", "call_overhead", "driver_launch_us"), "<=", None),
    ("jit: the same onto an idle queue, CPU us", ("jit", "call_overhead", "driver_idle_launch_us"), "<=", None),
    ("16-op chain x1024: jit / pyopencl.array (time)", ("jit", "small_chain", "jit_over_pyopencl.array"), "<=", 0.15),
    ("16-op chain x1024: lazy / pyopencl.array (time)", ("jit", "small_chain", "lazy_over_pyopencl.array"), "<=",
     0.3),
    ("16-op chain x1024: lazy, no run cache / pyopencl.array (time)",
     ("jit", "small_chain", "lazy, no run cache_over_pyopencl.array"), "<=", None),
    ("16-op chain x1024: jit / torch CPU (time)", ("jit", "small_chain", "jit_over_torch"), "<=", 1.0),
    ("16-op chain x1024: jit / torch CUDA (time)", ("jit", "small_chain", "jit_over_torch-cuda"), "<=", 1.0),
    ("16-op chain x1024 in a loop: jit / pyopencl.array (time)",
     ("jit", "small_chain", "in_a_loop", "jit_over_pyopencl.array"), "<=", 0.15),
    ("16-op chain x1024 in a loop: lazy / pyopencl.array (time)",
     ("jit", "small_chain", "in_a_loop", "lazy_over_pyopencl.array"), "<=", 0.3),
    ("16-op chain x1024 in a loop: jit / torch CPU (time)", ("jit", "small_chain", "in_a_loop", "jit_over_torch"),
     "<=", 1.0),
    ("16-op chain x1024 in a loop: jit / torch CUDA (time)",
     ("jit", "small_chain", "in_a_loop", "jit_over_torch-cuda"), "<=", 1.0),
    ("16-op chain: jit vs hand-written (wall)", ("jit", "large_chain", "jit_vs_hand_written"), ">=", 0.9),
]


def _attempt(name: str, module: Any, *args: Any) -> dict:
    """`module.run(*args)` and its report; on an exception, {"failed": the error} and a note."""
    try:
        result = module.run(*args)
    except Exception as exc:  # any failure is reported, then the run goes on
        message = f"{type(exc).__name__}: {exc}"
        head = "\n".join(message.splitlines()[:4])  # build logs are long: the JSON has them whole
        print(f"\n{name} FAILED: {head}", flush=True)
        return {"failed": message, "traceback": traceback.format_exc()}
    module.report(result)
    return result


def _value(results: dict, path: tuple[str, ...]) -> float | None:
    node: Any = results
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None  # e.g. numexpr missing
        node = node[key]
    if isinstance(node, dict):
        for key in ("of_medians", "median_us_per_op"):
            if key in node:
                return node[key]
    return node


def summary(results: dict) -> list[list[Any]]:
    """Rows (measure, value, target, met) for the table printed last."""
    chain = results["chain"]
    rows: list[list[Any]] = [
        ["fused chain, median ms", common.ms(chain["variants"]["fused"]["median_s"]), None, None],
        ["fused chain, GB/s", chain["variants"]["fused"]["gb_per_s"], None, None],
        ["kernels per fused run", chain["kernels_per_fused_run"], "== 1",
         _met(chain["kernels_per_fused_run"] == 1)],
    ]
    mem = chain["memory"]
    if mem["fused_peak_bytes"] is not None:
        share = mem["fused_peak_bytes"] / mem["inputs_plus_output_bytes"]
        rows.append(["fused peak memory / (inputs + output)", share, "~ 1", _met(share <= 1.05)])
    for label, path, op, target in TARGETS:
        value = _value(results, path)
        if value is None:
            failed = isinstance(results.get(path[0]), dict) and "failed" in results[path[0]]
            rows.append([label, None, None if target is None else f"{op} {target:g}",
                         "FAILED" if failed else "skipped"])
            continue
        met = None if target is None else _compare(value, op, target)
        rows.append([label, value, None if target is None else f"{op} {target:g}", _met(met)])
    return rows


def _compare(value: float, op: str, target: float) -> bool:
    return value >= target if op == ">=" else value <= target if op == "<=" else value == target


def _met(flag: bool | None) -> str | None:
    return None if flag is None else ("yes" if flag else "NO")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    common.add_common_args(parser, default_repeat=10)
    args = parser.parse_args(argv)
    out_dir = args.out or common.default_out_dir()
    print(f"device: {common.device_description()}", flush=True)
    start = time.perf_counter()
    results: dict = {"environment": common.environment(), "size": args.size, "repeat": args.repeat}
    # The element-wise chain first: its peak-memory reading needs a fresh buffer pool.
    results["chain"] = elementwise_chain.run(args.size, args.repeat)
    elementwise_chain.report(results["chain"])
    results["host"] = host_cost.run(args.repeat)
    host_cost.report(results["host"])
    # A failure in one of these (a kernel that does not build on this device, a wrong
    # result) is recorded and the others still run: a device run is too short to lose.
    results["reductions"] = _attempt("reductions", reductions, args.size, args.repeat)
    results["composites"] = _attempt("composites", composites, args.size, args.repeat)
    # The product's size follows the device (1024 on CPUs, 4096 on GPUs), not --size.
    results["matmul"] = _attempt("matmul", matmul, None, args.repeat)
    results["vectorization"] = _attempt("vectorization", vectorization, args.size, args.repeat)
    results["recurring"] = _attempt("recurring", recurring, args.size, max(1, args.repeat // 3))
    results["sorting"] = _attempt("sorting", sorting, args.size, args.repeat)
    results["stencils"] = _attempt("stencils", stencils, args.size, args.repeat)
    results["powers"] = _attempt("powers", powers, args.size, args.repeat)
    results["scans"] = _attempt("scans", scans, args.size, args.repeat)
    results["jit"] = _attempt("jit", jit, args.size, max(5, args.repeat // 2))
    results["complex"] = _attempt("complex_chain", complex_chain, args.size, args.repeat)
    results["seconds"] = time.perf_counter() - start
    results["load_average_after"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    results["summary"] = [dict(zip(("measure", "value", "target", "met"), r)) for r in summary(results)]
    path = common.write_json(out_dir / f"results-{args.size}.json", results)
    common.print_table(
        f"summary: {common.device_description()}, size {args.size}, {results['seconds']:.0f} s",
        ["measure", "value", "target", "met"],
        summary(results),
    )
    print(f"results: {path}")
    picture = plot.plot(results, out_dir / f"results-{args.size}.png")
    print(f"plot: {picture}" if picture else "plot: skipped (matplotlib is not installed)")
    return results


if __name__ == "__main__":
    main()
