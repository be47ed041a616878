"""Kernels are built outside the server lock: a slow build stalls only its own thread."""

from __future__ import annotations

import threading
import uuid

import numpy as np

import clients
from tests.conftest import failing_builds, rand

TIMEOUT = 60


def test_a_slow_compile_does_not_block_other_threads(client):
    programs = client.server.runtime.programs
    original = programs.build
    marker = f"{uuid.uuid4().int % 1000}.5f"
    slow_op = clients.custom.elementwise("made_slow", f"x * {marker}")  # a kernel nobody has built
    started, release = threading.Event(), threading.Event()

    def slow_build(key, source, name, options=(), arg_dtypes=None):
        if marker in source:
            started.set()
            assert release.wait(TIMEOUT), "the slow build was never released"
        return original(key, source, name, options, arg_dtypes)

    a = rand(256)
    x = clients.asarray(a)
    (x * 2.0 + 1.0).numpy()  # this thread's kernel is built already
    programs.build = slow_build
    box: dict = {}
    try:
        def slow_reader():
            box["value"] = (slow_op(x) - 1.0).numpy()

        th = threading.Thread(target=slow_reader, daemon=True)
        th.start()
        assert started.wait(TIMEOUT)
        # Thread A is inside its build now. This thread registers, launches and reads.
        launched = clients.stats()["kernels_launched"]
        for i in range(5):
            np.testing.assert_allclose((x * float(i) + 1.0).numpy(), a * np.float32(i) + 1, rtol=1e-6)
        assert clients.stats()["kernels_launched"] - launched == 5
        assert th.is_alive()  # still building: the work above did not wait for it
        release.set()
        th.join(TIMEOUT)
        assert not th.is_alive()
    finally:
        release.set()
        programs.build = original
    np.testing.assert_allclose(box["value"], a * np.float32(float(marker[:-1])) - 1, rtol=1e-6)


def test_two_threads_needing_the_same_kernel_build_it_once(client):
    marker = f"{uuid.uuid4().int % 1000}.25f"
    op = clients.custom.elementwise("shared_build", f"x + {marker}")
    before = clients.stats()["compiles"]
    barrier = threading.Barrier(4, timeout=TIMEOUT)
    results = []
    a = rand(64)

    def worker():
        x = clients.asarray(a)
        barrier.wait()
        results.append((op(x) * 3.0).numpy())  # (op(x) alone: the op's check at definition may have built it)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(TIMEOUT)
    assert len(results) == 4
    for r in results:
        np.testing.assert_allclose(r, (a + np.float32(float(marker[:-1]))) * 3, rtol=1e-6)
    assert clients.stats()["compiles"] - before == 1


def test_a_build_failure_fails_the_block_and_nothing_else(client):
    programs = client.server.runtime.programs
    marker = f"{uuid.uuid4().int % 1000}.75f"
    op = clients.custom.elementwise("fails_to_build", f"x - {marker}")
    with failing_builds(programs, marker, lambda name: RuntimeError("injected compiler crash")):
        y = op(clients.asarray(rand(8))) * 2.0
        try:
            y.numpy()
            raise AssertionError("expected a failure")
        except clients.TensorFailedError as exc:
            assert "injected compiler crash" in str(exc)
    np.testing.assert_allclose((clients.asarray(rand(8)) + 1.0).numpy(), rand(8) + 1, rtol=1e-6)
