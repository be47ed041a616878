"""The element-wise operations: their arity and their dtype rules.

The client uses `resolve` to validate an op and find its dtypes before anything is
queued; the code generator uses the same names to pick an OpenCL C template.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import dtypes as dt


@dataclass(frozen=True)
class OpInfo:
    name: str
    arity: int
    rule: str  # how dtypes are checked and derived, see `resolve`


def _ops(rule: str, arity: int, names: str) -> dict[str, OpInfo]:
    return {n: OpInfo(n, arity, rule) for n in names.split()}


OPS: dict[str, OpInfo] = {
    **_ops("numeric", 2, "add multiply maximum minimum"),
    **_ops("numeric_nobool", 2, "subtract floor_divide remainder pow"),
    **_ops("float", 2, "divide atan2 hypot copysign logaddexp nextafter"),
    **_ops("compare", 2, "equal not_equal less less_equal greater greater_equal"),
    **_ops("logical", 2, "logical_and logical_or logical_xor"),
    **_ops("bitwise", 2, "bitwise_and bitwise_or bitwise_xor"),
    **_ops("integer", 2, "bitwise_left_shift bitwise_right_shift"),
    **_ops("logical", 1, "logical_not"),
    **_ops("bitwise", 1, "bitwise_invert"),
    **_ops(
        "float",
        1,
        "exp expm1 log log1p log2 log10 sqrt sin cos tan asin acos atan "
        "sinh cosh tanh asinh acosh atanh",
    ),
    **_ops("numeric_nobool", 1, "negative sign square"),
    **_ops("numeric", 1, "abs positive copy"),
    **_ops("numeric_nobool", 1, "conj"),
    **_ops("component", 1, "real imag"),
    **_ops("rounding", 1, "floor ceil trunc round"),
    **_ops("predicate", 1, "isnan isinf isfinite"),
    # where(cond, a, b): cond is cast to bool, a and b promoted together.
    "where": OpInfo("where", 3, "where"),
    # cast(x) to the op's output dtype.
    "cast": OpInfo("cast", 1, "cast"),
    # fill(): the scalar argument everywhere; iota(): the flat index.
    "fill": OpInfo("fill", 0, "generator"),
    "iota": OpInfo("iota", 0, "generator"),
}


# What complex numbers have of each rule: everything but order (maximum, less, floor...),
# bits, integer division and the real-only float functions.
_REAL_ONLY = frozenset((
    "maximum minimum floor_divide remainder atan2 hypot copysign logaddexp nextafter "
    "less less_equal greater greater_equal floor ceil trunc").split())


def float_of(dtype: np.dtype) -> np.dtype:
    """The float dtype an op that needs floats computes in, numpy's choice for ints."""
    if dt.is_inexact(dtype):
        return dtype
    # numpy gives float16 for bool and 1-byte integers, float32 for 2-byte ones; float32
    # is the smallest float here.
    return dt.float32 if dtype.itemsize <= 2 else dt.float64


def resolve(name: str, in_dtypes: tuple[np.dtype, ...]) -> tuple[np.dtype, np.dtype]:
    """(compute dtype, result dtype) of op `name` on inputs of `in_dtypes`, or TypeError.

    The inputs are already promoted with each other where the op promotes; for "where",
    `in_dtypes` is the dtype of the two value operands after promotion.
    """
    info = OPS.get(name)
    if info is None:
        raise ValueError(f"unknown element-wise operation {name!r}")
    d = in_dtypes[0]
    rule = info.rule
    if d.kind == "c" and name in _REAL_ONLY:
        raise TypeError(f"{name} is not defined for complex tensors ({d.name})")
    if rule == "numeric" or rule == "where":
        if name == "abs":
            return d, dt.real_of(d)  # (|z| is real)
        return d, d
    if rule == "component":  # (real and imag of a real value: itself, and zeros, as numpy)
        if dt.is_bool(d):
            raise TypeError(f"{name} needs a numeric tensor, got bool")
        return d, dt.real_of(d)
    if rule == "numeric_nobool":
        if dt.is_bool(d):
            raise TypeError(f"{name} is not supported for bool tensors")
        return d, d
    if rule == "float":
        f = dt.float64 if name == "divide" and dt.is_int(d) else float_of(d)  # (numpy: int / int is float64)
        return f, f
    if rule == "compare":
        return d, dt.bool_
    if rule == "logical":
        return dt.bool_, dt.bool_
    if rule == "bitwise":
        if dt.is_inexact(d):
            raise TypeError(f"{name} needs integer or bool tensors, got {d.name}")
        return d, d
    if rule == "integer":
        if not dt.is_int(d):
            raise TypeError(f"{name} needs integer tensors, got {d.name}")
        return d, d
    if rule == "rounding":
        return d, d
    if rule == "predicate":
        return d, dt.bool_
    raise ValueError(f"{name} has no dtype rule of its own ({rule})")
