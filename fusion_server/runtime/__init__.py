"""The OpenCL side: device choice, context and queue, programs, buffers, waits."""

from .device import DeviceInfo, list_devices, select_device
from .runtime import DeviceRuntime

__all__ = ["DeviceInfo", "DeviceRuntime", "list_devices", "select_device"]
