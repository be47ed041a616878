"""The fuser protocol (after Burn's OptimizationBuilder) and the plan it produces.

A stream offers its queued ops, in order, to each of its fusers. A fuser accepts an op
(it stays open) or refuses it (it closes and sees nothing more until `reset`). When every
fuser is closed, the one with the best `score` turns its accepted ops, a prefix of the
queue, into a `Plan` with `finish`; the plan runs and the rest of the queue is offered
again. An op that no fuser takes runs alone.
"""

from __future__ import annotations

from typing import Protocol

from ..context import BlockContext, Plan
from ..ir import ElementwiseOp, OperationIr

__all__ = ["Fuser", "GuardedFuser", "LimitedFuser", "LonePlan", "Plan", "uses_flat_index"]


class Fuser(Protocol):
    """A builder that claims ops; see the module docstring for the protocol."""

    name: str
    closed: bool
    close_reason: str

    def offer(self, op: OperationIr, ctx: BlockContext) -> bool:
        """Accept `op` (True) or close (False). Called with the server lock held."""

    def score(self) -> int:
        """How many queued ops `finish` covers; 0 when it cannot produce a plan."""

    def finish(self, ctx: BlockContext) -> Plan:
        """A plan for the accepted ops."""

    def reset(self) -> None:
        """Forget everything; open again."""

    # Optional: `replay(ops, cache) -> Plan | None`, the plan for a block the plan store
    # recorded, without offering its ops again; for a fuser whose rules look at nothing
    # the store's signatures leave out. `cache` is the store node's dict, kept with it.


class LonePlan:
    """The plan of one op that no fuser takes: it runs alone, in its place in the stream."""

    def __init__(self, op: OperationIr):
        self.ops = [op]
        self.op = op


class LimitedFuser:
    """Shared state of the built-in fusers: the limits they respect and their status.

    Subclasses set their own block state in `reset` (calling this one) and close with
    `_close(reason)`, which also answers `offer` with False.
    """

    name = "fuser"

    def __init__(self, max_bindings: int, max_ops: int):
        self.max_bindings = max_bindings
        self.max_ops = max_ops
        self.reset()

    def reset(self) -> None:
        self.closed = False
        self.close_reason = ""

    def _close(self, reason: str) -> bool:
        self.closed = True
        self.close_reason = reason
        return False


class GuardedFuser:
    """A custom fuser behind a guard. An exception from its `offer` or `score` closes it
    for the block (it takes nothing; the other fusers carry on), one from `finish` is
    raised once and leaves it out of every later block of its stream: a broken fuser
    never makes a stream unusable. KeyboardInterrupt and the like close it and pass."""

    def __init__(self, inner: Fuser):
        self.inner = inner
        self.name = getattr(inner, "name", type(inner).__name__)
        self.broken = ""  # why it is left out for good
        self.reason = ""  # why it closed in this block, when it raised

    @property
    def closed(self) -> bool:
        return bool(self.broken or self.reason) or self.inner.closed

    @closed.setter
    def closed(self, value: bool) -> None:
        self.inner.closed = value

    @property
    def close_reason(self) -> str:
        return self.broken or self.reason or self.inner.close_reason

    @close_reason.setter
    def close_reason(self, value: str) -> None:
        self.inner.close_reason = value

    def offer(self, op: OperationIr, ctx: BlockContext) -> bool:
        if self.closed:
            return False
        try:
            return bool(self.inner.offer(op, ctx))
        except BaseException as exc:
            self.reason = f"fuser {self.name} raised {exc!r}"
            if not isinstance(exc, Exception):
                raise
            return False

    def score(self) -> int:
        if self.broken or self.reason:
            return 0
        try:
            return int(self.inner.score())
        except Exception as exc:  # noqa: BLE001 (a custom fuser's bug: it takes nothing)
            self.reason = f"fuser {self.name} raised {exc!r}"
            return 0

    def finish(self, ctx: BlockContext) -> Plan:
        try:
            return self.inner.finish(ctx)
        except BaseException as exc:
            self.broken = f"fuser {self.name} raised {exc!r} in finish(); left out since"
            raise

    def reset(self) -> None:
        self.reason = ""
        try:
            self.inner.reset()
        except Exception as exc:  # noqa: BLE001
            self.broken = f"fuser {self.name} raised {exc!r} in reset(); left out since"


def uses_flat_index(op: ElementwiseOp) -> bool:
    """Whether `op` reads the element's flat index (`iota`: from `x[i] = v`, `eye`, `tril`).

    Only element-wise kernels have that index: a reduction kernel walks (output, reduced)
    positions and a matmul kernel output tiles, so such an op runs in an element-wise
    kernel before or after them.
    """
    return op.name == "iota"
