"""Command line: `python -m fusion_server demo | info | bench`."""

from __future__ import annotations

import os
import sys


def info() -> int:
    """Print every OpenCL device with its limits, and which one is the default."""
    import clients

    default = clients.default_device()
    for dev in clients.devices():
        mark = "*" if dev == default else " "
        print(f"{mark} [{dev.index}] {dev.platform} / {dev.name} ({dev.kind})")
        for key, value in dev.limits.items():
            print(f"        {key:<22}{value}")
    print("(* = default device; choose another with FUSION_DEVICE=<index or name>)")
    print(f"compiled-kernel cache (pyopencl's, kept between processes): {kernel_cache_dir()}")
    return 0


def kernel_cache_dir() -> str:
    """Where pyopencl keeps built binaries (its own rule: XDG / platform cache dir)."""
    import platformdirs

    base = platformdirs.user_cache_dir("pyopencl", "pyopencl")
    version = ".".join(str(i) for i in sys.version_info)
    return os.path.join(base, f"pyopencl-compiler-cache-v2-py{version}")


def bench(argv: list[str]) -> int:
    """Run the benchmark suite (from a source checkout): a table, JSON and a plot."""
    try:
        from benchmarks import run
    except ImportError:
        print("python -m fusion_server bench runs the suite in benchmarks/: start it from the project's root")
        return 2
    run.main(argv)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv.pop(0) if argv else "help"
    if command == "demo":
        from .demo import main as demo

        return demo(argv)
    if command == "info":
        return info()
    if command == "bench":
        return bench(argv)
    print("usage: python -m fusion_server {demo,info,bench} [options]")
    return 0 if command in ("help", "-h", "--help") else 2
