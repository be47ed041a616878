"""complex_math's OpenCL helpers against numpy: accuracy over finite values, and the special
cases of infinities, NaNs and signed zeros from the Array API specification (2025.12)."""

from __future__ import annotations

import cmath
import math

import numpy as np
import pyopencl as cl
import pytest

import clients
from fusion_server.codegen import complex_math as cm
from fusion_server.compiling import BUILD_OPTIONS

BINARY = ("divide", "multiply", "pow")
REALS = ("float", "double")
COMPLEX = {"float": np.complex64, "double": np.complex128}
FLOAT = {"float": np.float32, "double": np.float64}
# Allowed error, relative to |expected| (the complex modulus).
RTOL = {"float": 1e-5, "double": 1e-12}


class Kernels:
    """One program per precision, built on first use, with a kernel k_<name> per function:
    out[i] = name(x[i]) (or name(x[i], y[i]))."""

    def __init__(self):
        server = clients.client_for().server
        self.context, self.queue, self.fp64 = server.runtime.context, server.runtime.queue, server.info.fp64
        self.programs: dict[str, cl.Program] = {}
        self.kernels: dict[tuple[str, str], cl.Kernel] = {}

    def program(self, real: str) -> cl.Program:
        if real == "double" and not self.fp64:
            pytest.skip("the device has no float64")
        if real not in self.programs:
            lines = ["#pragma OPENCL FP_CONTRACT OFF"]
            if real == "double":
                lines.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
            lines.append(cm.source(cm.FUNCTIONS, real))
            for name in sorted(cm.FUNCTIONS):
                out = real if name == "abs" else f"{real}2"
                args = ["x[i]", "y[i]"] if name in BINARY else ["x[i]"]
                lines.append(f"__kernel void k_{name}(__global const {real}2 *x, __global const {real}2 *y, "
                             f"__global {out} *out) {{ const size_t i = get_global_id(0); "
                             f"out[i] = {cm.call(name, args, real)}; }}")
            self.programs[real] = cl.Program(self.context, "\n".join(lines)).build(options=list(BUILD_OPTIONS))
        return self.programs[real]

    def kernel(self, name: str, real: str) -> cl.Kernel:
        # By name: PoCL 3.0's clCreateKernelsInProgram (all_kernels) mixes up kernels.
        if (name, real) not in self.kernels:
            self.kernels[name, real] = cl.Kernel(self.program(real), f"k_{name}")
        return self.kernels[name, real]

    def run(self, name: str, real: str, x: np.ndarray, y: np.ndarray | None = None) -> np.ndarray:
        kernel = self.kernel(name, real)
        x = np.ascontiguousarray(x, COMPLEX[real])
        y = x if y is None else np.ascontiguousarray(y, COMPLEX[real])
        out = np.empty(len(x), FLOAT[real] if name == "abs" else COMPLEX[real])
        flags = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
        bx, by = cl.Buffer(self.context, flags, hostbuf=x), cl.Buffer(self.context, flags, hostbuf=y)
        bo = cl.Buffer(self.context, cl.mem_flags.WRITE_ONLY, out.nbytes)
        kernel(self.queue, (len(x),), None, bx, by, bo)
        cl.enqueue_copy(self.queue, out, bo)
        return out


@pytest.fixture(scope="module")
def kernels():
    return Kernels()


def complexes(re, im) -> np.ndarray:
    """complex128 values from parts, keeping signed zeros (re + 1j * im would not)."""
    re, im = np.broadcast_arrays(np.asarray(re, np.float64), np.asarray(im, np.float64))
    out = np.empty(re.shape, np.complex128)
    out.real, out.imag = re, im
    return out


# --- finite values against numpy ---------------------------------------------------------


def finite_inputs(real: str, rng: np.random.Generator, n: int = 1500) -> np.ndarray:
    """Finite values exactly representable in `real`: parts of independent log-uniform
    magnitudes (1e-6..1e6 for float, 1e-30..1e30 for double), values near +-1 and +-1j and
    on the unit circle, on the axes with both signs of zero, in a moderate box, and parts
    near overflow or underflow."""
    finfo = np.finfo(FLOAT[real])
    lo, hi = (1e-6, 1e6) if real == "float" else (1e-30, 1e30)

    def signed(magnitudes):
        return rng.choice([-1.0, 1.0], len(magnitudes)) * magnitudes

    def logu(low, high, count=n):
        return signed(np.exp(rng.uniform(np.log(low), np.log(high), count)))

    zeros = signed(np.zeros(n))
    units = np.array([1, -1, 1j, -1j])[rng.integers(0, 4, n)]
    angles = rng.uniform(-np.pi, np.pi, n)
    huge, tiny = logu(finfo.max * 1e-3, finfo.max / 2, n // 4), logu(finfo.tiny * 4, finfo.tiny * 1e3, n // 4)
    parts = [
        complexes(logu(lo, hi), logu(lo, hi)),
        units + complexes(logu(1e-7, 0.1), logu(1e-7, 0.1)),
        units + complexes(logu(1e-7, 0.1), zeros),
        np.exp(1j * angles) * (1 + logu(1e-7, 1e-2)),
        complexes(logu(lo, hi), zeros),
        complexes(zeros, logu(lo, hi)),
        complexes(rng.uniform(-4, 4, n), rng.uniform(-4, 4, n)),
        complexes(huge, rng.permutation(huge)), complexes(tiny, rng.permutation(tiny)),
        complexes(huge, tiny), complexes(tiny, huge), complexes(huge, rng.uniform(-4, 4, n // 4)),
    ]
    return np.concatenate(parts).astype(COMPLEX[real]).astype(np.complex128)


def pow_inputs(real: str, rng: np.random.Generator, n: int = 2000) -> tuple[np.ndarray, np.ndarray]:
    """Bases of moderate magnitude (1e-3..1e3, any angle, the axes included) and exponents:
    integers in [-10, 10], half-integers, and complex values in [-3, 3]^2."""
    base = np.exp(rng.uniform(np.log(1e-3), np.log(1e3), n)) * np.exp(1j * rng.uniform(-np.pi, np.pi, n))
    base[: n // 8] = base[: n // 8].real
    base[n // 8 : n // 4] = complexes(0.0, base[n // 8 : n // 4].imag)
    exponent = complexes(rng.uniform(-3, 3, n), rng.uniform(-3, 3, n))
    exponent[: n // 3] = rng.integers(-10, 11, n // 3)
    exponent[n // 3 : n // 2] = rng.integers(-10, 11, n // 2 - n // 3) + 0.5
    exponent[n // 2 : 2 * n // 3] = exponent[n // 2 : 2 * n // 3].real
    cast = COMPLEX[real]
    return base.astype(cast).astype(np.complex128), exponent.astype(cast).astype(np.complex128)


def inputs(name: str, real: str) -> tuple[np.ndarray, np.ndarray | None]:
    rng = np.random.default_rng(sorted(cm.FUNCTIONS).index(name))
    if name == "pow":
        return pow_inputs(real, rng)
    x = finite_inputs(real, rng)
    return (x, rng.permutation(x)) if name in BINARY else (x, None)


def _scaled(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(z / 2^k, k) with the larger part of z / 2^k in [0.5, 1) (exact)."""
    k = np.frexp(np.maximum(abs(z.real), abs(z.imag)))[1]
    return complexes(np.ldexp(z.real, -k), np.ldexp(z.imag, -k)), k


def reference(name: str, x: np.ndarray, y: np.ndarray | None) -> np.ndarray:
    """numpy's complex128 result, but where numpy itself is inaccurate: its log1p forms
    1 + z (here log|1 + z| = log1p(a(2 + a) + b^2) / 2 in extended precision near 0), and
    its sign and divide overflow for parts near the largest value (here on operands
    scaled by powers of two, which leaves numpy's result otherwise unchanged)."""
    with np.errstate(all="ignore"):
        if name == "log1p":
            a, b = x.real.astype(np.longdouble), x.imag.astype(np.longdouble)
            near0 = (abs(a) < 0.5) & (abs(b) < 0.5)
            out = np.log1p(x)
            out.real[near0] = (np.log1p(a * (2 + a) + b * b) / 2)[near0]
            return out
        if name == "sign":
            return np.sign(_scaled(x)[0])
        if name == "divide":
            (xs, kx), (ys, ky) = _scaled(x), _scaled(y)
            q = xs / ys
            return complexes(np.ldexp(q.real, kx - ky), np.ldexp(q.imag, kx - ky))
        function = getattr(np, name)
        return function(x, y) if name in BINARY else function(x)


def relative_errors(name: str, real: str, got: np.ndarray, want: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(|got - want| - atol) / |want| where want is finite and away from overflow in `real`
    (inf where got is NaN), and the mask of those points. atol is a few of the smallest
    normal values: devices may flush subnormal results to zero."""
    finfo = np.finfo(FLOAT[real])
    parts = [want] if name == "abs" else [want.real, want.imag]
    keep = np.logical_and.reduce([np.isfinite(p) & (abs(p) <= finfo.max / 4) for p in parts])
    err = abs(got[keep].astype(want.dtype) - want[keep]) - 4 * float(finfo.tiny)
    with np.errstate(all="ignore"):
        rel = np.where(err <= 0, 0.0, err / abs(want[keep]))
    return np.where(np.isnan(rel), np.inf, rel), keep


@pytest.mark.parametrize("real", REALS)
@pytest.mark.parametrize("name", sorted(cm.FUNCTIONS))
def test_matches_numpy(kernels, name, real):
    """Finite inputs: |got - want| <= rtol |want| + atol (the complex modulus), want being
    numpy's complex128 result (for complex64, on the same complex64 inputs)."""
    x, y = inputs(name, real)
    got = kernels.run(name, real, x, y)
    rel, keep = relative_errors(name, real, got, reference(name, x, y))
    assert keep.sum() > len(x) // 4
    bad = np.flatnonzero(~(rel <= RTOL[real]))
    xs, ys = x[keep], (None if y is None else y[keep])
    examples = [(xs[i], None if ys is None else ys[i], got[keep][i], rel[i]) for i in bad[:5]]
    assert not len(bad), f"{len(bad)} of {len(rel)} beyond rtol {RTOL[real]}; (x, y, got, rel): {examples}"


@pytest.mark.parametrize("real", REALS)
@pytest.mark.parametrize("name, points", [
    ("sqrt", [-4]), ("log", [-2]), ("log2", [-2]), ("log10", [-2]), ("log1p", [-3]),
    ("asin", [2, -2]), ("acos", [2, -2]), ("atanh", [2, -2]), ("acosh", [0.5, -2]),
    ("asinh", [2j, -2j]), ("atan", [2j, -2j]), ("pow", [-2]),
])
def test_branch_cuts_follow_the_sign_of_zero(kernels, name, real, points):
    """On a branch cut, the side is the sign of the zero part (C99): e.g. sqrt(-4 - 0j) =
    0 - 2j. Values and signs match numpy's; pow is x ** 0.5."""
    z = np.array(points, np.complex128)
    zero = np.array([0.0, -0.0]).repeat(len(z))
    x = np.tile(z, 2)
    x = complexes(np.where(x.real == 0, zero, x.real), np.where(x.imag == 0, zero, x.imag))
    y = np.full(len(x), 0.5 + 0j) if name == "pow" else None
    got = kernels.run(name, real, x, y).astype(np.complex128)
    want = reference(name, x, y)
    np.testing.assert_allclose(got, want, rtol=RTOL[real], atol=1e-6 if real == "float" else 1e-15)
    for part in ("real", "imag"):
        g, w = getattr(got, part), getattr(want, part)
        assert (np.signbit(g) == np.signbit(w))[w == 0].all(), (part, x, got, want)


# --- special cases -----------------------------------------------------------------------
#
# The Array API's tables for complex x = a + bj (elementwise_functions.py, 2025.12), one rule
# per line, "a b -> result"; the first rule that matches applies. Classes of a and b: +0 -0
# ±0 +inf -inf ±inf nan, pos (finite > 0), fin (finite), nzfin (finite, not 0), nz (not 0,
# NaN included), any, or a number. A result is "re im": nan, +0, -0, +inf, -inf, 1, -1,
# pi, pi/2, pi/4, 3pi/4, |a|, |b|, with ± where the sign is unspecified (an unsigned zero
# or infinity in the spec is +, as the array-api-tests suite reads it); or cis(+inf),
# cis(+0), cis(+inf)-1, cis(+0)-1 (cis(v) = cos(v) + i sin(v), v = b); abs gives one value.
# The spec's symmetries extend the tables: f(conj(x)) = conj(f(x)) (CONJ), odd (ODD) and even
# (EVEN) functions. sin, cos, tan, asin and atan are -1j * sinh(x*1j), cosh(x*1j),
# -1j * tanh(x*1j), -1j * asinh(x*1j) and -1j * atanh(x*1j) (x*1j is the exact rotation
# -b + aj); log2 and log10 are log's values divided by log(2) and log(10).

RULES = {
    "abs": """
        ±inf any -> +inf
        any ±inf -> +inf
        ±0 any -> |b|
        any ±0 -> |a|
        nan fin -> nan
        fin nan -> nan
        nan nan -> nan""",
    "acos": """
        ±0 +0 -> pi/2 -0
        ±0 nan -> pi/2 nan
        fin +inf -> pi/2 -inf
        nzfin nan -> nan nan
        -inf pos -> pi -inf
        +inf pos -> +0 -inf
        -inf +inf -> 3pi/4 -inf
        +inf +inf -> pi/4 -inf
        ±inf nan -> nan ±inf
        nan fin -> nan nan
        nan +inf -> nan -inf
        nan nan -> nan nan""",
    "acosh": """
        ±0 +0 -> +0 pi/2
        fin +inf -> +inf pi/2
        nzfin nan -> nan nan
        +0 nan -> nan ±pi/2
        -inf pos -> +inf pi
        +inf pos -> +inf +0
        -inf +inf -> +inf 3pi/4
        +inf +inf -> +inf pi/4
        ±inf nan -> +inf nan
        nan fin -> nan nan
        nan +inf -> +inf nan
        nan nan -> nan nan""",
    "asinh": """
        +0 +0 -> +0 +0
        pos +inf -> +inf pi/2
        fin nan -> nan nan
        +inf pos -> +inf +0
        +inf +inf -> +inf pi/4
        nan +0 -> nan +0
        nan nzfin -> nan nan
        nan +inf -> ±inf nan
        nan nan -> nan nan""",
    "atanh": """
        +0 +0 -> +0 +0
        +0 nan -> +0 nan
        1 +0 -> +inf +0
        pos +inf -> +0 pi/2
        nzfin nan -> nan nan
        +inf pos -> +0 pi/2
        +inf +inf -> +0 pi/2
        +inf nan -> +0 nan
        nan fin -> nan nan
        nan +inf -> ±0 pi/2
        nan nan -> nan nan""",
    "cosh": """
        +0 +0 -> 1 +0
        +0 +inf -> nan ±0
        +0 nan -> nan ±0
        nzfin +inf -> nan nan
        nzfin nan -> nan nan
        +inf +0 -> +inf +0
        +inf nzfin -> cis(+inf)
        +inf +inf -> ±inf nan
        +inf nan -> +inf nan
        nan ±0 -> nan ±0
        nan nzfin -> nan nan
        nan nan -> nan nan""",
    "exp": """
        ±0 +0 -> 1 +0
        fin +inf -> nan nan
        fin nan -> nan nan
        +inf +0 -> +inf +0
        -inf fin -> cis(+0)
        +inf nzfin -> cis(+inf)
        -inf +inf -> ±0 ±0
        +inf +inf -> ±inf nan
        -inf nan -> ±0 ±0
        +inf nan -> ±inf nan
        nan +0 -> nan +0
        nan nz -> nan nan""",
    "expm1": """
        ±0 +0 -> +0 +0
        fin +inf -> nan nan
        fin nan -> nan nan
        +inf +0 -> +inf +0
        -inf fin -> cis(+0)-1
        +inf nzfin -> cis(+inf)-1
        -inf +inf -> -1 ±0
        +inf +inf -> ±inf nan
        -inf nan -> -1 ±0
        +inf nan -> ±inf nan
        nan +0 -> nan +0
        nan nz -> nan nan""",
    "log": """
        -0 +0 -> -inf pi
        +0 +0 -> -inf +0
        fin +inf -> +inf pi/2
        fin nan -> nan nan
        -inf pos -> +inf pi
        +inf pos -> +inf +0
        -inf +inf -> +inf 3pi/4
        +inf +inf -> +inf pi/4
        ±inf nan -> +inf nan
        nan fin -> nan nan
        nan +inf -> +inf nan
        nan nan -> nan nan""",
    "log1p": """
        -1 +0 -> -inf +0
        fin +inf -> +inf pi/2
        fin nan -> nan nan
        -inf pos -> +inf pi
        +inf pos -> +inf +0
        -inf +inf -> +inf 3pi/4
        +inf +inf -> +inf pi/4
        ±inf nan -> +inf nan
        nan fin -> nan nan
        nan +inf -> +inf nan
        nan nan -> nan nan""",
    "sign": """
        ±0 ±0 -> +0 +0
        nan any -> nan nan
        any nan -> nan nan""",
    "sinh": """
        +0 +0 -> +0 +0
        +0 +inf -> ±0 nan
        +0 nan -> ±0 nan
        pos +inf -> nan nan
        pos nan -> nan nan
        +inf +0 -> +inf +0
        +inf pos -> cis(+inf)
        +inf +inf -> ±inf nan
        +inf nan -> ±inf nan
        nan +0 -> nan +0
        nan nzfin -> nan nan
        nan nan -> nan nan""",
    "sqrt": """
        ±0 +0 -> +0 +0
        any +inf -> +inf +inf
        fin nan -> nan nan
        -inf pos -> +0 +inf
        +inf pos -> +inf +0
        -inf nan -> nan ±inf
        +inf nan -> +inf nan
        nan any -> nan nan""",
    "tanh": """
        +0 +0 -> +0 +0
        nzfin +inf -> nan nan
        +0 +inf -> +0 nan
        nzfin nan -> nan nan
        +0 nan -> +0 nan
        +inf pos -> 1 +0
        +inf +inf -> 1 ±0
        +inf nan -> 1 ±0
        nan +0 -> nan +0
        nan nz -> nan nan""",
}
CONJ = {"acos", "acosh", "asinh", "atanh", "cosh", "exp", "expm1", "log", "log1p", "sinh", "sqrt", "tanh"}
ODD = {"asinh", "atanh", "sinh", "tanh"}
EVEN = {"cosh"}
# name: (base function of x*1j, whether the result is multiplied by -1j)
ROTATED = {"sin": ("sinh", True), "cos": ("cosh", False), "tan": ("tanh", True),
           "asin": ("asinh", True), "atan": ("atanh", True)}
RESCALED = {"log2": math.log(2), "log10": math.log(10)}
SPECIFIED = sorted([*RULES, *ROTATED, *RESCALED])

GRID = (0.0, -0.0, 1.0, -1.0, 2.5, -2.5, math.inf, -math.inf, math.nan)

CLASSES = {
    "+0": lambda v: v == 0 and math.copysign(1, v) > 0,
    "-0": lambda v: v == 0 and math.copysign(1, v) < 0,
    "±0": lambda v: v == 0,
    "+inf": lambda v: v == math.inf,
    "-inf": lambda v: v == -math.inf,
    "±inf": math.isinf,
    "nan": math.isnan,
    "pos": lambda v: math.isfinite(v) and v > 0,
    "fin": math.isfinite,
    "nzfin": lambda v: math.isfinite(v) and v != 0,
    "nz": lambda v: v != 0,
    "any": lambda v: True,
}
MAGNITUDES = {"0": 0.0, "1": 1.0, "inf": math.inf, "nan": math.nan,
              "pi": math.pi, "pi/2": math.pi / 2, "pi/4": math.pi / 4, "3pi/4": 3 * math.pi / 4}


def _is(cls: str, v: float) -> bool:
    return CLASSES[cls](v) if cls in CLASSES else v == float(cls)


# An expected part: (value, whether its sign is unspecified).
def _part(token: str, a: float, b: float) -> tuple[float, bool]:
    if token in ("|a|", "|b|"):
        return abs(a if token == "|a|" else b), False
    unsigned = token.startswith("±")
    sign = -1.0 if token.startswith("-") else 1.0
    return math.copysign(MAGNITUDES[token.lstrip("±+-")], sign), unsigned


def _result(tokens: list[str], a: float, b: float) -> list[tuple[float, bool]]:
    if len(tokens) == 1 and tokens[0].startswith("cis("):
        scale = math.inf if tokens[0].startswith("cis(+inf)") else 0.0
        shift = 1.0 if tokens[0].endswith("-1") else 0.0
        return [(scale * math.cos(b) - shift, False), (scale * math.sin(b), False)]
    return [_part(token, a, b) for token in tokens]


def _rules(name: str) -> list[tuple[str, str, list[str]]]:
    rules = []
    for line in RULES[name].strip().splitlines():
        left, right = line.split("->")
        a, b = left.split()
        rules.append((a, b, right.split()))
    return rules


def _negate(part: tuple[float, bool]) -> tuple[float, bool]:
    return -part[0], part[1]


def _canonical(name: str, a: float, b: float):
    """(a', b', map from the result at a' + b'j to the result at a + bj): the spec's symmetries
    bring a negative b (CONJ) and a negative a (ODD, EVEN) to the half-planes its tables cover."""
    maps = []
    if name in ODD | EVEN and math.copysign(1, a) < 0 and not math.isnan(a):
        a, b = -a, -b
        if name in ODD:
            maps.append(lambda r: [_negate(r[0]), _negate(r[1])])
    if name in CONJ and math.copysign(1, b) < 0 and not math.isnan(b):
        b = -b
        maps.append(lambda r: [r[0], _negate(r[1])])
    return a, b, maps


def specified(name: str, a: float, b: float) -> list[tuple[float, bool]] | None:
    """The Array API's result for name(a + bj) (one part for abs), None where it says nothing."""
    if name in ROTATED:
        base, turn = ROTATED[name]
        r = specified(base, -b, a)
        return [r[1], _negate(r[0])] if r is not None and turn else r
    if name in RESCALED:
        r = specified("log", a, b)
        return None if r is None else [(v / RESCALED[name], unsigned) for v, unsigned in r]
    a2, b2, maps = _canonical(name, a, b)
    for ca, cb, tokens in _rules(name):
        if _is(ca, a2) and _is(cb, b2):
            r = _result(tokens, a2, b2)
            for back in reversed(maps):
                r = back(r)
            return r
    return None


def _agrees(got: float, want: float, unsigned: bool, rtol: float) -> bool:
    if math.isnan(want) or math.isnan(got):
        return math.isnan(want) and math.isnan(got)
    if unsigned:
        got, want = abs(got), abs(want)
    if want == 0 or math.isinf(want):
        return got == want and math.copysign(1, got) == math.copysign(1, want)
    return math.isclose(got, want, rel_tol=rtol)


@pytest.mark.parametrize("real", REALS)
@pytest.mark.parametrize("name", SPECIFIED)
def test_special_cases(kernels, name, real):
    cases = [(a, b, want) for a in GRID for b in GRID if (want := specified(name, a, b)) is not None]
    assert len(cases) >= 20  # the tables parsed
    got = kernels.run(name, real, complexes([c[0] for c in cases], [c[1] for c in cases]))
    parts = (lambda g: [g]) if name == "abs" else (lambda g: [g.real, g.imag])
    failures = [(complex(a, b), g, want) for (a, b, want), g in zip(cases, got)
                if not all(_agrees(float(p), w, u, 4 * RTOL[real]) for p, (w, u) in zip(parts(g), want))]
    assert not failures, f"{len(failures)} of {len(cases)}: (x, got, expected (value, sign unspecified)): {failures}"


def _mul(x: complex, y: complex) -> complex:
    """Textbook product in Python floats (complex() would raise on inf * 0 in places)."""
    return complex(x.real * y.real - x.imag * y.imag, x.real * y.imag + x.imag * y.real)


def _as_complex(parts: list[tuple[float, bool]]) -> complex:
    return complex(parts[0][0], parts[1][0])


def pow_specified(x: complex, y: complex) -> list[tuple[float, bool]] | None:
    """The Array API's x ** y for non-finite x and finite non-integer y: as if
    exp(y * log(x)), log and exp from their tables (log's are fully specified); None where
    a table says nothing (the spec has no log(+inf + 0j), for one)."""
    log = specified("log", x.real, x.imag)
    if log is None:
        return None
    w = _mul(y, _as_complex(log))
    if math.isfinite(w.real) and math.isfinite(w.imag):
        return [(cmath.exp(w).real, False), (cmath.exp(w).imag, False)]
    return specified("exp", w.real, w.imag)


@pytest.mark.parametrize("real", REALS)
def test_pow_special_cases(kernels, real):
    """x ** y: x ** 0 = 1 + 0j for every x, NaN included (numpy; the Array API's real rule);
    for a complex zero x (numpy's rule) 0 + 0j when Re y > 0, else NaN + NaN j; for
    non-finite x and non-integer y, exp(y * log(x)) per the tables."""
    specials = [complex(a, b) for a in GRID for b in GRID if not (math.isfinite(a) and math.isfinite(b))]
    zeros = [complex(a, b) for a in (0.0, -0.0) for b in (0.0, -0.0)]
    powers = [complex(0.5, 0), complex(-1.5, 0.5), complex(2.5, -1)]
    cases = [(x, complex(z, -z), [(1.0, False), (0.0, False)]) for x in specials + zeros for z in (0.0, -0.0)]
    cases += [(x, y, [(0.0, False)] * 2 if y.real > 0 else [(math.nan, False)] * 2)
              for x in zeros for y in powers + [complex(math.nan, 0)]]
    cases += [(x, y, want) for x in specials for y in powers if (want := pow_specified(x, y)) is not None]
    got = kernels.run("pow", real, complexes([c[0].real for c in cases], [c[0].imag for c in cases]),
                      complexes([c[1].real for c in cases], [c[1].imag for c in cases]))
    failures = [(x, y, g, want) for (x, y, want), g in zip(cases, got)
                if not all(_agrees(float(p), w, u, 4 * RTOL[real]) for p, (w, u) in zip((g.real, g.imag), want))]
    assert not failures, f"{len(failures)} of {len(cases)}: (x, y, got, expected): {failures}"


NUMPY_DEFINED = ("divide", "multiply", "pow", "reciprocal", "sign", "square")


@pytest.mark.parametrize("real", REALS)
@pytest.mark.parametrize("name", NUMPY_DEFINED)
def test_special_values_numpy_defines(kernels, name, real):
    """Where the Array API leaves non-finite operands to the implementation (multiply,
    divide and what it defines through them: square, reciprocal, the rest of sign; pow
    with integer exponents, numpy's repeated multiplication), results are numpy's: the
    same NaN parts, infinities and signed zeros."""
    grid = complexes(*np.array([(a, b) for a in GRID for b in GRID]).T)
    if name == "pow":
        x, y = np.repeat(grid, 7), np.tile(np.array([-3, -2, -1, 1, 2, 3, 5], np.complex128), len(grid))
    elif name in BINARY:
        x, y = np.repeat(grid, len(grid)), np.tile(grid, len(grid))
    else:
        x, y = grid, None
        if name == "sign":  # the spec's own cases are test_special_cases'
            x = x[[specified("sign", z.real, z.imag) is None for z in x]]
    got = kernels.run(name, real, x, y)
    with np.errstate(all="ignore"):
        want = getattr(np, name)(x, y) if name in BINARY else getattr(np, name)(x)
    failures = [(x[i], None if y is None else y[i], got[i], want[i]) for i in range(len(x))
                if not all(_agrees(float(g), float(w), False, 4 * RTOL[real])
                           for g, w in ((got[i].real, want[i].real), (got[i].imag, want[i].imag)))]
    assert not failures, f"{len(failures)} of {len(x)}: (x, y, got, numpy): {failures[:10]}"


def test_interface():
    assert cm.call("multiply", ["a", "b"], "float") == "cmul_float(a, b)"
    assert cm.call("abs", ["z"], "double") == "cabs_double(z)"
    src = cm.source(["tan", "exp", "tan"], "float")
    assert src == cm.source(["exp", "tan"], "float")  # each helper once, whatever the order asked
    assert src.count("cexp_float(float2 z)") == 1 and "double" not in src
    assert src.index("ctanh_float(float2 z)") < src.index("ctan_float(float2 z)")
    assert cm.source([], "double") == ""
    for bad in (lambda: cm.call("exp", ["a", "b"], "float"), lambda: cm.call("exp", ["a"], "half"),
                lambda: cm.source(["frexp"], "float")):
        with pytest.raises(ValueError):
            bad()
