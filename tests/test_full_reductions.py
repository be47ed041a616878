"""Reductions to one element over many elements run in two passes: chunks reduced in
parallel into partial results, then those reduced with the epilogue. Values against
numpy for every kind that splits, NaN, integer accumulators, prologue values written on
the way, epilogues with inputs; the two kernels asserted through `inspect()`; argmax and
small reductions keep one kernel; a jitted full reduction replays both."""

from __future__ import annotations

import numpy as np
import pytest

import clients
from fusion_server.fusers.reduce import chunks_for
from tests.conftest import rand, server_settings

LONG = (1 << 17) + 5  # cut into chunks on every device (GPUs from 2 x 4096 elements, CPUs 2 x 2^15)


def _assert_two_passes(rec, client) -> None:
    reduce = [k for k in rec.kernels if k.kind == "reduce"]
    chunks = chunks_for(client.server.info, 1, LONG, "sum", "loop", False)
    assert chunks >= 2
    assert len(reduce) == 2, [k.variant for k in reduce]
    assert reduce[0].variant.endswith("partial results of chunks"), reduce[0].variant
    assert not reduce[1].variant.endswith("partial results of chunks"), reduce[1].variant


@pytest.mark.parametrize("name", ["sum", "prod", "max", "min", "mean"])
def test_a_long_full_reduction_runs_in_two_passes(client, name):
    a = rand(LONG, seed=1)
    if name == "prod":  # terms of 1 +- 1e-5: the product stays finite
        a = ((a * np.float32(1e-5) + np.float32(1.25)) / np.float32(1.5)).astype(np.float32)
    x = clients.asarray(a)
    with clients.inspect() as rec:
        got = getattr(clients, name)(x * 1.5 - 0.25).numpy()
    terms = a.astype(np.float64) * 1.5 - 0.25
    want = getattr(np, name)(terms)
    np.testing.assert_allclose(got, want, rtol=1e-4 if name != "prod" else 2e-3, atol=1e-3)
    _assert_two_passes(rec, client)


def test_nan_reaches_the_result_from_any_chunk(client):
    a = rand(LONG, seed=2)
    for at in (0, LONG // 2, LONG - 1):
        b = a.copy()
        b[at] = np.nan
        with clients.inspect() as rec:
            got = clients.max(clients.asarray(b)).numpy()
        assert np.isnan(got)
        _assert_two_passes(rec, client)


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.int64, np.bool_])
def test_integer_full_sums(client, dtype):
    rng = np.random.default_rng(3)
    a = rng.integers(0, 2 if dtype is np.bool_ else 200, LONG).astype(dtype)
    with clients.inspect() as rec:
        got = clients.sum(clients.asarray(a)).numpy()
    want = a.sum(dtype=np.uint64 if np.dtype(dtype).kind == "u" else np.int64)
    assert got.dtype == want.dtype and got == want
    _assert_two_passes(rec, client)


def test_float64_full_sum(client):
    if not client.fp64:
        pytest.skip("no float64 on this device")
    a = np.random.default_rng(4).standard_normal(LONG)
    with clients.inspect() as rec:
        got = clients.sum(clients.asarray(a)).numpy()
    np.testing.assert_allclose(got, a.sum(), rtol=1e-12, atol=1e-9)
    _assert_two_passes(rec, client)


def test_epilogue_with_inputs_and_a_strided_source(client):
    m = rand((LONG // 64 + 1, 128), seed=5)
    scale = rand((1,), seed=6)
    x = clients.asarray(m)[:, ::2]  # a strided view: the chunks walk its coordinates
    with clients.inspect() as rec:
        out = clients.sum(clients.exp(x * 0.01), keepdims=True) * clients.asarray(scale) + 2.0
    want = np.exp(m[:, ::2].astype(np.float64) * 0.01).sum(keepdims=True) * scale + 2
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4)
    _assert_two_passes(rec, client)


def test_a_prologue_value_written_on_the_way(client):
    a = rand(LONG, seed=7)
    x = clients.asarray(a)
    z = x * 3.0 - 1.0
    s = clients.sum(z)
    with clients.inspect() as rec:
        clients.flush()
    np.testing.assert_array_equal(z.numpy(), a * np.float32(3) - np.float32(1))
    np.testing.assert_allclose(s.numpy(), (a.astype(np.float64) * 3 - 1).sum(), rtol=1e-4, atol=1e-2)
    _assert_two_passes(rec, client)


def test_argmax_and_short_reductions_keep_one_kernel():
    a = rand(LONG, seed=8)
    with clients.inspect() as rec:
        got = clients.argmax(clients.asarray(a)).numpy()
    assert got == a.argmax() and len(rec.kernels) == 1
    short = rand(1000, seed=9)
    with clients.inspect() as rec:
        got = clients.sum(clients.asarray(short)).numpy()
    np.testing.assert_allclose(got, short.sum(dtype=np.float64), rtol=1e-5)
    assert len(rec.kernels) == 1


def test_a_jitted_full_reduction_replays_both_passes(client):
    @clients.jit
    def total(x, y):
        return clients.sum(x * y) + 1.0

    before = clients.stats()
    for seed in range(4):
        a, b = rand(LONG, seed=10 + seed), rand(LONG, seed=20 + seed)
        got = total(clients.asarray(a), clients.asarray(b)).numpy()
        np.testing.assert_allclose(got, (a.astype(np.float64) * b).sum() + 1, rtol=1e-4, atol=1e-2)
    after = clients.stats()
    assert after["jit_traces"] - before["jit_traces"] == 1
    assert after["jit_replays"] - before["jit_replays"] == 3


def test_chunks_follow_the_device():
    from types import SimpleNamespace

    gpu, cpu = SimpleNamespace(kind="GPU", compute_units=132), SimpleNamespace(kind="CPU", compute_units=2)
    assert chunks_for(gpu, 1, 1 << 24, "sum", "group", False) == 132 * 8
    assert chunks_for(cpu, 1, 1 << 24, "sum", "loop", False) == 8
    assert chunks_for(cpu, 1, 1000, "sum", "loop", False) == 0  # short: one kernel
    assert chunks_for(gpu, 1, 1 << 24, "argmax", "group", False) == 0
    assert chunks_for(gpu, 4096, 4096, "sum", "loop", True) == 64  # 132 x 2048 items over 4096 columns
    assert chunks_for(gpu, 1 << 20, 64, "sum", "loop", True) == 0  # enough columns already
    assert chunks_for(cpu, 4096, 4096, "sum", "loop", True) == 0  # CPUs: the columns strategy
    assert chunks_for(gpu, 6, 40, "sum", "loop", True) == 0  # small: one launch costs less


@pytest.mark.parametrize("shape, axis", [((300, 24), 0), ((50, 6, 10), (0, 1)), ((40, 8, 9), 0)])
def test_column_reductions_in_two_passes(monkeypatch, shape, axis):
    """The GPU's rule forced on any device: the chunked first pass with kept outputs."""
    import fusion_server.fusers.reduce as fr

    monkeypatch.setattr(fr, "chunks_for", lambda info, nout, nred, kind, strategy, down: 4 if nout > 1 else 0)
    a, e = rand(shape, seed=30), rand(shape[-1], seed=31)
    x = clients.asarray(a)
    with server_settings(reduce_strategy="loop"):
        with clients.inspect() as rec:
            got = (clients.sum(x * 2.0, axis=axis) * clients.asarray(e) if len(shape) == 2 else
                   clients.max(x * 2.0, axis=axis)).numpy()
    want = (a * 2).sum(axis=axis) * e if len(shape) == 2 else (a * 2).max(axis=axis)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    reduce = [k for k in rec.kernels if k.kind == "reduce"]
    assert len(reduce) == 2 and reduce[0].variant.endswith("partial results of chunks"), \
        [k.variant for k in reduce]
