"""Element-wise-heavy workloads written once over an array namespace (`clients` or numpy).

The demo and the benchmarks run them through `clients` and check them against numpy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


def activations(xp: Any, x: Any, bias: Any) -> Any:
    """A block of neural-network activations: GELU (tanh form), SiLU, softplus, mixed."""
    h = x + bias
    gelu = 0.5 * h * (1.0 + xp.tanh(0.7978845608 * (h + 0.044715 * h * h * h)))
    silu = h / (1.0 + xp.exp(-h))
    softplus = xp.log1p(xp.exp(-xp.abs(h))) + xp.maximum(h, 0.0)
    return gelu * 0.5 + silu * 0.25 + softplus * 0.25


def particles(xp: Any, pos: Any, vel: Any, steps: int = 8, dt: float = 0.01) -> tuple[Any, Any]:
    """Leapfrog steps of particles in a soft anharmonic well with drag, walls at |x| = 4."""
    for _ in range(steps):
        force = -pos * (1.0 + 0.1 * pos * pos) - 0.05 * vel
        vel = vel + dt * force
        pos = pos + dt * vel
        hit = xp.abs(pos) > 4.0
        vel = xp.where(hit, -vel, vel)
        pos = xp.clip(pos, -4.0, 4.0)
    return pos, vel


def _norm_cdf(xp: Any, z: Any) -> Any:
    """Standard normal CDF (Abramowitz-Stegun 26.2.17, error < 7.5e-8)."""
    t = 1.0 / (1.0 + 0.2316419 * xp.abs(z))
    poly = t * (0.319381530 + t * (-0.356563782 + t * (1.781477937 + t * (-1.821255978 + t * 1.330274429))))
    tail = 0.3989422804 * xp.exp(-0.5 * z * z) * poly
    return xp.where(z >= 0.0, 1.0 - tail, tail)


def black_scholes(xp: Any, spot: Any, strike: Any, years: Any, rate: float = 0.02, vol: float = 0.3) -> Any:
    """European call prices."""
    sq = vol * xp.sqrt(years)
    d1 = (xp.log(spot / strike) + (rate + 0.5 * vol * vol) * years) / sq
    d2 = d1 - sq
    return spot * _norm_cdf(xp, d1) - strike * xp.exp(-rate * years) * _norm_cdf(xp, d2)


def tonemap(xp: Any, img: Any, exposure: float = 1.5, gamma: float = 2.2) -> Any:
    """Exposure, Reinhard tone mapping and gamma correction of an HDR image."""
    v = img * exposure
    v = v / (1.0 + v)
    return xp.clip(v, 0.0, 1.0) ** (1.0 / gamma)


@dataclass
class Workload:
    name: str
    make_inputs: Callable[[np.random.Generator, int], tuple[np.ndarray, ...]]
    run: Callable[..., Any]  # run(xp, *inputs) -> array or tuple of arrays


def _f32(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float32)


WORKLOADS = [
    Workload(
        "activations",
        lambda rng, n: (_f32(rng.standard_normal((n // 1024, 1024))), _f32(rng.standard_normal(1024))),
        activations,
    ),
    Workload(
        "particles",
        lambda rng, n: (_f32(rng.uniform(-3, 3, n)), _f32(rng.standard_normal(n))),
        particles,
    ),
    Workload(
        "black_scholes",
        lambda rng, n: (
            _f32(rng.uniform(50, 150, n)), _f32(rng.uniform(60, 140, n)), _f32(rng.uniform(0.1, 3, n))
        ),
        black_scholes,
    ),
    Workload("tonemap", lambda rng, n: (_f32(rng.exponential(1.0, n)),), tonemap),
]
