"""A matrix times a vector and a vector times a matrix, against numpy's BLAS (and PyTorch
where installed: on the same GPU where it has CUDA, else on the CPU).

    m: float32, 4096 x 4096 (--size large) or 1024 x 1024 (small); v, u: float32 vectors

Cases: `m @ v`, `u @ m`, and `maximum(m @ v + bias, 0)` (the bias and relu fused after the
product). Ours is one reduction kernel of the element-wise product (a row reduction for
`m @ v`, a column reduction for `u @ m`); each variant runs to completion (the device
waited for; numpy on the host), side by side in interleaved rounds. With FUSION_PROFILE=1
the kernels' device time is measured too, and the bandwidth: the matrix read once (the
vectors are small beside it).

    python -m benchmarks.matvec [--size small|large] [--repeat N] [--out DIR]
"""

from __future__ import annotations

from typing import Any

import numpy as np

import clients

from . import common
from . import device_timing as dtime

NAME = "matvec"
SIDE = {"large": 4096, "small": 1024}


def _cases(side: int) -> dict[str, dict[str, Any]]:
    """name: ours, numpy's, PyTorch's (a function of the inputs as torch tensors), the inputs."""
    rng = np.random.default_rng(5)
    m = rng.standard_normal((side, side), dtype=np.float32)
    v, u, bias = (rng.standard_normal(side, dtype=np.float32) for _ in range(3))
    tm, tv, tu, tb = (clients.asarray(a) for a in (m, v, u, bias))
    return {
        f"m @ v, {side}^2": dict(ours=lambda: tm @ tv, numpy=lambda: m @ v,
                                 torch=lambda m, v: m @ v, inputs=(m, v)),
        f"u @ m, {side}^2": dict(ours=lambda: tu @ tm, numpy=lambda: u @ m,
                                 torch=lambda m, v, u: u @ m, inputs=(m, v, u)),
        f"relu(m @ v + bias), {side}^2": dict(
            ours=lambda: clients.maximum(tm @ tv + tb, 0), numpy=lambda: np.maximum(m @ v + bias, 0),
            torch=lambda m, v, u, b: (m @ v + b).relu_(), inputs=(m, v, u, bias)),
    }


def _case(case: dict[str, Any], repeat: int) -> dict:
    want = case["numpy"]()
    got = case["ours"]().numpy()
    scale = float(np.max(np.abs(want))) or 1.0
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * scale)

    def ours() -> Any:
        out = case["ours"]()
        clients.sync()
        return out

    result = common.against_peers("ours", ours, case["numpy"], *common.torch_variant(case["torch"], case["inputs"]),
                                  repeat)
    with clients.inspect() as rec:
        ours()
    result["kernels"] = [f"{k.kind} ({', '.join(k.ops)}; {k.variant})" for k in rec.kernels]
    if dtime.profiling(clients.client_for().server.runtime.queue):
        kernel = dtime.device_rounds({"kernels": dtime.fused_seconds(case["ours"])}, repeat)["kernels"]
        result["kernel_time"] = kernel.to_dict()
        result["gb_per_s"] = case["inputs"][0].nbytes / kernel.median / 1e9
    return result


def run(size: str = "large", repeat: int = 10) -> dict:
    clients.set_mode("lazy")
    return {"benchmark": NAME, "cases": {name: _case(case, repeat) for name, case in _cases(SIDE[size]).items()}}


def report(result: dict) -> None:
    common.print_peer_kernel_table("matrix-vector products, float32 (medians)", "kernel ms", result["cases"])
    common.print_kernels(result["cases"])
    common.print_torch_notes(list(result["cases"].values()))


def main(argv: list[str] | None = None) -> dict:
    return common.run_main(NAME, __doc__, run, report, argv)


if __name__ == "__main__":
    main()
