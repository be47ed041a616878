"""OpenCL C for integer-array gathers and scatters (`y = x[idx]`, `x[idx] = v`), and
their launch arguments.

One kernel moves elements: `dst[d] = src[s]` over an iteration space, with d and s an
offset plus coordinates times strides, plus each index array's value times its axis's
stride. A gather walks its output and reads through the selected region; a scatter walks
the value and writes into the region of an output that holds the old values (copied
there first, or the old value's own buffer: fusers/move.py). A scatter of one value
(`x[idx] = 2.5`) takes it as an argument, `src`, and walks the selection.

Coordinates cost 64-bit divisions, the dearest part of the kernel on CPU devices: a 1-D
space needs none, and a space whose last axis is long runs over a 2-D grid (that axis,
the rows before it) or a row per work-item, with a division per axis only for the axes
before the last two.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from .. import dtypes as dt


class MoveSpec(NamedTuple):
    """Everything the move kernel's source depends on; the program cache's key."""

    dtype: np.dtype  # of the elements moved
    index_dtypes: tuple[np.dtype, ...]
    rank: int  # dimensions of the iteration space
    layout: str = "flat"  # how work-items map onto the space (see move_source, layout_for)
    # Strides that are 0 or 1, spelled as constants (else None: an argument): those of dst,
    # src and each index along the last axis walked, then each index's dst and src strides
    # (a gather's dst stride is 0). Intel's CPU runtime then reads and writes whole vectors
    # where it made gathers and scatters of runtime strides: a 1-D take of 2^20 float32,
    # kernel ms on 2 Zen 3 cores, 2.3 to 3.2 against 1.0 for a kernel without them.
    units: tuple[int | None, ...] = ()
    # Launched over exactly its work-items (the driver choosing the group size: CPU
    # devices), the kernel needs no test of its id against the space's end. PoCL 3.0 made
    # slow code of any such test: a 2048^2 row gather over the grid took 5.7 to 11 ms of
    # kernel time with it, 0.9 to 2.1 without (2 Zen 3 cores; Intel's runtime: 0.9 to 1.2
    # either way).
    guarded: bool = True
    # A scatter of one value (MoveOp.fill): `src` is that value, a kernel argument, where
    # it is a buffer read through strides (the value's fill was a launch of its own).
    fill: bool = False

# A space of 2 dimensions or more whose last axis has at least this many elements runs as
# a 2-D grid (MoveSpec.layout), unless its rows exceed GRID_MAX_ROWS on a GPU (the second
# dimension of a launch is bounded there: 65535 groups of CUDA's grid), or as rows, a
# work-item each, on CPU drivers that do not pack work-items into vector lanes (PoCL).
# Shorter rows keep the flat index (a grid's group would be mostly idle along a row of
# 3). Kernel ms, 1024 x 1024 float32 gathers of rows (`m[idx]`), PoCL 3.0 / Intel's CPU
# runtime, 2 Zen 3 cores:
# flat index 9.8 / 5.4, grid 4.9 / 1.6 (columns, `m[:, idx]`: 10.3 / 6.1 against 3.1 /
# 0.77), both before the unit strides and the exact launch below.
GRID_ROW_MIN = 16
GRID_MAX_ROWS = 65535


# PoCL 3.0 launched over a grid whose rows' length has no small factors (2043 = 9 x 227)
# made slow code: a 2048^2 float32 rolled by 5 along its rows, the copy of its 2043
# columns took 5.2 ms against 1.0 for rows of 2048; a loop along each row runs alike for
# any length (a row gather of 2048^2: 1.2 to 1.8 ms, the grid 0.9 to 2.1). Fewer rows
# than ROWS_MIN keep the flat index, which spreads a long row over the cores.
ROWS_MIN = 64


def layout_for(shape: tuple[int, ...], cpu: bool, packs_lanes: bool) -> str:
    """MoveSpec.layout for an iteration space of `shape` (see GRID_ROW_MIN)."""
    if len(shape) < 2 or shape[-1] < GRID_ROW_MIN:
        return "flat"
    if cpu:
        # (rows, a work-item each: too few of them and the cores would idle)
        return "grid" if packs_lanes else "rows" if math.prod(shape[:-1]) >= ROWS_MIN else "flat"
    return "grid" if math.prod(shape[:-1]) <= GRID_MAX_ROWS else "flat"


def kernel_name(spec: MoveSpec) -> str:
    layout = ("" if spec.layout == "flat" else f"_{spec.layout}") + ("" if spec.guarded else "_exact")
    units = "_" + "".join("n" if u is None else str(u) for u in spec.units) if spec.units else ""
    fill = "_fill" if spec.fill else ""
    return f"move{fill}_{spec.dtype}_{'_'.join(str(d) for d in spec.index_dtypes)}_{spec.rank}d{layout}{units}"


def generate(spec: MoveSpec) -> tuple[str, str]:
    """(source, kernel name) for `spec`."""
    name = kernel_name(spec)
    return move_source(spec.dtype, spec.index_dtypes, spec.rank, name, spec.layout, spec.units, spec.guarded,
                       spec.fill), name


def arg_dtypes(spec: MoveSpec) -> list:
    """pyopencl's argument types, in `move_source`'s order: None for the buffers, int64 for
    every scalar (without them pyopencl sets each scalar by its slow path: 6.4 us an
    argument on Intel's CPU runtime, 42 of a 1-element scatter's 45 us of launch), the
    elements' dtype for a fill's value."""
    i64 = np.dtype(np.int64)
    k = len(spec.index_dtypes)
    return [None, i64, spec.dtype if spec.fill else None, i64] + [None, i64] * k + \
        [i64] * (1 + spec.rank * (3 + k) + 3 * k)


def scalar_variant(spec: MoveSpec) -> None:
    return None  # one element per work-item already


def move_source(dtype: np.dtype, index_dtypes: tuple[np.dtype, ...], rank: int, name: str = "move",
                layout: str = "flat", units: tuple[int | None, ...] = (), guarded: bool = True,
                fill: bool = False) -> str:
    """OpenCL C for `dst[d] = src[s]` over an iteration space of `rank` dimensions.

    Each work-item finds its coordinates: from its flat index ("flat"), from a 2-D grid
    whose first dimension walks the last axis and whose second walks the rows of the axes
    before it ("grid"), or as one row, walked by a loop ("rows"); d and s are an offset
    plus coordinate times stride per dimension, plus for each index array its value
    (negative ones wrapped, then clamped into the axis so no read or write leaves the
    buffers) times that axis's stride. `units`, `guarded`, `fill`: MoveSpec's (a fill
    writes `src`, a value, and walks no source offset).
    """
    t = dt.CL_NAME[dtype]
    k_range = range(len(index_dtypes))
    params = [f"__global {t} *dst", "long dst_off", f"const {t} src" if fill else f"__global const {t} *src",
              "long src_off"]
    for k, d in enumerate(index_dtypes):
        params += [f"__global const {dt.CL_NAME[d]} *idx{k}", f"long idx{k}_off"]
    params.append("long n")
    for o in range(rank):
        params += [f"long n{o}", f"long ds{o}", f"long ss{o}"] + [f"long is{k}_{o}" for k in k_range]
    for k in k_range:
        params += [f"long m{k}", f"long da{k}", f"long sa{k}"]

    n_walk = 2 + len(index_dtypes)
    unit = units or (None,) * (n_walk + 2 * len(index_dtypes))

    def adds(times: str, terms) -> str:  # `target += times * stride` for each (target, stride, unit)
        return " ".join(f"{t} += {times};" if u == 1 else f"{t} += {times} * {st};" for t, st, u in terms if u != 0)

    def step(o: int, at: str) -> str:  # (coordinate c along axis o, added to the offsets named with `at`)
        us = unit[:n_walk] if o == rank - 1 else (None,) * n_walk
        names = [(f"d{at}", f"ds{o}"), (f"s{at}", f"ss{o}")] + [(f"i{k}{at}", f"is{k}_{o}") for k in k_range]
        terms = [(t, st, u) for (t, st), u in zip(names, us)]
        return adds("c", terms[:1] + terms[2:] if fill else terms)  # (a fill has no source offset)

    last = rank - 1
    split = rank if layout == "flat" else last  # (the axes whose coordinates come from g)
    if layout == "grid":
        body = ["long x = (long)get_global_id(0);", "long g = (long)get_global_id(1);"]
        body += [f"if (x >= n{last}) return;"] if guarded else []
    else:
        body = ["long g = (long)get_global_id(0);"]
        body += ([f"if (g >= n / n{last}) return;" if layout == "rows" else "if (g >= n) return;"]
                 if guarded else [])
    # The offsets of the work-item's row (suffix _r), then of its element.
    body += ["long d_r = dst_off;" if fill else "long d_r = dst_off, s_r = src_off;"]
    body += [f"long i{k}_r = idx{k}_off;" for k in k_range]
    for o in reversed(range(split)):  # (the first axis takes what is left: no division)
        body.append(f"{{ long c = g; {step(o, '_r')} }}" if o == 0 else
                    f"{{ long q = g / n{o}; long c = g - q * n{o}; {step(o, '_r')} g = q; }}")
    element = ["long d = d_r;" if fill else "long d = d_r, s = s_r;"] + [f"long i{k} = i{k}_r;" for k in k_range]
    if layout != "flat":
        element.append(f"{{ long c = x; {step(last, '')} }}")
    for k in k_range:
        da, sa = unit[n_walk + 2 * k:n_walk + 2 * k + 2]
        walks = (('d', f'da{k}', da),) if fill else (('d', f'da{k}', da), ('s', f'sa{k}', sa))
        element.append(f"{{ long v = (long)idx{k}[i{k}]; if (v < 0) v += m{k}; v = clamp(v, 0L, m{k} - 1);"
                       f" {adds('v', walks)} }}")
    element.append("dst[d] = src;" if fill else "dst[d] = src[s];")
    if layout == "rows":
        body += [f"for (long x = 0; x < n{last}; ++x) {{"] + ["  " + line for line in element] + ["}"]
    else:
        body += element
    return f"__kernel void {name}(" + ", ".join(params) + ") {\n  " + "\n  ".join(body) + "\n}\n"


Layout = tuple  # (shape, offset, strides), offset and strides in elements


def _unit(stride: int) -> int | None:
    """A stride the kernel may spell as a constant (see MoveSpec.units): 0 or 1, else None."""
    return stride if stride in (0, 1) else None


def move_arguments(inputs: list[Layout], out: Layout, *, scatter, region_map, adv, b_map,
                   region) -> tuple[int, list, tuple[int | None, ...]]:
    """The work-items and arguments of a gather (`out = y[indices]`) or a scatter (`out.y
    [indices] = value`, once `out` holds the old values), with the buffers left None
    (`set_buffers` fills them in), and MoveSpec.units for them. `inputs` are (y, *indices)
    or (old, value, *indices). `region` is the selected region's (shape, strides,
    offset) in the output for a scatter; a gather reads it from its first input."""
    if scatter:  # walk the value; write through the region of the output
        _, (it_shape, src_off, src_walk), *indices = inputs
        region_shape, region_strides, dst_off = region
        dst_walk = [region_strides[r] if r >= 0 else 0 for r in region_map]
        dst_adv = [region_strides[a] for a in adv]
        src_adv = [0] * len(adv)
        sizes = [region_shape[a] for a in adv]
    else:  # walk the output; read through the region (the first input)
        (y_shape, src_off, y_strides), *indices = inputs
        it_shape, dst_off, dst_walk = out
        src_walk = [y_strides[r] if r >= 0 else 0 for r in region_map]
        dst_adv = [0] * len(adv)
        src_adv = [y_strides[a] for a in adv]
        sizes = [y_shape[a] for a in adv]
    n = math.prod(it_shape)
    if n == 0:
        return 0, [], ()
    i64 = np.int64
    args: list[Any] = [None, i64(dst_off), None, i64(src_off)]
    for _, off, _ in indices:
        args += [None, i64(off)]
    args.append(i64(n))
    walks = []  # per axis walked: the strides of dst, src and each index
    for o, size in enumerate(it_shape):
        walk = [dst_walk[o], src_walk[o]] + [st[b_map[o]] if b_map[o] >= 0 else 0 for _, _, st in indices]
        args += [i64(size), *map(i64, walk)]
        walks.append(walk)
    for k in range(len(adv)):
        args += [i64(sizes[k]), i64(dst_adv[k]), i64(src_adv[k])]
    advs = [stride for k in range(len(adv)) for stride in (dst_adv[k], src_adv[k])]
    last = walks[-1] if walks else [None] * (2 + len(indices))  # (a space of rank 0 walks no axis)
    return n, args, tuple(map(_unit, last + advs))


def set_buffers(args: list, dst: Any, src: Any, indices: list) -> None:
    """Put the buffers into `move_arguments`'s arguments."""
    args[0], args[2] = dst, src
    args[4:4 + 2 * len(indices):2] = indices
