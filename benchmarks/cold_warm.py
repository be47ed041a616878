"""Cold against warm start: the demo in a new process, without and then with the
compile caches of earlier runs (pyopencl's binary cache, and the driver's own).

Each start is a fresh interpreter running `python -m fusion_server demo` with a small
workload; the cache directory is a new temporary one for the cold start and the same one,
now filled, for the warm starts. Reported: wall time of the whole process, and the time
spent building kernels (the demo's `compile_seconds`).

    python -m benchmarks.cold_warm [--repeat N]
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from . import common

NAME = "cold_warm"
DEMO = [sys.executable, "-m", "fusion_server", "demo", "--elements", "65536", "--iters", "1", "--threads", "4"]


def _start(cache_home: str) -> tuple[float, float]:
    env = {**os.environ, "XDG_CACHE_HOME": cache_home, "POCL_CACHE_DIR": os.path.join(cache_home, "pocl")}
    begin = time.perf_counter()
    done = subprocess.run(DEMO, env=env, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - begin
    if done.returncode != 0 or "all checks passed" not in done.stdout:
        raise AssertionError(f"demo failed:\n{done.stdout}\n{done.stderr}")
    found = re.search(r"compiles\s+\d+ in total \(([\d.]+) s", done.stdout)
    return wall, float(found.group(1)) if found else float("nan")


def run(size: str = "large", repeat: int = 3) -> dict:
    colds, warms = [], []
    for _ in range(max(1, repeat)):
        with tempfile.TemporaryDirectory() as cache_home:
            colds.append(_start(cache_home))
            warms.append(_start(cache_home))
    cold_wall = statistics.median(w for w, _ in colds)
    warm_wall = statistics.median(w for w, _ in warms)
    return {
        "cold_wall_s": cold_wall,
        "warm_wall_s": warm_wall,
        "cold_compile_s": statistics.median(c for _, c in colds),
        "warm_compile_s": statistics.median(c for _, c in warms),
        "speedup": cold_wall / warm_wall,
        "samples": {"cold": colds, "warm": warms},
    }


def report(result: dict) -> None:
    common.print_table(
        "demo start (new process; wall time of the whole run, kernel build time inside it)",
        ["start", "wall s", "building kernels s"],
        [["cold", result["cold_wall_s"], result["cold_compile_s"]],
         ["warm", result["warm_wall_s"], result["warm_compile_s"]]],
    )
    print(f"warm start is {result['speedup']:.2f}x faster than cold")


def main(argv: list[str] | None = None) -> dict:
    return common.run_main(NAME, __doc__, run, report, argv)


if __name__ == "__main__":
    main()
