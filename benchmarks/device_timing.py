"""Kernel times measured by the device, shared by the reduction, composite, matmul and
vectorization benchmarks.

With FUSION_PROFILE=1 the fusion server's queue records device timestamps: a fused run's
kernels report `.device_seconds` in `clients.inspect()` records, and the events of
hand-written kernels enqueued on the same queue carry their own start and end times.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyopencl as cl

import clients
from fusion_server.codegen import expressions as ex

from . import common


def profiling(queue: cl.CommandQueue) -> bool:
    """Whether `queue` records device timestamps (FUSION_PROFILE=1 when it was made)."""
    return bool(queue.properties & cl.command_queue_properties.PROFILING_ENABLE)


def event_seconds(event: cl.Event) -> float:
    """Run time on the device of a completed, profiled command."""
    return (event.profile.end - event.profile.start) * 1e-9


def fused_run(build: Callable[[], Any]) -> tuple[float | None, int, Any]:
    """Run `build()` on lazy tensors and wait: (device seconds of all its kernels, kernels
    launched, the result). Seconds are None when the queue is not profiled."""
    with clients.inspect() as rec:
        out = build()
    clients.sync()
    seconds = [k.device_seconds for k in rec.kernels]
    total = None if any(s is None for s in seconds) else float(sum(seconds))
    return total, len(rec.kernels), out


def fused_seconds(build: Callable[[], Any]) -> Callable[[], float | None]:
    """A sampler for `device_rounds`: device seconds of one fused run of `build`."""

    def sample() -> float | None:
        seconds, _, out = fused_run(build)
        del out
        return seconds

    return sample


def enqueued_seconds(enqueue: Callable[[], cl.Event]) -> Callable[[], float]:
    """A sampler for `device_rounds`: device seconds of the command `enqueue()` returns."""

    def sample() -> float:
        event = enqueue()
        event.wait()
        return event_seconds(event)

    return sample


def device_rounds(samplers: dict[str, Callable[[], float | None]], repeat: int,
                  warmup: int = 1, repeats: dict[str, int] | None = None,
                  before: Callable[[], Any] | None = None) -> dict[str, common.Timing]:
    """Device seconds of several variants in interleaved rounds, as `common.time_rounds`
    takes wall times: each sampler runs its work, waits, and returns its device seconds.
    `before`, when given, runs (and waits) before every sample, untimed: work that puts
    the device's caches in the same state for every variant."""
    counts = {name: (repeats or {}).get(name, repeat) for name in samplers}
    for fn in samplers.values():
        for _ in range(warmup):
            fn()
    out = {name: common.Timing([]) for name in samplers}
    for r in range(max(counts.values(), default=0)):
        for name, fn in samplers.items():
            if r < counts[name]:
                if before is not None:
                    before()
                seconds = fn()
                if seconds is not None:
                    out[name].samples.append(seconds)
    return out


def launch_size(device: cl.Device, items: int, group: int = 256) -> tuple[tuple[int], tuple[int] | None]:
    """(global, local) sizes for `items` work-items: GPUs get a fixed work-group of `group`
    (the global size padded to it); CPU devices (PoCL) pick their own size best."""
    if not device.type & cl.device_type.GPU:
        return (items,), None
    return ((items + group - 1) // group * group,), (group,)


def vector_prelude(elementwise: bool = False) -> tuple[str, int]:
    """(source, width) for hand-written float kernels: the source defines INDEX (an
    element index's type), WIDTH, VEC (a
    float vector of WIDTH), LOADV(p) and STOREV(v, p) (any float-aligned address) and
    VSUM(v) (the sum of a VEC's lanes), with the vector width and the kind of vector
    access that the fusion server's own kernels use on this device, so hand-written
    kernels are held to the same practice (`elementwise`: as its contiguous element-wise
    kernels, scalar code where the driver packs lanes; else as its reductions)."""
    server = clients.client_for().server
    width = server.widths.of_size(4)  # (float kernels)
    if elementwise and server.pack_lanes:
        width = 1  # as the server's own contiguous element-wise kernels on such a driver
    # INDEX: the type of an element's index, 64-bit where the driver packs lanes, as the
    # server's element-wise kernels there (a 32-bit one made Intel's vectorizer gather).
    index = "typedef long INDEX;\n" if server.pack_lanes else "typedef int INDEX;\n"
    if width == 1:  # scalar code: no float1 in OpenCL C
        return (index + "#define WIDTH 1\ntypedef float VEC;\n#define LOADV(p) (*(p))\n"
                "#define STOREV(v, p) (*(p) = (v))\nfloat VSUM(VEC v) { return v; }\n"), 1
    lines = [index.strip(), f"#define WIDTH {width}", f"typedef float{width} VEC;"]
    if f"-D{ex.PLAIN_VECTORS}" in server.runtime.programs.options:
        lines.append(f"#define {ex.PLAIN_VECTORS}")
    lines += ex.vector_access({np.dtype(np.float32)}, width)
    lines += [f"#define LOADV(p) VLOAD(float, {width}, p)", f"#define STOREV(v, p) VSTORE(float, {width}, v, p)"]
    lines += ["float VSUM(VEC v) { float s = 0.0f; for (int l = 0; l < WIDTH; ++l) s += ((float*)&v)[l]; return s; }"]
    return "\n".join(lines) + "\n", width


def build(queue: cl.CommandQueue, source: str, *names: str) -> list[cl.Kernel]:
    """Build `source` once and return its kernels `names` (retrieved once, kept)."""
    program = cl.Program(queue.context, source).build()
    return [cl.Kernel(program, name) for name in names]


def is_gpu(queue: cl.CommandQueue) -> bool:
    return bool(queue.device.type & cl.device_type.GPU)

