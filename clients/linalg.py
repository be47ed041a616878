"""The Array API's `linalg` extension (2025.12): `clients.linalg`.

Products, norms, traces, diagonals, outer and cross products and integer matrix powers
run on the device (views, fused element-wise work, reductions and matmul kernels). The
factorizations and what needs them (cholesky, det, eig, eigh, eigvals, eigvalsh, inv,
matrix_rank, pinv, qr, slogdet, solve, svd, svdvals, and the spectral matrix norms) read
their operands to the host once, compute with numpy.linalg (LAPACK), and upload the
results: one read and one copy each, no device kernel yet. Their results have the
operands' dtype (complex for eig and eigvals), as the standard asks.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from fusion_server import dtypes as dt

from . import _array_api as A
from . import _functions as F
from . import _reductions as R
from ._linalg import matmul
from ._manipulation import tensordot
from ._sorting import _tensor as _tensor_of
from .tensor import Tensor

__all__ = [
    "cholesky", "cross", "det", "diagonal", "eig", "eigh", "eigvals", "eigvalsh", "inv", "matmul", "matrix_norm",
    "matrix_power", "matrix_rank", "matrix_transpose", "outer", "pinv", "qr", "slogdet", "solve", "svd", "svdvals",
    "tensordot", "trace", "vecdot", "vector_norm", "EigResult", "EighResult", "QRResult", "SlogdetResult",
    "SVDResult",
]

matrix_transpose = A.matrix_transpose
vecdot = A.vecdot


class EighResult(NamedTuple):
    eigenvalues: Tensor
    eigenvectors: Tensor


class EigResult(NamedTuple):
    eigenvalues: Tensor
    eigenvectors: Tensor


class QRResult(NamedTuple):
    Q: Tensor
    R: Tensor


class SlogdetResult(NamedTuple):
    sign: Tensor
    logabsdet: Tensor


class SVDResult(NamedTuple):
    U: Tensor
    S: Tensor
    Vh: Tensor


# -- on the device ----------------------------------------------------------------------
def _tensor(x: Any, what: str) -> Tensor:
    return _tensor_of(x, f"linalg.{what}")


def _matrices(x: Any, what: str, square: bool = False, inexact: bool = True) -> Tensor:
    """x, checked to be a stack of matrices (square ones, if asked) of a floating dtype."""
    x = _tensor(x, what)
    if x.ndim < 2:
        raise ValueError(f"linalg.{what} needs a stack of matrices (at least 2 dimensions), got shape {x.shape}")
    if square and x.shape[-1] != x.shape[-2]:
        raise ValueError(f"linalg.{what} needs square matrices, got shape {x.shape}")
    if inexact and not dt.is_inexact(x.dtype):
        raise TypeError(f"linalg.{what} needs a floating-point tensor, not {x.dtype.name}")
    return x


def diagonal(x: Tensor, /, *, offset: int = 0) -> Tensor:
    """The diagonal of each matrix (`offset` above the main one when positive, below
    when negative): a view, no copy."""
    x = _matrices(x, "diagonal", inexact=False)
    offset = operator.index(offset)
    rows, cols = x.shape[-2:]
    n = max(0, min(rows, cols - offset) if offset >= 0 else min(rows + offset, cols))
    strides = x.strides_elements
    start = x._offset + (offset * strides[-1] if offset >= 0 else -offset * strides[-2]) if n else x._offset
    return F._view(x, x.shape[:-2] + (n,), strides[:-2] + (strides[-2] + strides[-1],), start)


def trace(x: Tensor, /, *, offset: int = 0, dtype: Any = None) -> Tensor:
    """The sum of each matrix's diagonal (`offset` as `diagonal`); integers sum in their
    dtype's default (int64, uint64) unless `dtype` says otherwise, floats keep theirs."""
    x = _matrices(x, "trace", inexact=False)
    d = diagonal(x, offset=offset)
    if dtype is None and not dt.is_inexact(x.dtype):
        dtype = dt.uint64 if dt.is_unsigned(x.dtype) else dt.int64
    return R.sum(d, axis=-1, dtype=dtype or x.dtype)


def outer(x1: Tensor, x2: Tensor, /) -> Tensor:
    """The outer product of two vectors: one broadcast multiply."""
    a, b = _tensor(x1, "outer"), _tensor(x2, "outer")
    if a.ndim != 1 or b.ndim != 1:
        raise ValueError(f"linalg.outer needs two vectors, got shapes {a.shape} and {b.shape}")
    return F.reshape(a, (a.shape[0], 1)) * b


def cross(x1: Tensor, x2: Tensor, /, *, axis: int = -1) -> Tensor:
    """Cross products of 3-vectors along `axis` (broadcasting the rest): one fused kernel
    over slices of the operands."""
    a, b = _tensor(x1, "cross"), _tensor(x2, "cross")
    if a.dtype.kind == "b" or b.dtype.kind == "b":
        raise TypeError("linalg.cross needs numeric tensors, not bool")
    if not (-min(a.ndim, b.ndim) <= axis < 0):
        raise np.exceptions.AxisError(f"linalg.cross: axis {axis} must be negative and within both operands")
    if a.shape[axis] != 3 or b.shape[axis] != 3:
        raise ValueError(f"linalg.cross needs 3 elements along axis {axis}, got shapes {a.shape} and {b.shape}")
    shape = F.broadcast_shapes(a.shape, b.shape)
    a, b = F.broadcast_to(a, shape), F.broadcast_to(b, shape)
    head = (slice(None),) * (len(shape) + axis)

    def part(t: Tensor, k: int) -> Tensor:
        return F.getitem(t, head + (slice(k, k + 1),))

    parts = [part(a, (k + 1) % 3) * part(b, (k + 2) % 3) - part(a, (k + 2) % 3) * part(b, (k + 1) % 3)
             for k in range(3)]
    return A.concat(parts, axis=axis)


def vector_norm(x: Tensor, /, *, axis: Any = None, keepdims: bool = False, ord: float = 2) -> Tensor:  # noqa: A002
    """The `ord`-norm of vectors along `axis` (None: all of x), in x's real dtype: one
    fused reduction (2: the root of the sum of squares; 1; inf and -inf: the largest and
    smallest magnitude; 0: the count of nonzero elements; any other p: (sum |x|^p)^(1/p))."""
    x = _tensor(x, "vector_norm")
    if not dt.is_inexact(x.dtype):
        raise TypeError(f"linalg.vector_norm needs a floating-point tensor, not {x.dtype.name}")
    magnitude = F.unary("abs", x)
    if ord == math.inf:
        return R.max(magnitude, axis=axis, keepdims=keepdims) if x.size else _empty(magnitude, axis, keepdims)
    if ord == -math.inf:
        return R.min(magnitude, axis=axis, keepdims=keepdims)
    if ord == 0:
        count = R.sum(F.binary("not_equal", magnitude, 0.0), axis=axis, keepdims=keepdims)
        return F.astype(count, magnitude.dtype)
    if ord == 1:
        return R.sum(magnitude, axis=axis, keepdims=keepdims)
    if ord == 2:
        return F.unary("sqrt", R.sum(F.unary("square", magnitude), axis=axis, keepdims=keepdims))
    total = R.sum(F.binary("pow", magnitude, float(ord)), axis=axis, keepdims=keepdims)
    return F.binary("pow", total, 1.0 / float(ord))


def _empty(magnitude: Tensor, axis: Any, keepdims: bool) -> Tensor:
    """The infinity-norm of no elements: 0 (max of nothing has no identity)."""
    shape = R._out_shape(magnitude, R._axes(magnitude, axis), keepdims)
    return F.full(shape, 0.0, magnitude.dtype, device=magnitude.device)


def matrix_norm(x: Tensor, /, *, keepdims: bool = False, ord: Any = "fro") -> Tensor:  # noqa: A002
    """The `ord`-norm of each matrix: "fro", 1, -1, inf and -inf on the device (one
    or two fused reductions); 2, -2 and "nuc" from the singular values (`svdvals`)."""
    x = _matrices(x, "matrix_norm")
    axes = (-2, -1)
    if ord == "fro":
        return vector_norm(x, axis=axes, keepdims=keepdims, ord=2)
    if ord in (1, -1, math.inf, -math.inf):
        along = -2 if ord in (1, -1) else -1  # (1: the largest column sum; inf: the largest row sum)
        sums = R.sum(F.unary("abs", x), axis=along, keepdims=True)
        pick = R.max if ord > 0 else R.min
        out = pick(sums, axis=-1 if along == -2 else -2, keepdims=True)
    elif ord in (2, -2, "nuc"):
        s = svdvals(x)
        out = R.sum(s, axis=-1) if ord == "nuc" else (R.max if ord == 2 else R.min)(s, axis=-1)
        out = F.reshape(out, out.shape + (1, 1))
    else:
        raise ValueError(f"linalg.matrix_norm: ord must be 'fro', 'nuc', 1, -1, 2, -2, inf or -inf, not {ord!r}")
    return out if keepdims else F.reshape(out, out.shape[:-2])


def matrix_power(x: Tensor, n: int, /) -> Tensor:
    """x raised to the integer power `n` by repeated squaring (matmul kernels on the
    device); a negative power inverts first (`inv`), 0 gives identity matrices."""
    x = _matrices(x, "matrix_power", square=True, inexact=False)
    n = operator.index(n)
    if n < 0:
        x, n = inv(x), -n
    if n == 0:
        eye = A.eye(x.shape[-1], dtype=x.dtype, device=x.device)
        return F.astype(F.broadcast_to(eye, x.shape), x.dtype)
    result = None
    base = x
    while True:
        if n & 1:
            result = base if result is None else matmul(result, base)
        n >>= 1
        if not n:
            return result
        base = matmul(base, base)


# -- on the host, through numpy.linalg --------------------------------------------------
def _on_host(what: str, fn: Callable[..., Any], *tensors: Tensor, **kwargs: Any) -> Any:
    """`fn` of the tensors' values, computed on the host; each array of the result
    uploaded to the first tensor's device (a tuple stays a tuple, of the same class)."""
    device = tensors[0].device
    try:
        result = fn(*(t.numpy() for t in tensors), **kwargs)
    except np.linalg.LinAlgError as exc:
        raise ValueError(f"linalg.{what}: {exc}") from exc

    def up(value: Any) -> Tensor:
        return F.asarray(np.asarray(value), device=device)

    if isinstance(result, tuple):
        return tuple(up(v) for v in result)
    return up(result)


def _as(t: Tensor, dtype: np.dtype) -> Tensor:
    return t if t.dtype == dtype else F.astype(t, dtype)


def cholesky(x: Tensor, /, *, upper: bool = False) -> Tensor:
    """The Cholesky factor of each Hermitian positive-definite matrix (lower, or upper
    with `upper`); on the host (numpy.linalg)."""
    x = _matrices(x, "cholesky", square=True)
    return _on_host("cholesky", np.linalg.cholesky, x, upper=bool(upper))


def det(x: Tensor, /) -> Tensor:
    """The determinant of each square matrix; on the host (numpy.linalg)."""
    return _on_host("det", np.linalg.det, _matrices(x, "det", square=True))


def slogdet(x: Tensor, /) -> SlogdetResult:
    """The sign and the log of the absolute value of each determinant (the sign of a
    complex one: its phase); on the host (numpy.linalg)."""
    return SlogdetResult(*_on_host("slogdet", np.linalg.slogdet, _matrices(x, "slogdet", square=True)))


def eigh(x: Tensor, /) -> EighResult:
    """Eigenvalues (ascending, real) and eigenvectors of each Hermitian matrix; on the
    host (numpy.linalg)."""
    return EighResult(*_on_host("eigh", np.linalg.eigh, _matrices(x, "eigh", square=True)))


def eigvalsh(x: Tensor, /) -> Tensor:
    """Eigenvalues (ascending, real) of each Hermitian matrix; on the host (numpy.linalg)."""
    return _on_host("eigvalsh", np.linalg.eigvalsh, _matrices(x, "eigvalsh", square=True))


def eig(x: Tensor, /) -> EigResult:
    """Eigenvalues and eigenvectors of each square matrix, complex always (2025.12); on
    the host (numpy.linalg)."""
    x = _matrices(x, "eig", square=True)
    values, vectors = _on_host("eig", np.linalg.eig, x)
    target = dt.complex_of(dt.real_of(x.dtype))
    return EigResult(_as(values, target), _as(vectors, target))


def eigvals(x: Tensor, /) -> Tensor:
    """Eigenvalues of each square matrix, complex always (2025.12); on the host."""
    x = _matrices(x, "eigvals", square=True)
    return _as(_on_host("eigvals", np.linalg.eigvals, x), dt.complex_of(dt.real_of(x.dtype)))


def inv(x: Tensor, /) -> Tensor:
    """The inverse of each square matrix (ValueError if one is singular); on the host."""
    return _on_host("inv", np.linalg.inv, _matrices(x, "inv", square=True))


def solve(x1: Tensor, x2: Tensor, /) -> Tensor:
    """x such that x1 @ x = x2, for square x1 (a vector x2 when it is 1-D, as the
    standard says); on the host (numpy.linalg)."""
    a = _matrices(x1, "solve", square=True)
    b = _tensor(x2, "solve")
    dtype = dt.promote(a.dtype, b.dtype)
    if not dt.is_inexact(dtype):
        raise TypeError(f"linalg.solve needs floating-point tensors, not {dtype.name}")
    return _on_host("solve", np.linalg.solve, _as(a, dtype), _as(b, dtype))


def qr(x: Tensor, /, *, mode: str = "reduced") -> QRResult:
    """The QR factorization of each matrix ("reduced" or "complete"); on the host."""
    if mode not in ("reduced", "complete"):
        raise ValueError(f"linalg.qr: mode must be 'reduced' or 'complete', not {mode!r}")
    return QRResult(*_on_host("qr", np.linalg.qr, _matrices(x, "qr"), mode=mode))


def svd(x: Tensor, /, *, full_matrices: bool = True) -> SVDResult:
    """U, S (descending, real) and Vh of each matrix; on the host (numpy.linalg)."""
    return SVDResult(*_on_host("svd", np.linalg.svd, _matrices(x, "svd"), full_matrices=bool(full_matrices)))


def svdvals(x: Tensor, /) -> Tensor:
    """The singular values of each matrix, descending (real); on the host."""
    return _on_host("svdvals", np.linalg.svd, _matrices(x, "svdvals"), compute_uv=False)


def _rtol(x: Tensor, rtol: Any) -> Any:
    """The standard's default relative tolerance: max(M, N) * eps of x's real dtype."""
    if rtol is None:
        return max(x.shape[-2:]) * float(np.finfo(dt.real_of(x.dtype)).eps)
    return rtol.numpy() if type(rtol) is Tensor else rtol


def matrix_rank(x: Tensor, /, *, rtol: Any = None) -> Tensor:
    """The rank of each matrix: its singular values above `rtol` times the largest
    (default: max(M, N) * eps); int64. On the host (numpy.linalg)."""
    x = _matrices(x, "matrix_rank")
    s = svdvals(x).numpy()
    tol = np.asarray(_rtol(x, rtol))[..., None] * (s[..., :1] if s.shape[-1] else 0)
    return F.asarray(np.count_nonzero(s > tol, axis=-1).astype(np.int64), device=x.device)


def pinv(x: Tensor, /, *, rtol: Any = None) -> Tensor:
    """The Moore-Penrose pseudo-inverse of each matrix (singular values at most `rtol`
    times the largest count as zero); on the host (numpy.linalg)."""
    x = _matrices(x, "pinv")
    return _on_host("pinv", np.linalg.pinv, x, rtol=_rtol(x, rtol))
