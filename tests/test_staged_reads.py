"""Staged reads: on accelerators a short read copies into a slot of pinned host memory
(runtime.staging) and its `finish` copies the values out; the slot is the read's while
`finish` lives. Here the current device is given slots whatever its kind (the path is
the same on every driver), with reads in place turned off."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import clients
from fusion_server.runtime import staging as st
from tests._reads import READ_DTYPES, assert_read_of_dtype, assert_reads_of_views
from tests.conftest import rand, settle


@pytest.fixture
def slots(client, monkeypatch):
    runtime = client.server.runtime
    staging = st.StagingSlots(runtime.context, runtime.queue)
    monkeypatch.setattr(runtime, "staging", staging)
    monkeypatch.setattr(runtime, "host_reads", False)
    return staging


def _staged() -> int:
    return clients.stats()["reads_staged"]


@pytest.mark.parametrize("dtype", READ_DTYPES)
def test_staged_reads_give_numpy_values_for_every_dtype(slots, client, dtype):
    assert_read_of_dtype(client, dtype, "reads_staged")


def test_staged_views_are_laid_out_as_numpy_does(slots):
    assert_reads_of_views((lambda v: v, lambda v: v.T, lambda v: v[3:17:2, 5:], lambda v: v[::-1, 7]),
                          "reads_staged")


def test_a_staged_read_is_a_copy_that_the_next_read_into_its_slot_does_not_change(slots):
    a, b = rand(1000, seed=5), rand(1000, seed=6)
    first = (clients.asarray(a) + 1.0).numpy()
    second = (clients.asarray(b) + 1.0).numpy()  # (the same size: the same slot)
    np.testing.assert_array_equal(first, a + np.float32(1.0))
    np.testing.assert_array_equal(second, b + np.float32(1.0))
    assert [len(s) for s in slots.sizes.values()] == [1]  # the slot came back and was taken again
    assert slots.nbytes() == st.SMALLEST_SLOT


def test_a_slot_is_free_once_the_reads_finish_is_collected_called_or_not(slots, client):
    x = clients.asarray(rand(500, seed=7)) * 3.0
    event, finish = client.call(lambda server: server.read(x._id), flushing=x._id)
    (slot,) = slots.sizes[st.SMALLEST_SLOT]
    assert not slot.is_free()
    assert slots.host_for(2000, np.dtype(np.float32))[1] is not slot  # (taken: another slot)
    event.wait()
    del event, finish  # as an interrupt in the wait leaves it: `finish` never called
    gc.collect()
    assert slot.is_free()
    np.testing.assert_array_equal(x.numpy(), rand(500, seed=7) * np.float32(3.0))


def test_reads_past_the_slots_or_past_the_longest_take_pageable_memory(slots, client):
    x = clients.asarray(rand(256, seed=8)) - 1.0
    held = [client.call(lambda server: server.read(x._id), flushing=x._id) for _ in range(st.SLOTS_PER_SIZE)]
    before = _staged()
    np.testing.assert_array_equal(x.numpy(), rand(256, seed=8) - np.float32(1.0))  # every slot held
    assert _staged() == before
    for event, finish in held:
        event.wait()
        np.testing.assert_array_equal(finish(), rand(256, seed=8) - np.float32(1.0))
    del held
    n = st.STAGED_READ_MAX_BYTES // 4 + 1
    long = clients.asarray(np.ones(n, np.float32)) * 2.0
    np.testing.assert_array_equal(long.numpy(), np.full(n, 2.0, np.float32))
    assert _staged() == before
    assert len(slots.sizes[st.SMALLEST_SLOT]) == st.SLOTS_PER_SIZE
    np.testing.assert_array_equal(x.numpy(), rand(256, seed=8) - np.float32(1.0))
    assert _staged() == before + 1


@pytest.mark.timeout(120)
def test_threads_reading_at_once_each_get_their_values(slots, baseline):
    threads_n, rounds = 8, 20
    barrier = threading.Barrier(threads_n)
    failures = []

    def work(k: int) -> None:
        try:
            a = rand(700 + 50 * k, seed=k)
            x = clients.asarray(a)
            barrier.wait()
            for r in range(rounds):
                got = (x * float(r)).numpy()
                np.testing.assert_allclose(got, a * np.float32(r), rtol=1e-6)
        except BaseException as exc:  # noqa: BLE001 (reported below)
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(100)
    assert not failures, failures[:1]
    assert all(len(s) <= st.SLOTS_PER_SIZE for s in slots.sizes.values())
    settle()
    assert clients.stats()["buffers_live"] == baseline


def test_who_stages_reads(monkeypatch, client):
    info = client.server.info
    monkeypatch.setenv("FUSION_STAGED_READS", "0")
    assert not st.staged_reads_wanted(info)
    monkeypatch.setenv("FUSION_STAGED_READS", "1")
    assert st.staged_reads_wanted(info) == (not info.is_simulator)
    monkeypatch.delenv("FUSION_STAGED_READS")
    assert st.staged_reads_wanted(info) == (info.kind != "CPU" and not info.is_simulator)


def test_a_read_takes_pageable_memory_where_no_pinned_memory_can_be_had(slots, monkeypatch):
    def refuse(size):
        raise st.cl.Error("clCreateBuffer failed: MEM_OBJECT_ALLOCATION_FAILURE")

    monkeypatch.setattr(slots, "_make", refuse)
    before = _staged()
    x = clients.asarray(rand(300, seed=9)) * 2.0
    np.testing.assert_array_equal(x.numpy(), rand(300, seed=9) * np.float32(2.0))
    assert _staged() == before and slots.nbytes() == 0
