"""The stream, the plan store and the fusers' decisions, driven through a fake block
context: no OpenCL device or driver is needed (the suite also runs this file with no
OpenCL platform visible, see test_layers.py). Each plan the stream runs is recorded
with its ops and the reason its block was cut; "running" it marks its outputs written.
"""

from __future__ import annotations

import itertools
import os
from types import SimpleNamespace

import numpy as np
import pytest

from fusion_server.context import BlockContext
from fusion_server.fusers.base import LonePlan
from fusion_server.fusers.elementwise import ElementwiseFuser
from fusion_server.fusers.matmul import MatmulFuser
from fusion_server.fusers.reduce import ReduceFuser, ReducePlan
from fusion_server.fusers.values import liveness, needed_values
from fusion_server.handles import READY, HandleContainer, pending_entry
from fusion_server.ir import ElementwiseOp, MatmulOp, ReduceOp, Scalar, TensorIr, outputs_of, size_of, tensor_inputs
from fusion_server.plans import PlanStore
from fusion_server.runtime.widths import VectorWidths
from fusion_server.stream import Stream

F32 = np.dtype(np.float32)
_ids = itertools.count(1)


class _NoDevice:
    queue = None
    programs = None
    local_size = 64
    pool = SimpleNamespace(alloc=None, free=lambda buf, nbytes: None)

    def metadata_buffer(self, values):
        raise AssertionError("a fake context launches nothing")


class FakeContext(BlockContext):
    """A block context whose plans are recorded instead of executed."""

    def __init__(self, max_bindings: int = 32):
        info = SimpleNamespace(kind="CPU", compute_units=2)
        super().__init__(info, HandleContainer(lambda buf, nbytes: None), _NoDevice(), VectorWidths.uniform(4),
                         max_bindings, LonePlan, lambda: None)
        self.counters.update(dict.fromkeys(("plan_hits", "plan_misses", "explorations", "blocks",
                                            "failed_blocks", "kernels_launched"), 0))
        self.recorders = [SimpleNamespace(kernels=[])]  # so that the stream writes its notes
        self.ran: list[tuple[str, list[str], str]] = []  # (plan class, op names, note)

    def run_plan(self, plan, note: str = "", tape=None) -> None:
        self.ran.append((type(plan).__name__, [getattr(op, "name", "matmul") for op in plan.ops], note))
        self.mark_ready([self.entries[o.id].storage for op in plan.ops for o in outputs_of(op) if o.id in self.entries])
        self.counters["blocks"] += 1
        self.retire(plan.ops)

    # -- what the server does around a stream ---------------------------------------------
    def tensor(self, shape: tuple[int, ...], dtype=F32) -> int:
        """A computed tensor (READY) of `shape`."""
        ir = TensorIr(next(_ids), shape, np.dtype(dtype))
        self.handles.add(ir, self.handles.new_storage(size_of(shape) * ir.dtype.itemsize, READY))
        return ir.id

    def record(self, stream: Stream, op) -> None:
        """Register `op` as the server does: count its reads, make its pending outputs."""
        for t in tensor_inputs(op):
            self.entries[t].readers += 1
        for out in outputs_of(op):
            self.entries[out.id] = pending_entry(out, size_of(out.shape) * out.dtype.itemsize, stream.id)
        stream.register(op, self)

    def drop(self, tid: int) -> None:
        entry = self.entries[tid]
        entry.alive = False
        self.handles.maybe_release(entry)


def _out(shape, dtype=F32) -> TensorIr:
    return TensorIr(next(_ids), tuple(shape), np.dtype(dtype))


def _ew(name: str, *inputs, shape) -> ElementwiseOp:
    operands = tuple(i if type(i) is int else Scalar(np.float32(i), F32) for i in inputs)
    return ElementwiseOp(name, operands, F32, _out(shape))


def _stream(ctx: FakeContext, max_ops: int = 64, store: PlanStore | None = None) -> Stream:
    b = ctx.max_bindings
    return Stream(1, [ElementwiseFuser(b, max_ops), ReduceFuser(b, max_ops), MatmulFuser(b, max_ops)], store)


def _chain(ctx: FakeContext, s: Stream, x: int, length: int, shape) -> int:
    """`y = y * 1.5`, `length` times, as user code writes it: each earlier y is dropped."""
    y = x
    for _ in range(length):
        op = _ew("multiply", y, 1.5, shape=shape)
        ctx.record(s, op)
        if y != x:
            ctx.drop(y)
        y = op.out.id
    return y


def test_a_chain_is_one_block_run_at_the_flush():
    ctx = FakeContext()
    s = _stream(ctx)
    _chain(ctx, s, ctx.tensor((64,)), 10, (64,))
    assert ctx.ran == []  # nothing runs before the flush: every fuser is still open
    s.flush(ctx, "read")
    assert [(kind, len(names)) for kind, names, _ in ctx.ran] == [("ElementwisePlan", 10)]
    assert s.queue == []


def test_the_op_limit_cuts_blocks():
    ctx = FakeContext()
    s = _stream(ctx, max_ops=4)
    _chain(ctx, s, ctx.tensor((8,)), 10, (8,))
    s.flush(ctx, "read")
    assert [len(names) for _, names, _ in ctx.ran] == [4, 4, 2]
    assert "max ops per kernel (4) reached" in ctx.ran[0][2]


def test_the_binding_limit_cuts_blocks_and_every_block_fits():
    ctx = FakeContext(max_bindings=8)
    s = _stream(ctx)
    x = y = ctx.tensor((16,))
    for _ in range(12):  # each op reads a new input
        t = ctx.tensor((16,))
        op = _ew("add", y, t, shape=(16,))
        ctx.record(s, op)
        ctx.drop(t)
        if y != x:
            ctx.drop(y)
        y = op.out.id
    s.flush(ctx, "read")
    # A block of k ops binds n, k + 1 inputs and its last value. Offered a fifth op, the
    # fuser's bound counts 6 inputs, the value written so far (the fourth's, which the
    # fifth reads) and the fifth's: 9, over 8. So 4 ops per block.
    assert [len(names) for _, names, _ in ctx.ran] == [4, 4, 4]
    assert "binding limit (8) reached" in ctx.ran[0][2]


def test_a_shape_of_another_size_closes_the_block():
    ctx = FakeContext()
    s = _stream(ctx)
    _chain(ctx, s, ctx.tensor((4, 4)), 3, (4, 4))
    ctx.record(s, _ew("exp", ctx.tensor((8,)), shape=(8,)))
    s.flush(ctx, "read")
    assert [len(names) for _, names, _ in ctx.ran] == [3, 1]
    assert "differs in size" in ctx.ran[0][2]


def test_a_reduction_takes_its_prologue_and_epilogue():
    ctx = FakeContext()
    s = _stream(ctx)
    x = ctx.tensor((4, 8))
    pro = _ew("exp", x, shape=(4, 8))
    ctx.record(s, pro)
    red = ReduceOp("sum", pro.out.id, (1,), F32, _out((4,)))
    ctx.record(s, red)
    epi = _ew("add", red.out.id, 1.0, shape=(4,))
    ctx.record(s, epi)
    s.flush(ctx, "read")
    assert ctx.ran[0][:2] == ("ReducePlan", ["exp", "sum", "add"])
    assert len(ctx.ran) == 1


def test_a_matmul_takes_its_epilogue_and_an_unfusable_op_runs_alone():
    ctx = FakeContext()
    s = _stream(ctx)
    mm = MatmulOp(ctx.tensor((4, 3)), ctx.tensor((3, 5)), F32, _out((4, 5)))
    ctx.record(s, mm)
    relu = _ew("maximum", mm.out.id, 0.0, shape=(4, 5))
    ctx.record(s, relu)
    s.flush(ctx, "read")
    assert [kind for kind, _, _ in ctx.ran] == ["MatmulPlan"]
    assert ctx.ran[0][1] == ["matmul", "maximum"]


def test_the_plan_store_replays_a_recurring_block_without_exploring():
    ctx = FakeContext()
    store = PlanStore()
    for round_ in range(3):
        s = _stream(ctx, store=store)
        x = ctx.tensor((32,))
        y = _chain(ctx, s, x, 5, (32,))
        red = ReduceOp("max", y, (0,), F32, _out(()))
        ctx.record(s, red)
        s.flush(ctx, "read")
        if round_ == 0:
            first = [names for _, names, _ in ctx.ran]
            explored = ctx.counters["explorations"]
    replays = [names for _, names, note in ctx.ran[len(first):]]
    assert replays == first * 2
    assert ctx.counters["explorations"] == explored  # the later rounds explored nothing
    assert ctx.counters["plan_hits"] == 2 * len(first)
    assert all("(plan store)" in note for _, _, note in ctx.ran[len(first):])


def test_liveness_runs_only_what_a_written_value_needs():
    ctx = FakeContext()
    x = ctx.tensor((8,))
    a = _ew("exp", x, shape=(8,))
    b = _ew("sin", a.out.id, shape=(8,))  # nobody reads it and its handle is gone
    c = _ew("add", a.out.id, 1.0, shape=(8,))
    ops = [a, b, c]
    for op in ops:
        for t in tensor_inputs(op):
            ctx.entries[t].readers += 1
        ctx.entries[op.out.id] = pending_entry(op.out, 32, 1)
    ctx.entries[a.out.id].alive = False
    ctx.entries[b.out.id].alive = False
    needed = needed_values(ops, ctx.entries)
    assert needed == {2}  # only c is written
    assert liveness(ops, needed) == [True, False, True]  # b is not computed
    ctx.entries[b.out.id].alive = True
    assert needed_values(ops, ctx.entries) == {1, 2}


def test_a_reduction_fuser_scores_nothing_without_a_reduction():
    ctx = FakeContext()
    fuser = ReduceFuser(32, 64)
    op = _ew("exp", ctx.tensor((4,)), shape=(4,))
    ctx.entries[op.out.id] = pending_entry(op.out, 16, 1)
    assert fuser.offer(op, ctx)
    assert fuser.score() == 0  # a prologue alone is the element-wise fuser's block
    red = ReduceOp("sum", op.out.id, (0,), F32, _out(()))
    ctx.entries[red.out.id] = pending_entry(red.out, 4, 1)
    assert fuser.offer(red, ctx)
    assert fuser.score() == 2
    assert isinstance(fuser.finish(ctx), ReducePlan)


@pytest.mark.skipif(not os.environ.get("FUSION_EXPECT_NO_OPENCL"), reason="only where no OpenCL platform is visible")
def test_no_opencl_platform_is_visible_here():
    import pyopencl as cl

    with pytest.raises(cl.Error):
        cl.get_platforms()
