"""Devices: listing them, naming them, and the one client (and server) per device."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

from fusion_server import qualification
from fusion_server.qualification.ranking import choose
from fusion_server.runtime import DeviceInfo, list_devices, select_device
from fusion_server.server import FusionServer

from .client import FusionClient


@dataclass(frozen=True)
class Device:
    """A device tensors can live on, with the limits its server plans with."""

    info: DeviceInfo

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def platform(self) -> str:
        return self.info.platform

    @property
    def kind(self) -> str:
        return self.info.kind

    @property
    def index(self) -> int:
        return self.info.index

    @property
    def fp64(self) -> bool:
        return self.info.fp64

    @property
    def limits(self) -> dict:
        i = self.info
        return {
            "compute_units": i.compute_units,
            "global_mem_bytes": i.global_mem_bytes,
            "max_alloc_bytes": i.max_alloc_bytes,
            "max_parameter_bytes": i.max_parameter_bytes,
            "max_bindings": i.max_bindings,
            "max_work_group_size": i.max_work_group_size,
            "fp64": i.fp64,
        }

    def __repr__(self) -> str:
        return f"Device({self.index}: {self.platform} / {self.name}, {self.kind})"

    def __str__(self) -> str:
        return f"{self.name} ({self.platform})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Device) and other.info.index == self.info.index

    def __hash__(self) -> int:
        return hash(self.info.index)


_clients: dict[int, FusionClient] = {}
_default: list[int] = []
_registry_lock = threading.Lock()


def devices() -> list[Device]:
    """Every OpenCL device, with its limits."""
    return [Device(info) for info in list_devices()]


def _resolve(device: Device | str | int | None) -> DeviceInfo:
    if isinstance(device, Device):
        return device.info
    if device is None:
        return select_device(os.environ.get("FUSION_DEVICE"), choose)
    return select_device(str(device), choose)


def client_for(device: Device | str | int | None = None) -> FusionClient:
    """The process-wide client of `device` (default: FUSION_DEVICE, else the default)."""
    if device is None and _default:
        return _clients[_default[0]]
    with _registry_lock:
        if device is None and _default:
            return _clients[_default[0]]
        info = _resolve(device)
        client = _clients.get(info.index)
        if client is None:
            server = FusionServer(info, widths=qualification.widths_for(info))
            client = _clients[info.index] = FusionClient(server)
        if device is None:
            _default.append(info.index)
        return client


def default_device() -> Device:
    return Device(client_for().server.info)
