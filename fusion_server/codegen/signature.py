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


def bind(params: Sequence[Param], **values: list) -> list:
    """The launch arguments in parameter order: each role's values, in the order given.
    Raises if a role has more or fewer values than the kernel has parameters of it."""
    unknown = set(values) - set(ROLES)
    if unknown:
        raise ValueError(f"no parameter role {sorted(unknown)}")
    given = {role: list(values.get(role, ())) for role in ROLES}
    used = dict.fromkeys(ROLES, 0)
    args = []
    for p in params:
        k = used[p.role]
        if k >= len(given[p.role]):
            raise ValueError(f"the kernel has more {p.role} parameters than the {len(given[p.role])} given")
        args.append(given[p.role][k])
        used[p.role] = k + 1
    for role in ROLES:
        if used[role] != len(given[role]):
            raise ValueError(f"{len(given[role])} {role} arguments for {used[role]} parameters")
    return args
