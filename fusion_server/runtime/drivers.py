"""Facts about OpenCL drivers that their devices do not report: where they cache kernels."""

from __future__ import annotations

import os
from pathlib import Path

import pyopencl as cl


def cache_root() -> Path:
    """Where the library keeps what it measured and built: FUSION_CACHE_DIR, else the
    user's cache directory."""
    configured = os.environ.get("FUSION_CACHE_DIR", "").strip()
    if configured:
        return Path(configured)
    import platformdirs

    return Path(platformdirs.user_cache_dir("fusion-server"))


def binaries_dir() -> Path:
    """Where the library keeps binaries for drivers that keep none (binaries.py)."""
    return cache_root() / "binaries"


def driver_caches_builds(device: cl.Device) -> bool:
    """Whether the driver keeps compiled sources itself (PoCL, NVIDIA's driver)."""
    from pyopencl.characterize import has_src_build_cache

    try:
        return has_src_build_cache(device) is True
    except cl.Error:
        return False


def is_pocl(device: cl.Device) -> bool:
    try:
        return "portable computing language" in device.platform.name.lower()
    except cl.Error:
        return False


def kernel_cache_of(device: cl.Device) -> str | None:
    """The directory where the device's driver keeps compiled kernels, where known.

    PoCL keeps its own (pyopencl then skips its cache); NVIDIA's driver keeps one too;
    for other drivers the library keeps binaries itself (binaries.py)."""
    if is_pocl(device):
        configured = os.environ.get("POCL_CACHE_DIR", "").strip()
        if configured:
            return configured
        base = os.environ.get("XDG_CACHE_HOME", "").strip() or str(Path.home() / ".cache")
        return str(Path(base) / "pocl" / "kcache")
    try:
        vendor = device.platform.name.lower()
    except cl.Error:
        vendor = ""
    if "nvidia" in vendor:
        return os.environ.get("CUDA_CACHE_PATH", "").strip() or str(Path.home() / ".nv" / "ComputeCache")
    return None if driver_caches_builds(device) else str(binaries_dir())
