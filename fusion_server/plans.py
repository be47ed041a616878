"""The plan store: how the fusers cut a sequence of ops, remembered in relative form.

Users run the same graph again and again (a training step, a request handler, a
simulation tick). The first time, the fusers explore: every op is offered to each of
them and the best block wins. The decision is stored under the block's ops in relative
form, followed by the op (or the flush) that ended the block:

- tensor ids are renumbered: a value computed in the block by the position of its op,
  a tensor from outside by order of first use (with its dtype, its layout class and
  whether it is still being computed);
- sizes are renumbered by first appearance (0 and 1 stay, as broadcasting needs them);
- scalar values are replaced by their dtypes.

The next time a stream sees the same sequence, with other ids, other scalar values and
other sizes of the same pattern, it follows the store op by op without offering anything
to the fusers, and when the ending op arrives it runs the stored decision. A sequence
that stops matching half-way is offered to the fusers from its start, as if the store
were empty, and what they decide is stored too.

A decision depends on something the relative form leaves out in one case: which values
are still alive decides how many a block must write, and so whether it fits the binding
limit. A replayed element-wise plan checks its bindings before it changes anything and
raises PlanRejected when they do not fit; the stream then explores instead. Other fusers
are offered the block's ops again and check them as when exploring; when one refuses,
the stream explores too. Either way that one-off decision is not stored.
"""

from __future__ import annotations

from typing import NamedTuple

from .handles import PENDING
from .ir import ConcatOp, ElementwiseOp, MatmulOp, MoveOp, OperationIr, ReduceOp, ScanOp, SearchOp, SortOp

# What ended a block when no op did: a flush (a read, a sync, a thread's end).
FLUSH = ("flush",)
# The store forgets everything when it grows past this many nodes (work that never
# recurs would otherwise grow it without bound).
MAX_NODES = 50_000  # (about 30 MB of trie)


class PlanRejected(Exception):  # noqa: N818  (a signal, not an error)
    """Raised by a replayed plan, before it changes anything, when it does not fit now."""


class Decision(NamedTuple):
    """How a stored sequence was cut: the first `count` ops, by fuser number `fuser`
    (its place in the stream's fuser list; -1: the op runs alone), and why it closed."""

    fuser: int
    count: int
    reason: str


class PlanNode:
    """One step of a stored sequence: the ops that may follow, or the decision to run."""

    __slots__ = ("children", "decision", "cache")

    def __init__(self) -> None:
        self.children: dict[tuple, PlanNode] = {}
        self.decision: Decision | None = None
        # What the plan that runs here may keep between runs (built kernels, say).
        self.cache: dict = {}


class PlanStore:
    """A trie of op signatures; the nodes at the ends of sequences hold decisions."""

    def __init__(self) -> None:
        self.root = PlanNode()
        self.nodes = 1
        self.stored = 0

    def store(self, path: list[tuple], decision: Decision) -> None:
        """Remember `decision` for the sequence `path` (block ops, then what ended it)."""
        if self.nodes + len(path) > MAX_NODES:
            self.root = PlanNode()  # the cursors of streams keep their old nodes alive
            self.nodes = 1
        node = self.root
        for sig in path:
            child = node.children.get(sig)
            if child is None:
                child = node.children[sig] = PlanNode()
                self.nodes += 1
            node = child
        if node.decision is None:  # the first decision stays: replays of it stay stable
            node.decision = decision
            self.stored += 1


class BlockSigner:
    """Signatures of a block's ops in relative form (see the module docstring)."""

    __slots__ = ("entries", "refs", "dims", "shapes", "count", "inputs")

    def __init__(self, entries: dict) -> None:
        self.entries = entries
        self.refs: dict[int, int] = {}  # tensor id -> op position (>= 0) or -1 - input number
        self.dims: dict[int, int] = {}  # size -> its symbol (-2, -3, ...)
        self.shapes: dict[tuple[int, ...], tuple[int, ...]] = {}
        self.count = 0
        self.inputs = 0

    def shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """The shape's sizes as symbols, then its number of elements as one (fusers
        compare element counts of different shapes, a flat reshape for one)."""
        out = self.shapes.get(shape)
        if out is None:
            dims = self.dims
            symbols = []
            total = 1
            for d in shape:
                total *= d
                symbols.append(d if d <= 1 else dims.get(d) or dims.setdefault(d, -2 - len(dims)))
            symbols.append(total if total <= 1 else dims.get(total) or dims.setdefault(total, -2 - len(dims)))
            out = self.shapes[shape] = tuple(symbols)
        return out

    def _ref(self, tid: int):
        ref = self.refs.get(tid)
        if ref is not None:
            return ref
        # First use of a tensor from outside the block: what the fusers look at.
        e = self.entries[tid]
        self.refs[tid] = -1 - self.inputs
        self.inputs += 1
        pending = e.storage.status == PENDING
        if pending:
            # Rare (a view of a value computed in this sequence): found by a scan, so that
            # signing an op keeps no map of storages.
            entries = self.entries
            for tid, position in self.refs.items():
                if type(position) is int and position >= 0:
                    made = entries.get(tid)
                    if made is not None and made.storage is e.storage:
                        return ("view of", position, e.ir.dtype, self.shape(e.ir.shape), e.contiguous)
        return (e.ir.dtype, self.shape(e.ir.shape), e.contiguous, pending)

    def sign(self, op: OperationIr) -> tuple | None:
        """The op's signature; None for an op the store does not follow (a custom kernel)."""
        kind = type(op)
        if kind is ElementwiseOp:  # (the hot path: the named tuples unpacked at once)
            name, inputs, compute, (oid, oshape, odtype), expr, params = op
            refs = self.refs
            args = []
            for operand in inputs:
                if type(operand) is int:
                    ref = refs.get(operand)
                    args.append(self._ref(operand) if ref is None else ref)
                else:
                    args.append(operand.dtype)
            shape = self.shapes.get(oshape) or self.shape(oshape)
            refs[oid] = count = self.count
            self.count = count + 1
            return (name, compute, odtype, shape, tuple(args), expr, params)
        if kind is ReduceOp:
            out = op.out
            sig = ("reduce", op.name, self._ref(op.input), op.axes, op.acc, out.dtype, self.shape(out.shape))
        elif kind is MatmulOp:
            out = op.out
            sig = ("matmul", self._ref(op.a), self._ref(op.b), op.compute, out.dtype, self.shape(out.shape))
        elif kind is MoveOp or kind is ConcatOp or kind is SearchOp or kind is ScanOp:
            # Ops that run alone: what later ops see of them is their output. (A gather's
            # maps and region are not part of it: no fuser's decision looks at them.)
            out = op.out
            extra = (op.name if kind is MoveOp else op.axis if kind is ConcatOp else ("searchsorted", op.side)
                     if kind is SearchOp else ("cumulative", op.name, op.acc))
            name = "search" if kind is SearchOp else "scan" if kind is ScanOp else op.name
            sig = (name, extra, tuple(self._ref(t) for t in op.inputs), out.dtype, self.shape(out.shape))
        elif kind is SortOp:
            outs = op.outputs
            sig = ("sort", op.name, self._ref(op.input), op.descending,
                   tuple((o.dtype, self.shape(o.shape)) for o in outs))
            for k, o in enumerate(outs):
                self.refs[o.id] = (self.count, k)  # (op, output): which output a reader reads
            self.count += 1
            return sig
        else:
            return None
        self.refs[out.id] = self.count
        self.count += 1
        return sig
