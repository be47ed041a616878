"""A complex64 element-wise chain, fused into one kernel, against its peers.

    out = exp(z * w) * conj(z) + abs(w) * 0.5j - z / (w + 1)

over complex64 values (2^24 elements with --size large, 2^20 with small). Variants,
timed side by side in interleaved rounds, each computing the chain and waiting for it:

- fused:  lazy tensors, one generated kernel (build + sync)
- eager:  the same code in eager mode, one kernel per op (build + sync)
- numpy:  the expression on numpy arrays
- torch / torch-cuda: PyTorch eager on the CPU, and on CUDA where there is a GPU (timed
  in rounds of their own: see common.time_rounds' `apart`), when PyTorch is installed

Every result is checked against numpy's (complex128, then cast) first.

    python -m benchmarks.complex_chain [--size small|large] [--repeat N] [--out DIR]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import clients

from . import common

NAME = "complex_chain"
RTOL = 1e-4


def chain(z: Any, w: Any, ns: Any) -> Any:
    """The benchmark's expression, for any namespace with exp, conj and abs."""
    return ns.exp(z * w) * ns.conj(z) + ns.abs(w) * 0.5j - z / (w + 1)


def inputs(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return tuple((rng.uniform(-1, 1, n) + 1j * rng.uniform(-1, 1, n)).astype(np.complex64)
                 for _ in range(2))  # type: ignore[return-value]


def check(name: str, got: np.ndarray, want: np.ndarray) -> None:
    if got.dtype != np.complex64:
        raise AssertionError(f"{name}: result is {got.dtype}, not complex64")
    scale = np.maximum(np.abs(want), 1.0)
    worst = float(np.max(np.abs(got - want) / scale))
    if not worst <= RTOL:
        raise AssertionError(f"{name} differs from numpy: relative error {worst:.3g}")


def _torch(z: np.ndarray, w: np.ndarray) -> tuple[dict[str, Callable[[], Any]], str]:
    """PyTorch's variants (results on the host), and what ran them; none without PyTorch."""
    try:
        import torch
    except ImportError:
        return {}, "not installed"
    tz, tw = torch.from_numpy(z), torch.from_numpy(w)
    out: dict[str, Callable[[], Any]] = {"torch": lambda: chain(tz, tw, torch)}
    note = f"PyTorch {torch.__version__} on the CPU ({torch.get_num_threads()} threads)"
    if torch.cuda.is_available():
        gz, gw = tz.cuda(), tw.cuda()

        def cuda() -> Any:
            out = chain(gz, gw, torch)
            torch.cuda.synchronize()
            return out

        out["torch-cuda"] = cuda
        note += f" and on {torch.cuda.get_device_name()}"
    return out, note


def run(size: str = "large", repeat: int = 10) -> dict:
    n = common.SIZES[size]
    z, w = inputs(n, seed=3)
    want = chain(z.astype(np.complex128), w.astype(np.complex128), np).astype(np.complex64)
    tz, tw = clients.asarray(z), clients.asarray(w)

    def lazy() -> Any:
        out = chain(tz, tw, clients)
        clients.sync()
        return out

    def eager() -> Any:
        clients.set_mode("eager")
        try:
            return lazy()
        finally:
            clients.set_mode("lazy")

    with clients.inspect() as rec:
        check("fused", lazy().numpy(), want)
    kernels = len(rec.kernels)
    check("eager", eager().numpy(), want)
    variants: dict[str, Callable[[], Any]] = {"fused": lazy, "eager": eager, "numpy": lambda: chain(z, w, np)}
    torch_runs, torch_note = _torch(z, w)
    for name, fn in torch_runs.items():
        check(name, np.asarray(fn().cpu()), want)
        variants[name] = fn
    check("numpy", variants["numpy"](), want)
    timings = common.time_rounds(variants, repeat, warmup=1, apart=("torch-cuda",))
    return {
        "benchmark": NAME,
        "elements": n,
        "kernels_per_fused_run": kernels,
        "torch": torch_note,
        "variants": {k: t.to_dict() for k, t in timings.items()},
        "ratios": {f"fused_vs_{k}": common.ratio(t, timings["fused"]) for k, t in timings.items() if k != "fused"},
    }


def report(result: dict) -> None:
    rows = [[k, common.ms(v["median_s"]), common.ms(v["min_s"])] for k, v in result["variants"].items()]
    common.print_table(f"complex64 chain over {result['elements']} elements ({result['kernels_per_fused_run']} "
                       "kernel fused)", ["variant", "median ms", "min ms"], rows)
    print("fused speed-up: " + ", ".join(f"{k[len('fused_vs_'):]} {v['of_medians']:.2f}x"
                                         for k, v in result["ratios"].items()))
    print(f"torch: {result['torch']}")


def main(argv: list[str] | None = None) -> dict:
    return common.run_main(NAME, __doc__, run, report, argv)


if __name__ == "__main__":
    main()
