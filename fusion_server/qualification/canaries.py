"""The canary set: small kernels of every family the code generator emits, run through the
server's own fusers and code generator, each value checked against numpy.

A canary is written once over a small op namespace and evaluated twice: by `NumpyOps` on
host arrays (the reference) and by `DeviceOps`, which sends the same ops as descriptors to
a FusionServer, exactly as the client would. The values are read back and compared with
a tolerance that fits the dtype. Canaries run in a child process (see child.py): a
compiler that aborts takes the child down, never the user's process.

Jobs: one per element size and vector width (every family that vectorizes, over the
dtypes of that size), and one `common` job for the families without a vector width
(scalar code with its helper functions, work-group reductions, the tiled matmul, sort,
gathers).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import dtypes as dt
from .. import opset
from ..ir import ElementwiseOp, MatmulOp, MoveOp, ReduceOp, Scalar, SortOp, TensorIr
from ..runtime import waits

N = 4096 + 13  # several work-groups, and a tail shorter than any vector
ROWS, COLS = 6, 203  # reductions: rows longer than 16-wide steps, with a tail
STREAM = 1


class CanaryFailed(Exception):
    """A canary's values differ from numpy's (`how` "wrong"), or it could not run."""

    def __init__(self, how: str, detail: str):
        super().__init__(f"{how}: {detail}")
        self.how = how
        self.detail = detail


# -- the op namespaces ------------------------------------------------------------------------
class NumpyOps:
    """The reference: numpy's ufuncs, with Python scalars taking the array's dtype (the
    library's weak-scalar rule)."""

    def __init__(self, fp64: bool):
        self.fp64 = fp64

    def __getattr__(self, name: str) -> Callable:
        fn = getattr(np, name)

        def call(*args):
            dtype = next(a.dtype for a in args if isinstance(a, np.ndarray))
            args = [a if isinstance(a, np.ndarray) else np.asarray(a, dtype) for a in args]
            with np.errstate(all="ignore"):
                return fn(*args)

        return call

    def cast(self, x: np.ndarray, dtype: np.dtype) -> np.ndarray:
        return x.astype(dtype)

    def where(self, cond, a, b):
        return np.where(cond, a, b)

    def reduce(self, name: str, x: np.ndarray, axis: int) -> np.ndarray:
        if name == "sum":
            acc = _sum_dtype(x.dtype, self.fp64)
            out = np.sum(x.astype(acc), axis=axis)
            return out.astype(x.dtype if dt.is_float(x.dtype) else dt.int64)
        return getattr(np, name)(x, axis=axis)

    def matmul(self, a, b):
        return a @ b

    def sort(self, x, descending: bool = False, arg: bool = False):
        key = -x if descending and not dt.is_bool(x.dtype) else x
        order = np.argsort(key, axis=-1, kind="stable")
        if descending and dt.is_float(x.dtype):  # NaNs last in both directions, stably
            nan = np.isnan(np.take_along_axis(x, order, -1))
            order = np.take_along_axis(order, np.argsort(nan, axis=-1, kind="stable"), -1)
        return order if arg else np.take_along_axis(x, order, -1)

    def take(self, x, index):
        return x[index]


def _sum_dtype(dtype: np.dtype, fp64: bool) -> np.dtype:
    """What the client accumulates a sum in: float64 for floats where the device has it."""
    if dt.is_float(dtype):
        return dt.float64 if fp64 else dtype
    return dt.int64


_ids = itertools.count(1)


class Ref(int):
    """A tensor id on the device side (a plain int there is a Python scalar operand)."""


class DeviceOps:
    """The same ops as descriptors sent to a server (on one stream, as one thread would)."""

    def __init__(self, server):
        self.server = server
        self.fp64 = server.info.fp64
        self.meta: dict[int, tuple[tuple[int, ...], np.dtype]] = {}
        self.made: list[int] = []  # ids computed by ops (dropped unless they are outputs)

    def _new(self, shape, dtype) -> TensorIr:
        tid = next(_ids)  # ids are unique per server, which outlives one canary
        self.meta[tid] = (tuple(shape), np.dtype(dtype))
        return TensorIr(tid, tuple(shape), np.dtype(dtype))

    def put(self, host: np.ndarray) -> int:
        host = np.ascontiguousarray(host)
        ir = self._new(host.shape, host.dtype)
        self.server.upload(ir, host)
        return Ref(ir.id)

    def _register(self, op, outs) -> None:
        self.made.extend(o.id for o in outs)
        self.server.register(STREAM, op)

    def _operands(self, args) -> tuple[tuple, np.dtype, tuple[int, ...]]:
        tensors = [a for a in args if type(a) is Ref]
        dtype = self.meta[tensors[0]][1]
        for t in tensors[1:]:
            dtype = dt.promote(dtype, self.meta[t][1])
        shape = self.meta[tensors[0]][0]
        # (operands are plain ints in descriptors, as the client sends them)
        operands = tuple(int(a) if type(a) is Ref else Scalar(dt.scalar_value(a, dtype), dtype) for a in args)
        return operands, dtype, shape

    def __getattr__(self, name: str) -> Callable:
        if name not in opset.OPS:
            raise AttributeError(name)

        def call(*args):
            operands, dtype, shape = self._operands(args)
            compute, out_dtype = opset.resolve(name, (dtype,))
            out = self._new(shape, out_dtype)
            self._register(ElementwiseOp(name, operands, compute, out), (out,))
            return Ref(out.id)

        return call

    def cast(self, x: int, dtype: np.dtype) -> int:
        out = self._new(self.meta[x][0], dtype)
        self._register(ElementwiseOp("cast", (int(x),), np.dtype(dtype), out), (out,))
        return Ref(out.id)

    def where(self, cond: int, a, b) -> int:
        operands, dtype, _ = self._operands((a, b))
        out = self._new(self.meta[cond][0], dtype)
        self._register(ElementwiseOp("where", (int(cond), *operands), dtype, out), (out,))
        return Ref(out.id)

    def reduce(self, name: str, x: int, axis: int) -> int:
        shape, dtype = self.meta[x]
        acc = _sum_dtype(dtype, self.fp64) if name == "sum" else dtype
        out_dtype = dt.int64 if name.startswith("arg") or (name == "sum" and not dt.is_float(dtype)) else dtype
        out = self._new(tuple(n for d, n in enumerate(shape) if d != axis), out_dtype)
        self._register(ReduceOp(name, int(x), (axis,), acc, out), (out,))
        return Ref(out.id)

    def matmul(self, a: int, b: int) -> int:
        (sa, da), (sb, _) = self.meta[a], self.meta[b]
        out = self._new((*sa[:-1], sb[-1]), da)
        self._register(MatmulOp(int(a), int(b), da, out), (out,))
        return Ref(out.id)

    def sort(self, x: int, descending: bool = False, arg: bool = False) -> int:
        shape, dtype = self.meta[x]
        out = self._new(shape, dt.int64 if arg else dtype)
        self._register(SortOp("argsort" if arg else "sort", int(x), descending, (out,)), (out,))
        return Ref(out.id)

    def take(self, x: int, index: int) -> int:
        """A 1-D gather through the library's move kernel."""
        (n,), dtype = self.meta[x]
        (m,), _ = self.meta[index]
        out = self._new((m,), dtype)
        self._register(MoveOp("gather", (int(x), int(index)), out, region_map=(-1,), adv=(0,), b_map=(0,)), (out,))
        return Ref(out.id)

    def read(self, tid: int) -> np.ndarray:
        event, finish = self.server.read(tid)
        waits.wait(event)
        return finish()

    def finish(self, outputs: dict[str, int]) -> dict[str, np.ndarray]:
        """Drop the intermediates (as a client's handles would be), then read the outputs."""
        keep = set(outputs.values())
        self.server.drops.extend(t for t in self.made if t not in keep)
        return {name: self.read(tid) for name, tid in outputs.items()}


# -- the canaries -----------------------------------------------------------------------------
def _data(dtype: np.dtype, shape, seed: int, nan: bool = False) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dt.is_bool(dtype):
        return rng.random(shape) < 0.5
    if dt.is_int(dtype):
        bound = 9 if dtype.itemsize == 1 else 50  # products stay inside int8
        return rng.integers(-bound, bound + 1, shape).astype(dtype)
    out = rng.uniform(-4, 4, shape).astype(dtype)
    if nan:
        out.flat[3::17] = np.nan
    return out


def _same_size(dtype: np.dtype, fp64: bool) -> list[np.dtype]:
    """The other dtypes of `dtype`'s element size (bool and int8 share one)."""
    return [d for d in _by_size(dtype.itemsize, fp64) if d != dtype]


def _elementwise(ops, x, y, z, w, dtype: np.dtype, fp64: bool) -> dict[str, Any]:
    """One fused block per dtype: arithmetic, compares and selects, logic (bools are one
    byte, so every compare touches 1-byte elements too), min/max, casts within the element
    size, and for floats the transcendentals, pow and NaN handling."""
    out: dict[str, Any] = {}
    if dt.is_bool(dtype):
        out["and"] = ops.logical_and(x, y)
        out["or_not"] = ops.logical_or(ops.logical_not(x), z)
        out["xor"] = ops.logical_xor(y, z)
        out["select"] = ops.where(x, y, z)
        out["equal"] = ops.equal(x, y)
        out["add"] = ops.add(x, z)
        out["max"] = ops.maximum(y, z)
    else:
        out["fma"] = ops.add(ops.multiply(x, y), z)
        out["sub"] = ops.subtract(x, ops.multiply(y, 3))
        out["neg_abs"] = ops.negative(ops.abs(x))
        out["select"] = ops.where(ops.greater(x, y), x, ops.multiply(y, 2))
        out["minmax"] = ops.minimum(ops.maximum(x, y), ops.add(x, y))
        out["clip"] = ops.minimum(ops.maximum(x, -5), 5)
        out["mask"] = ops.logical_and(ops.less(x, z), ops.logical_not(ops.greater_equal(y, x)))
        out["eq_or"] = ops.logical_or(ops.equal(x, y), ops.not_equal(y, z))
        out["sign"] = ops.sign(y)
        out["from_mask"] = ops.cast(out["mask"], dtype)
    if dt.is_int(dtype):
        out["bits"] = ops.bitwise_xor(ops.bitwise_and(x, y), ops.bitwise_or(y, z))
        out["invert"] = ops.bitwise_invert(x)
        out["shifts"] = ops.bitwise_right_shift(ops.bitwise_left_shift(x, 2), 1)
    if dt.is_float(dtype):
        ax = ops.abs(x)
        out["divide"] = ops.divide(x, ops.add(ops.abs(y), 1))
        out["exp"] = ops.exp(ops.multiply(x, 0.25))
        out["log_sqrt"] = ops.add(ops.log(ops.add(ax, 1)), ops.sqrt(ops.abs(y)))
        out["tanh"] = ops.tanh(x)
        out["trig"] = ops.add(ops.sin(x), ops.cos(y))
        out["pow"] = ops.pow(ops.add(ax, 0.5), ops.multiply(y, 0.25))
        # (zero bases beside others in a vector: PoCL 3.0's pow on double8 got other lanes wrong)
        out["pow_zero_bases"] = ops.pow(ops.multiply(ax, ops.cast(ops.greater(ax, 2), dtype)), 3.5)
        out["expm1_log1p"] = ops.add(ops.expm1(ops.multiply(x, 0.1)), ops.log1p(ops.abs(y)))
        out["atan2"] = ops.atan2(x, y)
        out["floor"] = ops.floor(z)
        out["isnan"] = ops.isnan(w)
        out["nan_max"] = ops.maximum(w, y)
    for target in _same_size(dtype, fp64):  # casts within the size (int32 and float32, ...)
        out[f"to_{target.name}"] = there = ops.cast(x, target)
        out[f"from_{target.name}"] = ops.cast(there, dtype)
    return out


def _pair(ops, values: dict[str, Any], dtypes_a: list[np.dtype], dtypes_b: list[np.dtype]) -> dict[str, Any]:
    """Two element sizes in one block: casts both ways between every dtype of each, and
    a compare and select over a cast value (the block runs at the narrower size's width)."""
    out: dict[str, Any] = {}
    for p in dtypes_a:
        for q in dtypes_b:
            there = ops.cast(values[p.name], q)
            out[f"{p.name}_to_{q.name}"] = there
            out[f"{q.name}_to_{p.name}"] = ops.cast(values[q.name], p)
            if not dt.is_bool(q):
                out[f"{p.name}_{q.name}_select"] = ops.where(ops.less(there, values[q.name]), there,
                                                             values[q.name])
    return out


def _scalar_helpers(ops, x, y, z, dtype: np.dtype) -> dict[str, Any]:
    """The ops whose code is a helper function (scalar code on every device)."""
    out = {"floor_divide": ops.floor_divide(x, ops.add(ops.abs(y), 1)),
           "remainder": ops.remainder(x, ops.add(ops.abs(z), 1))}
    if dt.is_int(dtype):
        out["int_pow"] = ops.pow(ops.remainder(x, 5), ops.remainder(ops.abs(y), 4))
    return out


@dataclass(frozen=True)
class Canary:
    """One kernel family over one dtype: inputs, the ops, the server settings it needs,
    and the element sizes its kernels touch (which widths a failure narrows)."""

    name: str
    dtype: np.dtype
    body: Callable[..., dict[str, Any]]
    inputs: Callable[[np.dtype], list[np.ndarray]]
    settings: tuple[tuple[str, Any], ...] = ()
    sizes: tuple[int, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.name}-{self.dtype.name}"

    def run(self, server, fp64: bool, corrupt: bool = False) -> None:
        """Evaluate on the device and with numpy; raise CanaryFailed where they differ."""
        hosts = self.inputs(self.dtype)
        want = self.body(NumpyOps(fp64), *hosts)
        for key, value in self.settings:
            setattr(server, key, value)
        device = DeviceOps(server)
        ids = [device.put(h) for h in hosts]
        got = device.finish(self.body(device, *ids))
        if corrupt:  # an injected fault: one element off
            name = next(iter(got))
            bad = got[name].copy()
            bad.flat[0] = not bad.flat[0] if bad.dtype == np.bool_ else bad.flat[0] + 1
            got[name] = bad
        wrong = [compare(name, got[name], np.asarray(want[name])) for name in want]
        wrong = [w for w in wrong if w]
        if wrong:
            more = f" (and {len(wrong) - 3} more)" if len(wrong) > 3 else ""
            raise CanaryFailed("wrong", "; ".join(wrong[:3]) + more)


def compare(name: str, got: np.ndarray, want: np.ndarray) -> str:
    """'' if `got` matches numpy's `want` (a tolerance that fits the dtype), else why not."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"{name}: {got.dtype}{got.shape} where numpy gives {want.dtype}{want.shape}"
    if dt.is_float(want.dtype):
        tight = want.dtype == dt.float32
        ok = np.isclose(got, want, rtol=2e-5 if tight else 1e-11, atol=1e-5 if tight else 1e-11, equal_nan=True)
    else:
        ok = got == want
    if ok.all():
        return ""
    first = np.flatnonzero(~ok.ravel())[0]
    return (f"{name}: {int(ok.sum())} of {ok.size} elements right; first wrong at {first}: "
            f"{got.ravel()[first].item()!r}, numpy {want.ravel()[first].item()!r}")


def _four(shape):
    def make(dtype):
        return [_data(dtype, shape, seed, nan=seed == 4) for seed in (1, 2, 3, 4)]
    return make


def _rows(nan: bool):
    def make(dtype):
        x = _data(dtype, (ROWS, COLS), 5, nan=nan)
        if nan and dt.is_float(dtype):
            x[0, 150] = np.nan  # a row whose only NaN lies past the vector steps
            x[1] = np.nan  # a row of NaNs only
            x[2, :8] = x[2, 40]  # ties
        return [x, _data(dtype, (ROWS, COLS), 6)]
    return make


def _matrices(dtype):
    return [_data(dtype, (37, 70), 7), _data(dtype, (70, 45), 8), _data(dtype, (45,), 9)]


def _matmul_body(ops, a, b, bias):
    return {"relu_affine": ops.maximum(ops.add(ops.matmul(a, b), bias), 0)}


def _by_size(size: int, fp64: bool) -> list[np.dtype]:
    pool = [dt.bool_, dt.int8, dt.int16, dt.int32, dt.float32, dt.int64] + ([dt.float64] if fp64 else [])
    return [d for d in pool if d.itemsize == size]


def vector_canaries(size: int, fp64: bool) -> list[Canary]:
    """Every family that vectorizes, over the dtypes of `size` bytes and no other size but
    bools (element-wise blocks first: they fail most often, and cheapest)."""
    dtypes = _by_size(size, fp64)
    touched = tuple(sorted({size, 1}))
    out: list[Canary] = []
    for d in dtypes:
        def elementwise(ops, x, y, z, w, d=d):
            return _elementwise(ops, x, y, z, w, d, fp64)

        out.append(Canary("elementwise", d, elementwise, _four((N,)), sizes=touched))
        if dt.is_int(d):
            # Alone, each in its own block: Intel's CPU runtime dropped the not of a scalar
            # integer min (the vector tail), but not where another not of x sat beside it.
            out.append(Canary("invert-min", d, lambda ops, x, y, z, w: {
                "invert_min": ops.bitwise_invert(ops.minimum(x, y))}, _four((N,)), sizes=touched))
            out.append(Canary("select-inverted", d, lambda ops, x, y, z, w: {
                "select": ops.where(ops.less(x, y), ops.bitwise_invert(x), ops.bitwise_invert(y))}, _four((N,)),
                sizes=touched))
    loop = (("reduce_strategy", "loop"),)
    for d in dtypes:
        if dt.is_bool(d):
            out.append(Canary("reduce-any", d, lambda ops, x, y: {"any": ops.reduce("max", x, 1)}, _rows(False),
                              loop, touched))
        if d.itemsize < 4:
            continue  # no 1- or 2-byte numbers reach users yet: their reductions come with them
        if d.itemsize == 8:  # (sums of 4-byte numbers widen, and indices are 8 bytes: see mixed_canaries)
            out.append(Canary("reduce-sum", d, lambda ops, x, y: {
                "dot_plus_one": ops.add(ops.reduce("sum", ops.multiply(x, y), 1), 1)}, _rows(False), loop, touched))
            out.append(Canary("reduce-argmax", d, lambda ops, x, y: {"argmax": ops.reduce("argmax", x, 1)},
                              _rows(True), loop, touched))
        if dt.is_float(d):  # (integer max folds with max(), and matmuls with * and +, as element-wise code does)
            out.append(Canary("reduce-max", d, lambda ops, x, y: {"max": ops.reduce("max", x, 1)}, _rows(True),
                              loop, touched))
            out.append(Canary("matmul-rows", d, _matmul_body, _matrices, (("matmul_strategy", "rows"),), touched))
        if d == dt.float32:  # a CPU sorts short rows of 4-byte values in 16 or 8 lanes (codegen/lane_sort.py)
            out.append(Canary("sort-lanes", d, lambda ops, x: {"up": ops.sort(x), "down": ops.sort(x, descending=True)},
                              lambda d: [_data(d, (50, 40), 16, nan=True)], (), touched))
    return out


def _named_inputs(dtypes: list[np.dtype]):
    def make(_):
        return [_data(d, (N,), 30 + k) for k, d in enumerate(dtypes)]
    return make


def mixed_canaries(fp64: bool) -> list[Canary]:
    """Blocks over two element sizes, run at the widths qualified for each size alone (a
    block then runs at the narrower one): casts both ways between every pair of sizes,
    widening sums (4-byte numbers into 8-byte accumulators), argmax (8-byte indices)."""
    out: list[Canary] = []
    present = [s for s in (1, 2, 4, 8) if _by_size(s, fp64)]
    for k, a in enumerate(present):
        for b in present[k + 1:]:
            da, db = _by_size(a, fp64), _by_size(b, fp64)
            dtypes = da + db

            def pair(ops, *values, da=da, db=db, dtypes=dtypes):
                return _pair(ops, {d.name: v for d, v in zip(dtypes, values)}, da, db)

            out.append(Canary(f"casts-{a}-{b}-byte", da[0], pair, _named_inputs(dtypes), sizes=(1, a, b)))
    loop = (("reduce_strategy", "loop"),)
    for d in _by_size(4, fp64):
        out.append(Canary("reduce-widening-sum", d, lambda ops, x, y: {
            "dot_plus_one": ops.add(ops.reduce("sum", ops.multiply(x, y), 1), 1)}, _rows(False), loop, (4, 8)))
        out.append(Canary("reduce-argmax", d, lambda ops, x, y: {"argmax": ops.reduce("argmax", x, 1)},
                          _rows(True), loop, (4, 8)))
    out.append(Canary("reduce-count", dt.bool_, lambda ops, x, y: {"count": ops.reduce("sum", x, 1)}, _rows(False),
                      loop, (1, 8)))
    return out


def _helper_inputs(dtypes: tuple[np.dtype, ...]):
    def make(_):
        return [_data(d, (N,), 20 + k) for k, d in enumerate(dtypes) for _ in range(3)]
    return make


def common_canaries(fp64: bool) -> list[Canary]:
    """The families without a vector width, run as scalar code (width 1)."""
    helper_dtypes = (dt.int32, dt.float32, dt.int64) + ((dt.float64,) if fp64 else ())

    def helpers(ops, *values):
        out = {}
        for k, d in enumerate(helper_dtypes):
            x, y, z = values[3 * k: 3 * k + 3]
            out.update({f"{name}_{d.name}": v for name, v in _scalar_helpers(ops, x, y, z, d).items()})
        return out

    group = (("reduce_strategy", "group"),)
    return [
        Canary("scalar-helpers", helper_dtypes[0], helpers, _helper_inputs(helper_dtypes)),
        Canary("reduce-group", dt.float32, lambda ops, x, y: {"sum": ops.reduce("sum", ops.multiply(x, y), 1)},
               _rows(False), group),
        Canary("reduce-group", dt.int64, lambda ops, x, y: {"argmax": ops.reduce("argmax", x, 1)}, _rows(False), group),
        Canary("reduce-columns", dt.float32, lambda ops, x, y: {"sum": ops.reduce("sum", x, 0)}, _rows(False),
               (("reduce_strategy", "loop"),)),
        Canary("matmul-tiled", dt.float32, _matmul_body, _matrices, (("matmul_strategy", "tiled"),)),
        Canary("sort", dt.float32, lambda ops, x: {"up": ops.sort(x), "down": ops.sort(x, descending=True)},
               lambda d: [_data(d, (2, 5000), 10, nan=True)]),
        # 8-byte keys (a CPU's radix sort moves them unpacked) and short rows (an insertion sort there)
        Canary("sort", dt.int64, lambda ops, x: {"up": ops.sort(x), "down": ops.sort(x, descending=True)},
               lambda d: [_data(d, (2, 5000), 14)]),
        Canary("sort-short-rows", dt.float32, lambda ops, x: {"up": ops.sort(x)},
               lambda d: [_data(d, (50, 40), 15, nan=True)]),
        Canary("gather", dt.float32, lambda ops, x, i: {"taken": ops.take(x, i)},
               lambda d: [_data(d, (N,), 12), np.random.default_rng(13).integers(0, N, 999)]),
    ]
