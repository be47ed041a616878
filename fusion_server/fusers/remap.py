"""Reads of a block value through a slice, a shift, a flip or a transpose, recomputed.

A view in another element order (`g[1:, :-1]`, `g.T`, `g[::-1]`) of a value `g`
computed in the same block reads element u of the view from element c(u) of `g`, and
for views made of slices, transposes, flips and broadcasts c is affine in u with no
carry between dimensions (see `view_map`). The ops `g` depends on inside the block (its
cone) are element-wise, so the kernel can compute them again at c(u): each input from
outside the block is read at a composed offset and composed strides (see
`composed_layout`), which are launch metadata like any other layout. The box blur
`(g[:-2, :-2] + g[1:-1, :-2] + ...) / 9` of `g = x ** 2.2` is then one kernel that
never writes `g`.

Recomputing costs the cone's work once per read; closing the block instead costs a
second kernel, the value written once and read back (`reads` times, mostly from cache).
The fuser recomputes while the work a read adds stays under a budget per device kind
(`RECOMPUTE_BUDGET`, chosen from the measurements written there). Over it, a value whose
views only shift it is staged in local memory (staging.py), else written and read back.
"""

from __future__ import annotations

from typing import NamedTuple

from ..codegen.layout import broadcast_strides
from ..handles import PENDING, Entry
from ..ir import ElementwiseOp, contiguous_strides, size_of

# What an op costs per element, in units of an add: calls into the device's math library
# cost more, pow (a log, a multiply and an exp with range fixes) most. PoCL 3.0 on a
# Zen 4 core (2^22 float32 elements, 16 per work-item): a copy 1.3 ms, exp 1.4 ms, pow
# 37.8 ms; on GPUs the ratio is smaller, but pow stays the dearest.
_OP_COST = {"pow": 16, "atan2": 8, "hypot": 4, "logaddexp": 8, "floor_divide": 4, "remainder": 4}
_CALL_COST = 4
_CALLS = {
    "exp", "expm1", "log", "log1p", "log2", "log10", "sqrt", "sin", "cos", "tan", "asin", "acos",
    "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh",
}

# The recompute work (cost units per output element, summed over the views of one value)
# up to which a block recomputes rather than writes the value and reads it back. Measured
# with `python -m benchmarks.stencils` (2048^2 float32 values; kernel times, recompute
# against write and read back):
# - PoCL 3.0, 2 Zen 4 cores: y - y.T (2 units) 11.1 against 12.3 ms, box blur (9 views)
#   of x * x (9) 2.96 against 3.49, the heat step (6 views of x * 0.5 + 0.25, 12) 4.05
#   against 5.28, box blur of exp(x) (36) 14.3 against 4.08, of x ** 2.2 (144) 323
#   against 38.1;
# - H200: y - y.T 0.043 against 0.056 ms, box blur of x * x 0.038 against 0.057, the
#   heat step 0.026 against 0.041, box blur of exp(x) 0.036 against 0.048, of x ** 2.2
#   0.188 against 0.062 (pow with an exponent argument is NVIDIA's dearest call too).
RECOMPUTE_BUDGET = {"GPU": 48, "CPU": 24}


class ViewMap(NamedTuple):
    """Where a view's elements sit in the value it views: view element u is value
    element `start + sum(u[e] * step of axis e along its value dimension)`."""

    start: tuple[int, ...]  # the value's coordinates of view element 0
    axes: tuple[tuple[int, int] | None, ...]  # per view dim: (value dim, step), None if it stays put


def view_map(view: Entry, shape: tuple[int, ...]) -> ViewMap | None:
    """How `view` (over the storage of a value of `shape`, C-contiguous from offset 0)
    maps onto the value's coordinates; None when some view dimension does not walk one
    value dimension within its bounds (a reshape folded into the view, say)."""
    vshape = view.ir.shape
    if 0 in vshape:
        return ViewMap((0,) * len(shape), (None,) * len(vshape))
    cs = contiguous_strides(shape)
    rem = view.offset
    start = []
    for d, n in enumerate(shape):
        c = rem // cs[d] if n > 1 else 0
        rem -= c * cs[d]
        start.append(c)
    if rem or any(c >= n for c, n in zip(start, shape)):
        return None
    axes: list[tuple[int, int] | None] = []
    lo, hi = list(start), list(start)
    for n, s in zip(vshape, view.strides):
        if n == 1 or s == 0:
            axes.append(None)
            continue
        for d, m in enumerate(shape):  # outermost first: the smallest step
            if m > 1 and s % cs[d] == 0:
                step = s // cs[d]
                axes.append((d, step))
                if step > 0:
                    hi[d] += (n - 1) * step
                else:
                    lo[d] += (n - 1) * step
                break
        else:
            return None
    if any(a < 0 or b >= m for a, b, m in zip(lo, hi, shape)):
        return None
    return ViewMap(tuple(start), tuple(axes))


def composed_layout(entry: Entry, op_shape: tuple[int, ...], vm: ViewMap) -> tuple[int, tuple[int, ...]]:
    """(offset, strides over the view's shape) that read `entry`, an input of a cone op of
    `op_shape`, at the value coordinates the view's elements map to."""
    bs = broadcast_strides(entry.ir.shape, entry.strides, op_shape)
    offset = entry.offset + sum(c * s for c, s in zip(vm.start, bs))
    strides = tuple(0 if ax is None else ax[1] * bs[ax[0]] for ax in vm.axes)
    return offset, strides


def op_cost(op: ElementwiseOp) -> int:
    if op.expr is not None:
        return _CALL_COST  # a custom expression: priced like a library call
    return _OP_COST.get(op.name) or (_CALL_COST if op.name in _CALLS else 1)


def cone_of(ops: list[ElementwiseOp], target: int, produced: dict[int, int]) -> tuple[int, ...]:
    """The positions of the block ops the value of `ops[target]` depends on, itself
    included, in block order (`produced`: value id -> position)."""
    cone: set[int] = set()
    todo = [target]
    while todo:
        j = todo.pop()
        if j not in cone:
            cone.add(j)
            todo.extend(k for operand in ops[j].inputs if type(operand) is int
                        and (k := produced.get(operand)) is not None)
    return tuple(sorted(cone))


def cone_cost(ops: list[ElementwiseOp], cone: tuple[int, ...]) -> int:
    """What computing the cone costs per element (see _OP_COST)."""
    return sum(op_cost(ops[j]) for j in cone)


def plan_remap(view: Entry, target: int, ops: list[ElementwiseOp], entries: dict) -> tuple[int, ...] | str:
    """The cone a read of `view`, a view of the value of `ops[target]`, recomputes, or
    why it cannot be recomputed (the reason a block closes)."""
    shape = ops[target].out.shape
    if view_map(view, shape) is None:
        return "reads a view of a value computed in this block that no slice or transpose makes"
    produced = {op.out.id: j for j, op in enumerate(ops[: target + 1])}
    cone = cone_of(ops, target, produced)
    for j in cone:
        op = ops[j]
        if op.out.shape != shape:
            return f"reads a view of a value that depends on a value of another shape ({op.name})"
        if op.name == "iota":
            return "reads a view of a value computed from the flat index (iota)"
        for operand in op.inputs:
            if type(operand) is int and operand not in produced:
                e = entries.get(operand)
                if e is None or e.storage.status == PENDING:
                    return "reads a view of a value that reads another view of a block value"
    return cone


def budget_of(ctx) -> int:
    """The recompute work per element (over all views of one value) that the block
    context's device accepts: the server's setting, else its kind's."""
    budget = ctx.recompute_budget
    if budget is None:
        budget = RECOMPUTE_BUDGET.get(ctx.info.kind, RECOMPUTE_BUDGET["CPU"])
    return budget


def value_target(view: Entry, ops: list[ElementwiseOp], entries: dict) -> int | None:
    """The position of the block op whose storage `view` reads (None if none)."""
    st = view.storage
    for j, op in enumerate(ops):
        e = entries.get(op.out.id)
        if e is not None and e.storage is st:
            return j
    return None


def size_runs(ops: list[ElementwiseOp]) -> int | None:
    """Where a block's ops change size, if they do: a block whose later ops read the
    earlier ones only through remapped views (a blur over a smaller shape than its
    input's) holds two sizes of ops, one-element values aside. None: one size."""
    first = None
    for j, op in enumerate(ops):
        n = size_of(op.out.shape)
        if n == 1:
            continue
        if first is None:
            first = n
        elif n != first:
            return j
    return None
