"""The fusion server of one device: handles, streams, fusers, kernels and launches.

Every method assumes that the caller holds the client's lock (see clients/client.py);
none of them waits for the device. Waiting happens in the client, after the release.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import repeat
from operator import is_

import numpy as np
import pyopencl as cl

from . import capture as cap
from .codegen import elementwise as cg
from .codegen import expressions as ex
from .compiling import trial_build
from .context import BlockContext, KernelRecord, Plan, variant_of  # noqa: F401 (KernelRecord, variant_of: public here too)
from .errors import FusionError, TensorFailedError, kept
from .fusers.base import Fuser, GuardedFuser
from .fusers.custom_kernel import CustomKernelPlan
from .fusers.elementwise import ElementwiseFuser, ElementwisePlan
from .fusers.matmul import MatmulFuser, MatmulPlan
from .fusers.move import ConcatPlan, MovePlan
from .fusers.reduce import ReduceFuser, ReducePlan
from .fusers.scan import ScanFuser, ScanPlan
from .fusers.search import SearchPlan
from .fusers.sort import SortPlan
from .handles import (
    FAILED,
    NBYTES_OF,
    PENDING,
    READY,
    STATUS_OF,
    STORAGE_OF,
    Entry,
    HandleContainer,
    PinLease,
    Storage,
    laid_out,
    pending_entry,
    span_of,
)
from .ir import (
    ConcatOp,
    CustomKernelOp,
    ElementwiseOp,
    MatmulOp,
    MoveOp,
    OperationIr,
    ReduceOp,
    ScanOp,
    SearchOp,
    SortOp,
    TensorIr,
    ViewOp,
    outputs_of,
    size_of,
    tensor_inputs,
)
from .plans import PlanStore
from .runs import MAX_CAPTURE_TRIES, Run, RunCache, referred_beyond, written
from .runtime import DeviceInfo, DeviceRuntime
from .runtime.widths import VectorWidths
from .stream import Stream

log = logging.getLogger("fusion_server")

MODES = ("lazy", "eager")
MAX_EARLY_DROPS = 100_000
# Batches a stream registers in a row that are no known run before only one in this many is
# looked up in the run cache (see find_run).
BATCH_BACKOFF = 8


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


class _OnContext:
    """A server setting kept on its block context, where fusers and plans read it."""

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, server, owner=None):
        return self if server is None else getattr(server.ctx, self.name)

    def __set__(self, server, value) -> None:
        setattr(server.ctx, self.name, value)


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

    widths = _OnContext()
    pack_lanes = _OnContext()
    max_bindings = _OnContext()
    reduce_strategy = _OnContext()
    matmul_strategy = _OnContext()
    scan_strategy = _OnContext()
    recompute_budget = _OnContext()
    stencil_staging = _OnContext()
    compile_under_lock = _OnContext()
    build_fallback = _OnContext()
    in_flight = _OnContext()

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
            fast_pow = (f"-D{ex.POW_VIA_DOUBLE}",) if info.fp64 else ()
            self.runtime.programs.options = (f"-D{ex.PLAIN_VECTORS}", *fast_pow)
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
        bindings = max_bindings or _env_int("FUSION_MAX_BINDINGS") or info.max_bindings
        if bindings < 6:
            raise FusionError(f"max bindings {bindings} is below 6, the most one op needs")
        # Elements per work-item where layouts allow, per element size: what the device
        # qualified (see fusion_server/qualification), else what it prefers.
        widths = widths or VectorWidths.uniform(info.vector_width)
        # What streams, fusers and plans see of this server (the settings below live there).
        self.ctx = BlockContext(info, self.handles, self.runtime, widths, bindings, self._single, self.drain_drops)
        self.ctx.pack_lanes = info.packs_work_items and not os.environ.get("FUSION_VECTOR_WIDTH", "").strip()
        self.max_ops = max_ops or _env_int("FUSION_MAX_OPS") or 64
        self.counters = self.ctx.counters  # (the context's dict and list themselves: read on hot paths)
        self.recorders = self.ctx.recorders
        self.fuser_factories: list[Callable[[BlockContext], Fuser]] = []
        # Stored decisions of the fusers, per fuser configuration (see plans.py).
        self.plan_stores: dict[tuple, PlanStore] = {}
        self.plan_store_enabled = os.environ.get("FUSION_PLAN_STORE", "1").strip() != "0"
        # Recurring runs of a thread's ops, replayed as captures (runs.py).
        self.run_cache_enabled = os.environ.get("FUSION_RUN_CACHE", "1").strip() != "0"
        self.runs = RunCache()
        # Ids of a replayed run's values that died with it (never registered): their drops
        # are expected, not early (see drain_drops).
        self.gone: set[int] = set()
        self._thread_marks = threading.local()
        self.ended_streams: deque[int] = deque()  # filled by _ThreadEndMark, without the lock
        self.running_ahead: dict[int, ReduceOp] = {}  # reductions run ahead of their stream's queue
        self.reductions: dict[tuple, int] = {}  # a reduction's signature -> the id of its latest result
        self.pinned: set[Storage] = self.ctx.pinned  # storages with pins (each a lease: see `lease`)
        self.unpin_inbox: deque[PinLease] = deque()  # leases whose holders were collected, pushed without the lock
        self.leases: dict[int, PinLease] = {}  # every pin, until it ends (see `lease`)
        # Ids whose handles died before their op reached the server (see drain_drops).
        self.early_drops: set[int] = set()
        # Per stream, the last output id registered: an op seen again (its caller was
        # interrupted before it knew) is not registered twice, even once it has run.
        self.registered_upto: dict[int, int] = {}
        # The run cache's replay making its entries now: ((stream id, the run's last id), the
        # values it writes); see recover.
        self.replaying: tuple | None = None
        # Per stream, batches in a row that were no run the cache knew (see find_run).
        self.batch_misses: dict[int, int] = {}
        self.tapes: dict[int, cap.Tape] = {}  # stream id -> its capture in progress (clients.jit)
        # Counts changes of what streams are made with: a capture made before one is void.
        self.generation = 0
        self.counters.update({
            "ops_registered": 0,
            "kernels_launched": 0,
            "inplace_reuses": 0,
            "plan_hits": 0,
            "plan_misses": 0,
            "explorations": 0,
            "blocks": 0,
            "uploads": 0,
            "reads": 0,
            "reads_in_place": 0,  # reads taken from the host's view of the buffer (runtime.host_span)
            "reads_staged": 0,  # reads copied into pinned memory (runtime.staging, accelerators)
            "failed_blocks": 0,
            "jit_traces": 0,
            "jit_replays": 0,
            "run_captures": 0,
            "run_replays": 0,
        })

    # -- streams ------------------------------------------------------------------
    def _make_fusers(self) -> list[Fuser]:
        ops = 1 if self.mode == "eager" else self.max_ops
        fusers: list[Fuser] = [ElementwiseFuser(self.max_bindings, ops)]
        if self.mode != "eager":
            fusers.append(ReduceFuser(self.max_bindings, ops))
            fusers.append(MatmulFuser(self.max_bindings, ops))
            fusers.append(ScanFuser(self.max_bindings, ops))
            fusers.extend(GuardedFuser(factory(self.ctx)) for factory in self.fuser_factories)
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
        if type(op) is SearchOp:
            return SearchPlan(op)
        if type(op) is ScanOp:
            return ScanPlan(op)
        if type(op) is MoveOp:
            return MovePlan(op)
        if type(op) is ConcatOp:
            return ConcatPlan(op)
        raise FusionError(f"no plan can run {type(op).__name__}")

    def _plan_store(self) -> PlanStore | None:
        """The store for streams made now: one per fuser configuration. Streams with custom
        fusers always explore: a custom fuser may decide on anything, scalar values say,
        which the relative form leaves out."""
        if self.fuser_factories or not self.plan_store_enabled:
            return None
        # (the scan strategy decides whether a scan takes the work before it: see ScanFuser)
        key = (self.mode, self.max_bindings, self.max_ops, self.scan_strategy)
        store = self.plan_stores.get(key)
        if store is None:
            store = self.plan_stores[key] = PlanStore()
        return store

    def stream(self, stream_id: int) -> Stream:
        """The calling thread's stream (`stream_id` is its thread id)."""
        s = self.streams.get(stream_id)
        if s is None:
            s = self.streams[stream_id] = Stream(stream_id, self._make_fusers(), self._plan_store())
            s.tape = self.tapes.get(stream_id)
            if stream_id == threading.get_ident():
                self.mark_thread(stream_id)
        return s

    def mark_thread(self, stream_id: int) -> None:
        """Called on thread `stream_id` itself (safe without the lock): when the thread
        ends, its stream is flushed (what it left queued runs, or is skipped if dead)."""
        if getattr(self._thread_marks, "mark", None) is None:
            self._thread_marks.mark = _ThreadEndMark(self.ended_streams, stream_id)

    def flush_ended_streams(self) -> None:
        """Run what threads that have ended left queued (their dead values are skipped)."""
        while self.ended_streams:
            self.flush_stream(self.ended_streams[0], "its thread ended", drop=True)
            self.registered_upto.pop(self.ended_streams[0], None)
            self.batch_misses.pop(self.ended_streams[0], None)
            self.ended_streams.popleft()  # only once flushed (a flush may need a compile first)

    # What `reconfigure` may change: what streams are made with.
    SETTINGS = ("mode", "max_bindings", "max_ops", "widths", "pack_lanes", "reduce_strategy", "matmul_strategy",
                "scan_strategy", "recompute_budget", "stencil_staging", "fuser_factories", "plan_store_enabled",
                "build_fallback", "run_cache_enabled")

    def reconfigure(self, why: str = "settings change", **settings) -> dict:
        """Run every stream's queue, change `settings` (names in SETTINGS), and drop the
        streams: the next op of each thread makes a stream with the new fusers and
        limits. Returns the values replaced. May stop for a kernel build and be called
        again (nothing changes before every queue has run)."""
        unknown = sorted(set(settings) - set(self.SETTINGS))
        if unknown:
            raise FusionError(f"not a server setting: {', '.join(unknown)} (settings: {', '.join(self.SETTINGS)})")
        if "widths" in settings and "pack_lanes" not in settings:
            settings = {**settings, "pack_lanes": False}  # widths set by hand are taken as they are
        mode = settings.get("mode", self.mode)
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        self.flush_all(why)
        old = {name: getattr(self, name) for name in settings}
        for name, value in settings.items():
            setattr(self, name, value)
        self.streams.clear()
        self.runs.clear()
        self.batch_misses.clear()  # (what the run cache knew of each stream's batches, with it)
        self.generation += 1
        return old

    def add_fuser(self, factory: Callable[[BlockContext], Fuser]) -> None:
        """Offer every later block to a fuser made by `factory(ctx)` too."""
        self.reconfigure("fusers changed", fuser_factories=[*self.fuser_factories, factory])

    # -- registering work -----------------------------------------------------------
    def register(self, stream_id: int, op: OperationIr | ViewOp) -> None:
        """Queue `op` on a stream; blocks run as the fusers close them (a view takes effect
        at once: `view`). (A thread's
        recorded element-wise ops usually come through `register_run`, this path's
        common case with its lookups hoisted out of the loop.)"""
        if type(op) is ViewOp:
            self.view(stream_id, op)
            return
        handles = self.handles
        entries = handles.entries
        outs = outputs_of(op)
        reads = [entries.get(t) or handles.get(t) for t in tensor_inputs(op)]
        if outs[0].id in entries or outs[-1].id <= self.registered_upto.get(stream_id, -1):
            # Already queued (or run ahead, or run and forgotten): a compile or an interrupt
            # stopped the caller after that; carry on.
            if self.early_drops:  # (an interrupt may have fallen before they were applied)
                self._dropped_early([o for o in outs if o.id in entries])
            ahead = self.running_ahead.get(outs[0].id)
            if ahead is not None:
                self._run_ahead(ahead)
            else:
                self.stream(stream_id).advance(self.ctx)
            return
        if type(op) is ReduceOp and self._same_reduction(op, stream_id):
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
        # Once its first output has an entry, the op counts as registered (an interrupt
        # before that leaves nothing the reader counts, recounted, do not undo).
        for out in outs:  # a pending entry per output: the value a queued op will write
            nbytes = out.dtype.itemsize
            for d in out.shape:
                nbytes *= d
            entries[out.id] = pending_entry(out, nbytes, stream_id)
        self.registered_upto[stream_id] = outs[-1].id  # (ids grow in each thread's order)
        self.counters["ops_registered"] += 1
        if self.early_drops:
            self._dropped_early(outs)
        stream = self.streams.get(stream_id) or self.stream(stream_id)
        if type(op) is ReduceOp and stream.queue and self.mode == "lazy" and size_of(op.out.shape) == 1 \
                and all(e.storage.status == READY for e in reads):
            # A full reduction of values already computed runs ahead of the open block, which
            # stays open: what is computed from its one value joins that block
            # (`(b - min(b)) / (max(b) - min(b))`: two reductions and one element-wise kernel).
            self._run_ahead(op)
            return
        stream.register(op, self.ctx)

    def register_run(self, stream_id: int, queue: deque, before: int | None = None) -> None:
        """Register the element-wise ops at the head of `queue` (a thread's recorded ops, as
        the client keeps them: (sequence number, op, *handles)) that take the common path,
        and were made before sequence number `before` (if given), popping each once it is
        registered; stop, changing nothing, at the first that needs more (`register`
        takes it): another op type, an input another thread's queue writes or that is
        unknown, an op seen before. The same steps as `register`, with what they look up
        looked up once per run instead of once per op."""
        stream = self.streams.get(stream_id)
        if stream is None:
            return
        entries = self.handles.entries
        upto_of = self.registered_upto
        upto = upto_of.get(stream_id, -1)
        counters = self.counters
        early = self.early_drops
        register = stream.register
        ctx = self.ctx
        # A storage names a stream only while pending: None or this one is no other
        # thread's value to wait for (another, or a stale name, goes the slow way).
        own = (None, stream_id)
        end = sys.maxsize if before is None else before
        while queue:
            head = queue[0]
            seq, op = head[0], head[1]
            if seq >= end or type(op) is not ElementwiseOp:
                return
            out = op.out
            oid = out.id
            if oid <= upto or oid in entries:
                return
            reads = []
            for t in op.inputs:
                if type(t) is int:
                    e = entries.get(t)
                    if e is None or e.storage.stream not in own:
                        return
                    reads.append(e)
            for e in reads:
                e.readers += 1
            nbytes = out.dtype.itemsize
            for d in out.shape:
                nbytes *= d
            entries[oid] = pending_entry(out, nbytes, stream_id)
            upto_of[stream_id] = upto = oid
            counters["ops_registered"] += 1
            if early:
                self._dropped_early((out,))
            register(op, ctx)
            queue.popleft()

    def _run_ahead(self, op: ReduceOp) -> None:
        self.running_ahead[op.out.id] = op  # (a build it needs makes the client register it again)
        stream = self.handles.entries[op.out.id].storage.stream  # (the registering one's)
        self.ctx.run_plan(self._single(op), "runs alone, ahead of the open block: a full reduction of "
                                            "computed values, whose result the block can read",
                          self.tapes.get(stream))
        del self.running_ahead[op.out.id]

    def _same_reduction(self, op: ReduceOp, stream_id: int) -> bool:
        """If the same reduction of the same tensor was computed before and still is, its
        result serves this one too (a view of it, no kernel): True. While the stream
        captures, only a result the capture computed does (a replay has no other)."""
        key = (op.name, op.input, op.axes, op.acc, op.out.shape, op.out.dtype)
        done = self.reductions.get(key)
        entry = self.handles.entries.get(done) if done is not None else None
        tape = self.tapes.get(stream_id) if self.tapes else None
        if entry is None or entry.storage.status != READY or entry.storage.buffer is None or \
                tape is not None and id(entry.storage.buffer) not in tape.slot_of:
            self.reductions[key] = op.out.id
            if len(self.reductions) > 4096:
                self.reductions.pop(next(iter(self.reductions)))
            return False
        self.counters["ops_registered"] += 1
        self.handles.add(op.out, entry.storage)
        self.registered_upto[stream_id] = op.out.id
        if self.early_drops:
            self._dropped_early((op.out,))
        return True

    def _dropped_early(self, outs) -> None:
        """Outputs whose handles died before their op was registered are dead on arrival:
        released at once where nothing is left to write (a repeated reduction's view of an
        earlier result; an op found registered again after an interrupt, which ran)."""
        early = self.early_drops
        entries = self.handles.entries
        for out in outs:
            if out.id in early:
                entry = entries.get(out.id)
                if entry is not None:
                    entry.alive = False  # (before the id leaves the set: an interrupt loses no drop)
                    self.handles.maybe_release(entry)
                early.discard(out.id)

    def fail_unregistered(self, op: OperationIr, error: BaseException) -> None:
        """`op` could not be queued: its outputs exist, failed with `error`."""
        err = TensorFailedError(f"{getattr(op, 'name', type(op).__name__)} could not be queued: {error!r}")
        err.__cause__ = error
        for out in outputs_of(op):
            if out.id not in self.handles.entries:
                storage = self.handles.new_storage(size_of(out.shape) * out.dtype.itemsize, FAILED)
                storage.error = kept(err)
                self.handles.add(out, storage)
                if self.early_drops:
                    self._dropped_early((out,))

    def drain_drops(self) -> None:
        """Forget the tensors whose handles were dropped (ids pushed by Tensor.__del__)."""
        drops = self.drops
        entries = self.handles.entries
        release = self.handles.maybe_release
        refs = self.handle_refs
        gone = self.gone
        while drops:  # handles.drop, inlined: this runs for every op's dead value
            tid = drops[0]
            if type(tid) is not int:
                # (a ref whose id was never set: its tensor died before its op was sent)
                tid = getattr(tid, "tid", None)
                refs.pop(tid, None)
            entry = entries.get(tid)
            if entry is None:
                if tid in gone:  # a replayed run's value, which it never wrote
                    gone.discard(tid)
                elif tid is not None:
                    # Its op is still in the client's inbox (or never came): applied when it does.
                    early = self.early_drops
                    if len(early) > MAX_EARLY_DROPS:
                        early.clear()  # (ids of ops that never came, after interrupts: bounded)
                    early.add(tid)
            elif entry.alive:
                entry.alive = False
                if not entry.readers:  # (most dropped values still have a queued reader)
                    release(entry)
            drops.popleft()  # only once applied (applying twice is harmless): none is lost

    def upload(self, ir: TensorIr, host: np.ndarray) -> None:
        """A tensor holding a copy of `host` (C-contiguous, ir's dtype); never waits."""
        self.counters["uploads"] += 1
        storage = self.handles.new_storage(host.nbytes, READY)
        self.ctx.allocate(storage)
        self.handles.add(ir, storage)
        if host.nbytes:
            self.runtime.upload(storage.buffer, host)

    def view(self, stream_id: int, op: ViewOp) -> None:
        """A tensor that reads `op.source`'s storage through another layout; no copy. A
        thread's views are recorded in its queue with its ops and registered in order
        with them (`register`), so a slice costs no locked section of its own."""
        out = op.out
        if out.id in self.handles.entries or out.id <= self.registered_upto.get(stream_id, -1):
            return  # registered already: a kernel build or an interrupt cut the section after it
        src = self.handles.get(op.source)
        self.handles.add(out, src.storage, op.strides, op.offset)
        self.registered_upto[stream_id] = out.id
        self.counters["ops_registered"] += 1
        for tape in self.tapes.values():  # a view of a constant that shares an argument's buffer
            if op.source in tape.foreign:
                tape.foreign.add(out.id)
        if self.early_drops:
            self._dropped_early((out,))

    def adopt(self, ir: TensorIr, buffer: cl.Buffer, nbytes: int, strides, offset: int) -> None:
        """A tensor over a buffer the caller owns (never returned to the pool)."""
        storage = self.handles.new_storage(nbytes, READY)
        storage.buffer = buffer
        storage.owned = False  # the owner's buffer: ours to read, not to recycle
        self.handles.add(ir, storage, strides, offset)

    # -- recovering --------------------------------------------------------------------
    def recover(self, cause: BaseException, recorded: dict[int, deque] | None = None) -> None:
        """Make the bookkeeping consistent again after `cause` interrupted a locked section
        at any point (a signal handler's exception lands between any two byte codes).

        The queues are the truth: the ops the server has already (an entry of theirs, or
        registered_upto) leave the head of the threads' `recorded` queues (the client's,
        by stream: see register_run); the block in flight, if its stream still holds it, is
        dropped (it ran or failed, and never runs again), and what it had not written
        fails; every reader count is counted again from the queued ops; a value still to
        be written whose writer is in no queue fails; the streams explore their queues
        afresh; dead values nobody reads are released; buffers the pool handed out that no
        value holds go back to it. Safe to run again if it is itself interrupted."""
        entries = self.handles.entries
        upto = self.registered_upto
        if self.replaying is not None:
            (sid, last), out_irs = self.replaying
            if out_irs[0].id in entries:  # a run's replay cut after its first entry: the run is registered
                for ir in out_irs:  # (a value still without its entry fails below, as one with it)
                    if ir.id not in entries:
                        entries[ir.id] = pending_entry(ir, size_of(ir.shape) * ir.dtype.itemsize, sid)
                upto[sid] = max(upto.get(sid, -1), last)
            self.replaying = None
        # First, while every entry the cut section made is there: an op it registered, left
        # queued, is known as registered only by its entry until registered_upto notes it, and
        # a drop applied before the queue is registered again (any locked section applies
        # them first) would release that entry; the op would then be registered anew, its
        # value alive for ever (its drop spent). A replayed run's ops go whole: its dead
        # values have no entries, and its donated inputs no buffers.
        for sid, queue in list((recorded or {}).items()):
            registered = upto.get(sid, -1)
            while queue:
                op = queue[0][1]  # (None: a handle kept until the ops before it left)
                if op is not None:
                    outs = outputs_of(op)
                    if outs[0].id not in entries and outs[-1].id > registered:
                        break
                queue.popleft()
        for sid, tape in list(self.tapes.items()):
            if tape.run:  # (a run's capture lives in one locked section: this one, cut short)
                self.abort_capture(sid, tape)
        plan = self.in_flight
        if plan is not None:
            for stream in self.streams.values():
                queue = stream.queue
                if len(queue) >= len(plan.ops) and all(a is b for a, b in zip(queue, plan.ops)):
                    stream.queue = queue[len(plan.ops):]
                    break
            self.ctx.fail_block(plan, cause)
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
                if type(op) is MoveOp and op.old_dies:
                    # (its client was cut before rebinding the handle of the old value,
                    # which lives on: the scatter, when it runs, copies it like any other)
                    op = op._replace(old_dies=False)
                remaining.append(op)
                for o in outs:
                    writers[o.id] = sid
                for t in ins:
                    readers[t] = readers.get(t, 0) + 1
            stream.queue = remaining
            stream.restart(self.ctx)
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
            self.ctx.fail(orphans, err)
        # Each storage's count of the entries naming it, counted again too (an entry that
        # takes over another's storage, fusers/move.py, counts it first and could be cut).
        storages = {id(e.storage): e.storage for e in entries.values()}
        for st in storages.values():
            st.refs = 0
        for entry in entries.values():
            entry.storage.refs += 1
        if self.early_drops:  # (an interrupt between an entry and its early drop: applied here)
            self._dropped_early([e.ir for tid, e in entries.items() if tid in self.early_drops])
        for entry in list(entries.values()):
            if not entry.alive and not entry.readers:
                self.handles.maybe_release(entry)
        held = {id(e.storage.buffer) for e in entries.values() if e.storage.buffer is not None}
        held |= {id(st.buffer) for st in self.pinned if st.buffer is not None}
        self.runtime.pool.reconcile(held)

    # -- flushing and reading ----------------------------------------------------------
    def flush_stream(self, stream_id: int | None, why: str = "flush", drop: bool = False) -> None:
        """Run the stream's queue. An emptied stream stays for its thread's next ops (making
        one costs its fusers), unless `drop` (its thread ended)."""
        s = self.streams.get(stream_id)
        if s is not None:
            s.flush(self.ctx, why)
            if drop and not s.queue:
                del self.streams[stream_id]

    def launch_stream(self, stream_id: int) -> None:
        """`clients.flush()`: run the stream's queue and submit what the device has queued
        (a driver may hold commands until a flush or a wait: NVIDIA's starts them 5 to 16
        us late on an H100, 3 flushed), so that it works while the caller goes on."""
        self.flush_stream(stream_id, "flush")
        self.runtime.queue.flush()

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

    def read(self, tid: int) -> tuple[cl.Event | None, Callable[[], np.ndarray]]:
        """Enqueue a copy of `tid` to the host: (event, finish).

        Wait on the event with the lock released, then call `finish()` for the array.
        """
        self.ensure_written(tid)
        self.counters["reads"] += 1
        entry = self.handles.get(tid)
        shape, dtype = entry.ir.shape, entry.ir.dtype
        lo, hi = span_of(shape, entry.strides, entry.offset)
        if hi == lo:
            return None, lambda: np.empty(shape, dtype)
        nbytes = (hi - lo) * dtype.itemsize
        span = self.runtime.host_span(entry.storage.buffer, nbytes)
        if span is not None:
            return self._read_in_place(entry, span[lo * dtype.itemsize:hi * dtype.itemsize].view(dtype), lo)
        staging = self.runtime.staging
        staged = staging.host_for(nbytes, dtype) if staging is not None else None
        host = np.empty(hi - lo, dtype) if staged is None else staged[0]
        event = self.runtime.download(host, entry.storage.buffer, lo * dtype.itemsize)
        if staged is None:
            if entry.contiguous:  # (the host array, reshaped, is the result)
                return event, lambda: host.reshape(shape)
            return event, lambda: laid_out(entry, host, lo).copy()
        # Pinned memory (runtime.staging), the read's while `finish` lives: copied out.
        self.counters["reads_staged"] += 1
        slot = staged[1]

        def finish() -> np.ndarray:
            return host.reshape(shape).copy() if entry.contiguous else laid_out(entry, host, lo).copy()

        staging.lend(slot, finish)
        return event, finish

    def _read_in_place(self, entry: Entry, span: np.ndarray, lo: int) -> tuple[cl.Event, Callable]:
        """`read` for a buffer whose memory the host sees (runtime.host_span): an event
        after the writer, and a `finish` that copies the values out of `span` (the
        elements lo.. of the buffer), once the runtime trusts them. The storage is pinned
        until `finish` is collected (PinLease): nothing recycles or writes its buffer in
        place meanwhile."""
        runtime, storage = self.runtime, entry.storage
        self.counters["reads_in_place"] += 1
        event, check = runtime.host_read_event(storage.buffer, lo * span.itemsize, span)

        def finish() -> np.ndarray:
            return laid_out(entry, runtime.trusted(span, check, storage.buffer, lo * span.itemsize), lo).copy()

        self.lease(storage, finish)
        return event, finish

    # -- pins -----------------------------------------------------------------------------
    # Every pin is a PinLease on an object that holds the buffer outside the entries (a
    # read's `finish`, a resolved array, a host map, a capture's keeper, a trace's tape):
    # when that object is collected, the lease's callback (C code, no Python frame)
    # queues it for the next locked section to unpin. A finalizer in Python would run a
    # frame that a signal handler's exception can cut, losing the unpin for good.
    def lease(self, storage: Storage, holder: object) -> PinLease:
        """Pin `storage` until `holder` is collected or the lease is unpinned, whichever
        comes first. An interrupt anywhere leaves no pin without its lease: the lease is
        kept (in `leases`) before the pin, and the pin is taken and noted in one line."""
        lease = PinLease(holder, self.unpin_inbox.append)
        lease.storage, lease.pinned = storage, False
        self.leases[id(lease)] = lease
        lease.pinned = True; storage.pins += 1  # noqa: E702 (one line: no tracer's event between)
        self.pinned.add(storage)
        return lease

    def unpin(self, lease: PinLease) -> None:
        """End `lease`'s pin: once, however often it is applied (the drain pops a queued
        lease after applying it: an interrupt between the two applies it again; a lease
        ended directly is queued again when its holder dies), and not at all if its pin
        was never taken (an interrupt cut the lease's making first)."""
        storage = lease.storage
        self.leases.pop(id(lease), None)
        if lease.pinned:
            lease.pinned = False; storage.pins -= 1  # noqa: E702 (one line: no tracer's event between)
        if storage.pins <= 0:
            self.pinned.discard(storage)
        self.handles.release_if_unused(storage)

    def resolve(self, tid: int) -> Entry:
        """The entry of `tid`, written (or enqueued), with a buffer (allocated now for a
        value nobody needed yet). The caller leases its storage for what it hands out."""
        self.ensure_written(tid)
        entry = self.handles.get(tid)
        if entry.storage.buffer is None:  # size 0, or a value nobody else needed yet
            self.ctx.allocate(entry.storage)
        return entry

    def map_to_host(self, tid: int) -> tuple[np.ndarray | None, cl.Event | None, int]:
        """`tid`'s buffer mapped to the host: (the mapped span of elements its layout
        touches, event, where its first element is in that span); the span holds a lease
        on the storage, so the buffer is not recycled while an array over it lives. None
        and None for a tensor of no elements. Only for CPU devices, whose buffers are host
        memory (elsewhere a map is a copy)."""
        if self.info.kind != "CPU":
            raise FusionError(f"device {self.info.name!r} keeps its buffers in its own memory: no map without a copy")
        entry = self.resolve(tid)
        lo, hi = span_of(entry.ir.shape, entry.strides, entry.offset)
        if hi == lo:
            return None, None, 0
        itemsize = entry.ir.dtype.itemsize
        span, event = self.runtime.map(entry.storage.buffer, lo * itemsize, hi - lo, entry.ir.dtype)
        self.lease(entry.storage, span)
        return span, event, entry.offset - lo

    def check_expression(self, op: cg.TraceOp, n_inputs: int, n_scalars: int) -> str:
        """Whether custom element-wise `op` builds on this device: '' if it does, else the
        driver's reason. Built alone over contiguous inputs and scalars of its compute
        dtype, as scalar code and as vector code; one that builds as scalar code only is
        kept, and the kernels holding it are scalar code. Safe without the server lock:
        it builds through the program cache alone, like any kernel."""
        def alone(width: int) -> cg.KernelSpec:
            return cg.KernelSpec(ops=(op,), inputs=tuple((op.compute, "contig") for _ in range(n_inputs)),
                                 scalars=tuple(op.compute for _ in range(n_scalars)), outputs=(0,),
                                 width=width, index="int", rank=0)

        programs = self.runtime.programs
        why = trial_build(programs, alone(1))
        if not why and trial_build(programs, alone(4)):
            self.ctx.scalar_exprs.add((op.expr, op.compute))
        return why

    # -- capture and replay (clients.jit) ---------------------------------------------
    def begin_capture(self, stream_id: int, name: str, input_ids: list[int], dying: tuple = (),
                      run: bool = False) -> cap.Tape | None:
        """Start recording what `stream_id`'s blocks enqueue, for a call of `name` with the
        tensors `input_ids`. The stream's queue runs first (a block of the capture holds
        only the call's ops) and the inputs are written. None when an input failed: that
        call is not captured. May stop for a kernel build and be called again. `dying`:
        the positions of inputs whose handles died (a recurring run's), whose buffers a
        block of the capture may take over. `run`: the run cache's capture, which ends in
        the locked section it began in (a recovery ends it)."""
        ins = [self.handles.get(t) for t in input_ids]
        self._run_writers(ins, f"a clients.jit trace of {name} reads it")
        self.flush_stream(stream_id, f"a clients.jit trace of {name} begins")
        if any(e.storage.status == FAILED for e in ins):
            return None
        tape = cap.Tape(name, ins, self.generation, self.lease)
        tape.run = run
        inputs = set(input_ids)
        tape.foreign = {tid for tid, e in self.handles.entries.items()
                        if id(e.storage) in tape.input_storages and tid not in inputs}
        tape.donatable = {id(ins[k].storage.buffer) for k in dying}
        # A trace's inputs are pinned (leases the tape holds: a tape an interrupt loses
        # unpins them as it is collected): their buffers stay theirs while the traced
        # function runs, whatever it drops. A run's capture lives in this one locked
        # section, where no drop is applied: its inputs need no pins.
        tape.held = [] if run else [self.lease(e.storage, tape) for k, e in enumerate(ins) if k not in dying]
        self.tapes[stream_id] = tape
        stream = self.streams.get(stream_id)
        if stream is not None:
            stream.tape = tape
        self.ctx.follow_allocations(tape)
        return tape

    def end_capture(self, stream_id: int, tape: cap.Tape, out_ids: list[int],
                    counter: str = "jit_traces") -> cap.Capture | None:
        """Run the rest of the traced call and turn its tape into a Capture of the call
        writing `out_ids`; None (the tape dropped) when it cannot be replayed. May stop
        for a kernel build and be called again."""
        if self.tapes.get(stream_id) is tape:
            self.flush_stream(stream_id, f"a clients.jit trace of {tape.name} ends")
        entries = self.handles.entries
        # (a value another stream computes, returned as it is)
        self._run_writers([self.handles.get(tid) for tid in out_ids], f"a clients.jit trace of {tape.name} returns it")
        self._stop_capture(stream_id, tape)
        outputs = []
        for tid in out_ids:
            e = entries[tid]
            st = e.storage
            if tid in tape.foreign:
                tape.broken = tape.broken or f"it returns tensor {tid}, which shares a buffer with an argument"
            if st.status != READY:
                tape.broken = tape.broken or f"output tensor {tid} failed"
                break
            buf = st.buffer
            if buf is None:
                src = (cap.EMPTY, None)
            elif id(buf) in tape.slot_of:
                src = (cap.SLOT, tape.slot_of[id(buf)])
            elif id(buf) in tape.input_of:
                k = tape.input_of[id(buf)]
                # (the input itself, returned; or its buffer taken over by a block)
                src = (cap.INPUT if st is tape.inputs[k].storage else cap.DONATED, k)
            else:  # a value computed outside the call, returned as it is: by reference
                src = (cap.CONST, tape.hold(buf, entries))
            outputs.append((src, st.nbytes, e.ir.shape, e.ir.dtype, e.strides, e.offset))
        if tape.generation != self.generation:
            tape.broken = tape.broken or "the server's settings changed while tracing"
        if tape.broken:
            log.debug("clients.jit: %s not captured: %s", tape.name, tape.broken)
            self._unpin_tape(tape)
            return None
        self.counters[counter] += 1
        capture = cap.Capture(tape, outputs, self.runtime.programs.arg_types)
        tape.pinned = []  # (the capture's now, through the keeper: unpinned once it is collected)
        return capture

    def abort_capture(self, stream_id: int, tape: cap.Tape) -> None:
        """Stop recording (the traced function raised): what it queued runs as usual."""
        self._stop_capture(stream_id, tape)
        self._unpin_tape(tape)

    def _unpin_tape(self, tape: cap.Tape) -> None:
        pinned, tape.pinned = tape.pinned, []  # (once: abort may follow end; any cut short end with the tape)
        for lease in pinned:
            self.unpin(lease)

    def _stop_capture(self, stream_id: int, tape: cap.Tape) -> None:
        if self.tapes.get(stream_id) is tape:
            del self.tapes[stream_id]
            stream = self.streams.get(stream_id)
            if stream is not None:
                stream.tape = None
            for lease in tape.held:  # (any an interrupt skips end with the tape)
                self.unpin(lease)
        self.ctx.stop_following(tape)

    def replay(self, capture: cap.Capture, input_ids: list[int], scalars: list, out_irs: list[TensorIr],
               counter: str = "jit_replays", queued: tuple[int, int] | None = None) -> bool:
        """Enqueue a capture for this call's tensors and scalars, writing `out_irs`; False
        (nothing changed) when the call must be traced instead: the settings changed, or
        its inputs share storages or sizes otherwise than the traced call's. May stop for
        a kernel build (a pending input's writer) and be called again. `queued`: (stream id,
        last id) of the queued ops the replay stands for (a run's), registered from its
        first entry on (see recover)."""
        if capture.generation != self.generation:
            return False
        entries = self.handles.entries
        ins = list(map(entries.get, input_ids))
        if None in ins:
            ins = list(map(self.handles.get, input_ids))  # (raises for the first one dropped)
        storages = list(map(STORAGE_OF, ins))
        if PENDING in map(STATUS_OF, storages):
            for e in ins:
                if e.storage.status == PENDING:
                    self._run_writers([e], f"a clients.jit call of {capture.name} reads it")
        if tuple(map(NBYTES_OF, storages)) != capture.sizes:
            return False
        elif len(storages) > 1 and len(set(map(id, storages))) < len(storages):  # (inputs sharing a storage)
            if cap.aliasing_of(storages) != capture.aliasing:
                return False
        elif not capture.distinct:
            return False
        self.counters[counter] += 1
        # (only now: an interrupt before the first entry leaves the ops to be registered)
        self.replaying = (queued, out_irs) if queued is not None and out_irs else None
        cap.replay(self.ctx, capture, ins, storages, scalars, out_irs)
        if self.tapes:  # (another thread traces meanwhile: what this wrote is no constant of its call)
            written = [entries[ir.id].storage for ir in out_irs if ir.id in entries]
            for tape in self.tapes.values():
                tape.outside_writes.update(written)
        return True

    # -- the run cache (runs.py) ---------------------------------------------------------
    def find_run(self, stream_id: int, queue: deque, tid: int | None, batch: bool = False) -> Run | None:
        """The thread's queue as a run the cache has seen before, when the flush about to
        happen runs it alone: lazy mode, the thread's stream empty and not capturing, and
        `tid` (the tensor read; None for a flush or a sync) written by the run. None
        otherwise, or when the run is new (the cache notes it).

        A `batch` (INBOX_BATCH ops of the queue registered on the way, no flush due) may
        also find the stream at a cut its fusers make by count (see batch_gap): when the
        batch recurs, the stream runs first, alone, so that the batch is again the only
        work of its flush. Not before a read: there, the stream's ops fuse with the run's.
        Batches that never recur are looked up one in BATCH_BACKOFF."""
        if not self.takes_runs(stream_id):
            return None
        first = queue[0][1]
        first_id = outputs_of(first)[0].id if first is not None else -1
        if first is None or first_id <= self.registered_upto.get(stream_id, -1):
            # (registered already, by a section that a kernel build or an interrupt cut
            # short, or by another thread: the ops are not the run's to capture)
            return None
        stream = self.streams.get(stream_id)
        empty = stream is None or not stream.queue
        if not batch:
            return self.runs.find(queue, self.handles.entries, tid) if empty else None
        if not empty and not self.cut_is_natural(stream_id):
            return None
        # A stream whose batches never recur (new scalars every time, say) has one looked
        # at in BATCH_BACKOFF once that many in a row were not: a key costs 1 to 2 us per
        # op. A loop's batches, even a long loop's, are still found again.
        misses = self.batch_misses.get(stream_id, 0)
        self.batch_misses[stream_id] = misses + 1
        if misses >= BATCH_BACKOFF and misses % BATCH_BACKOFF:
            return None
        # (its inputs may be values the stream holds: they are written by the flush)
        run = self.runs.find(queue, self.handles.entries, None, None if empty else stream_id)
        if run is None or run.captures and all(type(c) is int and c >= MAX_CAPTURE_TRIES
                                               for c in run.captures.values()):
            return None  # (a key left to the usual path for good counts as one not known)
        self.batch_misses[stream_id] = 0
        if empty:
            return run
        self.flush_stream(stream_id, f"a batch of {len(run.outputs)} ops that recurs follows")
        return run if written(run.inputs, self.handles.entries) else None

    def takes_runs(self, stream_id: int) -> bool:
        """Whether the run cache may take the stream's queue now: lazy mode, the stream
        not capturing (a jitted function's trace records its ops as they come)."""
        return self.run_cache_enabled and self.mode == "lazy" and stream_id not in self.tapes

    def batch_gap(self, stream_id: int) -> int | None:
        """How many more ops the stream's open block takes before its fusers close it by
        count: 0 at such a cut (see cut_is_natural), `max_ops` less the ops queued for an
        open block of element-wise ops; None when the stream holds other ops (its blocks
        do not end by count). The client starts each batch of a thread's queue there,
        registering that many ops first, so that a loop's batches look alike however a
        wait for the lock lengthened the queue."""
        stream = self.streams.get(stream_id)
        queue = stream.queue if stream is not None else ()
        if not queue:
            return 0
        if len(queue) > self.max_ops or set(map(type, queue)) != {ElementwiseOp}:
            return None
        return self.max_ops - len(queue)

    def cut_is_natural(self, stream_id: int) -> bool:
        """Whether a flush of the stream now would cut its ops where its fusers will: it
        holds nothing, or exactly `max_ops` element-wise ops (one block, which the next op
        would close). A batch (find_run) runs apart only at such a cut: elsewhere its block
        would be a kernel of a length that the batches chose, not the fusers, one to build
        for each way a loop's ops fall into batches (and under contention, for each way
        timing cut them)."""
        return self.batch_gap(stream_id) == 0

    def replay_run(self, stream_id: int, run: Run, variant: tuple) -> bool:
        """Replay the run's capture for `variant` (its live outputs and inputs), as if its
        ops were registered and flushed; False (nothing changed) when there is none, or
        when an input whose buffer it takes over is still needed (another view of it)."""
        capture = run.captures.get(variant)
        if type(capture) is not cap.Capture:
            return False
        entries = self.handles.entries
        for k in capture.donated:
            e = entries[run.inputs[k]]
            st = e.storage
            if e.readers or st.refs != 1 or st.pins or not st.owned or st.buffer is None:
                return False
        outputs = run.outputs
        if not self.replay(capture, run.inputs, [], [outputs[k] for k in variant[0]], "run_replays",
                           (stream_id, outputs[-1].id)):
            del run.captures[variant]  # made under other settings: captured again
            return False
        self.registered_upto[stream_id] = outputs[-1].id  # (the client's queue may still hold the ops)
        self.replaying = None
        self.counters["ops_registered"] += len(outputs)
        if len(self.gone) > MAX_EARLY_DROPS:
            self.gone.clear()  # (ids whose drops an interrupt lost: bounded)
        return True

    def finish_replay(self, run: Run) -> None:
        """After a replay, once the client's queue let go of its handles: the handles of
        the values the replay did not write die without a drop to drain (their drop refs
        go first). One already gone when the run was flushed has its drop on its way
        (see drain_drops). Were a handle still alive, the liveness count was wrong: its
        tensor fails, saying so, instead of being unknown."""
        dead, run.dead = run.dead, ()
        if not dead:
            return
        ids, handles = dead
        del dead
        refs = self.handle_refs
        if any(map(is_, handles, repeat(None))):  # (rare: a value dropped before the flush)
            # Its drop was drained (an early drop, which no entry will ever take) or is on
            # its way (expected: see drain_drops).
            early = self.early_drops
            for t, h in zip(ids, handles):
                if h is None:
                    if t in refs:
                        self.gone.add(t)
                    else:
                        early.discard(t)
            ids = [t for t, h in zip(ids, handles) if h is not None]
            handles = [h for h in handles if h is not None]
        if not referred_beyond(handles):  # (the common case: the list holds their last references)
            deque(map(refs.pop, ids, repeat(None)), maxlen=0)  # (their drop refs die first: no drops)
            return
        watch = list(map(weakref.ref, handles))
        drop_refs = list(map(refs.pop, ids, repeat(None)))
        # (how to make one again: the client's class and callback)
        make = next(((type(r), r.__callback__) for r in drop_refs if r is not None), None)
        del drop_refs, handles  # (the refs first: a ref that dies before its handle calls nobody)
        if all(w() is None for w in watch):
            return
        for tid, w in zip(ids, watch):
            handle = w()
            if handle is None:
                continue
            if make is not None:
                ref = refs[tid] = make[0](handle, make[1])
                ref.tid = tid
            out = next(o for o in run.outputs if o.id == tid)
            storage = self.handles.new_storage(size_of(out.shape) * out.dtype.itemsize, FAILED)
            storage.error = FusionError(f"tensor {tid} was taken for dead by the run cache and not computed "
                                        "(set FUSION_RUN_CACHE=0 and report this)")
            self.handles.add(out, storage)

    def capture_run(self, stream_id: int, run: Run, variant: tuple) -> cap.Tape | None:
        """Start capturing the run (its ops are registered and flushed next; then
        `end_run_capture`); None when this variant was found not to capture, or is
        captured but could not be replayed now."""
        tries = run.captures.get(variant, 0)
        if type(tries) is not int or tries >= MAX_CAPTURE_TRIES:
            return None
        dying = tuple(k for k, alive in enumerate(variant[1]) if not alive)
        return self.begin_capture(stream_id, f"a recurring run of {len(run.outputs)} ops", run.inputs, dying, True)

    def end_run_capture(self, stream_id: int, tape: cap.Tape, run: Run, variant: tuple, why: str,
                        batch: bool = False) -> None:
        """Run what the run queued (flushed for `why`) and keep its capture; a run that
        cannot be replayed is remembered as such (a count of tries). A `batch` whose ops
        do not end where the stream's blocks do (see cut_is_natural) is left queued, not
        captured (a try that failed)."""
        if batch and not self.cut_is_natural(stream_id):
            self.abort_capture(stream_id, tape)
            run.captures[variant] = run.captures.get(variant, 0) + 1
            return
        self.flush_stream(stream_id, why)
        out_ids = [run.outputs[k].id for k in variant[0]]
        entries = self.handles.entries
        if not all(map(entries.__contains__, out_ids)):
            # A value held when the run was judged was dropped since (by another thread, or
            # the garbage collector): the capture is of another variant, left for next time.
            self.abort_capture(stream_id, tape)
            return
        capture = self.end_capture(stream_id, tape, out_ids, "run_captures")
        if capture is not None and any(src[0] == cap.CONST for src, *_ in capture.outputs):
            capture = None  # (a value the run did not compute, which its ops should have)
        if capture is not None:
            capture.note = f"replayed from the run cache: {capture.name}"
        # (one that could not be kept is tried again on a later run, as long as the reason
        # may have been passing: another thread's write, a failed block; then never)
        run.captures[variant] = capture or run.captures.get(variant, 0) + 1

    def _run_writers(self, entries: list, why: str) -> None:
        """Run the queues whose ops write any of `entries` (pending values), in order."""
        for e in entries:
            if e.storage.status == PENDING:
                self.flush_stream(e.storage.stream, why)

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
