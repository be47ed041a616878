"""The main job: several threads run real element-wise pipelines through `clients`.

Each thread runs one workload a few times, checks every result against numpy, and the
run ends with a report: ops recorded, kernels launched, compiles, blocks replayed from
stored plans, and wall time against numpy and against eager mode (one kernel per op, the
unfused baseline).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from typing import Any

import numpy as np

import clients

from .workloads import WORKLOADS, Workload


def _as_tuple(v: Any) -> tuple:
    return v if isinstance(v, tuple) else (v,)


def _run_threads(fn, items) -> list:
    results: list = [None] * len(items)
    errors: list = []
    barrier = threading.Barrier(len(items))

    def target(i, item):
        try:
            barrier.wait()
            results[i] = fn(item)
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=target, args=(i, it)) for i, it in enumerate(items)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]
    return results


def _fused(work: Workload, inputs: tuple[np.ndarray, ...], iters: int) -> list[np.ndarray]:
    tensors = [clients.asarray(a) for a in inputs]
    out = None
    for _ in range(iters):
        out = _as_tuple(work.run(clients, *tensors))
        # Read the first output each iteration: the real job consumes its results.
        out[0].numpy()
    return [t.numpy() for t in out]


def _numpy(work: Workload, inputs: tuple[np.ndarray, ...], iters: int) -> list[np.ndarray]:
    out = None
    for _ in range(iters):
        out = _as_tuple(work.run(np, *inputs))
    return list(out)


def _max_rel_err(got: list[np.ndarray], want: list[np.ndarray]) -> float:
    worst = 0.0
    for g, w in zip(got, want):
        scale = np.maximum(np.abs(w), 1e-3)
        worst = max(worst, float(np.max(np.abs(g.astype(np.float64) - w) / scale)))
    return worst


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fusion_server demo", description=__doc__)
    parser.add_argument("--elements", type=int, default=1 << 20, help="elements per workload")
    parser.add_argument("--iters", type=int, default=5, help="iterations per thread")
    parser.add_argument("--threads", type=int, default=len(WORKLOADS), help="threads (workloads cycle)")
    args = parser.parse_args(argv)

    rng = np.random.default_rng(2026)
    jobs = [WORKLOADS[i % len(WORKLOADS)] for i in range(args.threads)]
    inputs = [w.make_inputs(rng, args.elements) for w in jobs]
    device = clients.default_device()
    print(f"fusion-server demo on {device.name} ({device.platform}), {args.threads} threads, "
          f"{args.elements:,} elements each, {args.iters} iterations")

    # Warm-up: compile every kernel, so the timings below compare steady states. A run of
    # ops (or a batch of them) that recurs is noted the first time, captured the next in
    # blocks of its own (a capture that needs a kernel built is left for the time after),
    # and replayed from then on: three iterations.
    _run_threads(lambda i: _fused(jobs[i], inputs[i], 3), list(range(len(jobs))))

    def timed(fn) -> tuple[float, list]:
        start = time.perf_counter()
        out = _run_threads(fn, list(range(len(jobs))))
        return time.perf_counter() - start, out

    before = clients.stats()
    t_fused, fused = timed(lambda i: _fused(jobs[i], inputs[i], args.iters))
    after = clients.stats()
    t_numpy, reference = timed(lambda i: _numpy(jobs[i], inputs[i], args.iters))
    clients.set_mode("eager")
    try:
        _run_threads(lambda i: _fused(jobs[i], inputs[i], 1), list(range(len(jobs))))
        eager_before = clients.stats()
        t_eager, eager = timed(lambda i: _fused(jobs[i], inputs[i], args.iters))
        eager_after = clients.stats()
    finally:
        clients.set_mode("lazy")

    ok = True
    print(f"\n{'workload':<16}{'thread':>7}{'max rel err':>14}{'eager err':>12}  check")
    for i, work in enumerate(jobs):
        err = _max_rel_err(fused[i], reference[i])
        err_eager = _max_rel_err(eager[i], reference[i])
        good = err < 1e-3 and err_eager < 1e-3
        ok &= good
        print(f"{work.name:<16}{i:>7}{err:>14.2e}{err_eager:>12.2e}  {'ok' if good else 'MISMATCH'}")

    ops = after["ops_registered"] - before["ops_registered"]
    kernels = after["kernels_launched"] - before["kernels_launched"]
    eager_kernels = eager_after["kernels_launched"] - eager_before["kernels_launched"]
    print(f"\nops recorded        {ops:,}")
    print(f"kernels launched    {kernels:,} fused ({ops / max(kernels, 1):.1f} ops per kernel), "
          f"{eager_kernels:,} eager")
    print(f"compiles            {after['compiles']} in total ({after['compile_seconds']:.1f} s, "
          f"{after['compiles'] - before['compiles']} during the timed run)")
    hits = after["plan_hits"] - before["plan_hits"]
    explored = after["explorations"] - before["explorations"]
    print(f"plan store          {hits} of {hits + explored} fused blocks replayed from stored plans, "
          f"{explored} explored by the fusers")
    print(f"run cache           {after['run_replays'] - before['run_replays']} recurring runs of ops replayed "
          f"from their captures (no fuser, no plan store), {after['run_captures'] - before['run_captures']} captured")
    print(f"wall time           fused {t_fused:.3f} s, eager {t_eager:.3f} s, numpy {t_numpy:.3f} s")
    print(f"speed-up            {t_eager / t_fused:.2f}x over eager, {t_numpy / t_fused:.2f}x over numpy")
    print("result              " + ("all checks passed" if ok else "MISMATCH against numpy"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
