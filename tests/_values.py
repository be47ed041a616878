"""Shared helpers for the value tests: dtypes, input values, numpy references, comparisons.

The references are numpy's results, adjusted only where the library deliberately
differs from numpy (see `expected_unary` / `expected_binary`).
"""

from __future__ import annotations

import numpy as np

import clients

BOOL = np.dtype(np.bool_)
INT32 = np.dtype(np.int32)
INT64 = np.dtype(np.int64)
FLOAT32 = np.dtype(np.float32)
FLOAT64 = np.dtype(np.float64)
DTYPES = (BOOL, INT32, INT64, FLOAT32, FLOAT64)
INTS = (INT32, INT64)
# The standard's other integer dtypes, in the element-wise matrix of every op.
SMALL_INTS = tuple(np.dtype(d) for d in (np.int8, np.int16, np.uint8, np.uint16, np.uint32, np.uint64))
FLOATS = (FLOAT32, FLOAT64)

# Sizes that are not multiples of the vector width, so vector tails run.
ODD_SIZES = (1, 3, 37, 1001)

# (rtol, atol) per result dtype; ints and bools compare exactly.
TOLERANCE = {FLOAT32: (1e-5, 1e-6), FLOAT64: (1e-12, 1e-14)}

# -- op families, as the library defines them ------------------------------------------
FLOAT_UNARY = frozenset(
    "exp expm1 log log1p log2 log10 sqrt sin cos tan asin acos atan sinh cosh tanh "
    "asinh acosh atanh".split()
)
FLOAT_BINARY = frozenset("divide atan2 hypot copysign logaddexp nextafter".split())
# numpy computes these on bool by upcasting to int8; here they refuse bool.
NO_BOOL = frozenset("subtract floor_divide remainder pow square negative sign conj real imag".split())
# Only defined on integers and bools.
BITWISE = frozenset("bitwise_and bitwise_or bitwise_xor bitwise_invert".split())
# Only defined on integers (numpy upcasts bools to int8; the library refuses them).
SHIFTS = frozenset("bitwise_left_shift bitwise_right_shift".split())
# Results whose sign of zero numpy specifies and the tests check.
SIGNED_ZERO_OPS = frozenset(
    "negative positive abs copysign floor ceil trunc round floor_divide remainder multiply".split()
)


def accepts(name: str, dtype: np.dtype) -> bool:
    """Whether op `name` takes operands of `dtype` (after promotion)."""
    if dtype == BOOL and name in NO_BOOL:
        return False
    if dtype.kind == "f" and name in BITWISE | SHIFTS:
        return False
    if dtype == BOOL and name in SHIFTS:
        return False
    return True


def _errstate():
    return np.errstate(all="ignore")


def expected_unary(name: str, x: np.ndarray) -> np.ndarray:
    """numpy's `name(x)`, with the library's deliberate differences for bool inputs."""
    with _errstate():
        if name in FLOAT_UNARY and x.dtype.itemsize <= 2 and x.dtype.kind in "biu":
            # numpy gives float16 for bool and 1-byte ints; the smallest float here is float32.
            return getattr(np, name)(x.astype(FLOAT32))
        if x.dtype == BOOL:
            if name in ("positive", "round"):
                return x.copy()
        return getattr(np, name)(x)


def expected_binary(name: str, a, b) -> np.ndarray:
    """numpy's `name(a, b)`, with the library's deliberate differences for bool inputs
    and for floor division with an infinite operand (the Array API's floor(a / b))."""
    with _errstate():
        if name in FLOAT_BINARY and name != "divide" and np.result_type(a, b).itemsize <= 2:
            # numpy gives float16 for bool and 1-byte ints; the smallest float here is float32.
            return getattr(np, name)(np.asarray(a, FLOAT32), np.asarray(b, FLOAT32))
        if name == "divide" and np.result_type(a, b) == BOOL:
            return np.divide(np.asarray(a, FLOAT32), np.asarray(b, FLOAT32))
        out = np.asarray(getattr(np, name)(a, b))
        if name == "floor_divide" and out.dtype.kind == "f":
            inf = np.isinf(a) | np.isinf(b)
            out = np.where(inf, np.floor(np.true_divide(a, b)).astype(out.dtype), out)
        return out


# -- input values ---------------------------------------------------------------------
FLOAT_SPECIALS = [
    0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 1.5, -1.5, 2.5, -2.5, 3.0, -3.0, 0.999, -0.999,
    1e-6, -1e-6, 10.0, -10.0, 50.0, -50.0, np.nan, np.inf, -np.inf,
]
INT_SPECIALS = [0, 1, -1, 2, -2, 3, -3, 7, -7, 10, -10, 100, -100, 12345, -12345]
PAIR_FLOAT_SPECIALS = [0.0, -0.0, 0.5, 1.0, -1.0, 2.5, -2.5, 3.0, -3.0, 7.0, -7.0, np.nan, np.inf, -np.inf]
PAIR_INT_SPECIALS = [0, 1, -1, 2, -2, 3, -3, 7, -7, 100, -100]

# Random fill ranges for unary float functions (the specials cover the rest of the line).
UNARY_DOMAIN = {
    "asin": (-1.0, 1.0), "acos": (-1.0, 1.0), "atanh": (-1.0, 1.0), "acosh": (1.0, 20.0),
    "log": (0.0, 20.0), "log2": (0.0, 20.0), "log10": (0.0, 20.0), "log1p": (-1.0, 20.0),
    "sqrt": (0.0, 100.0), "tan": (-1.5, 1.5),
}


def fill(specials: list, dtype: np.dtype, n: int, rng: np.random.Generator, low: float, high: float):
    """`specials` (cast to dtype, as many as fit) followed by random values up to `n`."""
    # (specials outside a small integer dtype's range wrap into it, as astype does)
    head = (np.array(specials, dtype=dtype) if dtype.kind not in "iu" else np.array(specials).astype(dtype))[:n]
    rest = n - len(head)
    if dtype == BOOL:
        tail = rng.integers(0, 2, rest).astype(BOOL)
    elif dtype.kind in "iu":
        tail = rng.integers(int(low), int(high), rest).astype(dtype)
    else:
        tail = rng.uniform(low, high, rest).astype(dtype)
    return np.concatenate([head, tail])


def unary_input(name: str, dtype: np.dtype, n: int, seed: int = 0) -> np.ndarray:
    """`n` inputs of `dtype` for unary op `name`: edge values first, then random ones."""
    rng = np.random.default_rng(seed)
    if dtype == BOOL:
        return fill([False, True], dtype, n, rng, 0, 2)
    low, high = UNARY_DOMAIN.get(name, (-10.0, 10.0))
    if dtype.kind in "iu":
        specials = INT_SPECIALS
        if name in FLOAT_UNARY:
            # exp(12345) only overflows; keep integers where float64 results stay finite.
            specials = [v for v in INT_SPECIALS if abs(v) <= 100]
        return fill(specials, dtype, n, rng, min(low, -50), max(high, 50))
    return fill(FLOAT_SPECIALS, dtype, n, rng, low, high)


def binary_inputs(name: str, dtype: np.dtype, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """`n` pairs of `dtype` for binary op `name`: every pair of edge values, then random pairs."""
    rng = np.random.default_rng(seed)
    if dtype == BOOL:
        specials = [False, True]
    elif dtype.kind in "iu":
        specials = PAIR_INT_SPECIALS
    else:
        specials = PAIR_FLOAT_SPECIALS
    if name == "pow" and dtype.kind in "iu":
        # Integer powers: non-negative exponents only (numpy refuses negative ones).
        a_head = np.repeat(np.array([0, 1, -1, 2, -2, 3, -3, 10, -10]), 6)
        b_head = np.tile(np.arange(6), 9)
        a_rest = rng.integers(-10, 11, n)
        b_rest = rng.integers(0, 6, n)
    else:
        a_head = np.repeat(np.array(specials), len(specials))
        b_head = np.tile(np.array(specials), len(specials))
        if dtype == BOOL:
            a_rest, b_rest = rng.integers(0, 2, n), rng.integers(0, 2, n)
        elif dtype.kind in "iu":
            a_rest, b_rest = rng.integers(-1000, 1000, n), rng.integers(-1000, 1000, n)
        elif name == "pow":
            a_rest, b_rest = rng.uniform(-5, 5, n), rng.uniform(-3, 3, n)
        else:
            a_rest, b_rest = rng.uniform(-10, 10, n), rng.uniform(-10, 10, n)
    a = np.concatenate([a_head, a_rest])[:n].astype(dtype)
    b = np.concatenate([b_head, b_rest])[:n].astype(dtype)
    return a, b


# -- comparing ------------------------------------------------------------------------
def assert_values(got: np.ndarray, expected: np.ndarray, signed_zeros: bool = False) -> None:
    """`got` equals `expected` in dtype, shape and values (floats within TOLERANCE)."""
    expected = np.asarray(expected)
    assert got.dtype == expected.dtype, f"dtype {got.dtype}, expected {expected.dtype}"
    assert got.shape == expected.shape, f"shape {got.shape}, expected {expected.shape}"
    if expected.dtype.kind == "f":
        rtol, atol = TOLERANCE[expected.dtype]
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol, equal_nan=True)
        if signed_zeros:
            zeros = expected == 0
            np.testing.assert_array_equal(
                np.signbit(got[zeros]), np.signbit(expected[zeros]), err_msg="sign of zero differs"
            )
    else:
        np.testing.assert_array_equal(got, expected)


def assert_tensor(t, expected, signed_zeros: bool = False) -> None:
    """`t` is a Tensor whose shape, dtype and values are `expected`'s."""
    assert isinstance(t, clients.Tensor), f"expected a Tensor, got {type(t).__name__}"
    expected = np.asarray(expected)
    assert t.shape == expected.shape, f"tensor shape {t.shape}, expected {expected.shape}"
    assert t.dtype == expected.dtype, f"tensor dtype {t.dtype}, expected {expected.dtype}"
    assert_values(t.numpy(), expected, signed_zeros)


def box_blur(g):
    """The 3 x 3 box blur of a 2-D array or tensor (the image pipeline's stencil)."""
    return (g[:-2, :-2] + g[1:-1, :-2] + g[2:, :-2] + g[:-2, 1:-1] + g[1:-1, 1:-1] + g[2:, 1:-1]
            + g[:-2, 2:] + g[1:-1, 2:] + g[2:, 2:]) / 9


def laplacian(u):
    """The 5-point Laplacian of a 2-D array or tensor, over its interior."""
    return u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4 * u[1:-1, 1:-1]
