"""The Array API's `fft` extension (2025.12): `clients.fft`.

The transforms read their operand to the host once, transform it with numpy.fft
(pocketfft) and upload the result: one read and one copy each, no device kernel yet.
Single precision stays single (float32 in, complex64 out), as the standard asks.
`fftshift` and `ifftshift` are device views and copies (`roll`); `fftfreq` and
`rfftfreq` are computed on the device.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from fusion_server import dtypes as dt

from . import _functions as F
from ._manipulation import roll
from .tensor import Tensor

__all__ = ["fft", "ifft", "fftn", "ifftn", "rfft", "irfft", "rfftn", "irfftn", "hfft", "ihfft", "fftfreq",
           "rfftfreq", "fftshift", "ifftshift"]

NORMS = ("backward", "ortho", "forward")


def _transform(what: str, fn: Callable[..., np.ndarray], x: Any, kinds: str, out: str, **kwargs: Any) -> Tensor:
    """numpy.fft's `fn` of x's values on the host, uploaded to x's device. `kinds`: the
    dtype kinds x may have ("fc" or "c" or "f"); `out`: "c" for a complex result of x's
    precision, "f" for a real one."""
    if type(x) is not Tensor:
        raise TypeError(f"fft.{what}() takes a tensor, not {type(x).__name__}")
    if x.dtype.kind not in kinds:
        raise TypeError(f"fft.{what} needs a {'complex' if kinds == 'c' else 'floating-point'} tensor, "
                        f"not {x.dtype.name}")
    if kwargs.get("norm") not in NORMS:
        raise ValueError(f"fft.{what}: norm must be one of {NORMS}, not {kwargs.get('norm')!r}")
    real = dt.real_of(x.dtype)
    target = dt.complex_of(real) if out == "c" else real
    return F.asarray(fn(x.numpy(), **kwargs).astype(target, copy=False), device=x.device)


def _one(n: Any, axis: int) -> dict:
    if n is not None and operator.index(n) < 1:
        raise ValueError(f"n must be a positive length, not {n}")
    return {"n": n, "axis": operator.index(axis)}


def _many(s: Sequence[int] | None, axes: Sequence[int] | None) -> dict:
    return {"s": None if s is None else tuple(operator.index(v) for v in s),
            "axes": None if axes is None else tuple(operator.index(a) for a in axes)}


def fft(x: Tensor, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Tensor:
    """The one-dimensional discrete Fourier transform along `axis` (length `n`)."""
    return _transform("fft", np.fft.fft, x, "c", "c", norm=norm, **_one(n, axis))


def ifft(x: Tensor, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Tensor:
    """The one-dimensional inverse transform along `axis`."""
    return _transform("ifft", np.fft.ifft, x, "c", "c", norm=norm, **_one(n, axis))


def fftn(x: Tensor, /, *, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
         norm: str = "backward") -> Tensor:
    """The n-dimensional transform over `axes` (sizes `s`)."""
    return _transform("fftn", np.fft.fftn, x, "c", "c", norm=norm, **_many(s, axes))


def ifftn(x: Tensor, /, *, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
          norm: str = "backward") -> Tensor:
    """The n-dimensional inverse transform over `axes`."""
    return _transform("ifftn", np.fft.ifftn, x, "c", "c", norm=norm, **_many(s, axes))


def rfft(x: Tensor, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Tensor:
    """The transform of real values along `axis`: the n // 2 + 1 non-negative frequencies."""
    return _transform("rfft", np.fft.rfft, x, "f", "c", norm=norm, **_one(n, axis))


def irfft(x: Tensor, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Tensor:
    """The inverse of `rfft`: real values of length `n` (default 2 * (m - 1))."""
    return _transform("irfft", np.fft.irfft, x, "c", "f", norm=norm, **_one(n, axis))


def rfftn(x: Tensor, /, *, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
          norm: str = "backward") -> Tensor:
    """The n-dimensional transform of real values (the last axis halved)."""
    return _transform("rfftn", np.fft.rfftn, x, "f", "c", norm=norm, **_many(s, axes))


def irfftn(x: Tensor, /, *, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
           norm: str = "backward") -> Tensor:
    """The inverse of `rfftn`."""
    return _transform("irfftn", np.fft.irfftn, x, "c", "f", norm=norm, **_many(s, axes))


def hfft(x: Tensor, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Tensor:
    """The transform of a signal with Hermitian symmetry (real result)."""
    return _transform("hfft", np.fft.hfft, x, "c", "f", norm=norm, **_one(n, axis))


def ihfft(x: Tensor, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Tensor:
    """The inverse of `hfft`, from real values."""
    return _transform("ihfft", np.fft.ihfft, x, "f", "c", norm=norm, **_one(n, axis))


def _frequencies(n: int, d: float, dtype: Any, device: Any, half: bool) -> Tensor:
    n = operator.index(n)
    if n < 1:
        raise ValueError(f"n must be a positive length, not {n}")
    target = dt.normalize(dtype) if dtype is not None else (
        dt.float64 if (F._device_client(device).fp64) else dt.float32)
    if target.kind != "f":
        raise TypeError(f"the sample frequencies are real: dtype must be a real floating dtype, not {target.name}")
    count = n // 2 + 1 if half else n
    k = F.arange(count, dtype=target, device=device)
    if not half:  # (the second half holds the negative frequencies: k - n)
        k = F.where(k < (n + 1) // 2, k, k - n)
    return k * (1.0 / (n * d))


def fftfreq(n: int, /, *, d: float = 1.0, dtype: Any = None, device: Any = None) -> Tensor:
    """The sample frequencies of an `n`-point transform with sample spacing `d`."""
    return _frequencies(n, d, dtype, device, half=False)


def rfftfreq(n: int, /, *, d: float = 1.0, dtype: Any = None, device: Any = None) -> Tensor:
    """The non-negative sample frequencies of an `n`-point `rfft`."""
    return _frequencies(n, d, dtype, device, half=True)


def _shift(x: Tensor, axes: Any, sign: int) -> Tensor:
    if type(x) is not Tensor:
        raise TypeError(f"fftshift takes a tensor, not {type(x).__name__}")
    if axes is None:
        axes = tuple(range(x.ndim))
    elif isinstance(axes, (int, np.integer)):
        axes = (int(axes),)
    axes = tuple(F._axis(a, x.ndim) for a in axes)
    if not axes:
        return x
    shifts = tuple(sign * (x.shape[a] // 2) for a in axes)
    return roll(x, shifts, axes)


def fftshift(x: Tensor, /, *, axes: int | Sequence[int] | None = None) -> Tensor:
    """x with the zero frequency moved to the middle of `axes` (all, if None)."""
    return _shift(x, axes, 1)


def ifftshift(x: Tensor, /, *, axes: int | Sequence[int] | None = None) -> Tensor:
    """The inverse of `fftshift`."""
    return _shift(x, axes, -1)
