"""A ready-made custom fuser: claim a chain of named ops and run your own kernel for it.

    def run(queue, inputs, output, scalars):   # pyopencl arrays; enqueue, never wait
        my_kernel(queue, (output.size,), None, inputs[0].data, output.data)

    fuser = PatternFuser("stable_softplus", ["exp", "add", "log"], run,
                         accept=lambda k, op: k != 1 or one_scalar_equal_to(op, 1.0))
    clients.custom.register_fuser(lambda ctx: fuser.fresh())

The chain is matched from the start of a block: op k must read op k-1's output. When the
pattern completes, the fuser closes with score `weight * len(pattern)`, so it beats the
element-wise fuser unless that one covers `weight` times as many ops. If the chain's
intermediate values turn out to be needed elsewhere, the ops run as an ordinary fused
element-wise block instead (correct, just not special).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..context import BlockContext
from ..ir import ElementwiseOp, OperationIr, size_of
from .custom_kernel import array_of
from .elementwise import ElementwisePlan

RunFn = Callable[[Any, list, Any, list], None]


class PatternFuser:
    """Claims `pattern` (op names, each op consuming the previous op's output)."""

    def __init__(
        self,
        name: str,
        pattern: Sequence[str],
        run: RunFn,
        accept: Callable[[int, ElementwiseOp], bool] | None = None,
        weight: int = 4,
    ):
        self.name = name
        self.pattern = list(pattern)
        self.run = run
        self.accept = accept
        self.weight = weight
        self.reset()

    def fresh(self) -> PatternFuser:
        """A new fuser with the same settings (one per stream)."""
        return PatternFuser(self.name, self.pattern, self.run, self.accept, self.weight)

    def reset(self) -> None:
        self.ops: list[ElementwiseOp] = []
        self.closed = False
        self.close_reason = ""

    def offer(self, op: OperationIr, ctx: BlockContext) -> bool:
        if self.closed:
            return False
        k = len(self.ops)
        if k == len(self.pattern):
            return self._close(f"pattern {self.name} complete")
        ok = type(op) is ElementwiseOp and op.name == self.pattern[k]
        ok = ok and (k == 0 or self.ops[-1].out.id in op.inputs)
        ok = ok and (self.accept is None or self.accept(k, op))
        if not ok:
            return self._close(f"op does not continue pattern {self.name}")
        self.ops.append(op)
        return True

    def _close(self, reason: str) -> bool:
        self.closed = True
        self.close_reason = reason
        return False

    def score(self) -> int:
        return self.weight * len(self.ops) if len(self.ops) == len(self.pattern) else 0

    def finish(self, ctx: BlockContext) -> PatternPlan:
        return PatternPlan(self, list(self.ops), ctx.max_bindings)


class PatternPlan:
    """The user's kernel for a matched chain (an ordinary fused block if a value in it is needed)."""

    def __init__(self, fuser: PatternFuser, ops: list[ElementwiseOp], max_bindings: int):
        self.fuser = fuser
        self.ops = ops
        self.max_bindings = max_bindings

    def execute(self, ctx: BlockContext) -> None:
        entries = ctx.entries
        inner = {op.out.id for op in self.ops[:-1]}
        for op in self.ops[:-1]:
            e = entries[op.out.id]
            reads_inside = sum(1 for o in self.ops for i in o.inputs if i == op.out.id)
            if e.alive or e.readers > reads_inside or e.storage.refs > 1:
                # An intermediate is needed: the special kernel cannot provide it.
                ElementwisePlan(self.ops, self.max_bindings).execute(ctx)
                return
        inputs, scalars = [], []
        for op in self.ops:
            for operand in op.inputs:
                if type(operand) is not int:
                    scalars.append(operand.value)
                elif operand not in inner and entries[operand] not in inputs:
                    inputs.append(entries[operand])
        out = entries[self.ops[-1].out.id]
        if ctx.fail_if_inputs_failed(f"custom fuser {self.fuser.name!r}", inputs, [out]):
            return
        ctx.allocate(out.storage)
        ctx.enqueue(self.fuser.run, [array_of(ctx, e) for e in inputs], array_of(ctx, out), scalars)
        ctx.record_launch("custom-fuser", [op.name for op in self.ops], len(inputs) + 1 + len(scalars),
                           self.fuser.name, size_of(out.ir.shape))
        ctx.mark_ready([out.storage])
