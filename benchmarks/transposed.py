"""Element-wise work and reductions on transposed operands, against numpy (and PyTorch
where installed: on the same GPU where it has CUDA, else on the CPU).

    x, y: float32, 2048 x 2048 (--size large) or 1024 x 1024 (small); w: a vector

Cases where every operand is transposed alike (`x.T + 1`, `exp(x.T) * 2`, with a row
broadcast), reductions and a matrix-vector product of such a value (run in the value's
memory order, the result in the operands' order as numpy's), and a transposed value
beside a row-major one (`x - y.T * 2`: one of them is read across its rows either way).
Each variant runs to completion (the device waited for; numpy on the host), side by side
in interleaved rounds; our kernels per run are listed.

    python -m benchmarks.transposed [--size small|large] [--repeat N] [--out DIR]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import clients

from . import common

NAME = "transposed"
SIDE = {"large": 2048, "small": 1024}


def _cases(side: int) -> dict[str, tuple[Callable[..., Any], tuple[np.ndarray, ...]]]:
    """name: (an expression of (x, y, w) valid in numpy, ours and torch, the inputs)."""
    rng = np.random.default_rng(3)
    x, y = (rng.standard_normal((side, side), dtype=np.float32) for _ in range(2))
    w = rng.standard_normal(side, dtype=np.float32)

    def xp_exp(v):
        return clients.exp(v) if isinstance(v, clients.Tensor) else v.exp() if hasattr(v, "exp") else np.exp(v)

    def xp_sum(v, axis):
        return clients.sum(v, axis=axis) if isinstance(v, clients.Tensor) else v.sum(axis)

    return {
        "x.T + 1": (lambda x, y, w: x.T + 1, (x, y, w)),
        "exp(x.T) * 2": (lambda x, y, w: xp_exp(x.T) * 2, (x, y, w)),
        "x.T * w + 1 (a row broadcast)": (lambda x, y, w: x.T * w + 1, (x, y, w)),
        "sum(x.T * 2, axis=1)": (lambda x, y, w: xp_sum(x.T * 2, 1), (x, y, w)),
        "(x.T * 2) @ w": (lambda x, y, w: (x.T * 2) @ w, (x, y, w)),
        "x - y.T * 2 (mixed orders)": (lambda x, y, w: x - y.T * 2, (x, y, w)),
    }


def _torch_written(expr: Callable[..., Any]) -> Callable[..., Any]:
    """`expr` for PyTorch, its result made contiguous (torch keeps `x.T + 1` a strided view
    too; counted as written, as ours and numpy's are)."""
    def run(*tensors: Any) -> Any:
        out = expr(*tensors)
        return out.contiguous() if out.dim() else out

    return run


def _case(expr: Callable[..., Any], inputs: tuple[np.ndarray, ...], repeat: int) -> dict:
    ours_in = [clients.asarray(a) for a in inputs]
    want = expr(*inputs)
    np.testing.assert_allclose(expr(*ours_in).numpy(), want, rtol=1e-4, atol=1e-4 * float(np.max(np.abs(want))))

    def ours() -> Any:
        out = expr(*ours_in)
        clients.sync()
        return out

    result = common.against_peers("ours", ours, lambda: expr(*inputs),
                                  *common.torch_variant(_torch_written(expr), inputs), repeat)
    with clients.inspect() as rec:
        ours()
    result["kernels"] = [f"{k.kind} ({', '.join(k.ops)})" for k in rec.kernels]
    return result


def run(size: str = "large", repeat: int = 10) -> dict:
    clients.set_mode("lazy")
    return {"benchmark": NAME, "side": SIDE[size],
            "cases": {name: _case(expr, inputs, repeat) for name, (expr, inputs) in _cases(SIDE[size]).items()}}


def report(result: dict) -> None:
    rows = []
    for name, r in result["cases"].items():
        ours, peers = common.peer_cells(r)
        rows.append([name, *ours, *peers, len(r["kernels"])])
    common.print_table(f"transposed operands, {result['side']}^2 float32 (medians)",
                       ["case", "ours ms", "numpy ms", "torch ms", "numpy / ours", "torch / ours", "kernels"], rows)
    common.print_kernels(result["cases"])
    common.print_torch_notes(list(result["cases"].values()))


def main(argv: list[str] | None = None) -> dict:
    return common.run_main(NAME, __doc__, run, report, argv)


if __name__ == "__main__":
    main()
