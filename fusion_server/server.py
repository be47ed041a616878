"""The fusion server of one device: handles, streams, fusers, kernels and launches.

Every method assumes that the caller holds the client's lock (see clients/client.py);
none of them waits for the device. Waiting happens in the client, after the release.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pyopencl as cl

from .codegen import elementwise as cg
from .codegen import expressions as ex
from .compiling import CompileJob, NeedsCompile
from .errors import FusionError, TensorFailedError, kept
from .fusers.base import Fuser, GuardedFuser, Plan
from .fusers.custom_kernel import CustomKernelPlan
from .fusers.elementwise import ElementwiseFuser, ElementwisePlan
from .fusers.matmul import MatmulFuser, MatmulPlan
from .fusers.reduce import ReduceFuser, ReducePlan
from .fusers.sort import SortPlan
from .handles import FAILED, PENDING, READY, HandleContainer, Storage, pending_entry, span_of
from .ir import (
    CustomKernelOp,
    ElementwiseOp,
    MatmulOp,
    OperationIr,
    ReduceOp,
    SortOp,
    TensorIr,
    ViewOp,
    outputs_of,
    size_of,
    tensor_inputs,
)
from .plans import PlanRejected, PlanStore
from .runtime import DeviceInfo, DeviceRuntime
from .runtime.programs import BuiltKernel
from .runtime.widths import VectorWidths
from .stream import Stream

log = logging.getLogger("fusion_server")

MODES = ("lazy", "eager")


@dataclass
class KernelRecord:
    """One launch, as `inspect()` shows it."""

    kind: str  # "elementwise", "custom", ...
    ops: list[str]  # names of the ops it computes
    bindings: int  # buffers + scalar and metadata arguments
    name: str
    items: int  # work-items launched
    event: cl.Event | None = None
    why: str = ""  # which fuser took the block, the competing scores, why the block closed
    fallback: str = ""  # set when the kernel is the scalar variant: why the vector build failed
    variant: str = ""  # how the kernel was generated: strategy, vector width (see variant_of)

    @property
    def device_seconds(self) -> float | None:
        """The kernel's run time on the device, once it has completed, with FUSION_PROFILE=1."""
        if self.event is None:
            return None
        try:
            return (self.event.profile.end - self.event.profile.start) * 1e-9
        except cl.Error:  # not profiled, or not finished
            return None


@dataclass
class Recorder:
    kernels: list[KernelRecord] = field(default_factory=list)

    def explain(self) -> str:
        """How the recorded work was cut into kernels, and why each block ended."""
        lines = []
        for k, rec in enumerate(self.kernels):
            lines.append(f"kernel {k}: {rec.kind} {rec.name}, {len(rec.ops)} ops ({', '.join(rec.ops)}), "
                         f"{rec.bindings} bindings")
            if rec.why:
                lines.append(f"    {rec.why}")
            if rec.fallback:
                lines.append(f"    built as scalar code: {rec.fallback}")
        return "\n".join(lines)


class _ThreadEndMark:
    """Lives in a thread's local storage; when the thread ends, names its stream."""

    __slots__ = ("inbox", "stream_id")

    def __init__(self, inbox: deque, stream_id: int):
        self.inbox = inbox
        self.stream_id = stream_id

    def __del__(self) -> None:
        self.inbox.append(self.stream_id)  # no lock: the next locked section flushes it


def variant_of(spec) -> str:
    """How a kernel was generated, in words, from the spec it was built from."""
    from .codegen import matmul as mg
    from .codegen import reduce as rg

    if isinstance(spec, cg.KernelSpec):
        return f"width {spec.width}"
    if isinstance(spec, rg.ReduceSpec):
        parts = f", {spec.width // spec.acc_width} accumulators" if spec.acc_width else ""
        return f"{spec.strategy}, width {spec.width}{parts}"
    if isinstance(spec, mg.MatmulSpec):
        if spec.strategy == "rows":
            return f"rows, {spec.vector_bytes}-byte vectors"
        return f"tiled, tile {spec.tile}"
    return ""


def _env_int(name: str) -> int | None:
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise FusionError(f"{name}={value!r} is not an integer") from None


class FusionServer:
    """Queues ops per stream, fuses them, and launches kernels on one device."""

    def __init__(
        self,
        info: DeviceInfo,
        mode: str | None = None,
        max_bindings: int | None = None,
        max_ops: int | None = None,
        widths: VectorWidths | None = None,
    ):
        self.info = info
        self.runtime = DeviceRuntime(info)
        if info.kind == "CPU" and not info.is_simulator:
            self.runtime.programs.options = (f"-D{ex.PLAIN_VECTORS}",)
        self.handles = HandleContainer(self.runtime.pool.free)
        # Ids of dropped tensors, pushed without the lock (Tensor.__del__). Registering does
        # not drain them; running a block, and every other locked call, does first.
        self.drops: deque = deque()  # ids, or refs with a `.tid` (see handle_refs)
        # Weak references to the client's handles, by tensor id: when a handle dies, its
        # ref's callback appends the ref to `drops`. Kept here until then.
        self.handle_refs: dict[int, object] = {}
        self.streams: dict[int, Stream] = {}
        self.mode = mode or os.environ.get("FUSION_MODE", "lazy").strip() or "lazy"
        if self.mode not in MODES:
            raise FusionError(f"FUSION_MODE={self.mode!r}: expected one of {MODES}")
        self.max_bindings = max_bindings or _env_int("FUSION_MAX_BINDINGS") or info.max_bindings
        if self.max_bindings < 6:
            raise FusionError(f"max bindings {self.max_bindings} is below 6, the most one op needs")
        self.max_ops = max_ops or _env_int("FUSION_MAX_OPS") or 64
        self.compile_under_lock = False  # True only for callers that cannot release it
        # None: per device ("group" on GPUs for long rows, else "loop"); tests force either.
        self.reduce_strategy: str | None = None
        self.matmul_strategy: str | None = None  # likewise: "tiled" (GPUs) or "rows" (CPUs)
        # Elements per work-item where layouts allow, per element size: what the device
        # qualified (see fusion_server/qualification), else what it prefers.
        self.widths = widths or VectorWidths.uniform(info.vector_width)
        # A kernel whose vector build fails is built again as scalar code before its block
        # fails (off while qualifying, where a failing vector build is the finding).
        self.build_fallback = True
        self.fuser_factories: list[Callable[[FusionServer], Fuser]] = []
        # Stored decisions of the fusers, per fuser configuration (see plans.py).
        self.plan_stores: dict[tuple, PlanStore] = {}
        self.plan_store_enabled = os.environ.get("FUSION_PLAN_STORE", "1").strip() != "0"
        self._thread_marks = threading.local()
        self.ended_streams: deque[int] = deque()  # filled by _ThreadEndMark, without the lock
        self.recorders: list[Recorder] = []
        self.block_note = ""  # set by the stream for the block being launched (inspect() only)
        self.in_flight: Plan | None = None  # the block being run, until its stream has dropped its ops
        self.running_ahead: dict[int, ReduceOp] = {}  # reductions run ahead of their stream's queue
        self.reductions: dict[tuple, int] = {}  # a reduction's signature -> the id of its latest result
        self.pinned: set[Storage] = set()  # storages whose buffers resolved arrays hold
        self.counters = {
            "ops_registered": 0,
            "kernels_launched": 0,
            "inplace_reuses": 0,
            "plan_hits": 0,
            "plan_misses": 0,
            "explorations": 0,
            "blocks": 0,
            "uploads": 0,
            "reads": 0,
            "failed_blocks": 0,
        }

    # -- streams ------------------------------------------------------------------
    def _make_fusers(self) -> list[Fuser]:
        ops = 1 if self.mode == "eager" else self.max_ops
        fusers: list[Fuser] = [ElementwiseFuser(self.max_bindings, ops)]
        if self.mode != "eager":
            fusers.append(ReduceFuser(self.max_bindings, ops))
            fusers.append(MatmulFuser(self.max_bindings, ops))
            fusers.extend(GuardedFuser(factory(self)) for factory in self.fuser_factories)
        return fusers

    def _single(self, op: OperationIr) -> Plan:
        if type(op) is ElementwiseOp:
            return ElementwisePlan([op], self.max_bindings)
        if type(op) is CustomKernelOp:
            return CustomKernelPlan(op)
        if type(op) is ReduceOp:
            return ReducePlan([], op, [], self.max_bindings)
        if type(op) is MatmulOp:
            return MatmulPlan(op, [])
        if type(op) is SortOp:
            return SortPlan(op)
        raise FusionError(f"no plan can run {type(op).__name__}")

    def _plan_store(self) -> PlanStore | None:
        """The store for streams made now: one per fuser configuration. Streams with custom
        fusers always explore: a custom fuser may decide on anything, scalar values say,
        which the relative form leaves out."""
        if self.fuser_factories or not self.plan_store_enabled:
            return None
        key = (self.mode, self.max_bindings, self.max_ops)
        store = self.plan_stores.get(key)
        if store is None:
            store = self.plan_stores[key] = PlanStore()
        return store

    def stream(self, stream_id: int) -> Stream:
        """The calling thread's stream (`stream_id` is its thread id)."""
        s = self.streams.get(stream_id)
        if s is None:
            s = self.streams[stream_id] = Stream(stream_id, self._make_fusers(), self._single, self._plan_store())
            if getattr(self._thread_marks, "mark", None) is None:
                self._thread_marks.mark = _ThreadEndMark(self.ended_streams, stream_id)
        return s

    def flush_ended_streams(self) -> None:
        """Run what threads that have ended left queued (their dead values are skipped)."""
        while self.ended_streams:
            self.flush_stream(self.ended_streams[0], "its thread ended")
            self.ended_streams.popleft()  # only once flushed (a flush may need a compile first)

    def add_fuser(self, factory: Callable[[FusionServer], Fuser]) -> None:
        """Offer every later block to a fuser made by `factory` too (streams are renewed)."""
        for sid in list(self.streams):
            self.flush_stream(sid, "fusers changed")
        self.fuser_factories.append(factory)
        self.streams.clear()

    # -- registering work -----------------------------------------------------------
    def register(self, stream_id: int, op: OperationIr) -> None:
        """Queue `op` on a stream; blocks run as the fusers close them."""
        handles = self.handles
        entries = handles.entries
        if type(op) is ElementwiseOp:  # the hot path, spelled out: a few operands, one output
            outs = (op.out,)
            reads = []
            for t in op.inputs:
                if type(t) is int:
                    reads.append(entries.get(t) or handles.get(t))
        else:
            outs = outputs_of(op)
            reads = [entries.get(t) or handles.get(t) for t in tensor_inputs(op)]
        if outs[0].id in entries:
            # Already queued (or run ahead): a compile interrupted it after that; carry on.
            ahead = self.running_ahead.get(outs[0].id)
            if ahead is not None:
                self._run_ahead(ahead)
            else:
                self.stream(stream_id).advance(self)
            return
        if type(op) is ReduceOp and self._same_reduction(op, reads):
            return
        # All inputs were found before anything changes.
        for entry in reads:
            st = entry.storage
            if st.status == PENDING and st.stream != stream_id:
                # Its writer waits in another thread's queue: run that queue first, so the
                # in-order device queue puts the write before this read. (A flush may stop
                # for a kernel build, and this op is then registered again from the start:
                # no reader may be counted before every flush is done.)
                self.flush_stream(st.stream, f"stream {stream_id} reads tensor {entry.ir.id}")
        for entry in reads:
            entry.readers += 1
        self.counters["ops_registered"] += 1
        for out in outs:  # a pending entry per output: the value a queued op will write
            handles.storages_live += 1
            nbytes = out.dtype.itemsize
            for d in out.shape:
                nbytes *= d
            entries[out.id] = pending_entry(out, nbytes, stream_id)
        stream = self.streams.get(stream_id) or self.stream(stream_id)
        if type(op) is ReduceOp and stream.queue and self.mode == "lazy" and size_of(op.out.shape) == 1 \
                and all(e.storage.status == READY for e in reads):
            # A full reduction of values already computed runs ahead of the open block, which
            # stays open: what is computed from its one value joins that block
            # (`(b - min(b)) / (max(b) - min(b))`: two reductions and one element-wise kernel).
            self._run_ahead(op)
            return
        stream.register(op, self)

    def _run_ahead(self, op: ReduceOp) -> None:
        self.running_ahead[op.out.id] = op  # (a build it needs makes the client register it again)
        if self.recorders:
            self.block_note = ("runs alone, ahead of the open block: a full reduction of computed values, "
                               "whose result the block can read")
        self.run_plan(self._single(op))
        del self.running_ahead[op.out.id]

    def _same_reduction(self, op: ReduceOp, reads: list) -> bool:
        """If the same reduction of the same tensor was computed before and still is, its
        result serves this one too (a view of it, no kernel): True."""
        key = (op.name, op.input, op.axes, op.acc, op.out.shape, op.out.dtype)
        done = self.reductions.get(key)
        entry = self.handles.entries.get(done) if done is not None else None
        if entry is None or entry.storage.status != READY or entry.storage.buffer is None:
            self.reductions[key] = op.out.id
            if len(self.reductions) > 4096:
                self.reductions.pop(next(iter(self.reductions)))
            return False
        self.counters["ops_registered"] += 1
        self.handles.add(op.out, entry.storage)
        return True

    def drain_drops(self) -> None:
        """Forget the tensors whose handles were dropped (ids pushed by Tensor.__del__)."""
        drops = self.drops
        entries = self.handles.entries
        release = self.handles.maybe_release
        refs = self.handle_refs
        while drops:  # handles.drop, inlined: this runs for every op's dead value
            tid = drops[0]
            if type(tid) is not int:
                # (a ref whose id was never set: its tensor died before its op was sent)
                tid = getattr(tid, "tid", None)
                refs.pop(tid, None)
            entry = entries.get(tid)
            if entry is not None and entry.alive:
                entry.alive = False
                if not entry.readers:  # (most dropped values still have a queued reader)
                    release(entry)
            drops.popleft()  # only once applied (applying twice is harmless): none is lost

    def upload(self, ir: TensorIr, host: np.ndarray) -> None:
        """A tensor holding a copy of `host` (C-contiguous, ir's dtype); never waits."""
        self.counters["uploads"] += 1
        storage = self.handles.new_storage(host.nbytes, READY)
        self.allocate(storage)
        self.handles.add(ir, storage)
        if host.nbytes:
            self.runtime.upload(storage.buffer, host)

    def view(self, op: ViewOp) -> None:
        """A tensor that reads `op.source`'s storage through another layout; no copy."""
        self.counters["ops_registered"] += 1
        src = self.handles.get(op.source)
        self.handles.add(op.out, src.storage, op.strides, op.offset)

    def adopt(self, ir: TensorIr, buffer: cl.Buffer, nbytes: int, strides, offset: int) -> None:
        """A tensor over a buffer the caller owns (never returned to the pool)."""
        storage = self.handles.new_storage(nbytes, READY)
        storage.buffer = buffer
        storage.owned = False  # the owner's buffer: ours to read, not to recycle
        self.handles.add(ir, storage, strides, offset)

    # -- running blocks ---------------------------------------------------------------
    def run_plan(self, plan: Plan) -> None:
        """Execute a plan, then retire its ops. NeedsCompile passes through untouched.

        Whatever the block raises fails only its outputs (invariant 6), KeyboardInterrupt
        and SystemExit from a launch function too: those are raised again once the block
        is retired, and the stream drops the block either way, so it never runs again."""
        if self.drops:  # which values are still alive decides what the block writes
            self.drain_drops()
        self.in_flight = plan  # until the stream has dropped its ops (see recover)
        try:
            plan.execute(self)
        except (NeedsCompile, PlanRejected):
            self.in_flight = None
            raise  # nothing has changed: the caller builds the kernel and resumes, or explores
        except BaseException as exc:  # whatever failed, only this block's outputs carry it
            log.debug("block failed: %r", exc)
            self._fail_block(plan, exc)
            self.counters["blocks"] += 1
            self.retire(plan.ops)
            if not isinstance(exc, Exception):
                raise  # an interrupt or an exit: acted on once, after the block is settled
            return
        self.counters["blocks"] += 1
        self.retire(plan.ops)

    def _fail_block(self, plan: Plan, exc: BaseException) -> None:
        """Fail every output of `plan` still to be written, with `exc` as the cause."""
        names = ", ".join(getattr(o, "name", "?") for o in plan.ops)
        if isinstance(exc, FusionError):
            err = exc
        elif isinstance(exc, Exception):
            err = TensorFailedError(f"block ({names}) failed: {exc}")
        else:
            err = TensorFailedError(f"block ({names}) was interrupted by {type(exc).__name__}")
        if err is not exc:
            err.__cause__ = kept(exc)  # (for an interrupt or an exit still on its way up: a copy)
        entries = self.handles.entries
        self.fail_storages([entries[o.id].storage for op in plan.ops for o in outputs_of(op)
                            if o.id in entries and entries[o.id].storage.status != READY], err)

    def recover(self, cause: BaseException) -> None:
        """Make the bookkeeping consistent again after `cause` interrupted a locked section
        at any point (a signal handler's exception lands between any two byte codes).

        The queues are the truth: the block in flight, if its stream still holds it, is
        dropped (it ran or failed, and never runs again), and what it had not written
        fails; every reader count is counted again from the queued ops; a value still to
        be written whose writer is in no queue fails; the streams explore their queues
        afresh; dead values nobody reads are released; buffers the pool handed out that no
        value holds go back to it. Safe to run again if it is itself interrupted."""
        entries = self.handles.entries
        plan = self.in_flight
        if plan is not None:
            for stream in self.streams.values():
                queue = stream.queue
                if len(queue) >= len(plan.ops) and all(a is b for a, b in zip(queue, plan.ops)):
                    stream.queue = queue[len(plan.ops):]
                    break
            self._fail_block(plan, cause)
            self.in_flight = None
        self.running_ahead.clear()  # (their outputs are written by no queue: they fail below)
        writers: dict[int, int] = {}
        readers: dict[int, int] = {}
        for sid, stream in self.streams.items():
            remaining = []
            for op in stream.queue:
                ins = tensor_inputs(op)
                outs = outputs_of(op)
                if any(t not in entries for t in ins) or any(o.id not in entries for o in outs):
                    continue  # half registered: its writer below fails what it would have written
                remaining.append(op)
                for o in outs:
                    writers[o.id] = sid
                for t in ins:
                    readers[t] = readers.get(t, 0) + 1
            stream.queue = remaining
            stream.restart(self)
        err = TensorFailedError(f"interrupted by {type(cause).__name__} before this value was computed")
        err.__cause__ = kept(cause)
        orphans = []
        for tid, entry in entries.items():
            entry.readers = readers.get(tid, 0)
            st = entry.storage
            if st.status == PENDING:
                if st.writer in writers:
                    st.stream = writers[st.writer]
                else:
                    orphans.append(st)
        if orphans:
            self.fail_storages(orphans, err)
        for entry in list(entries.values()):
            if not entry.alive and not entry.readers:
                self.handles.maybe_release(entry)
        held = {id(e.storage.buffer) for e in entries.values() if e.storage.buffer is not None}
        held |= {id(st.buffer) for st in self.pinned if st.buffer is not None}
        self.runtime.pool.reconcile(held)

    def retire(self, ops: list[OperationIr]) -> None:
        """The ops ran (or failed): drop their reads and settle what they produced."""
        entries = self.handles.entries
        release = self.handles.maybe_release
        for op in ops:
            elementwise = type(op) is ElementwiseOp
            for tid in op.inputs if elementwise else tensor_inputs(op):
                if type(tid) is int:
                    e = entries.get(tid)
                    if e is not None:
                        e.readers -= 1
                        if not e.alive and not e.readers:
                            release(e)
            for out in (op.out,) if elementwise else outputs_of(op):
                e = entries.get(out.id)
                if e is None:
                    continue
                st = e.storage
                if st.status == PENDING:
                    st.status = READY  # a value nobody needed: it never got a buffer
                st.stream = None
                if not e.alive and not e.readers:
                    release(e)

    def fail_storages(self, storages: list[Storage], error: BaseException) -> None:
        """Mark `storages` failed with `error`. A failed value holds its error, not a
        buffer: one it had goes back to the pool now (the in-order queue runs any kernel
        already enqueued into it before a later user of the buffer)."""
        self.counters["failed_blocks"] += 1
        error = kept(error)  # (no traceback: see errors.kept)
        free = self.runtime.pool.free
        for st in storages:
            st.status = FAILED
            st.error = error
            st.stream = None
            buf = st.buffer
            if buf is not None and st.owned and not st.pins:
                st.buffer = None
                free(buf, st.nbytes)

    def mark_ready(self, storages: list[Storage]) -> None:
        for st in storages:
            st.status = READY
            st.stream = None

    def allocate(self, storage: Storage) -> cl.Buffer:
        storage.buffer = self.runtime.pool.alloc(storage.nbytes)
        return storage.buffer

    def kernel_for(self, spec: cg.KernelSpec) -> cl.Kernel:
        """The built kernel for `spec`; NeedsCompile when it must be built first.

        Building takes long (150 ms on PoCL), so it happens outside the server lock: the
        client catches NeedsCompile, releases the lock, builds, and resumes. With
        `compile_under_lock` the build happens right here instead. The kernel may be
        the scalar variant of `spec` (see `built_for`).
        """
        return self.built_for(spec).kernel

    def built_for(self, spec) -> BuiltKernel:
        """`kernel_for`, with the spec that was actually built: `spec` itself, or its
        scalar variant when the vector build failed (the plan launches by that one)."""
        programs = self.runtime.programs
        built = programs.get(spec)
        if built is None:
            failure = programs.failed.get(spec)
            if failure is not None:
                raise failure
            job = CompileJob(programs, spec, self.build_fallback)
            if not self.compile_under_lock:
                raise NeedsCompile(job)
            job.run()
            return self.built_for(spec)
        return built

    def launch(
        self, kernel: cl.Kernel, items: int, args: list, kind: str, ops: list[str], bindings: int,
        heavy: bool = False,
    ) -> None:
        """Enqueue `kernel` over `items` work-items (padded to whole work-groups).

        `heavy`: each work-item does much work (a whole row of a reduction). On CPUs,
        work-groups then shrink until every core gets several: a CPU driver runs a
        work-group on one core, and 1024 rows in one group of 1024 left the other idle
        (a row reduction over 1024 x 1024 read at 0.28 of the bandwidth limit, then 0.50)."""
        local = self.group_size(items, heavy)
        self.launch_grid(kernel, (items + local - 1) // local * local, local, args, kind, ops, bindings, items)

    def group_size(self, items: int, heavy: bool = False) -> int:
        """The work-group size of a launch of `items` work-items (see `launch`)."""
        local = self.runtime.local_size
        if heavy and self.info.kind == "CPU":
            while local > 1 and items < 4 * self.info.compute_units * local:
                local //= 2
        return local

    def launch_grid(
        self, kernel: cl.Kernel, global_size: int, local: int, args: list, kind: str, ops: list[str],
        bindings: int, items: int | None = None,
    ) -> None:
        """Enqueue `kernel` with an explicit global and work-group size."""
        event = kernel(self.runtime.queue, (global_size,), (local,), *args)
        self.note_launch(kind, ops, bindings, kernel.function_name, items or global_size, event)

    def note_launch(
        self, kind: str, ops: list[str], bindings: int, name: str, items: int, event: cl.Event | None = None
    ) -> None:
        self.counters["kernels_launched"] += 1
        if self.recorders:
            programs = self.runtime.programs
            record = KernelRecord(kind, ops, bindings, name, items, event, self.block_note,
                                  programs.fallbacks.get(name, ""), variant_of(programs.specs.get(name)))
            for rec in self.recorders:
                rec.kernels.append(record)

    # -- flushing and reading ----------------------------------------------------------
    def flush_stream(self, stream_id: int | None, why: str = "flush") -> None:
        s = self.streams.get(stream_id)
        if s is not None:
            s.flush(self, why)
            if not s.queue:
                del self.streams[stream_id]

    def flush_all(self, why: str = "flush") -> None:
        for sid in list(self.streams):
            self.flush_stream(sid, why)

    def ensure_written(self, tid: int) -> None:
        """Run the queued work that writes `tid`; raise if it failed."""
        entry = self.handles.get(tid)
        st = entry.storage
        if st.status == PENDING:
            self.flush_stream(st.stream, f"tensor {tid} is read")
        if st.status == FAILED:
            err = st.error
            # Name the root cause, not the block-level wrapper around it.
            cause = err.__cause__ if isinstance(err, TensorFailedError) and err.__cause__ else err
            raise TensorFailedError(f"tensor {tid} could not be computed: {err}", getattr(err, "root", None),
                                    getattr(err, "path", ())) from cause

    def read(self, tid: int) -> tuple[np.ndarray, cl.Event | None, Callable[[], np.ndarray]]:
        """Enqueue a copy of `tid` to the host: (host buffer, event, finish).

        Wait on the event with the lock released, then call `finish()` for the array.
        """
        self.ensure_written(tid)
        self.counters["reads"] += 1
        entry = self.handles.get(tid)
        shape, dtype = entry.ir.shape, entry.ir.dtype
        lo, hi = span_of(shape, entry.strides, entry.offset)
        host = np.empty(hi - lo, dtype)
        if hi == lo:
            return host, None, lambda: np.empty(shape, dtype)
        event = self.runtime.download(host, entry.storage.buffer, lo * dtype.itemsize)
        if entry.contiguous:
            return host, event, lambda: host.reshape(shape)
        strides = tuple(s * dtype.itemsize for s in entry.strides)
        start = entry.offset - lo

        def finish() -> np.ndarray:
            return np.lib.stride_tricks.as_strided(host[start:], shape, strides).copy()

        return host, event, finish

    def resolve(self, tid: int):
        """The entry of `tid`, written (or enqueued) and pinned: its buffer is not recycled
        until `unpin` is called for its storage, even after the tensor is dropped."""
        self.ensure_written(tid)
        entry = self.handles.get(tid)
        if entry.storage.buffer is None:  # size 0, or a value nobody else needed yet
            self.allocate(entry.storage)
        entry.storage.pins += 1
        self.pinned.add(entry.storage)
        return entry

    def unpin(self, storage: Storage) -> None:
        storage.pins -= 1
        if storage.pins <= 0:
            self.pinned.discard(storage)
        self.handles.release_if_unused(storage)

    def sync(self, stream_id: int) -> cl.Event:
        """Run this stream's queue; an event that completes after all enqueued work."""
        self.flush_stream(stream_id, "sync")
        return self.runtime.marker()

    def stats(self) -> dict:
        pool = self.runtime.pool
        progs = self.runtime.programs
        return {
            **self.counters,
            "compiles": progs.compiles,
            "build_fallbacks": len(progs.fallbacks),
            "compile_seconds": round(progs.compile_seconds, 4),
            "plans_stored": sum(store.stored for store in self.plan_stores.values()),
            "buffers_live": pool.live,
            "bytes_live": pool.live_bytes,
            "peak_bytes_live": pool.peak_live_bytes,
            "buffers_allocated": pool.allocations,
            "buffer_reuses": pool.reuses,
            "tensors_live": len(self.handles.entries),
            "pending_ops": sum(len(s.queue) for s in self.streams.values()),
            "mode": self.mode,
            "max_bindings": self.max_bindings,
            "device": self.info.label,
        }
