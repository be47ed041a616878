"""Recurring work: the same 200-op graph run 50 times, and 8 threads registering at once.

- Graph: first iteration (fusers, codegen, compiles) against the steady state, per op,
  with the compiles and fuser explorations counted after the second iteration, and the
  plan hits (blocks replayed from the plan store).
- Threads: every thread records its own chain of ops; register latency (p50, p99) and
  total throughput with 1 thread and with 8, for each channel (the inbox, the default,
  and the lock per op), and the inbox with the cyclic collector left alone (its first
  threshold otherwise raised while several threads record: clients/_collector.py),
  alternated in one process; with the collector's time per op: the collecting thread's
  CPU time between its callbacks (a wall clock there also counts the other threads, which
  run whenever a collection that runs Python code, a weakref's callback, is switched out:
  2 to 5 times the CPU time with 8 threads on a 2-core Zen 4).

    python -m benchmarks.recurring [--repeat N]
"""

from __future__ import annotations

import gc
import statistics
import threading
import time

import numpy as np

import clients
from clients._collector import tuning

from . import common

NAME = "recurring"
GRAPH_OPS = 200
ITERATIONS = 50


def _graph(x, y):
    """200 element-wise ops over two inputs (four 64-op blocks at most per run)."""
    t = x
    for _ in range(GRAPH_OPS // 4):
        t = clients.tanh(t * 0.9 + y) - 0.1
    return t


def recurring_graph() -> dict:
    rng = np.random.default_rng(0)
    x = clients.asarray(rng.standard_normal(4096).astype(np.float32))
    y = clients.asarray(rng.standard_normal(4096).astype(np.float32))
    times, compiles, explorations, ops, hits = [], [], [], [], []
    for _ in range(ITERATIONS):
        before = clients.stats()
        start = time.perf_counter()
        out = _graph(x, y)
        clients.flush()  # host cost: record and launch, not the device's time
        times.append(time.perf_counter() - start)
        after = clients.stats()
        compiles.append(after["compiles"] - before["compiles"])
        explorations.append(after["explorations"] - before["explorations"])
        ops.append(after["ops_registered"] - before["ops_registered"])
        out.numpy()
        hits.append(clients.stats()["plan_hits"] - before["plan_hits"])  # (the read's flush included)
    per_op = [t / n for t, n in zip(times, ops)]
    return {
        "ops_per_iteration": ops[0],
        "first_us_per_op": per_op[0] * 1e6,
        "steady_us_per_op": statistics.median(per_op[2:]) * 1e6,
        "compiles_after_second": sum(compiles[2:]),
        "explorations_after_second": sum(explorations[2:]),
        "plan_hits": sum(hits),  # in these iterations (the counter is the process's)
        "plan_hits_per_iteration_after_second": statistics.median(hits[2:]),
    }


def _register_worker(n_ops: int, barrier: threading.Barrier, latencies: list, spans: list, seed: int) -> None:
    x = clients.asarray(np.full(1024, seed, np.float32))
    barrier.wait()
    began = time.perf_counter()
    y = x
    local = []
    for _ in range(n_ops):
        start = time.perf_counter()
        y = y * 1.0001
        local.append(time.perf_counter() - start)
    y.numpy()
    spans.append((began, time.perf_counter()))
    latencies.extend(local)


class _CollectorClock:
    """CPU seconds the cyclic collector took while it is installed: the collecting
    thread's own clock between its callbacks (see the module docstring)."""

    def __init__(self) -> None:
        self.seconds, self._start = 0.0, 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.thread_time()
        else:
            self.seconds += time.thread_time() - self._start

    def __enter__(self) -> _CollectorClock:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc) -> None:
        gc.callbacks.remove(self)


def threads_registering(threads: int, n_ops: int = 3000) -> dict:
    latencies: list[float] = []
    spans: list[tuple[float, float]] = []
    barrier = threading.Barrier(threads)
    workers = [threading.Thread(target=_register_worker, args=(n_ops, barrier, latencies, spans, i))
               for i in range(threads)]
    clients.sync()  # (threads that ended before have their queues gone: the collector's setting follows)
    with _CollectorClock() as collector:
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    # From the first worker's first op to the last one's read: a clock read by the main
    # thread after the barrier would start late, as the main thread waits for the GIL
    # while the workers record (up to a switch interval, 5 ms: as long as one thread's run).
    wall = max(end for _, end in spans) - min(began for began, _ in spans)
    lat = np.array(latencies)
    return {
        "threads": threads,
        "ops_per_s": threads * n_ops / wall,
        "p50_us": float(np.percentile(lat, 50) * 1e6),
        "p99_us": float(np.percentile(lat, 99) * 1e6),
        "collector_us_per_op": collector.seconds / (threads * n_ops) * 1e6,
    }


# (channel, collector threshold while several threads record: None for the setting's)
VARIANTS = {"inbox": ("inbox", None), "lock": ("lock", None), "inbox, collector left alone": ("inbox", 0)}


def run(size: str = "large", repeat: int = 3) -> dict:
    graph = recurring_graph()  # first: its first iteration builds the kernels
    client = clients.client_for()
    default, raised = client.channel, tuning.threshold
    rows: dict = {}
    threads_registering(1)  # (untimed: it builds the chain's kernels, 90 ms in the first sample)
    try:
        for _ in range(max(1, repeat)):
            for name, (channel, threshold) in VARIANTS.items():
                client.channel = channel
                tuning.retune(raised if threshold is None else threshold)
                for n in (1, 8):
                    rows.setdefault((name, n), []).append(threads_registering(n))
    finally:
        client.channel = default
        tuning.retune(raised)

    def med(samples, key):
        return statistics.median(r[key] for r in samples)

    keys = ("ops_per_s", "p50_us", "p99_us", "collector_us_per_op")
    channels = {name: {str(n): {k: med(rows[(name, n)], k) for k in keys} for n in (1, 8)} for name in VARIANTS}
    for c in channels.values():
        c["8_over_1"] = c["8"]["ops_per_s"] / c["1"]["ops_per_s"]
    return {"graph": graph, "threads": channels[default], "channels": channels, "default_channel": default,
            "collector_threshold": raised}


def report(result: dict) -> None:
    g = result["graph"]
    common.print_table(
        f"a {g['ops_per_iteration']}-op graph run {ITERATIONS} times (host time: record + launch)",
        ["measure", "value"],
        [["first iteration, us per op", g["first_us_per_op"]],
         ["steady state, us per op", g["steady_us_per_op"]],
         ["compiles after the second iteration", g["compiles_after_second"]],
         ["fuser explorations after the second iteration", g["explorations_after_second"]],
         ["plan hits in these iterations", g["plan_hits"]],
         ["plan hits per iteration, after the second", g["plan_hits_per_iteration_after_second"]]],
    )
    rows = [[channel, n, r["ops_per_s"], r["p50_us"], r["p99_us"], r["collector_us_per_op"]]
            for channel, c in result["channels"].items() for n, r in c.items() if n != "8_over_1"]
    rows += [[channel, "8 / 1", c["8_over_1"], "", "", ""] for channel, c in result["channels"].items()]
    common.print_table("threads registering at once", ["channel", "threads", "ops/s", "p50 us", "p99 us",
                                                       "collector CPU us/op"], rows)


def main(argv: list[str] | None = None) -> dict:
    return common.run_main(NAME, __doc__, run, report, argv)


if __name__ == "__main__":
    main()
