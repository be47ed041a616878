"""Command line: `python -m fusion_server demo | info`."""

from __future__ import annotations

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
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv.pop(0) if argv else "help"
    if command == "demo":
        from .demo import main as demo

        return demo(argv)
    if command == "info":
        return info()
    print("usage: python -m fusion_server {demo,info} [options]")
    return 0 if command in ("help", "-h", "--help") else 2
