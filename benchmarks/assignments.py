"""Assignments into a large tensor: written into the old value's buffer (the default when
nothing else sees it) against copying it first (the way before: a scatter copied the old
value whole, `x[k] = v` computed a `where` at every element), numpy's in-place write and
PyTorch's (where installed: on the same GPU where it has CUDA, else on the CPU).

    z: float32, 2048 x 2048 (--size large) or 1024 x 1024 (small), a tensor that lives on
    (a table, a simulation's state); rows: a quarter of its rows, by int64 indices

Cases: `z[idx] = rows`, `z[idx] = 0.0`, `z[i, j] = 2.5`, `z[i, a:b] = 1.5`, and `y = m *
1.0; y[idx] = rows` (a fresh value, whose old buffer dies too). Each variant runs to
completion (the device waited for; numpy on the host), side by side in interleaved rounds.

    python -m benchmarks.assignments [--size small|large] [--repeat N] [--out DIR]
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any

import numpy as np

import clients
from clients import _indexing
from fusion_server.fusers import move

from . import common

NAME = "assignments"
SIDE = {"large": 2048, "small": 1024}


@contextmanager
def _copying():
    """Assignments as before writing in place: the scatter copies the old value, basic
    keys compute a `where` at every element."""
    writes, sizes = move._writes_in_place, _indexing.SCATTER_REGION_MIN
    move._writes_in_place = lambda *args: False
    _indexing.SCATTER_REGION_MIN = dict.fromkeys(sizes, 1 << 62)
    try:
        yield
    finally:
        move._writes_in_place, _indexing.SCATTER_REGION_MIN = writes, sizes


def _copied(fn: Any) -> Any:
    def run() -> Any:
        with _copying():
            return fn()
    return run


def _cases(side: int) -> dict[str, dict[str, Any]]:
    """name: ours (a function that assigns and waits), numpy's, PyTorch's (a function of
    the inputs as torch tensors), the inputs."""
    rng = np.random.default_rng(3)
    matrix = rng.standard_normal((side, side), dtype=np.float32)
    rows = rng.standard_normal((side // 4, side), dtype=np.float32)
    idx = rng.permutation(side)[: side // 4]
    m, z, t_rows, t_idx = (clients.asarray(a) for a in (matrix, matrix, rows, idx))
    state = matrix.copy()
    i, a, b = side // 2, side // 8, side // 8 + 100

    def synced(assign: Any) -> Any:
        def run() -> Any:
            assign()
            clients.sync()
        return run

    def fresh() -> None:
        y = m * 1.0
        y[t_idx] = t_rows
        clients.sync()

    def fresh_numpy() -> None:
        y = matrix * np.float32(1.0)
        y[idx] = rows

    return {
        f"z[idx] = rows, {side // 4} of {side}": dict(
            ours=synced(lambda: z.__setitem__(t_idx, t_rows)), numpy=lambda: state.__setitem__(idx, rows),
            torch=lambda t, k, r: t.index_put_((k,), r), inputs=(matrix, idx, rows)),
        f"z[idx] = 0.0, {side // 4} rows of {side}": dict(
            ours=synced(lambda: z.__setitem__(t_idx, 0.0)), numpy=lambda: state.__setitem__(idx, 0.0),
            torch=lambda t, k: t.index_put_((k,), t.new_tensor(0.0)), inputs=(matrix, idx)),
        f"z[i, j] = 2.5, {side}^2": dict(
            ours=synced(lambda: z.__setitem__((i, 7), 2.5)), numpy=lambda: state.__setitem__((i, 7), 2.5),
            torch=lambda t: t.__setitem__((i, 7), 2.5), inputs=(matrix,)),
        f"z[i, a:b] = 1.5, {side}^2": dict(
            ours=synced(lambda: z.__setitem__((i, slice(a, b)), 1.5)),
            numpy=lambda: state.__setitem__((i, slice(a, b)), 1.5),
            torch=lambda t: t.__setitem__((i, slice(a, b)), 1.5), inputs=(matrix,)),
        f"y = m * 1; y[idx] = rows, {side // 4} of {side}": dict(
            ours=fresh, numpy=fresh_numpy, torch=lambda t, k, r: (t * 1.0).index_put_((k,), r),
            inputs=(matrix, idx, rows)),
    }


def _case(case: dict[str, Any], repeat: int) -> dict:
    torch_run, torch_note = common.torch_variant(case["torch"], case["inputs"])
    variants = {"in place": case["ours"], "copying": _copied(case["ours"]), "numpy": case["numpy"]}
    if torch_run is not None:
        variants["torch"] = torch_run
    wall = common.time_rounds(variants, repeat, warmup=2, apart=("torch",) if "CPU" not in torch_note else ())
    result = {"variants": {k: t.to_dict() for k, t in wall.items()}, "torch": torch_note,
              "copying_over_in_place": common.ratio(wall["copying"], wall["in place"]),
              "numpy_over_in_place": common.ratio(wall["numpy"], wall["in place"])}
    if "torch" in wall:
        result["torch_over_in_place"] = common.ratio(wall["torch"], wall["in place"])
    return result


def run(size: str = "large", repeat: int = 10) -> dict:
    clients.set_mode("lazy")
    cases = _cases(SIDE[size])
    return {"benchmark": NAME, "cases": {name: _case(case, repeat) for name, case in cases.items()}}


def report(result: dict) -> None:
    rows = []
    for name, r in result["cases"].items():
        v = r["variants"]
        rows.append([name, common.ms(v["in place"]["median_s"]), common.ms(v["copying"]["median_s"]),
                     common.ms(v["numpy"]["median_s"]),
                     common.ms(v["torch"]["median_s"]) if "torch" in v else None,
                     r["copying_over_in_place"]["paired_median"], r["numpy_over_in_place"]["paired_median"],
                     r.get("torch_over_in_place", {}).get("paired_median")])
    common.print_table("assignments into float32 tensors, the device waited for (medians)",
                       ["case", "in place ms", "copying ms", "numpy ms", "torch ms", "copying / in place",
                        "numpy / in place", "torch / in place"], rows)
    common.print_torch_notes(list(result["cases"].values()))


def main(argv: list[str] | None = None) -> dict:
    return common.run_main(NAME, __doc__, run, report, argv)


if __name__ == "__main__":
    main()
