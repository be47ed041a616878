"""A kernel family's parameters, declared once: codegen writes the parameter list from
them, and a plan binds its arguments through them (so the order cannot drift apart, and
the binding count is the parameter count)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from .. import dtypes as dt

ROLES = ("size", "meta", "out", "input", "scalar", "local")


class Param(NamedTuple):
    role: str  # one of ROLES
    decl: str  # the OpenCL C declaration
    dtype: object = None  # a scalar's numpy dtype (for pyopencl's argument types)


def size(name: str) -> Param:
    return Param("size", f"const IDX {name}")


def meta() -> Param:
    return Param("meta", "__global const long* meta")


def out(dtype, name: str) -> Param:
    return Param("out", f"__global {dt.CL_NAME[dtype]}* {name}")


def input_(dtype, name: str) -> Param:
    return Param("input", f"__global const {dt.CL_NAME[dtype]}* {name}")


def scalar(dtype, name: str) -> Param:
    return Param("scalar", f"const {dt.CL_NAME[dtype]} {name}", dtype)


def raw(role: str, decl: str, dtype=None) -> Param:
    """A parameter declared in words (a typedef'd type, a local buffer)."""
    return Param(role, decl, dtype)


def arg_dtypes(params: Sequence[Param]) -> list:
    """pyopencl's scalar argument types: the scalars' dtypes, None for buffers."""
    return [p.dtype for p in params]


def declare(params: Sequence[Param]) -> str:
    """The parameter list of the kernel's signature."""
    return ", ".join(p.decl for p in params)


_ORDERS: dict[tuple, tuple] = {}  # params -> (each argument's (role, index), the count per role)


def _order(params: tuple) -> tuple:
    got = _ORDERS.get(params)
    if got is None:
        counts = dict.fromkeys(ROLES, 0)
        order = []
        for p in params:
            order.append((p.role, counts[p.role]))
            counts[p.role] += 1
        if len(_ORDERS) >= 4096:  # (kernels that never recur would grow it without bound)
            _ORDERS.clear()
        got = _ORDERS[params] = (tuple(order), counts)
    return got


def bind(params: Sequence[Param], **values: Sequence) -> list:
    """The launch arguments in parameter order: each role's values, in the order given.
    Raises if a role has more or fewer values than the kernel has parameters of it.
    (Every launch binds: the order of a parameter list is worked out once.)"""
    order, counts = _order(params if type(params) is tuple else tuple(params))
    for role, given in values.items():
        want = counts.get(role)
        if want is None:
            raise ValueError(f"no parameter role {role!r}")
        if len(given) != want:
            _miscount(role, len(given), want)
    for role, want in counts.items():
        if want and role not in values:
            _miscount(role, 0, want)
    return [values[role][k] for role, k in order]


def _miscount(role: str, given: int, want: int) -> None:
    if given < want:
        raise ValueError(f"the kernel has more {role} parameters than the {given} given")
    raise ValueError(f"{given} {role} arguments for {want} parameters")
