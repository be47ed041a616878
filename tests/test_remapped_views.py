"""Slices, shifts, flips and transposes of values computed in the same block.

A view in another element order of a block value is read by computing the value again
at the view's coordinates (its cone of element-wise ops, inputs read at composed
layouts), so stencils over a computed value are one kernel. A value whose views would
cost more to recompute than the device's budget is written and read back instead, and
so is a value of the block's first shape that lives on after it; `explain()` says which.
"""

from __future__ import annotations

import numpy as np
import pytest
from _values import box_blur, laplacian
from conftest import failing_builds, rand, server_settings
from hypothesis import given, settings
from hypothesis import strategies as st

import clients
from fusion_server.fusers import remap
from fusion_server.handles import Entry, Storage
from fusion_server.ir import TensorIr, contiguous_strides


@pytest.fixture(autouse=True)
def _no_staging():
    """Recomputing and writing back, on every device (GPUs would stage shifted views
    first: test_staged_stencils.py)."""
    with server_settings(stencil_staging=False):
        yield


def _ops(rec) -> list[list[str]]:
    return [k.ops for k in rec.kernels]


@pytest.mark.parametrize("shape", [(5, 7), (37, 41), (64, 64)])
def test_a_box_blur_of_a_computed_value_is_one_kernel(shape):
    a = rand(shape)
    x = clients.asarray(a)
    with clients.inspect() as rec:
        got = box_blur(x * x).numpy()
    np.testing.assert_allclose(got, box_blur(a * a), rtol=1e-5, atol=1e-6)
    assert len(rec.kernels) == 1
    assert sorted(rec.kernels[0].ops) == ["add"] * 8 + ["divide"] + ["multiply"] * 9
    assert "recomputes multiply at 9 views in another element order" in rec.explain()


def test_a_laplacian_of_a_computed_value_is_one_kernel():
    a = rand((30, 20))
    x = clients.asarray(a)
    with clients.inspect() as rec:
        got = laplacian(x * 2.0 + 1.0).numpy()
    np.testing.assert_allclose(got, laplacian(a * np.float32(2) + 1), rtol=1e-5, atol=1e-5)
    assert len(rec.kernels) == 1
    assert rec.kernels[0].ops.count("add") == 5 + 3  # five recomputed cones, three adds of the stencil


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_x_minus_its_transpose_is_one_kernel(dtype):
    a = (rand((9, 9)) * 100).astype(dtype)
    t = clients.asarray(a)
    with clients.inspect() as rec:
        x = t * 3 + 1
        got = (x - x.T).numpy()
    x_np = a * dtype(3) + dtype(1)
    np.testing.assert_allclose(got, x_np - x_np.T, rtol=1e-6)
    assert len(rec.kernels) == 1
    assert sorted(rec.kernels[0].ops) == ["add", "add", "multiply", "multiply", "subtract"]
    np.testing.assert_allclose(x.numpy(), x_np)  # still held: written by the same kernel


@pytest.mark.parametrize("view", [
    lambda v: v[::-1],
    lambda v: v[:, ::-2],
    lambda v: v[1:, 2:5][::-1].T,
    lambda v: v[3],
    lambda v: v[None, 2:4],
    lambda v: clients.flip(v) if isinstance(v, clients.Tensor) else np.flip(v),
])
def test_flips_steps_and_picks_recompute_at_the_right_elements(view):
    a = rand((6, 8))
    b = rand((8,), seed=1)
    t, tb = clients.asarray(a), clients.asarray(b)
    with clients.inspect() as rec:
        got = (view(clients.exp(t) * tb) - 0.5).numpy()
    np.testing.assert_allclose(got, view(np.exp(a) * b) - np.float32(0.5), rtol=1e-5, atol=1e-6)
    assert len(rec.kernels) == 1


def test_three_dimensional_transposes_and_broadcast_views():
    a = rand((3, 4, 5))
    c = rand((2, 5, 3, 4), seed=2)
    t, tc = clients.asarray(a), clients.asarray(c)
    with clients.inspect() as rec:
        v = clients.sin(t) + 1.0
        y = clients.permute_dims(v, (2, 0, 1)) * tc  # the view broadcast to (2, 5, 3, 4)
        del v
        got = y.numpy()
    np.testing.assert_allclose(got, np.transpose(np.sin(a) + 1, (2, 0, 1)) * c, rtol=1e-5, atol=1e-6)
    assert len(rec.kernels) == 1


def test_a_value_whose_views_cost_too_much_is_written_and_read_back():
    """(with staging in local memory off: fusers/staging.py, test_staged_stencils.py)"""
    a = rand((20, 24))
    x = clients.asarray(a)
    for budget, kernels in ((0, 2), (10_000, 1)):
        with server_settings(recompute_budget=budget, stencil_staging=False), clients.inspect() as rec:
            got = box_blur(x ** 2.2).numpy()
        np.testing.assert_allclose(got, box_blur(a ** np.float32(2.2)), rtol=1e-5, atol=1e-6)
        assert len(rec.kernels) == kernels
    with server_settings(recompute_budget=0, stencil_staging=False), clients.inspect() as rec:
        box_blur(x ** 2.2).numpy()
    assert _ops(rec) == [["pow"], ["add"] * 8 + ["divide"]]
    assert "over the budget of 0: written, and read back by the next kernel" in rec.explain()


def test_a_dear_value_of_the_same_shape_splits_after_it():
    a = rand((7, 7))
    x = clients.asarray(a)
    with server_settings(recompute_budget=0), clients.inspect() as rec:
        y = clients.exp(x) + 1.0
        z = y - y.T + clients.exp(x)
        del y
        got = z.numpy()
    e = np.exp(a)
    np.testing.assert_allclose(got, (e + 1) - (e + 1).T + e, rtol=1e-5, atol=1e-5)
    assert [sorted(k) for k in _ops(rec)] == [["add", "exp"], ["add", "exp", "subtract"]]


def test_a_value_of_the_first_shape_held_after_the_block_gets_its_own_kernel():
    a = rand((12, 10))
    x = clients.asarray(a)
    with clients.inspect() as rec:
        g = clients.log1p(x) * 3.5  # still held when the block runs
        got = box_blur(g).numpy()
    want = np.log1p(a) * np.float32(3.5)
    np.testing.assert_allclose(got, box_blur(want), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(g.numpy(), want, rtol=1e-6)
    assert _ops(rec) == [["log1p", "multiply"], ["add"] * 8 + ["divide"]]
    assert "lives on after the block" in rec.explain()


def test_a_held_view_keeps_its_value_written():
    a = rand((6, 6))
    x = clients.asarray(a)
    with clients.inspect() as rec:
        g = x * 2.0
        v = g[1:]
        y = v + g[:-1]
        del g
        got = y.numpy()
    np.testing.assert_allclose(got, a[1:] * 2 + a[:-1] * 2, rtol=1e-6)
    np.testing.assert_allclose(v.numpy(), a[1:] * 2, rtol=1e-6)  # read from the written value
    assert len(rec.kernels) == 2  # the value of the first shape lives on through v


def test_replays_recompute_at_each_blocks_own_offsets():
    before = clients.stats()["plan_hits"]
    for n, shift in ((10, 1), (10, 2), (16, 3), (16, 1)):
        a = rand((n, n), seed=n + shift)
        x = clients.asarray(a)
        with clients.inspect() as rec:
            got = ((x * 0.5)[shift:, :-shift] - (x * 0.5)[:-shift, shift:]).numpy()
        h = a * np.float32(0.5)
        np.testing.assert_allclose(got, h[shift:, :-shift] - h[:-shift, shift:], rtol=1e-6)
        assert len(rec.kernels) == 1
    assert clients.stats()["plan_hits"] > before


def test_a_replayed_two_kernel_block_whose_view_no_longer_maps_is_explored_again():
    """The store's signature of a view says which value it views, not its strides: the
    second run's view (a transpose of a reshape) has no per-dimension map, found when
    the replayed block runs; it is explored afresh instead of failing."""
    rng = np.random.default_rng(0)
    for flat_view in (False, True, False, True):
        a, b = rng.random((5, 6), dtype=np.float32), rng.standard_normal((5, 6)).astype(np.float32)
        x, y = clients.asarray(a), clients.asarray(b)
        with server_settings(recompute_budget=24):
            h = x ** 2.2  # two views of pow cost 32: written, the rest in a second kernel
            k = y * 2
            v = clients.permute_dims(clients.reshape(k, (6, 5)), (1, 0)) if flat_view else k[::-1]
            m = h[::-1] + h[:, ::-1] + v
            del h, k, v
            got = m.numpy()
        hn, kn = a ** np.float32(2.2), b * 2
        vn = kn.reshape(6, 5).T if flat_view else kn[::-1]
        np.testing.assert_allclose(got, hn[::-1] + hn[:, ::-1] + vn, rtol=1e-5)


def test_a_block_cut_twice_launches_each_kernel_once():
    """A block that changes size, with a dear value on each side: three kernels, all
    built before the first runs (a build stops the block and runs it again from the
    start; a kernel launched before it would run twice)."""
    a, w = rand((9, 8)), rand((8, 8), seed=1)
    x, tw = clients.asarray(a), clients.asarray(w)
    before = clients.stats()["kernels_launched"]
    with server_settings(recompute_budget=0), clients.inspect() as rec:
        g = clients.log1p(clients.abs(x)) * 0.75  # (ops no other test builds: cold kernels)
        y = g[1:] * g[:-1]  # the block's second size
        k = clients.expm1(tw) - 0.125
        y = y + k.T
        del g, k
        got = y.numpy()
    gn = np.log1p(np.abs(a)) * np.float32(0.75)
    np.testing.assert_allclose(got, gn[1:] * gn[:-1] + (np.expm1(w) - np.float32(0.125)).T, rtol=1e-5, atol=1e-6)
    assert len(rec.kernels) == 3
    assert clients.stats()["kernels_launched"] - before == 3


def test_a_view_read_twice_is_recomputed_once():
    a = rand((5, 6))
    x = clients.asarray(a)
    with clients.inspect() as rec:
        v = clients.exp(x).T
        y = v * v + v
        del v
        got = y.numpy()
    e = np.exp(a).T
    np.testing.assert_allclose(got, e * e + e, rtol=1e-5)
    assert sorted(rec.kernels[0].ops) == ["add", "exp", "multiply"]


def test_views_past_the_binding_limit_close_the_block():
    a = rand((12, 12))
    x = clients.asarray(a)
    with server_settings(max_bindings=12), clients.inspect() as rec:
        got = box_blur(x * x + x).numpy()
    np.testing.assert_allclose(got, box_blur(a * a + a), rtol=1e-5, atol=1e-6)
    assert len(rec.kernels) >= 2
    assert all(k.bindings <= 12 for k in rec.kernels)
    assert "binding limit" in rec.explain()


def test_a_failed_first_kernel_fails_the_second_and_nothing_else(server):
    a = rand((8, 8))
    x = clients.asarray(a)
    with server_settings(recompute_budget=0, stencil_staging=False), \
            failing_builds(server.runtime.programs, "log2", RuntimeError):
        y = box_blur(clients.log2(x) * 1.5)  # written by a kernel that fails, read by one that builds
        other = x + 1.0
        with pytest.raises(clients.TensorFailedError, match="log2"):
            y.numpy()
        np.testing.assert_allclose(other.numpy(), a + 1, rtol=1e-6)
    # (a kernel that failed to build stays failed: another one)
    np.testing.assert_allclose(box_blur(clients.log2(x) + 1.5).numpy(),
                               box_blur(np.log2(a) + np.float32(1.5)), rtol=1e-5, atol=1e-6)


def test_a_jitted_stencil_replays_as_one_kernel():
    @clients.jit
    def step(u):
        return laplacian(u * 0.25)

    for seed in range(3):
        a = rand((16, 16), seed=seed)
        got = step(clients.asarray(a)).numpy()
        np.testing.assert_allclose(got, laplacian(a * np.float32(0.25)), rtol=1e-5, atol=1e-6)
    with clients.inspect() as rec:
        step(clients.asarray(rand((16, 16)))).numpy()
    assert len(rec.kernels) == 1


@settings(max_examples=40, deadline=None)
@given(
    shape=st.tuples(st.integers(1, 7), st.integers(1, 7)),
    starts=st.tuples(st.integers(0, 3), st.integers(0, 3)),
    steps=st.tuples(st.sampled_from([1, 2, -1, -2]), st.sampled_from([1, 2, -1])),
    transpose=st.booleans(),
)
def test_any_slice_of_a_computed_value_matches_numpy(shape, starts, steps, transpose):
    a = rand(shape)
    t = clients.asarray(a)
    key = tuple(slice(s, None, k) if k > 0 else slice(n - 1 - s, None, k)
                for s, k, n in zip(starts, steps, shape))
    v_np = (np.cos(a) * 2)[key]
    if transpose:
        v_np = v_np.T
    with clients.inspect() as rec:
        v = (clients.cos(t) * 2)[key]
        y = (v.T if transpose else v) + 1
        del v
        got = y.numpy()
    np.testing.assert_allclose(got, v_np + 1, rtol=1e-5, atol=1e-6)
    assert len(rec.kernels) <= 1


# -- the map itself ------------------------------------------------------------------------
def _entry(shape, strides, offset, storage=None) -> Entry:
    storage = storage or Storage(4 * 1000, 0, 0)
    return Entry(TensorIr(0, tuple(shape), np.dtype(np.float32)), storage, tuple(strides), offset,
                 tuple(strides) == contiguous_strides(tuple(shape)) and offset == 0)


@pytest.mark.parametrize("key", [
    (slice(1, None), slice(None, -2)),
    (slice(None, None, -1), slice(1, None, 3)),
    (2, slice(None)),
    (None, slice(1, 3), slice(None), None),
])
def test_view_map_finds_the_elements_numpy_views(key):
    base = np.arange(6 * 7).reshape(6, 7)
    view = base[key]
    entry = _entry(view.shape, tuple(s // base.itemsize for s in view.strides),
                   (view.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // base.itemsize)
    vm = remap.view_map(entry, base.shape)
    assert vm is not None
    for u in np.ndindex(view.shape):
        c = list(vm.start)
        for e, ax in enumerate(vm.axes):
            if ax is not None:
                c[ax[0]] += u[e] * ax[1]
        assert base[tuple(c)] == view[u]


def test_view_map_refuses_views_that_run_across_rows():
    assert remap.view_map(_entry((18,), (1,), 6), (4, 6)) is None  # a flattened slice
    assert remap.view_map(_entry((3,), (5,), 0), (4, 6)) is None  # a diagonal-like step
    assert remap.view_map(_entry((0, 3), (6, 1), 0), (4, 6)) is not None  # empty: nothing to read


def test_composed_layout_reads_the_input_at_the_mapped_elements():
    x = np.arange(4 * 6, dtype=np.float32).reshape(4, 6)
    col = np.arange(6, dtype=np.float32)
    vm = remap.view_map(_entry((3, 2), (1, 6), 7), (4, 6))  # the transposed block x[1:3, 1:4].T ... (3, 2)
    assert vm is not None
    for arr in (x, col):
        e = _entry(arr.shape, contiguous_strides(arr.shape), 0)
        offset, strides = remap.composed_layout(e, (4, 6), vm)
        flat = arr.reshape(-1)
        full = np.broadcast_to(arr, (4, 6))
        view = full[1:3, 1:4].T
        for u in np.ndindex(view.shape):
            assert flat[offset + sum(i * s for i, s in zip(u, strides))] == view[u]
