"""Integer-array gathers and scatters: a boolean mask's selection and unique_inverse (on
the device, and read to the host: GPUs take the first; CPU devices read masks and run
unique_* on the device from clients._sorting.UNIQUE_ON_DEVICE_MIN elements),
`take`, rows and columns of a matrix by index, rows written by index into a fresh value
and into one that lives on (in place), and one element written into it, against numpy
(and PyTorch where installed: on the same GPU where it has CUDA, else on the CPU).

    x: float32, 2^22 elements (--size large: a vector, or 2048 x 2048) or 2^20 (small);
       indices int64, as many as the result has rows (or elements), uniform at random

Each variant runs to completion (the device waited for; numpy on the host), side by side
in interleaved rounds, with device-resident indices (a host index array is uploaded
first: a copy, not the gather). numpy checks the bounds at every call; we check an index
tensor once (one reduction of the indices, read by the host) and not again while its
value lives (a tensor's values never change under its id), so the timed calls, which
reuse their index tensors, wait for no check. With FUSION_PROFILE=1 the move kernel's
device time is measured too (for a mask every kernel of the call: the compare, the
running count, the scatter of positions, the gather), and its bandwidth: the bytes it
must read and write (the indices, the elements read, the result; for a mask the values
compared, the mask, and the gather of what it picks).

    python -m benchmarks.gathers [--size small|large] [--repeat N] [--out DIR]
"""

from __future__ import annotations

from typing import Any

import numpy as np

import clients

from . import common
from . import device_timing as dtime

NAME = "gathers"
SIDE = {"large": 2048, "small": 1024}


def _cases(side: int) -> dict[str, dict[str, Any]]:
    """name: numpy's inputs, ours, the expression in each namespace, bytes moved."""
    rng = np.random.default_rng(11)
    n = side * side
    vector = rng.standard_normal(n, dtype=np.float32)
    matrix = vector.reshape(side, side)
    flat_idx = rng.integers(0, n, n)
    row_idx = rng.integers(0, side, side)
    rows = rng.standard_normal((side // 4, side), dtype=np.float32)
    write_idx = rng.permutation(side)[: side // 4]
    x, m = clients.asarray(vector), clients.asarray(matrix)
    t_flat, t_row = clients.asarray(flat_idx), clients.asarray(row_idx)
    t_rows, t_write = clients.asarray(rows), clients.asarray(write_idx)

    def scatter_ours() -> Any:
        y = m * 1.0  # (a fresh value each time: the write is copy-on-write)
        y[t_write] = t_rows
        return y

    def scatter_numpy() -> Any:
        y = matrix * np.float32(1.0)
        y[write_idx] = rows
        return y

    def forced(on_device: bool, fn: Any) -> Any:
        def run() -> Any:
            clients._indexing.MASKS_ON_DEVICE = on_device
            try:
                return fn()
            finally:
                clients._indexing.MASKS_ON_DEVICE = None
        return run

    # Writes into a tensor that lives on (a model's table, a simulation's state): each
    # call's old value dies with it, and the scatter writes into its buffer.
    state, t_state = matrix.copy(), clients.asarray(matrix)
    one = (side // 2, 7)

    def write_rows_ours() -> Any:
        t_state[t_write] = t_rows
        return t_state

    def write_rows_numpy() -> Any:
        state[write_idx] = rows
        return state

    def write_one_ours() -> Any:
        t_state[one] = 2.5
        return t_state

    def write_one_numpy() -> Any:
        state[one] = 2.5
        return state

    labels = rng.integers(0, 1000, n).astype(np.int32)
    t_labels = clients.asarray(labels)

    b = 4
    picked = int(np.count_nonzero(vector > 0.5))
    mask_bytes = n * (b + 1) + picked * (8 + 2 * b)  # (the compare, the gather of what it picks)
    return {
        f"x[x > 0.5] of {n}, positions on the device": dict(
            ours=forced(True, lambda: x[x > 0.5]), numpy=lambda: vector[vector > 0.5], torch=("mask", vector),
            bytes=mask_bytes, every_kernel=True),
        f"x[x > 0.5] of {n}, mask read": dict(
            ours=forced(False, lambda: x[x > 0.5]), numpy=lambda: vector[vector > 0.5], torch=("mask", vector),
            bytes=mask_bytes, every_kernel=True),
        f"unique_inverse of {n} int32 labels, on the device": dict(
            ours=forced(True, lambda: clients.unique_inverse(t_labels).inverse_indices),
            numpy=lambda: np.unique(labels, return_inverse=True)[1], torch=("unique", labels),
            bytes=n * 4 * 2, every_kernel=True),
        f"unique_inverse of {n} int32 labels, read": dict(
            ours=forced(False, lambda: clients.unique_inverse(t_labels).inverse_indices),
            numpy=lambda: np.unique(labels, return_inverse=True)[1], torch=("unique", labels),
            bytes=n * 4 * 2, every_kernel=True),
        f"take of {n} from {n}": dict(ours=lambda: clients.take(x, t_flat), numpy=lambda: np.take(vector, flat_idx),
                                      torch=("take", vector, flat_idx), bytes=n * (8 + 2 * b)),
        f"rows m[idx], {side}^2": dict(ours=lambda: m[t_row], numpy=lambda: matrix[row_idx],
                                       torch=("rows", matrix, row_idx), bytes=2 * n * b),
        f"columns m[:, idx], {side}^2": dict(ours=lambda: m[:, t_row], numpy=lambda: matrix[:, row_idx],
                                             torch=("columns", matrix, row_idx), bytes=2 * n * b),
        f"y[idx] = rows, {side // 4} of {side}": dict(ours=scatter_ours, numpy=scatter_numpy, torch=None,
                                                     bytes=2 * n * b + 2 * rows.nbytes),
        f"z[idx] = rows into a live z, {side // 4} of {side}": dict(
            ours=write_rows_ours, numpy=write_rows_numpy,
            torch=("put_rows", matrix, write_idx, rows), bytes=2 * rows.nbytes + write_idx.nbytes),
        f"z[i, j] = 2.5 into a live z, {side}^2": dict(
            ours=write_one_ours, numpy=write_one_numpy,
            torch=("put_one", matrix, np.array([one[0] * side + one[1]])), bytes=b),
    }


_TORCH_OPS = {"mask": lambda t: t[t > 0.5], "unique": lambda t: t.unique(return_inverse=True)[1],
              "take": lambda t, i: t.take(i), "rows": lambda t, i: t[i], "columns": lambda t, i: t[:, i],
              "put_rows": lambda t, i, r: t.index_put_((i,), r),
              "put_one": lambda t, at: t.view(-1).index_fill_(0, at, 2.5)}


def _case(case: dict[str, Any], repeat: int) -> dict:
    np.testing.assert_array_equal(case["ours"]().numpy(), case["numpy"]())

    def ours() -> Any:
        out = case["ours"]()
        clients.sync()
        return out

    spec = case["torch"]
    torch_run = common.torch_variant(_TORCH_OPS[spec[0]], spec[1:]) if spec else (None, "no PyTorch variant")
    result = common.against_peers("ours", ours, case["numpy"], *torch_run, repeat)
    if dtime.profiling(clients.client_for().server.runtime.queue):
        with clients.inspect() as rec:
            ours()
        moves = [k for k in rec.kernels if k.kind == "move"]
        result["move_kernel"] = moves[0].name if moves else None

        def move_seconds() -> float | None:
            with clients.inspect() as rec:
                ours()
            seconds = [k.device_seconds for k in rec.kernels if k.kind == "move" or case.get("every_kernel")]
            return None if not seconds or None in seconds else float(sum(seconds))

        kernel = dtime.device_rounds({"move": move_seconds}, repeat)["move"]
        if kernel.samples:  # (none where the work ran on the host)
            result["kernel_time"] = kernel.to_dict()
            result["gb_per_s"] = case["bytes"] / kernel.median / 1e9
    return result


def run(size: str = "large", repeat: int = 10) -> dict:
    clients.set_mode("lazy")
    return {"benchmark": NAME, "cases": {name: _case(case, repeat) for name, case in _cases(SIDE[size]).items()}}


def report(result: dict) -> None:
    common.print_peer_kernel_table("gathers and scatters of float32 by int64 indices on the device (medians)",
                                   "kernel ms (moves; masks: all)", result["cases"])
    common.print_torch_notes(list(result["cases"].values()))


def main(argv: list[str] | None = None) -> dict:
    return common.run_main(NAME, __doc__, run, report, argv)


if __name__ == "__main__":
    main()
