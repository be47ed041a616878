"""Row reduction with a fused element-wise prologue, against hand-written kernels, numpy
and the device's practical bandwidth limit.

    out = sum(exp(x * 0.5) * y, axis=-1)      x, y: float32, rows x cols

rows = cols = 4096 with --size large (2^24 elements per input), 1024 with --size small.

Variants, all "compute and wait" on the fusion server's device and queue:

- fused:               lazy tensors, prologue and row sums in one generated kernel (asserted)
- hand-written row:    OpenCL C, one work-item per row looping over vector loads
- hand-written group:  OpenCL C, one work-group per row: strided vector loads, a tree in
                       local memory
- pyopencl Reduction:  pyopencl's ReductionKernel with the prologue as its map_expr, over the
                       whole array (one total, not per row: it has no segmented form); the
                       same bytes read. Skipped when Mako (which it needs) is not installed
- numpy:               the expression on numpy arrays

Device kernel times also cover `sum(x * y, axis=-1)` fused (no transcendental: the
reduction kernel's memory efficiency alone), and the same prologue summed down the
columns (`axis=0`) and over the whole array, each checked against numpy and read against
the same limit (all the kernels of a run together: a full reduction may take two).

Hand-written kernels use the vectors of the server's kernels on the device (float4 on GPUs,
the native width on CPUs, read as the server reads them: see device_timing.vector_prelude).

The bandwidth limit is measured in the same run: a vector copy and a vector `a*b` over
inputs of the same size, device time, bytes read + written over time; the better of the
two is the limit. Effective bandwidth of a reduction = bytes read (both inputs) / time.
Reading alone (both inputs read once, one float written per work-item) is measured too:
what a kernel that only reads can reach.

    python -m benchmarks.reductions [--size small|large] [--repeat N] [--out DIR]
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

import clients

from . import common
from . import device_timing as dtime

NAME = "reductions"
EXPRESSION = "sum(exp(x * 0.5) * y, axis=-1)"
# Without the transcendental, the same reduction shows the kernel's memory efficiency
# alone (on a CPU device, exp over every element can make the main one compute-bound).
PLAIN = "fused sum(x * y)"
COLUMNS = "fused column sum (axis=0)"
FULL = "fused full sum"
GROUP = 256  # work-items per row of the work-group kernel (fewer if the device allows less)
# Slow host baselines get fewer samples than the device kernels.
HOST_REPEAT_SHARE = 0.5

SOURCE = """
#define TERM(x, y) (exp((x) * 0.5f) * (y))

__kernel void row_sum(__global const float *restrict x, __global const float *restrict y,
                      __global float *restrict out, const int rows, const int cols)
{
    const int row = get_global_id(0);
    if (row >= rows) return;
    const __global float *xr = x + (size_t)row * cols, *yr = y + (size_t)row * cols;
    VEC acc = (VEC)(0.0f);
    int j = 0;
    for (; j + WIDTH <= cols; j += WIDTH)
        acc += TERM(LOADV(xr + j), LOADV(yr + j));
    float s = VSUM(acc);
    for (; j < cols; ++j)
        s += TERM(xr[j], yr[j]);
    out[row] = s;
}

__kernel void group_sum(__global const float *restrict x, __global const float *restrict y,
                        __global float *restrict out, const int cols, __local float *scratch)
{
    const int row = get_group_id(0), lid = get_local_id(0), size = get_local_size(0);
    const __global float *xr = x + (size_t)row * cols, *yr = y + (size_t)row * cols;
    VEC acc = (VEC)(0.0f);
    const int body = cols / WIDTH * WIDTH;
    for (int j = lid * WIDTH; j < body; j += size * WIDTH)
        acc += TERM(LOADV(xr + j), LOADV(yr + j));
    float s = VSUM(acc);
    for (int j = body + lid; j < cols; j += size)
        s += TERM(xr[j], yr[j]);
    scratch[lid] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int k = size / 2; k > 0; k /= 2) {
        if (lid < k) scratch[lid] += scratch[lid + k];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) out[row] = scratch[0];
}

/* Read bandwidth alone: both inputs read once, one float written per work-item. GPUs
   stride over the grid (consecutive work-items read consecutive vectors); CPU
   work-items read contiguous chunks. */
__kernel void read_strided(__global const VEC *restrict a, __global const VEC *restrict b,
                           __global float *restrict out, const int nv)
{
    const int i0 = get_global_id(0), step = get_global_size(0);
    VEC acc = (VEC)(0.0f);
    for (int i = i0; i < nv; i += step) acc += a[i] * b[i];
    out[i0] = VSUM(acc);
}

__kernel void read_chunks(__global const VEC *restrict a, __global const VEC *restrict b,
                          __global float *restrict out, const int nv)
{
    const int g = get_global_id(0), n = get_global_size(0);
    const int chunk = (nv + n - 1) / n, end = min(nv, (g + 1) * chunk);
    VEC acc = (VEC)(0.0f);
    for (int i = g * chunk; i < end; ++i) acc += a[i] * b[i];
    out[g] = VSUM(acc);
}

__kernel void copyv(__global const VEC *restrict a, __global VEC *restrict out, const int nv)
{
    const int i = get_global_id(0);
    if (i < nv) out[i] = a[i];
}

__kernel void mulv(__global const VEC *restrict a, __global const VEC *restrict b,
                   __global VEC *restrict out, const int nv)
{
    const int i = get_global_id(0);
    if (i < nv) out[i] = a[i] * b[i];
}
"""


def shape_for(size: str) -> tuple[int, int]:
    """A square of common.SIZES[size] elements."""
    side = math.isqrt(common.SIZES[size])
    return side, side


def fused(x: clients.Tensor, y: clients.Tensor) -> clients.Tensor:
    return clients.sum(clients.exp(x * 0.5) * y, axis=-1)


def reference(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row sums in float64, and each row's sum of absolute terms (the error scale)."""
    terms = np.exp(a.astype(np.float64) * 0.5) * b
    return terms.sum(axis=-1), np.abs(terms).sum(axis=-1)


def check(name: str, got: np.ndarray, want: np.ndarray, scale: np.ndarray) -> float:
    """Fail loudly when a result is off by more than float32 rounding over the row allows;
    the largest error relative to its row's sum of absolute terms."""
    got = np.asarray(got, dtype=np.float64)
    if got.shape != want.shape:
        raise AssertionError(f"{name}: result has shape {got.shape}, expected {want.shape}")
    err = float(np.max(np.abs(got - want) / scale))
    if not err <= 1e-4:
        raise AssertionError(f"{name} differs from numpy: error {err:.3g} of the row's scale")
    return err


def hand_written(queue: cl.CommandQueue, ga: cla.Array, gb: cla.Array) -> dict[str, tuple]:
    """Enqueue functions (returning the event, no wait) and their outputs, by variant;
    "group over" takes the two arrays to read."""
    rows, cols = ga.shape
    prelude, width = dtime.vector_prelude()
    nv = ga.size // width
    device = queue.device
    gpu = bool(device.type & cl.device_type.GPU)
    row_k, group_k, copy_k, mul_k, read_k = dtime.build(queue, prelude + SOURCE, "row_sum", "group_sum", "copyv",
                                                        "mulv", "read_strided" if gpu else "read_chunks")
    group = min(GROUP, device.max_work_group_size)
    group = 1 << (group.bit_length() - 1)  # a power of two, for the tree
    row_out, group_out = cla.empty(queue, rows, np.float32), cla.empty(queue, rows, np.float32)
    copy_out, mul_out = cla.empty_like(ga), cla.empty_like(ga)
    # Rows in the work-groups the library's own row reductions get (heavy work-items: on
    # a CPU, small enough groups that every core has several); on GPUs 64 rows a group.
    if gpu:
        g_rows, l_rows = dtime.launch_size(device, rows, 64)
    else:
        local = clients.client_for().server.ctx.group_size(rows, heavy=True)
        g_rows, l_rows = ((rows + local - 1) // local * local,), (local,)
    g_nv, l_nv = dtime.launch_size(device, nv)
    # Enough work-items to fill the device, each reading many vectors.
    readers = min(nv, device.max_compute_units * (2048 if gpu else 64))
    g_read, l_read = dtime.launch_size(device, readers)
    read_out = cla.empty(queue, g_read[0], np.float32)
    scratch = cl.LocalMemory(4 * group)

    def row() -> cl.Event:
        return row_k(queue, g_rows, l_rows, ga.data, gb.data, row_out.data, np.int32(rows), np.int32(cols))

    def group_over(xa: cla.Array, ya: cla.Array) -> cl.Event:
        return group_k(queue, (rows * group,), (group,), xa.data, ya.data, group_out.data, np.int32(cols),
                       scratch)

    def grp() -> cl.Event:
        return group_over(ga, gb)

    def copy() -> cl.Event:
        return copy_k(queue, g_nv, l_nv, ga.data, copy_out.data, np.int32(nv))

    def mul() -> cl.Event:
        return mul_k(queue, g_nv, l_nv, ga.data, gb.data, mul_out.data, np.int32(nv))

    def read() -> cl.Event:
        return read_k(queue, g_read, l_read, ga.data, gb.data, read_out.data, np.int32(nv))

    return {
        "hand-written row": (row, row_out),
        "hand-written group": (grp, group_out),
        "copy": (copy, copy_out),
        "a*b": (mul, mul_out),
        "read": (read, read_out),
        "group over": (group_over, group_out),  # the group kernel over other arrays of that shape
    }


def pyopencl_reduction(queue: cl.CommandQueue) -> tuple[Callable[..., Any] | None, str | None]:
    """pyopencl's ReductionKernel for the whole-array total, or None and why not."""
    try:
        from pyopencl.reduction import ReductionKernel
    except ImportError as exc:  # it needs Mako
        return None, f"pyopencl's ReductionKernel is unavailable ({str(exc).splitlines()[0]}): its row is skipped"
    kernel = ReductionKernel(
        queue.context, np.float32, neutral="0", reduce_expr="a+b", map_expr="exp(x[i] * 0.5f) * y[i]",
        arguments="__global const float *x, __global const float *y",
    )
    return kernel, None


def run(size: str = "large", repeat: int = 10) -> dict:
    """Run every variant, check it against numpy, and return the results."""
    rows, cols = shape_for(size)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((rows, cols), dtype=np.float32)
    b = rng.standard_normal((rows, cols), dtype=np.float32)
    want, scale = reference(a, b)
    bytes_read = a.nbytes + b.nbytes
    queue = clients.client_for().server.runtime.queue
    clients.set_mode("lazy")
    x, y = clients.asarray(a), clients.asarray(b)
    ga, gb = cla.to_device(queue, a), cla.to_device(queue, b)
    notes = []

    # One kernel per fused run: the prologue is read inside the reduction.
    with clients.inspect() as rec:
        out = fused(x, y)
    clients.sync()
    if len(rec.kernels) != 1 or rec.kernels[0].kind != "reduce":
        raise AssertionError(f"the fused row reduction launched {[(k.kind, k.ops) for k in rec.kernels]}, "
                             "expected one reduce kernel")
    facts = {"kernels_per_fused_run": len(rec.kernels), "fused_ops": rec.kernels[0].ops,
             "fused_work_items": rec.kernels[0].items}
    errors = {"fused": check("fused", out.numpy(), want, scale)}
    del out
    plain = clients.sum(x * y, axis=-1).numpy()  # the bandwidth figure's kernel computes the right thing
    np.testing.assert_allclose(plain, (a.astype(np.float64) * b).sum(axis=-1), rtol=1e-4, atol=1e-3)
    del plain
    # The other reductions of the same prologue: down the columns, and over everything.
    terms = np.exp(a.astype(np.float64) * 0.5) * b
    col_got = clients.sum(clients.exp(x * 0.5) * y, axis=0).numpy()
    errors[COLUMNS] = check(COLUMNS, col_got, terms.sum(axis=0), np.abs(terms).sum(axis=0))
    full_got = clients.sum(clients.exp(x * 0.5) * y).numpy().reshape(1)
    errors[FULL] = check(FULL, full_got, terms.sum().reshape(1), np.abs(terms).sum().reshape(1))
    facts["kernels_per_other_run"] = {
        name: dtime.fused_run(build)[1]
        for name, build in ((COLUMNS, lambda: clients.sum(clients.exp(x * 0.5) * y, axis=0)),
                            (FULL, lambda: clients.sum(clients.exp(x * 0.5) * y)))}
    del terms, col_got, full_got

    hand = hand_written(queue, ga, gb)
    for name in ("hand-written row", "hand-written group"):
        enqueue, result = hand[name]
        enqueue().wait()
        errors[name] = check(name, result.get(), want, scale)
    for name, source in (("copy", a), ("a*b", a * b)):
        enqueue, result = hand[name]
        enqueue().wait()
        if not np.array_equal(result.get(), source):
            raise AssertionError(f"the {name} kernel's result is wrong")
    enqueue, result = hand["read"]
    enqueue().wait()
    total = float(result.get().astype(np.float64).sum())
    if not abs(total - float((a.astype(np.float64) * b).sum())) <= 1e-3 * float(np.abs(a * b).sum()):
        raise AssertionError("the read kernel's result is wrong")

    def fused_wall() -> clients.Tensor:
        result = fused(x, y)
        clients.sync()
        return result  # kept alive until the sync: a dropped result is never computed

    def enqueue_and_wait(enqueue: Callable[[], cl.Event]) -> Callable[[], None]:
        def call() -> None:
            enqueue()
            queue.finish()
        return call

    walls: dict[str, Callable[[], Any]] = {
        "fused": fused_wall,
        "hand-written row": enqueue_and_wait(hand["hand-written row"][0]),
        "hand-written group": enqueue_and_wait(hand["hand-written group"][0]),
    }
    reduction, why = pyopencl_reduction(queue)
    if reduction is None:
        notes.append(why)
    else:
        total = reduction(ga, gb, queue=queue).get()
        got_total, want_total = float(total), float(want.sum())
        if not abs(got_total - want_total) <= 1e-4 * float(scale.sum()):
            raise AssertionError(f"pyopencl Reduction: total {got_total}, numpy's {want_total}")

        def pyopencl_total() -> cla.Array:
            result = reduction(ga, gb, queue=queue)
            queue.finish()
            return result

        walls["pyopencl Reduction"] = pyopencl_total
        notes.append("pyopencl Reduction sums the whole array (one total), reading the same bytes")
    walls["numpy"] = lambda: np.sum(np.exp(a * np.float32(0.5)) * b, axis=-1)
    errors["numpy"] = check("numpy", walls["numpy"](), want, scale)

    host_repeat = max(3, round(repeat * HOST_REPEAT_SHARE))
    wall = common.time_rounds(walls, repeat, warmup=1,
                              repeats={"numpy": host_repeat, "pyopencl Reduction": host_repeat})

    device: dict[str, common.Timing] = {}
    if dtime.profiling(queue):
        samplers = {"fused": dtime.fused_seconds(lambda: fused(x, y)),
                    PLAIN: dtime.fused_seconds(lambda: clients.sum(x * y, axis=-1)),
                    COLUMNS: dtime.fused_seconds(lambda: clients.sum(clients.exp(x * 0.5) * y, axis=0)),
                    FULL: dtime.fused_seconds(lambda: clients.sum(clients.exp(x * 0.5) * y))}
        samplers.update({name: dtime.enqueued_seconds(hand[name][0])
                         for name in ("hand-written row", "hand-written group", "copy", "a*b", "read")})
        # Before every sample, the group kernel reads two other arrays of the same size:
        # every variant then starts with caches holding none of its data and nothing
        # dirty (a variant timed right after the copy or a*b kernel, which write 64 MiB,
        # paid for writing those back: 0.79 of the limit on an H200 against 0.85 alone).
        group_over = hand["group over"][0]
        other_a, other_b = cla.to_device(queue, b), cla.to_device(queue, a)
        device = dtime.device_rounds(samplers, repeat, before=lambda: group_over(other_a, other_b).wait())
    else:
        notes.append("the queue is not profiled (FUSION_PROFILE=0): no device times, no bandwidth limit")

    result: dict[str, Any] = {
        "benchmark": NAME,
        "expression": EXPRESSION,
        "size": size,
        "shape": [rows, cols],
        "dtype": "float32",
        "bytes_read": bytes_read,
        **facts,
        "variants": {
            name: {**t.to_dict(), "gb_per_s": bytes_read / t.median / 1e9, "error_of_row_scale": errors.get(name)}
            for name, t in wall.items()
        },
        "ratios": {f"fused_vs_{name}": common.ratio(t, wall["fused"]) for name, t in wall.items() if name != "fused"},
        "ratio_meaning": "time of the other variant / time of fused: above 1, fused is faster",
        "notes": notes,
    }
    if device:
        moved = {"copy": 2 * a.nbytes, "a*b": 3 * a.nbytes}
        limits = {name: moved[name] / device[name].median / 1e9 for name in moved}
        limit = max(limits.values())
        kernel_gb = {name: bytes_read / device[name].median / 1e9
                     for name in ("fused", PLAIN, COLUMNS, FULL, "hand-written row", "hand-written group", "read")}
        best_hand = min(device["hand-written row"].median, device["hand-written group"].median)
        result["device_kernel_time"] = {
            "variants": {name: {**t.to_dict(), "gb_per_s": kernel_gb.get(name, limits.get(name))}
                         for name, t in device.items()},
            "limit_gb_per_s": limits,
            "practical_limit_gb_per_s": limit,
            "fused_vs_hand_written_best": best_hand / device["fused"].median,
        }
        read_limit = bytes_read / device["read"].median / 1e9
        result["device_kernel_time"]["read_limit_gb_per_s"] = read_limit
        result["fraction_of_read_limit"] = kernel_gb["fused"] / read_limit
        result["fraction_of_limit"] = kernel_gb["fused"] / limit
        result["plain_fraction_of_limit"] = kernel_gb[PLAIN] / limit
        result["column_fraction_of_limit"] = kernel_gb[COLUMNS] / limit
        result["full_fraction_of_limit"] = kernel_gb[FULL] / limit
    return result


HEADERS = ["variant", "median ms", "best ms", "GB/s read", "fused speed-up"]


def summary_rows(result: dict) -> list[list[Any]]:
    return common.variant_rows(result)


def report(result: dict) -> None:
    rows, cols = result["shape"]
    common.print_table(f"row reduction {result['expression']}, {rows}x{cols} float32 (wall)",
                       HEADERS, summary_rows(result))
    dk = result.get("device_kernel_time")
    if dk:
        common.print_table(
            "row reduction, kernel time on the device",
            ["kernel", "median ms", "GB/s"],
            [[name, common.ms(v["median_s"]), v["gb_per_s"]] for name, v in dk["variants"].items()],
        )
        print(f"practical limit {dk['practical_limit_gb_per_s']:.1f} GB/s (best of copy and a*b, bytes "
              f"read + written); fused reads at {result['fraction_of_limit']:.2f} of it; fused at "
              f"{dk['fused_vs_hand_written_best']:.2f}x the best hand-written kernel's speed; "
              f"{PLAIN} reads at {result['plain_fraction_of_limit']:.2f} of it; the column sum at "
              f"{result['column_fraction_of_limit']:.2f}, the full sum at {result['full_fraction_of_limit']:.2f} "
              f"(kernels: {result['kernels_per_other_run']})")
    if dk:
        print(f"reading alone (both inputs once, nothing written back): {dk['read_limit_gb_per_s']:.1f} GB/s; "
              f"fused reads at {result['fraction_of_read_limit']:.2f} of that")
    print(f"kernels per fused run: {result['kernels_per_fused_run']} ({', '.join(result['fused_ops'])})")
    for note in result["notes"]:
        print(f"note: {note}")


def main(argv: list[str] | None = None) -> dict:
    return common.run_main(NAME, __doc__, run, report, argv)


if __name__ == "__main__":
    main()
