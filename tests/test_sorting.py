"""sort and argsort on the device, unique_* and nonzero, against numpy."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pyopencl as cl
import pytest

import clients
from clients._sorting import UNIQUE_ON_DEVICE_MIN, _unique_on_device_for
from fusion_server.codegen import lane_sort
from fusion_server.codegen.sort import BIN_BITS, MAX_BUCKETS, SortSpec, scalar_variant
from fusion_server.fusers import sort as sort_plan
from fusion_server.fusers.sort import (
    BUCKET_PAIRS,
    LANE_BUCKET,
    MAX_CHUNKS,
    RUN_SPLIT_MIN,
    TILE_ITEMS,
    TILE_ITEMS_OTHER,
    bucket_layout,
    by_buckets,
)
from fusion_server.runtime.programs import KernelBuildError
from fusion_server.runtime.widths import VectorWidths
from tests.conftest import exploding_kernel, failing_builds, server_settings, settle

FP64 = clients.client_for().fp64
DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64, np.float32] + (
    [np.float64] if FP64 else [])
# Row lengths: empty, one, odd, a power of two, and longer than a tile (merge passes).
SHAPES = [(0,), (1,), (7,), (64,), (3, 1000), (2, 3000), (1, 20000), (5, 0), (0, 4), (4, 1), (2, 3, 33)]


def data(shape, dtype, seed=0):
    """Values with many ties; floats also get NaNs and both signed zeros."""
    rng = np.random.default_rng(seed)
    a = np.array(rng.integers(-4, 5, shape), dtype)  # an array even for shape ()
    if np.dtype(dtype).kind == "f":
        a *= 0.5
        a[rng.random(shape) < 0.1] = np.nan
        a[rng.random(shape) < 0.1] = -0.0
        a[rng.random(shape) < 0.05] = -np.inf
    return a


def np_argsort(a, axis=-1, descending=False):
    """numpy's stable argsort; descending sorts the negated keys, so equal elements keep
    their order and NaNs stay last (~ reverses ints and bools without overflow)."""
    if descending:
        a = -a if a.dtype.kind == "f" else ~a
    return np.argsort(a, axis=axis, kind="stable")


def np_sort(a, axis=-1, descending=False):
    return np.take_along_axis(a, np_argsort(a, axis, descending), axis)


def check(x, a, axis=-1, descending=False, via=None):
    def both(x):
        return clients.sort(x, axis=axis, descending=descending), clients.argsort(x, axis=axis, descending=descending)

    got_values, got_indices = (via or (lambda f: f))(both)(x)
    assert got_values.dtype == a.dtype and got_indices.dtype == np.int64
    assert got_values.shape == a.shape == got_indices.shape
    # Bit-exact: NaNs in place, and each signed zero where numpy's stable order puts it.
    np.testing.assert_array_equal(got_values.numpy().view(np.uint8), np_sort(a, axis, descending).view(np.uint8))
    np.testing.assert_array_equal(got_indices.numpy(), np_argsort(a, axis, descending))


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_sort_and_argsort_match_numpy(dtype, descending, via):
    for k, shape in enumerate(SHAPES):
        a = data(shape, dtype, seed=k)
        check(clients.asarray(a), a, descending=descending, via=via)


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_keys_over_every_byte_and_keys_all_alike(dtype, descending):
    """Keys that differ in every byte, keys all alike, and few distinct keys, in rows long
    enough for a CPU's radix sort (which skips the bytes all keys share) and long enough
    to be sorted by buckets (all alike: one bucket holds the row); bit-exact against
    numpy's stable sort."""
    rng = np.random.default_rng(11)
    n = 3 * RUN_SPLIT_MIN + 5
    if np.dtype(dtype).kind == "f":
        wide = rng.standard_normal(n).astype(dtype) * np.asarray(1e30, dtype) ** rng.uniform(-1, 1, n).astype(dtype)
    elif dtype is np.bool_:
        wide = rng.random(n) < 0.5
    else:
        info = np.iinfo(dtype)
        wide = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    alike = np.full(n, wide[0], dtype)
    few = np.array(rng.integers(0, 3, (3, 700)), dtype)
    for a in (wide, alike, wide[: 2 * RUN_SPLIT_MIN].reshape(2, -1), few):
        check(clients.asarray(a), a, descending=descending)


@pytest.mark.parametrize("descending", [False, True])
def test_the_other_first_stage_matches_numpy_too(monkeypatch, descending):
    """Where the device is a CPU (CI's), the GPUs' bitonic tile stage runs forced, and
    the CPUs' radix stage where it is a GPU: both stages keep their tests everywhere."""
    other = "tiles" if INFO.kind == "CPU" else "runs"
    monkeypatch.setattr(sort_plan, "first_stage_for", lambda kind: other)
    for dtype in DTYPES:
        for k, shape in enumerate(SHAPES):
            a = data(shape, dtype, seed=k)
            check(clients.asarray(a), a, descending=descending)


def test_rows_cut_for_many_cores_match_numpy(monkeypatch):
    """With 64 cores, rows are sorted by buckets where 2 cores sort each row whole: the
    most buckets a row may have, many of them empty or short, several rows at once."""
    ctx = clients.client_for().server.ctx
    monkeypatch.setattr(ctx, "info", dataclasses.replace(ctx.info, compute_units=64))
    for k, shape in enumerate([(1, 4106), (3, 8200), (2, 4097), (1, 20000)]):
        for dtype in (np.float32, np.int64, np.bool_):
            a = data(shape, dtype, seed=k)
            check(clients.asarray(a), a)
            check(clients.asarray(a), a, descending=True)


def test_how_a_cpu_cuts_rows():
    assert not by_buckets(RUN_SPLIT_MIN, 1, 64)  # short rows: each sorted whole
    assert by_buckets(1 << 20, 1, 2) and by_buckets(1 << 20, 4, 16)  # fewer long rows than cores
    assert not by_buckets(1 << 20, 16, 16)  # enough rows: each whole
    # (keys per chunk, buckets per row at most, keys per bucket at most): two chunks per
    # core, buckets that fit a core's cache; two buckets in a row hold more than the cap
    assert bucket_layout(1 << 20, 1, 2) == (1 << 18, 2 * (1 << 20) // BUCKET_PAIRS + 1, BUCKET_PAIRS)
    assert bucket_layout(1 << 20, 4, 16) == (1 << 17, 129, BUCKET_PAIRS)  # 4 rows share 16 cores
    assert bucket_layout(1 << 16, 1, 16) == (1 << 12, 129, 1024)  # four buckets per core at least
    # at most MAX_BUCKETS: the cap grows
    assert bucket_layout(1 << 24, 1, 64) == ((1 << 24) // MAX_CHUNKS, MAX_BUCKETS - 1, 16409)
    assert bucket_layout(RUN_SPLIT_MIN + 1, 1, 64) == (RUN_SPLIT_MIN // 2 + 1, 483, 17)  # no tiny chunks
    for n, rows, cores in [(1 << 20, 1, 2), (1 << 24, 1, 64), (3 << 22, 3, 4), (RUN_SPLIT_MIN + 1, 1, 64)]:
        chunk, buckets, cap = bucket_layout(n, rows, cores)
        assert buckets <= MAX_BUCKETS and 2 * -(-n // cap) + 1 <= MAX_BUCKETS and buckets * cap >= n
    # The bucket stage deals its buckets from all over: any run of work-items takes its
    # share of the full buckets (the first ones) and of the empty ones.
    for items in (1, 2, 129, 513, 2047, 4 * 1023):
        step = sort_plan.dealing_step(items)
        dealt = [g * step % items for g in range(items)]
        assert sorted(dealt) == list(range(items))
        full = items * 3 // 5
        for group in range(0, items - 63, 64):
            assert abs(sum(b < full for b in dealt[group:group + 64]) - 64 * 3 / 5) <= 4
    # Buckets sorted in vector lanes stop at 4096 keys: 2^20 floats in at most 513 of them.
    assert bucket_layout(1 << 20, 1, 2, LANE_BUCKET) == (1 << 18, 513, 4096)
    longest = sort_plan.longest_row_for(LANE_BUCKET)
    assert bucket_layout(longest, 1, 2, LANE_BUCKET)[2] == LANE_BUCKET
    assert bucket_layout(longest + 2, 1, 2, LANE_BUCKET)[2] > LANE_BUCKET
    assert sort_plan.buckets_in_lanes(np.dtype(np.float32), longest, 16)
    assert not sort_plan.buckets_in_lanes(np.dtype(np.float32), longest + 1, 16)
    assert not sort_plan.buckets_in_lanes(np.dtype(np.float64), 1 << 16, 16)


def test_axis_arguments_including_negative():
    a = data((4, 5, 6), np.float32, seed=1)
    x = clients.asarray(a)
    for axis in (0, 1, 2, -1, -2, -3):
        check(x, a, axis=axis)
        check(x, a, axis=axis, descending=True)


def test_non_contiguous_inputs():
    a = data((40, 30), np.int32, seed=2)
    x = clients.asarray(a)
    views = {
        "transposed": (x.T, a.T),
        "stepped": (x[::2, 1::3], a[::2, 1::3]),
        "offset": (x[3:], a[3:]),
        "reversed": (x[::-1, ::-2], a[::-1, ::-2]),
        "broadcast": (clients.broadcast_to(x[:1], (3, 30)), np.broadcast_to(a[:1], (3, 30))),
    }
    for view, host in views.values():
        for axis in (0, -1):
            check(view, np.ascontiguousarray(host), axis=axis)


def test_stability_with_many_ties():
    a = np.random.default_rng(3).integers(0, 3, 9000).astype(np.float32)
    x = clients.asarray(a)
    for descending in (False, True):
        got = clients.argsort(x, descending=descending).numpy()
        np.testing.assert_array_equal(got, np_argsort(a, descending=descending))
        # Within each run of equal keys the positions increase: the order is stable.
        keys = a[got]
        same = keys[1:] == keys[:-1]
        assert np.all(np.diff(got)[same] > 0)
    flags = np.arange(5000) % 7 == 0
    np.testing.assert_array_equal(clients.argsort(clients.asarray(flags)).numpy(), np.argsort(flags, kind="stable"))


def test_nans_go_last_in_both_directions():
    a = np.array([np.nan, 1.0, -np.inf, np.nan, 3.0, -2.0, np.inf, np.nan, 1.0], np.float32)
    x = clients.asarray(a)
    up = clients.sort(x).numpy()
    down = clients.sort(x, descending=True).numpy()
    np.testing.assert_array_equal(up, [-np.inf, -2, 1, 1, 3, np.inf, np.nan, np.nan, np.nan])
    np.testing.assert_array_equal(down, [np.inf, 3, 1, 1, -2, -np.inf, np.nan, np.nan, np.nan])
    np.testing.assert_array_equal(clients.argsort(x, descending=True).numpy(), [6, 4, 1, 8, 5, 2, 0, 3, 7])


def test_signed_zeros_are_equal_keys():
    a = np.array([0.0, -0.0, 0.0, -0.0, -1.0], np.float32)
    x = clients.asarray(a)
    np.testing.assert_array_equal(clients.argsort(x).numpy(), [4, 0, 1, 2, 3])
    np.testing.assert_array_equal(np.signbit(clients.sort(x).numpy()), [True, False, True, False, True])
    np.testing.assert_array_equal(clients.argsort(x, descending=True).numpy(), [0, 1, 2, 3, 4])


def test_extreme_values():
    for dtype in (np.int32, np.int64):
        info = np.iinfo(dtype)
        a = np.array([0, info.max, info.min, -1, info.min, 1, info.max], dtype)
        check(clients.asarray(a), a)
        check(clients.asarray(a), a, descending=True)


_TILE: list[int] = []
INFO = clients.client_for().server.info


def tile_pairs() -> int:
    """The pairs one tile kernel sorts on this device (not a CPU's: see sort_kernels),
    measured: the plan caps the preferred size (TILE_ITEMS) by the built kernel's
    work-group limit and local memory, so a probe row of 2^16 shows how many merge
    passes follow the tile kernel."""
    if not _TILE:
        n = 1 << 16
        with clients.inspect() as rec:
            clients.sort(clients.asarray(np.arange(n, 0, -1, dtype=np.float32))).numpy()
        passes = len(rec.kernels) - 1
        _TILE.append(n >> passes)
        assert _TILE[0] <= 2 * TILE_ITEMS.get(INFO.kind, TILE_ITEMS_OTHER)
    return _TILE[0]


def sort_kernels(rows: int, n: int) -> int:
    """The kernels a sort of `rows` rows of `n` takes here: on a GPU the tiles, then a
    merge pass per doubling of the sorted runs until one covers the row; on a CPU one
    (a row per work-item) or the bucket sort's four."""
    if INFO.kind == "CPU":
        return 4 if by_buckets(n, rows, INFO.compute_units) else 1
    first = tile_pairs()
    return 1 + (math.ceil(math.log2(n / first)) if n > first else 0)


def one_kernel_row() -> int:
    """A row length that one sort kernel sorts here."""
    return 1000 if INFO.kind == "CPU" else min(1000, tile_pairs())


def merged_row() -> int:
    """A row length that takes several kernels here (merge passes, or buckets)."""
    return 3 * RUN_SPLIT_MIN if INFO.kind == "CPU" else 5 * tile_pairs() // 2


def test_kernels_of_a_sorted_fused_expression():
    a = data((one_kernel_row(),), np.float32, seed=4)
    x = clients.asarray(a)
    with clients.inspect() as rec:
        got = (clients.sort(clients.exp(x) + 1.0) * 2.0).numpy()
    np.testing.assert_allclose(got, np.sort(np.exp(a) + 1) * 2, rtol=1e-6)
    # exp and add fuse into one kernel that writes the rows; a row that fits one tile of
    # the sort needs one sort kernel; the multiply after it is a kernel of its own.
    assert [(k.kind, k.ops) for k in rec.kernels] == [
        ("elementwise", ["exp", "add"]), ("sort", ["sort"]), ("elementwise", ["multiply"])]

    # A longer row: on a GPU the tiles, then one merge pass per doubling of the sorted
    # runs until a run covers the row; on a CPU the bucket sort.
    n = merged_row()
    b = data((n,), np.float32, seed=5)
    with clients.inspect() as rec:
        got = clients.argsort(clients.exp(clients.asarray(b)) + 1.0).numpy()
    np.testing.assert_array_equal(got, np_argsort(np.exp(b) + np.float32(1)))
    kernels = sort_kernels(1, n)
    assert kernels >= 2 or INFO.compute_units == 1  # (a CPU of one core never cuts a row)
    assert [k.kind for k in rec.kernels] == ["elementwise"] + ["sort"] * kernels


def test_scratch_buffers_go_back_to_the_pool(baseline):
    x = clients.asarray(data((1, merged_row()), np.float32))
    with clients.inspect() as rec:
        y = clients.argsort(x)
        y.numpy()
    assert [k.kind for k in rec.kernels] == ["sort"] * sort_kernels(1, merged_row())  # with scratch
    del x, y
    settle()
    assert clients.stats()["buffers_live"] == baseline


def test_bad_input_raises_and_the_server_stays_usable():
    x = clients.asarray(data((3, 4), np.float32))
    with pytest.raises(np.exceptions.AxisError, match="axis 2 is out of bounds"):
        clients.sort(x, axis=2)
    with pytest.raises(np.exceptions.AxisError, match="axis -3"):
        clients.argsort(x, axis=-3)
    with pytest.raises(np.exceptions.AxisError):
        clients.sort(clients.asarray(np.float32(1.0)))
    with pytest.raises(TypeError, match="axis must be an int"):
        clients.sort(x, axis=1.0)
    with pytest.raises(TypeError, match="axis must be an int"):
        clients.sort(x, axis=(0, 1))
    with pytest.raises(TypeError, match="descending must be a bool"):
        clients.sort(x, descending="yes")
    with pytest.raises(TypeError, match="takes a tensor"):
        clients.argsort("3, 1, 2")
    with pytest.raises(TypeError):
        clients.sort(x, -1)  # axis is keyword-only, as the standard says

    boom = exploding_kernel("boom_before_sort")
    failed = clients.sort(boom(x))
    with pytest.raises(clients.TensorFailedError, match="producer exploded"):
        failed.numpy()
    a = data((3, 4), np.float32, seed=6)
    check(clients.asarray(a), a)


def np_unique(a):
    return np.unique(a.reshape(-1), return_index=True, return_inverse=True, return_counts=True, equal_nan=False)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_unique_functions_match_numpy(dtype, selecting):
    for k, shape in enumerate([(0,), (1,), (50,), (6, 7), (2, 0, 3), ()]):
        a = data(shape, dtype, seed=10 + k)
        x = clients.asarray(a)
        values, index, inverse, counts = np_unique(a)
        reads = clients.stats()["reads"]
        everything = clients.unique_all(x)
        assert clients.stats()["reads"] == reads + 1  # one read: of x, or of the count found on the device
        assert type(everything).__name__ == "UniqueAllResult"
        assert everything._fields == ("values", "indices", "inverse_indices", "counts")
        assert all(isinstance(t, clients.Tensor) for t in everything)
        np.testing.assert_array_equal(everything.values.numpy(), values)
        np.testing.assert_array_equal(everything.indices.numpy(), index)
        np.testing.assert_array_equal(everything.inverse_indices.numpy(), inverse.reshape(shape))
        np.testing.assert_array_equal(everything.counts.numpy(), counts)
        assert everything.indices.dtype == everything.counts.dtype == np.int64
        assert everything.inverse_indices.shape == a.shape
        np.testing.assert_array_equal(clients.unique_values(x).numpy(), values)
        vc = clients.unique_counts(x)
        assert vc._fields == ("values", "counts")
        np.testing.assert_array_equal(vc.counts.numpy(), counts)
        vi = clients.unique_inverse(x)
        assert vi._fields == ("values", "inverse_indices")
        np.testing.assert_array_equal(vi.inverse_indices.numpy(), inverse.reshape(shape))


def test_each_nan_is_its_own_unique_value(selecting):
    a = np.array([np.nan, 1.0, np.nan, 1.0, -0.0, 0.0], np.float32)
    got = clients.unique_counts(clients.asarray(a))
    np.testing.assert_array_equal(got.values.numpy(), [0.0, 1.0, np.nan, np.nan])
    assert np.signbit(got.values.numpy()[0])  # the first of the equal zeros, as numpy's
    np.testing.assert_array_equal(got.counts.numpy(), [2, 2, 1, 1])


@pytest.mark.parametrize("dtype", [np.int32, np.float32, np.float64, np.uint8])
def test_unique_on_the_device_over_many_repeats(dtype, monkeypatch):
    monkeypatch.setattr(clients._indexing, "MASKS_ON_DEVICE", True)
    rng = np.random.default_rng(3)
    a = rng.integers(0, 200, (317, 331)).astype(dtype)  # (several sort buckets and scan chunks)
    if np.dtype(dtype).kind == "f":
        a[rng.random(a.shape) < 0.01] = np.nan
    values, index, inverse, counts = np_unique(a)
    got = clients.unique_all(clients.asarray(a))
    np.testing.assert_array_equal(got.values.numpy(), values)
    np.testing.assert_array_equal(got.indices.numpy(), index)
    np.testing.assert_array_equal(got.inverse_indices.numpy(), inverse.reshape(a.shape))
    np.testing.assert_array_equal(got.counts.numpy(), counts)




def test_masks_select_on_gpus_and_are_read_on_cpu_devices():
    x = clients.asarray(np.arange(4.0))
    gpu = clients.client_for().server.info.kind != "CPU"
    assert clients._indexing.selects_on_device(x) == gpu
    assert _unique_on_device_for(x) == gpu  # (small: numpy's unique is the faster on a CPU)
    big = clients.zeros(UNIQUE_ON_DEVICE_MIN, dtype=clients.int32)
    assert _unique_on_device_for(big)
    reads = clients.stats()["reads"]
    got = clients.unique_counts(big)  # on the device: one read, of the count
    assert clients.stats()["reads"] == reads + 1
    assert got.values.numpy().tolist() == [0] and got.counts.numpy().tolist() == [UNIQUE_ON_DEVICE_MIN]


def test_nonzero(selecting):
    for k, shape in enumerate([(0,), (9,), (4, 5), (2, 3, 4), (3, 0)]):
        for dtype in DTYPES:
            a = data(shape, dtype, seed=20 + k)
            got = clients.nonzero(clients.asarray(a))
            want = np.nonzero(a)
            assert len(got) == len(want) == a.ndim
            for g, w in zip(got, want):
                assert g.dtype == np.int64
                np.testing.assert_array_equal(g.numpy(), w)
    a = data((6, 8), np.int64)
    view = clients.asarray(a)[1::2, ::-3]
    for g, w in zip(clients.nonzero(view), np.nonzero(a[1::2, ::-3])):
        np.testing.assert_array_equal(g.numpy(), w)
    with pytest.raises(ValueError, match="0-d"):
        clients.nonzero(clients.asarray(1.0))
    z = np.array([[0, 1j], [2, 0j]], np.complex64)
    for g, w in zip(clients.nonzero(clients.asarray(z)), np.nonzero(z)):
        np.testing.assert_array_equal(g.numpy(), w)


@pytest.mark.parametrize("fill", ["random", "none", "all", "first", "last"])
def test_positions_found_on_the_device_match_numpy(fill):
    n = 100_003  # (several chunks of the scan, a tail)
    rng = np.random.default_rng(7)
    mask = {"random": rng.random(n) < 0.3, "none": np.zeros(n, bool), "all": np.ones(n, bool),
            "first": np.arange(n) == 0, "last": np.arange(n) == n - 1}[fill]
    values = rng.standard_normal(n).astype(np.float32)
    x, m = clients.asarray(values), clients.asarray(mask)
    before = clients.stats()
    positions = clients._indexing.selected_positions(m)
    after = clients.stats()
    np.testing.assert_array_equal(positions.numpy(), np.flatnonzero(mask))
    assert positions.dtype == np.int64
    assert after["reads"] - before["reads"] == 1  # the count, not the mask
    got = clients._indexing.nonzero_on_device(clients.reshape(x, (100_003,)) > 0.5)[0]
    np.testing.assert_array_equal(got.numpy(), np.flatnonzero(values > 0.5))
    with clients.inspect() as rec:
        clients._indexing.selected_positions(m)
    kinds = [k.kind for k in rec.kernels]
    assert "scan" in kinds and kinds.count("move") == 1, kinds  # one scatter, no mask on the host


def test_rows_too_long_for_the_kernels_raise_at_the_call():
    huge = clients.broadcast_to(clients.asarray(np.float32(1)), (2**30 + 1,))  # a view: nothing allocated
    with pytest.raises(ValueError, match="rows of 1073741825 elements"):
        clients.sort(huge)
    with pytest.raises(ValueError, match="more than the device sort supports"):
        clients.argsort(huge)
    np.testing.assert_array_equal(clients.sort(clients.asarray([3.0, 1.0])).numpy(), [1.0, 3.0])


@pytest.mark.parametrize("dtype", [np.float32, np.float64 if FP64 else np.int64, np.int32, np.uint8])
def test_bucket_sort_of_skewed_rows(monkeypatch, dtype):
    """Rows sorted by buckets (forced, with 8 cores) whose keys crowd a few bins: most of a
    row in one bin (one bucket takes it, the next ones stay empty), signed zeros and NaNs
    among them (their values are read back from the row, not made from the key), and a
    row whose keys are all alike but one; bit-exact in both directions."""
    ctx = clients.client_for().server.ctx
    monkeypatch.setattr(ctx, "info", dataclasses.replace(ctx.info, kind="CPU", compute_units=8))
    rng = np.random.default_rng(21)
    n = 5 * RUN_SPLIT_MIN + 3
    crowded = np.array(rng.integers(0, 3, n), dtype)
    spread = np.array(rng.integers(0, 100, n // 10), dtype)
    crowded[rng.integers(0, n, n // 10)] = spread
    if np.dtype(dtype).kind == "f":
        crowded[rng.random(n) < 0.3] = -0.0
        crowded[rng.random(n) < 0.05] = np.nan
        crowded[rng.random(n) < 0.05] = rng.standard_normal(1).astype(dtype) * 1e20
    one_differs = np.full(n, 7, dtype)
    one_differs[n // 3] = 1
    for a in (crowded, one_differs, np.stack([crowded, one_differs, crowded[::-1].copy()])):
        with clients.inspect() as rec:
            check(clients.asarray(a), a)
        assert [k.name.split("_")[1] for k in rec.kernels[:4]] == ["histogram", "plan", "scatter", "buckets"]
        check(clients.asarray(a), a, descending=True)


@pytest.mark.parametrize("values", ["normal", "heavy bins", "crowded"])
def test_buckets_stop_at_their_cap(monkeypatch, values):
    """The plan fills each bucket with whole bins while it holds at most the cap: a bucket
    of two bins or more stays within it, two buckets in a row hold more than it, and the
    buckets stay within the bound bucket_layout gives; read back from the plan's bounds,
    the row sorted right by them."""
    ctx = clients.client_for().server.ctx
    monkeypatch.setattr(ctx, "info", dataclasses.replace(ctx.info, kind="CPU", compute_units=2))
    rng = np.random.default_rng(5)
    n = 3 * sort_plan.LANE_BUCKET * 7 + 11
    a = {"normal": lambda: rng.standard_normal(n, dtype=np.float32),
         "heavy bins": lambda: 1 + rng.random(n, dtype=np.float32) / 16,  # 8 bins of n / 8 keys
         "crowded": lambda: rng.integers(0, 40, n).astype(np.float32)}[values]()
    plans = []
    launch_rows = sort_plan.SortPlan._launch_rows

    def keeping_the_bounds(self, ctx, kernel, items, args, *alone):
        launch_rows(self, ctx, kernel, items, args, *alone)
        if kernel.function_name.startswith("sort_plan_"):  # (hist, rows, n, chunks, buckets, cap, .., bounds)
            bounds = np.empty(int(args[4]) + 1, np.uint32)
            plans.append((int(args[4]), int(args[5]), bounds, cl.enqueue_copy(ctx.queue, bounds, args[8],
                                                                                is_blocking=False)))

    monkeypatch.setattr(sort_plan.SortPlan, "_launch_rows", keeping_the_bounds)
    check(clients.asarray(a), a)  # a sort (buckets in lanes) and an argsort (radix-sorted buckets)
    clients.sync()
    keys = np.sort(a).view(np.uint32) >> (32 - BIN_BITS)  # (the bins of these floats, all positive or all not)
    in_lanes = sort_plan.buckets_in_lanes(a.dtype, n, clients.client_for().server.widths.of_size(4))
    for (buckets, cap, bounds, copied), pairs in zip(plans, (sort_plan.LANE_BUCKET if in_lanes else BUCKET_PAIRS,
                                                             BUCKET_PAIRS), strict=True):
        copied.wait()
        assert (buckets, cap) == bucket_layout(n, 1, 2, pairs)[1:]
        sizes = np.diff(bounds.astype(np.int64))
        assert bounds[0] == 0 and bounds[-1] == n and np.all(sizes >= 0)
        for start, size in zip(bounds[:-1], sizes):
            if size > cap:  # only a bin of more than cap keys, alone
                assert keys[start] == keys[start + size - 1]
        used = sizes[sizes > 0]
        assert np.all(used[:-1] + used[1:] > cap)
        if values == "heavy bins" and cap == sort_plan.LANE_BUCKET:
            assert used.max() > cap  # (bins of more than the cap: each a bucket alone)


def lane_rows(n: int, dtype, seed: int) -> np.ndarray:
    """Rows of `n` for the lane sort: floats with NaNs, both zeros and infinities among
    spread values; ints over their whole range with ties and both extremes."""
    rng = np.random.default_rng(seed)
    shape = (5, n)
    if np.dtype(dtype).kind == "f":
        a = (rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 4, shape)).astype(dtype)
        for value, share in ((np.nan, 0.08), (0.0, 0.08), (-0.0, 0.08), (-np.inf, 0.03), (np.inf, 0.03)):
            a[rng.random(shape) < share] = value
        a[1] = a[1, 0]  # a row all alike (a NaN, a zero or a number)
        return a
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    a[:, ::3] = a[:, :1]
    a[:, 1::7], a[:, 2::7] = info.min, info.max
    return a


@pytest.fixture(params=[lane_sort.LANES, lane_sort.NARROW_LANES], ids=lambda lanes: f"{lanes}lanes")
def sorts_in_lanes(request, monkeypatch):
    """The CPU devices' stages, with 4-byte values at each width of the lane sort (16 and
    8 lanes; the lanes, the fixture's value): forced on a GPU whose widths are narrower
    and on a CPU qualified at 16 (for 8); a CPU driver that did not qualify the width
    sorts by radix instead (test_a_device_qualified_at_8_lanes_sorts_buckets_by_radix)."""
    lanes = request.param
    widths = clients.client_for().server.widths
    if widths.w4 < lanes and INFO.kind == "CPU":
        pytest.skip(f"{INFO.label} did not qualify {lanes} lanes of 4-byte values ({widths})")
    monkeypatch.setattr(sort_plan, "first_stage_for", lambda kind: "runs")
    if widths.w4 == lanes:
        yield lanes
        return
    with server_settings(widths=widths._replace(w4=lanes)):
        yield lanes


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dtype", lane_sort.DTYPES, ids=lambda d: np.dtype(d).name)
def test_the_lane_sort_of_many_short_rows(sorts_in_lanes, dtype, descending):
    """CPU devices sort rows of 4-byte values (values only) with one work-item each by a
    bitonic network in 16- or 8-lane vectors (forced where the device is not a CPU): rows
    of one vector or less, of a vector and a tail, of powers of two up to the widest, each
    padded and bit-exact against numpy's stable sort, zeros and NaNs in their input order;
    one kernel each, named for its width and lanes, and argsort keeps the radix sort."""
    lanes = sorts_in_lanes
    for n in (1, 2, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 100, 257, 1000, 1024, lane_sort.MAX_WIDTH - 3,
              lane_sort.MAX_WIDTH):
        a = lane_rows(n, dtype, seed=n)
        with clients.inspect() as rec:
            check(clients.asarray(a), a, descending=descending)
        network, radix = rec.kernels
        assert network.name in (lane_sort.kernel_name(np.dtype(dtype), lane_sort.width_for(n, lanes), lanes),
                                f"sort_runs_{np.dtype(dtype).name}_v") and (network.fallback or "lanes" in network.name)
        assert radix.name == f"sort_runs_{np.dtype(dtype).name}_i"
    assert lane_sort.width_for(1) == lane_sort.width_for(16) == 16 and lane_sort.width_for(17) == 32
    assert lane_sort.width_for(1, 8) == lane_sort.width_for(8, 8) == 8 and lane_sort.width_for(9, 8) == 16
    assert lane_sort.kernel_name(np.dtype(np.int32), 64, 8) == "sort_lanes_int32_64_x8"
    assert sort_plan.by_lanes(np.dtype(np.float32), lane_sort.MAX_WIDTH, 16)
    assert not sort_plan.by_lanes(np.dtype(np.float32), lane_sort.MAX_WIDTH + 1, 16)
    assert not sort_plan.by_lanes(np.dtype(np.int64), 100, 16) and not sort_plan.by_lanes(np.dtype(np.uint8), 100, 16)
    assert sort_plan.by_lanes(np.dtype(np.float32), 100, 8)  # 4-byte values qualified at 8 lanes
    assert not sort_plan.by_lanes(np.dtype(np.float32), 100, 4)  # nor at 8: the radix sort
    assert [lane_sort.lanes_for(w) for w in (32, 16, 8, 4, 1)] == [16, 16, 8, 0, 0]


@pytest.mark.parametrize("w4", [8, 4])
def test_a_device_qualified_at_8_lanes_sorts_buckets_by_radix(monkeypatch, w4):
    """Where 4-byte values qualified at 8 lanes, not 16 (the PoCL that pip brings, on AMD
    Zen 4: its compiler aborts the process on the 16-lane network, and builds the bucket
    stage in 8 lanes into a kernel that sorts wrong), rows are sorted in 8 lanes and the
    buckets of one long row by radix; at 4 lanes, rows by radix too. The values stay
    right."""
    monkeypatch.setattr(sort_plan, "first_stage_for", lambda kind: "runs")
    rows = lane_rows(300, np.float32, seed=4)
    row = data((1, 3 * RUN_SPLIT_MIN), np.float32, seed=5)
    widths = clients.client_for().server.widths
    if INFO.kind == "CPU" and widths.w4 < w4:
        pytest.skip(f"{INFO.label} did not qualify {w4} lanes of 4-byte values ({widths})")
    narrow = VectorWidths(min(widths.w1, w4), min(widths.w2, w4), w4, min(widths.w8, w4))
    with server_settings(widths=narrow):
        with clients.inspect() as rec:
            check(clients.asarray(rows), rows)
            check(clients.asarray(row), row)
    sorts = [k for k in rec.kernels if k.name.startswith("sort_")]
    names = [k.name for k in sorts]
    if w4 == 8:  # (a driver without the lane shuffles builds the radix sort: its fallback says so)
        assert names[0] == "sort_lanes_float32_512_x8" or (names[0] == "sort_runs_float32_v" and sorts[0].fallback)
    else:
        assert names[0] == "sort_runs_float32_v"
    assert "sort_buckets_float32_v" in names
    assert not any("lanes" in name for name in names[1:])
    assert not sort_plan.buckets_in_lanes(np.dtype(np.float32), 1 << 16, 8)


def test_the_lane_sort_of_views_and_offsets(sorts_in_lanes):
    """Rows read from an offset into their storage (the last row's tail read lane by lane,
    the others' as whole vectors), a transposed input, and a sort inside a fused chain."""
    a = lane_rows(37, np.float32, seed=3)
    x = clients.asarray(a)
    for view, host in ((x[2:], a[2:]), (x[:, 5:], a[:, 5:]), (x.T, a.T)):
        got = clients.sort(view).numpy()
        np.testing.assert_array_equal(got.view(np.uint32), np_sort(np.ascontiguousarray(host)).view(np.uint32))
    got = (clients.sort(clients.abs(x) * 2.0) + 1.0).numpy()
    np.testing.assert_array_equal(got, np.sort(np.abs(a) * np.float32(2), axis=-1) + np.float32(1))


def test_a_lane_sort_that_fails_to_build_runs_the_radix_sort(sorts_in_lanes, monkeypatch, client):
    """A driver whose compiler lacks the lane shuffles: the build fails, the radix sort is
    built in its place and launched with its own arguments; the values stay right."""
    programs = client.server.runtime.programs
    spec = SortSpec("sort", "lanes", np.dtype(np.uint32), True, False, 64, sorts_in_lanes)
    monkeypatch.delitem(programs._kernels, spec, raising=False)  # built again in this test
    monkeypatch.setattr(programs, "fallbacks", dict(programs.fallbacks))
    a = lane_rows(50, np.uint32, seed=9)
    with failing_builds(programs, "__builtin_shufflevector", when=lambda key: key == spec,
                        error=lambda name: KernelBuildError(f"OpenCL build of {name} failed:\nerror: no shuffles")):
        with clients.inspect() as rec:
            got = clients.sort(clients.asarray(a), descending=True).numpy()
    np.testing.assert_array_equal(got, np_sort(a, descending=True))
    (record,) = rec.kernels
    assert record.name == "sort_runs_uint32_v" and "no shuffles" in record.fallback
    # Buckets sorted in lanes fall back to radix-sorted buckets the same way.
    lanes_buckets = spec._replace(stage="buckets", width=sort_plan.LANE_BUCKET_WIDTH)
    assert scalar_variant(lanes_buckets) == spec._replace(stage="buckets", width=0, lanes=lane_sort.LANES)
    assert scalar_variant(spec._replace(stage="scatter", width=0)) is None
