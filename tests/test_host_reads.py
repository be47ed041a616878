"""Reads in place: on CPU devices whose driver offers fine-grained buffer SVM, a read takes
the values from the host's view of the buffer after a marker, instead of a read command
(runtime.host_span); the storage stays pinned until the read is done, and the first reads
are checked against a read command."""

from __future__ import annotations

import gc
import os
import threading

import numpy as np
import pytest

import clients
from fusion_server.runtime import runtime as rt
from fusion_server.runtime import waits
from tests._reads import READ_DTYPES, assert_read_of_dtype, assert_reads_of_views
from tests.conftest import rand, settle


@pytest.fixture
def runtime(client):
    r = client.server.runtime
    if not r.host_reads:
        pytest.skip(f"{client.server.info.label}: reads take read commands here")
    return r


def _in_place() -> int:
    return clients.stats()["reads_in_place"]


@pytest.mark.parametrize("dtype", READ_DTYPES)
def test_reads_in_place_give_numpy_values_for_every_dtype(runtime, client, dtype):
    assert_read_of_dtype(client, dtype, "reads_in_place")


def test_views_read_in_place_are_laid_out_as_numpy_does(runtime):
    assert_reads_of_views((lambda v: v.T, lambda v: v[3:17:2, 5:], lambda v: v[::-1, 7], lambda v: v[11]),
                          "reads_in_place")


def test_a_read_is_a_copy_that_later_work_does_not_change(runtime):
    a = rand(1000, seed=5)
    x = clients.asarray(a) + 1.0
    first = x.numpy()
    first[:] = -7  # the caller owns the array: the tensor keeps its values
    np.testing.assert_array_equal(x.numpy(), a + np.float32(1.0))
    y = x * 3.0  # (may reuse buffers: the earlier read's values stay)
    second = y.numpy()
    np.testing.assert_array_equal(second, (a + np.float32(1.0)) * np.float32(3.0))


def test_the_storage_stays_pinned_until_the_read_is_done_then_buffers_go_back(runtime, client, baseline):
    a = rand(4096, seed=6)
    server = client.server
    for _ in range(50):
        np.testing.assert_array_equal((clients.asarray(a) * 2.0).numpy(), a * np.float32(2.0))
    settle()
    assert not server.leases
    assert clients.stats()["buffers_live"] == baseline

    # A read whose wait is cut (an interrupt in the wait): its pin ends with its frame.
    x = clients.asarray(a) * 4.0
    pinned = []

    def cut(event, spin_seconds=0.0):
        pinned.extend(lease.storage.pins for lease in server.leases.values())
        raise KeyboardInterrupt

    real_wait = waits.wait
    waits.wait = cut
    try:
        with pytest.raises(KeyboardInterrupt):
            x.numpy()
    finally:
        waits.wait = real_wait
    assert pinned == [1]  # pinned while the read waited
    del x
    settle()
    assert not server.leases
    assert clients.stats()["buffers_live"] == baseline


def test_an_interrupt_before_the_pin_unpins_nothing(runtime, client):
    """A lease whose read was cut before its pin (lease.pinned unset) changes no pin count
    when its callback queues it, and applying it twice (the drain cut between unpin and
    its pop) unpins once."""
    from fusion_server.handles import PinLease

    server = client.server
    x = clients.asarray(rand(64, seed=7)) * 2.0
    x.numpy()
    storage = client.call(lambda s: s.handles.get(x._id).storage)
    pins = storage.pins

    def finish():
        return None

    unpinned = PinLease(finish, server.unpin_inbox.append)
    unpinned.storage, unpinned.pinned = storage, False
    client.call(lambda s: s.leases.__setitem__(id(unpinned), unpinned))
    client.call(lambda s: s.unpin(unpinned))
    assert storage.pins == pins

    def finish2():
        return None

    pinned = PinLease(finish2, server.unpin_inbox.append)
    pinned.storage, pinned.pinned = storage, True
    client.call(lambda s: setattr(storage, "pins", storage.pins + 1))
    client.call(lambda s: (s.unpin(pinned), s.unpin(pinned)))
    assert storage.pins == pins
    del finish, finish2
    gc.collect()
    settle()
    assert storage.pins == pins
    np.testing.assert_array_equal(x.numpy(), rand(64, seed=7) * np.float32(2.0))


def test_a_read_in_place_that_differs_from_the_read_command_turns_reads_in_place_off(runtime, monkeypatch):
    """The first reads are checked on values: a driver whose shared memory did not show the
    device's writes gets the read command's values, a warning, and read commands after."""
    monkeypatch.setattr(runtime, "host_reads", True)  # (what teardown restores)
    a = rand((8, 8), seed=8)
    x = clients.asarray(a) * 2.0
    x.numpy()  # (written, and its buffer known)
    buffer_id = id(clients.client_for().call(lambda s: s.handles.get(x._id).storage.buffer))
    monkeypatch.setattr(runtime, "host_reads_to_check", 1)
    stale = np.zeros_like(runtime.pool.host[buffer_id])  # memory the device never wrote
    monkeypatch.setitem(runtime.pool.host, buffer_id, stale)
    with pytest.warns(RuntimeWarning, match="differed from the read command"):
        got = x.numpy()
    np.testing.assert_array_equal(got, a * np.float32(2.0))
    assert runtime.host_reads is False
    before = _in_place()
    np.testing.assert_array_equal((x + 1.0).numpy(), a * np.float32(2.0) + np.float32(1.0))
    assert _in_place() == before  # a read command from now on


def test_threads_read_in_place_while_others_write_new_values(runtime, baseline):
    a = rand(2048, seed=9)
    barrier = threading.Barrier(4)
    failures: list[str] = []

    def worker(k: int) -> None:
        x = clients.asarray(a)
        barrier.wait()
        for i in range(60):
            y = x * float(k + i)
            got = y.numpy()
            if not np.array_equal(got, a * np.float32(k + i)):
                failures.append(f"thread {k}, step {i}")
                return

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not failures
    settle()
    assert clients.stats()["buffers_live"] == baseline


def test_who_reads_in_place(monkeypatch, client):
    info = client.server.info
    monkeypatch.setenv("FUSION_HOST_READS", "0")
    assert not rt.host_reads_possible(info)
    shared = info.kind == "CPU" and not info.is_simulator and bool(
        int(info.device.svm_capabilities) & int(rt.cl.device_svm_capabilities.FINE_GRAIN_BUFFER))
    monkeypatch.setenv("FUSION_HOST_READS", "1")
    assert rt.host_reads_possible(info) == shared
    monkeypatch.delenv("FUSION_HOST_READS")
    assert rt.host_reads_possible(info) == (shared and not info.is_pocl)
    if "FUSION_HOST_READS" not in os.environ:
        assert client.server.runtime.host_reads == (shared and not info.is_pocl)


@pytest.mark.timeout(300)
def test_reads_in_place_on_a_driver_that_does_not_take_them_by_default():
    """PoCL (reads in place do not pay there) with FUSION_HOST_READS=1, in a child
    process: the same values, read in place."""
    import subprocess
    import sys

    code = ("import numpy as np, pyopencl as cl, clients\n"
            "c = clients.client_for()\n"
            "caps = int(c.server.info.device.svm_capabilities)\n"
            "if not caps & int(cl.device_svm_capabilities.FINE_GRAIN_BUFFER): raise SystemExit('no SVM here')\n"
            "assert c.server.runtime.host_reads, c.server.info.label\n"
            "a = np.arange(3000, dtype=np.float32)\n"
            "x = clients.asarray(a) * 2.0\n"
            "assert np.array_equal(x.numpy(), a * 2), 'values'\n"
            "assert np.array_equal(x[::3].numpy(), a[::3] * 2), 'strided'\n"
            "assert clients.stats()['reads_in_place'] == 2\n"
            "print('in place ok')\n")
    env = dict(os.environ, FUSION_HOST_READS="1", FUSION_DEVICE="Portable")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=240)
    if "DeviceError" in done.stderr or "no SVM here" in done.stderr:
        pytest.skip(f"no PoCL device with fine-grained SVM here: {done.stderr[-300:]}")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "in place ok" in done.stdout


def test_long_reads_take_a_read_command(runtime):
    n = rt.HOST_READ_MAX_BYTES // 4 + 1024
    a = rand(n, seed=10)
    x = clients.asarray(a) * 2.0
    before = _in_place()
    np.testing.assert_array_equal(x.numpy(), a * np.float32(2.0))
    assert _in_place() == before
    head = x[: rt.HOST_READ_MAX_BYTES // 8]  # (a view of the same buffer, short enough)
    np.testing.assert_array_equal(head.numpy(), a[: rt.HOST_READ_MAX_BYTES // 8] * np.float32(2.0))
    assert _in_place() == before + 1
