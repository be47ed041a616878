"""OpenCL C for numpy's complex functions on complex64 (`float2`) and complex128 (`double2`).

A complex value is a two-element vector: `.x` the real part, `.y` the imaginary part.
`call` gives the expression applying a function, `source` the helper functions that
expression needs. Finite inputs give numpy's values (its algorithms where they are exact,
such as multiply, square and integer powers; otherwise well-conditioned formulas after
FreeBSD's msun, from which numpy's npymath derives). Infinities, NaNs and signed zeros give
the Array API's special cases (C99 Annex G), numpy's values where the Array API leaves them
to the implementation.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable
from string import Template

# Public name: (helper, number of complex arguments).
_ENTRY: dict[str, tuple[str, int]] = {
    "multiply": ("cmul", 2), "divide": ("cdiv", 2), "pow": ("cpow", 2),
    "abs": ("cabs", 1), "sign": ("csign", 1), "reciprocal": ("crecip", 1), "square": ("csquare", 1),
    "sqrt": ("csqrt", 1), "exp": ("cexp", 1), "expm1": ("cexpm1", 1),
    "log": ("clog", 1), "log1p": ("clog1p", 1), "log2": ("clog2", 1), "log10": ("clog10", 1),
    "sin": ("csin", 1), "cos": ("ccos", 1), "tan": ("ctan", 1),
    "sinh": ("csinh", 1), "cosh": ("ccosh", 1), "tanh": ("ctanh", 1),
    "asin": ("casin", 1), "acos": ("cacos", 1), "atan": ("catan", 1),
    "asinh": ("casinh", 1), "acosh": ("cacosh", 1), "atanh": ("catanh", 1),
}

FUNCTIONS: frozenset[str] = frozenset(_ENTRY)

# Helper: (helpers it calls, C template). In templates $T is the component type, $V the
# complex (two-vector) type, $V3 its three-vector; helper names end in _$T so that both
# precisions can share a program; other $NAMEs are the constants of `_constants`.
_HELPERS: dict[str, tuple[tuple[str, ...], str]] = {}


def _helper(name: str, deps: tuple[str, ...], template: str) -> None:
    """Register helper `name`, which calls the helpers `deps`."""
    _HELPERS[name] = (deps, template.strip("\n"))


_helper("chypot", (), """
/* sqrt(a^2 + b^2) without overflow or underflow, within 2 ulp of the correctly rounded
   value, with hypot's infinities and NaNs: the parts are scaled by a power of two where
   their squares would leave the normal range. Written with compares and selects only,
   which CPU drivers vectorize: PoCL calls hypot(), isnan(), fmax() and the like as
   functions (its hypot() made abs of complex64 18x slower than numpy's). */
static inline $T chypot_$T($T a, $T b)
{
    $T x = fabs(a), y = fabs(b);
    $T m = x > y ? x : y, n = x > y ? y : x;
    $T up = m > $HYPOT_HIGH ? ($T)$HYPOT_DOWN : m < $HYPOT_LOW ? ($T)$HYPOT_UP : ($T)1;
    $T down = m > $HYPOT_HIGH ? ($T)$HYPOT_UP : m < $HYPOT_LOW ? ($T)$HYPOT_DOWN : ($T)1;
    m *= up;
    n *= up;
    $T r = sqrt(m * m + n * n) * down;
    return (x == ($T)INFINITY) | (y == ($T)INFINITY) ? ($T)INFINITY : (a != a) | (b != b) ? a + b : r;
}
""")

_helper("cmul", (), """
/* a * b, numpy's textbook product: the same roundings, and the same NaNs from infinite parts. */
static inline $V cmul_$T($V a, $V b)
{
    return ($V)(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}
""")

_helper("csquare", ("cmul",), """
static inline $V csquare_$T($V z)
{
    return cmul_$T(z, z);
}
""")

_helper("cdiv", (), """
/* a / b by Smith's algorithm (numpy's), dividing rather than multiplying by a reciprocal that
   could be subnormal; a zero divisor gives numpy's infinities and NaNs. */
static inline $V cdiv_$T($V a, $V b)
{
    if (b.x == 0 && b.y == 0)
        return ($V)(a.x / fabs(b.x), a.y / fabs(b.y));
    /* Halve operands near overflow so that the sums below stay finite. */
    $T s = 1;
    /* (compares, not fmax(): PoCL calls it as a function) */
    if (fabs(a.x) > $HALF_MAX || fabs(a.y) > $HALF_MAX) { a /= 2; s = 2; }
    if (fabs(b.x) > $HALF_MAX || fabs(b.y) > $HALF_MAX) { b /= 2; s /= 2; }
    if (fabs(b.x) >= fabs(b.y)) {
        $T r = b.y / b.x, d = b.x + b.y * r;
        return ($V)((a.x + a.y * r) / d, (a.y - a.x * r) / d) * s;
    }
    $T r = b.x / b.y, d = b.y + b.x * r;
    return ($V)((a.x * r + a.y) / d, (a.y * r - a.x) / d) * s;
}
""")

_helper("crecip", (), """
/* 1 / z, numpy's reciprocal (Smith's algorithm; 1 / 0 is NaN + NaN j). */
static inline $V crecip_$T($V z)
{
    if (fabs(z.y) <= fabs(z.x)) {
        $T r = z.y / z.x, d = z.x + z.y * r;
        return ($V)(1 / d, -r / d);
    }
    $T r = z.x / z.y, d = z.y + z.x * r;
    return ($V)(r / d, -1 / d);
}
""")

_helper("cabs", ("chypot",), """
/* |z|; infinite when a part is, even if the other is NaN. */
static inline $T cabs_$T($V z)
{
    return chypot_$T(z.x, z.y);
}
""")

_helper("csign", ("chypot",), """
/* z / |z|: 0 for 0, NaN for a NaN part; numpy's values for infinite parts. */
static inline $V csign_$T($V z)
{
    if (isnan(z.x) || isnan(z.y) || (isinf(z.x) && isinf(z.y)))
        return ($V)(NAN, NAN);
    if (isinf(z.x) || isinf(z.y))
        return ($V)(isinf(z.x) ? copysign(($T)1, z.x) : 0, isinf(z.y) ? copysign(($T)1, z.y) : 0);
    if (z.x == 0 && z.y == 0)
        return ($V)(0, 0);
    /* Exact scaling to a larger part in [1, 2): |z| then can neither overflow nor underflow. */
    $V w = ldexp(z, -ilogb(fmax(fabs(z.x), fabs(z.y))));
    return w / chypot_$T(w.x, w.y);
}
""")

_helper("csqrt", ("chypot",), """
/* Principal square root, Kahan's algorithm (as msun's csqrt). */
static inline $V csqrt_$T($V z)
{
    $T a = z.x, b = z.y;
    if (a == 0 && b == 0)
        return ($V)(0, b);
    if (isinf(b))
        return ($V)(INFINITY, b);
    if (isnan(a))
        return ($V)(a, NAN);
    if (isinf(a))  /* -inf: 0 +- inf j (NaN +- inf j for NaN b); +inf: inf +- 0 j (inf + NaN j) */
        return signbit(a) ? ($V)(fabs(b - b), copysign(a, b)) : ($V)(a, copysign(b - b, b));
    /* Scale z by 4^-k, the root by 2^k: |z| + |a| must not overflow, nor (|z| + |a|) / 2
       be subnormal. A NaN b is ignored by fmax and propagates below. */
    $T m = fmax(fabs(a), fabs(b));
    int k = m >= $SQRT_BIG ? 1 : m < $SQRT_SMALL ? -$MANT : 0;
    a = ldexp(a, -2 * k);
    b = ldexp(b, -2 * k);
    $T h = chypot_$T(a, b), t;
    if (a >= 0) {
        t = sqrt((a + h) / 2);
        return ldexp(($V)(t, b / (2 * t)), k);
    }
    t = sqrt((h - a) / 2);
    return ldexp(($V)(fabs(b) / (2 * t), copysign(t, b)), k);
}
""")

_helper("cexpcis", (), """
/* f e^a (cos b + i sin b) with e^a applied in two halves: finite wherever the result is. */
static inline $V cexpcis_$T($T a, $T b, $T f)
{
    $T e = exp(a / 2);
    return ($V)(f * e * cos(b) * e, f * e * sin(b) * e);
}
""")

_helper("cexp", ("cexpcis",), """
static inline $V cexp_$T($V z)
{
    $T a = z.x, b = z.y;
    if (b == 0)
        return ($V)(exp(a), b);
    /* (compares, not isfinite() and isinf(): PoCL calls those as functions) */
    if (!(fabs(b) < ($T)INFINITY)) {
        if (fabs(a) == ($T)INFINITY)
            return a > 0 ? ($V)(a, NAN) : ($V)(0, 0);
        return ($V)(NAN, NAN);
    }
    if (a > $EXP_BIG)  /* e^a alone overflows (+inf included: inf * cis(b)) */
        return cexpcis_$T(a, b, 1);
    $T e = exp(a), c, sn = sincos(b, &c);
    return ($V)(e * c, e * sn);
}
""")

_helper("cexpm1", ("cexp",), """
/* e^z - 1. For |a| < 1 the real part is expm1(a) cos b - 2 sin^2(b / 2), without the
   cancellation of e^a cos b - 1; elsewhere |e^z - 1| is not small and e^z - 1 is accurate. */
static inline $V cexpm1_$T($V z)
{
    $T a = z.x, b = z.y;
    if (b == 0)  /* the Array API gives +0 for -0 + 0j */
        return ($V)(a == 0 ? 0 : expm1(a), b);
    if (fabs(a) >= 1) {
        $V w = cexp_$T(z);
        return ($V)(w.x - 1, w.y);
    }
    $T h = sin(b / 2);
    return ($V)(expm1(a) * cos(b) - 2 * h * h, exp(a) * sin(b));
}
""")

_helper("clog", ("chypot",), """
/* Principal logarithm log|z| + i arg z (CPython's cmath.log algorithm): log|z| is scaled
   where |z| could overflow or be subnormal, and uses log1p near |z| = 1 where log(|z|)
   would lose the small result. */
static inline $V clog_$T($V z)
{
    $T ax = fabs(z.x), ay = fabs(z.y), am = fmax(ax, ay), an = fmin(ax, ay), re;
    if (isinf(ax) || isinf(ay))
        re = INFINITY;
    else if (isnan(ax) || isnan(ay))
        re = NAN;
    else if (am > $QUARTER_MAX)
        re = log(chypot_$T(ax / 2, ay / 2)) + $LN2;
    else if (am < $MIN && am > 0)
        re = log(chypot_$T(ldexp(ax, $MANT), ldexp(ay, $MANT))) - $MANT_LN2;
    else {
        $T h = chypot_$T(ax, ay);
        /* am - 1 is exact here, (am - 1)(am + 1) + an^2 = |z|^2 - 1 */
        re = (h >= $LOG1P_LOW && h <= $LOG1P_HIGH) ? log1p((am - 1) * (am + 1) + an * an) / 2 : log(h);
    }
    return ($V)(re, atan2(z.y, z.x));
}
""")

_helper("clog1p", ("clog",), """
/* log(1 + z); near 0, log|1 + z| = log1p(2a + a^2 + b^2) / 2 keeps the small result that
   forming 1 + a would round away. */
static inline $V clog1p_$T($V z)
{
    $T a = z.x, b = z.y;
    if (fabs(a) < $HALF && fabs(b) < $HALF)
        return ($V)(log1p(a * (2 + a) + b * b) / 2, atan2(b, 1 + a));
    return clog_$T(($V)(1 + a, b));
}
""")

_helper("clog2", ("clog",), """
static inline $V clog2_$T($V z)
{
    return clog_$T(z) * $LOG2E;
}
""")

_helper("clog10", ("clog",), """
static inline $V clog10_$T($V z)
{
    return clog_$T(z) * $LOG10E;
}
""")

_helper("csinh", ("cexpcis",), """
/* sinh(a + ib) = sinh a cos b + i cosh a sin b (as msun's csinh): for large |a| both are
   e^|a| / 2, applied without premature overflow. */
static inline $V csinh_$T($V z)
{
    $T a = z.x, b = z.y;
    if (isfinite(a) && isfinite(b)) {
        if (b == 0)
            return ($V)(sinh(a), b);
        if (fabs(a) < $HYP_BIG)
            return ($V)(sinh(a) * cos(b), cosh(a) * sin(b));
        $V w = cexpcis_$T(fabs(a), b, $HALF);
        return ($V)(copysign(($T)1, a) * w.x, w.y);
    }
    if (a == 0)  /* 0 + i(inf or NaN) */
        return ($V)(a, NAN);
    if (b == 0)  /* (inf or NaN) + 0j */
        return z;
    if (isinf(a))
        return isfinite(b) ? ($V)(a * cos(b), INFINITY * sin(b)) : ($V)(a, NAN);
    return ($V)(NAN, NAN);
}
""")

_helper("ccosh", ("cexpcis",), """
/* cosh(a + ib) = cosh a cos b + i sinh a sin b (as msun's ccosh; see csinh). */
static inline $V ccosh_$T($V z)
{
    $T a = z.x, b = z.y;
    if (isfinite(a) && isfinite(b)) {
        if (b == 0)
            return ($V)(cosh(a), a * b);
        if (fabs(a) < $HYP_BIG)
            return ($V)(cosh(a) * cos(b), sinh(a) * sin(b));
        $V w = cexpcis_$T(fabs(a), b, $HALF);
        return ($V)(w.x, copysign(($T)1, a) * w.y);
    }
    if (a == 0)  /* 0 + i(inf or NaN) */
        return ($V)(NAN, 0);
    if (b == 0)  /* (inf or NaN) + 0j */
        return ($V)(a * a, copysign(($T)0, a) * b);
    if (isinf(a))
        return isfinite(b) ? ($V)(INFINITY * cos(b), a * sin(b)) : ($V)(INFINITY, NAN);
    return ($V)(NAN, NAN);
}
""")

_helper("ctanh", (), """
/* tanh by Kahan's algorithm (as msun's ctanh): with t = tan b, beta = 1 + t^2, s = sinh a,
   tanh z = (beta s sqrt(1 + s^2) + i t) / (1 + beta s^2). The device's real tanh is not
   used: some give 1 - ulp for large arguments. */
static inline $V ctanh_$T($V z)
{
    $T a = z.x, b = z.y;
    if (isnan(a))
        return ($V)(a, b == 0 ? b : NAN);
    if (isinf(a))
        return ($V)(copysign(($T)1, a), copysign(($T)0, b));
    if (!isfinite(b))
        return ($V)(a == 0 ? a : NAN, NAN);
    if (fabs(a) >= $TANH_BIG) {  /* tanh z = +-1 + 4i sin b cos b e^-2|a| to working precision */
        $T e = exp(-fabs(a));
        return ($V)(copysign(($T)1, a), 4 * sin(b) * cos(b) * e * e);
    }
    $T t = tan(b), beta = 1 + t * t, s = sinh(a), rho = sqrt(1 + s * s), d = 1 + beta * s * s;
    return ($V)(beta * rho * s / d, t / d);
}
""")

_helper("csin", ("csinh",), """
/* sin z = -i sinh(iz) */
static inline $V csin_$T($V z)
{
    $V w = csinh_$T(($V)(-z.y, z.x));
    return ($V)(w.y, -w.x);
}
""")

_helper("ccos", ("ccosh",), """
/* cos z = cosh(iz) */
static inline $V ccos_$T($V z)
{
    return ccosh_$T(($V)(-z.y, z.x));
}
""")

_helper("ctan", ("ctanh",), """
/* tan z = -i tanh(iz) */
static inline $V ctan_$T($V z)
{
    $V w = ctanh_$T(($V)(-z.y, z.x));
    return ($V)(w.y, -w.x);
}
""")

_helper("hull_f", (), """
/* (hypot(a, b) - b) / 2 without cancellation, given h = hypot(a, b). */
static inline $T hull_f_$T($T a, $T b, $T h)
{
    if (b < 0)
        return (h - b) / 2;
    if (b == 0)
        return a / 2;
    return a * a / (h + b) / 2;
}
""")

_helper("casinh_parts", ("hull_f", "chypot"), """
/* The core of asinh(x + iy) for finite x, y >= 0 below 1/eps, after Hull, Fairgrieve and Tang
   (as msun's catrig.c). With A = (|z + i| + |z - i|) / 2 and B = y / A:
   Re asinh z = log(A + sqrt(A^2 - 1)) and Im asinh z = asin B = atan2(sn, cs).
   Returns (Re, sn, cs). Near the segment [-i, i] (A near 1) and near the cuts (B near 1),
   A - 1 and A - y come from sums that do not cancel. */
static inline $V3 casinh_parts_$T($T x, $T y)
{
    $T R = chypot_$T(x, y + 1), S = chypot_$T(x, y - 1);
    $T A = fmax((R + S) / 2, ($T)1);  /* A >= 1, but for rounding */
    $T re;
    if (A >= 10)
        re = log(A + sqrt(A * A - 1));
    else if (y == 1 && x < $EPS2_128)
        re = sqrt(x);
    else if (x >= $EPS * fabs(y - 1)) {
        $T am1 = hull_f_$T(x, 1 + y, R) + hull_f_$T(x, 1 - y, S);
        re = log1p(am1 + sqrt(am1 * (A + 1)));
    }
    else if (y < 1)
        re = x / sqrt((1 - y) * (1 + y));
    else
        re = log1p((y - 1) + sqrt((y - 1) * (y + 1)));
    if (y < $FOUR_SQRT_MIN)  /* y / A could underflow: keep both scaled up */
        return ($V3)(re, y * $TWO_RECIP_EPS, A * $TWO_RECIP_EPS);
    $T B = y / A;
    if (B <= $B_CROSS)
        return ($V3)(re, B, sqrt((1 - B) * (1 + B)));
    /* cs = sqrt(A^2 - y^2) = sqrt((A - y)(A + y)) */
    if (y == 1 && x < $EPS_128)
        return ($V3)(re, y, sqrt(x) * sqrt((A + y) / 2));
    if (x >= $EPS * fabs(y - 1))
        return ($V3)(re, y, sqrt((hull_f_$T(x, y + 1, R) + hull_f_$T(x, y - 1, S)) * (A + y)));
    if (y > 1)  /* x^2 is negligible; scaled up against underflow */
        return ($V3)(re, y * $FOUR_RECIP_EPS2, x * $FOUR_RECIP_EPS2 * y / sqrt((y + 1) * (y - 1)));
    return ($V3)(re, y, sqrt((1 - y) * (1 + y)));
}
""")

_helper("casinh", ("clog", "casinh_parts"), """
/* Inverse hyperbolic sine, odd and conjugate-symmetric; cuts on the imaginary axis beyond +-i. */
static inline $V casinh_$T($V z)
{
    $T x = z.x, y = z.y, ax = fabs(x), ay = fabs(y);
    if (isnan(x) || isnan(y)) {
        if (isinf(x))
            return ($V)(x, NAN);
        if (isinf(y))
            return ($V)(y, NAN);
        return ($V)(NAN, y == 0 ? y : NAN);
    }
    if (ax > $RECIP_EPS || ay > $RECIP_EPS) {  /* asinh z = sign(x) (log 2 + log(sign(x) z)) + O(1/z^2) */
        $V w = clog_$T(signbit(x) ? -z : z);
        return ($V)(copysign(w.x + $LN2, x), copysign(w.y, y));
    }
    if (ax < $SQRT_6EPS_4 && ay < $SQRT_6EPS_4)  /* asinh z = z + O(z^3) */
        return z;
    $V3 p = casinh_parts_$T(ax, ay);
    return ($V)(copysign(p.x, x), copysign(atan2(p.y, p.z), y));
}
""")

_helper("casin", ("casinh",), """
/* asin z = -i asinh(iz), which by asinh's symmetries is asinh(y + ix) with its parts swapped. */
static inline $V casin_$T($V z)
{
    $V w = casinh_$T(($V)(z.y, z.x));
    return ($V)(w.y, w.x);
}
""")

_helper("cacos", ("clog", "casinh_parts"), """
/* Inverse cosine, conjugate-symmetric; Re in [0, pi], cuts on the real axis beyond +-1
   (msun's cacos): -Im acos z = Re asinh(|y| + i|x|), and Re acos z = acos(+-B). */
static inline $V cacos_$T($V z)
{
    $T x = z.x, y = z.y, ax = fabs(x), ay = fabs(y);
    if (isnan(x) || isnan(y)) {
        if (isinf(x))
            return ($V)(NAN, -INFINITY);
        if (isinf(y))
            return ($V)(NAN, -y);
        return ($V)(x == 0 ? $PI_2 : NAN, NAN);
    }
    if (ax > $RECIP_EPS || ay > $RECIP_EPS) {  /* acos z = |arg z| - i sign(y) (log 2 + log|z|) + O(1/z^2) */
        $V w = clog_$T(z);
        return ($V)(fabs(w.y), signbit(y) ? w.x + $LN2 : -(w.x + $LN2));
    }
    if (x == 1 && y == 0)
        return ($V)(0, -y);
    if (ax < $SQRT_6EPS_4 && ay < $SQRT_6EPS_4)  /* acos z = pi/2 - z + O(z^3) */
        return ($V)($PI_2 - x, -y);
    $V3 p = casinh_parts_$T(ay, ax);
    return ($V)(atan2(p.z, signbit(x) ? -p.y : p.y), signbit(y) ? p.x : -p.x);
}
""")

_helper("cacosh", ("cacos",), """
/* acosh z = +-i acos z, the sign making Re acosh z >= 0. */
static inline $V cacosh_$T($V z)
{
    $V w = cacos_$T(z);
    if (isnan(w.x) && isnan(w.y))
        return w;
    if (isnan(w.x))  /* +-inf + NaN j, NaN +- inf j */
        return ($V)(fabs(w.y), w.x);
    if (isnan(w.y))  /* 0 + NaN j: NaN + pi/2 j */
        return ($V)(w.y, w.x);
    return ($V)(fabs(w.y), copysign(w.x, z.y));
}
""")

_helper("real_recip", (), """
/* Re(1 / (x + iy)) = x / (x^2 + y^2) for non-NaN x, y, with exact scaling so that the squares
   neither overflow nor underflow. */
static inline $T real_recip_$T($T x, $T y)
{
    if (isinf(x) || isinf(y))
        return copysign(($T)0, x);
    int k = max(ilogb(x), ilogb(y));
    $T sx = ldexp(x, -k), sy = ldexp(y, -k);
    return ldexp(sx / (sx * sx + sy * sy), -k);
}
""")

_helper("catanh", ("real_recip",), """
/* Inverse hyperbolic tangent, odd and conjugate-symmetric; cuts on the real axis beyond +-1
   (msun's catanh): Re = log1p(4|x| / ((|x| - 1)^2 + y^2)) / 4,
   Im = atan2(2|y|, (1 - |x|)(1 + |x|) - y^2) / 2. */
static inline $V catanh_$T($V z)
{
    $T x = z.x, y = z.y, ax = fabs(x), ay = fabs(y), rx, ry;
    if (y == 0 && ax <= 1)
        return ($V)(atanh(x), y);
    if (x == 0)
        return ($V)(x, atan(y));
    if (isnan(x) || isnan(y)) {
        if (isinf(x))
            return ($V)(copysign(($T)0, x), NAN);
        if (isinf(y))
            return ($V)(copysign(($T)0, x), copysign($PI_2, y));
        return ($V)(NAN, NAN);
    }
    if (ax > $RECIP_EPS || ay > $RECIP_EPS)  /* atanh z = 1/z + i sign(y) pi/2 + O(1/z^3) */
        return ($V)(real_recip_$T(x, y), copysign($PI_2, y));
    if (ax < $SQRT_3EPS_2 && ay < $SQRT_3EPS_2)  /* atanh z = z + O(z^3) */
        return z;
    if (ax == 1 && ay < $EPS)
        rx = ($LN2 - log(ay)) / 2;
    else
        rx = log1p(4 * ax / ((ax - 1) * (ax - 1) + ay * ay)) / 4;
    if (ax == 1)
        ry = atan2(($T)2, -ay) / 2;
    else if (ay < $EPS)
        ry = atan2(2 * ay, (1 - ax) * (1 + ax)) / 2;
    else
        ry = atan2(2 * ay, (1 - ax) * (1 + ax) - ay * ay) / 2;
    return ($V)(copysign(rx, x), copysign(ry, y));
}
""")

_helper("catan", ("catanh",), """
/* atan z = -i atanh(iz), which by atanh's symmetries is atanh(y + ix) with its parts swapped. */
static inline $V catan_$T($V z)
{
    $V w = catanh_$T(($V)(z.y, z.x));
    return ($V)(w.y, w.x);
}
""")

_helper("cpowi", ("cmul", "cdiv"), """
/* z^n for an integer 0 < |n| < 100 by repeated squaring, numpy's way (exact for small powers
   of small exact values). */
static inline $V cpowi_$T($V z, int n)
{
    if (n == 1)
        return z;
    if (n == 2)
        return cmul_$T(z, z);
    if (n == 3)
        return cmul_$T(z, cmul_$T(z, z));
    $V acc = ($V)(1, 0), p = z;
    for (int m = n < 0 ? -n : n;; m >>= 1) {
        if (m & 1)
            acc = cmul_$T(acc, p);
        if (m == 1)
            break;
        p = cmul_$T(p, p);
    }
    /* 1 / acc as a division, like numpy's pow: crecip's zeros can differ in sign */
    return n < 0 ? cdiv_$T(($V)(1, 0), acc) : acc;
}
""")

_helper("cpow", ("cpowi", "clog", "cexp", "cmul"), """
/* x^y = exp(y log x), numpy's special values first: x^0 = 1 (even for NaN x), 0^y = 0 for
   Re y > 0 and NaN otherwise, and small integer powers by repeated squaring. */
static inline $V cpow_$T($V x, $V y)
{
    if (y.x == 0 && y.y == 0)
        return ($V)(1, 0);
    if (x.x == 0 && x.y == 0)
        return y.x > 0 ? ($V)(0, 0) : ($V)(NAN, NAN);
    if (y.y == 0 && fabs(y.x) < 100 && y.x == trunc(y.x))
        return cpowi_$T(x, (int)y.x);
    return cexp_$T(cmul_$T(y, clog_$T(x)));
}
""")


def _round_to(value: float, real: str) -> float:
    """`value` rounded to the component type (to nearest)."""
    return struct.unpack("f", struct.pack("f", value))[0] if real == "float" else value


def _literal(value: float, real: str) -> str:
    """A C literal of type `real` with the value `value` rounded to that type."""
    return repr(_round_to(value, real)) + ("f" if real == "float" else "")


# (epsilon, smallest normal, largest finite, mantissa bits, sinh/cosh and tanh and exp
# thresholds) per component type. Past HYP_BIG, e^-|a| is negligible beside e^|a|; past
# TANH_BIG, tanh a is 1 to working precision; past EXP_BIG, e^a overflows or nearly.
_LIMITS = {
    "float": (2.0**-23, 2.0**-126, (2 - 2.0**-23) * 2.0**127, 24, 9.0, 11.0, 88.0),
    "double": (2.0**-52, 2.0**-1022, (2 - 2.0**-52) * 2.0**1023, 53, 22.0, 22.0, 709.0),
}


def _constants(real: str) -> dict[str, str]:
    """The template substitutions for component type `real`."""
    eps, tiny, huge, mant, hyp_big, tanh_big, exp_big = _LIMITS[real]
    values = {
        "EPS": eps, "EPS_128": eps / 128, "EPS2_128": eps * eps / 128,
        "RECIP_EPS": 1 / eps, "TWO_RECIP_EPS": 2 / eps, "FOUR_RECIP_EPS2": 4 / (eps * eps),
        "SQRT_6EPS_4": math.sqrt(6 * eps) / 4, "SQRT_3EPS_2": math.sqrt(3 * eps) / 2,
        "MIN": tiny, "FOUR_SQRT_MIN": 4 * math.sqrt(tiny), "SQRT_SMALL": 4 * tiny,
        "HALF_MAX": huge / 2, "QUARTER_MAX": huge / 4, "SQRT_BIG": huge / (1 + math.sqrt(2)),
        "MANT_LN2": mant * math.log(2), "HYP_BIG": hyp_big, "TANH_BIG": tanh_big, "EXP_BIG": exp_big,
        "B_CROSS": 0.6417, "LOG1P_LOW": 0.71, "LOG1P_HIGH": 1.73, "HALF": 0.5,
        # (squares of parts in [LOW, HIGH] are normal numbers, and so are those of parts
        # outside it scaled by UP or DOWN: see chypot)
        **dict(zip(("HYPOT_LOW", "HYPOT_HIGH", "HYPOT_UP", "HYPOT_DOWN"),
                   (2.0 ** -60, 2.0 ** 60, 2.0 ** 100, 2.0 ** -100) if real == "float" else
                   (2.0 ** -500, 2.0 ** 500, 2.0 ** 600, 2.0 ** -600))),
        "PI_2": math.pi / 2, "LN2": math.log(2), "LOG2E": 1 / math.log(2), "LOG10E": 1 / math.log(10),
    }
    subs = {name: _literal(value, real) for name, value in values.items()}
    subs.update(T=real, V=f"{real}2", V3=f"{real}3", MANT=str(mant))
    return subs


def _check_real(real: str) -> None:
    if real not in _LIMITS:
        raise ValueError(f"component type must be 'float' or 'double', not {real!r}")


def call(name: str, args: list[str], real: str) -> str:
    """The OpenCL C expression applying `name` to the argument expressions `args`; `real` is
    "float" or "double" (the component type). Every complex argument and result is a
    float2/double2, except abs's result: a float/double."""
    _check_real(real)
    if name not in _ENTRY:
        raise ValueError(f"no complex function {name!r}")
    helper, arity = _ENTRY[name]
    if len(args) != arity:
        raise ValueError(f"complex {name} takes {arity} argument(s), not {len(args)}")
    return f"{helper}_{real}({', '.join(args)})"


def _closure(helpers: Iterable[str]) -> list[str]:
    """`helpers` and the helpers they call, each once, every one after those it calls."""
    order: list[str] = []

    def visit(helper: str) -> None:
        if helper in order:
            return
        for dep in _HELPERS[helper][0]:
            visit(dep)
        order.append(helper)

    for helper in helpers:
        visit(helper)
    return order


def source(names: Iterable[str], real: str) -> str:
    """C source defining the helper functions that calls of `names` need (and the helpers they
    use themselves, each once, in dependency order), for component type `real`. Function
    names carry the type (e.g. `cmul_float`, `cexp_double`) so a kernel may include both
    precisions; all are `static inline`."""
    _check_real(real)
    wanted = sorted(set(names))  # sorted: the same source whatever the order asked
    unknown = [name for name in wanted if name not in _ENTRY]
    if unknown:
        raise ValueError(f"no complex function(s) {unknown}")
    subs = _constants(real)
    parts = [Template(_HELPERS[h][1]).substitute(subs) for h in _closure(_ENTRY[n][0] for n in wanted)]
    return "\n\n".join(parts) + ("\n" if parts else "")
