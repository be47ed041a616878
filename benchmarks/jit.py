"""clients.jit: what a captured call costs the host, side by side with the lazy path and peers.

(a) The recurring 200-op graph of benchmarks.recurring, jitted: host time per op, amortized
    over calls (the calling thread's CPU time, and wall time), against the lazy path.
(b) Call overhead: the calling thread's CPU time per call of jitted functions that launch
    1, 4 and 16 kernels, with the fixed and per-kernel parts fitted; likewise the Python
    bytecodes a call runs (see common.bytecodes), which a noisy machine leaves alone.
(c) The 16-op chain of benchmarks.elementwise_chain on 1024 float32 elements, build +
    read: jitted, not jitted, the hand-written kernel (one launch and a blocking read: the
    floor of the round trip), pyopencl.array (with its MemoryPool), PyTorch eager on the CPU
    (when installed) and numpy, in interleaved rounds: one call of each variant per
    round (each call after the other variants' work: cold caches, the driver's threads
    asleep), and again in loops of LOOP calls (each round's sample the median of a loop:
    a call as a program's loop makes it).
(d) The same chain over --size elements (2^24 large): wall time of a jitted call and a
    wait, against the hand-written kernel's enqueue and finish.

    python -m benchmarks.jit [--size small|large] [--repeat N] [--out DIR]
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyopencl.array as cla
import pyopencl.clmath as clmath
import pyopencl.tools as cl_tools

import clients

from . import common
from .elementwise_chain import chain, check, hand_kernel, inputs
from .recurring import _graph

NAME = "jit"
SMALL = 1024
CALLS = 200  # calls per timed sample of the host-cost parts
LOOP = 20  # calls in a row per round of part (c)'s loop timing
PEERS = ("hand-written", "pyopencl.array", "numpy", "torch", "torch-cuda")


def recurring_graph(samples: int) -> dict:
    """Part (a): the 200-op graph, jitted and lazy (each call launched, not waited for)."""
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(4096).astype(np.float32) for _ in range(2))
    x, y = clients.asarray(a), clients.asarray(b)
    jitted = clients.jit(_graph)
    want = _graph(x, y).numpy()
    for _ in range(3):
        got = jitted(x, y).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    ops = 200
    with clients.inspect() as rec:
        jitted(x, y)
    jit_cpu, jit_wall = common.cpu_per_call(lambda: jitted(x, y), CALLS // 4, samples)

    def lazy() -> clients.Tensor:
        out = _graph(x, y)
        clients.flush()
        return out

    lazy_cpu, lazy_wall = common.cpu_per_call(lazy, 5, samples)
    return {
        "ops": ops,
        "kernels_per_call": len(rec.kernels),
        "jit_cpu_us_per_op": common.us(jit_cpu / ops),
        "jit_wall_us_per_op": common.us(jit_wall / ops),
        "lazy_cpu_us_per_op": common.us(lazy_cpu / ops),
        "lazy_wall_us_per_op": common.us(lazy_wall / ops),
        "lazy_over_jit_cpu": lazy_cpu / jit_cpu,
    }


def _steps(k: int) -> Callable[[clients.Tensor], clients.Tensor]:
    """A function that launches k kernels: a reversed view of a block value ends its block."""
    def f(x: clients.Tensor) -> clients.Tensor:
        for _ in range(k):
            x = (x * 1.0001 + 0.5)[::-1]
        return x

    return f


def _calls(f: Callable[[clients.Tensor], clients.Tensor], x: clients.Tensor, n: int) -> clients.Tensor:
    """`n` calls of `f(x)`, each dropping the last one's result, as a timed loop does."""
    for _ in range(n):
        out = f(x)
    return out


def call_overhead(samples: int) -> dict:
    """Part (b): CPU time per jitted call against the kernels it launches."""
    x = clients.asarray(np.linspace(0, 1, SMALL, dtype=np.float32))
    rows = {}
    for k in (1, 4, 16):
        f = clients.jit(_steps(k))
        f(x)
        with clients.inspect() as rec:
            f(x)
        kernels = len(rec.kernels)
        cpu, wall = common.cpu_per_call(lambda f=f: f(x), CALLS, samples)
        counted = common.bytecodes(lambda f=f: _calls(f, x, 20)) / 20
        clients.sync()
        rows[str(k)] = {"kernels": kernels, "cpu_us": common.us(cpu), "wall_us": common.us(wall),
                        "bytecodes": counted}
    ks = np.array([r["kernels"] for r in rows.values()], float)
    us = np.array([r["cpu_us"] for r in rows.values()])
    per_kernel, fixed = np.polyfit(ks, us, 1)
    busy, idle = launch_cost(samples)
    bc_per_kernel, bc_fixed = np.polyfit(ks, np.array([r["bytecodes"] for r in rows.values()]), 1)
    return {"calls": rows, "fixed_us": float(fixed), "per_kernel_us": float(per_kernel),
            "fixed_bytecodes": float(bc_fixed), "per_kernel_bytecodes": float(bc_per_kernel),
            "driver_launch_us": busy, "driver_idle_launch_us": idle}


def _torch_chains(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> tuple[dict[str, Callable[[], Any]], str]:
    """PyTorch eager on the CPU, and on CUDA where it has a GPU (build + read each)."""
    try:
        import torch
    except ImportError:
        return {}, "PyTorch is not installed"
    torch.set_num_threads(1)  # the chain is 1024 elements: threads only add overhead
    ta, tb, tc = (torch.from_numpy(v) for v in (a, b, c))
    out = {"torch": lambda: chain(ta, tb, tc, torch).numpy()}
    note = f"PyTorch {torch.__version__} eager on the CPU"
    if torch.cuda.is_available():
        ga, gb, gc_ = (t.cuda() for t in (ta, tb, tc))
        out["torch-cuda"] = lambda: chain(ga, gb, gc_, torch).cpu().numpy()
        note += f" and on {torch.cuda.get_device_name()}"
    return out, note


def launch_cost(samples: int) -> tuple[float, float]:
    """CPU us of the driver's enqueue of a tiny kernel whose arguments are already set,
    onto a busy queue (the floor of a replay's cost per kernel) and onto an idle one (what
    the first launch of a call that waits for its result costs)."""
    import pyopencl as cl

    queue = clients.client_for().server.runtime.queue
    program = cl.Program(queue.context, "__kernel void nothing(__global float* x) { x[get_global_id(0)] = 0.0f; }")
    kernel = cl.Kernel(program.build(), "nothing")
    buf = cl.Buffer(queue.context, cl.mem_flags.READ_WRITE, 4 * 1024)
    kernel.set_arg(0, buf)
    cpu, _ = common.cpu_per_call(lambda: cl.enqueue_nd_range_kernel(queue, kernel, (1024,), None), CALLS, samples)
    # The same enqueue onto an idle queue (each kernel waited for, off the clock), as a
    # call that waits for its result meets it: PoCL then wakes its worker threads from the
    # calling thread (17 us against 1.5 to 1.9 on a busy queue, 2-core Intel Xeon).
    idle = []
    for _ in range(samples):
        spent = 0.0
        for _ in range(CALLS // 4):
            start = time.thread_time()
            event = cl.enqueue_nd_range_kernel(queue, kernel, (1024,), None)
            spent += time.thread_time() - start
            event.wait()
        idle.append(spent / (CALLS // 4))
    return common.us(cpu), common.us(statistics.median(idle))


def small_chain(rounds: int) -> dict:
    """Part (c): the 16-op chain on 1024 elements, build + read, side by side."""
    a, b, c = inputs(SMALL, seed=1)
    want = chain(a, b, c, np)
    queue = clients.client_for().server.runtime.queue
    ta, tb, tc = (clients.asarray(v) for v in (a, b, c))
    pool = cl_tools.MemoryPool(cl_tools.ImmediateAllocator(queue))
    ga, gb, gc_ = (cla.to_device(queue, v, allocator=pool) for v in (a, b, c))
    jitted = clients.jit(lambda a, b, c: chain(a, b, c, clients))
    check("16-op chain, jit", jitted(ta, tb, tc).numpy(), want)
    check("16-op chain, jit replay", jitted(ta, tb, tc).numpy(), want)
    enqueue, hand_out = hand_kernel(queue, SMALL), cla.empty_like(ga)

    def hand_written() -> np.ndarray:  # the floor of the round trip: one launch, one blocking read
        enqueue(ga, gb, gc_, hand_out)
        return hand_out.get()

    check("16-op chain, hand-written", hand_written(), want)
    server = clients.client_for().server

    def lazy_plain() -> np.ndarray:  # the same, each time through the plan store
        server.run_cache_enabled = False
        try:
            return chain(ta, tb, tc, clients).numpy()
        finally:
            server.run_cache_enabled = True

    variants = {
        "jit": lambda: jitted(ta, tb, tc).numpy(),
        "lazy": lambda: chain(ta, tb, tc, clients).numpy(),
        "lazy, no run cache": lazy_plain,
        "hand-written": hand_written,
        "pyopencl.array": lambda: chain(ga, gb, gc_, clmath).get(),
        "numpy": lambda: chain(a, b, c, np),
    }
    torch_runs, torch_note = _torch_chains(a, b, c)
    for name, torch_run in torch_runs.items():
        check(f"16-op chain, {name}", torch_run(), want)
        variants[name] = torch_run
    timings = common.time_rounds(variants, rounds, warmup=3, apart=("torch-cuda",))
    out: dict = {"elements": SMALL, "variants": {k: t.to_dict() for k, t in timings.items()}, "torch": torch_note}
    out.update(_ratios(timings))
    looped = common.time_rounds(variants, max(3, rounds // 10), warmup=3, apart=("torch-cuda",), burst=LOOP)
    out["in_a_loop"] = {"calls": LOOP, "variants": {k: t.to_dict() for k, t in looped.items()}, **_ratios(looped)}
    # Python byte codes of one lazy build + read (the run cache replays it; without it
    # every op goes through the plan store): a count the machine's noise leaves alone.
    out["lazy_bytecodes"] = common.bytecodes(variants["lazy"])
    out["lazy_no_run_cache_bytecodes"] = common.bytecodes(lazy_plain)
    return out


def _ratios(timings: dict) -> dict:
    """Each of our variants' time over each peer's."""
    return {f"{name}_over_{peer}": common.ratio(timings[name], timings[peer])
            for name in ("jit", "lazy", "lazy, no run cache") for peer in PEERS if peer in timings}


def large_chain(n: int, repeat: int) -> dict:
    """Part (d): wall time of a jitted call + wait against the hand-written kernel's."""
    a, b, c = inputs(n, seed=2)
    queue = clients.client_for().server.runtime.queue
    ta, tb, tc = (clients.asarray(v) for v in (a, b, c))
    ga, gb, gc_ = (cla.to_device(queue, v) for v in (a, b, c))
    out = cla.empty_like(ga)
    enqueue = hand_kernel(queue, n)
    jitted = clients.jit(lambda a, b, c: chain(a, b, c, clients))
    want = chain(a, b, c, np)
    check("16-op chain, jit (large)", jitted(ta, tb, tc).numpy(), want)
    enqueue(ga, gb, gc_, out).wait()
    check("16-op chain, hand-written (large)", out.get(), want)

    def jit_run() -> clients.Tensor:
        result = jitted(ta, tb, tc)
        clients.sync()
        return result

    def hand_run() -> None:
        enqueue(ga, gb, gc_, out)
        queue.finish()

    timings = common.time_rounds({"jit": jit_run, "hand-written": hand_run}, repeat, warmup=2)
    return {
        "elements": n,
        "variants": {k: t.to_dict() for k, t in timings.items()},
        # >1: the jitted call is faster than the hand-written kernel's enqueue + finish
        "jit_vs_hand_written": common.ratio(timings["hand-written"], timings["jit"]),
    }


def run(size: str = "large", repeat: int = 10) -> dict:
    clients.set_mode("lazy")
    samples = max(5, repeat)
    return {
        "benchmark": NAME,
        "graph": recurring_graph(samples),
        "call_overhead": call_overhead(samples),
        "small_chain": small_chain(30 * repeat),
        "large_chain": large_chain(common.SIZES[size], max(5, repeat)),
    }


def summary_rows(result: dict) -> list[list[Any]]:
    g, o, s, big = result["graph"], result["call_overhead"], result["small_chain"], result["large_chain"]
    rows = [
        ["200-op graph, jit: host CPU us per op", g["jit_cpu_us_per_op"], "us"],
        ["200-op graph, jit: wall us per op", g["jit_wall_us_per_op"], "us"],
        ["200-op graph, lazy: host CPU us per op", g["lazy_cpu_us_per_op"], "us"],
        ["jit call: fixed CPU us", o["fixed_us"], "us"],
        ["jit call: CPU us per kernel", o["per_kernel_us"], "us"],
        ["the driver's enqueue of a tiny kernel: CPU us", o["driver_launch_us"], "us"],
        ["the same onto an idle queue: CPU us", o["driver_idle_launch_us"], "us"],
        ["jit call: fixed Python bytecodes", round(o["fixed_bytecodes"]), ""],
        ["jit call: Python bytecodes per kernel", round(o["per_kernel_bytecodes"]), ""],
    ]
    for r in o["calls"].values():
        rows.append([f"jit call of {r['kernels']} kernels: CPU us (wall us {r['wall_us']:.1f})", r["cpu_us"], "us"])
    loop = s.get("in_a_loop", {"variants": {}})
    for timed, how in ((s, "one call per round"), (loop, f"in loops of {loop.get('calls')}")):
        for name, v in timed["variants"].items():
            rows.append([f"16-op chain x{s['elements']}, {name} ({how})", common.us(v["median_s"]), "us"])
        for key in ("jit_over_hand-written", "jit_over_pyopencl.array", "lazy_over_pyopencl.array",
                    "lazy, no run cache_over_pyopencl.array", "lazy_over_torch", "lazy_over_torch-cuda",
                    "jit_over_torch", "jit_over_torch-cuda", "jit_over_numpy"):
            if key in timed:
                rows.append([f"16-op chain x{s['elements']}: {key.replace('_over_', ' / ')} (time, {how})",
                             timed[key]["of_medians"], "x"])
    rows.append([f"16-op chain x{s['elements']}, lazy: Python bytecodes", s["lazy_bytecodes"], ""])
    rows.append([f"16-op chain x{s['elements']}, lazy, no run cache: Python bytecodes",
                 s["lazy_no_run_cache_bytecodes"], ""])
    rows.append([f"16-op chain x{big['elements']}: jit vs hand-written (speed, wall)",
                 big["jit_vs_hand_written"]["of_medians"], "x"])
    return rows


def report(result: dict) -> None:
    common.print_table("clients.jit (medians)", ["measure", "value", "unit"], summary_rows(result))
    print(f"torch: {result['small_chain']['torch']}")


def main(argv: list[str] | None = None) -> dict:
    return common.run_main(NAME, __doc__, run, report, argv)


if __name__ == "__main__":
    main()
