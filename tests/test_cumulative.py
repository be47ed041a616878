"""cumulative_sum and cumulative_prod (a ScanOp: fusers/scan.py, codegen/scan.py) against numpy."""

from __future__ import annotations

import numpy as np
import pytest

import clients as xp
from fusion_server.fusers.scan import MIN_CHUNK, layout, tile_shape
from tests.conftest import exploding_kernel, server_settings

RNG = np.random.default_rng(11)


def _data(shape, dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return RNG.random(shape) < 0.5
    if dtype.kind == "f":
        return RNG.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    return RNG.integers(max(info.min, -100), min(info.max, 100), shape, endpoint=True).astype(dtype)


@pytest.fixture(params=["chunks", "tiles"])
def strategy(request):
    """Both kernel strategies on every device: chunks a work-item scans alone (CPUs' default),
    tiles a work-group scans in local memory (GPUs')."""
    with server_settings(scan_strategy=request.param):
        yield request.param


def _expected_kernels(rows: int, n: int, dtype=np.float64) -> int:
    """Scan kernels for `rows` rows of `n`: one where a row is one chunk (or tile), else three."""
    *_, chunks = layout(xp.client_for().server.ctx, n, rows, np.dtype(dtype))
    return 1 if chunks == 1 else 3


def _check_sum(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype.kind == "f":  # (want: numpy's float64 sums, rounded to the dtype)
        scale = np.max(np.abs(want), initial=1.0)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=8e-6 * scale)
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "int32", "int64", "uint8", "uint64", "bool"])
@pytest.mark.parametrize("shape", [(7,), (MIN_CHUNK * 40 + 3,), (5, 300)])
def test_cumulative_sum_matches_numpy(dtype, shape, strategy):
    a = _data(shape, dtype)
    with xp.inspect() as rec:
        got = xp.cumulative_sum(xp.asarray(a), axis=-1).numpy()
    want = np.cumsum(a.astype(np.float64) if a.dtype.kind == "f" else a, axis=-1)
    _check_sum(got, want.astype(a.dtype) if a.dtype.kind == "f" else want)
    rows = int(np.prod(shape[:-1]))
    scans = [k for k in rec.kernels if k.kind == "scan"]
    assert len(scans) == _expected_kernels(rows, shape[-1])


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_along_each_axis_of_a_view(axis, strategy):
    base = _data((6, 9, 40), np.float64)
    a = base[:, ::-1, 3:33]  # a view in another element order: copied into rows first
    got = xp.cumulative_sum(xp.asarray(base)[:, ::-1, 3:33], axis=axis).numpy()
    np.testing.assert_allclose(got, np.cumsum(a, axis=axis), rtol=1e-12, atol=1e-12)
    prod = xp.cumulative_prod(xp.asarray(base * 0.1 + 1.0), axis=axis).numpy()
    np.testing.assert_allclose(prod, np.cumprod(base * 0.1 + 1.0, axis=axis), rtol=1e-12)


def test_products_of_floats_and_ints_wrap_and_round_as_numpys(strategy):
    f = (RNG.random(2000) + 0.5).astype(np.float32)
    np.testing.assert_allclose(xp.cumulative_prod(xp.asarray(f)).numpy(),
                               np.cumprod(f.astype(np.float64)).astype(np.float32), rtol=1e-5)
    big = np.array([3, 1 << 40, 1 << 30, -7, 5], np.int64)  # overflows: wraps as numpy's
    np.testing.assert_array_equal(xp.cumulative_prod(xp.asarray(big)).numpy(), np.cumprod(big))
    np.testing.assert_array_equal(xp.cumulative_sum(xp.asarray(np.array([2**63 - 1, 5], np.int64))).numpy(),
                                  np.cumsum(np.array([2**63 - 1, 5], np.int64)))
    small = np.array([200, 100, 250, 7], np.uint8)
    np.testing.assert_array_equal(xp.cumulative_sum(xp.asarray(small), dtype=xp.uint8).numpy(),
                                  np.cumsum(small, dtype=np.uint8))
    assert xp.cumulative_sum(xp.asarray(small)).dtype == xp.uint64
    assert xp.cumulative_sum(xp.asarray(np.array([True, False]))).dtype == xp.int64
    np.testing.assert_array_equal(xp.cumulative_sum(xp.asarray(np.arange(5, dtype=np.int32)), dtype=xp.float64).numpy(),
                                  np.cumsum(np.arange(5), dtype=np.float64))


def test_include_initial_and_empty_tensors(strategy):
    a = _data((3, 4), np.int32)
    got = xp.cumulative_sum(xp.asarray(a), axis=1, include_initial=True).numpy()
    np.testing.assert_array_equal(got, np.concatenate([np.zeros((3, 1), np.int64), np.cumsum(a, axis=1)], axis=1))
    got = xp.cumulative_prod(xp.asarray(a), axis=0, include_initial=True).numpy()
    np.testing.assert_array_equal(got, np.concatenate([np.ones((1, 4), np.int64), np.cumprod(a, axis=0)], axis=0))
    empty = xp.cumulative_sum(xp.asarray(np.zeros((3, 0), np.float32)), axis=1, include_initial=True).numpy()
    np.testing.assert_array_equal(empty, np.zeros((3, 1), np.float32))
    assert xp.cumulative_prod(xp.asarray(np.zeros((0,), np.float64))).numpy().shape == (0,)


def test_bad_arguments_raise_at_the_call_and_leave_the_server_usable():
    x = xp.asarray(np.ones((2, 3), np.float32))
    with pytest.raises(ValueError, match="axis is required"):
        xp.cumulative_sum(x)
    with pytest.raises(ValueError, match="at least one dimension"):
        xp.cumulative_sum(xp.asarray(np.float32(1.0)))
    with pytest.raises(np.exceptions.AxisError, match="out of bounds"):
        xp.cumulative_prod(x, axis=2)
    with pytest.raises(TypeError, match="axis must be an int"):
        xp.cumulative_sum(x, axis=True)
    with pytest.raises(TypeError, match="include_initial must be a bool"):
        xp.cumulative_sum(x, axis=0, include_initial=1)
    np.testing.assert_array_equal(xp.cumulative_sum(x, axis=1).numpy(), np.cumsum(np.ones((2, 3), np.float32), 1))


def test_fused_work_around_a_scan_and_a_jitted_scan_replays_with_new_values(strategy):
    a = _data((4, 3000), np.float32)
    with xp.inspect() as rec:
        got = (xp.cumulative_sum(xp.exp(xp.asarray(a)) * 2.0, axis=1) - 1.0).numpy()
    want = np.cumsum(np.exp(a.astype(np.float64)) * 2.0, axis=1) - 1.0
    np.testing.assert_allclose(got, want, rtol=2e-5)
    kinds = [k.kind for k in rec.kernels]
    # In tiles the scan computes exp(a) * 2 where it reads it (in chunks, on CPUs, that costs
    # more than a kernel of its own: see ScanFuser); the subtraction after it is its own kernel.
    fused = strategy == "tiles"
    assert kinds.count("elementwise") == (1 if fused else 2), rec.explain()
    assert kinds.count("scan") == _expected_kernels(4, 3000), rec.explain()
    assert all(k.ops[:2] == ["exp", "multiply"] for k in rec.kernels if k.kind == "scan" and len(k.ops) > 1)
    step = xp.jit(lambda t, c: xp.cumulative_prod(t * c, axis=0))
    for scale in (0.5, 2.0):
        b = (RNG.random((50, 3)) + 0.5).astype(np.float64)
        np.testing.assert_allclose(step(xp.asarray(b), scale).numpy(), np.cumprod(b * scale, axis=0), rtol=1e-12)
    assert xp.stats()["jit_replays"] >= 1


def test_a_scan_of_a_failed_input_fails_its_result_alone():
    grid = xp.asarray(np.arange(8.0, dtype=np.float32))

    boom = exploding_kernel("boom_before_scan")
    failed = xp.cumulative_sum(boom(grid))
    with pytest.raises(xp.TensorFailedError, match="producer exploded"):
        failed.numpy()
    np.testing.assert_array_equal(xp.cumulative_sum(grid).numpy(), np.cumsum(np.arange(8.0, dtype=np.float32)))


def test_a_row_of_more_tiles_than_a_work_group_has_work_items(strategy):
    """The tile totals are scanned a work-group's width at a time, the carry going on."""
    ctx = xp.client_for().server.ctx
    group, per_item = tile_shape(ctx, np.dtype(np.int64))
    n = group * per_item * (2 * group + 3) + 5
    a = RNG.integers(-1000, 1000, n).astype(np.int64)
    np.testing.assert_array_equal(xp.cumulative_sum(xp.asarray(a)).numpy(), np.cumsum(a))


def test_rows_that_start_inside_their_buffer(strategy):
    """A slice is scanned where it lies (its offset), not copied first."""
    a = np.arange(20000, dtype=np.int64)
    with xp.inspect() as rec:
        got = xp.cumulative_sum(xp.asarray(a)[7:]).numpy()
    np.testing.assert_array_equal(got, np.cumsum(a[7:]))
    assert [k.kind for k in rec.kernels if k.kind != "scan"] == []
    grid = a.reshape(4, 5000)
    np.testing.assert_array_equal(xp.cumulative_sum(xp.asarray(grid)[1:, 3:], axis=1).numpy(),
                                  np.cumsum(grid[1:, 3:], axis=1))


@pytest.mark.parametrize("shape", [(9,), (3, 2000)])
def test_the_work_before_a_scan_is_computed_where_it_reads_in_tiles(shape, strategy):
    a, b = _data(shape, np.float32), _data(shape, np.float32)
    x, w = xp.asarray(a), xp.asarray(b)
    with xp.inspect() as rec:
        got = xp.cumulative_sum(xp.exp(x * 0.5) * w + 1.0, axis=-1).numpy()
    _check_sum(got, np.cumsum(np.exp(a.astype(np.float64) * 0.5) * b + 1.0, axis=-1).astype(np.float32))
    scans = ["scan"] * _expected_kernels(*(1, *shape)[-2:])
    if strategy == "tiles":
        assert [k.kind for k in rec.kernels] == scans, rec.explain()
        assert rec.kernels[0].ops == ["multiply", "exp", "multiply", "add", "cumulative_sum"]
        assert "fuser scan" in rec.explain()
    else:  # (see ScanFuser: on CPUs the element-wise kernel and the scan cost less)
        assert [k.kind for k in rec.kernels] == ["elementwise", *scans], rec.explain()


def test_a_prologue_value_needed_after_the_scan_is_written_by_it(strategy):
    a = _data((4, 700), np.float64)
    x = xp.asarray(a)
    with xp.inspect() as rec:
        y = xp.exp(x * 0.1)  # kept: the scan's last phase writes it
        total = xp.cumulative_prod(y * 0.999, axis=1)
        kept, prod = y.numpy(), total.numpy()
    assert ("elementwise" in [k.kind for k in rec.kernels]) == (strategy == "chunks"), rec.explain()
    np.testing.assert_allclose(kept, np.exp(a * 0.1), rtol=1e-12)
    np.testing.assert_allclose(prod, np.cumprod(np.exp(a * 0.1) * 0.999, axis=1), rtol=1e-9)


def test_a_prologue_that_reads_a_view_runs_before_the_scan(strategy):
    a = _data((6, 5), np.float32)
    x = xp.asarray(a)
    with xp.inspect() as rec:  # (a transposed input: the element-wise kernel takes the prologue)
        got = xp.cumulative_sum(x.T * 2.0, axis=1).numpy()
    np.testing.assert_allclose(got, np.cumsum(a.T.astype(np.float64) * 2.0, axis=1), rtol=1e-5)
    assert [k.kind for k in rec.kernels][0] == "elementwise", rec.explain()


def test_a_jitted_fused_scan_replays_with_new_scalars():
    step = xp.jit(lambda t, c: xp.cumulative_sum(xp.exp(t * c), axis=-1))
    a = _data((3, 40), np.float32)
    before = xp.stats()
    for c in (0.5, 0.25, -1.0):
        _check_sum(step(xp.asarray(a), c).numpy(), np.cumsum(np.exp(a.astype(np.float64) * c), axis=-1)
                   .astype(np.float32))
    after = xp.stats()
    assert after["jit_traces"] - before["jit_traces"] == 1 and after["jit_replays"] - before["jit_replays"] == 2
