"""OpenCL C expressions for each element-wise op, at a vector width of 1 or more.

Every value in a generated kernel has one dtype and the kernel's width W: a scalar type
(`float`) when W is 1, a vector type (`float4`) otherwise, so one template serves both.
Comparisons give OpenCL "masks" (0/1 for scalars, 0/-1 for vectors); `to_bool` turns
them into the one-byte 0/1 bools that numpy stores.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from . import complex_math


def type_name(dtype: np.dtype, width: int) -> str:
    base = dt.CL_NAME[dtype]
    if width == 1:
        return base
    if dtype.kind == "c":  # (a complex value is a vector already: such kernels are scalar code)
        raise ValueError(f"no vector of {width} {dtype.name} values")
    return f"{base}{width}"


# Defined (a build option) on CPU drivers: vectors are read and written through plain
# pointer dereferences of unaligned vector types instead of vloadN / vstoreN. PoCL
# compiles those built-ins to function calls, which halved a memory-bound kernel's
# bandwidth (14 against 28 GB/s); a dereference is one unaligned vector move.
PLAIN_VECTORS = "FUSION_PLAIN_VECTORS"
# Defined (a build option) on CPU devices with fp64: float32 pow computes exp2(b * log2|a|)
# in double and rounds once, with pow's special cases by select (`_POWF`). PoCL 3.0's own
# powf, 2^22 floats at 8 lanes on 2 Zen 4 cores: 30.0 ms and up to 8.4 ulp off; this
# one 12.1 ms and 0.50 ulp (numpy's, AVX-512 on one core: 5.0 ms).
POW_VIA_DOUBLE = "FUSION_POW_VIA_DOUBLE"


def vector_access(dtypes: set, width: int) -> list[str]:
    """Source lines defining VLOAD(T, W, p) and VSTORE(T, W, v, p) for vectors of `width`
    elements of `dtypes`, read and written at any element-aligned address (global
    memory; VLOAD_LOCAL and VSTORE_LOCAL for local memory)."""
    if width == 1:
        return []
    lines = [f"#ifdef {PLAIN_VECTORS}"]
    for base in sorted({dt.CL_NAME[d] for d in dtypes}):  # (bool and uint8 are both uchar)
        attributes = f"ext_vector_type({width}), aligned(sizeof({base}))"
        lines.append(f"typedef {base} {base}{width}_u __attribute__(({attributes}));")
    lines += ["#define VLOAD(T, W, p) (*(__global const T##W##_u*)(p))",
              "#define VSTORE(T, W, v, p) (*(__global T##W##_u*)(p) = (v))",
              "#define VLOAD_LOCAL(T, W, p) (*(__local const T##W##_u*)(p))",
              "#define VSTORE_LOCAL(T, W, v, p) (*(__local T##W##_u*)(p) = (v))",
              "#else",
              "#define VLOAD(T, W, p) vload##W(0, p)",
              "#define VSTORE(T, W, v, p) vstore##W(v, 0, p)",
              "#define VLOAD_LOCAL(T, W, p) vload##W(0, p)",
              "#define VSTORE_LOCAL(T, W, v, p) vstore##W(v, 0, p)",
              "#endif"]
    return lines


def vload(pointer: str, dtype: np.dtype, width: int) -> str:
    """The `width` elements of `dtype` at `pointer` (see vector_access)."""
    return f"VLOAD({dt.CL_NAME[dtype]}, {width}, {pointer})"


def vstore(value: str, pointer: str, dtype: np.dtype, width: int) -> str:
    return f"VSTORE({dt.CL_NAME[dtype]}, {width}, {value}, {pointer});"


def is_nan(expr: str) -> str:
    """The mask of NaN lanes of a float expression: NaN is the one value unequal to
    itself (no build option here relaxes that). Unlike isnan(), which PoCL calls as a
    function, it is one compare instruction."""
    return f"(({expr}) != ({expr}))"


def splat(expr: str, dtype: np.dtype, width: int) -> str:
    """A scalar expression as a value of width `width`."""
    return expr if width == 1 else f"(({type_name(dtype, width)})({expr}))"


def to_bool(mask: str, width: int) -> str:
    if width == 1:
        return f"((uchar)({mask}))"
    return f"convert_uchar{width}(-({mask}))"


def cast(expr: str, src: np.dtype, dst: np.dtype, width: int) -> str:
    """`expr` of dtype `src` converted to `dst` the way numpy's astype does."""
    if src == dst:
        return expr
    if src.kind == "c" or dst.kind == "c":
        return _complex_cast(expr, src, dst)
    if dt.is_bool(dst):
        return to_bool(f"({expr}) != {splat('0', src, width)}", width)
    if width == 1:
        return f"(({dt.CL_NAME[dst]})({expr}))"
    return f"convert_{type_name(dst, width)}({expr})"


def _complex_cast(expr: str, src: np.dtype, dst: np.dtype) -> str:
    """A cast from or to a complex dtype (scalar code): a real value is the real part, a
    complex value as a real one is its real part (numpy's astype), and as a bool whether
    either part is nonzero."""
    if src.kind == "c" and dst.kind == "c":
        return f"convert_{dt.CL_NAME[dst]}({expr})"
    if dst.kind == "c":
        real = dt.CL_NAME[dt.real_of(dst)]
        return f"(({dt.CL_NAME[dst]})(({real})({expr}), ({real})0))"
    if dt.is_bool(dst):
        return f"((uchar)((({expr}).x != 0) | (({expr}).y != 0)))"
    return cast(f"(({expr}).x)", dt.real_of(src), dst, 1)


def select(cond_bool: str, a: str, b: str, dtype: np.dtype, width: int) -> str:
    """cond ? a : b, with `cond_bool` a 0/1 bool value."""
    if width == 1 and dt.is_int(dtype):
        # Through two lanes, as integer min and max (see `emit`): Intel's CPU runtime folds
        # `c ? ~a : ~b` and `~(a < b ? a : b)` into a not of a min and gets it wrong.
        pair, mask = type_name(dtype, 2), dt.CL_MASK_NAME[dtype]
        return f"select(({pair})({b}), ({pair})({a}), ({mask}2)(-({mask})({cond_bool}))).s0"
    if width == 1:
        return f"(({cond_bool}) ? ({a}) : ({b}))"
    mask = f"{dt.CL_MASK_NAME[dtype]}{width}"
    return f"select({b}, {a}, -convert_{mask}({cond_bool}))"


def pick(mask: str, a: str, b: str, width: int) -> str:
    """mask ? a : b, where `mask` is a comparison (a mask of a's element size).

    Vectors use select() rather than the ternary operator: some compilers get nested
    vector ternaries wrong.
    """
    if width == 1:
        return f"(({mask}) ? ({a}) : ({b}))"
    return f"select({b}, {a}, {mask})"


def wraps(compute: np.dtype) -> bool:
    """Whether integer arithmetic of `compute` needs `wrapping`: signed integers (their
    overflow is undefined in C, and compilers use that) and unsigned ones of 1 or 2 bytes
    (C promotes those scalars to a signed int, where 65535 * 65535 overflows)."""
    return dt.is_int(compute) and (not dt.is_unsigned(compute) or compute.itemsize <= 2)


def _unsigned_scalar(compute: np.dtype) -> str:
    """The unsigned type scalar integer arithmetic of `compute` runs in (no promotion)."""
    return "ulong" if compute.itemsize == 8 else "uint"


def wrapping(op: str, args: list[str], compute: np.dtype, width: int) -> str:
    """Integer `a op b` (or `op a` for one argument) wrapping around as numpy's does: in
    the unsigned type of the size, read back as `compute`. In signed types the compilers
    assume that no overflow happens: `x + 1 > x` folded to true, `abs(INT_MIN) < 0` to
    false, and a wrapped int32 sum cast to int64 kept its carry, on all three drivers."""
    t = dt.CL_NAME[compute]
    unsigned = dt.CL_NAME[dt.unsigned_of(compute)]
    narrow_signed = compute.itemsize <= 2 and not dt.is_unsigned(compute)
    # Narrow signed results are sign-extended by shifts in 32 bits: NVIDIA's compiler (580)
    # widened -(short)-32768 to +32768 through every cast and bitcast spelling (and C's
    # own promotion), in scalars and in vectors alike.
    bits = 32 - 8 * compute.itemsize
    if width > 1:
        value = _apply(op, [f"as_{unsigned}{width}({a})" for a in args])
        if narrow_signed:
            return f"convert_{t}{width}(as_int{width}(convert_uint{width}({value}) << {bits}) >> {bits})"
        return f"as_{t}{width}({value})"
    value = _apply(op, [f"({_unsigned_scalar(compute)})({a})" for a in args])
    if narrow_signed:
        return f"(({t})(((int)({value} << {bits})) >> {bits}))"
    return f"as_{t}(({unsigned})({value}))"


def arithmetic(op: str, args: list[str], compute: np.dtype, width: int) -> str:
    """`a op b` (or `op a`) of `compute`: `wrapping` where its integers need it, else as
    written."""
    if wraps(compute):
        return wrapping(op, args, compute, width)
    return _apply(op, [f"({a})" for a in args])


def _apply(op: str, terms: list[str]) -> str:
    """`op` applied to one term (a prefix) or two (infix), in parentheses."""
    return f"({op}{terms[0]})" if len(terms) == 1 else f"({terms[0]} {op} {terms[1]})"


# Ops whose integer (or float) form needs a helper function with branches; kernels that
# use them run one element per work-item.
SCALAR_ONLY = {"floor_divide", "remainder"}
SCALAR_ONLY_INT = {"pow"}

_INFIX = {
    "add": "+", "subtract": "-", "multiply": "*", "divide": "/",
    "bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^",
    "logical_and": "&", "logical_or": "|", "logical_xor": "^",
}
_COMPARE = {
    "equal": "==", "not_equal": "!=", "less": "<", "less_equal": "<=",
    "greater": ">", "greater_equal": ">=",
}
_BOOL_INFIX = {"add": "|", "multiply": "&", "maximum": "|", "minimum": "&"}
_FLOAT_CALL1 = {
    "exp", "expm1", "log", "log1p", "log2", "log10", "sqrt", "sin", "cos", "tan",
    "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh",
    "floor", "ceil", "trunc",
}
_FLOAT_CALL2 = {"atan2", "hypot", "copysign", "pow", "nextafter"}


def needs_helper(name: str, compute: np.dtype) -> bool:
    """Whether op `name` computing in `compute` calls a helper function with branches
    (`helper_source`)."""
    return name in SCALAR_ONLY or (name in SCALAR_ONLY_INT and dt.is_int(compute))


def needs_scalar_code(name: str, compute: np.dtype) -> bool:
    """Whether an op's kernel must run one element per work-item: an op with a helper of
    branches, or one over complex values (whose type is a vector already)."""
    return needs_helper(name, compute) or compute.kind == "c"


def prelude(ops, dtypes) -> list[str]:
    """The lines every generated kernel source starts with, for `ops` (TraceOps) computing
    with `dtypes`: no contraction of multiply-adds (results round as numpy's op by op),
    fp64 where used, and the helper functions the ops call."""
    src = ["#pragma OPENCL FP_CONTRACT OFF", *dt.fp64_pragma(dtypes)]
    helpers = {(op.name, op.compute) for op in ops if needs_helper(op.name, op.compute)}
    src += [helper_source(name, compute) for name, compute in sorted(helpers, key=repr)]
    if any(op.name == "pow" and op.compute == dt.float32 for op in ops):
        src.append(_POWF)
    if any(op.name == "pow" and op.compute == dt.float64 for op in ops):
        src.append(_POW64)
    for compute in sorted({op.compute for op in ops if op.compute.kind == "c"}, key=repr):
        names = {op.name for op in ops if op.compute == compute and op.name in complex_math.FUNCTIONS}
        if names:
            src.append(complex_math.source(sorted(names), dt.CL_NAME[dt.real_of(compute)]))
    return src


def _pow_overload(name: str, t: str, n: str, body: str) -> str:
    """Overload `name` of a two-argument pow for {t}{n} (n "" for scalars), `body` its
    statements; eight or sixteen lanes go as two halves instead, each its own call
    (static, so an overload no kernel calls is never compiled)."""
    v = f"{t}{n}"
    if n in ("8", "16"):
        body = f" return ({v})({name}(a.lo, b.lo), {name}(a.hi, b.hi)); "
    return f"static inline __attribute__((overloadable)) {v} {name}({v} a, {v} b) {{{body}}}"


def _powf_overload(n: str) -> str:
    """fs_powf for float{n} (n "" for scalars): C99's pow, numpy's float32 power. Eight
    or sixteen lanes go as two halves: no double8 or double16 where the compiler may lack
    512-bit registers."""
    f, d = f"float{n}", f"double{n}"
    return _pow_overload("fs_powf", "float", n, f"""
  {f} r = convert_{f}(exp2(convert_{d}(b) * log2(convert_{d}(fabs(a)))));
  r = select(r, copysign(r, a), fabs(fmod(b, ({f})2)) == ({f})1);  /* odd integer powers keep a's sign */
  r = select(r, ({f})NAN, (a < ({f})0) & isfinite(a) & (floor(b) != b));  /* a negative base, a fractional power */
  return select(r, ({f})1, (b == ({f})0) | (a == ({f})1) | ((fabs(a) == ({f})1) & isinf(b)));
""")


# float64 pow on eight or sixteen lanes goes as halves of four: PoCL 3.0 (LLVM 14) on an
# AVX-512 Intel Xeon returned wrong lanes from pow on double8 where another lane of the
# vector was zero (4224 of 65536 values in (0, 1) with a fifth of them zero, all in lanes
# 0 to 3; double4 and scalar pow right on the same values).
_POW64 = "\n".join(["#pragma OPENCL EXTENSION cl_khr_fp64 : enable",
                     *(_pow_overload("fs_pow", "double", n, " return pow(a, b); ") for n in ("", "2", "4", "8", "16"))])


_POWF = "\n".join([f"#ifdef {POW_VIA_DOUBLE}", "#pragma OPENCL EXTENSION cl_khr_fp64 : enable",
                    *(_powf_overload(n) for n in ("", "2", "4", "8", "16")),
                    "#else", "#define fs_powf pow", "#endif"])


def helper_name(name: str, compute: np.dtype) -> str:
    return f"{name}_{dt.CL_NAME[compute]}"


def helper_source(name: str, compute: np.dtype) -> str:
    """A C function implementing numpy's semantics of `name` for scalars of `compute`."""
    t = dt.CL_NAME[compute]
    fn = helper_name(name, compute)
    wide = _unsigned_scalar(compute)  # (integers: where products wrap)
    if dt.is_float(compute):
        # numpy's npy_divmod: floor division and a remainder with the divisor's sign.
        # Infinite operands follow the Array API instead (numpy gives NaN, or -1 for a
        # negative finite a over +inf): floor(a / b), so inf // 2 is inf and -1 // inf is -0.
        body = {
            "floor_divide": (
                "if (b == 0 || isinf(a) || isinf(b)) return floor(a / b);\n"
                f"  {t} mod = fmod(a, b); {t} div = (a - mod) / b;\n"
                "  if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1;\n"
                f"  {t} fl = floor(div); if (div - fl > ({t})0.5) fl += 1;\n"
                "  return div == 0 ? copysign((" + t + ")0, a / b) : fl;"
            ),
            "remainder": (
                "if (b == 0) return fmod(a, b);\n"
                f"  {t} mod = fmod(a, b);\n"
                "  if (mod != 0) { if ((b < 0) != (mod < 0)) mod += b; }\n"
                f"  else mod = copysign(({t})0, b);\n"
                "  return mod;"
            ),
        }[name]
    elif dt.is_unsigned(compute):
        # Division by zero traps on CPUs: numpy gives 0 there.
        body = {
            "floor_divide": "return b == 0 ? 0 : a / b;",
            "remainder": "return b == 0 ? 0 : a % b;",
            "pow": (  # (1- and 2-byte values multiply as uint: C would promote them to int)
                f"{wide} r = 1, x = a;\n"
                "  while (b) { if (b & 1) r *= x; x *= x; b >>= 1; }\n"
                f"  return ({t})r;"
            ),
        }[name]
    else:
        # Integer division by zero (or MIN / -1) traps on CPUs: numpy gives 0 there.
        body = {
            "floor_divide": (
                "if (b == 0) return 0;\n"
                f"  if (b == -1) return {wrapping('-', ['a'], compute, 1)};\n"
                f"  {t} q = a / b;\n"
                "  if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1;\n"
                "  return q;"
            ),
            "remainder": (
                "if (b == 0 || b == -1) return 0;\n"
                f"  {t} r = a % b;\n"
                "  if (r != 0 && ((r < 0) != (b < 0))) r += b;\n"
                "  return r;"
            ),
            "pow": (  # (in the unsigned type: the product wraps as numpy's)
                "if (b < 0) return a == 1 ? 1 : (a == -1 ? ((b & 1) ? -1 : 1) : 0);\n"
                f"  {wide} r = 1, x = ({wide})a;\n"
                "  while (b) { if (b & 1) r *= x; x *= x; b >>= 1; }\n"
                f"  return as_{t}(({dt.CL_NAME[dt.unsigned_of(compute)]})r);"
            ),
        }[name]
    return f"static {t} {fn}({t} a, {t} b) {{\n  {body}\n}}\n"


def emit(
    name: str, args: list[str], compute: np.dtype, width: int
) -> tuple[str, np.dtype | None]:
    """OpenCL C for op `name` over already-cast `args`: (expression, its dtype).

    The dtype is None for a mask, which still needs `to_bool`.
    """
    a = args[0] if args else ""
    b = args[1] if len(args) > 1 else ""
    if compute.kind == "c":
        return _emit_complex(name, args, compute)
    T = type_name(compute, width)
    isf = dt.is_float(compute)
    isb = dt.is_bool(compute)
    if name in _COMPARE:
        return f"(({a}) {_COMPARE[name]} ({b}))", None
    if isb and name in _BOOL_INFIX:
        return f"(({a}) {_BOOL_INFIX[name]} ({b}))", compute
    if name in ("add", "subtract", "multiply"):
        return arithmetic(_INFIX[name], [a, b], compute, width), compute
    if name in _INFIX:
        return f"(({a}) {_INFIX[name]} ({b}))", compute
    if name == "bitwise_left_shift" or name == "bitwise_right_shift":
        # OpenCL takes the count modulo the width; numpy shifts every bit out instead:
        # 0 for a left shift, the sign for a right one (negative counts count as huge).
        zero = f"(({T})(0))"
        bits = f"(({b}) < (({T})({compute.itemsize * 8})))"
        unsigned = dt.is_unsigned(compute)  # (no negative counts or values: no tests of them)
        in_range = bits if unsigned else f"(({b}) >= {zero}) & {bits}"
        if name == "bitwise_left_shift":  # (of a negative value: undefined in a signed type)
            return pick(in_range, arithmetic("<<", [a, b], compute, width), zero, width), compute
        sign = zero if unsigned else pick(f"({a}) < {zero}", f"(({T})(-1))", zero, width)
        return pick(in_range, f"(({a}) >> ({b}))", sign, width), compute
    if name == "maximum" or name == "minimum":
        if isf:
            op = ">" if name == "maximum" else "<"
            return pick(f"(({a}) {op} ({b})) | {is_nan(a)}", a, b, width), compute
        if width == 1:
            # Through two lanes: Intel's CPU runtime (2026.22) drops the bitwise not of a
            # scalar integer min or max of two values (`~min(a, b)`, `-min(a, b) - 1`, and
            # the selects its optimizer folds into them) and returns the min or max itself;
            # its vector min and max are right. Other compilers keep one lane.
            pair = type_name(compute, 2)
            return f"{name[:3]}(({pair})({a}), ({pair})({b})).s0", compute
        return f"{name[:3]}({a}, {b})", compute
    if needs_helper(name, compute):
        return f"{helper_name(name, compute)}({a}, {b})", compute
    if name == "pow" and compute == dt.float32:
        return f"fs_powf({a}, {b})", compute
    if name == "pow" and compute == dt.float64:
        return f"fs_pow({a}, {b})", compute
    if name in _FLOAT_CALL2:
        return f"{name}({a}, {b})", compute
    if name == "logaddexp":
        ln2 = f"(({T})(0.6931471805599453))"
        general = f"fmax({a}, {b}) + log1p(exp(-fabs(({a}) - ({b}))))"
        return pick(f"({a}) == ({b})", f"({a}) + {ln2}", general, width), compute
    if name == "round":
        return (f"rint({a})" if isf else a), compute
    if name == "sign":
        zero, one = f"(({T})(0))", f"(({T})(1))"
        # numpy: sign(nan) is nan and sign(-0.0) is +0.0; 0 + a * 0 gives exactly that.
        rest = f"({zero} + ({a}) * {zero})" if isf else zero
        if dt.is_unsigned(compute):
            return pick(f"({a}) > {zero}", one, zero, width), compute
        return pick(f"({a}) > {zero}", one, pick(f"({a}) < {zero}", f"-{one}", rest, width), width), compute
    if name == "tanh" and isf:
        # Some device libraries (PoCL's) give +-(1 - ulp) for every large argument, inf
        # included. From 10 (float32) or 19 (float64) on, numpy's tanh is exactly +-1.
        one = f"(({T})(1))"
        big = f"(({T})({'10.0f' if compute == dt.float32 else '19.0'}))"
        return pick(f"fabs({a}) >= {big}", f"copysign({one}, {a})", f"tanh({a})", width), compute
    if name in _FLOAT_CALL1:
        if isf:
            return f"{name}({a})", compute
        return a, compute  # floor / ceil / trunc of integers
    if name == "abs":
        if isf:
            return f"fabs({a})", compute
        if isb or dt.is_unsigned(compute):
            return a, compute
        # max(a, -a), -a wrapping: abs(INT_MIN) is INT_MIN, as numpy's. (PoCL 3.0's abs()
        # of INT_MIN widened to a long gave 2^31; `a < 0 ? -a : a` becomes an intrinsic
        # that Oclgrind's interpreter lacks.)
        return emit("maximum", [a, wrapping("-", [a], compute, width)], compute, width)
    if name == "negative":
        return arithmetic("-", [a], compute, width), compute
    if name in ("positive", "copy", "conj", "real"):  # (of a real value)
        return a, compute
    if name == "imag":
        return f"(({T})(0))", compute
    if name == "square":
        return arithmetic("*", [a, a], compute, width), compute
    if name == "logical_not":
        return f"(({a}) ^ (({T})(1)))", compute
    if name == "bitwise_invert":
        return (f"(({a}) ^ (({T})(1)))" if isb else f"(~({a}))"), compute
    if name in ("isnan", "isinf", "isfinite"):
        if isf and name == "isnan":
            return is_nan(a), None
        if isf:
            return f"{name}({a})", None
        const = "1" if name == "isfinite" else "0"
        return splat(f"(uchar){const}", dt.bool_, width), dt.bool_
    raise ValueError(f"no OpenCL template for element-wise op {name!r}")


def _emit_complex(name: str, args: list[str], compute: np.dtype) -> tuple[str, np.dtype | None]:
    """`emit` for ops computing in a complex dtype (scalar code: a value is a float2 or a
    double2, .x its real part)."""
    a = args[0] if args else ""
    b = args[1] if len(args) > 1 else ""
    T = dt.CL_NAME[compute]
    real = dt.real_of(compute)
    if name == "equal":
        return f"((({a}).x == ({b}).x) & (({a}).y == ({b}).y))", None
    if name == "not_equal":
        return f"((({a}).x != ({b}).x) | (({a}).y != ({b}).y))", None
    if name == "add" or name == "subtract":
        return f"(({a}) {_INFIX[name]} ({b}))", compute
    if name == "negative":
        return f"(-({a}))", compute
    if name == "positive" or name == "copy":
        return a, compute
    if name == "conj":
        return f"(({T})(({a}).x, -({a}).y))", compute
    if name == "real":
        return f"(({a}).x)", real
    if name == "imag":
        return f"(({a}).y)", real
    if name == "round":
        return f"rint({a})", compute  # (each part to the nearest even integer, as numpy)
    # (compares rather than isnan() and the like, which PoCL calls as functions)
    if name == "isnan":
        return f"({is_nan(f'({a}).x')} | {is_nan(f'({a}).y')})", None
    if name == "isinf":
        return f"((fabs(({a}).x) == INFINITY) | (fabs(({a}).y) == INFINITY))", None
    if name == "isfinite":
        return f"((fabs(({a}).x) < INFINITY) & (fabs(({a}).y) < INFINITY))", None
    if name in complex_math.FUNCTIONS:
        return complex_math.call(name, list(args), dt.CL_NAME[real]), real if name == "abs" else compute
    raise ValueError(f"no OpenCL template for element-wise op {name!r} of complex values")
