"""The fuser protocol (after Burn's OptimizationBuilder) and the plan it produces.

A stream offers its queued ops, in order, to each of its fusers. A fuser accepts an op
(it stays open) or refuses it (it closes and sees nothing more until `reset`). When every
fuser is closed, the one with the best `score` turns its accepted ops, a prefix of the
queue, into a `Plan` with `finish`; the plan runs and the rest of the queue is offered
again. An op that no fuser takes runs alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ..ir import ElementwiseOp, OperationIr

if TYPE_CHECKING:
    from ..server import FusionServer


@runtime_checkable
class Plan(Protocol):
    """Executable work for a prefix of a stream's queue."""

    ops: list[OperationIr]

    def execute(self, server: FusionServer) -> None:
        """Enqueue the work (never wait). Called with the server lock held."""


class Fuser(Protocol):
    """A builder that claims ops; see the module docstring for the protocol."""

    name: str
    closed: bool
    close_reason: str

    def offer(self, op: OperationIr, server: FusionServer) -> bool:
        """Accept `op` (True) or close (False). Called with the server lock held."""

    def score(self) -> int:
        """How many queued ops `finish` covers; 0 when it cannot produce a plan."""

    def finish(self, server: FusionServer) -> Plan:
        """A plan for the accepted ops."""

    def reset(self) -> None:
        """Forget everything; open again."""


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


def uses_flat_index(op: ElementwiseOp) -> bool:
    """Whether `op` reads the element's flat index (`iota`: from `x[i] = v`, `eye`, `tril`).

    Only element-wise kernels have that index: a reduction kernel walks (output, reduced)
    positions and a matmul kernel output tiles, so such an op runs in an element-wise
    kernel before or after them.
    """
    return op.name == "iota"
