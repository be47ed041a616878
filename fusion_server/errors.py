"""Exceptions the server raises; the client passes them to the user unchanged."""


class FusionError(RuntimeError):
    """Base class of the server's errors."""


class ReentrancyError(FusionError):
    """Code running under the server lock (a custom launch, a fuser) called the client."""


class TensorFailedError(FusionError):
    """The block that computes this tensor failed; `__cause__` holds why."""


class DeviceMemoryError(FusionError, MemoryError):
    """The device could not allocate a buffer even after the pool was emptied."""


class DeviceError(FusionError):
    """No usable OpenCL device, or a device that lacks what was asked (e.g. float64)."""


class DroppedTensorError(FusionError):
    """An id that the server no longer knows: the tensor was dropped or belongs elsewhere."""
