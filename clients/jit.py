"""`clients.jit`: trace a function once per signature, then replay its kernels.

    @clients.jit
    def step(x, w, lr):
        return x - lr * (x @ w)

The first call with a signature runs the function on lazy tensors, as any call does,
and captures what its blocks enqueued (fusion_server/capture.py). Later calls with that
signature replay the capture with their own tensors: no per-op Python, no fuser, one
locked section, one launch per block, new output tensors, intermediates from the pool.

A signature is, for each argument, in the structure of nested tuples, lists and dicts:

- a tensor: its shape, dtype, strides and offset (a view of another layout traces
  again; the built kernels are reused, so a new signature costs host time only);
- a Python int, float or complex: its type and, for an int, whether it fits int32 or int64. Its
  value becomes a kernel argument: a new value never traces again;
- a static argument (`static_argnums`, `static_argnames`), a bool, a numpy scalar,
  None, a string or any other hashable value: its value (a new one traces again).

numpy arrays are uploaded at each call and passed as tensors. Tensors the function
closes over, and values it makes from host data, are captured by reference, as in JAX:
rebinding a global name to another tensor after the first call is not seen. Reading
values inside a traced function (`numpy()`, `float()`, `bool()`, a boolean mask,
`nonzero`, `sync()`) raises a FusionError naming the function and the read; so does
Python control flow on a traced scalar. A jitted function called from inside another's
trace is traced inline.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections import OrderedDict
from collections.abc import Callable
from operator import attrgetter
from typing import Any

import numpy as np

from fusion_server.ir import TensorIr

from . import _functions as F
from . import _traced
from ._indexing import _rebind
from .devices import client_for
from .tensor import Tensor

__all__ = ["JitFunction", "jit"]

_get_ident = threading.get_ident
_tuple_new = tuple.__new__
MAX_CAPTURES = 256  # per function; the least recently used goes first
_RETRACE = object()
_LAYOUT = attrgetter("shape", "dtype", "_strides", "_offset")  # a tensor argument's part of the key
_TID = attrgetter("_id")
_TENSORS = {Tensor}


class _Uncaptured(Exception):  # noqa: N818 (a signal inside _trace)
    """The traced call cannot be captured: it runs as traced, and the next call traces again."""


class _Captured:
    """A capture with what the client side needs to call it: how to build the result,
    the outputs' layouts, the rebound inputs, the classes derived scalars must keep."""

    __slots__ = ("capture", "client", "result", "layouts", "rebinds", "derived")

    def __init__(self, capture, client, result, layouts, rebinds, derived):
        self.capture = capture
        self.client = client
        self.result = result  # the result's structure (see _Outputs.build)
        self.layouts = layouts  # per output: (shape, dtype, strides or None, offset)
        self.rebinds = rebinds  # (input number, output number): x[key] = v on an input
        self.derived = derived  # (scalar number, class) for scalars computed from arguments


class _Arguments:
    """One call's arguments, flattened: its signature key, tensors and Python scalars."""

    __slots__ = ("key", "tensors", "scalars", "names", "uploads", "aliases")

    def __init__(self) -> None:
        self.aliases: list[Tensor] = []  # while tracing: the function's own handles of `tensors`
        self.key: list = []
        self.tensors: list[Tensor] = []
        self.scalars: list = []
        self.names: list[str] = []
        self.uploads: dict[int, Tensor] = {}  # id of a numpy argument -> its tensor


class JitFunction:
    """A function traced once per signature and replayed after (see the module docstring)."""

    def __init__(self, fn: Callable, static_argnums: int | tuple[int, ...] = (),
                 static_argnames: str | tuple[str, ...] = ()):
        if not callable(fn):
            raise TypeError(f"clients.jit takes a function, not {type(fn).__name__}")
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.name = getattr(fn, "__qualname__", None) or repr(fn)
        nums = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
        names = (static_argnames,) if isinstance(static_argnames, str) else tuple(static_argnames)
        try:
            params = list(inspect.signature(fn).parameters.values())
        except (TypeError, ValueError):  # a builtin without a signature: positions only
            params = []
        positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        for n in nums:
            if not -len(positional) <= n < len(positional) and positional:
                raise ValueError(f"static_argnums {n} is out of range for {self.name}'s "
                                 f"{len(positional)} positional parameters")
        nums = tuple(n % len(positional) if positional and n < 0 else n for n in nums)
        known = {p.name for p in params}
        for name in names:
            if params and name not in known and not any(p.kind == p.VAR_KEYWORD for p in params):
                raise ValueError(f"static_argnames {name!r} is not a parameter of {self.name}")
        # Either spelling of a static parameter marks both (as in JAX).
        self.static_nums = frozenset(nums) | {positional.index(n) for n in names if n in positional}
        self.static_names = frozenset(names) | {positional[n] for n in nums if n < len(positional)}
        self.positional = positional
        self._captures: OrderedDict[tuple, _Captured] = OrderedDict()

    def __get__(self, obj, owner=None):
        """As a method: bound to the instance (which is an argument like the others)."""
        return self if obj is None else functools.partial(self, obj)

    def __repr__(self) -> str:
        return f"<clients.jit of {self.name}: {len(self._captures)} captures>"

    # -- calls ------------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if _traced.tracing and _traced.current() is not None:
            return self.fn(*args, **kwargs)  # inside another trace: traced inline
        call = self._flatten(args, kwargs)
        key = tuple(call.key)
        captured = self._captures.get(key)
        if captured is not None:
            scalars = self._scalar_values(captured, call)
            if scalars is None:  # a value the trace's decisions do not hold for (an int too wide, say)
                return self._run(args, kwargs, call)
            out = self._replay(captured, call, scalars)
            if out is not _RETRACE:
                self._captures.move_to_end(key)
                return out
        return self._trace(key, args, kwargs, call)

    def _run(self, args: tuple, kwargs: dict, call: _Arguments) -> Any:
        """A call that is not captured: the function runs on lazy tensors as usual."""
        if call.uploads:
            args, kwargs = self._substitute(args, kwargs, call, traced=False)
        return self.fn(*args, **kwargs)

    def _scalar_values(self, captured: _Captured, call: _Arguments) -> list | None:
        """The kernel arguments of this call's traced scalars, in the dtypes the trace
        used; None when one cannot take this call's value as the trace's did."""
        if not captured.capture.scalars:
            return []
        values = call.scalars
        try:
            python = [traced.fn(values) for traced, _ in captured.capture.scalars]
            for s, cls in captured.derived:
                if _traced.scalar_class(python[s]) != cls:
                    return None
            return [dtype.type(v) for v, (_, dtype) in zip(python, captured.capture.scalars)]
        except (OverflowError, ZeroDivisionError, ValueError, TypeError):
            return None

    def _replay(self, captured: _Captured, call: _Arguments, scalars: list) -> Any:
        """The result of replaying `captured`; _RETRACE when the call must be traced instead."""
        client = captured.client
        irs = []
        handles = []
        make = Tensor._make
        ids = F._ids
        result = F._result
        for shape, dtype, strides, offset in captured.layouts:
            tid = next(ids)
            irs.append(_tuple_new(TensorIr, (tid, shape, dtype)))
            handles.append(result(client, tid, shape, dtype) if strides is None and not offset
                           else make(client, tid, shape, dtype, strides, offset))
        input_ids = list(map(_TID, call.tensors))
        capture = captured.capture
        # (the previous calls' dropped outputs are released once this call's kernels are enqueued)
        if not client.call(lambda server: server.replay(capture, input_ids, scalars, irs), drain_after=True):
            return _RETRACE
        for k, j in captured.rebinds:
            _rebind(call.tensors[k], handles[j])
        return _build(captured.result, handles, call)

    def _trace(self, key: tuple, args: tuple, kwargs: dict, call: _Arguments) -> Any:
        client = F._client_of(call.tensors) if call.tensors else client_for()
        me = _get_ident()
        # The function sees its own handles of the arguments (views with their layouts):
        # a tensor it reads by another name (a global that is also an argument) is then told
        # apart from the argument, and is a constant. (See end_capture's `foreign`.)
        call.aliases = [F._view(t, t.shape, t.strides_elements, t._offset) for t in call.tensors]
        input_ids = [t._id for t in call.aliases]
        tape = client.call(lambda server: server.begin_capture(me, self.name, input_ids))
        if tape is None:  # an input failed: the call runs uncaptured (its outputs fail)
            return self._run(args, kwargs, call)
        traced_scalars = not client.server.fuser_factories  # (see _flatten)
        targs, tkwargs = self._substitute(args, kwargs, call, traced=traced_scalars)
        _traced.tracing[me] = _traced.Trace(self.name, tape)
        ended = False
        try:
            try:
                result = self.fn(*targs, **tkwargs)
            finally:
                _traced.tracing.pop(me, None)
            outs: list[Tensor] = []
            structure = _structure(result, outs, {id(t): k for k, t in enumerate(call.aliases)})
            rebinds = []
            for k, t in enumerate(call.aliases):
                if t._id != input_ids[k]:  # x[key] = v, x += 1 on an argument: it is rebound
                    rebinds.append((k, len(outs)))
                    outs.append(t)
            if any(t._client is not client for t in outs):  # (a result on another device)
                raise _Uncaptured
            ended = True
            capture = client.call(lambda server: server.end_capture(me, tape, [t._id for t in outs]))
        except _Uncaptured:
            client.call(lambda server: server.abort_capture(me, tape))
            capture = None
        except BaseException:
            if not ended:
                client.call(lambda server: server.abort_capture(me, tape))
            raise
        for k, j in rebinds:  # the caller's handle takes the argument's new value
            _rebind(call.tensors[k], outs[j])
            outs[j] = call.tensors[k]
        if capture is not None:
            derived = [(s, _traced.scalar_class(traced.value)) for s, (traced, _) in enumerate(capture.scalars)
                       if traced.derived]
            layouts = [(t.shape, t.dtype, t._strides, t._offset) for t in outs]
            self._captures[key] = _Captured(capture, client, structure, layouts, rebinds, derived)
            while len(self._captures) > MAX_CAPTURES:
                self._captures.popitem(last=False)
        return _build(structure, outs, call)

    # -- arguments ----------------------------------------------------------------------------
    def _flatten(self, args: tuple, kwargs: dict) -> _Arguments:
        call = _Arguments()
        static_nums = self.static_nums
        if not static_nums and set(map(type, args)) == _TENSORS:  # (the common call: tensors alone)
            call.tensors = list(args)
            call.key = list(map(_LAYOUT, args))  # (as _leaf_key's first case)
        else:
            positional = self.positional
            for i, a in enumerate(args):
                if type(a) is Tensor and i not in static_nums:  # (the common argument: _leaf_key's first case)
                    call.tensors.append(a)
                    call.key.append(_LAYOUT(a))
                    continue
                name = positional[i] if i < len(positional) else f"args[{i}]"
                if i in static_nums:
                    call.key.append(_static(a, name, self.name))
                else:
                    _leaf_key(a, call, name)
        if kwargs:
            for name in sorted(kwargs):
                a = kwargs[name]
                call.key.append(name)
                if name in self.static_names:
                    call.key.append(_static(a, name, self.name))
                else:
                    _leaf_key(a, call, name)
        if call.tensors:
            client = call.tensors[0]._client
            call.key.append(id(client))
            # Which arguments are the same tensor (f(a, a) and f(a, b) are two captures).
            tensors = call.tensors
            if len(tensors) > 1 and len(set(map(id, tensors))) < len(tensors):
                call.key.append(tuple(next(j for j, u in enumerate(tensors) if u is t) for t in tensors))
            if call.scalars and client.server.fuser_factories:
                # A custom fuser may decide on a scalar's value (the plan store does not
                # follow such streams either): scalars are then static.
                call.key.append(tuple(call.scalars))
        return call

    def _substitute(self, args: tuple, kwargs: dict, call: _Arguments, traced: bool) -> tuple[tuple, dict]:
        """The arguments with numpy arrays replaced by their tensors and, when `traced`,
        Python scalars by their stand-ins."""
        counter = iter(range(len(call.scalars)))
        names = iter(call.names)

        def sub(a: Any, static: bool) -> Any:
            if static:
                return a
            t = type(a)
            if t is float or t is int or t is complex:
                k = next(counter)
                name = next(names)
                return _traced.argument(a, k, name) if traced else a
            if t is tuple or t is list:
                return t(sub(v, False) for v in a)
            if t is dict:
                return {k: sub(a[k], False) for k in a}
            if t is np.ndarray:
                a = call.uploads[id(a)]
            if type(a) is Tensor and call.aliases:
                return call.aliases[next(k for k, u in enumerate(call.tensors) if u is a)]
            return a

        new_args = tuple(sub(a, i in self.static_nums) for i, a in enumerate(args))
        new_kwargs = {name: sub(kwargs[name], name in self.static_names) for name in sorted(kwargs)}
        return new_args, new_kwargs


def _static(value: Any, name: str, function: str) -> tuple:
    try:
        hash(value)
    except TypeError:
        raise TypeError(f"clients.jit: static argument {name!r} of {function} must be hashable, "
                        f"not {type(value).__name__}") from None
    return ("static", type(value), value)


def _leaf_key(a: Any, call: _Arguments, name: str) -> None:
    """Append argument `a`'s part of the signature, its tensors and its scalars."""
    t = type(a)
    if t is Tensor:
        call.tensors.append(a)
        call.key.append(_LAYOUT(a))
    elif t is float or t is complex:
        call.scalars.append(a)
        call.names.append(name)
        call.key.append(t)
    elif t is int:
        call.scalars.append(a)
        call.names.append(name)
        call.key.append(_traced.scalar_class(a))
    elif t is tuple or t is list:
        call.key.append((t, len(a)))
        for k, v in enumerate(a):
            _leaf_key(v, call, f"{name}[{k}]")
    elif t is dict:
        call.key.append((dict, tuple(a)))
        for k in a:
            _leaf_key(a[k], call, f"{name}[{k!r}]")
    elif t is np.ndarray:
        tensor = F.asarray(a)
        call.uploads[id(a)] = tensor
        call.tensors.append(tensor)
        call.key.append((tensor.shape, tensor.dtype, None, 0))
    else:
        try:
            hash(a)
        except TypeError:
            raise TypeError(f"clients.jit: argument {name!r} is a {t.__name__}, which is neither a tensor, "
                            "a Python scalar, a tuple, list or dict of them, nor hashable (to be static)") from None
        call.key.append(("static", t, a))


def _structure(result: Any, outs: list[Tensor], inputs: dict[int, int]) -> tuple:
    """The result's structure, its tensors appended to `outs` (see _build); an argument
    returned as it is (`inputs`: its id -> its number) is that argument again."""
    t = type(result)
    if t is Tensor:
        k = inputs.get(id(result))
        if k is not None:
            return ("input", k)
        outs.append(result)
        return ("tensor", len(outs) - 1)
    if t is _traced.TracedScalar:
        return ("scalar", result.fn)
    if t is tuple or t is list:
        return ("seq", t, [_structure(v, outs, inputs) for v in result])
    if t is dict:
        return ("dict", [(k, _structure(v, outs, inputs)) for k, v in result.items()])
    if t is np.ndarray:
        raise TypeError("clients.jit: the traced function returned a numpy array; return tensors "
                        "(values read inside a trace are not the next call's)")
    return ("value", result)


def _build(structure: tuple, outs: list[Tensor], call: _Arguments) -> Any:
    """The result of a call: its output tensors and scalars in the traced structure."""
    kind = structure[0]
    if kind == "tensor":
        return outs[structure[1]]
    if kind == "input":
        return call.tensors[structure[1]]
    if kind == "scalar":
        return structure[1](call.scalars)
    if kind == "seq":
        return structure[1](_build(s, outs, call) for s in structure[2])
    if kind == "dict":
        return {k: _build(s, outs, call) for k, s in structure[1]}
    return structure[1]


def jit(fn: Callable | None = None, *, static_argnums: int | tuple[int, ...] = (),
        static_argnames: str | tuple[str, ...] = ()) -> Any:
    """`fn` traced once per signature and replayed after; usable as `@jit` or
    `@jit(static_argnames=...)`. See the module docstring for what a signature is."""
    if fn is None:
        return lambda f: JitFunction(f, static_argnums, static_argnames)
    return JitFunction(fn, static_argnums, static_argnames)

