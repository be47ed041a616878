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
complex64 = np.dtype(np.complex64)
complex128 = np.dtype(np.complex128)

SUPPORTED: tuple[np.dtype, ...] = (bool_, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float32, float64,
                                   complex64, complex128)

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
    # A complex value is a two-component vector: .x the real part, .y the imaginary one
    # (numpy's layout). Kernels over complex values run one element per work-item.
    complex64: "float2",
    complex128: "double2",
}

# The signed integer type whose element size matches, for vector select() masks (no
# complex dtype: their kernels have no vectors of elements).
CL_MASK_NAME: dict[np.dtype, str] = {d: {1: "char", 2: "short", 4: "int", 8: "long"}[d.itemsize]
                                     for d in CL_NAME if d.kind != "c"}

# The dtypes a device computes only with fp64 (cl_khr_fp64).
FP64: frozenset[np.dtype] = frozenset((float64, complex128))


def is_float(dtype: np.dtype) -> bool:
    return dtype.kind == "f"


def is_inexact(dtype: np.dtype) -> bool:
    """Real or complex floating point."""
    return dtype.kind in "fc"


def real_of(dtype: np.dtype) -> np.dtype:
    """The dtype of a complex dtype's components (a real dtype is its own)."""
    return float32 if dtype == complex64 else float64 if dtype == complex128 else dtype


def complex_of(dtype: np.dtype) -> np.dtype:
    """The complex dtype whose components have `dtype` (float32: complex64; else complex128)."""
    if dtype.kind == "c":
        return dtype
    return complex64 if dtype == float32 else complex128


def fp64_pragma(dtypes) -> list[str]:
    """The source line that enables fp64 in a kernel computing with any of `dtypes`."""
    return ["#pragma OPENCL EXTENSION cl_khr_fp64 : enable"] if FP64.intersection(dtypes) else []


def is_int(dtype: np.dtype) -> bool:
    """Signed or unsigned integers."""
    return dtype.kind in "iu"


def is_unsigned(dtype: np.dtype) -> bool:
    return dtype.kind == "u"


def unsigned_of(dtype: np.dtype) -> np.dtype:
    """The unsigned integer dtype of `dtype`'s size."""
    return np.dtype(f"u{dtype.itemsize}")


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


def promote_scalar(a: np.dtype, value: bool | int | float | complex) -> np.dtype:
    """The result dtype of an array of dtype `a` with a Python scalar.

    A Python scalar is "weak" (the Array API rule, and numpy 2's): it takes the array's
    dtype when its kind fits, so `float32_tensor * 2.0` stays float32. An int or float
    scalar with a bool array gives the default int or float; a float with an int array
    gives float64, as numpy does; a complex scalar gives the complex dtype of the array's
    float kind (complex64 with float32), complex128 with any other real array.
    """
    if isinstance(value, bool):
        return a
    if isinstance(value, int):
        return a if a.kind in "iufc" else int64
    if isinstance(value, complex):
        return complex_of(a) if a.kind in "fc" else complex128
    return a if a.kind in "fc" else float64


def scalar_value(value: bool | int | float | complex, dtype: np.dtype) -> np.generic:
    """`value` as a numpy scalar of `dtype`; OverflowError when it does not fit."""
    if dtype.kind in "fc":
        return dtype.type(value)
    if dtype.kind in "iu" and isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        info = np.iinfo(dtype)
        if not info.min <= int(value) <= info.max:
            raise OverflowError(f"Python integer {value} out of bounds for {dtype.name}")
    return dtype.type(value)
