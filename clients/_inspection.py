"""The Array API's inspection namespace: `__array_namespace_info__()`.

Libraries written against the standard (scikit-learn, SciPy, array-api-extra) ask it
which devices, dtypes and capabilities a namespace has before anything else.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fusion_server import dtypes as dt

from . import devices as _devices
from ._array_api import _KINDS

# The dtypes this namespace has, by the standard's names, in its order.
_DTYPES = {d.name: d for d in dt.SUPPORTED}

def _device_info(device: Any):
    if device is None:
        return _devices.default_device().info
    if isinstance(device, _devices.Device):
        return device.info
    raise ValueError(f"not a device of this namespace: {device!r} (see devices())")


class Info:
    """What `__array_namespace_info__()` returns: the namespace's devices, dtypes and
    capabilities, as the standard's inspection API describes them."""

    __module__ = "clients"

    def capabilities(self) -> dict[str, Any]:
        """Boolean indexing and data-dependent shapes are there (the values are read to
        the host first); no limit on the number of dimensions."""
        return {"boolean indexing": True, "data-dependent shapes": True, "max dimensions": None}

    def default_device(self) -> _devices.Device:
        return _devices.default_device()

    def devices(self) -> tuple[_devices.Device, ...]:
        """Every device, as a tuple (2025.12; a list before)."""
        return tuple(_devices.devices())

    def default_dtypes(self, *, device: Any = None) -> dict[str, np.dtype]:
        """The dtypes to default to: float64 and complex128 (float32 and complex64 on a
        device without fp64, where creation functions need an explicit dtype), int64 for
        integers and indices."""
        info = _device_info(device)
        return {"real floating": dt.float64 if info.fp64 else dt.float32,
                "complex floating": dt.complex128 if info.fp64 else dt.complex64,
                "integral": dt.int64, "indexing": dt.int64}

    def dtypes(self, *, device: Any = None, kind: str | tuple[str, ...] | None = None) -> dict[str, np.dtype]:
        """The dtypes the device has, by name; `kind` (a kind name or a tuple of them)
        keeps those of that kind. float64 and complex128 only where the device has fp64."""
        info = _device_info(device)
        kinds = (kind,) if isinstance(kind, str) else kind
        if kinds is not None:
            unknown = [k for k in kinds if k not in _KINDS]
            if unknown:
                raise ValueError(f"unknown dtype kind {unknown[0]!r}; expected one of {sorted(_KINDS)}")
        out = {}
        for name, dtype in _DTYPES.items():
            if dtype in dt.FP64 and not info.fp64:
                continue
            if kinds is None or any(dtype.kind in _KINDS[k] for k in kinds):
                out[name] = dtype
        return out


def __array_namespace_info__() -> Info:  # noqa: N807 (the standard's name)
    """The inspection namespace (the Array API's `__array_namespace_info__`)."""
    return Info()
