"""Bad input raises at the call site; failures stay with their block (invariant 6)."""

from __future__ import annotations

import multiprocessing
import os

import numpy as np
import pytest

import clients
from clients.client import FusionClient
from clients.tensor import Tensor
from fusion_server.server import FusionServer
from tests.conftest import rand, settle


def server_still_works():
    a = rand(33, seed=42)
    np.testing.assert_allclose((clients.asarray(a) * 2.0 + 1.0).numpy(), a * 2 + 1, rtol=1e-6)


def test_shape_mismatch_raises_at_the_call(baseline):
    x, y = clients.asarray(rand(3)), clients.asarray(rand(4))
    pending = clients.stats()["ops_registered"]
    with pytest.raises(ValueError, match=r"shapes \(3,\), \(4,\) do not broadcast"):
        x + y
    assert clients.stats()["ops_registered"] == pending  # nothing was queued
    server_still_works()
    del x, y
    settle()
    assert clients.stats()["buffers_live"] == baseline


def test_wrong_dtype_raises_at_the_call():
    x = clients.asarray(rand(3))
    with pytest.raises(TypeError, match="bitwise_and needs integer or bool"):
        x & x
    with pytest.raises(TypeError, match="subtract is not supported for bool"):
        clients.asarray([True]) - clients.asarray([False])
    with pytest.raises(TypeError, match="float16 is not supported"):
        clients.asarray([1, 2], dtype=np.float16)
    server_still_works()


def test_foreign_tensor_raises(client):
    other = FusionClient(FusionServer(client.server.info))
    foreign = Tensor._make(other, 10**9, (3,), np.dtype(np.float32))
    other.upload(
        __import__("fusion_server.ir", fromlist=["TensorIr"]).TensorIr(10**9, (3,), np.dtype(np.float32)),
        np.ones(3, np.float32),
    )
    mine = clients.asarray(rand(3))
    with pytest.raises(ValueError, match="different devices"):
        mine + foreign
    server_still_works()


@pytest.mark.parametrize("channel", ["lock", "inbox"])
def test_dropped_or_unknown_tensor_raises(client, channel, monkeypatch):
    monkeypatch.setattr(client, "channel", channel)
    ghost = Tensor._make(client, 10**10, (3,), np.dtype(np.float32))
    x = clients.asarray(rand(3))
    if channel == "lock":
        with pytest.raises(clients.DroppedTensorError, match="unknown to this device"):
            x + ghost
    else:  # recorded without the lock: the op's output fails, naming the unknown tensor
        y = x + ghost
        with pytest.raises(clients.TensorFailedError, match="could not be queued.*unknown to this device"):
            y.numpy()
    with pytest.raises(clients.DroppedTensorError):
        ghost.numpy()
    np.testing.assert_allclose((x + 1.0).numpy(), rand(3) + 1, rtol=1e-6)
    server_still_works()


def test_failed_block_marks_only_its_outputs(server):
    a = rand(50)
    x = clients.asarray(a)
    good = clients.exp(x)
    good.numpy()
    original = server.ctx.built_for

    def broken(spec):
        if any(op.name == "tan" for op in spec.ops):
            raise RuntimeError("injected build failure")
        return original(spec)

    server.ctx.built_for = broken
    try:
        bad = clients.tan(x) * 2.0
        with pytest.raises(clients.TensorFailedError, match="tan, multiply.*injected build failure") as info:
            bad.numpy()
        assert isinstance(info.value.__cause__, RuntimeError)
        later = bad + 1.0  # depends on the failed tensor
        with pytest.raises(clients.TensorFailedError, match="an input failed .*the first failure: .*injected"):
            later.numpy()
    finally:
        del server.ctx.built_for
    np.testing.assert_allclose(good.numpy(), np.exp(a), rtol=1e-6)
    server_still_works()
    assert clients.stats()["failed_blocks"] >= 2


def test_device_allocation_failure_is_contained(server, baseline):
    pool = server.runtime.pool
    original = pool._create

    def refuse(size):
        raise clients.DeviceMemoryError(f"device allocation of {size} bytes failed (injected)")

    x = clients.asarray(rand(10))
    pool.trim(0)  # no free buffer to fall back on
    pool._create = refuse
    try:
        y = clients.exp(x) + 1.0
        with pytest.raises(clients.TensorFailedError, match="allocation of .* failed") as info:
            y.numpy()
        assert isinstance(info.value.__cause__, clients.DeviceMemoryError)
    finally:
        pool._create = original
    np.testing.assert_allclose(clients.exp(x).numpy(), np.exp(rand(10)), rtol=1e-6)
    del x, y
    settle()
    assert clients.stats()["buffers_live"] == baseline


def test_too_large_a_tensor_raises_at_the_call(server):
    huge = server.info.max_alloc_bytes // 4 + 1
    with pytest.raises(clients.DeviceMemoryError, match="allows at most"):
        clients.zeros((huge, 2), dtype=clients.float32)
    server_still_works()


def test_missing_float64_raises_clearly(client):
    client.fp64 = False
    try:
        with pytest.raises(clients.DeviceError, match="no float64"):
            clients.asarray([1.0, 2.0], dtype=np.float64)
        with pytest.raises(clients.DeviceError, match="no float64"):
            clients.asarray(np.arange(3, dtype=np.int32)) / 2  # int / int gives float64
    finally:
        client.fp64 = True
    server_still_works()


def _child_uses_clients(conn, tensor):
    try:
        (tensor + 1.0).numpy()
        conn.send("no error")
    except clients.FusionError as exc:
        conn.send(f"FusionError: {exc}")
    except BaseException as exc:  # reported to the parent
        conn.send(f"other: {exc!r}")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_use_after_fork_raises_instead_of_hanging():
    x = clients.asarray(rand(4))
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_child_uses_clients, args=(child, x))
    proc.start()
    assert parent.poll(60), "the child hung"
    message = parent.recv()
    proc.join(60)
    assert message.startswith("FusionError") and "after fork" in message
    server_still_works()


def test_bad_index_and_reshape_raise():
    x = clients.asarray(rand((3, 4)))
    with pytest.raises(IndexError, match="out of bounds for axis 1"):
        x[0, 4]
    with pytest.raises(IndexError, match="too many indices"):
        x[0, 0, 0]
    with pytest.raises(ValueError, match="cannot reshape"):
        x.reshape(5, 3)
    with pytest.raises(ValueError, match="cannot broadcast"):
        clients.broadcast_to(x, (4, 4))
    server_still_works()


def test_a_deep_failure_chain_names_its_root_in_one_line(server):
    """Thirty blocks each failing because the one before did: the error names the first
    failure (its ops and cause) and the chain of tensors in one line, with one cause
    behind it, not thirty."""
    calls = []
    from tests.test_interrupts import _custom_kernel

    op = _custom_kernel(RuntimeError, calls)
    y = op(clients.asarray(rand(16)), fail=True)
    first = y._id
    for _ in range(30):
        y = op(y * 2.0, fail=False)  # each a block of its own, reading the failed one
    with pytest.raises(clients.TensorFailedError) as info:
        y.numpy()
    message = str(info.value)
    assert "the first failure: custom kernel 'maybe_exit' failed in its launch function" in message
    assert f"{first}" in message and "more" in message  # the chain, shortened, on one line
    assert "\n" not in message.split("the first failure")[0]
    links, cause = 0, info.value.__cause__
    while cause is not None:
        links += 1
        cause = cause.__cause__
    assert links <= 2
    assert info.value.root is not None and info.value.path[0] == first
