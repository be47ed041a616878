"""The cyclic collector's first two thresholds, raised while several threads record
(clients/_collector.py) and put back after."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import clients
import clients._collector as collector
from fusion_server.errors import FusionError
from tests.conftest import rand

TIMEOUT = 60


@pytest.fixture
def thresholds():
    """The collector's thresholds, put back after the test."""
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*before)


def test_raised_while_a_client_has_several_threads_and_put_back_after(thresholds):
    tuning = collector.CollectorTuning(5000)
    tuning.threads_recording(1, True)
    assert gc.get_threshold() == (5000, collector.RECORDING_SECOND, 10)
    tuning.threads_recording(2, True)  # a second device's client
    tuning.threads_recording(1, False)
    assert gc.get_threshold() == (5000, collector.RECORDING_SECOND, 10)  # (the other client still has several)
    tuning.threads_recording(2, False)
    assert gc.get_threshold() == (700, 10, 10)


def test_retuning_puts_back_first_then_raises_to_the_new_value(thresholds):
    tuning = collector.CollectorTuning(5000)
    tuning.threads_recording(1, True)
    tuning.retune(0)  # (off: put back, and left alone)
    assert gc.get_threshold() == (700, 10, 10)
    tuning.retune(3000)
    assert gc.get_threshold()[0] == 3000
    tuning.threads_recording(1, False)
    assert gc.get_threshold() == (700, 10, 10)
    tuning.retune(4000)  # (no client has several threads: nothing raised)
    assert gc.get_threshold() == (700, 10, 10)


def test_a_threshold_the_program_set_is_kept(thresholds):
    tuning = collector.CollectorTuning(5000)
    gc.set_threshold(9000, 10, 10)  # higher already: not lowered
    tuning.threads_recording(1, True)
    assert gc.get_threshold()[0] == 9000
    tuning.threads_recording(1, False)
    gc.set_threshold(700, 10, 10)
    tuning.threads_recording(1, True)
    gc.set_threshold(1200, 5, 5)  # the program's own change while raised
    tuning.threads_recording(1, False)
    assert gc.get_threshold() == (1200, 5, 5)
    gc.set_threshold(700, 10, 10)
    tuning.threads_recording(1, True)
    gc.set_threshold(5000, 50, 50)  # (its later thresholds changed: kept as they are)
    tuning.threads_recording(1, False)
    assert gc.get_threshold() == (700, 50, 50)
    gc.set_threshold(700, 10, 10)
    tuning.threads_recording(1, True)
    gc.set_threshold(3000, collector.RECORDING_SECOND, 10)  # (its own first: the second still ours)
    tuning.threads_recording(1, False)
    assert gc.get_threshold() == (3000, 10, 10)
    gc.set_threshold(700, 500, 10)  # (a second above ours: left as it is)
    tuning.threads_recording(1, True)
    assert gc.get_threshold() == (5000, 500, 10)
    tuning.threads_recording(1, False)
    assert gc.get_threshold() == (700, 500, 10)
    gc.disable()
    try:
        gc.set_threshold(0, 10, 10)  # (collection turned off this way too: left so)
        tuning.threads_recording(1, True)
        assert gc.get_threshold()[0] == 0
    finally:
        gc.enable()


def test_the_setting_picks_the_value_or_leaves_the_collector_alone(thresholds, monkeypatch):
    monkeypatch.setenv("FUSION_GC_THRESHOLD", "0")
    off = collector.CollectorTuning()
    off.threads_recording(1, True)  # (read on first use)
    assert off.threshold == 0 and gc.get_threshold() == (700, 10, 10)
    for value, want in (("3000", 3000), (None, collector.RECORDING_THRESHOLD)):
        if value is None:
            monkeypatch.delenv("FUSION_GC_THRESHOLD")
        else:
            monkeypatch.setenv("FUSION_GC_THRESHOLD", value)
        tuning = collector.CollectorTuning()
        tuning.configure()
        assert tuning.threshold == want
    for bad in ("many", "-5"):
        monkeypatch.setenv("FUSION_GC_THRESHOLD", bad)
        with pytest.raises(FusionError, match="FUSION_GC_THRESHOLD"):
            collector.CollectorTuning().configure()


@pytest.mark.timeout(TIMEOUT)
def test_a_second_recording_thread_raises_it_until_it_has_ended(thresholds, monkeypatch):
    client = clients.client_for()
    monkeypatch.setattr(client, "channel", "inbox")
    x = clients.asarray(rand(16))
    y = x * 2.0  # (this thread has a queue)
    clients.sync()
    assert gc.get_threshold()[0] == 700
    recorded, finish = threading.Event(), threading.Event()
    seen = {}

    def worker():
        z = clients.asarray(rand(16, seed=1)) + 1.0
        recorded.set()
        finish.wait(TIMEOUT / 2)
        seen["z"] = z.numpy()

    th = threading.Thread(target=worker)
    th.start()
    try:
        assert recorded.wait(TIMEOUT / 2)
        assert gc.get_threshold()[:2] == (collector.tuning.threshold, collector.RECORDING_SECOND)
    finally:
        finish.set()
        th.join(TIMEOUT / 2)
    clients.sync()  # (the ended thread's queue goes in a locked section)
    assert gc.get_threshold() == (700, 10, 10)
    np.testing.assert_allclose(seen["z"], rand(16, seed=1) + 1, rtol=1e-6)
    np.testing.assert_allclose(y.numpy(), rand(16) * 2, rtol=1e-6)


def test_a_bad_setting_raises_when_a_client_is_made(monkeypatch):
    from clients.client import FusionClient

    monkeypatch.setattr(collector, "tuning", collector.CollectorTuning())  # (not read yet)
    monkeypatch.setenv("FUSION_GC_THRESHOLD", "lots")
    with pytest.raises(FusionError, match="FUSION_GC_THRESHOLD='lots'"):
        FusionClient(clients.client_for().server)
