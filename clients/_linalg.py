"""Matrix products: `matmul` / `@`, with numpy's rules for 1-D operands and batches.

A product with one row or one column (a matrix times a vector, a vector times a matrix) is
a reduction of the element-wise product: it reads the matrix once, as the row or column
reduction does, where the tiled kernel would compute a whole tile for one useful row or
column."""

from __future__ import annotations

from typing import Any

from fusion_server import dtypes as dt
from fusion_server.ir import MatmulOp

from . import _functions as F
from . import _reductions as R
from .tensor import Tensor


def matmul(x1: Any, x2: Any) -> Tensor:
    """x1 @ x2: 2-D or batched (batch dims broadcast); a 1-D operand is a vector, as in
    numpy. One tiled kernel; element-wise work on the result fuses into it."""
    client = F._client_of((x1, x2))
    a = x1 if type(x1) is Tensor else F._as_tensor(x1, client)
    b = x2 if type(x2) is Tensor else F._as_tensor(x2, client)
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("matmul: operands must have at least one dimension (use * for scalars)")
    dtype = dt.promote(a.dtype, b.dtype)
    if dt.is_bool(dtype):
        raise TypeError("matmul is not supported for bool tensors")
    if a.dtype != dtype:
        a = F.astype(a, dtype)
    if b.dtype != dtype:
        b = F.astype(b, dtype)
    va = F.expand_dims(a, 0) if a.ndim == 1 else a
    vb = F.expand_dims(b, -1) if b.ndim == 1 else b
    if va.shape[-1] != vb.shape[-2]:
        raise ValueError(
            f"matmul: shapes {a.shape} and {b.shape} do not align ({va.shape[-1]} != {vb.shape[-2]})"
        )
    batch = F.broadcast_shapes(va.shape[:-2], vb.shape[:-2])
    if vb.shape[-1] == 1 or va.shape[-2] == 1:
        return _as_reduction(a, b, va, vb, dtype)
    shape = batch + (va.shape[-2], vb.shape[-1])
    out = F._new(client, shape, dtype)
    result = Tensor._make(client, out.id, shape, dtype)
    client.record(MatmulOp(va._id, vb._id, dtype, out), va, vb)
    if a.ndim == 1:
        result = F.squeeze(result, -2)
    if b.ndim == 1:
        result = F.squeeze(result, -1)
    return result


def _as_reduction(a: Tensor, b: Tensor, va: Tensor, vb: Tensor, dtype) -> Tensor:
    """a @ b where the result has one column (b a vector) or one row (a a vector): the sum
    of a broadcast product along K, one reduction kernel whose prologue is the product (and
    whatever element-wise work made the operands). The sum keeps the operands' dtype; its
    accumulator is the reductions' (float64 for float32 where the device has it)."""
    if b.ndim == 1:  # (..., M, K) . (K,) -> (..., M); a 1-D `a` makes it a dot product
        return R.sum(a * b, axis=-1, dtype=dtype)
    if a.ndim == 1:  # (K,) . (..., K, N) -> (..., N)
        return R.sum(F.expand_dims(a, -1) * b, axis=-2, dtype=dtype)
    if vb.shape[-1] == 1:  # (..., M, K) . (..., K, 1) -> (..., M, 1)
        return R.sum(va * vb.mT, axis=-1, keepdims=True, dtype=dtype)
    return R.sum(va.mT * vb, axis=-2, keepdims=True, dtype=dtype)  # (..., 1, K) . (..., K, N)
