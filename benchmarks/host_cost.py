"""What the host pays per operation, and what that means for small arrays.

(a) Recording: microseconds per op of building a chain `y = y * 1.0001 + 0.5` on a
    1024-element float32 tensor. "record only" times chains short enough to fit one
    block (no launch happens while recording); "with launches" times a long chain whose
    blocks close and launch as it grows, up to a final `flush()` (no wait), with the run
    cache (its recurring 64-op batches replayed) and, in alternate samples, without it
    (every op through the stream and the plan store). The result is
    read once after each sample, outside the clock. The figures are the calling thread's
    CPU time (on a CPU device the kernels run on the same cores, and wall time counts
    them too); the wall times are given beside them.
    Beside the times, the Python bytecodes the thread runs per op (common.bytecodes):
    a count that the machine's noise leaves alone, to compare changes of the hot path.
(b) End to end on small arrays: the 16-op chain of the element-wise benchmark on 1024
    float32 elements, build + `.numpy()`, against pyopencl.array (16 ops + `.get()`) and
    numpy. Small tensors are latency-bound: fusion saves launches and round trips.
(c) Slices: the calling thread's CPU time to record one slice (`x[1:-1, 1:-1]`) against
    one multiply, and a stencil written with slices on a small image (the 3 x 3 box blur
    of `x * x` on 256^2 float32: nine slices, ten ops, one kernel), build + `.numpy()`:
    lazy, lazy without the run cache, jitted and numpy, CPU time per call and wall time.

    python -m benchmarks.host_cost [--repeat N] [--out DIR]
"""

from __future__ import annotations

import gc
import statistics
import time
from typing import Any

import numpy as np
import pyopencl.array as cla
import pyopencl.clmath as clmath
import pyopencl.tools as cl_tools

import clients

from . import common
from .elementwise_chain import chain, check, inputs
from .stencils import box_blur

NAME = "host_cost"
ELEMENTS = 1024
LONG_CHAIN_OPS = 2048
# Samples per --repeat: the samples are short, and the medians need many of them.
RECORD_SAMPLES = 50
LAUNCH_SAMPLES = 3
END_TO_END_ROUNDS = 30
STENCIL_SIDE = 256
STENCIL_CALLS = 20  # calls per sample of part (c)


def _step(y: Any) -> Any:
    return y * 1.0001 + 0.5  # two ops


def _reference(x: np.ndarray, steps: int) -> np.ndarray:
    y = x
    for _ in range(steps):
        y = _step(y)
    return y


def _chain(x: clients.Tensor, steps: int, flush: bool) -> clients.Tensor:
    """`steps` steps recorded from `x` (and flushed, if asked)."""
    y = x
    for _ in range(steps):
        y = _step(y)
    if flush:
        clients.flush()
    return y


def _record(x: clients.Tensor, steps: int, flush: bool) -> tuple[float, float, int, clients.Tensor]:
    """(thread CPU seconds, wall seconds) to record `steps` steps (and flush, if asked);
    kernels launched meanwhile."""
    launched = clients.stats()["kernels_launched"]
    gc.disable()  # a collection inside the loop would be charged to a few ops
    try:
        cpu, wall = time.thread_time(), time.perf_counter()
        y = _chain(x, steps, flush)
        cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
    finally:
        gc.enable()
    return cpu, wall, clients.stats()["kernels_launched"] - launched, y


def recording(samples: int, launch_samples: int) -> dict:
    """Part (a): host microseconds per recorded op, without and with block launches (the
    latter with the run cache, which replays the chain's recurring batches, and without
    it, in alternate samples)."""
    host = np.linspace(0.5, 1.5, ELEMENTS, dtype=np.float32)
    x = clients.asarray(host)
    server = clients.client_for().server
    # Stay below the fuser's ops-per-kernel limit, so that no block closes while recording.
    steps = min(30, getattr(server, "max_ops", 64) // 2 - 1)
    configs = {  # label: (steps, flush, samples, run cache)
        "record_only": (steps, False, samples, True),
        "with_launches": (LONG_CHAIN_OPS // 2, True, launch_samples, True),
        "with_launches_no_run_cache": (LONG_CHAIN_OPS // 2, True, launch_samples, False),
    }
    samples_of: dict = {label: ([], [], []) for label in configs}
    cached = server.run_cache_enabled
    try:
        for i in range(max(c[2] for c in configs.values()) + 1):  # the first sample warms up
            for label, (n_steps, flush, count, run_cache) in configs.items():
                if i > count:
                    continue
                server.run_cache_enabled = run_cache and cached
                cpu, wall, launched, y = _record(x, n_steps, flush)
                got = y.numpy()  # outside the clock: runs the chain and reads it
                if i == 0:
                    check(f"host cost, {label}", got, _reference(host, n_steps))
                    continue
                per_op, wall_per_op, launches = samples_of[label]
                per_op.append(cpu / (2 * n_steps))
                wall_per_op.append(wall / (2 * n_steps))
                launches.append(launched)
        results = {}
        for label, (n_steps, flush, _, run_cache) in configs.items():
            per_op, wall_per_op, launches = samples_of[label]
            if label == "record_only":
                assert max(launches) == 0, f"{max(launches)} kernels launched while recording {2 * steps} ops"
            server.run_cache_enabled = run_cache and cached
            held: list = []  # (the chain, read after the count)
            counted = common.bytecodes(lambda n=n_steps, f=flush, out=held: out.append(_chain(x, n, f)))
            held.pop().numpy()
            results[label] = {
                "ops_per_sample": 2 * n_steps,
                "median_us_per_op": common.us(statistics.median(per_op)),
                "min_us_per_op": common.us(min(per_op)),
                "median_wall_us_per_op": common.us(statistics.median(wall_per_op)),
                "samples": len(per_op),
                "bytecodes_per_op": counted / (2 * n_steps),
                "kernels_launched_per_sample": statistics.median(launches),
            }
    finally:
        server.run_cache_enabled = cached
    return results


def end_to_end(rounds: int) -> dict:
    """Part (b): the 16-op chain on 1024 elements, fused vs pyopencl.array vs numpy."""
    a, b, c = inputs(ELEMENTS, seed=1)
    want = chain(a, b, c, np)
    queue = clients.client_for().server.runtime.queue
    ta, tb, tc = (clients.asarray(v) for v in (a, b, c))
    pool = cl_tools.MemoryPool(cl_tools.ImmediateAllocator(queue))  # as pyopencl's users run it
    ga, gb, gc_ = (cla.to_device(queue, v, allocator=pool) for v in (a, b, c))

    with clients.inspect() as rec:
        out = chain(ta, tb, tc, clients)
    check("16-op chain, fused", out.numpy(), want)
    assert len(rec.kernels) == 1, f"the small fused chain launched {len(rec.kernels)} kernels"
    ops = len(rec.kernels[0].ops)
    check("16-op chain, pyopencl.array", chain(ga, gb, gc_, clmath).get(), want)

    variants = {
        "fused": lambda: chain(ta, tb, tc, clients).numpy(),
        "pyopencl.array": lambda: chain(ga, gb, gc_, clmath).get(),
        "numpy": lambda: chain(a, b, c, np),
    }
    timings = common.time_rounds(variants, rounds, warmup=3)
    fused, cla_t, np_t = timings["fused"], timings["pyopencl.array"], timings["numpy"]
    return {
        "elements": ELEMENTS,
        "ops": ops,
        "variants": {name: t.to_dict() for name, t in timings.items()},
        "fused_over_pyopencl_array": common.ratio(fused, cla_t),
        "fused_over_numpy": common.ratio(fused, np_t),
    }


def slices(samples: int) -> dict:
    """Part (c): a slice's recording cost, and a stencil of slices end to end."""
    img = np.random.default_rng(3).random((STENCIL_SIDE, STENCIL_SIDE), dtype=np.float32)
    x = clients.asarray(img)
    want = box_blur(img * img)
    server = clients.client_for().server
    jitted = clients.jit(lambda g: box_blur(g * g))

    def lazy_plain() -> np.ndarray:  # every op through the stream and the plan store
        server.run_cache_enabled = False
        try:
            return box_blur(x * x).numpy()
        finally:
            server.run_cache_enabled = True

    variants = {
        "lazy": lambda: box_blur(x * x).numpy(),
        "lazy, no run cache": lazy_plain,
        "jit": lambda: jitted(x).numpy(),
        "numpy": lambda: box_blur(img * img),
    }
    with clients.inspect() as rec:
        got = variants["lazy"]()
    assert len(rec.kernels) == 1, f"the blur launched {len(rec.kernels)} kernels"
    out: dict = {"side": STENCIL_SIDE, "variants": {}}
    for name, fn in variants.items():
        for _ in range(3):  # (warm: the kernels built, the run captured)
            got = fn()
        check(f"box blur, {name}", got, want)
        cpu, wall = common.cpu_per_call(fn, STENCIL_CALLS, samples)
        out["variants"][name] = {"cpu_us": common.us(cpu), "wall_us": common.us(wall)}
    for name, record in (("slice", lambda: x[1:-1, 1:-1]), ("multiply", lambda: x * 2.0)):
        cpu, wall = common.cpu_per_call(record, 200, samples)
        out[f"{name}_record_cpu_us"] = common.us(cpu)
    return out


def run(repeat: int = 10) -> dict:
    """The three parts; `repeat` scales the number of samples."""
    clients.set_mode("lazy")
    return {
        "benchmark": NAME,
        "recording": recording(RECORD_SAMPLES * repeat, LAUNCH_SAMPLES * repeat),
        "small_chain": end_to_end(END_TO_END_ROUNDS * repeat),
        "slices": slices(5 * repeat),
    }


def summary_rows(result: dict) -> list[list[Any]]:
    """Rows (measure, value, unit) for the short table."""
    rec, small = result["recording"], result["small_chain"]
    v = small["variants"]
    return [
        ["host CPU per op, record only", rec["record_only"]["median_us_per_op"], "us"],
        ["host CPU per op, with launches", rec["with_launches"]["median_us_per_op"], "us"],
        ["host CPU per op, with launches, no run cache", rec["with_launches_no_run_cache"]["median_us_per_op"],
         "us"],
        ["wall per op, record only", rec["record_only"]["median_wall_us_per_op"], "us"],
        ["wall per op, with launches", rec["with_launches"]["median_wall_us_per_op"], "us"],
        ["Python bytecodes per op, record only", round(rec["record_only"]["bytecodes_per_op"]), ""],
        ["Python bytecodes per op, with launches", round(rec["with_launches"]["bytecodes_per_op"]), ""],
        ["Python bytecodes per op, with launches, no run cache",
         round(rec["with_launches_no_run_cache"]["bytecodes_per_op"]), ""],
        [f"{small['ops']}-op chain x{small['elements']}, fused", common.us(v["fused"]["median_s"]), "us"],
        [f"{small['ops']}-op chain x{small['elements']}, pyopencl.array",
         common.us(v["pyopencl.array"]["median_s"]), "us"],
        [f"{small['ops']}-op chain x{small['elements']}, numpy", common.us(v["numpy"]["median_s"]), "us"],
        ["fused / pyopencl.array", small["fused_over_pyopencl_array"]["of_medians"], "x"],
        ["fused / numpy", small["fused_over_numpy"]["of_medians"], "x"],
    ] + _slice_rows(result["slices"])


def _slice_rows(sl: dict) -> list[list[Any]]:
    rows = [["record a slice: host CPU", sl["slice_record_cpu_us"], "us"],
            ["record a multiply: host CPU", sl["multiply_record_cpu_us"], "us"]]
    for name, v in sl["variants"].items():
        rows.append([f"box blur {sl['side']}^2, {name}: host CPU (wall {v['wall_us']:.0f} us)", v["cpu_us"], "us"])
    return rows


def report(result: dict) -> None:
    common.print_table("host cost (medians)", ["measure", "value", "unit"], summary_rows(result))
    w = result["recording"]["with_launches"]
    print(f"with launches: {w['ops_per_sample']} ops and "
          f"{w['kernels_launched_per_sample']:.0f} kernels per sample")


def main(argv: list[str] | None = None) -> dict:
    # --size is accepted for symmetry; the sizes here are fixed.
    return common.run_main(NAME, __doc__, run, report, argv, call=lambda args: run(args.repeat),
                           json_name=lambda args, result: f"{NAME}.json")


if __name__ == "__main__":
    main()
