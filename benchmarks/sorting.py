"""Device sort against numpy's np.sort, on 2^20 float32 elements in two shapes.

    sort(x, axis=-1)      x: float32, one row of 2^20, and 1024 rows of 1024

On a GPU the one long row takes the tile kernel and then merge passes (one per doubling
of the sorted runs); rows of 1024 fit one tile where the device's tile holds 1024 pairs.
On a CPU each work-item sorts a row of 1024 (a bitonic network in 16-lane vectors,
codegen/lane_sort.py), and the one long row is sorted by buckets (keys counted, moved
to buckets of about equal counts, each bucket radix-sorted). The kernels per sort are
counted with `clients.inspect()`.

Variants, measured side by side in interleaved rounds: device (`clients.sort` and a
wait for the device; the input already lives there) and numpy (`np.sort`, its default
kind, on the host array). Reported: wall times, the device kernels' time (with
FUSION_PROFILE=1, the benchmarks' default), and numpy time / device time.

    python -m benchmarks.sorting [--repeat N] [--out DIR]
"""

from __future__ import annotations

from typing import Any

import numpy as np

import clients

from . import common
from . import device_timing as dtime

NAME = "sorting"
ELEMENTS = 2**20
SHAPES = {"one row": (1, ELEMENTS), "1024 rows": (1024, 1024)}


def run_case(shape: tuple[int, int], repeat: int) -> dict:
    """One shape: checked against numpy, then timed; its results."""
    a = np.random.default_rng(7).standard_normal(shape, dtype=np.float32)
    x = clients.asarray(a)
    want = np.sort(a, axis=-1)
    with clients.inspect() as rec:
        got = clients.sort(x)
    clients.sync()
    np.testing.assert_array_equal(got.numpy(), want, err_msg=f"sort of {shape} differs from numpy")
    # The tile kernel, then a merge pass per doubling of the sorted runs (the tile's size
    # depends on the device: tests/test_sorting.py checks the count).
    kernels = len(rec.kernels)
    del got

    def device() -> Any:
        result = clients.sort(x)
        clients.sync()
        return result  # kept until the wait: a dropped result would not be waited for

    wall = common.time_rounds({"device": device, "numpy": lambda: np.sort(a, axis=-1)}, repeat, warmup=1)
    kernel_time = None
    queue = clients.client_for().server.runtime.queue
    if dtime.profiling(queue):
        sampler = dtime.fused_seconds(lambda: clients.sort(x))
        kernel_time = dtime.device_rounds({"device": sampler}, repeat)["device"].to_dict()
    return {
        "shape": list(shape),
        "kernels_per_sort": kernels,
        "variants": {name: t.to_dict() for name, t in wall.items()},
        "device_kernel_time": kernel_time,
        "device_vs_numpy": common.ratio(wall["numpy"], wall["device"]),
    }


def run(size: str = "small", repeat: int = 10) -> dict:
    """Both shapes (2^20 elements whatever `size` says); the results."""
    clients.set_mode("lazy")
    return {
        "benchmark": NAME,
        "elements": ELEMENTS,
        "dtype": "float32",
        "cases": {name: run_case(shape, repeat) for name, shape in SHAPES.items()},
        "ratio_meaning": "time of numpy / time of the device sort: above 1, the device is faster",
    }


HEADERS = ["shape", "kernels", "device ms", "device kernels ms", "numpy ms", "numpy / device"]


def summary_rows(result: dict) -> list[list[Any]]:
    rows = []
    for name, c in result["cases"].items():
        dev = c["device_kernel_time"]
        rows.append([f"{name} {tuple(c['shape'])}", c["kernels_per_sort"],
                     common.ms(c["variants"]["device"]["median_s"]),
                     None if dev is None else common.ms(dev["median_s"]),
                     common.ms(c["variants"]["numpy"]["median_s"]), c["device_vs_numpy"]["of_medians"]])
    return rows


def report(result: dict) -> None:
    common.print_table(f"sort of {result['elements']} float32 elements along the last axis (medians)",
                       HEADERS, summary_rows(result))


def main(argv: list[str] | None = None) -> dict:
    return common.run_main(NAME, __doc__, run, report, argv, json_name=lambda args, result: f"{NAME}.json")


if __name__ == "__main__":
    main()
