"""Cumulative sums along rows: `clients.cumulative_sum` against numpy's cumsum and
torch.cumsum (on the same GPU where PyTorch has CUDA, else on the CPU).

    x: float32, one row of 2^24 elements and 4096 rows of 4096 (--size large), or one row
       of 2^20 and 1024 rows of 1024 (small)

Each variant runs to completion (the device waited for; numpy on the host), side by side
in interleaved rounds. With FUSION_PROFILE=1 the scan kernels' device time is measured
too, and its bandwidth: the input read twice and the output written once, against the
bytes a single pass moves (read once, write once), which is what a peer's fused scan moves.

    python -m benchmarks.scans [--size small|large] [--repeat N] [--out DIR]
"""

from __future__ import annotations

from typing import Any

import numpy as np

import clients

from . import common
from . import device_timing as dtime

NAME = "scans"
SHAPES = {"large": ((1, 1 << 24), (4096, 4096)), "small": ((1, 1 << 20), (1024, 1024))}


def _shape(shape: tuple[int, int], repeat: int) -> dict:
    a = np.random.default_rng(7).standard_normal(shape, dtype=np.float32)
    x = clients.asarray(a)
    want = np.cumsum(a.astype(np.float64), axis=-1)
    got = clients.cumulative_sum(x, axis=-1).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())

    def fused() -> Any:
        out = clients.cumulative_sum(x, axis=-1)
        clients.sync()
        return out

    result = {"shape": list(shape),
              **common.against_peers("fused", fused, lambda: np.cumsum(a, axis=-1),
                                     *common.torch_variant(lambda t: t.cumsum(dim=-1), (a,)), repeat)}
    if dtime.profiling(clients.client_for().server.runtime.queue):
        with clients.inspect() as rec:
            fused()
        result["kernels"] = len(rec.kernels)
        kernel = dtime.device_rounds({"fused": dtime.fused_seconds(lambda: clients.cumulative_sum(x, axis=-1))},
                                     repeat)["fused"]
        result["kernel_time"] = kernel.to_dict()
        result["single_pass_gb_per_s"] = 2 * a.nbytes / kernel.median / 1e9
    return result


def run(size: str = "large", repeat: int = 10) -> dict:
    clients.set_mode("lazy")
    one, many = SHAPES[size]
    return {"benchmark": NAME, "cases": {"one row": _shape(one, repeat), "many rows": _shape(many, repeat)}}


def report(result: dict) -> None:
    rows = []
    for r in result["cases"].values():
        ours, peers = common.peer_cells(r, "fused")
        rows.append([f"{r['shape'][0]} x {r['shape'][1]}", r.get("kernels"), *ours,
                     None if "kernel_time" not in r else common.ms(r["kernel_time"]["median_s"]),
                     r.get("single_pass_gb_per_s"), *peers])
    common.print_table("cumulative_sum of float32 along rows (medians)",
                       ["shape", "kernels", "fused ms", "kernel ms", "GB/s (1 pass)", "numpy ms", "torch ms",
                        "numpy / fused", "torch / fused"], rows)
    common.print_torch_notes(list(result["cases"].values()))


def main(argv: list[str] | None = None) -> dict:
    return common.run_main(NAME, __doc__, run, report, argv)


if __name__ == "__main__":
    main()
