"""Reductions along a contiguous kept axis (sums, products, max and min down the
columns) in the `columns` strategy: CPU devices read vectors across the outputs. Values against numpy for tails,
broadcast and strided inputs, epilogues, written prologue values and every accumulating
dtype; the strategy asserted through `inspect()`; the scalar variant after a failed
vector build; explicit settings respected."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
from _values import FLOAT64

import clients
from fusion_server.runtime.programs import KernelBuildError
from fusion_server.runtime.widths import VectorWidths
from tests.conftest import assert_variants, failing_builds, rand, server_settings


@pytest.fixture
def columns():
    """The strategy forced (a GPU takes it only when asked) at width 4, whatever the
    device qualified: the same kernel on every device."""
    with server_settings(reduce_strategy="columns", widths=VectorWidths.uniform(4)) as server:
        yield server


def _close(got, want, rtol=1e-5, atol=1e-5):
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


# Output counts around the vector (4) and the work-item's strip: tails of 1 to 3 outputs,
# fewer outputs than one strip, many strips.
@pytest.mark.parametrize("shape", [(7, 4), (5, 9), (33, 18), (64, 203), (300, 1024)])
def test_column_sum_with_a_prologue_is_one_kernel(columns, shape):
    a, b = rand(shape, seed=1), rand(shape, seed=2)
    x, y = clients.asarray(a), clients.asarray(b)
    with clients.inspect() as rec:
        out = clients.sum(clients.exp(x * 0.5) * y, axis=0)
    want = (np.exp(a.astype(np.float64) * 0.5) * b).sum(axis=0)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4 * shape[0])
    if shape == (300, 1024):  # (rows enough for chunks: the prologue in the first of two passes)
        assert [k.variant for k in rec.kernels] == [CHUNKED, "loop, width 1"]
        assert rec.kernels[0].ops == ["multiply", "exp", "multiply", "sum"]
    else:
        assert len(rec.kernels) == 1
        assert_variants(rec, "reduce", "columns, width 4")


CHUNKED = "columns, width 4, partial results of chunks"


@pytest.mark.parametrize("name", ["sum", "prod", "max", "min"])
def test_long_columns_reduce_in_chunks_of_rows_then_a_second_pass(columns, name):
    """From COLUMN_SPLIT_MIN elements on, with rows enough for two chunks of
    CPU_COLUMN_CHUNK_MIN, a work-item reduces a wide strip of the columns over a chunk
    of the rows and a second kernel reduces the chunks' partial results (numpy's order:
    whole rows one after another). Strips with a tail of outputs, NaNs in a later chunk,
    a written prologue value and an epilogue."""
    from fusion_server.fusers import reduce as rd

    rows, cols = 15 * rd.CPU_COLUMN_CHUNK_MIN + 5, 70  # (70: strips of 64 outputs and a tail of 6)
    assert rows * cols >= rd.COLUMN_SPLIT_MIN
    rng = np.random.default_rng(11)
    a = rng.choice(np.array([1.0, -1.0, 1.0, 1.0], np.float32), (rows, cols)) * np.float32(1.001) \
        if name == "prod" else rng.standard_normal((rows, cols)).astype(np.float32)
    if name in ("max", "min"):
        a[rows - 3, 5] = np.nan  # (in the last chunk)
    x = clients.asarray(a)
    with clients.inspect() as rec:
        y = x * 0.5 + 0.25
        out = getattr(clients, name)(y, axis=0) * 2 - 1
        got_out, got_y = out.numpy(), y.numpy()
    want_y = a * np.float32(0.5) + np.float32(0.25)
    want = getattr(np, name)(want_y.astype(np.float64), axis=0) * 2 - 1
    np.testing.assert_allclose(got_y, want_y, rtol=1e-6)
    np.testing.assert_allclose(got_out, want.astype(np.float32), rtol=1e-4, atol=1e-3)
    if name in ("max", "min"):
        assert np.isnan(got_out[5]) and not np.isnan(np.delete(got_out, 5)).any()
    reduce_kernels = [k for k in rec.kernels if k.kind == "reduce"]
    assert [k.variant for k in reduce_kernels] == [CHUNKED, "loop, width 1"]
    assert reduce_kernels[1].ops[-2:] == ["multiply", "subtract"]  # (the epilogue, in the second pass)


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.float64])
def test_long_columns_of_every_accumulator_in_chunks(columns, dtype):
    if dtype == np.float64 and not clients.client_for().server.info.fp64:
        pytest.skip("no float64 on this device")
    rng = np.random.default_rng(5)
    a = rng.integers(0, 50, (700, 130)).astype(dtype)
    with clients.inspect() as rec:
        got = clients.sum(clients.asarray(a), axis=0).numpy()
    want = np.sum(a, axis=0)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    assert [k.variant for k in rec.kernels if k.kind == "reduce"][0] == CHUNKED


@pytest.mark.parametrize("name, dtype", [(name, dtype) for name in ("sum", "prod")
                                         for dtype in (np.float32, np.int32, np.uint8, np.int64)]
                         + [("mean", np.float32)])
def test_accumulating_reductions_down_the_columns(columns, name, dtype):
    rng = np.random.default_rng(3)
    a = (rng.choice(np.array([1, 2, 1, 1]), (9, 13)) if name == "prod" else rng.integers(0, 50, (9, 13))).astype(dtype)
    with clients.inspect() as rec:
        got = getattr(clients, name)(clients.asarray(a), axis=0).numpy()
    want = getattr(np, name)(a, axis=0)
    if name != "mean":  # (numpy's sum and prod of small integers give the default integer, as ours)
        want = want.astype(np.uint64 if np.dtype(dtype).kind == "u" else
                           np.int64 if np.dtype(dtype).kind == "i" else dtype)
    _close(got, want.astype(got.dtype) if name == "mean" else want, rtol=1e-5)
    assert_variants(rec, "reduce", "columns")


def test_float64_column_sums(columns, client):
    if not client.fp64:
        pytest.skip("no float64 on this device")
    a = np.random.default_rng(4).standard_normal((41, 10)).astype(FLOAT64)
    with clients.inspect() as rec:
        got = clients.sum(clients.asarray(a), axis=0).numpy()
    _close(got, a.sum(axis=0), rtol=1e-12, atol=1e-12)
    assert_variants(rec, "reduce", "columns")


def test_broadcast_and_offset_inputs_and_an_epilogue(columns):
    a, row, col = rand((20, 14), seed=5), rand((14,), seed=6), rand((14,), seed=7)
    base = clients.asarray(rand((22, 16), seed=8))
    view = base[2:, 1:15]  # an offset, rows of 16: the kept axis is still contiguous
    x = clients.asarray(a)
    with clients.inspect() as rec:
        out = clients.sum(x * clients.asarray(row) + view, axis=0) * clients.asarray(col) + 1.0
    host_view = base.numpy()[2:, 1:15]
    want = (a * row + host_view).sum(axis=0) * col + 1
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)
    assert len(rec.kernels) == 1
    assert_variants(rec, "reduce", "columns")


def test_leading_axes_reduced_with_the_kept_ones_collapsed(columns):
    a = rand((6, 5, 3, 8), seed=9)
    x = clients.asarray(a)
    with clients.inspect() as rec:
        got = clients.sum(x * x, axis=(0, 1)).numpy()
    np.testing.assert_allclose(got, (a * a).sum(axis=(0, 1)), rtol=1e-4, atol=1e-4)
    assert_variants(rec, "reduce", "columns")


def test_a_prologue_value_written_and_reduced(columns):
    a = rand((12, 11), seed=10)
    x = clients.asarray(a)
    z = x * 3.0 - 1.0
    s = clients.sum(z, axis=0)
    with clients.inspect() as rec:
        clients.flush()
    np.testing.assert_allclose(s.numpy(), (a * 3 - 1).sum(axis=0), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(z.numpy(), a * np.float32(3) - np.float32(1))
    assert len(rec.kernels) == 1
    assert_variants(rec, "reduce", "columns")


def test_the_strategy_is_the_default_for_column_sums_on_cpus(client):
    a = rand((64, 96), seed=11)
    with clients.inspect() as rec:
        got = clients.sum(clients.asarray(a), axis=0).numpy()
    np.testing.assert_allclose(got, a.sum(axis=0), rtol=1e-4, atol=1e-4)
    variants = [k.variant for k in rec.kernels]
    if client.server.info.kind == "CPU":
        assert len(variants) == 1 and variants[0].startswith("columns"), variants
    else:  # (a work-item per column reads consecutive columns together on a GPU, in chunks of rows)
        assert all(v.startswith("loop") for v in variants), variants


@pytest.mark.parametrize("name", ["max", "min"])
@pytest.mark.parametrize("shape", [(5, 9), (33, 18), (64, 203)])
def test_max_and_min_down_the_columns_keep_nan(columns, name, shape):
    rng = np.random.default_rng(15)
    a = rand(shape, seed=15)
    a[rng.integers(0, shape[0], 4), rng.integers(0, shape[1], 4)] = np.nan  # NaN in a few columns
    with clients.inspect() as rec:
        got = getattr(clients, name)(clients.asarray(a) * 2.0, axis=0).numpy()
    np.testing.assert_array_equal(got, getattr(np, name)(a * np.float32(2), axis=0))
    assert_variants(rec, "reduce", "columns")
    ints = rng.integers(-30000, 30000, shape).astype(np.int16)
    with clients.inspect() as rec:
        got = getattr(clients, name)(clients.asarray(ints), axis=0).numpy()
    np.testing.assert_array_equal(got, getattr(np, name)(ints, axis=0))
    assert_variants(rec, "reduce", "columns")


@pytest.mark.parametrize("reduction", [
    lambda x: clients.argmax(x, axis=0),  # an index per output: the loop keeps it
    lambda x: clients.sum(x, axis=1),  # a contiguous reduced axis: the vector loop
    lambda x: clients.sum(x[:, ::2], axis=0),  # a kept axis with a stride
], ids=["argmax", "rows", "strided-kept"])
def test_other_reductions_keep_their_strategies(reduction):
    a = rand((16, 24), seed=12)
    with clients.inspect() as rec:
        reduction(clients.asarray(a)).numpy()
    assert rec.kernels and not any(k.variant.startswith("columns") for k in rec.kernels), \
        [k.variant for k in rec.kernels]


def test_an_explicit_loop_setting_is_kept():
    a = rand((16, 24), seed=13)
    with server_settings(reduce_strategy="loop"):
        with clients.inspect() as rec:
            got = clients.sum(clients.asarray(a), axis=0).numpy()
    np.testing.assert_allclose(got, a.sum(axis=0), rtol=1e-4, atol=1e-4)
    assert_variants(rec, "reduce", "loop")


def test_a_failed_vector_build_runs_the_columns_scalar_variant(columns, client):
    marker = f"{float(uuid.uuid4().int % 1000) + 0.25}f"  # a kernel nobody has built
    op = clients.custom.elementwise(f"scaled_{uuid.uuid4().hex[:8]}", f"x * {marker}")
    a = rand((10, 19), seed=14)
    x = clients.asarray(a)
    value = float(marker[:-1])
    with failing_builds(client.server.runtime.programs, marker, when=lambda key: getattr(key, "width", 1) > 1,
                        error=lambda name: KernelBuildError(f"OpenCL build of {name} failed:\nerror: no vectors")):
        with clients.inspect() as rec:
            got = clients.sum(op(x), axis=0).numpy()
    np.testing.assert_allclose(got, (a * np.float32(value)).sum(axis=0), rtol=1e-4, atol=1e-3)
    (record,) = rec.kernels
    assert record.variant.startswith("columns, width 1"), record.variant
    assert "no vectors" in record.fallback
