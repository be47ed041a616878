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

from collections.abc import Callable
from typing import Any

import numpy as np

import clients

from . import common
from . import device_timing as dtime

NAME = "scans"
SHAPES = {"large": ((1, 1 << 24), (4096, 4096)), "small": ((1, 1 << 20), (1024, 1024))}


def _torch(a: np.ndarray) -> tuple[Callable[[], Any] | None, str]:
    try:
        import torch
    except ImportError:
        return None, "torch not installed"
    if not torch.cuda.is_available():  # the CPU, where the device is a CPU too
        t = torch.from_numpy(a)
        note = f"PyTorch {torch.__version__} on the CPU ({torch.get_num_threads()} threads)"
        return (lambda: torch.cumsum(t, dim=-1)), note
    t = torch.from_numpy(a).cuda()

    def run() -> Any:
        out = torch.cumsum(t, dim=-1)
        torch.cuda.synchronize()
        return out

    return run, f"PyTorch {torch.__version__} on {torch.cuda.get_device_name()}"


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
              **common.against_peers("fused", fused, lambda: np.cumsum(a, axis=-1), *_torch(a), repeat)}
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
        v = r["variants"]
        rows.append([f"{r['shape'][0]} x {r['shape'][1]}", r.get("kernels"), common.ms(v["fused"]["median_s"]),
                     None if "kernel_time" not in r else common.ms(r["kernel_time"]["median_s"]),
                     r.get("single_pass_gb_per_s"), common.ms(v["numpy"]["median_s"]),
                     None if "torch" not in v else common.ms(v["torch"]["median_s"]),
                     r["numpy_over_fused"]["paired_median"], r.get("torch_over_fused", {}).get("paired_median")])
    common.print_table("cumulative_sum of float32 along rows (medians)",
                       ["shape", "kernels", "fused ms", "kernel ms", "GB/s (1 pass)", "numpy ms", "torch ms",
                        "numpy / fused", "torch / fused"], rows)
    print(f"torch: {result['cases']['one row']['torch']}")


def main(argv: list[str] | None = None) -> dict:
    return common.run_main(NAME, __doc__, run, report, argv)


if __name__ == "__main__":
    main()
