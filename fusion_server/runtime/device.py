"""Finding OpenCL devices and choosing one (`FUSION_DEVICE`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import pyopencl as cl

from ..errors import DeviceError


@dataclass(frozen=True)
class DeviceInfo:
    """One OpenCL device and the limits the server plans with."""

    index: int  # position in `list_devices()`
    platform: str
    name: str
    kind: str  # "GPU", "CPU", "ACCELERATOR", ...
    compute_units: int
    global_mem_bytes: int
    max_alloc_bytes: int
    max_parameter_bytes: int
    max_work_group_size: int
    fp64: bool
    device: cl.Device
    driver_version: str = ""

    @property
    def is_simulator(self) -> bool:
        return "oclgrind" in self.platform.lower() or "oclgrind" in self.name.lower()

    @property
    def is_pocl(self) -> bool:
        return "portable computing language" in self.platform.lower()

    @property
    def label(self) -> str:
        return f"{self.platform} / {self.name}"

    @property
    def driver_numbers(self) -> tuple[int, ...]:
        """The driver's version as numbers ("3.0-rc2" -> (3, 0)), for "the newest" in rankings."""
        found = re.search(r"\d+(?:\.\d+)*", self.driver_version)
        return tuple(int(p) for p in found.group(0).split(".")) if found else ()

    @property
    def local_mem_bytes(self) -> int:
        """Local memory per work-group (32 KiB, the standard's minimum, if the driver will not say)."""
        try:
            return int(self.device.local_mem_size)
        except (cl.Error, AttributeError, TypeError):
            return 32 * 1024

    @property
    def vector_width(self) -> int:
        """Elements per work-item of vectorized element-wise and reduction kernels, as the
        device prefers them (qualification may narrow them per element size).

        CPUs take their native float vector (16 on AVX-512, where a transcendental chain
        ran 2.9x faster than with 4: the driver's vector math fills the whole register).
        GPUs take 4: one float4 per work-item already reads at the hand-written kernel's
        bandwidth, and wider vectors only leave fewer work-items to hide latency.
        """
        if self.kind != "CPU":
            return 4
        try:
            native = int(self.device.native_vector_width_float)
        except (cl.Error, AttributeError, TypeError):
            native = 4
        return min(16, max(4, 1 << (max(native, 1).bit_length() - 1)))

    @cached_property
    def packs_work_items(self) -> bool:
        """A CPU driver that packs work-items into its vector lanes itself (Intel's CPU
        runtime: it prefers float width 1 over its native 16). Explicit vectors defeat that
        for contiguous element-wise kernels (a 16-op chain on a Zen 5: 6.6 ms as float16,
        2.9 as scalar code), while kernels that loop inside a work-item (reductions, the
        packed matmul, rows of strided views) keep their vectors (2x to 18x faster)."""
        if self.kind != "CPU":
            return False
        try:
            return int(self.device.preferred_vector_width_float) == 1 and int(self.device.native_vector_width_float) > 1
        except (cl.Error, AttributeError, TypeError):
            return False

    @property
    def max_bindings(self) -> int:
        """Kernel arguments that fit the device's parameter space (8 bytes each)."""
        return max(6, self.max_parameter_bytes // 8)


def _kind(dev: cl.Device) -> str:
    for flag in ("GPU", "CPU", "ACCELERATOR"):
        if dev.type & getattr(cl.device_type, flag):
            return flag
    return "OTHER"


def _driver_version(dev: cl.Device) -> str:
    try:
        return str(dev.driver_version).strip()
    except cl.Error:
        return ""


def list_devices() -> list[DeviceInfo]:
    """Every OpenCL device of every platform, in platform order."""
    from .icd import expose_pip_drivers
    from .waits import restore_interrupts

    out: list[DeviceInfo] = []
    try:
        expose_pip_drivers()
        platforms = cl.get_platforms()
    except cl.Error:
        return out
    finally:
        restore_interrupts()  # a driver may have taken SIGINT over while loading
    for plat in platforms:
        try:
            devices = plat.get_devices()
        except cl.Error:
            continue
        for dev in devices:
            out.append(
                DeviceInfo(
                    index=len(out),
                    platform=plat.name.strip(),
                    name=dev.name.strip(),
                    kind=_kind(dev),
                    compute_units=dev.max_compute_units,
                    global_mem_bytes=dev.global_mem_size,
                    max_alloc_bytes=dev.max_mem_alloc_size,
                    max_parameter_bytes=dev.max_parameter_size,
                    max_work_group_size=dev.max_work_group_size,
                    fp64=bool(dev.double_fp_config),
                    device=dev,
                    driver_version=_driver_version(dev),
                )
            )
    return out


def select_device(
    spec: str | int | None = None, choose: Callable[[list[DeviceInfo]], DeviceInfo] | None = None
) -> DeviceInfo:
    """The device named by `spec` (index or name substring), else the default.

    The default comes from `choose` over every device but the Oclgrind simulator (it
    reports itself as a GPU and runs kernels thousands of times slower); without it, the
    first of the preferred kind (`by_kind`).
    """
    devices = list_devices()
    if not devices:
        raise DeviceError("no OpenCL device found (install the 'pocl' extra for a CPU device)")
    if spec is not None and str(spec).strip() != "":
        text = str(spec).strip()
        if text.isdigit():
            idx = int(text)
            if idx >= len(devices):
                raise DeviceError(f"FUSION_DEVICE={text}: only {len(devices)} devices exist")
            return devices[idx]
        for info in devices:
            if text.lower() in info.label.lower():
                return info
        names = "; ".join(d.label for d in devices)
        raise DeviceError(f"FUSION_DEVICE={text!r} matches no device (devices: {names})")
    usable = [d for d in devices if not d.is_simulator]
    if not usable:
        raise DeviceError("only the Oclgrind simulator was found; name it in FUSION_DEVICE to use it")
    if choose is not None:
        return choose(usable)
    return by_kind(usable)[0][0]


def by_kind(devices: list[DeviceInfo]) -> list[list[DeviceInfo]]:
    """`devices` grouped by kind, most preferred first: GPUs, then CPUs (PoCL's before
    other CPU drivers), then the rest; platform order within a group."""
    gpus = [d for d in devices if d.kind == "GPU"]
    cpus = [d for d in devices if d.kind == "CPU"]
    cpus.sort(key=lambda d: not d.is_pocl)
    rest = [d for d in devices if d.kind not in ("GPU", "CPU")]
    return [group for group in (gpus, cpus, rest) if group]
