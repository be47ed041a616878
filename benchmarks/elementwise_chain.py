"""An element-wise chain of 16 ops over three float32 arrays, fused and not.

    out = tanh(a*b + c) * 0.5 + exp(-abs(a)) * sqrt(b*b + 1) - c / (1 + a*a)

Variants, all timed in one process as "compute and wait" (no host read for device ones):

- fused:        lazy tensors, the whole chain in one generated kernel (build + sync)
- eager:        the same code in eager mode, one kernel per op (build + sync)
- hand-written: one OpenCL kernel written for this expression, vector loads and stores
                (the width and access of the server's kernels on the device),
                one vector per work-item and a scalar tail (enqueue + finish)
- pyopencl.array: the expression on pyopencl.array.Array with pyopencl's MemoryPool, same queue (ops + finish)
- numexpr:      numexpr.evaluate into a preallocated output (skipped when not installed)
- numpy:        the expression on numpy arrays

Every device variant runs on the device and queue of the fusion server.

    python -m benchmarks.elementwise_chain [--size small|large] [--repeat N] [--out DIR]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pyopencl.clmath as clmath
import pyopencl.tools as cl_tools

import clients

from . import common
from . import device_timing as dtime

NAME = "elementwise_chain"
EXPRESSION = "tanh(a*b + c) * 0.5 + exp(-abs(a)) * sqrt(b*b + 1) - c / (1 + a*a)"
RTOL = 1e-4
# Terms cancel near zero, where a relative tolerance alone means nothing: allow an
# absolute error of a few float32 ulps of the result's scale.
ATOL = 1e-6
FAST_REPEAT = 3

HAND_SOURCE = """
#define CHAIN(a, b, c) (tanh((a) * (b) + (c)) * 0.5f + exp(-fabs(a)) * sqrt((b) * (b) + 1.0f) \\
                        - (c) / (1.0f + (a) * (a)))

__kernel void chain(__global const float *restrict a, __global const float *restrict b,
                    __global const float *restrict c, __global float *restrict out,
                    const int n)
{
    const INDEX i = get_global_id(0) * WIDTH;
    if (i + WIDTH <= n) {
        const VEC x = LOADV(a + i), y = LOADV(b + i), z = LOADV(c + i);
        STOREV(CHAIN(x, y, z), out + i);
    } else {
        for (INDEX j = i; j < n; ++j)
            out[j] = CHAIN(a[j], b[j], c[j]);
    }
}
"""


def chain(a: Any, b: Any, c: Any, ns: Any) -> Any:
    """The benchmark's expression, for any namespace with tanh, exp and sqrt."""
    return ns.tanh(a * b + c) * 0.5 + ns.exp(-abs(a)) * ns.sqrt(b * b + 1) - c / (1 + a * a)


def inputs(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(n, dtype=np.float32) for _ in range(3))  # type: ignore[return-value]


def check(name: str, got: np.ndarray, want: np.ndarray) -> float:
    """Fail loudly when a variant's result differs from numpy's; the max abs error."""
    if got.shape != want.shape or got.dtype != want.dtype:
        raise AssertionError(f"{name}: result is {got.dtype}{got.shape}, numpy's is {want.dtype}{want.shape}")
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=f"{name} differs from numpy")
    return float(np.max(np.abs(got.astype(np.float64) - want)))


def _peak_since(before: dict) -> int | None:
    """Device bytes live at the peak since `before` (a `stats()`), over what was live then;
    None when an earlier, higher peak hides it."""
    after = clients.stats()
    if after["peak_bytes_live"] <= before["peak_bytes_live"]:
        return None
    return after["peak_bytes_live"] - before["bytes_live"]


def device_times(tensors: tuple, arrays: tuple, queue: cl.CommandQueue, repeat: int) -> dict | None:
    """Median kernel time on the device (its own timestamps) of fused and hand-written.

    Wall time of "build + sync" includes recording the ops on the host; this isolates
    what the generated kernel itself costs against the hand-written one. None when the
    queue has no profiling.
    """
    if not queue.properties & cl.command_queue_properties.PROFILING_ENABLE:
        return None
    ta, tb, tc = tensors
    ga, gb, gc_ = arrays
    out = cla.empty_like(ga)
    enqueue = hand_kernel(queue, ga.size)
    fused, hand = [], []
    for _ in range(repeat):
        with clients.inspect() as rec:
            result = chain(ta, tb, tc, clients)
        clients.sync()
        fused.append(rec.kernels[0].device_seconds)
        del result
        event = enqueue(ga, gb, gc_, out)
        event.wait()
        hand.append((event.profile.end - event.profile.start) * 1e-9)
    f, h = float(np.median(fused)), float(np.median(hand))
    return {"fused_s": f, "hand_written_s": h, "fused_vs_hand_written": h / f}


def hand_kernel(queue: cl.CommandQueue, n: int) -> Callable[..., cl.Event]:
    """The hand-written kernel, built once; returns an enqueue function (no wait)."""
    prelude, width = dtime.vector_prelude(elementwise=True)
    program = cl.Program(queue.context, prelude + HAND_SOURCE).build()
    kernel = cl.Kernel(program, "chain")
    device = queue.device
    items = (n + width - 1) // width
    # GPUs want a fixed work-group of 256 (the global size padded to it); CPU devices
    # (PoCL) pick their own work-group size best.
    local = 256 if device.type & cl.device_type.GPU else None
    global_size = items if local is None else (items + local - 1) // local * local

    def enqueue(a: cla.Array, b: cla.Array, c: cla.Array, out: cla.Array) -> cl.Event:
        return kernel(queue, (global_size,), None if local is None else (local,),
                      a.data, b.data, c.data, out.data, np.int32(n))

    return enqueue


@dataclass
class Variant:
    """One way to compute the chain."""

    run: Callable[[], Any]  # timed: compute and wait for the device
    result: Callable[[Any], np.ndarray]  # untimed: the host values of what `run` made
    setup: Callable[[], None] | None = None  # untimed, before every run


def _fail(message: str) -> None:
    raise AssertionError(message)


def fusion_facts(ta: clients.Tensor, tb: clients.Tensor, tc: clients.Tensor, before: dict) -> dict:
    """Kernels per run and peak device memory of the chain, fused and eager.

    `before` is a `stats()` taken before the inputs were uploaded; this must run before
    anything else allocates, or an earlier peak hides the fused one.
    """
    input_bytes = sum(t.size * t.dtype.itemsize for t in (ta, tb, tc))
    with clients.inspect() as rec:
        out = chain(ta, tb, tc, clients)
    clients.sync()
    fused_peak = _peak_since(before)  # the inputs' upload is inside this window
    fused = rec.kernels
    if len(fused) != 1:
        _fail(f"the fused chain launched {len(fused)} kernels, expected 1")
    del out
    clients.set_mode("eager")
    before = clients.stats()
    with clients.inspect() as rec:
        out = chain(ta, tb, tc, clients)
    clients.sync()
    eager_extra = _peak_since(before)  # the inputs were live already: add them
    del out
    clients.set_mode("lazy")
    return {
        "ops": len(fused[0].ops),
        "kernels_per_fused_run": len(fused),
        "kernels_per_eager_run": len(rec.kernels),
        "memory": {
            "inputs_plus_output_bytes": input_bytes * 4 // 3,
            "fused_peak_bytes": fused_peak,
            "eager_peak_bytes": None if eager_extra is None else eager_extra + input_bytes,
        },
    }


def variants(a: np.ndarray, b: np.ndarray, c: np.ndarray, tensors: tuple,
             queue: cl.CommandQueue) -> tuple[dict[str, Variant], list[str]]:
    """Every variant over the same inputs (device copies made here), and notes."""
    ta, tb, tc = tensors

    def fused() -> clients.Tensor:
        out = chain(ta, tb, tc, clients)
        clients.sync()
        return out  # kept alive until the sync: a dropped result is never computed

    # With pyopencl's memory pool, as its users run it: each op's output then reuses a
    # freed buffer instead of a fresh 64 MiB allocation.
    pool = cl_tools.MemoryPool(cl_tools.ImmediateAllocator(queue))
    ga, gb, gc_ = (cla.to_device(queue, x, allocator=pool) for x in (a, b, c))

    def pyopencl_array() -> cla.Array:
        out = chain(ga, gb, gc_, clmath)
        queue.finish()
        return out

    hand_out = cla.empty_like(ga)
    enqueue_hand = hand_kernel(queue, a.size)

    def hand() -> None:
        enqueue_hand(ga, gb, gc_, hand_out)
        queue.finish()

    out: dict[str, Variant] = {
        "fused": Variant(fused, lambda t: t.numpy(), lambda: clients.set_mode("lazy")),
        "hand-written": Variant(hand, lambda _: hand_out.get()),
        "eager": Variant(fused, lambda t: t.numpy(), lambda: clients.set_mode("eager")),
        "pyopencl.array": Variant(pyopencl_array, lambda arr: arr.get()),
    }
    notes = []
    try:
        import numexpr  # optional: not every machine has it
    except ImportError:
        notes.append("numexpr is not installed: its row is skipped")
    else:
        host_out = np.empty_like(a)

        def numexpr_run() -> None:
            numexpr.evaluate(EXPRESSION, local_dict={"a": a, "b": b, "c": c}, out=host_out)

        out["numexpr"] = Variant(numexpr_run, lambda _: host_out)
        notes.append(f"numexpr {numexpr.__version__} with {numexpr.nthreads} threads")
    out["numpy"] = Variant(lambda: chain(a, b, c, np), lambda arr: arr)
    return out, notes


def run(size: str = "large", repeat: int = 10) -> dict:
    """Run every variant, check it against numpy, and return the results."""
    n = common.SIZES[size]
    a, b, c = inputs(n)
    want = chain(a, b, c, np)
    nbytes = 4 * n * a.itemsize  # three inputs read, one output written
    queue = clients.client_for().server.runtime.queue
    clients.set_mode("lazy")
    before = clients.stats()
    tensors = tuple(clients.asarray(x) for x in (a, b, c))
    facts = fusion_facts(*tensors, before)
    todo, notes = variants(a, b, c, tensors, queue)

    # Warm up (compiles, first allocations) and check every result against numpy.
    errors = {}
    for name, v in todo.items():
        if v.setup:
            v.setup()
        errors[name] = check(name, v.result(v.run()), want)
    clients.set_mode("lazy")

    # The device kernels take tens of milliseconds, and noise from other work on the
    # machine weighs most on them: they get three times the samples.
    fast = {name: FAST_REPEAT * repeat for name in ("fused", "hand-written", "eager")}
    launched = clients.stats()["kernels_launched"]
    timings = common.time_rounds(
        {name: v.run for name, v in todo.items()}, repeat, warmup=1, repeats=fast,
        setup={name: v.setup for name, v in todo.items() if v.setup},
    )
    clients.set_mode("lazy")
    # Every timed fused run must have launched one kernel (and every eager run one per op).
    runs = FAST_REPEAT * repeat + 1  # timed runs and the warm-up, of fused and of eager
    expected = runs * (facts["kernels_per_fused_run"] + facts["kernels_per_eager_run"])
    launches = clients.stats()["kernels_launched"] - launched
    if launches != expected:
        _fail(f"{launches} kernels launched in {runs} fused and {runs} eager runs, expected {expected}")

    fused_t = timings["fused"]
    arrays = tuple(cla.to_device(queue, x) for x in (a, b, c))
    kernel_times = device_times(tensors, arrays, queue, FAST_REPEAT * repeat)
    return {
        "device_kernel_time": kernel_times,
        "benchmark": NAME,
        "expression": EXPRESSION,
        "size": size,
        "elements": n,
        "dtype": "float32",
        "bytes_moved": nbytes,
        **facts,
        "variants": {
            name: {**t.to_dict(), "gb_per_s": nbytes / t.median / 1e9, "max_abs_error": errors[name]}
            for name, t in timings.items()
        },
        "ratios": {f"fused_vs_{name}": common.ratio(t, fused_t) for name, t in timings.items() if name != "fused"},
        "ratio_meaning": "time of the other variant / time of fused: above 1, fused is faster",
        "notes": notes,
    }


HEADERS = ["variant", "median ms", "best ms", "GB/s", "fused speed-up"]


def summary_rows(result: dict) -> list[list[Any]]:
    return common.variant_rows(result)


def report(result: dict) -> None:
    n, mem = result["elements"], result["memory"]
    common.print_table(
        f"element-wise chain: {result['ops']} ops, {n} float32 elements ({result['size']})",
        HEADERS,
        summary_rows(result),
    )
    mib = 1 << 20

    def as_mib(v: int | None) -> str:
        return "not measured" if v is None else f"{v / mib:.0f} MiB"

    print(
        f"kernels per run: fused {result['kernels_per_fused_run']}, "
        f"eager {result['kernels_per_eager_run']}; peak device memory: "
        f"fused {as_mib(mem['fused_peak_bytes'])}, eager {as_mib(mem['eager_peak_bytes'])} "
        f"(inputs + output {as_mib(mem['inputs_plus_output_bytes'])})"
    )
    kt = result.get("device_kernel_time")
    if kt:
        print(
            f"kernel time on the device: fused {kt['fused_s'] * 1e3:.3f} ms, hand-written "
            f"{kt['hand_written_s'] * 1e3:.3f} ms: fused at {kt['fused_vs_hand_written']:.2f}x "
            f"the hand-written kernel's speed ({result['bytes_moved'] / kt['fused_s'] / 1e9:.0f} GB/s)"
        )
    for note in result["notes"]:
        print(f"note: {note}")


def main(argv: list[str] | None = None) -> dict:
    return common.run_main(NAME, __doc__, run, report, argv)


if __name__ == "__main__":
    main()
