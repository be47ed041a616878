"""Many threads build random element-wise graphs over shared tensors, read and drop them.

Every read is checked against numpy. The run lasts STRESS_SECONDS (default 10); the seed
is printed and can be replayed with STRESS_SEED.
"""

from __future__ import annotations

import gc
import os
import random
import threading
import time

import numpy as np
import pyopencl as cl

import clients

THREADS = int(os.environ.get("STRESS_THREADS", "16"))
SHAPES = [(64,), (8, 64), (1, 64), (8, 1), (3, 5, 64)]

UNARY = [
    ("tanh", clients.tanh, np.tanh),
    ("sin", clients.sin, np.sin),
    ("abs", clients.abs, np.abs),
    ("half", lambda x: x * 0.5, lambda x: x * np.float32(0.5)),
    ("neg", lambda x: -x, lambda x: -x),
    ("sq", lambda x: clients.sqrt(x * x + 1.0), lambda x: np.sqrt(x * x + np.float32(1.0))),
]
softplus = clients.custom.elementwise("stress_softplus", "x > 20 ? x : log1p(exp(x))")
_REVERSE = """__kernel void reverse_flat(__global const float* x, __global float* y, const int n)
{ int i = get_global_id(0); if (i < n) y[i] = x[n - 1 - i]; }"""
_programs: dict = {}


def _launch_reverse(queue, inputs, outputs):
    kernel = _programs.get(queue.context)
    if kernel is None:
        kernel = _programs[queue.context] = cl.Kernel(cl.Program(queue.context, _REVERSE).build(), "reverse_flat")
    n = inputs[0].size
    if n:
        kernel(queue, (n,), None, inputs[0].data, outputs[0].data, np.int32(n))


reverse_flat = clients.custom.kernel("stress_reverse", _launch_reverse, outputs=lambda x: [(x.shape, x.dtype)])
UNARY += [
    ("softplus", softplus, lambda x: np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))),
    ("reverse", reverse_flat, lambda x: x.ravel()[::-1].reshape(x.shape)),
    # Reductions keep the rank (keepdims) so results broadcast back into the pool's shapes.
    ("row_sum", lambda x: clients.sum(clients.tanh(x), axis=-1, keepdims=True),
     lambda x: np.tanh(x).sum(axis=-1, keepdims=True, dtype=np.float64).astype(np.float32)),
    ("col_max", lambda x: clients.max(x * 0.5, axis=0, keepdims=True) if x.ndim else x,
     lambda x: (x * np.float32(0.5)).max(axis=0, keepdims=True) if x.ndim else x),
    # Views of values computed in the same block: flat reshapes (one kernel) and a
    # transpose of a transpose (the same layout again).
    ("reshaped", lambda x: clients.reshape(clients.reshape(x * 2.0, (-1,)) + 1.0, x.shape) - x,
     lambda x: ((x * np.float32(2.0)).ravel() + np.float32(1.0)).reshape(x.shape) - x),
    ("transposed", lambda x: (x * 0.5).T.T + x if x.ndim == 2 else x,
     lambda x: (x * np.float32(0.5)).T.T + x if x.ndim == 2 else x),
    ("gram", lambda x: clients.tanh(x @ x.T * 0.01) if x.ndim == 2 else x,
     lambda x: np.tanh((x.astype(np.float64) @ x.T.astype(np.float64)).astype(np.float32) * np.float32(0.01))
     if x.ndim == 2 else x),
]

# Jitted functions, shared by every thread: replays (new scalar values too) run beside the
# lazily recorded ops, and a shape a function has not seen traces it again meanwhile.
_jit_mix = clients.jit(lambda x, k: clients.maximum(clients.tanh(x * k) + x, -1.0))
_jit_rows = clients.jit(lambda x: clients.sum(x * x, axis=-1, keepdims=True) * 0.5 + x)
_jit_reverse = clients.jit(lambda x: reverse_flat(x * 2.0) - x)
UNARY += [
    ("jit_mix", lambda x: _jit_mix(x, 0.5), lambda x: np.maximum(np.tanh(x * np.float32(0.5)) + x, np.float32(-1))),
    ("jit_mix2", lambda x: _jit_mix(x, 0.25), lambda x: np.maximum(np.tanh(x * np.float32(0.25)) + x, np.float32(-1))),
    ("jit_rows", _jit_rows,
     lambda x: ((x.astype(np.float64) ** 2).sum(-1, keepdims=True) * 0.5).astype(np.float32) + x),
    ("jit_reverse", _jit_reverse, lambda x: (x * np.float32(2)).ravel()[::-1].reshape(x.shape) - x),
]



def _recurring(x):
    """A run of its own, read at once: what runs before it is flushed first, so the run
    recurs (per shape) and the run cache captures and replays it beside the rest."""
    clients.flush()
    y = clients.exp(x * -0.5) * 2.0 + x
    y.numpy()
    return y


UNARY += [("recurring", _recurring, lambda x: np.exp(x * np.float32(-0.5)) * np.float32(2) + x)]

# Ops whose last bit may differ from numpy's: transcendental functions (a few ulps apart
# between math libraries) and sums (another order). Later ops can amplify an ulp into a
# visible error (a product of large values, then a cancelling sum), so their results are
# checked when made and the device's value becomes the reference from then on.
INEXACT = {"tanh", "sin", "softplus", "row_sum", "gram", "jit_mix", "jit_mix2", "jit_rows", "recurring"}

BINARY = [
    ("add", lambda a, b: a + b, lambda a, b: a + b),
    ("mul", lambda a, b: a * b, lambda a, b: a * b),
    ("max", clients.maximum, np.maximum),
    ("where", lambda a, b: clients.where(a > b, a, b * 0.25), lambda a, b: np.where(a > b, a, b * np.float32(0.25))),
]


class SharedPool:
    """Tensors and their expected values, shared by every thread."""

    def __init__(self) -> None:
        self.items: list[tuple[clients.Tensor, np.ndarray]] = []
        self.lock = threading.Lock()

    def put(self, t, v, label: str = "upload") -> None:
        if not np.all(np.abs(v) < 1e4):
            return  # keep values where float32 and numpy's functions agree closely
        with self.lock:
            self.items.append((t, v, label))
            if len(self.items) > 64:
                self.items.pop(0)  # dropped here, perhaps while another thread uses it

    def pick(self, rng: random.Random):
        with self.lock:
            return rng.choice(self.items)[:2] if self.items else None

    def pick_labelled(self, rng: random.Random):
        with self.lock:
            return rng.choice(self.items)


def worker(seed: int, pool: SharedPool, deadline: float, tally: dict, errors: list) -> None:
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    local = {"ops": 0, "reads": 0}
    try:
        # First, a few calls of a recurring run and of a jitted function on a tensor of the
        # thread's own: replays of both happen however few ops a slow (cold-cache) run gets
        # through (a run whose capture waits for a kernel build is captured a time later).
        own = nrng.standard_normal(rng.choice(SHAPES)).astype(np.float32)
        t = clients.asarray(own)
        for name, f, g in (u for u in UNARY if u[0] in ("recurring", "jit_mix")):
            for _ in range(5):
                local["reads"] += 1
                if not _matches(f(t).numpy(), g(own), rtol=1e-4, atol=1e-4):
                    errors.append(f"mismatch in {name} {t.shape} (seed {seed})")
        del t
        while time.monotonic() < deadline:
            roll = rng.random()
            if roll < 0.15 or not pool.items:
                v = nrng.standard_normal(rng.choice(SHAPES)).astype(np.float32)
                pool.put(clients.asarray(v), v)
            elif roll < 0.5:
                t, v = pool.pick(rng)
                name, f, g = rng.choice(UNARY)
                made, expected = f(t), g(v)
                if name in INEXACT:
                    got = made.numpy()
                    local["reads"] += 1
                    if not _matches(got, expected, rtol=1e-4, atol=1e-4):
                        errors.append(f"mismatch in {name} {made.shape} (seed {seed})")
                    expected = got
                pool.put(made, expected, name)
                local["ops"] += 1
            elif roll < 0.8:
                (a, va), (b, vb) = pool.pick(rng), pool.pick(rng)
                name, f, g = rng.choice(BINARY)
                try:
                    expected = g(va, vb)
                except ValueError:
                    continue  # shapes that do not broadcast: numpy refuses too
                pool.put(f(a, b), expected, name)
                local["ops"] += 1
            elif roll < 0.86:
                t, v = pool.pick(rng)
                if t.ndim >= 1 and t.shape[-1] > 2:
                    pool.put(t[..., ::2] * 1.0, v[..., ::2], "slice")
            elif roll < 0.9:
                t, v, label = pool.pick_labelled(rng)
                got = clients.resolve(t).get()  # contiguous: every pooled tensor is an op's output
                local["reads"] += 1
                if not _matches(got, v, rtol=1e-4, atol=1e-5):
                    errors.append(f"resolve mismatch in {label} {t.shape} (seed {seed})")
            else:
                t, v, label = pool.pick_labelled(rng)
                got = t.numpy()
                local["reads"] += 1
                if not _matches(got, v, rtol=1e-4, atol=1e-5):
                    bad = np.flatnonzero(~np.isclose(got, v, rtol=1e-4, atol=1e-5)) if got.shape == v.shape else []
                    errors.append(f"mismatch in {label} {t.shape} (seed {seed}): at {bad[:4]} got "
                                  f"{got.ravel()[bad[:4]]}, want {v.ravel()[bad[:4]]}")
    except BaseException as exc:  # reported by the test
        errors.append(f"seed {seed}: {exc!r}")
    with pool.lock:
        for k in local:
            tally[k] = tally.get(k, 0) + local[k]


def _matches(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> bool:
    """Same shape and close values (allclose alone would broadcast one over the other)."""
    return got.shape == np.shape(want) and bool(np.allclose(got, want, rtol=rtol, atol=atol))


def test_random_graphs_from_many_threads():
    seconds = float(os.environ.get("STRESS_SECONDS", "10"))
    seed = int(os.environ.get("STRESS_SEED", str(random.randrange(1 << 30))))
    print(f"\nstress: {THREADS} threads, {seconds} s, STRESS_SEED={seed}")
    gc.collect()
    clients.sync()
    baseline = clients.stats()["buffers_live"]
    jit_before = clients.stats()["jit_replays"]
    runs_before = clients.stats()["run_replays"]
    pool = SharedPool()
    tally: dict = {}
    errors: list = []
    deadline = time.monotonic() + seconds
    barrier = threading.Barrier(THREADS, timeout=60)

    def run(i):
        barrier.wait()
        worker(seed + i, pool, deadline, tally, errors)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(seconds + 120)
    hung = sum(th.is_alive() for th in threads)
    # Every value still held must read back right.
    errors.extend(
        f"final mismatch in {label}"
        for t, v, label in pool.items
        if not _matches(t.numpy(), v, rtol=1e-4, atol=1e-5)
    )
    pool.items.clear()
    gc.collect()
    clients.sync()
    leaked = clients.stats()["buffers_live"] - baseline
    replays = clients.stats()["jit_replays"] - jit_before
    run_replays = clients.stats()["run_replays"] - runs_before
    print(f"stress: ops {tally.get('ops', 0)}, reads {tally.get('reads', 0)}, jit replays {replays}, "
          f"run cache replays {run_replays}, "
          f"mismatches/errors {len(errors)}, hung threads {hung}, leaked buffers {leaked}")
    assert hung == 0
    assert not errors, errors[:5]
    assert leaked == 0
    assert tally.get("reads", 0) > 0
    assert replays > 0
    assert run_replays > 0
