"""Array API manipulation functions composed from views, gathers and matmul: roll,
meshgrid, tensordot, tile and repeat."""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence

import numpy as np

from . import _functions as F
from . import _indexing as I  # noqa: E741
from ._array_api import concat
from ._linalg import matmul
from .tensor import Tensor


def _ints(v: int | Sequence[int]) -> tuple[int, ...]:
    return (operator.index(v),) if isinstance(v, (int, np.integer)) else tuple(operator.index(a) for a in v)


def roll(x: Tensor, shift: int | Sequence[int], axis: int | Sequence[int] | None = None) -> Tensor:
    """x with its elements shifted by `shift` along `axis`, wrapping around, as numpy.roll
    (axis None: over the flattened tensor; tuples shift several axes).

    Per axis that moves, the two slices that trade places, concatenated: a copy of each,
    no index array. (A gather by indices computed on the host made every read a gather:
    a 2048^2 float32 rolled along its rows took 8.2 ms of PoCL 3.0, numpy 1.9.)"""
    if axis is None:
        flat = F.reshape(x, (-1,))
        return F.reshape(roll(flat, sum(_ints(shift)), 0), x.shape)
    shifts, axes = _ints(shift), _ints(axis)
    if len(shifts) == 1:
        shifts *= len(axes)
    elif len(axes) == 1:
        axes *= len(shifts)
    if len(shifts) != len(axes):
        raise ValueError(f"roll: {len(shifts)} shifts for {len(axes)} axes")
    total = [0] * x.ndim
    for s, a in zip(shifts, axes):
        total[F._axis(a, x.ndim)] += s  # numpy adds the shifts of a repeated axis
    out = x
    for a, s in enumerate(total):
        n = x.shape[a]
        if n and s % n:
            cut = n - s % n  # (what starts at `cut` moves to the front)
            before = (slice(None),) * a
            out = concat([out[before + (slice(cut, None),)], out[before + (slice(None, cut),)]], axis=a)
    return out if out is not x else F.astype(x, x.dtype)


def meshgrid(*arrays: Tensor, indexing: str = "xy") -> tuple[Tensor, ...]:
    """Coordinate grids from one-dimensional tensors, as numpy.meshgrid: views (each input
    broadcast along the others' axes), no copies. "xy" swaps the first two axes of the
    grid (Cartesian), "ij" does not (matrix indexing). A tuple, as the standard has it
    since 2024.12."""
    if indexing not in ("xy", "ij"):
        raise ValueError(f"indexing must be 'xy' or 'ij', not {indexing!r}")
    client = F._client_of(arrays)
    ts = [a if type(a) is Tensor else F._as_tensor(a, client) for a in arrays]
    for t in ts:
        if t.ndim != 1:
            raise ValueError(f"meshgrid takes one-dimensional tensors, got shape {t.shape}")
    axes = list(range(len(ts)))
    if indexing == "xy" and len(ts) > 1:
        axes[0], axes[1] = 1, 0
    shape = [0] * len(ts)
    for t, a in zip(ts, axes):
        shape[a] = t.shape[0]
    grids = []
    for t, a in zip(ts, axes):
        lined = F.reshape(t, (1,) * a + (t.shape[0],) + (1,) * (len(ts) - a - 1))
        grids.append(F.broadcast_to(lined, tuple(shape)))
    return tuple(grids)


def tensordot(x1: Tensor, x2: Tensor, axes: int | tuple[Sequence[int], Sequence[int]] = 2) -> Tensor:
    """Sums of products over `axes` (an int N: x1's last N with x2's first N; or two
    sequences of axes), as numpy.tensordot: one matmul of the tensors permuted and
    reshaped to (free, contracted) and (contracted, free)."""
    client = F._client_of((x1, x2))
    x1, x2 = (t if type(t) is Tensor else F._as_tensor(t, client) for t in (x1, x2))
    if isinstance(axes, (int, np.integer)):
        n = operator.index(axes)
        if n < 0 or n > min(x1.ndim, x2.ndim):
            raise ValueError(f"tensordot axes={n} needs 0 <= axes <= {min(x1.ndim, x2.ndim)} for tensors "
                             f"of {x1.ndim} and {x2.ndim} dimensions")
        a1, a2 = tuple(range(x1.ndim - n, x1.ndim)), tuple(range(n))
    else:
        a1, a2 = (tuple(F._axis(a, t.ndim) for a in _ints(ax)) for t, ax in zip((x1, x2), axes))
    if len(a1) != len(a2):
        raise ValueError(f"tensordot: {len(a1)} axes of x1 against {len(a2)} of x2")
    for i, j in zip(a1, a2):
        if x1.shape[i] != x2.shape[j]:
            raise ValueError(f"tensordot: axis {i} of x1 has size {x1.shape[i]}, axis {j} of x2 {x2.shape[j]}")
    free1 = [d for d in range(x1.ndim) if d not in a1]
    free2 = [d for d in range(x2.ndim) if d not in a2]
    k = math.prod(x1.shape[i] for i in a1)
    left = F.reshape(F.permute_dims(x1, free1 + list(a1)), (math.prod(x1.shape[d] for d in free1), k))
    right = F.reshape(F.permute_dims(x2, list(a2) + free2), (k, math.prod(x2.shape[d] for d in free2)))
    return F.reshape(matmul(left, right), tuple(x1.shape[d] for d in free1) + tuple(x2.shape[d] for d in free2))


def tile(x: Tensor, repetitions: Sequence[int]) -> Tensor:
    """x repeated `repetitions[d]` times along each axis d, as numpy.tile: a broadcast view
    (each axis d of x preceded by a new one of size repetitions[d]) copied into its shape.
    Shorter repetitions count from the last axis; longer ones add leading axes."""
    reps = _ints(repetitions)
    if any(r < 0 for r in reps):
        raise ValueError(f"tile: repetitions must be non-negative, got {reps}")
    rank = max(len(reps), x.ndim)
    reps = (1,) * (rank - len(reps)) + reps
    shape = (1,) * (rank - x.ndim) + x.shape
    spread = F.reshape(x, tuple(d for n in shape for d in (1, n)))
    wide = F.broadcast_to(spread, tuple(d for r, n in zip(reps, shape) for d in (r, n)))
    return F.reshape(wide, tuple(r * n for r, n in zip(reps, shape)))


def repeat(x: Tensor, repeats: int | Sequence[int] | Tensor, axis: int | None = None) -> Tensor:
    """Each element of x repeated along `axis` (None: x flattened), as numpy.repeat.

    One count for all: a broadcast view copied into its shape. One count per element
    (a sequence or a tensor, whose values decide the output's shape and are read): a
    gather at the positions those counts give."""
    if axis is None:
        x, axis = F.reshape(x, (-1,)), 0
    axis = F._axis(operator.index(axis), x.ndim)
    n = x.shape[axis]
    if isinstance(repeats, (int, np.integer)):
        r = operator.index(repeats)
        if r < 0:
            raise ValueError(f"repeat: repeats must be non-negative, got {r}")
        lined = F.reshape(x, x.shape[:axis + 1] + (1,) + x.shape[axis + 1:])
        wide = F.broadcast_to(lined, x.shape[:axis + 1] + (r,) + x.shape[axis + 1:])
        return F.reshape(wide, x.shape[:axis] + (n * r,) + x.shape[axis + 1:])
    counts = repeats.numpy() if type(repeats) is Tensor else np.asarray(repeats)
    if counts.dtype.kind not in "iu" and counts.size:
        raise TypeError(f"repeat: repeats must be integers, got {counts.dtype.name}")
    counts = counts.astype(np.int64).reshape(-1)
    if counts.size == 1:
        return repeat(x, int(counts[0]), axis)
    if counts.size != n:
        raise ValueError(f"repeat: {counts.size} repeats for an axis of size {n}")
    if (counts < 0).any():
        raise ValueError("repeat: repeats must be non-negative")
    return I.getitem(x, (slice(None),) * axis + (np.repeat(np.arange(n, dtype=np.int64), counts),))
