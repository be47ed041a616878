"""Operation descriptors: what a client sends to the server.

Descriptors are small immutable tuples. A tensor is named by its integer id; the server
keeps what it knows about each id (its buffer, layout and status) in `handles.py`.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Union

import numpy as np


class TensorIr(NamedTuple):
    """A tensor as the server sees it: an id, a shape and a dtype."""

    id: int
    shape: tuple[int, ...]
    dtype: np.dtype


class Scalar(NamedTuple):
    """A scalar operand: its value becomes a kernel argument, never part of the source."""

    value: np.generic
    dtype: np.dtype


class BitScalar(Scalar):
    """A Scalar whose equality and hash go by its bits: a zero (0.0 and -0.0 are equal
    values), a NaN (unequal to itself) or a complex value (a zero part's sign). What
    compares Scalars (the run cache's keys) then tells apart what a kernel would."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return type(other) is BitScalar and self.dtype == other.dtype and \
            self.value.tobytes() == other.value.tobytes()

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash((self.value.tobytes(), self.dtype))


def scalar(value: np.generic, dtype: np.dtype) -> Scalar:
    """The Scalar of `value` (a numpy scalar of `dtype`): a BitScalar where equal values
    may differ in bits."""
    if dtype.kind == "c" or not value or value != value:
        return BitScalar(value, dtype)
    return Scalar(value, dtype)


Operand = Union[int, Scalar]  # a tensor id or a scalar


class ElementwiseOp(NamedTuple):
    """`out = name(*inputs)`, computed in dtype `compute`, over out's shape.

    Inputs broadcast to out's shape. For a custom op, `name` is its registered name and
    `expr` its OpenCL C expression over `params` (the names of the operands, in order).
    """

    name: str
    inputs: tuple[Operand, ...]
    compute: np.dtype
    out: TensorIr
    expr: str | None = None
    params: tuple[str, ...] = ()


class ViewOp(NamedTuple):
    """`out` reads the buffer of `source` through another layout (elements, not bytes)."""

    source: int
    out: TensorIr
    strides: tuple[int, ...]
    offset: int


class CustomKernelOp(NamedTuple):
    """An opaque user kernel: `launch(queue, inputs, outputs, **params)` enqueues it."""

    name: str
    inputs: tuple[int, ...]
    outputs: tuple[TensorIr, ...]
    launch: Any
    params: tuple[tuple[str, Any], ...]


class ReduceOp(NamedTuple):
    """`out = name(input)` over `axes` (sum, prod, max, min, argmax, argmin).

    `acc` is the dtype the reduction accumulates in; `out` keeps size-1 dims or not,
    which does not change its (contiguous) layout.
    """

    name: str
    input: int
    axes: tuple[int, ...]
    acc: np.dtype
    out: TensorIr


class SortOp(NamedTuple):
    """Each row of `input` (its last dimension, rows in C order) sorted, stably.

    `name` is "sort" (outputs: the sorted values) or "argsort" (outputs: each sorted
    element's position in its row, int64). NaNs go last in both directions.
    """

    name: str
    input: int
    descending: bool
    outputs: tuple[TensorIr, ...]


class ScanOp(NamedTuple):
    """The cumulative `name` ("sum" or "prod") along the last axis of `inputs[0]`
    (C-ordered; of `out`'s dtype), accumulated in `acc`. `out`: the input's shape."""

    name: str
    acc: np.dtype
    inputs: tuple[int]
    out: TensorIr


class SearchOp(NamedTuple):
    """For each element of `inputs[1]`, the index in the sorted one-dimensional
    `inputs[0]` (both C-ordered, of one dtype) where it would be inserted: `side` "left"
    before equal elements, "right" after them. `out`: int64, inputs[1]'s shape. NaN
    counts as larger than every number (the sort puts it last)."""

    side: str
    inputs: tuple[int, int]
    out: TensorIr


class MatmulOp(NamedTuple):
    """`out = a @ b`: a is (..., M, K), b is (..., K, N), batch dims broadcast."""

    a: int
    b: int
    compute: np.dtype
    out: TensorIr


class MoveOp(NamedTuple):
    """An integer-array gather or scatter (see codegen/gather.py).

    gather: `out = src[indices]`, inputs (src, *indices), `src` being the region the
    indices select in. scatter: `out = old` with `value` written through the indices into
    `region` of it, inputs (old, value, *indices); `old` is one run of elements. The maps
    place the broadcast index shape among the region's dimensions (numpy's rules).
    `old_dies`: a scatter whose `old` nobody names after it (`x[key] = value` rebinds x's
    handle): its buffer may take the values in place (fusers/move.py). `fill`: a scatter
    of one value, (Scalar, the selection's shape), in place of a value tensor: inputs
    (old, *indices), and no launch to make the value first."""

    name: str  # "gather" or "scatter"
    inputs: tuple[int, ...]
    out: TensorIr
    region_map: tuple[int, ...]  # per iteration dim: the region dim it walks, or -1 (an index dim)
    adv: tuple[int, ...]  # the region dims the index arrays index
    b_map: tuple[int, ...]  # per iteration dim: the index shape's dim, or -1
    region: tuple | None = None  # scatter: the region's (shape, strides, offset) in `out`
    old_dies: bool = False
    fill: tuple[Scalar, tuple[int, ...]] | None = None


class ConcatOp(NamedTuple):
    """`out` = the inputs (C-ordered, of out's dtype) joined along `axis`."""

    inputs: tuple[int, ...]
    axis: int
    out: TensorIr

    @property
    def name(self) -> str:
        return "concat"


OperationIr = Union[ElementwiseOp, CustomKernelOp, ReduceOp, MatmulOp, SortOp, SearchOp, ScanOp, MoveOp, ConcatOp]


def tensor_inputs(op: OperationIr) -> tuple[int, ...]:
    """The ids of the tensors an op reads."""
    if type(op) is ElementwiseOp:
        return tuple([i for i in op.inputs if type(i) is int])
    if type(op) is ReduceOp or type(op) is SortOp:
        return (op.input,)
    if type(op) is MatmulOp:
        return (op.a, op.b)
    if type(op) is ViewOp:
        return (op.source,)
    return op.inputs


def outputs_of(op: OperationIr) -> tuple[TensorIr, ...]:
    return op.outputs if type(op) is CustomKernelOp or type(op) is SortOp else (op.out,)


_STRIDES: dict[tuple[int, ...], tuple[int, ...]] = {}


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """C-order strides, in elements."""
    out = _STRIDES.get(shape)
    if out is None:
        out = _compute_strides(shape)
        if len(_STRIDES) < 65536:
            _STRIDES[shape] = out
    return out


def _compute_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides = []
    step = 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def size_of(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
