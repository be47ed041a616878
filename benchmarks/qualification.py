"""What device qualification costs, cold and warm, and what it chose, for each device.

Cold: `qualify()` with no verdict on disk (children start, canaries build and run).
Warm: `verdict_for` with the verdict on disk and none in memory (what a new process pays:
the cache key's digest of the sources, reading the file), and a new process that starts
the library on the device with the verdict on disk, against the same start with
qualification off (`FUSION_QUALIFY=0`). Every device but simulators, or those
named with --device (index or name substring, repeatable).

    python -m benchmarks.qualification [--repeat N] [--device D ...]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time

from fusion_server import qualification
from fusion_server.qualification import runner
from fusion_server.qualification import verdict as verdicts
from fusion_server.runtime.device import list_devices, select_device

from . import common

NAME = "qualification"
START = "import clients; clients.asarray([1.0]).numpy()"


def _start_seconds(device: int, env: dict[str, str]) -> float:
    begin = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", START], env={**os.environ, **env, "FUSION_DEVICE": str(device)},
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise AssertionError(f"start on device {device} failed:\n{done.stderr}")
    return time.perf_counter() - begin


def measure(info, repeat: int) -> dict:
    colds, verdict = [], None
    for _ in range(max(1, repeat)):
        verdict = runner.qualify(info)
        colds.append(verdict.seconds)
    with tempfile.TemporaryDirectory() as cache:
        verdicts.store(info, verdict, verdicts.Path(cache) / "qualification")
        reads = []
        saved = os.environ.get("FUSION_CACHE_DIR")
        os.environ["FUSION_CACHE_DIR"] = cache
        try:
            for _ in range(20):
                verdicts.sources_digest.cache_clear()
                verdicts.cpu_signature.cache_clear()
                qualification._verdicts.clear()
                begin = time.perf_counter()
                qualification.verdict_for(info)
                reads.append(time.perf_counter() - begin)
        finally:
            if saved is None:
                del os.environ["FUSION_CACHE_DIR"]
            else:
                os.environ["FUSION_CACHE_DIR"] = saved
        warm = [_start_seconds(info.index, {"FUSION_CACHE_DIR": cache}) for _ in range(max(1, repeat))]
        off = [_start_seconds(info.index, {"FUSION_QUALIFY": "0"}) for _ in range(max(1, repeat))]
    return {
        "device": info.label,
        "driver": verdicts.driver_of(info),
        "cold_s": colds,
        "cold_median_s": statistics.median(colds),
        "children": verdict.children,
        "warm_verdict_ms": 1e3 * statistics.median(reads),
        "warm_start_s": statistics.median(warm),
        "unqualified_start_s": statistics.median(off),
        "warm_cost_s": statistics.median(warm) - statistics.median(off),
        "widths": verdict.widths,
        "failures": [str(f) for f in verdict.failures],
        "usable": verdict.usable,
    }


def run(size: str = "large", repeat: int = 3, devices: list[str] | None = None) -> dict:
    infos = [select_device(d) for d in devices] if devices else [d for d in list_devices() if not d.is_simulator]
    return {"cpu": verdicts.cpu_signature().split(" [")[0], "devices": [measure(i, repeat) for i in infos]}


def report(result: dict) -> None:
    rows = []
    for d in result["devices"]:
        widths = ", ".join(str(d["widths"][s]) for s in sorted(d["widths"]))
        rows.append([d["device"], widths, d["cold_median_s"], d["children"], d["warm_verdict_ms"],
                     d["warm_start_s"], d["unqualified_start_s"]])
    common.print_table(f"qualification (host CPU: {result['cpu']})",
                       ["device", "widths 1/2/4/8 B", "cold s", "children", "warm verdict ms", "warm start s",
                        "unqualified start s"], rows)
    for d in result["devices"]:
        for failure in d["failures"]:
            print(f"  {d['device']}: failed {failure}")


def main(argv: list[str] | None = None) -> dict:
    return common.run_main(
        NAME, __doc__, run, report, argv,
        configure=lambda p: p.add_argument("--device", action="append", default=None,
                                           help="a device to measure (index or name); default: all"),
        call=lambda a: run(a.size, a.repeat, a.device),
        json_name=lambda a, r: f"{NAME}.json",
    )


if __name__ == "__main__":
    main()
