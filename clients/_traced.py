"""What a `clients.jit` trace needs from the rest of `clients`: which threads trace, and
the stand-ins for the traced function's Python scalar arguments.

A Python scalar argument that is not static reaches the function as a `TracedScalar`:
used as an operand of a tensor operation it becomes a kernel argument whose value each
call supplies, so a new value never traces again. Arithmetic between traced scalars and
Python numbers gives traced scalars too (`lr * 0.5`), evaluated per call. Anything that
would turn it into a Python value the trace could not replay (a condition, `float()`, an
index, a shape) raises a FusionError that says so.
"""

from __future__ import annotations

import operator
import sys
import threading
from collections.abc import Callable
from typing import Any

from fusion_server.errors import FusionError

_get_ident = threading.get_ident
# Thread id -> the trace it runs. Read on every read of a tensor's values (empty: falsy).
tracing: dict[int, Trace] = {}


class Trace:
    """One thread's trace in progress: the function's name and the tape of its stream."""

    __slots__ = ("name", "tape")

    def __init__(self, name: str, tape: Any):
        self.name = name
        self.tape = tape


def current() -> Trace | None:
    return tracing.get(_get_ident()) if tracing else None


def _call_site() -> tuple[str, str]:
    """Where the user's code called into this library: the library function it called
    (`Tensor.__bool__`, `nonzero`) and the file and line of the call."""
    frame = sys._getframe(2)
    entry = "?"
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if not (module == "clients" or module.startswith(("clients.", "fusion_server"))):
            return entry, f"{frame.f_code.co_filename}:{frame.f_lineno}"
        entry = getattr(frame.f_code, "co_qualname", frame.f_code.co_name)
        frame = frame.f_back
    return entry, "?"


def refuse_read(what: str) -> None:
    """Raise if the calling thread is tracing: `what` (a read of values, a wait) cannot be
    captured, since the trace's values are not those of later calls."""
    trace = tracing.get(_get_ident())
    if trace is not None:
        entry, where = _call_site()
        raise FusionError(
            f"clients.jit: {trace.name} {what} ({entry}, at {where}) while it is traced; a traced function "
            "cannot depend on the values of its tensors: read them after the call, or compute with tensors "
            "(where(), a mask as a tensor operand)")


def scalar_class(value: Any) -> tuple:
    """What of a Python scalar's value the library's decisions look at: its type and,
    for an int, the narrowest of int32, int64 and wider that holds it (comparisons with
    an integer tensor widen on it)."""
    if type(value) is int:
        return (int, 0 if -2**31 <= value < 2**31 else 1 if -2**63 <= value < 2**63 else 2)
    return (type(value),)


def _binary(op: Callable, symbol: str, swapped: bool = False):
    def method(self: TracedScalar, other: Any):
        if type(other) is TracedScalar:
            a, b = (other, self) if swapped else (self, other)
            fa, fb = a.fn, b.fn
            return TracedScalar(op(a.value, b.value), lambda v: op(fa(v), fb(v)), f"({a.name} {symbol} {b.name})")
        if type(other) in (bool, int, float):
            fn = self.fn
            if swapped:
                return TracedScalar(op(other, self.value), lambda v: op(other, fn(v)),
                                    f"({other!r} {symbol} {self.name})")
            return TracedScalar(op(self.value, other), lambda v: op(fn(v), other),
                                f"({self.name} {symbol} {other!r})")
        return NotImplemented  # a tensor: its reflected operator takes it

    return method


def _unary(op: Callable, form: str):
    def method(self: TracedScalar):
        fn = self.fn
        return TracedScalar(op(self.value), lambda v: op(fn(v)), form.format(self.name))

    return method


class TracedScalar:
    """A Python scalar argument of a traced function (see the module docstring).

    `value` is the traced call's, `fn(values)` computes it from a call's scalar arguments.
    """

    __slots__ = ("value", "fn", "name")

    def __init__(self, value: bool | int | float, fn: Callable[[tuple], Any], name: str):
        self.value = value
        self.fn = fn
        self.name = name

    @property
    def derived(self) -> bool:
        """Computed from the arguments (`lr * 0.5`), not one of them."""
        return type(self.fn) is not operator.itemgetter

    def value_in(self, dtype) -> Any:
        """The numpy value of this scalar in `dtype` that a launch takes as an argument."""
        trace = current()
        if trace is None:
            raise FusionError(f"clients.jit: the traced scalar {self.name} was used outside the trace "
                              "it belongs to (kept in a global, say)")
        return trace.tape.traced_value(self, dtype)

    def _refuse(self, what: str):
        raise FusionError(
            f"clients.jit: the scalar argument {self.name} is traced (a new value does not trace again), so "
            f"it cannot be {what} (at {_call_site()[1]}); make it static (static_argnames=...) or compute "
            "with it as a tensor operand")

    def __bool__(self):
        self._refuse("used as a condition")

    def __float__(self):
        self._refuse("converted to a Python float")

    def __int__(self):
        self._refuse("converted to a Python int")

    def __index__(self):
        self._refuse("used as an index or a size")

    def __complex__(self):
        self._refuse("converted to a Python complex")

    def _compare(self, other):
        self._refuse("compared in Python")

    __lt__ = __le__ = __gt__ = __ge__ = __eq__ = __ne__ = _compare
    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"TracedScalar({self.name}, traced with {self.value!r})"

    __add__ = _binary(operator.add, "+")
    __radd__ = _binary(operator.add, "+", True)
    __sub__ = _binary(operator.sub, "-")
    __rsub__ = _binary(operator.sub, "-", True)
    __mul__ = _binary(operator.mul, "*")
    __rmul__ = _binary(operator.mul, "*", True)
    __truediv__ = _binary(operator.truediv, "/")
    __rtruediv__ = _binary(operator.truediv, "/", True)
    __floordiv__ = _binary(operator.floordiv, "//")
    __rfloordiv__ = _binary(operator.floordiv, "//", True)
    __mod__ = _binary(operator.mod, "%")
    __rmod__ = _binary(operator.mod, "%", True)
    __pow__ = _binary(operator.pow, "**")
    __rpow__ = _binary(operator.pow, "**", True)

    __neg__ = _unary(operator.neg, "(-{})")
    __abs__ = _unary(abs, "abs({})")

    def __pos__(self):
        return self


def argument(value: bool | int | float, number: int, name: str) -> TracedScalar:
    """The stand-in for scalar argument number `number` of a call."""
    return TracedScalar(value, operator.itemgetter(number), name)
