"""How a fused kernel reads each input: layout classes, dimension collapsing, metadata.

An input is read relative to the block's shape. Its layout class is part of the kernel's
specialization key; its offset and strides are runtime metadata, so a new size or a new
view of the same class reuses the compiled kernel.

Classes:
  contig    C-contiguous over the block's shape, offset 0: read at the flat index
  offset    C-contiguous, nonzero offset: read at offset + flat index
  scalar    every stride 0 (one element broadcast everywhere): read once
  strided1  general strides, last stride 1: vector loads along the last dimension
  strided0  general strides, last stride 0: one load splatted along the last dimension
  stridedm1 general strides, last stride -1 (a reversed row): vectors read backwards
  strided   anything else
"""

from __future__ import annotations

from ..ir import contiguous_strides


def broadcast_strides(
    shape: tuple[int, ...], strides: tuple[int, ...], out_shape: tuple[int, ...]
) -> tuple[int, ...]:
    """Strides that read a tensor of `shape` broadcast to `out_shape` (0 where it repeats)."""
    pad = len(out_shape) - len(shape)
    out = [0] * pad
    for n, s in zip(shape, strides):
        out.append(0 if n == 1 else s)
    return tuple(out)


def classify(out_shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> str:
    """The layout class of broadcast `strides` over `out_shape` (before collapsing)."""
    dims = [(n, s) for n, s in zip(out_shape, strides) if n != 1]
    if all(s == 0 for _, s in dims):
        return "scalar"
    contig = contiguous_strides(out_shape)
    if all(s == c for (n, s), c in zip(zip(out_shape, strides), contig) if n != 1):
        return "contig" if offset == 0 else "offset"
    return "strided"


def collapse(
    shape: tuple[int, ...], stride_sets: list[tuple[int, ...]]
) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    """Merge adjacent dimensions that every stride set walks contiguously; drop size-1 dims.

    Fewer dimensions means fewer divisions per element and shorter metadata.
    """
    keep = [d for d, n in enumerate(shape) if n != 1]
    if not keep:
        return (1,), [(0,) for _ in stride_sets]
    dims = [shape[keep[0]]]
    sets = [[s[keep[0]]] for s in stride_sets]
    for d in keep[1:]:
        n = shape[d]
        if all(st[-1] == s[d] * n for st, s in zip(sets, stride_sets)):
            dims[-1] *= n
            for st, s in zip(sets, stride_sets):
                st[-1] = s[d]
        else:
            dims.append(n)
            for st, s in zip(sets, stride_sets):
                st.append(s[d])
    return tuple(dims), [tuple(st) for st in sets]
