"""The run cache: a thread's recurring runs of recorded ops, replayed as captures.

Numpy-style code repeats itself: a loop body, a request handler, a simulation tick records
the same few ops on new tensors and reads a result. Each time, the plan store spares the
fusers, but every op still costs its entry, its signature, its step through the store,
its retirement and its dead handle. The run cache spares all of that for a run that ends
in a read, a `sync()` or a `flush()`, or that fills a batch of the inbox on the way:

- A *run* is a thread's whole queue of recorded ops (element-wise ops, reductions, matmul,
  views)
  at such a point, with the thread's stream empty before it: the run is the only work
  the flush does for that thread. (A batch that recurs has its stream run first.)
- Its *key* holds each op with the tensors it reads renumbered (an earlier op of the run
  by position, a tensor from outside by order of first use), its scalar values (by
  their bits where equal values may differ: ir.BitScalar) and exact shapes, and the
  layout and storage size of each tensor from outside, which must be written already
  (not pending on another thread) and share storages as before.
- The first time a key is seen it is only noted. The second time, the run goes the usual
  way with its stream capturing (clients.jit's tape, capture.py), and the capture is kept
  under the key and which of the run's values are still held by the user (they are the
  capture's outputs; the others die with the run and are never written). From then on a
  run with that key and those live values is a replay: one enqueue per kernel, entries
  for the live values only, no op reaches a stream.

What the key leaves out is what a capture does not depend on: the tensor ids, and the
values in the buffers. What a capture depends on beyond its key (the server's mode,
fusers and settings) is its generation: a stale capture is dropped and the run is
captured again.
"""

from __future__ import annotations

import weakref
from collections import _count_elements
from collections.abc import Iterable
from itertools import chain, compress, count
from operator import itemgetter, not_
from sys import getrefcount
from types import NoneType
from typing import Any

from .handles import READY
from .ir import ElementwiseOp, MatmulOp, ReduceOp, TensorIr, ViewOp

# Keys seen once are forgotten past this many (runs that never recur would grow it);
# captures past this many, the oldest first.
MAX_SEEN = 4096
MAX_CAPTURES = 256
# Captures of one key and variant that could not be kept (a block failed, another thread
# wrote what the run read meanwhile) before it is left to the usual path for good.
MAX_CAPTURE_TRIES = 3
_ID = itemgetter(0)  # a TensorIr's id
_HANDLES = itemgetter(slice(2, None))  # the handles of a queued (sequence, op, *handles)
_OP = itemgetter(1)  # its op
_OUT = itemgetter(3)  # an ElementwiseOp's output
_OPERANDS = itemgetter(1)  # its operands
_STATIC = itemgetter(0, 2, 4, 5)  # its name, compute dtype, expression and parameters
_SHAPE_DTYPE = itemgetter(1, 2)  # a TensorIr's shape and dtype
_FLAT = {ElementwiseOp, ViewOp}  # the kinds of ops whose runs take the fast path of run_of


def _view_as_elementwise(op: ViewOp) -> tuple:
    """A view in the fields of an ElementwiseOp: (ViewOp, (source,), None, out, strides,
    offset); ViewOp in the place of a name, which no element-wise op has."""
    return (ViewOp, (op[0],), None, op[1], op[2], op[3])


_IS_INT = int.__instancecheck__


class _Gone:
    """What a missing drop ref stands for: a reference whose referent is gone."""


_GONE = weakref.ref(_Gone())  # (its referent died with the expression)
# The codes of ops' outputs and of inputs (see run_of), made once; a longer run takes
# the general path.
_CODES = tuple((n,) for n in range(8192))
_INPUT_CODES = tuple((-1 - k,) for k in range(8192))


def outliving(handles: list, held: dict, base: int | None = None) -> list[bool]:
    """For each handle (or None: dead), whether something beyond `held` (how many
    references to each, by id, the queue holds; none if absent) refers to it: its count
    past `base` (default _BASE), what the count is for a handle its list alone holds."""
    get = held.get
    base = _BASE if base is None else base
    # (a comprehension: 1.5 us for 16 handles and 21 for 256, against 3.1 and 37 for the
    # same test as a chain of maps over getrefcount, held.get, id and sub)
    return [h is not None and getrefcount(h) - get(id(h), 0) > base for h in handles]


def _list_only_count() -> int:
    """`outliving`'s base, measured through `outliving` itself: what getrefcount counts
    for an object held by a list alone differs between interpreters (the loop variable,
    the call's argument, borrowed references), and with the code that asks."""
    probe = [object()]
    return next(base for base in range(64) if not outliving(probe, {}, base)[0])


_BASE = _list_only_count()


# The same count, for checking after a replay that the handles judged dead are held by
# nothing else (a name of its own: a test that misjudges liveness through _BASE still
# meets the check).
_LIST_ONLY = next(map(getrefcount, [object()]))


def referred_beyond(handles: list) -> bool:
    """Whether anything beyond the list `handles` (no None in it) refers to one of them."""
    return any(map(_LIST_ONLY.__lt__, map(getrefcount, handles)))


class Run:
    """A thread's queue as the run cache sees it: its key, the tensors it reads from
    outside (in first-use order), its ops' outputs, and the captures kept for its key
    (by variant: Capture, or how many tries failed to make one)."""

    __slots__ = ("key", "inputs", "outputs", "captures", "dead")

    def __init__(self, key: tuple, inputs: list[int], outputs: list[TensorIr], captures: dict | None):
        self.key = key
        self.inputs = inputs
        self.outputs = outputs
        self.captures = captures
        # (ids, handles or None) of the outputs that die with the queue (see `liveness`)
        self.dead: tuple = ()

    def liveness(self, queue: Iterable, handle_refs: dict) -> tuple[tuple[int, ...], tuple[bool, ...]]:
        """Which handles outlive the queue: the positions of the live outputs (the values
        the run must write), and per input whether it is alive (a dead one's buffer may be
        taken over). A handle the queue holds (for an op that reads it) is alive if
        anything else refers to it; the dead outputs go to `dead`, with their handles
        (None for one already gone), which it holds until the server is done with them."""
        held: dict[int, int] = {}  # (a plain dict, counted in C: a Counter's init and misses run Python)
        _count_elements(held, map(id, chain.from_iterable(map(_HANDLES, queue))))
        # (a missing ref stands for a handle gone: _GONE's referent is None)
        outputs = [handle_refs.get(out[0], _GONE)() for out in self.outputs]
        alive = outliving(outputs, held)
        live = tuple(compress(count(), alive))
        if len(live) < len(outputs):
            dying = list(map(not_, alive))
            self.dead = (list(compress(map(_ID, self.outputs), dying)), list(compress(outputs, dying)))
        else:
            self.dead = ()
        inputs = [handle_refs.get(t, _GONE)() for t in self.inputs]
        return live, tuple(outliving(inputs, held))

    @property
    def produced(self) -> set[int]:
        """The ids the run's ops write."""
        return {out.id for out in self.outputs}


def run_of(queue: Iterable, entries: dict, tid: int | None = None,
           stream: int | None = None) -> tuple[tuple, list[int], list[TensorIr]] | None:
    """(key, inputs, outputs) of a queue of (sequence, op, *handles); None when the run
    cannot be cached (an op of another kind, a tensor from outside not written yet, nor
    pending on `stream`, if given) or does not write `tid`, if given."""
    ops = list(map(_OP, queue))
    kinds = set(map(type, ops))
    if NoneType in kinds:
        # A handle kept alive until the ops before it are registered (the old value of an
        # assignment's `x[k] = v`): no op of the run; its handle counts in `liveness`.
        ops = [op for op in ops if op is not None]
        kinds.discard(NoneType)
    if len(ops) < len(_CODES) and kinds <= _FLAT:
        if ViewOp in kinds:  # (a slice, a transpose: as an element-wise op with its layout for static part)
            ops = [op if type(op) is ElementwiseOp else _view_as_elementwise(op) for op in ops]
        key, code, inputs, outputs = _elementwise_run(ops)
        return _with_inputs(key, code, inputs, outputs, entries, tid, stream)
    # Tensor id -> (position,) of the op that writes it, or (-1 - input number,): tuples,
    # so that an operand mapped through `code` is an int only when it is a tensor from
    # outside seen for the first time (a Scalar maps to itself: its value is in the key).
    code: dict[int, tuple[int]] = {}
    get = code.get
    inputs: list[int] = []
    outputs: list[TensorIr] = []
    parts: list[Any] = []
    for n, op in enumerate(ops):
        kind = type(op)
        if kind is ElementwiseOp:
            operands = op[1]
            args = tuple(map(get, operands, operands))
            if int in map(type, args):
                args = _first_uses(args, code, inputs)
            out = op[3]
            # (name, compute, expr), params, (shape, dtype) of the output, operands
            parts.append((op[::2], op[5], out[1:], args))
        elif kind is ViewOp:
            out = op.out
            args = _first_uses((get(op.source, op.source),), code, inputs)
            parts.append(("view", op.strides, op.offset, out.shape, out.dtype, args))
        elif kind is ReduceOp or kind is MatmulOp:
            out = op.out
            reads = (op.input,) if kind is ReduceOp else (op.a, op.b)
            args = _first_uses(tuple(map(get, reads, reads)), code, inputs)
            extra = (op.name, op.axes, op.acc) if kind is ReduceOp else (op.compute,)
            parts.append((kind.__name__, extra, out.shape, out.dtype, args))
        else:
            return None
        code[out[0]] = (n,)
        outputs.append(out)
    return _with_inputs(tuple(parts), code, inputs, outputs, entries, tid, stream)


def _elementwise_run(ops: list) -> tuple[tuple, dict, list[int], list[TensorIr]]:
    """`run_of`'s key, codes, inputs and outputs for a run of element-wise ops alone,
    made field by field over all the ops at once (no Python code per op)."""
    outputs = list(map(_OUT, ops))
    code = dict(zip(map(_ID, outputs), _CODES))
    operands = list(map(_OPERANDS, ops))
    flat = list(chain.from_iterable(operands))
    mapped = list(map(code.get, flat, flat))
    inputs = list(dict.fromkeys(filter(_IS_INT, mapped)))  # (tensors from outside, in first-use order)
    if inputs:
        code.update(zip(inputs, _INPUT_CODES))
        mapped = list(map(code.get, flat, flat))
    key = (tuple(map(_STATIC, ops)), tuple(map(_SHAPE_DTYPE, outputs)), tuple(map(len, operands)), tuple(mapped))
    return key, code, inputs, outputs


def _with_inputs(key: tuple, code: dict, inputs: list[int], outputs: list[TensorIr], entries: dict,
                 tid: int | None, stream: int | None) -> tuple[tuple, list[int], list[TensorIr]] | None:
    """`run_of`'s result: the key with the layouts of the inputs, which must be written
    (or pending on `stream`, which is flushed before the run)."""
    if tid is not None and code.get(tid, (-1,))[0] < 0:
        return None
    layouts = []
    storages = []
    for t in inputs:
        e = entries.get(t)
        if e is None:
            return None
        st = e.storage
        if not _is_written(st) and (stream is None or st.stream != stream):
            return None
        layouts.append((e.ir.dtype, e.ir.shape, e.strides, e.offset, st.nbytes))
        storages.append(st)
    if len(storages) > 1 and len(set(map(id, storages))) < len(storages):
        layouts.append(tuple(next(j for j, s in enumerate(storages) if s is st) for st in storages))
    return (key, tuple(layouts)), inputs, outputs


def _is_written(storage: Any) -> bool:
    """Whether a storage holds its values (not pending, failed or never given a buffer)."""
    return storage.status == READY and storage.buffer is not None


def written(inputs: list[int], entries: dict) -> bool:
    """Whether the tensors `inputs` are all written (after a flush that was to write them)."""
    for t in inputs:
        e = entries.get(t)
        if e is None or not _is_written(e.storage):
            return False
    return True


def _first_uses(args: tuple, code: dict, inputs: list[int]) -> tuple:
    """`args` with the tensors from outside seen for the first time (ints) numbered."""
    out = []
    for a in args:
        if type(a) is int:
            seen = code.get(a)  # (an op may read it twice)
            if seen is None:
                seen = code[a] = (-1 - len(inputs),)
                inputs.append(a)
            a = seen
        out.append(a)
    return tuple(out)


class RunCache:
    """Keys seen once, and the captures of keys seen again (module docstring)."""

    def __init__(self) -> None:
        # The hashes of keys seen once, not the keys: a program that never repeats itself
        # notes a key per batch of 64 ops (11 kB each, kept by the thousand). Two keys of
        # one hash only make the second captured a time early.
        self.seen: set[int] = set()
        self.captures: dict[tuple, dict] = {}  # key -> {variant: Capture, or failed tries}

    def find(self, queue: Iterable, entries: dict, tid: int | None = None, stream: int | None = None) -> Run | None:
        """The queue as a run (writing `tid`, if given; reading values pending on `stream`,
        if given); None when it cannot be cached or its key is new (noted)."""
        found = run_of(queue, entries, tid, stream)
        if found is None:
            return None
        key, inputs, outputs = found
        captures = self.captures.get(key)
        if captures is None:
            noted = hash(key)
            if noted not in self.seen:
                if len(self.seen) >= MAX_SEEN:
                    self.seen.clear()
                self.seen.add(noted)
                return None
            self.seen.discard(noted)
            if len(self.captures) >= MAX_CAPTURES:
                self.captures.pop(next(iter(self.captures)))
            captures = self.captures[key] = {}
        return Run(key, inputs, outputs, captures)

    def clear(self) -> None:
        self.seen.clear()
        self.captures.clear()
