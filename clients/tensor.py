"""The Tensor handle: a lazy value on a device, named by an id the server knows."""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from fusion_server.ir import contiguous_strides

from .client import FusionClient


class DropRef(weakref.ref):
    """Tells the server when a handle is gone: its callback is the client's drop inbox's
    `append` (a C function, so no interrupt can fall between the handle's death and the
    id reaching the inbox, as one could at the start of a Python `__del__`). The server
    keeps every ref alive (`handle_refs`) until the id is drained, so the callback runs
    for handles collected as cyclic garbage too."""

    __slots__ = ("tid",)


def track(t: Tensor, client: FusionClient, tid: int) -> None:
    """Register the handle `t` of tensor `tid` with the client's drop inbox. (Each object
    made per op that the cyclic collector tracks counts where threads record at once: their
    queues keep thousands of ops alive, which the collector promotes to its oldest
    generation and then walks in full collections.)"""
    ref = DropRef(t, client.drop_callback)
    ref.tid = tid
    client.server.handle_refs[tid] = ref


def swap_ids(a: Tensor, b: Tensor) -> None:
    """Exchange the tensor ids of two live handles (their drop refs follow)."""
    refs = a._client.server.handle_refs
    ra, rb = refs[a._id], refs[b._id]
    a._id, b._id = b._id, a._id
    ra.tid, rb.tid = a._id, b._id
    refs[a._id], refs[b._id] = ra, rb


def _arithmetic(name: str, stem: str) -> tuple:
    """`x op o` and `o op x` (the methods `__stem__` and `__rstem__`) for element-wise op
    `name`: a Python float, the commonest operand, goes straight to the scalar path that
    F.binary would pick for it."""
    def forward(self, o):
        return F._tensor_scalar(name, self, o, False) if type(o) is float else F.binary(name, self, o)

    def reflected(self, o):
        return F._tensor_scalar(name, self, o, True) if type(o) is float else F.binary(name, o, self)

    forward.__name__, reflected.__name__ = f"__{stem}__", f"__r{stem}__"
    forward.__qualname__, reflected.__qualname__ = f"Tensor.__{stem}__", f"Tensor.__r{stem}__"
    return forward, reflected


class Tensor:
    """A handle to a (possibly not yet computed) array on a device.

    Operations on tensors are queued and fused; reading one (`numpy()`, `float()`, ...)
    runs what it depends on. Dropping the last reference frees its buffer once no queued
    op reads it.
    """

    # (_dense_base: (value, order) where this handle is `value` permuted, made by an op
    # run in its operands' memory order; _checked_bound: (id, n) when the values of
    # tensor `id` were found in [-n, n) as indices (see _indexing._index_on_device);
    # both unset on most handles: read with getattr)
    __slots__ = ("_id", "_client", "shape", "dtype", "_strides", "_offset", "_dense_base", "_checked_bound",
                 "__weakref__")

    __array_priority__ = 1000  # numpy defers mixed operators to us

    def __init__(self) -> None:
        raise TypeError("create tensors with clients.asarray(), zeros(), ... not Tensor()")

    @classmethod
    def _make(
        cls,
        client: FusionClient,
        tid: int,
        shape: tuple[int, ...],
        dtype: np.dtype,
        strides: tuple[int, ...] | None = None,
        offset: int = 0,
    ) -> Tensor:
        t = object.__new__(cls)
        t._id = tid
        t._client = client
        t.shape = shape
        t.dtype = dtype
        t._strides = strides  # None: C-contiguous from offset 0
        t._offset = offset
        track(t, client, tid)
        return t

    # -- layout -----------------------------------------------------------------------
    @property
    def strides_elements(self) -> tuple[int, ...]:
        """Strides in elements (this view's layout in its buffer)."""
        return self._strides if self._strides is not None else contiguous_strides(self.shape)

    @property
    def is_contiguous(self) -> bool:
        return self._offset == 0 and (
            self._strides is None or self._strides == contiguous_strides(self.shape)
        )

    # -- attributes ---------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def device(self):
        from .devices import Device

        return Device(self._client.server.info)

    @property
    def T(self) -> Tensor:
        return F.permute_dims(self, tuple(range(self.ndim - 1, -1, -1)))

    @property
    def mT(self) -> Tensor:
        if self.ndim < 2:
            raise ValueError("mT needs at least 2 dimensions")
        axes = tuple(range(self.ndim - 2)) + (self.ndim - 1, self.ndim - 2)
        return F.permute_dims(self, axes)

    def __array_namespace__(self, api_version: str | None = None):
        """The `clients` module: tensors speak the Array API (2021.12 to 2025.12)."""
        import clients

        if api_version is not None and api_version not in clients._array_api.API_VERSIONS:
            raise ValueError(f"Array API versions {', '.join(clients._array_api.API_VERSIONS)} are provided, "
                             f"not {api_version}")

        return clients

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self) -> str:
        state = self._client.call(_state_of, self._id)
        return (
            f"Tensor(shape={self.shape}, dtype={self.dtype.name}, "
            f"device={self._client.server.info.name!r}, {state})"
        )

    # -- reading ------------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """The values, as a new numpy array (runs what this tensor depends on)."""
        return self._client.read(self._id)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """The values as a numpy array (numpy 2's protocol). They live on the device, so
        this always copies: copy=False raises ValueError, as the protocol asks."""
        if copy is False:
            raise ValueError("a tensor's values live on the device: a numpy array of them is always a copy")
        out = self.numpy()
        return out if dtype is None else out.astype(dtype, copy=False)

    def __dlpack__(self, /, *, stream: Any = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:
        """A DLPack capsule of a host copy of the values. Device memory of an OpenCL buffer has
        no DLPack device type, so the capsule is numpy's, on the CPU (see `__dlpack_device__`).

        `max_version`: the newest DLPack version the consumer reads (None: a legacy capsule).
        `dl_device`: only the host, (1, 0), can be asked for. `copy`: None copies; True
        copies and marks the capsule as a copy; False exports the buffer itself, mapped, on a
        CPU device, whose buffers are host memory (writes go both ways), and raises
        BufferError on other devices."""
        if stream is not None:
            raise ValueError("a host copy is exported: stream must be None")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"a tensor exports host copies only: dl_device {tuple(dl_device)} is not (1, 0)")
        if copy is False:
            from ._buffers import host_view

            return host_view(self).__dlpack__(max_version=max_version, copy=False)
        return self.numpy().__dlpack__(max_version=max_version, copy=copy)

    def __dlpack_device__(self) -> tuple[int, int]:
        """Where a `__dlpack__` capsule points: the host (DLPack's kDLCPU, device 0)."""
        return (1, 0)

    def to_device(self, device: Any, /, *, stream: Any = None) -> Tensor:
        """This tensor on `device` (a Device, name or index): itself if already there, else a copy."""
        if stream is not None:
            raise ValueError("each thread has its own queue: stream must be None")
        return F.asarray(self, device=device)

    def _scalar(self, kind: type) -> Any:
        if self.size != 1:
            raise TypeError(f"only one-element tensors convert to {kind.__name__}, shape is {self.shape}")
        return kind(self.numpy().reshape(()).item())

    def __float__(self) -> float:
        if self.dtype.kind == "c":
            raise TypeError(f"a {self.dtype.name} tensor does not convert to float (take its real part first)")
        return self._scalar(float)

    def __int__(self) -> int:
        if self.dtype.kind == "c":
            raise TypeError(f"a {self.dtype.name} tensor does not convert to int (take its real part first)")
        return self._scalar(int)

    def __complex__(self) -> complex:
        return self._scalar(complex)

    def __bool__(self) -> bool:
        return self._scalar(bool)

    def __index__(self) -> int:
        if self.dtype.kind not in "iu":
            raise TypeError(f"only integer tensors can be used as an index, not {self.dtype.name}")
        return self._scalar(int)

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d tensor")
        for i in range(self.shape[0]):
            yield self[i]

    # -- operators ----------------------------------------------------------------------
    __add__, __radd__ = _arithmetic("add", "add")
    __sub__, __rsub__ = _arithmetic("subtract", "sub")
    __mul__, __rmul__ = _arithmetic("multiply", "mul")
    __truediv__, __rtruediv__ = _arithmetic("divide", "truediv")
    def __floordiv__(self, o): return F.binary("floor_divide", self, o)
    def __rfloordiv__(self, o): return F.binary("floor_divide", o, self)
    def __mod__(self, o): return F.binary("remainder", self, o)
    def __rmod__(self, o): return F.binary("remainder", o, self)
    def __pow__(self, o): return F.binary("pow", self, o)
    def __rpow__(self, o): return F.binary("pow", o, self)
    def __and__(self, o): return F.binary("bitwise_and", self, o)
    def __rand__(self, o): return F.binary("bitwise_and", o, self)
    def __or__(self, o): return F.binary("bitwise_or", self, o)
    def __ror__(self, o): return F.binary("bitwise_or", o, self)
    def __xor__(self, o): return F.binary("bitwise_xor", self, o)
    def __rxor__(self, o): return F.binary("bitwise_xor", o, self)
    def __lshift__(self, o): return F.binary("bitwise_left_shift", self, o)
    def __rlshift__(self, o): return F.binary("bitwise_left_shift", o, self)
    def __rshift__(self, o): return F.binary("bitwise_right_shift", self, o)
    def __rrshift__(self, o): return F.binary("bitwise_right_shift", o, self)
    def __lt__(self, o): return F.binary("less", self, o)
    def __le__(self, o): return F.binary("less_equal", self, o)
    def __gt__(self, o): return F.binary("greater", self, o)
    def __ge__(self, o): return F.binary("greater_equal", self, o)
    def __eq__(self, o): return F.binary("equal", self, o)  # type: ignore[override]
    def __ne__(self, o): return F.binary("not_equal", self, o)  # type: ignore[override]
    def __neg__(self): return F.unary("negative", self)
    def __pos__(self): return F.unary("positive", self)
    def __abs__(self): return F.unary("abs", self)
    def __invert__(self): return F.unary("bitwise_invert", self)

    def __matmul__(self, o): return L.matmul(self, o)
    def __rmatmul__(self, o): return L.matmul(o, self)

    __hash__ = None  # type: ignore[assignment]  # == is element-wise, as in numpy

    def __getitem__(self, key) -> Tensor:
        return I.getitem(self, key)

    def __setitem__(self, key: Any, value: Any) -> None:
        """`x[key] = value`, a functional update: x is rebound to a new value computed on
        the device; other tensors viewing x's old buffer keep their values (see
        `clients._indexing.setitem`)."""
        I.setitem(self, key, value)

    # In-place operators rebind the handle; the result must keep x's shape and dtype.
    def __iadd__(self, o): return I.inplace("add", self, o)
    def __isub__(self, o): return I.inplace("subtract", self, o)
    def __imul__(self, o): return I.inplace("multiply", self, o)
    def __itruediv__(self, o): return I.inplace("divide", self, o)
    def __ifloordiv__(self, o): return I.inplace("floor_divide", self, o)
    def __imod__(self, o): return I.inplace("remainder", self, o)
    def __ipow__(self, o): return I.inplace("pow", self, o)
    def __iand__(self, o): return I.inplace("bitwise_and", self, o)
    def __ior__(self, o): return I.inplace("bitwise_or", self, o)
    def __ixor__(self, o): return I.inplace("bitwise_xor", self, o)
    def __ilshift__(self, o): return I.inplace("bitwise_left_shift", self, o)
    def __irshift__(self, o): return I.inplace("bitwise_right_shift", self, o)
    def __imatmul__(self, o): return I.inplace_matmul(self, o)

    # -- methods --------------------------------------------------------------------------
    def astype(self, dtype: Any, copy: bool = True) -> Tensor:
        return F.astype(self, dtype, copy=copy)

    def reshape(self, *shape) -> Tensor:
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return F.reshape(self, shape)

    def exp(self) -> Tensor: return F.unary("exp", self)
    def log(self) -> Tensor: return F.unary("log", self)
    def sqrt(self) -> Tensor: return F.unary("sqrt", self)
    def tanh(self) -> Tensor: return F.unary("tanh", self)


def _state_of(server, tid: int) -> str:
    from fusion_server.handles import FAILED, PENDING

    entry = server.handles.get(tid)
    status = entry.storage.status
    return "pending" if status == PENDING else "failed" if status == FAILED else "ready"


from . import _functions as F  # noqa: E402  (functions need Tensor; methods need functions)
from . import _indexing as I  # noqa: E402, E741
from . import _linalg as L  # noqa: E402
