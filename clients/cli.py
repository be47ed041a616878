"""Command line: `python -m fusion_server demo | info | bench`."""

from __future__ import annotations

import os
import sys


def info(argv: list[str] | None = None) -> int:
    """Print every OpenCL device with its limits, driver, qualification verdict and
    kernel caches; which one is the default, and why.

    `--qualify` qualifies every device that has no verdict yet (by default only the
    ones the default choice needs are), `--requalify` measures every verdict again."""
    import clients
    from fusion_server import qualification
    from fusion_server.qualification import ranking
    from fusion_server.qualification import verdict as verdicts
    from fusion_server.runtime.drivers import kernel_cache_of

    argv = argv or []
    refresh = "--requalify" in argv
    everything = refresh or "--qualify" in argv
    default = clients.default_device()
    infos = [d.info for d in clients.devices()]
    for info in infos:
        mark = "*" if info.index == default.index else " "
        print(f"{mark} [{info.index}] {info.platform} / {info.name} ({info.kind})")
        for key, value in clients.Device(info).limits.items():
            print(f"        {key:<22}{value}")
        print(f"        {'driver':<22}{verdicts.driver_of(info)}")
        verdict = verdicts.load(info) if not everything else None
        if verdict is None and (everything or info.index == default.index or info.is_simulator):
            verdict = qualification.verdict_for(info, refresh=refresh)
        lines = verdict.lines() if verdict else ["not qualified yet (it is when first used; --qualify runs it now)"]
        print(f"        {'vector widths':<22}{lines[0]}")
        for line in lines[1:]:
            print(f"        {'':<22}{line}")
        print(f"        {'kernel cache':<22}{_kernel_cache(info, kernel_cache_of)}")
    print()
    print("default device, and why (FUSION_DEVICE=<index or name> chooses another):")
    if os.environ.get("FUSION_DEVICE", "").strip():
        print(f"  [{default.index}] {default.platform} / {default.name}: named by FUSION_DEVICE")
    else:
        for place, ranked in enumerate(ranking.rank(infos, qualification.verdict_for), 1):
            d = ranked.info
            print(f"  {place}. [{d.index}] {d.platform} / {d.name}: {ranked.why}")
    print(f"qualification verdicts kept in {verdicts.cache_dir()} (FUSION_QUALIFY=0 turns qualification off)")
    return 0


def _kernel_cache(info, kernel_cache_of) -> str:
    """Where compiled kernels of `info` are kept between processes."""
    from fusion_server.runtime.drivers import driver_caches_builds

    where = kernel_cache_of(info.device)
    if driver_caches_builds(info.device):
        return f"{where or 'kept by the driver'} (the driver's own)"
    return f"{where} (the library's: the driver's binaries, written whole or not at all)"


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
        return info(argv)
    if command == "bench":
        return bench(argv)
    print("usage: python -m fusion_server {demo,info [--qualify|--requalify],bench} [options]")
    return 0 if command in ("help", "-h", "--help") else 2
