"""Shared fixtures: the default device's client and helpers to read its counters."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from contextlib import contextmanager

import numpy as np
import pytest

import clients


@pytest.fixture
def client():
    return clients.client_for()


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


def rand(shape, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape).astype(dtype)


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    """`code` in a new interpreter with extra environment variables (settings read at start)."""
    return subprocess.run([sys.executable, "-c", code], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=240)
