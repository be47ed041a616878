"""Capture and replay: the device commands of a traced call, enqueued again with new tensors.

While a stream captures (the first call of a `clients.jit` function with a signature),
every command its blocks enqueue is recorded on a `Tape`, each argument with where it
comes from:

- an input: the buffer of one of the call's tensors;
- a slot: a buffer the pool handed to one of the capturing stream's blocks (the trace's
  intermediates, scratch and outputs). A buffer the trace freed and took again is the same
  slot: a replay uses it in the same order. Handed to anyone else meanwhile (an upload,
  another thread), it stops being one;
- a traced scalar: the numpy value made for one of the call's Python scalars;
- a constant: anything else (a metadata buffer, a size, a value computed outside the call
  and read by reference, pinned while the capture lives).

Finished, the tape becomes a `Capture`: per launch a clone of the kernel with its constant
arguments set once, and the few arguments a call changes. `replay` sets those and enqueues,
with the outputs' entries made first: no op, no fuser, no plan store, one locked section.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from operator import itemgetter, not_
from typing import Any

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from .errors import TensorFailedError, after_failed_input
from .handles import BUFFER_OF, FAILED, PENDING, READY, STATUS_OF, Entry, Storage
from .ir import TensorIr, contiguous_strides, outputs_of, tensor_inputs
from .runtime.programs import kernel_program

INPUT, SLOT, SCALAR, CONST, ARRAY, SEQ, EMPTY, DONATED = range(8)
KERNEL, CALL = 0, 1

_MEMORY = cl.MemoryObjectHolder
_pairs = itertools.chain.from_iterable


def _set_args_one_by_one(kernel: cl.Kernel, flat: tuple) -> None:
    for i in range(0, len(flat), 2):
        kernel.set_arg(flat[i], flat[i + 1])


# pyopencl sets several arguments in one call with these, given (number, value, number,
# value, ...): buffers and other memory objects, and numpy scalars (since 2022).
if hasattr(cl.Kernel, "_set_arg_multi") and hasattr(cl.Kernel, "_set_arg_buf_multi"):
    _set_memory_args, _set_scalar_args = cl.Kernel._set_arg_multi, cl.Kernel._set_arg_buf_multi
else:  # (pyopencl before 2022)
    _set_memory_args = _set_scalar_args = _set_args_one_by_one


class Keeper:
    """What the leases on a capture's constants hold on to (FusionServer.lease): the
    tape has it while tracing, the Capture for its life."""

    __slots__ = ("__weakref__",)


class Tape:
    """What one capturing stream enqueued, each argument with its source (module docstring)."""

    def __init__(self, name: str, inputs: list[Entry], generation: int, lease: Callable[[Storage, object], Any]):
        self.name = name
        self.generation = generation  # the server's: settings changed since, the tape is void
        self.inputs = inputs
        # Which inputs share a storage, and the storages' sizes (they decide 64-bit
        # indexing): a call whose inputs differ is traced again.
        storages = [e.storage for e in inputs]
        self.aliasing = aliasing_of(storages)
        self.sizes = tuple(st.nbytes for st in storages)
        self.input_of: dict[int, int] = {}
        for k, e in enumerate(inputs):
            if e.storage.buffer is not None:
                self.input_of.setdefault(id(e.storage.buffer), k)
        self._lease = lease  # the server's: pins a storage until its holder is collected
        self.input_storages = {id(e.storage) for e in inputs}
        # Buffers of inputs a block may write its output into (see BlockContext.may_donate):
        # an output written so is the input's buffer taken over, at every replay.
        self.donatable: set[int] = set()
        self.taken: set[int] = set()  # the inputs whose buffers a block took over
        self.held: list = []  # leases on the inputs' storages while the call is traced (held by the tape)
        self.run = False  # the run cache's (see FusionServer.begin_capture)
        # Tensors that existed before the call and share an input's buffer (the argument
        # itself under another name, another view of it): what reads them reads a constant
        # that a buffer's identity cannot tell from the input, so the call is not captured.
        self.foreign: set[int] = set()
        # Storages other streams wrote meanwhile (held, not by id: a storage made later
        # could take the id of one collected, and read as another thread's write)
        self.outside_writes: set[Storage] = set()
        self.slot_of: dict[int, int] = {}  # id(buffer) -> slot, while the buffer is one
        self.slot_nbytes: list[int] = []
        self.keep: list = []  # every buffer and traced value seen: their ids stay theirs
        self.const_ids: set[int] = set()
        # Leases on the constants' storages, held by `keeper`, which the Capture keeps:
        # they end when both tape and capture are gone (or when the tape is given up).
        self.pinned: list = []
        self.keeper = Keeper()
        self.scalar_of: dict[int, int] = {}  # id(numpy value) -> traced scalar number
        self.scalars: list[tuple[Any, np.dtype]] = []  # (traced scalar, dtype), in first use order
        self.steps: list[list] = []
        self.broken = ""  # why it cannot be replayed

    # -- what the client and the context tell it ----------------------------------------
    def check_block(self, ops: list, entries: dict, ours: bool) -> None:
        """Called before a block runs while this tape records (`ours`: the block is the
        capturing stream's). The tape is void when its block reads a tensor in `foreign`,
        or a value another stream's block wrote while the call was traced (work done for
        the call on another thread, which a replay would see as a constant)."""
        if not ours:
            for op in ops:
                for out in outputs_of(op):
                    e = entries.get(out.id)
                    if e is not None:
                        self.outside_writes.add(e.storage)
            return
        for op in ops:
            for tid in tensor_inputs(op):
                if tid in self.foreign:
                    self.broken = f"tensor {tid}, read in the call, shares a buffer with an argument"
                elif self.outside_writes:
                    e = entries.get(tid)
                    if e is not None and e.storage in self.outside_writes:
                        self.broken = f"tensor {tid}, read in the call, was computed on another thread meanwhile"

    def traced_value(self, traced: Any, dtype: np.dtype) -> np.generic:
        """A new numpy value of traced scalar `traced` in `dtype`: a launch that passes
        this very object is replayed with the call's value in its place."""
        value = dtype.type(traced.value)  # (a new object: numpy keeps no cache of these)
        self.scalar_of[id(value)] = len(self.scalars)
        self.scalars.append((traced, dtype))
        self.keep.append(value)
        return value

    def allocated(self, buffer: Any, nbytes: int, ours: bool) -> None:
        key = id(buffer)
        if not ours:
            self.slot_of.pop(key, None)
            return
        if key not in self.slot_of:
            self.slot_of[key] = len(self.slot_nbytes)
            self.slot_nbytes.append(nbytes)
            self.keep.append(buffer)

    def taken_over(self, buffer: Any) -> None:
        """A block wrote its output into `buffer` in place of its dying owner's values."""
        k = self.input_of.get(id(buffer))
        if k is not None:
            self.taken.add(k)

    def kernel(self, kernel: cl.Kernel, grid: tuple, local: tuple | None, args: list, entries: dict) -> None:
        self.steps.append([KERNEL, kernel, grid, local, [self.source(a, entries) for a in args], None])

    def command(self, fn: Callable, args: tuple, kwargs: dict, entries: dict) -> None:
        self.steps.append([CALL, fn, [self.source(a, entries) for a in args],
                           {k: self.source(v, entries) for k, v in kwargs.items()}, None, None])

    def record(self, record: tuple) -> None:
        """A launch's record (kind, ops, bindings, name, items): it belongs to the last
        command, or stands alone (user code that enqueued on its own)."""
        if self.steps and self.steps[-1][-1] is None:
            self.steps[-1][-1] = record
        else:
            self.steps.append([CALL, None, [], {}, None, record])

    # -- sources ----------------------------------------------------------------------------
    def source(self, value: Any, entries: dict) -> tuple:
        if isinstance(value, _MEMORY):
            key = id(value)
            j = self.slot_of.get(key)
            if j is not None:
                return (SLOT, j)
            k = self.input_of.get(key)
            if k is not None:
                return (INPUT, k)
            self.hold(value, entries)
            return (CONST, value)
        if isinstance(value, np.generic):
            s = self.scalar_of.get(id(value))
            return (CONST, value) if s is None else (SCALAR, s)
        if isinstance(value, cla.Array):
            return (ARRAY, self.source(value.base_data, entries), value.shape, value.dtype, value.offset,
                    value.strides)
        if type(value) in (list, tuple):
            parts = [self.source(v, entries) for v in value]
            if all(p[0] == CONST for p in parts):
                return (CONST, value)  # passed as it is (the same object each call)
            return (SEQ, type(value), parts)
        return (CONST, value)

    def hold(self, buffer: Any, entries: dict) -> Storage | None:
        """Keep a constant buffer for the capture's life: its storage, if a tensor's, is
        pinned (never recycled, whatever becomes of the tensor); a run's tape that meets
        a tensor's buffer here is broken instead."""
        key = id(buffer)
        if key in self.const_ids:
            return next((lease.storage for lease in self.pinned if lease.storage.buffer is buffer), None)
        self.const_ids.add(key)
        self.keep.append(buffer)
        for e in entries.values():
            if e.storage.buffer is buffer:
                if self.run:
                    # A run's blocks read tensors through its inputs alone. One read by
                    # reference (seen only after an interrupt's recovery reshuffled the
                    # queues) could be another value at the next replay: not captured.
                    self.broken = self.broken or f"a block reads tensor {e.ir.id}, not one of the run's inputs"
                    return None
                self.pinned.append(self._lease(e.storage, self.keeper))
                return e.storage
        return None


class Capture:
    """A finished tape: what a replay enqueues, and where its outputs live."""

    def __init__(self, tape: Tape, outputs: list[tuple], arg_types: dict):
        self.name = tape.name
        self.note = f"replayed by clients.jit: {tape.name}"  # (inspect()'s explanation of its launches)
        self.generation = tape.generation
        self.n_inputs = len(tape.inputs)
        self.aliasing = tape.aliasing
        self.distinct = self.aliasing == tuple(range(len(self.aliasing)))  # no two inputs share a storage
        self.sizes = tape.sizes
        self.scalars = tape.scalars
        self.slot_nbytes = list(tape.slot_nbytes)
        # Per output: (source, nbytes, strides, offset, contiguous): its entry, made directly
        # (the layout was checked against its buffer when the trace made it).
        self.outputs = [(src, nbytes, tuple(strides), offset,
                         offset == 0 and tuple(strides) == contiguous_strides(shape))
                        for src, nbytes, shape, _, strides, offset in outputs]
        out_slots = {src[1] for src, *_ in outputs if src[0] == SLOT}
        # The inputs whose buffers it takes over: for an output, or a value that dies in the call
        self.donated = sorted(tape.taken.union(src[1] for src, *_ in outputs if src[0] == DONATED))
        self.scratch = [j for j in range(len(self.slot_nbytes)) if j not in out_slots]
        # A replay appends the argument numbers 0, 1, ... to its list of buffers (inputs,
        # then slots) and to its scalars: each kernel's arguments are then one itemgetter
        # call away, (number, value, ...) as pyopencl takes them (0.2 us a kernel on PoCL,
        # against 0.7 for pairing them with zip and chain).
        self.n_buffers = self.n_inputs + len(self.slot_nbytes)
        self.n_scalars = len(tape.scalars)
        self.steps = [self._compile(step, arg_types) for step in tape.steps]
        self.arg_numbers = range(1 + max((len(step[4]) for step in tape.steps if step[0] == KERNEL), default=0))
        self.launches = sum(1 for step in tape.steps if step[-1] is not None)
        self.keeper = tape.keeper  # (its constants' leases end once this and the tape are collected)

    def _compile(self, step: list, arg_types: dict) -> tuple:
        record = step[-1]
        if step[0] == CALL:
            args, kwargs = _call_sources(step, self.n_inputs)
            return (CALL, step[1], args, kwargs, record)
        _, kernel, grid, local, sources, _ = step
        clone = cl.Kernel(kernel_program(kernel), kernel.function_name)
        types = arg_types.get(kernel.function_name)
        buffers, scalars, constants = [], [], []
        for i, src in enumerate(sources):
            kind = src[0]
            if kind == INPUT:
                buffers.append((i, src[1]))
            elif kind == SLOT:
                buffers.append((i, self.n_inputs + src[1]))
            elif kind == SCALAR:
                scalars.append((i, src[1]))
            else:
                value = src[1]
                if type(value) in (int, float) and types and types[i] is not None:
                    value = np.dtype(types[i]).type(value)
                constants.append((i, value))
        # (set once, numpy scalars as bytes: pyopencl's generic path takes 13 to 16 us per
        # scalar on PoCL, and a batch captured for a few replays has 64 of them)
        scalar = [isinstance(value, np.generic) for _, value in constants]
        _set_scalar_args(clone, tuple(_pairs(itertools.compress(constants, scalar))))
        _set_memory_args(clone, tuple(_pairs(itertools.compress(constants, map(not_, scalar)))))
        return (KERNEL, clone, grid, local, _flat_args(buffers, self.n_buffers),
                _flat_args(scalars, self.n_scalars), record)


def _flat_args(args: list[tuple[int, int]], numbers_at: int) -> Callable[[list], tuple] | None:
    """For (argument number, position of its value) pairs: a getter of (number, value,
    ...) from a list of values followed by the numbers 0, 1, ... at `numbers_at` (None
    for no arguments)."""
    if not args:
        return None
    return itemgetter(*_pairs((numbers_at + i, at) for i, at in args))


def aliasing_of(storages: list[Storage]) -> tuple[int, ...]:
    """For each storage, the position of the first one that is the same object."""
    return tuple(next(j for j, s in enumerate(storages) if s is st) for st in storages)


def materialize(src: tuple, buffers: list, scalars: list, queue: cl.CommandQueue) -> Any:
    """The value of a recorded argument in this call."""
    kind = src[0]
    if kind == INPUT or kind == SLOT:  # (slots numbered after the inputs: see _call_sources)
        return buffers[src[1]]
    if kind == SCALAR:
        return scalars[src[1]]
    if kind == ARRAY:
        _, data, shape, dtype, offset, strides = src
        return cla.Array(queue, shape, dtype, data=materialize(data, buffers, scalars, queue), offset=offset,
                         strides=strides)
    if kind == SEQ:
        return src[1](materialize(s, buffers, scalars, queue) for s in src[2])
    return src[1]


def _call_sources(step: tuple, n_inputs: int) -> tuple:
    """A CALL step's sources with slots numbered after the inputs (as `buffers` holds them)."""
    def shift(src: tuple) -> tuple:
        kind = src[0]
        if kind == SLOT:
            return (SLOT, n_inputs + src[1])
        if kind == ARRAY:
            return (ARRAY, shift(src[1]), *src[2:])
        if kind == SEQ:
            return (SEQ, src[1], [shift(s) for s in src[2]])
        return src

    return [shift(s) for s in step[2]], {k: shift(v) for k, v in step[3].items()}


def replay(ctx, capture: Capture, ins: list[Entry], in_storages: list[Storage], scalars: list,
           out_irs: list[TensorIr]) -> None:
    """Enqueue `capture` for inputs `ins` (their storages `in_storages`) and traced scalar
    values `scalars` (numpy values of the dtypes the trace used), writing `out_irs` (their
    handles exist already).

    The outputs' entries are made first, as values still to be written whose writer is in
    no queue: an interrupt anywhere from there on fails them (the server's recovery), and
    buffers not yet held go back to the pool. A failure fails this call's outputs only."""
    entries = ctx.entries
    storages: dict = {}
    buffers = list(map(BUFFER_OF, in_storages))
    donated: dict = {}  # input number -> (its storage, the storage that takes its buffer over)
    for ir, (src, nbytes, strides, offset, contiguous) in zip(out_irs, capture.outputs):
        kind = src[0]
        if kind == SLOT:
            st = storages.get(src[1])
            if st is None:
                st = storages[src[1]] = Storage(nbytes, PENDING)
                st.writer = ir.id
        elif kind == DONATED:  # the input's buffer taken over, as the traced block did (below)
            # (once per input: a value and the views of it that the user holds share it)
            taker = donated.get(src[1])
            if taker is None:
                st = Storage(nbytes, PENDING)
                st.writer = ir.id
                donated[src[1]] = (in_storages[src[1]], st)
            else:
                st = taker[1]
        elif kind == INPUT:
            st = in_storages[src[1]]
        elif kind == CONST:
            st = src[1]
        else:
            st = Storage(nbytes, READY)
        entries[ir.id] = Entry(ir, st, strides, offset, contiguous)
    # Only once every output has its entry (what an interrupt before leaves, the recovery
    # fails whole, and a donor keeps its buffer for the next try).
    for donor, st in donated.values():
        ctx.take_over(donor, st)
    written = list(storages.values())
    if donated:
        written += [st for _, st in donated.values()]
    if FAILED in map(STATUS_OF, in_storages):
        e = next(e for e in ins if e.storage.status == FAILED)
        ctx.fail(written, after_failed_input(f"clients.jit call of {capture.name}", e.ir.id, e.storage.error))
        return
    pool = ctx.pool
    nbytes = capture.slot_nbytes
    for j in range(len(nbytes)):
        st = storages.get(j)
        buffers.append(ctx.allocate(st) if st is not None else pool.alloc(nbytes[j]))
    numbers = capture.arg_numbers
    buffers.extend(numbers)  # (see Capture.n_buffers)
    scalars = [*scalars, *numbers] if capture.n_scalars else scalars
    queue = ctx.queue
    recorders = ctx.recorders
    n_inputs = capture.n_inputs
    event = None
    try:
        for step in capture.steps:
            if step[0] == KERNEL:
                _, kernel, grid, local, memory_args, scalar_args, record = step
                if memory_args is not None:
                    _set_memory_args(kernel, memory_args(buffers))
                if scalar_args is not None:
                    _set_scalar_args(kernel, scalar_args(scalars))
                event = cl.enqueue_nd_range_kernel(queue, kernel, grid, local)
            else:
                _, fn, arg_srcs, kw_srcs, record = step
                if fn is not None:
                    args = [materialize(s, buffers, scalars, queue) for s in arg_srcs]
                    kwargs = {k: materialize(s, buffers, scalars, queue) for k, s in kw_srcs.items()}
                    out = fn(queue, *args, **kwargs)
                    event = out if isinstance(out, cl.Event) else None
            if record is not None and recorders:
                kind, ops, bindings, name, items = record
                ctx.record_replayed(kind, ops, bindings, name, items, event, capture.note)
    except BaseException as exc:
        err = TensorFailedError(f"clients.jit call of {capture.name} failed: {exc!r}")
        err.__cause__ = exc if isinstance(exc, Exception) else None
        ctx.fail(written, err)
        if not isinstance(exc, Exception):
            raise
    else:
        ctx.counters["kernels_launched"] += capture.launches
        ctx.mark_ready(written)
        # Submitted now, not with the next command that flushes: a jitted call's read
        # comes in the next locked section, and the device runs them meanwhile.
        queue.flush()
    finally:  # (the in-order queue runs this call's kernels before any later user of these)
        for j in capture.scratch:
            pool.free(buffers[n_inputs + j], nbytes[j])
