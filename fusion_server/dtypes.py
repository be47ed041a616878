"""The dtypes the server knows, their OpenCL C names, and numpy's promotion rules."""

from __future__ import annotations

import numpy as np

bool_ = np.dtype(np.bool_)
int8 = np.dtype(np.int8)
int16 = np.dtype(np.int16)
int32 = np.dtype(np.int32)
int64 = np.dtype(np.int64)
uint8 = np.dtype(np.uint8)
uint16 = np.dtype(np.uint16)
uint32 = np.dtype(np.uint32)
uint64 = np.dtype(np.uint64)
float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)

SUPPORTED: tuple[np.dtype, ...] = (bool_, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float32, float64)

# bool is stored as one byte holding 0 or 1, exactly like numpy's bool.
CL_NAME: dict[np.dtype, str] = {
    bool_: "uchar",
    int8: "char",
    int16: "short",
    int32: "int",
    int64: "long",
    uint8: "uchar",
    uint16: "ushort",
    uint32: "uint",
    uint64: "ulong",
    float32: "float",
    float64: "double",
}

# The signed integer type whose element size matches, for vector select() masks.
CL_MASK_NAME: dict[np.dtype, str] = {d: {1: "char", 2: "short", 4: "int", 8: "long"}[d.itemsize] for d in CL_NAME}


def is_float(dtype: np.dtype) -> bool:
    return dtype.kind == "f"


def is_int(dtype: np.dtype) -> bool:
    """Signed or unsigned integers."""
    return dtype.kind in "iu"


def is_unsigned(dtype: np.dtype) -> bool:
    return dtype.kind == "u"


def is_bool(dtype: np.dtype) -> bool:
    return dtype.kind == "b"


def normalize(dtype: object) -> np.dtype:
    """A supported numpy dtype from anything numpy accepts as a dtype, or TypeError."""
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"not a dtype: {dtype!r}") from exc
    if dt not in SUPPORTED:
        names = ", ".join(d.name for d in SUPPORTED)
        raise TypeError(f"dtype {dt.name} is not supported (supported: {names})")
    return dt


_PAIR_CACHE: dict[tuple[np.dtype, np.dtype], np.dtype] = {}


def promote(a: np.dtype, b: np.dtype) -> np.dtype:
    """numpy's result type for two array dtypes."""
    key = (a, b)
    out = _PAIR_CACHE.get(key)
    if out is None:
        out = _PAIR_CACHE[key] = np.result_type(a, b)
    return out


def promote_scalar(a: np.dtype, value: bool | int | float) -> np.dtype:
    """The result dtype of an array of dtype `a` with a Python scalar.

    A Python scalar is "weak" (the Array API rule, and numpy 2's): it takes the array's
    dtype when its kind fits, so `float32_tensor * 2.0` stays float32. An int or float
    scalar with a bool array gives the default int or float; a float with an int array
    gives float64, as numpy does.
    """
    if isinstance(value, bool):
        return a
    if isinstance(value, int):
        return a if a.kind in "iuf" else int64
    return a if a.kind == "f" else float64


def scalar_value(value: bool | int | float, dtype: np.dtype) -> np.generic:
    """`value` as a numpy scalar of `dtype`; OverflowError when it does not fit."""
    if dtype.kind == "f":
        return dtype.type(value)
    if dtype.kind in "iu" and isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        info = np.iinfo(dtype)
        if not info.min <= int(value) <= info.max:
            raise OverflowError(f"Python integer {value} out of bounds for {dtype.name}")
    return dtype.type(value)
