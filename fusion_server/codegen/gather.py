"""OpenCL C for integer-array gathers and scatters (`y = x[idx]`, `x[idx] = v`), and
their launch arguments.

One kernel moves elements: `dst[d] = src[s]` over an iteration space, with d and s an
offset plus coordinates times strides, plus each index array's value times its axis's
stride. A gather walks its output and reads through the selected region; a scatter first
copies the old values into the output, then walks the value and writes into the region.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from .. import dtypes as dt


class MoveSpec(NamedTuple):
    """Everything the move kernel's source depends on; the program cache's key."""

    dtype: np.dtype  # of the elements moved
    index_dtypes: tuple[np.dtype, ...]
    rank: int  # dimensions of the iteration space


def kernel_name(spec: MoveSpec) -> str:
    return f"move_{spec.dtype}_{'_'.join(str(d) for d in spec.index_dtypes)}_{spec.rank}d"


def generate(spec: MoveSpec) -> tuple[str, str]:
    """(source, kernel name) for `spec`."""
    name = kernel_name(spec)
    return move_source(spec.dtype, spec.index_dtypes, spec.rank, name), name


def arg_dtypes(spec: MoveSpec) -> None:
    return None  # every scalar argument is passed as a numpy int64


def scalar_variant(spec: MoveSpec) -> None:
    return None  # one element per work-item already


def move_source(dtype: np.dtype, index_dtypes: tuple[np.dtype, ...], rank: int, name: str = "move") -> str:
    """OpenCL C for `dst[d] = src[s]` over an iteration space of `rank` dimensions.

    Each work-item splits its flat index into coordinates; d and s are an offset plus
    coordinate times stride per dimension, plus for each index array its value (negative
    ones wrapped, then clamped into the axis so no read or write leaves the buffers)
    times that axis's stride.
    """
    t = dt.CL_NAME[dtype]
    k_range = range(len(index_dtypes))
    params = [f"__global {t} *dst", "long dst_off", f"__global const {t} *src", "long src_off"]
    for k, d in enumerate(index_dtypes):
        params += [f"__global const {dt.CL_NAME[d]} *idx{k}", f"long idx{k}_off"]
    params.append("long n")
    for o in range(rank):
        params += [f"long n{o}", f"long ds{o}", f"long ss{o}"] + [f"long is{k}_{o}" for k in k_range]
    for k in k_range:
        params += [f"long m{k}", f"long da{k}", f"long sa{k}"]
    body = ["long g = (long)get_global_id(0);", "if (g >= n) return;", "long d = dst_off, s = src_off;"]
    body += [f"long i{k} = idx{k}_off;" for k in k_range]
    for o in reversed(range(rank)):
        walk = "".join(f" i{k} += c * is{k}_{o};" for k in k_range)
        body.append(f"{{ long c = g % n{o}; g /= n{o}; d += c * ds{o}; s += c * ss{o};{walk} }}")
    for k in k_range:
        body.append(f"{{ long v = (long)idx{k}[i{k}]; if (v < 0) v += m{k}; v = clamp(v, 0L, m{k} - 1);"
                    f" d += v * da{k}; s += v * sa{k}; }}")
    body.append("dst[d] = src[s];")
    return f"__kernel void {name}(" + ", ".join(params) + ") {\n  " + "\n  ".join(body) + "\n}\n"


def _elements(a: Any) -> tuple[int, tuple[int, ...]]:
    """A pyopencl array's offset and strides in elements."""
    size = a.dtype.itemsize
    return a.offset // size, tuple(s // size for s in a.strides)


def move_arguments(inputs, out, *, scatter, region_map, adv, b_map, region) -> tuple[int, list]:
    """The work-items and arguments of a gather (`out = y[indices]`) or a scatter (`out.y
    [indices] = value`, once `out` holds the old values). `inputs` and `out` are
    pyopencl arrays; inputs are (y, *indices) or (old, value, *indices). `region` is the
    selected region's (shape, strides, offset) in the output for a scatter; a gather
    reads it from its first input."""
    if scatter:  # walk the value; write through the region of the output
        _, src, *indices = inputs
        region_shape, region_strides, dst_off = region
        src_off, src_walk = _elements(src)
        dst_walk = [region_strides[r] if r >= 0 else 0 for r in region_map]
        dst_adv = [region_strides[a] for a in adv]
        src_adv = [0] * len(adv)
        sizes = [region_shape[a] for a in adv]
        it_shape = src.shape
    else:  # walk the output; read through the region (the first input)
        src, *indices = inputs
        src_off, y_strides = _elements(src)
        dst_off, dst_walk = _elements(out)
        src_walk = [y_strides[r] if r >= 0 else 0 for r in region_map]
        dst_adv = [0] * len(adv)
        src_adv = [y_strides[a] for a in adv]
        sizes = [src.shape[a] for a in adv]
        it_shape = out.shape
    n = int(np.prod(it_shape, dtype=np.int64))
    if n == 0:
        return 0, []
    i64 = np.int64
    args: list[Any] = [out.base_data, i64(dst_off), src.base_data, i64(src_off)]
    index_strides = []
    for t in indices:
        off, st = _elements(t)
        args += [t.base_data, i64(off)]
        index_strides.append(st)
    args.append(i64(n))
    for o, size in enumerate(it_shape):
        args += [i64(size), i64(dst_walk[o]), i64(src_walk[o])]
        args += [i64(st[b_map[o]] if b_map[o] >= 0 else 0) for st in index_strides]
    for k in range(len(adv)):
        args += [i64(sizes[k]), i64(dst_adv[k]), i64(src_adv[k])]
    return n, args
