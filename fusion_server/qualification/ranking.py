"""Which device is the default, on purpose: the preferred kind, then the best verdict.

GPUs come before CPUs (runtime.device.by_kind). When several drivers offer that kind
(two PoCLs, say: the one pip brings and a distribution's; or PoCL and Intel's CPU
runtime), each is qualified, and the default is a usable one: one that passed every
canary before one that crashed or computed wrong values at some width (a compiler
known to be wrong on this CPU may be wrong where no canary looks: the PoCL that pip
brings, on AMD Zen 4, crashes on 16 lanes of 4-byte ints and computes 8-byte ones wrong,
and hung compiling the lane sort where no canary had built it), then PoCL's before other
CPU drivers (the project is tuned and tested on it; Intel's runtime is there for CPUs that
PoCL's LLVM cannot build for or builds for wrongly), then the widest widths, then the
newest driver, then the first listed. A new driver that appears changes the default
visibly, and for a reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..runtime.device import DeviceInfo, by_kind
from .verdict import Verdict


@dataclass(frozen=True)
class Ranked:
    info: DeviceInfo
    verdict: Verdict | None  # None: not qualified for the ranking (another kind is preferred)
    why: str


def rank(devices: list[DeviceInfo], verdict_of: Callable[[DeviceInfo], Verdict] | None = None) -> list[Ranked]:
    """Every device in order of preference, each with why it stands there."""
    if verdict_of is None:
        from . import verdict_for as verdict_of
    out: list[Ranked] = []
    for group_index, group in enumerate(by_kind([d for d in devices if not d.is_simulator])):
        if group_index or len(group) == 1:
            why = "the preferred kind" if group_index == 0 else f"a {group[0].kind} (another kind comes first)"
            out += [Ranked(d, None, why) for d in group]
            continue
        verdicts = [(d, verdict_of(d)) for d in group]
        order = sorted(range(len(verdicts)), key=lambda k: (
            verdicts[k][1].usable, not verdicts[k][1].failures, verdicts[k][0].is_pocl, verdicts[k][1].score(),
            verdicts[k][0].driver_numbers, -k),
            reverse=True)
        for place, k in enumerate(order):
            d, v = verdicts[k]
            n = len(v.failures)
            faults = f" after {n} canary failure{'s' if n > 1 else ''}" if v.usable and n else ""
            why = (f"{'usable' if v.usable else 'NOT usable'}{faults}, widths {v.vector_widths}, driver "
                   f"{d.driver_version or '?'}")
            if place == 0:
                why = f"best of {len(group)} {d.kind} drivers: {why}"
            out.append(Ranked(d, v, why))
    out += [Ranked(d, None, "a simulator: only when named") for d in devices if d.is_simulator]
    return out


def choose(devices: list[DeviceInfo]) -> DeviceInfo:
    """The default device among `devices` (simulators already left out)."""
    return rank(devices)[0].info
