"""Differential fuzzing: random element-wise graphs give numpy's values, lazily and eagerly.

A graph is a few inputs whose shapes broadcast together (size-1 dims, 0-d, now and then a
size-0 dim) followed by steps over earlier values: unary and binary element-wise ops, Python
scalars, `where`, `clip`, casts, views, and reads in between. numpy evaluates the graph while
it is drawn; the test evaluates it with `clients`, dropping every value after its last use
unless the graph keeps it alive, and compares each read with numpy's value, dtype and shape.

Two correct implementations of a float op differ by a few ulps, and the differences grow
along a graph (cancellation, steep functions). So each value carries, per element, a bound
on how far the library's result may be from numpy's: a few ulps of rounding per op plus the
operands' bounds carried through the op. Floats compare within that bound; ints and bools,
and floats that only exact ops produced, compare exactly. Ops with a jump (floor, sign,
comparisons, casts to int or bool, ...) are only drawn where every element is farther from
the jump than its bound, so both sides land on the same side of it.

On failure Hypothesis prints the smallest graph as a program: with `xp = clients` it
reproduces the failure.
"""

from __future__ import annotations

import numpy as np
import pytest
from _values import BOOL, FLOAT32, FLOAT64, INT32, INT64, accepts, assert_values, expected_binary, expected_unary
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import clients
from tests.conftest import server_settings

# Every graph is a new fused kernel (about 0.15 s to compile), so examples are few.
FUZZ = settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

ULPS = 16  # rounding allowed per inexact op, in ulps of the result (both sides together)
FLOAT_LIMIT = 1e15  # float values stay far below float32's overflow
PERIODIC_LIMIT = 1e4  # larger arguments test the math libraries' range reduction, not fusion
MAX_SIZE = 256  # elements in one value
MAX_RANK = 5
INPUT_DTYPES = (FLOAT32, FLOAT64, INT32, INT64, BOOL)  # shrinks towards float32
SCALARS = (2, 0.5, -1, 3, -1.5, 0, 7, 0.1, 2.0, -0.25, True, False)
BIG = 1 << 40  # an int32 tensor only compares with it (numpy and clients raise OverflowError otherwise)

# name: (numpy function, open domain); monotone, so the bound is |f(x +- e) - f(x)|.
MONOTONE = {
    "tanh": (np.tanh, -np.inf, np.inf),
    "exp": (np.exp, -np.inf, np.inf),
    "expm1": (np.expm1, -np.inf, np.inf),
    "atan": (np.arctan, -np.inf, np.inf),
    "sinh": (np.sinh, -np.inf, np.inf),
    "asinh": (np.arcsinh, -np.inf, np.inf),
    "sqrt": (np.sqrt, 0.0, np.inf),  # closed at 0: see _unary_ok
    "log1p": (np.log1p, -0.5, np.inf),
    "log": (np.log, 0.25, np.inf),
    "asin": (np.arcsin, -0.9, 0.9),
    "acos": (np.arccos, -0.9, 0.9),
    "atanh": (np.arctanh, -0.9, 0.9),
    "acosh": (np.arccosh, 1.25, np.inf),
}
NEEDS_ABS = ("sqrt", "log1p")  # drawn on abs(x) when x itself is outside the domain
PERIODIC = ("sin", "cos")  # 1-Lipschitz
EXACT_UNARY = ("negative", "abs", "positive")  # no rounding, 1-Lipschitz
JUMP_AT_INTEGERS = ("floor", "ceil", "trunc")
JUMP_AT_ZERO = ("sign", "logical_not")
PREDICATES = ("isnan", "isfinite", "isinf")
UNARY = (
    *EXACT_UNARY, *MONOTONE, *PERIODIC, "square", *JUMP_AT_INTEGERS, "round", *JUMP_AT_ZERO,
    "bitwise_invert", *PREDICATES,
)
# Same shape and dtype in and out (float32): what the one-kernel chain draws from.
CHAIN_UNARY = (*EXACT_UNARY, *MONOTONE, *PERIODIC, "square", *JUMP_AT_INTEGERS, "round", "sign")
CHAIN_BINARY = ("add", "subtract", "multiply", "maximum", "minimum", "divide", "hypot", "logaddexp", "copysign")

COMPARISONS = ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal")
LOGICAL = ("logical_and", "logical_or", "logical_xor")
BINARY = (*CHAIN_BINARY, *COMPARISONS, *LOGICAL, "bitwise_and", "bitwise_or", "bitwise_xor")


# -- graphs -------------------------------------------------------------------------------
class Ref:
    """An operand that is an earlier value of the graph."""

    __slots__ = ("i",)

    def __init__(self, i: int) -> None:
        self.i = i

    def __repr__(self) -> str:
        return f"v{self.i}"


class Step:
    """`fn(*args)`: a function of both numpy and clients, or "astype", "getitem", "T", or
    "read" (read args[0] now, in the middle of the graph)."""

    __slots__ = ("fn", "args")

    def __init__(self, fn: str, *args) -> None:
        self.fn, self.args = fn, args

    def code(self, out: str) -> str:
        x = self.args[0] if self.args else None
        if self.fn == "read":
            return f"{x!r}.numpy()"
        if self.fn == "astype":
            return f"{out} = {x!r}.astype({self.args[1]!r})"
        if self.fn == "getitem":
            return f"{out} = {x!r}[{_key_code(self.args[1])}]"
        if self.fn == "T":
            return f"{out} = {x!r}.T"
        return f"{out} = xp.{self.fn}({', '.join(map(repr, self.args))})"


def _key_code(key: tuple) -> str:
    def one(k) -> str:
        if isinstance(k, slice):
            text = ":".join("" if v is None else str(v) for v in (k.start, k.stop))
            return text if k.step is None else f"{text}:{k.step}"
        return repr(k)

    return ", ".join(one(k) for k in key) if key else "()"


def apply(xp, step: Step, arrays: list):
    """Run `step` with namespace `xp` (numpy or clients) on `arrays` (indexed by Ref)."""
    args = [arrays[a.i] if isinstance(a, Ref) else a for a in step.args]
    if step.fn == "astype":
        return args[0].astype(args[1])
    if step.fn == "getitem":
        return args[0][args[1]]
    if step.fn == "T":
        return args[0].T
    return getattr(xp, step.fn)(*args)


class Graph:
    """Inputs, steps and the values read at the end; for every value, numpy's result and
    the bound on each element's distance between the library's result and numpy's."""

    def __init__(self, inputs, steps, final_reads, values, bounds) -> None:
        self.inputs, self.steps, self.final_reads = inputs, steps, final_reads
        self.values, self.bounds = values, bounds

    def drops(self) -> dict[int, list[int]]:
        """Step position (-1: before the first) -> values whose last use it is."""
        last = dict.fromkeys(range(len(self.inputs)), -1)
        v = len(self.inputs)
        for p, step in enumerate(self.steps):
            for a in step.args:
                if isinstance(a, Ref):
                    last[a.i] = p
            if step.fn != "read":
                last[v] = p
                v += 1
        out: dict[int, list[int]] = {}
        for i, p in last.items():
            if i not in self.final_reads:
                out.setdefault(p, []).append(i)
        return out

    def __repr__(self) -> str:
        lines = ["", "# xp is clients; every .numpy() is compared with numpy running the same code"]
        for i, a in enumerate(self.inputs):
            lit = f"np.array({a.tolist()!r}, dtype=np.{a.dtype.name})"
            lines.append(f"v{i} = xp.asarray({lit}{f'.reshape({a.shape})' if a.size == 0 else ''})")
        drops = self.drops()
        lines += [f"del v{i}" for i in drops.get(-1, ())]
        v = len(self.inputs)
        for p, step in enumerate(self.steps):
            lines.append(step.code(f"v{v}"))
            v += step.fn != "read"
            lines += [f"del v{i}" for i in drops.get(p, ())]
        lines += [f"v{i}.numpy()" for i in self.final_reads]
        return "\n".join(lines)

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(repr(self))


# -- bounds ---------------------------------------------------------------------------------
def _f64(x) -> np.ndarray:
    return np.asarray(x).astype(np.float64)


def _ulps(magnitude, dtype: np.dtype) -> np.ndarray:
    info = np.finfo(dtype)
    return ULPS * (info.eps * np.abs(_f64(magnitude)) + info.tiny)


def _clear_of(x: np.ndarray, e: np.ndarray, jump) -> bool:
    """Every element is exact or farther from `jump` than twice its bound."""
    return bool(np.all((e == 0) | (np.abs(x - jump) > 2 * e)))


def _unary_ok(name: str, x: np.ndarray, e: np.ndarray) -> bool:
    x = _f64(x)
    if name in MONOTONE:
        _, lo, hi = MONOTONE[name]
        if name == "sqrt":
            return bool(np.all(x - 2 * e >= 0))
        return bool(np.all(x - 2 * e > lo) and np.all(x + 2 * e < hi))
    if name in PERIODIC:
        return bool(np.all(np.abs(x) <= PERIODIC_LIMIT))
    if name in JUMP_AT_INTEGERS:
        return _clear_of(x, e, np.round(x))
    if name == "round":  # half to even: jumps at the half-integers
        return _clear_of(x, e, np.floor(x) + 0.5)
    if name in JUMP_AT_ZERO:
        return _clear_of(x, e, 0.0)
    return True


def _unary_bound(name: str, x: np.ndarray, e: np.ndarray, out: np.ndarray) -> np.ndarray:
    if out.dtype.kind != "f" or name in JUMP_AT_INTEGERS + JUMP_AT_ZERO + ("round",):
        return np.zeros(out.shape)
    x = _f64(x)
    if name in MONOTONE:
        f = MONOTONE[name][0]
        fx = f(x)
        return np.maximum(np.abs(f(x + e) - fx), np.abs(f(x - e) - fx)) + _ulps(out, out.dtype)
    if name in PERIODIC:
        return np.minimum(e, 2.0) + _ulps(out, out.dtype)
    if name == "square":
        return e * (2 * np.abs(x) + e) + _ulps(out, out.dtype)
    return e  # exact ops


def _binary_ok(name: str, a: np.ndarray, ea: np.ndarray, b: np.ndarray, eb: np.ndarray) -> bool:
    if name == "divide":
        return bool(np.all(np.abs(b) >= 0.25) and np.all(np.abs(b) > 2 * eb))
    if name == "copysign":
        return _clear_of(b, eb, 0.0)
    if name in COMPARISONS:
        return bool(np.all((ea + eb == 0) | (np.abs(a - b) > 2 * (ea + eb))))
    if name in LOGICAL:
        return _clear_of(a, ea, 0.0) and _clear_of(b, eb, 0.0)
    return True


def _binary_bound(name, a, ea, b, eb, out: np.ndarray) -> np.ndarray:
    if out.dtype.kind != "f":
        return np.zeros(out.shape)
    ulps = _ulps(out, out.dtype)
    if name in ("add", "subtract", "hypot"):
        return ea + eb + ulps
    if name == "multiply":
        return np.abs(a) * eb + np.abs(b) * ea + ea * eb + ulps
    if name in ("maximum", "minimum"):
        return np.maximum(ea, eb)
    if name == "divide":
        return (ea + np.abs(a / b) * eb) / (np.abs(b) - eb) + ulps
    if name == "logaddexp":  # max(a, b) + log1p(exp(-|a - b|)) may cancel
        return np.maximum(ea, eb) + _ulps(np.abs(a) + np.abs(b) + 1, out.dtype)
    if name == "copysign":
        return ea
    raise AssertionError(f"no bound for {name}")


def _promoted(v, dtype: np.dtype) -> np.ndarray:
    """An operand's value in the promoted dtype, as float64 (float scalars rounded to it)."""
    if isinstance(v, np.ndarray) or dtype.kind == "f":
        return _f64(np.asarray(v, dtype=dtype))
    return np.float64(v)  # a Python int or bool with ints: exact, and may not fit int32


# -- drawing --------------------------------------------------------------------------------
def _elements(dtype: np.dtype):
    if dtype == BOOL:
        return st.booleans()
    if dtype.kind == "i":
        info = np.iinfo(dtype)
        specials = [0, 1, -1, 100, -12345, 65535, 1 << 30, -(1 << 30), int(info.max), int(info.min)]
        return st.one_of(st.integers(-20, 20), st.sampled_from(specials))
    return st.floats(-4, 4, width=32 if dtype == FLOAT32 else 64, allow_subnormal=False)


class Builder:
    """Draws steps, evaluating each with numpy and bounding it as it goes."""

    def __init__(self, draw, inputs: list[np.ndarray], chain: bool) -> None:
        self.draw, self.chain = draw, chain
        self.values = [np.asarray(a) for a in inputs]
        self.bounds = [np.zeros(a.shape) for a in inputs]
        self.steps: list[Step] = []

    # values -----------------------------------------------------------------------------
    def pick(self) -> int:
        """A value, the latest ones first (what shrinking goes to)."""
        n = len(self.values)
        return n - 1 if self.chain else n - 1 - self.draw(st.integers(0, n - 1))

    def partner(self, *shapes) -> int | None:
        """A value that broadcasts with `shapes` into at most MAX_SIZE elements."""
        fits = []
        for j in range(len(self.values) - 1, -1, -1):
            try:
                shape = np.broadcast_shapes(self.values[j].shape, *shapes)
            except ValueError:
                continue
            if np.prod(shape) <= MAX_SIZE and len(shape) <= MAX_RANK:
                fits.append(j)
        return fits[self.draw(st.integers(0, len(fits) - 1))] if fits else None

    def add(self, step: Step, out, bound) -> bool:
        out = np.asarray(out)
        if out.size > MAX_SIZE or out.ndim > MAX_RANK:
            return False
        if out.dtype.kind == "f" and out.size and not (
            np.all(np.isfinite(out)) and np.max(np.abs(out)) <= FLOAT_LIMIT
        ):
            return False
        bound = np.broadcast_to(np.asarray(bound, dtype=np.float64), out.shape)
        self.steps.append(step)
        self.values.append(out)
        self.bounds.append(np.where(np.isnan(bound), np.inf, bound))
        return True

    # steps ------------------------------------------------------------------------------
    def unary(self) -> None:
        i = self.pick()
        x, e = self.values[i], self.bounds[i]
        names = CHAIN_UNARY if self.chain else UNARY
        fits = [
            n for n in names
            if accepts(n, x.dtype) and (_unary_ok(n, x, e) or n in NEEDS_ABS and _unary_ok(n, np.abs(x), e))
        ]
        name = self.draw(st.sampled_from(fits))
        if not _unary_ok(name, x, e):
            self.add(Step("abs", Ref(i)), np.abs(x), e)
            i = len(self.values) - 1
            x = self.values[i]
        out = np.asarray(expected_unary(name, x))
        self.add(Step(name, Ref(i)), out, _unary_bound(name, x, e, out))

    def binary(self, scalar: bool) -> None:
        i = self.pick()
        x = self.values[i]
        if scalar:
            other = self.draw(st.sampled_from((*SCALARS, BIG)))
        else:
            other = Ref(self.partner(x.shape))
        args = (Ref(i), other)
        if self.draw(st.booleans()):
            args = args[::-1]
        arrays = [self.values[a.i] if isinstance(a, Ref) else a for a in args]
        errs = [self.bounds[a.i] if isinstance(a, Ref) else np.zeros(()) for a in args]
        promoted = np.result_type(*(v.dtype if isinstance(v, np.ndarray) else v for v in arrays))
        a, b, ea, eb = np.broadcast_arrays(
            _promoted(arrays[0], promoted), _promoted(arrays[1], promoted), *errs
        )
        names = CHAIN_BINARY if self.chain else BINARY
        if type(other) is int and other == BIG and promoted == INT32:
            names = COMPARISONS
        fits = [n for n in names if accepts(n, promoted) and _binary_ok(n, a, ea, b, eb)]
        if not fits:
            return
        name = self.draw(st.sampled_from(fits))
        out = np.asarray(expected_binary(name, *arrays))
        self.add(Step(name, *args), out, _binary_bound(name, a, ea, b, eb, out))

    def clip(self) -> None:
        i = self.pick()
        x, e = self.values[i], self.bounds[i]
        numbers = [s for s in SCALARS if not isinstance(s, bool)]
        lo, hi = sorted((self.draw(st.sampled_from(numbers)), self.draw(st.sampled_from(numbers))))
        with np.errstate(all="ignore"):
            out = np.asarray(np.clip(x, lo, hi))
        self.add(Step("clip", Ref(i), lo, hi), out, e if out.dtype.kind == "f" else 0.0)

    def where(self) -> None:
        conds = [i for i, v in enumerate(self.values) if v.dtype == BOOL]
        if not conds:
            return
        c = conds[self.draw(st.integers(0, len(conds) - 1))]
        i = self.partner(self.values[c].shape)
        if i is None:
            return
        shape = np.broadcast_shapes(self.values[c].shape, self.values[i].shape)
        if self.draw(st.booleans()):
            other = self.draw(st.sampled_from(SCALARS))
        else:
            j = self.partner(shape)
            if j is None:
                return
            other = Ref(j)
        args = (Ref(i), other) if self.draw(st.booleans()) else (other, Ref(i))
        step = Step("where", Ref(c), *args)
        out = np.asarray(apply(np, step, self.values))
        e1, e2 = (self.bounds[a.i] if isinstance(a, Ref) else 0.0 for a in args)
        bound = np.where(self.values[c], e1, e2) if out.dtype.kind == "f" else 0.0
        self.add(step, out, bound)

    def astype(self) -> None:
        i = self.pick()
        x, e = self.values[i], self.bounds[i]
        target = self.draw(st.sampled_from(INPUT_DTYPES))
        bound = np.zeros(x.shape)
        if x.dtype.kind == "f":
            x64 = _f64(x)
            if target.kind == "i":
                limit = 2.0**31 - 1 if target == INT32 else 2.0**62
                if not (_clear_of(x64, e, np.round(x64)) and np.all(np.abs(x64) < limit)):
                    return
            elif target == BOOL:
                if not _clear_of(x64, e, 0.0):
                    return
            else:
                bound = e + (e > 0) * _ulps(x.astype(target), target)
        self.add(Step("astype", Ref(i), target.name), x.astype(target), bound)

    def view(self) -> None:
        i = self.pick()
        x = self.values[i]
        shape, n = x.shape, x.ndim
        kinds = ["getitem", "T", "reshape", "broadcast_to"]
        if n >= 2:
            kinds.append("permute_dims")
        if n < MAX_RANK:
            kinds.append("expand_dims")
        if 1 in shape:
            kinds.append("squeeze")
        kind = self.draw(st.sampled_from(kinds))
        if kind == "getitem":
            step = Step("getitem", Ref(i), self.key(shape))
        elif kind == "T":
            step = Step("T", Ref(i))
        elif kind == "permute_dims":
            step = Step("permute_dims", Ref(i), tuple(self.draw(st.permutations(range(n)))))
        elif kind == "reshape":
            targets = [(x.size,), shape[::-1], shape + (1,), (1, *shape)]
            if n >= 2:
                targets.append((shape[0] * shape[1], *shape[2:]))
            targets += [shape[:k] + (2, d // 2) + shape[k + 1:] for k, d in enumerate(shape) if d > 2 and d % 2 == 0]
            if x.size:
                targets.append((-1,))
            step = Step("reshape", Ref(i), self.draw(st.sampled_from(targets)))
        elif kind == "expand_dims":
            step = Step("expand_dims", Ref(i), self.draw(st.integers(-n - 1, n)))
        elif kind == "squeeze":
            step = Step("squeeze", Ref(i))
        else:
            ones = [k for k, d in enumerate(shape) if d == 1]
            if ones and self.draw(st.booleans()):
                k = self.draw(st.sampled_from(ones))
                target = shape[:k] + (3,) + shape[k + 1:]
            else:
                target = (2, *shape)
            step = Step("broadcast_to", Ref(i), target)
        out = np.asarray(apply(np, step, self.values))
        self.add(step, out, np.asarray(apply(np, step, self.bounds)))

    def key(self, shape: tuple[int, ...]) -> tuple:
        """A basic index: slices with steps (negative too), integers, maybe a None."""
        key: list = []
        for d in shape:
            kind = self.draw(st.sampled_from(["all", "slice", "int"] if d else ["all", "slice"]))
            if kind == "all":
                key.append(slice(None))
            elif kind == "int":
                key.append(self.draw(st.integers(-d, d - 1)))
            else:
                ends = st.none() | st.integers(-d - 1, d + 1)
                step = self.draw(st.sampled_from([None, 2, -1, 3, -2]))
                key.append(slice(self.draw(ends), self.draw(ends), step))
        if len(shape) < MAX_RANK and self.draw(st.booleans()):
            key.insert(self.draw(st.integers(0, len(key))), None)
        return tuple(key)

    def read(self) -> None:
        self.steps.append(Step("read", Ref(self.pick())))


@st.composite
def graphs(draw, chain: bool = False) -> Graph:
    """Random graphs; `chain`: same-shape float32 values only, each step on the latest."""
    rank = draw(st.sampled_from([1, 2, 3, 2, 0]))
    dims: list[int] = []
    for _ in range(rank):  # sizes around the vector width, and odd ones for the tails
        fits = [d for d in (3, 4, 2, 5, 1, 8, 17) if np.prod(dims) * d <= 128]
        dims.append(draw(st.sampled_from(fits)))
    if not chain and rank and draw(st.integers(0, 9)) == 9:
        dims[draw(st.integers(0, rank - 1))] = 0
    inputs = []
    for _ in range(draw(st.integers(1, 3))):
        if chain:
            shape, dtype = tuple(dims), FLOAT32
        else:
            # drop leading dims now and then (broadcasting adds them back)
            lead = draw(st.integers(0, rank)) if draw(st.integers(0, 3)) == 3 else 0
            shape = tuple(1 if draw(st.integers(0, 3)) == 3 else d for d in dims[lead:])
            dtype = draw(st.sampled_from(INPUT_DTYPES))
        inputs.append(draw(hnp.arrays(dtype, shape, elements=_elements(dtype))))
    g = Builder(draw, inputs, chain)
    kinds = ["unary", "binary", "scalar"] if chain else [
        "unary", "binary", "scalar", "unary", "binary", "view", "astype", "where", "read", "view", "unary", "clip",
    ]
    with np.errstate(all="ignore"):
        for _ in range(draw(st.integers(3, 15))):
            kind = draw(st.sampled_from(kinds))
            if kind in ("binary", "scalar"):
                g.binary(scalar=kind == "scalar")
            else:
                getattr(g, kind)()
    last = len(g.values) - 1
    kept = draw(st.lists(st.integers(0, last), unique=True, max_size=3))
    final_reads = tuple(draw(st.permutations(sorted({*kept, last}))))
    return Graph(inputs, g.steps, final_reads, g.values, g.bounds)


def exact_graph(inputs: list[np.ndarray], steps: list[Step], final_reads: tuple[int, ...]) -> Graph:
    """A graph written by hand from exact steps only (views, negative, casts of ints...)."""
    values = [np.asarray(a) for a in inputs]
    for step in steps:
        if step.fn != "read":
            values.append(np.asarray(apply(np, step, values)))
    return Graph(inputs, steps, final_reads, values, [np.zeros(v.shape) for v in values])


# Found by this fuzzer: an integer index into an empty tensor (numpy: shape (0,)).
EMPTY_INT_INDEX = exact_graph(
    [np.zeros((0, 3), np.float32)], [Step("getitem", Ref(0), (slice(None), 1))], (1,)
)


# -- checking -------------------------------------------------------------------------------
def check(graph: Graph, i: int, t: clients.Tensor) -> None:
    """Tensor `t` (value i) has numpy's shape and dtype, and its values within the bound."""
    expected, bound = graph.values[i], graph.bounds[i]
    assert t.shape == expected.shape, f"v{i}: shape {t.shape}, numpy {expected.shape}"
    assert t.dtype == expected.dtype, f"v{i}: dtype {t.dtype}, numpy {expected.dtype}"
    got = t.numpy()
    if expected.dtype.kind != "f" or not bound.any():
        assert_values(got, expected)
        return
    assert got.dtype == expected.dtype and got.shape == expected.shape, f"v{i}: read {got.dtype} {got.shape}"
    diff = np.abs(got.astype(np.float64) - expected)
    bad = ~(diff <= bound)
    if bad.any():
        at = tuple(int(k) for k in np.argwhere(bad)[0])
        raise AssertionError(
            f"v{i}{list(at)}: got {got[at]!r}, numpy {expected[at]!r}, allowed difference "
            f"{bound[at]:.3g} ({int(bad.sum())} of {bad.size} elements differ)"
        )


def run(graph: Graph) -> None:
    """Evaluate `graph` with clients, checking every read against numpy's value."""
    vals: list = [clients.asarray(a) for a in graph.inputs]
    drops = graph.drops()
    for i in drops.get(-1, ()):
        vals[i] = None
    for p, step in enumerate(graph.steps):
        if step.fn == "read":
            i = step.args[0].i
            check(graph, i, vals[i])
        else:
            vals.append(apply(clients, step, vals))
        for i in drops.get(p, ()):
            vals[i] = None  # the last reference: the value is dropped here
    for i in graph.final_reads:
        check(graph, i, vals[i])


# -- tests ----------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["lazy", "eager"])
@FUZZ
@given(graph=graphs())
def test_fuzz_graph_matches_numpy(mode, graph):
    with server_settings(mode=mode):
        run(graph)


@pytest.mark.parametrize("mode", ["lazy", "eager"])
def test_fuzz_found_int_index_into_empty_tensor(mode):
    with server_settings(mode=mode):
        run(EMPTY_INT_INDEX)


@settings(FUZZ, max_examples=15)
@given(graph=graphs(chain=True))
def test_fuzz_graph_is_one_kernel_when_shapes_match(graph):
    assume(graph.steps)
    with server_settings(mode="lazy"):
        vals = [clients.asarray(a) for a in graph.inputs]
        clients.sync()  # the uploads are done; only the chain is queued below
        for step in graph.steps:
            vals.append(apply(clients, step, vals))
        final = vals.pop()
        del vals  # intermediates dropped: the chain has one output
        with clients.inspect() as rec:
            check(graph, len(graph.values) - 1, final)
    assert [k.kind for k in rec.kernels] == ["elementwise"], [k.ops for k in rec.kernels]
