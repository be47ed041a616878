"""Matrix products: `matmul` / `@`, with numpy's rules for 1-D operands and batches."""

from __future__ import annotations

from typing import Any

from fusion_server import dtypes as dt
from fusion_server.ir import MatmulOp

from . import _functions as F
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
    shape = batch + (va.shape[-2], vb.shape[-1])
    out = F._new(client, shape, dtype)
    result = Tensor._make(client, out.id, shape, dtype)
    client.record(MatmulOp(va._id, vb._id, dtype, out), va, vb)
    if a.ndim == 1:
        result = F.squeeze(result, -2)
    if b.ndim == 1:
        result = F.squeeze(result, -1)
    return result
