"""Shared fixtures: the default device's client and helpers to read its counters."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
from contextlib import contextmanager

import numpy as np
import pytest

import clients
from clients.client import CHANNELS


def exploding_kernel(name: str):
    """A custom kernel of one output like its input whose launch raises "producer exploded":
    what fails the tensors an op under test reads."""

    def launch(queue, inputs, outputs):
        raise RuntimeError("producer exploded")

    return clients.custom.kernel(name, launch, outputs=lambda t: [(t.shape, t.dtype)])


@pytest.fixture
def client():
    return clients.client_for()


@pytest.fixture(params=CHANNELS)
def channel(request, client):
    """Each channel in turn (see FusionClient.record), the default one restored after."""
    before = client.channel
    client.channel = request.param
    yield request.param
    client.channel = before


@pytest.fixture
def server(client):
    return client.server


def settle() -> None:
    """Collect garbage and drain the drop inbox, so buffers_live is exact."""
    gc.collect()
    clients.sync()


@pytest.fixture
def baseline():
    """buffers_live before the test; the test may compare against it at its end."""
    settle()
    return clients.stats()["buffers_live"]


@contextmanager
def server_settings(**settings):
    """Temporarily change server attributes (max_bindings, max_ops, mode); streams renew."""
    c = clients.client_for()

    old = c.call(lambda server: server.reconfigure(**settings))
    try:
        yield c.server
    finally:
        c.call(lambda server: server.reconfigure(**old))


@contextmanager
def failing_builds(programs, marker: str, error, times: int | None = None, when=None):
    """While the block runs, `programs.build` raises `error(name)` for sources that contain
    `marker` (and whose key passes `when(key)`, if given), the first `times` times (None:
    every time); other builds go through."""
    original = programs.build
    left = [times]

    def build(key, source, name, options=(), arg_dtypes=None):
        if marker in source and (when is None or when(key)) and left[0] != 0:
            if left[0] is not None:
                left[0] -= 1
            raise error(name)
        return original(key, source, name, options, arg_dtypes)

    programs.build = build
    try:
        yield
    finally:
        programs.build = original


def assert_variants(rec, kind: str, prefix: str, at_least: int = 1) -> None:
    """Every `kind` kernel recorded ran as the forced variant (`prefix` of its variant,
    e.g. "loop" or "rows, 32-byte"), and there were some."""
    mine = [k for k in rec.kernels if k.kind == kind]
    assert len(mine) >= at_least, [k.kind for k in rec.kernels]
    assert all(k.variant.startswith(prefix) for k in mine), [k.variant for k in mine]


def counters(keys: tuple[str, ...]) -> dict:
    """The server's counters named `keys`, now (see `counted_since`)."""
    s = clients.stats()
    return {k: s[k] for k in keys}


def counted_since(before: dict) -> dict:
    """How much each counter of `before` (from `counters`) grew since."""
    return {k: v - before[k] for k, v in counters(tuple(before)).items()}


def rand(shape, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape).astype(dtype)


def run_python(code: str, timeout: float = 240, **env: str) -> subprocess.CompletedProcess:
    """`code` in a new interpreter with extra environment variables (settings read at start)."""
    return subprocess.run([sys.executable, "-c", code], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=timeout)


def _tensors(args) -> list:
    """The tensors in `args` (nested tuples and lists too)."""
    found = []
    for a in args:
        if isinstance(a, clients.Tensor):
            found.append(a)
        elif isinstance(a, (tuple, list)):
            found.extend(_tensors(a))
    return found


def jitted_replay(fn, *args, **kwargs):
    """`fn(*args, **kwargs)` through clients.jit, as a replay that cannot have kept any
    value of its trace: the trace runs with every input buffer overwritten (a byte
    pattern), the buffers get their contents back, and the replay's result is returned.
    Asserts that the second call replayed. An `inspect()` around the call records the
    replay's launches only."""
    jitted = clients.jit(fn)
    server = clients.client_for().server
    queue = server.runtime.queue
    recorded = [(rec, len(rec.kernels)) for rec in server.recorders]
    import pyopencl as cl

    from clients._indexing import _rebind

    tensors = _tensors(list(args) + list(kwargs.values()))
    originals = [(t, t._id, t[...]) for t in tensors]  # (views of the values, should the call rebind t)
    buffers = list({id(b): b for b in (clients.resolve(t).base_data for t in tensors)}.values())
    saved = []
    for buf in buffers:
        host = np.empty(buf.size, np.uint8)
        cl.enqueue_copy(queue, host, buf)
        saved.append(host)
        cl.enqueue_fill_buffer(queue, buf, np.uint8(0x3F), 0, buf.size)
    traced = jitted(*args, **kwargs)
    clients.sync()
    del traced
    for rec, count in recorded:
        del rec.kernels[count:]
    for t, tid, view in originals:
        if t._id != tid:  # (x[key] = v on an argument): the handle gets its value back
            _rebind(t, view)
    for buf, host in zip(buffers, saved):
        cl.enqueue_copy(queue, buf, host)
    queue.finish()
    before = clients.stats()["jit_replays"]
    out = jitted(*args, **kwargs)
    assert clients.stats()["jit_replays"] == before + 1, "the second call was not a replay"
    return out


@pytest.fixture(params=[False, True], ids=["mask read", "positions on the device"])
def selecting(request, monkeypatch):
    """Masks, nonzero and unique_* read to the host (CPU devices' way) or computed on
    the device (GPUs' way: clients._indexing.selected_positions), whatever the device."""
    monkeypatch.setattr(clients._indexing, "MASKS_ON_DEVICE", request.param)
    return request.param


@pytest.fixture(params=["lazy", "jit"])
def via(request):
    """Run a computation as written (lazy) or as a clients.jit replay (see jitted_replay):
    `via(fn)(*args)`."""
    if request.param == "lazy":
        return lambda fn: fn
    return lambda fn: lambda *args, **kwargs: jitted_replay(fn, *args, **kwargs)


def run_threads(work, n: int, timeout: float) -> list[str]:
    """`work(i)` on n threads at once (they start together, at a barrier); returns what
    went wrong: the messages `work` returns, and whatever it raised. Asserts none hangs."""
    barrier = threading.Barrier(n, timeout=timeout)
    errors: list[str] = []

    def target(i: int) -> None:
        try:
            barrier.wait()
            errors.extend(work(i) or ())
        except BaseException as exc:  # reported by the caller
            errors.append(f"thread {i}: {exc!r}")

    threads = [threading.Thread(target=target, args=(i,)) for i in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout)
    assert not any(th.is_alive() for th in threads), "a thread hangs"
    return errors
