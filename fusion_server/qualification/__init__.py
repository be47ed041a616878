"""Device qualification: never trust a driver's claim, check its values.

Before the first kernel runs on a device, a canary set (canaries.py) is built and run in
child processes (child.py, runner.py) at every candidate vector width, and every value
is checked against numpy. Each element size gets the widest width that passed
everything; the verdict is kept on disk (verdict.py), so this runs once per machine,
driver and library version. `FUSION_QUALIFY=0` turns it off (the device's preferred
widths are then trusted); `FUSION_VECTOR_WIDTH` still forces one width for every size.
"""

from __future__ import annotations

import logging
import os
import threading
import warnings

from ..errors import DeviceError, FusionError
from ..runtime.device import DeviceInfo
from ..runtime.widths import ELEMENT_SIZES, WIDTHS, VectorWidths
from . import verdict as _store
from .runner import qualify
from .verdict import Failure, Verdict

log = logging.getLogger("fusion_server")

__all__ = ["Failure", "Verdict", "enabled", "qualify", "verdict_for", "widths_for"]

_verdicts: dict[str, Verdict] = {}
_locks: dict[str, threading.Lock] = {}
_registry = threading.Lock()
_warned: set[str] = set()


def enabled() -> bool:
    return os.environ.get("FUSION_QUALIFY", "1").strip() != "0"


def _unqualified(info: DeviceInfo, note: str) -> Verdict:
    preferred = {s: info.vector_width for s in ELEMENT_SIZES}
    return Verdict(device=info.label, driver=_store.driver_of(info), widths=dict(preferred), preferred=preferred,
                   qualified=False, note=note)


def verdict_for(info: DeviceInfo, refresh: bool = False) -> Verdict:
    """The device's verdict: from this process, from disk, or measured now (cold: a few
    seconds, once). `refresh` measures again."""
    if info.is_simulator:
        return _unqualified(info, "a simulator: it interprets kernels, and its verdict would say nothing of hardware")
    if not enabled():
        return _unqualified(info, "FUSION_QUALIFY=0")
    key = _store.cache_key(info)
    with _registry:
        lock = _locks.setdefault(key, threading.Lock())
    with lock:  # one qualification per device, however many threads ask
        verdict = None if refresh else (_verdicts.get(key) or _store.load(info))
        if verdict is None:
            log.info("qualifying %s (once per machine and driver)", info.label)
            verdict = qualify(info)
            where = _store.store(info, verdict)
            log.info("qualified %s in %.1f s: %s (kept in %s)", info.label, verdict.seconds,
                     verdict.vector_widths, where)
        _verdicts[key] = verdict
        return verdict


def widths_for(info: DeviceInfo) -> VectorWidths:
    """The widths a server on `info` uses: the qualified ones, or FUSION_VECTOR_WIDTH for
    every size (with a warning where that goes past what qualified). DeviceError where the
    verdict says the driver builds nothing on this CPU (with what to install)."""
    verdict = verdict_for(info)
    forced = os.environ.get("FUSION_VECTOR_WIDTH", "").strip()
    if verdict.qualified and not verdict.usable and verdict.remedy():
        # Not one kernel builds there: a clear error now, not one failed tensor after another.
        raise DeviceError(f"{info.label} cannot run the library's kernels: {verdict.remedy()} "
                          "`python -m fusion_server info` lists every device and its verdict.")
    if verdict.qualified and not verdict.usable and info.label not in _warned:
        _warned.add(info.label)
        failed = "; ".join(str(f) for f in verdict.failures[:3])
        hint = f" {verdict.remedy()}" if verdict.remedy() else ""
        warnings.warn(f"{info.label} failed qualification even as scalar code ({failed}): its results may be "
                      f"wrong.{hint} `python -m fusion_server info` lists every failure.", RuntimeWarning,
                      stacklevel=3)
    if not forced:
        return verdict.vector_widths
    try:
        width = int(forced)
    except ValueError:
        raise FusionError(f"FUSION_VECTOR_WIDTH={forced!r} is not an integer") from None
    if width not in WIDTHS:
        raise FusionError(f"FUSION_VECTOR_WIDTH={width}: expected one of {', '.join(map(str, WIDTHS))}")
    if verdict.qualified:
        past = [f"{s}-byte elements qualified at {w}" for s, w in verdict.widths.items() if width > w]
        if past:
            warnings.warn(f"FUSION_VECTOR_WIDTH={width} goes past the qualified widths of {info.label} "
                          f"({', '.join(past)}): kernels may crash or compute wrong values", RuntimeWarning,
                          stacklevel=3)
    return VectorWidths.uniform(width)
