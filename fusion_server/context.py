"""The block context: all that streams, fusers and plans see of the server.

A fuser decides from the IR and the entries (layouts and status of tensors); a plan
enqueues its kernels through the few operations here: live values, get-or-build a
kernel, allocate, one launch path with its record for `inspect()`, mark ready, fail,
run a block. The server builds one context and hands it to every stream; nothing below
this module refers to the server (Burn's fusion `Context` is the model).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import pyopencl as cl

from .codegen import elementwise as cg
from .codegen import matmul as mg
from .codegen import reduce as rg
from .codegen import stencil as stg
from .compiling import CompileJob, NeedsCompile
from .errors import FusionError, TensorFailedError, after_failed_input, kept
from .handles import FAILED, PENDING, READY, Entry, HandleContainer, Storage
from .ir import ElementwiseOp, OperationIr, outputs_of, tensor_inputs
from .plans import PlanRejected
from .runtime.programs import BuiltKernel

log = logging.getLogger("fusion_server")


class Plan(Protocol):
    """Executable work for a prefix of a stream's queue."""

    ops: list[OperationIr]

    def execute(self, ctx: BlockContext) -> None:
        """Enqueue the work (never wait). Called with the server lock held."""


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


def variant_of(spec) -> str:
    """How a kernel was generated, in words, from the spec it was built from."""
    if isinstance(spec, cg.KernelSpec):
        return f"width {spec.width}{' along rows' if spec.rows else ', 2-D grid' if spec.grid else ''}"
    if isinstance(spec, rg.ReduceSpec):
        parts = f", {spec.width // spec.acc_width} accumulators" if spec.acc_width else ""
        chunked = ", partial results of chunks" if spec.chunked else ""
        return f"{spec.strategy}, width {spec.width}{parts}{chunked}"
    if isinstance(spec, stg.StencilSpec):
        (ty, tx), (hy, hx) = spec.tile, spec.halo
        return f"staged, tile {ty} x {tx}, halo {hy} x {hx}"
    if isinstance(spec, mg.MatmulSpec):
        if spec.strategy == "rows":
            return f"rows, {spec.vector_bytes}-byte vectors{', B in panels' if spec.b_panels else ''}"
        if spec.operands:
            buffered = ", double-buffered" if spec.double_buffer else ""
            return f"tiled, tile {spec.tile}, aligned {spec.operands}, depth {spec.depth}{buffered}"
        return f"tiled, tile {spec.tile}"
    return ""


def op_names(ops: list) -> list[str]:
    return [getattr(op, "name", type(op).__name__) for op in ops]


class BlockContext:
    """The entries, the device's facts and settings, the counters, and the operations a
    block needs. Settings (widths, strategies, limits) are the server's, set through it."""

    def __init__(self, info, handles: HandleContainer, runtime, widths, max_bindings: int,
                 single_plan: Callable[[OperationIr], Plan], drain_drops: Callable[[], None]):
        self.info = info  # DeviceInfo: kind, compute units, the device itself
        self.handles = handles
        self.entries: dict[int, Entry] = handles.entries  # tensor id -> entry
        self.queue: cl.CommandQueue = runtime.queue
        self.pool = runtime.pool  # for scratch buffers a plan frees itself
        self.programs = runtime.programs
        self.local_size: int = runtime.local_size
        self.metadata_buffer = runtime.metadata_buffer
        self.widths = widths  # VectorWidths: elements per work-item, per element size
        # Contiguous element-wise kernels as scalar code, where the driver packs work-items
        # into lanes itself (DeviceInfo.packs_work_items) and the widths were not forced.
        self.pack_lanes = False
        self.max_bindings = max_bindings
        # None: per device ("group" on GPUs for long rows, else "loop"); tests force either.
        self.reduce_strategy: str | None = None
        self.matmul_strategy: str | None = None  # likewise: "tiled" (GPUs) or "rows" (CPUs)
        self.scan_strategy: str | None = None  # likewise: "tiles" (GPUs) or "chunks" (CPUs)
        # None: per device kind (fusers/remap.py); 0 never recomputes a value for a view of it.
        self.recompute_budget: int | None = None
        # A value whose views only shift it is staged in local memory over that budget
        # (before recomputing, on GPUs: fusers/staging.py); False: recomputed under the
        # budget, written and read back by a second kernel over it.
        self.stencil_staging = True
        self.compile_under_lock = False  # True only for callers that cannot release it
        # A kernel whose vector build fails is built again as scalar code before its block
        # fails (off while qualifying, where a failing vector build is the finding).
        self.build_fallback = True
        self.counters: dict[str, int] = {}
        # Custom expressions, with the dtype they compute in, that build on this device as
        # scalar code only (see the server's check_expression): kernels holding them are.
        self.scalar_exprs: set[tuple[str, object]] = set()
        self.recorders: list = []  # inspect()'s, each with a `kernels` list
        self.note = ""  # why the block being run was cut where it was (inspect() only)
        self.in_flight: Plan | None = None  # the block being run, until its stream has dropped its ops
        self.single_plan = single_plan  # the plan of an op that runs alone
        self._drain_drops = drain_drops
        self.pinned: set[Storage] = set()  # storages with pins (each pin a lease on its holder)
        # Captures in progress (clients.jit's traces) follow every buffer the pool hands
        # out; `tape` is the one whose stream's block runs now, if that stream captures.
        self.tapes: list = []
        self.tape = None

    # -- values ---------------------------------------------------------------------------
    def live_values(self) -> dict[int, Entry]:
        """The entries, after the drops that arrived are applied (which values are still
        alive decides what a block writes)."""
        self._drain_drops()
        return self.entries

    def allocate(self, storage: Storage) -> cl.Buffer:
        storage.buffer = self.pool.alloc(storage.nbytes)
        return storage.buffer

    def may_donate(self, storage: Storage) -> bool:
        """Whether a block may write its output into `storage`'s buffer (in-place reuse):
        while capturing, only into a buffer of the capture's own (a constant it reads by
        reference must keep its values for every replay), or of an input the capture
        may take over (a recurring run's input that dies with the run)."""
        tape = self.tape
        return tape is None or id(storage.buffer) in tape.slot_of or id(storage.buffer) in tape.donatable

    def take_over(self, donor: Storage, storage: Storage):
        """Move `donor`'s buffer to `storage` (in-place reuse; see `may_donate`) and return
        it. A capture notes the input whose buffer it was: each replay takes it over too."""
        buffer = donor.buffer
        donor.buffer = None  # (before it has its new holder: an interrupt between leaks it to
        storage.buffer = buffer  # the recovery's reconciling, never to two holders)
        self.counters["inplace_reuses"] += 1
        if self.tape is not None:
            self.tape.taken_over(buffer)
        return buffer

    def follow_allocations(self, tape) -> None:
        """Start (`tape` set) or stop following the pool for a capture."""
        if tape not in self.tapes:
            self.tapes.append(tape)
        self.pool.watch = self._allocated

    def stop_following(self, tape) -> None:
        if tape in self.tapes:
            self.tapes.remove(tape)
        if not self.tapes:
            self.pool.watch = None

    def _allocated(self, buffer, nbytes: int) -> None:
        current = self.tape
        for tape in self.tapes:
            tape.allocated(buffer, nbytes, tape is current)

    def mark_ready(self, storages: list[Storage]) -> None:
        for st in storages:
            st.status = READY
            st.stream = None

    def fail(self, storages: list[Storage], error: BaseException) -> None:
        """Mark `storages` failed with `error`. A failed value holds its error, not a
        buffer: one it had goes back to the pool now (the in-order queue runs any kernel
        already enqueued into it before a later user of the buffer)."""
        self.counters["failed_blocks"] += 1
        if self.tape is not None:
            self.tape.broken = f"a block failed while tracing: {error!r}"
        error = kept(error)  # (no traceback: see errors.kept)
        free = self.pool.free
        for st in storages:
            st.status = FAILED
            st.error = error
            st.stream = None
            buf = st.buffer
            if buf is not None and st.owned and not st.pins:
                st.buffer = None
                free(buf, st.nbytes)

    def fail_if_inputs_failed(self, what: str, in_entries: list[Entry], out_entries: list[Entry]) -> bool:
        """Fail the outputs when an input failed (the block, `what`, then does not run): True."""
        for e in in_entries:
            if e.storage.status == FAILED:
                err = after_failed_input(what, e.ir.id, e.storage.error)
                self.fail([o.storage for o in out_entries], err)
                return True
        return False

    # -- kernels --------------------------------------------------------------------------
    def built_for(self, spec) -> BuiltKernel:
        """The built kernel for `spec`, with the spec actually built: `spec` itself, or its
        scalar variant when the vector build failed (the plan launches by that one).

        NeedsCompile when it must be built first: building takes long (150 ms on PoCL), so
        the client releases the lock, builds, and the block runs again. With
        `compile_under_lock` the build happens right here instead."""
        programs = self.programs
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

    def kernel_for(self, spec) -> cl.Kernel:
        """`built_for(spec).kernel`."""
        return self.built_for(spec).kernel

    def build_or_fail(self, spec, what: str, out_entries: list[Entry]) -> BuiltKernel | None:
        """`built_for(spec)`; a build that fails fails the block's outputs instead (a
        compiler error fails that block only) and gives None."""
        try:
            return self.built_for(spec)
        except (NeedsCompile, PlanRejected):
            raise  # nothing has changed yet: built outside the lock, then the block runs again
        except Exception as exc:
            err = TensorFailedError(f"{what} failed to build: {exc}")
            err.__cause__ = exc
            self.fail([e.storage for e in out_entries], err)
            return None

    # -- launches -------------------------------------------------------------------------
    def group_size(self, items: int, heavy: bool = False) -> int:
        """The work-group size of a launch of `items` work-items.

        `heavy`: each work-item does much work (a whole row of a reduction). On CPUs,
        work-groups then shrink until every core gets several: a CPU driver runs a
        work-group on one core, and 1024 rows in one group of 1024 left the other idle
        (a row reduction over 1024 x 1024 read at 0.28 of the bandwidth limit, then 0.50).
        A driver that packs work-items into its vector lanes (DeviceInfo.packs_work_items)
        runs such work-items in work-groups of one, where no lane waits for another's
        loop: cumulative sums of 1024 rows of 1024 floats took 4.2 ms of kernel time in
        groups, 0.82 alone, with row reductions unchanged (Intel's CPU runtime on a 2-core
        Zen 5; the radix stage of the sort, the same: 10.5 ms and 3.0)."""
        local = self.local_size
        if heavy and self.info.packs_work_items:
            return 1
        if heavy and self.info.kind == "CPU":
            while local > 1 and items < 4 * self.info.compute_units * local:
                local //= 2
        return local

    def launch_items(self, kernel: cl.Kernel, items: int, args: list, kind: str, ops: list[str], bindings: int,
                     heavy: bool = False) -> None:
        """`launch` over `items` work-items, padded to whole work-groups (see group_size)."""
        local = self.group_size(items, heavy)
        self.launch(kernel, (items + local - 1) // local * local, local, args, kind, ops, bindings, items)

    def launch_grid(self, kernel: cl.Kernel, rows: int, row: int, args: list, kind: str, ops: list[str],
                    bindings: int) -> None:
        """`launch` over a 2-D grid of `rows` rows of `row` work-items, the rows padded to
        whole groups of the device's group size (or of the power of two that covers a
        shorter row); the kernel returns for work-items past a row's end."""
        columns = min(self.local_size, 1 << (row - 1).bit_length())
        self.launch(kernel, (-(-row // columns) * columns, rows), (columns, 1), args, kind, ops, bindings, rows * row)

    def launch(self, kernel: cl.Kernel, global_size: int | tuple, local_size: int | tuple | None, args: list,
               kind: str, ops: list[str], bindings: int, items: int | None = None) -> None:
        """Enqueue `kernel` over a 1-, 2- or 3-D grid and record it for `inspect()`."""
        grid = global_size if isinstance(global_size, tuple) else (global_size,)
        local = local_size if isinstance(local_size, tuple) or local_size is None else (local_size,)
        event = kernel(self.queue, grid, local, *args)
        if self.tape is not None:
            self.tape.kernel(kernel, grid, local, args, self.entries)
        if items is None:
            items = 1
            for g in grid:
                items *= g
        self.record_launch(kind, ops, bindings, kernel.function_name, items, event)

    def record_launch(self, kind: str, ops: list[str], bindings: int, name: str, items: int,
                      event: cl.Event | None = None) -> None:
        """Count a launch, and record it for `inspect()`; launches made by user code (a
        custom kernel's launch function) are recorded through this alone."""
        self.counters["kernels_launched"] += 1
        if self.tape is not None:
            self.tape.record((kind, ops, bindings, name, items))
        if self.recorders:
            programs = self.programs
            record = KernelRecord(kind, ops, bindings, name, items, event, self.note,
                                  programs.fallbacks.get(name, ""), variant_of(programs.specs.get(name)))
            for rec in self.recorders:
                rec.kernels.append(record)

    def record_replayed(self, kind: str, ops: list[str], bindings: int, name: str, items: int,
                        event: cl.Event | None, note: str) -> None:
        """Record a launch a capture replayed (`note` says which), for `inspect()`
        (counted by the replay)."""
        programs = self.programs
        record = KernelRecord(kind, ops, bindings, name, items, event, note,
                              programs.fallbacks.get(name, ""), variant_of(programs.specs.get(name)))
        for rec in self.recorders:
            rec.kernels.append(record)

    def enqueue(self, fn: Callable, *args, **kwargs):
        """`fn(queue, *args, **kwargs)`: device work other than a generated kernel (a copy,
        a user's launch function), enqueued so that a capture replays it too."""
        result = fn(self.queue, *args, **kwargs)
        if self.tape is not None:
            self.tape.command(fn, args, kwargs, self.entries)
        return result

    # -- running blocks -------------------------------------------------------------------
    def run_plan(self, plan: Plan, note: str = "", tape=None) -> None:
        """Execute a plan, then retire its ops. NeedsCompile and PlanRejected pass through
        untouched (nothing has changed). `note`: why the block was cut there (inspect()).
        `tape`: the capture of the plan's stream, if it captures (see capture.py).

        Whatever the block raises fails only its outputs, KeyboardInterrupt and
        SystemExit from a launch function too: those are raised again once the block is
        retired, and the stream drops the block either way, so it never runs again."""
        if self.recorders:
            self.note = note
        self.live_values()
        self.in_flight = plan  # until the stream has dropped its ops (see the server's recover)
        if self.tapes:
            for other in self.tapes:
                other.check_block(plan.ops, self.entries, other is tape)
        self.tape = tape
        try:
            plan.execute(self)
        except (NeedsCompile, PlanRejected):
            self.in_flight = None
            raise
        except BaseException as exc:  # whatever failed, only this block's outputs carry it
            log.debug("block failed: %r", exc)
            if tape is not None:
                tape.broken = f"a block failed while tracing: {exc!r}"
            self.fail_block(plan, exc)
            self.counters["blocks"] += 1
            self.retire(plan.ops)
            if not isinstance(exc, Exception):
                raise  # an interrupt or an exit: acted on once, after the block is settled
            return
        finally:
            self.tape = None
        self.counters["blocks"] += 1
        self.retire(plan.ops)

    def fail_block(self, plan: Plan, exc: BaseException) -> None:
        """Fail every output of `plan` still to be written, with `exc` as the cause."""
        names = ", ".join(op_names(plan.ops))
        if isinstance(exc, FusionError):
            err = exc
        elif isinstance(exc, Exception):
            err = TensorFailedError(f"block ({names}) failed: {exc}")
        else:
            err = TensorFailedError(f"block ({names}) was interrupted by {type(exc).__name__}")
        if err is not exc:
            err.__cause__ = kept(exc)  # (for an interrupt or an exit still on its way up: a copy)
        entries = self.entries
        self.fail([entries[o.id].storage for op in plan.ops for o in outputs_of(op)
                   if o.id in entries and entries[o.id].storage.status != READY], err)

    def retire(self, ops: list[OperationIr]) -> None:
        """The ops ran (or failed): drop their reads and settle what they produced."""
        entries = self.entries
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

