"""Dear values read through shifted views, staged in local memory: one kernel per stencil.

A value whose views would cost more to recompute than the budget, read only through
shifts (slices with unit steps), is computed by each work-group over its tile and halo
into local memory, and the stencil reads it there (fusers/staging.py). Values against
numpy at sizes that leave ragged tiles; the kernel count and the note against inspect().
"""

from __future__ import annotations

import numpy as np
import pytest
from _values import box_blur, laplacian
from conftest import failing_builds, rand, server_settings

import clients
from fusion_server.codegen import stencil as sg
from fusion_server.fusers import staging
from fusion_server.runtime.programs import KernelBuildError


def _staged(rec) -> list:
    return [k for k in rec.kernels if k.variant.startswith("staged")]


# (shapes: one tile, ragged tiles on both axes, several tiles of each device kind's geometry,
# a single row of outputs, a single column)
@pytest.mark.parametrize("shape", [(5, 7), (37, 41), (70, 300), (3, 50), (50, 3)])
def test_a_box_blur_of_a_dear_value_is_one_staged_kernel(shape):
    a = np.abs(rand(shape)) + np.float32(0.1)
    x = clients.asarray(a)
    with clients.inspect() as rec:
        got = box_blur(x ** 2.2).numpy()
    np.testing.assert_allclose(got, box_blur(a ** np.float32(2.2)), rtol=2e-5, atol=1e-6)
    assert len(rec.kernels) == 1
    assert sorted(rec.kernels[0].ops) == ["add"] * 8 + ["divide", "pow"]  # pow once: staged
    assert rec.kernels[0].variant.startswith("staged, tile")
    assert "stages pow in local memory for its 9 views: one kernel" in rec.explain()


def test_staging_off_writes_the_value_and_reads_it_back():
    a = np.abs(rand((20, 24)))
    x = clients.asarray(a)
    with server_settings(stencil_staging=False), clients.inspect() as rec:
        got = box_blur(x ** 2.2).numpy()
    np.testing.assert_allclose(got, box_blur(a ** np.float32(2.2)), rtol=2e-5, atol=1e-6)
    assert [k.ops for k in rec.kernels] == [["pow"], ["add"] * 8 + ["divide"]]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.uint8])
def test_a_laplacian_staged_in_every_dtype(dtype):
    """Integer values through a dear op (floor_divide, remainder), float through exp."""
    a = rand((33, 70), seed=2)
    if np.dtype(dtype).kind == "f":
        if dtype == np.float64 and not clients.client_for().server.info.fp64:
            pytest.skip("no float64 on this device")
        host = a.astype(dtype)
        x = clients.asarray(host)
        with server_settings(recompute_budget=0), clients.inspect() as rec:
            got = laplacian(clients.exp(x) * 0.5).numpy()
        want = laplacian(np.exp(host) * dtype(0.5))
        np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-5)
    else:
        host = (a * 200).astype(dtype)
        x = clients.asarray(host)
        with server_settings(recompute_budget=0), clients.inspect() as rec:
            got = laplacian(x // 3 + x % 7).numpy()
        np.testing.assert_array_equal(got, laplacian(host // dtype(3) + host % dtype(7)))
    assert len(rec.kernels) == 1 and len(_staged(rec)) == 1


def test_a_one_dimensional_stencil_and_other_inputs_of_the_second_part():
    """Shifts of a 1-D value, an input of the stencil read at the output's coordinates
    (a transposed one too), a scalar in each part."""
    a, w = rand((5000,)), rand((4998,), seed=1)
    x, tw = clients.asarray(a), clients.asarray(w)
    with server_settings(recompute_budget=0), clients.inspect() as rec:
        g = clients.sqrt(clients.abs(x) + 0.5)
        y = (g[2:] - 2 * g[1:-1] + g[:-2]) * tw + 0.25
        del g
        got = y.numpy()
    h = np.sqrt(np.abs(a) + np.float32(0.5))
    np.testing.assert_allclose(got, (h[2:] - 2 * h[1:-1] + h[:-2]) * w + np.float32(0.25), rtol=1e-4, atol=1e-5)
    assert len(rec.kernels) == 1 and len(_staged(rec)) == 1

    b, m = rand((40, 60), seed=3), rand((58, 38), seed=4)
    y, tm = clients.asarray(b), clients.asarray(m)
    with server_settings(recompute_budget=0), clients.inspect() as rec:
        got = (box_blur(clients.log1p(clients.abs(y))) * tm.T).numpy()
    np.testing.assert_allclose(got, box_blur(np.log1p(np.abs(b))) * m.T, rtol=1e-5, atol=1e-6)
    assert len(_staged(rec)) == 1


def test_a_batch_of_planes_stages_each_plane():
    """A 3-D value whose views shift its last two dimensions only: one plane per grid
    layer; inputs of the second part broadcast along the batch or read transposed."""
    a, w = np.abs(rand((5, 21, 70))), rand((19, 68), seed=1)
    x, tw = clients.asarray(a), clients.asarray(w)
    with clients.inspect() as rec:
        got = (box_blur3(x ** 2.2) * tw).numpy()
    np.testing.assert_allclose(got, box_blur3(a ** np.float32(2.2)) * w, rtol=2e-5, atol=1e-6)
    assert len(rec.kernels) == 1 and len(_staged(rec)) == 1
    b = rand((3, 30, 9), seed=2)
    y, tb = clients.asarray(b), clients.asarray(np.transpose(b, (0, 2, 1)).copy())
    with server_settings(recompute_budget=0), clients.inspect() as rec:
        g = clients.exp(y)
        z = g[:, 1:, :] - g[:, :-1, :] + clients.permute_dims(tb, (0, 2, 1))[:, 1:, :]
        del g
        got = z.numpy()
    e = np.exp(b)
    np.testing.assert_allclose(got, e[:, 1:] - e[:, :-1] + b[:, 1:], rtol=1e-5, atol=1e-6)
    assert len(_staged(rec)) == 1
    with server_settings(recompute_budget=0), clients.inspect() as rec:
        g = clients.exp(y)
        z = g[1:] + g[:-1]  # shifted along the batch: not staged
        del g
        got = z.numpy()
    np.testing.assert_allclose(got, e[1:] + e[:-1], rtol=1e-5, atol=1e-6)
    assert not _staged(rec) and "shift the value along its first of three dimensions" in rec.explain()


def box_blur3(g):
    return (g[:, :-2, :-2] + g[:, 1:-1, :-2] + g[:, 2:, :-2] + g[:, :-2, 1:-1] + g[:, 1:-1, 1:-1]
            + g[:, 2:, 1:-1] + g[:, :-2, 2:] + g[:, 1:-1, 2:] + g[:, 2:, 2:]) / 9


def test_two_staged_values_in_one_kernel():
    a = rand((30, 40))
    x = clients.asarray(a)
    with server_settings(recompute_budget=0), clients.inspect() as rec:
        e = clients.exp(x)
        s = clients.sin(x)
        y = e[1:, 1:] * s[:-1, :-1] + e[:-1, 1:] - s[1:, :-1]
        del e, s
        got = y.numpy()
    ne, ns = np.exp(a), np.sin(a)
    np.testing.assert_allclose(got, ne[1:, 1:] * ns[:-1, :-1] + ne[:-1, 1:] - ns[1:, :-1], rtol=1e-5, atol=1e-6)
    assert len(rec.kernels) == 1 and len(_staged(rec)) == 1
    assert sorted(rec.kernels[0].ops).count("exp") == 1


@pytest.mark.parametrize("why, build, says", [
    ("a transpose", lambda g: g - g.T, "a view transposes, flips or strides its value"),
    ("a flip", lambda g: g[::-1] + g, "a view transposes, flips or strides its value"),
    ("a strided view", lambda g: g[::2, ::2] + g[1::2, 1::2], "a view transposes, flips or strides its value"),
    ("a wide halo", lambda g: g[:-12] + g[12:], "the views' shifts span 12 elements, over 8"),
    ("a held value", None, "a value of the first part lives on after the block"),
])
def test_views_that_do_not_stage_run_as_two_kernels(why, build, says):
    a = rand((24, 24))
    x = clients.asarray(a)
    g_np = np.exp(a)
    with server_settings(recompute_budget=0), clients.inspect() as rec:
        g = clients.exp(x)
        if build is None:  # the value lives on after the block: written anyway
            got = box_blur(g).numpy()
            np.testing.assert_allclose(g.numpy(), g_np, rtol=1e-6)
            want = box_blur(g_np)
        else:
            y = build(g)
            del g
            got = y.numpy()
            want = build(g_np)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=why)
    assert not _staged(rec), why
    assert len(rec.kernels) == 2, why
    assert f"(not staged in local memory: {says})" in rec.explain()


def test_a_staged_kernel_that_fails_to_build_fails_its_block_only(server):
    a = np.abs(rand((16, 16)))
    x = clients.asarray(a)
    with server_settings(recompute_budget=0), failing_builds(server.runtime.programs, "tile0", RuntimeError):
        y = box_blur(clients.log2(x + 1.0) * 1.5)
        other = x + 1.0
        with pytest.raises(clients.TensorFailedError, match="staged stencil"):
            y.numpy()
        np.testing.assert_allclose(other.numpy(), a + 1, rtol=1e-6)
    # (a kernel that failed to build stays failed: another one)
    np.testing.assert_allclose(box_blur(clients.log2(x * x + 2.0) - 1.5).numpy(),
                               box_blur(np.log2(a * a + np.float32(2)) - np.float32(1.5)), rtol=1e-5, atol=1e-5)


def test_a_staged_vector_kernel_that_fails_to_build_runs_as_scalar_code(server):
    a = np.abs(rand((30, 300))) + np.float32(0.1)
    x = clients.asarray(a)
    def fails(name):
        return KernelBuildError(f"{name}: no local vectors here (injected)")

    with failing_builds(server.runtime.programs, "VLOAD_LOCAL", fails), clients.inspect() as rec:
        got = box_blur(clients.sqrt(x) ** 1.7).numpy()
    np.testing.assert_allclose(got, box_blur(np.sqrt(a) ** np.float32(1.7)), rtol=2e-5, atol=1e-6)
    assert len(_staged(rec)) == 1
    vector_code = staging.width_of(server.ctx, (), {np.dtype(np.float32)}) > 1
    assert bool(rec.kernels[0].fallback) == vector_code  # (scalar already elsewhere: nothing failed)


def test_a_staged_stencil_replays_from_the_plan_store_and_under_jit():
    before = clients.stats()["plan_hits"]
    for n in (20, 20, 45):
        a = np.abs(rand((n, n + 3), seed=n))
        x = clients.asarray(a)
        with clients.inspect() as rec:
            got = box_blur(x ** 2.2).numpy()
        np.testing.assert_allclose(got, box_blur(a ** np.float32(2.2)), rtol=2e-5, atol=1e-6)
        assert len(_staged(rec)) == 1
    assert clients.stats()["plan_hits"] > before

    @clients.jit
    def blur(u):
        return box_blur(u ** 2.2)

    for seed in range(3):
        a = np.abs(rand((30, 30), seed=seed))
        np.testing.assert_allclose(blur(clients.asarray(a)).numpy(), box_blur(a ** np.float32(2.2)),
                                   rtol=2e-5, atol=1e-6)
    with clients.inspect() as rec:
        blur(clients.asarray(np.abs(rand((30, 30))))).numpy()
    assert len(rec.kernels) == 1


def test_devices_that_stage_first_stage_cheap_values_too(monkeypatch):
    """Where the device kind stages before recomputing (GPUs), a cheap value's shifted
    views are staged too; a budget set explicitly is obeyed as it is."""
    kind = clients.client_for().server.info.kind
    monkeypatch.setitem(staging.STAGE_FIRST, kind, True)
    a = rand((40, 50))
    x = clients.asarray(a)
    with clients.inspect() as rec:
        got = laplacian(x * 0.5 + 0.25).numpy()
    np.testing.assert_allclose(got, laplacian(a * np.float32(0.5) + np.float32(0.25)), rtol=1e-5, atol=1e-5)
    assert len(_staged(rec)) == 1 and sorted(rec.kernels[0].ops).count("multiply") == 2  # (one in the stencil)
    with server_settings(recompute_budget=10**6), clients.inspect() as rec:
        laplacian(x * 0.5 + 0.25).numpy()
    assert not _staged(rec) and "recomputes" in rec.explain()
    monkeypatch.setitem(staging.STAGE_FIRST, kind, False)
    with clients.inspect() as rec:
        got = laplacian(x * 0.5 + 0.25).numpy()
    assert not _staged(rec) and "recomputes" in rec.explain()


def test_each_geometry_covers_its_tile():
    for kind in ("GPU", "CPU"):
        for rank in (1, 2):
            for width in (1, 4, 16):
                for halo in ((0, 1), (2, 2), (0, 8), (8, 8)):
                    if rank == 1:
                        halo = (0, halo[1])
                    (ly, lx), (ty, tx) = staging.geometry(kind, rank, halo, width)
                    assert ty >= 1 and tx >= 1 and ly * lx <= 1024
                    if rank == 1:
                        assert ly == ty == 1
                    if kind == "CPU" and width > 1:
                        assert lx * width == tx  # whole vectors of outputs per row
    spec = sg.StencilSpec(value_ops=(), value_inputs=(), staged=(), ops=(), inputs=(), taps=(), scalars=(),
                          value_scalars=0, outputs=(), index="int", local=(8, 32), tile=(32, 32), halo=(2, 2))
    assert sg.staged_shape(spec) == (34, 34) and sg.local_bytes(spec) == 0


# (the staging loop of scalar code: rows of work-items over whole staged rows, as CPU
# drivers that run work-items in lanes get; the flat index over a staged array that the
# work-group does not cover in whole rows, as a GPU's 34 x 34 over 8 x 32 work-items)
@pytest.mark.parametrize("geometry", [((16, 64), None), ((8, 32), (32, 32))], ids=["rows", "flat"])
def test_scalar_staging_reads_rows_broadcasts_and_transposes(monkeypatch, geometry):
    """Value inputs read along rows (no column stride in the load), broadcast along rows
    (one element) and transposed (through the strides), in both staging loops."""
    monkeypatch.setitem(staging.GEOMETRY, ("GPU" if clients.client_for().server.info.kind == "GPU" else "CPU", 2),
                        geometry)
    monkeypatch.setattr(staging, "width_of", lambda ctx, trace, dtypes: 1)
    shape = (45, 83) if geometry[1] is None else (47, 81)  # (shapes of their own: layouts are memoized)
    a, c, t = np.abs(rand(shape)) + np.float32(0.1), rand((shape[0], 1), seed=1), rand(shape[::-1], seed=2)
    x, col, tt = clients.asarray(a), clients.asarray(c), clients.asarray(t)
    with clients.inspect() as rec:
        # (tt.T beside the row-major x ** 2.2: read transposed, where `col * tt.T` alone
        # would run in tt's memory order)
        got = box_blur((x ** 2.2 + tt.T) * col).numpy()
    np.testing.assert_allclose(got, box_blur((a ** np.float32(2.2) + t.T) * c), rtol=2e-5, atol=1e-5)
    assert len(rec.kernels) == 1 and len(_staged(rec)) == 1
    assert rec.kernels[0].variant == f"staged, tile {'14 x 62' if geometry[1] is None else '32 x 32'}, halo 2 x 2"


def test_the_scalar_staging_loop_follows_the_work_items_along_rows():
    """Where the work-group covers whole staged rows, a work-item's column is its local
    id (consecutive addresses across work-items); a row input is read without its
    column stride, a broadcast one at its row's element, another through the stride."""
    def spec(local, tile, classes):
        return sg.StencilSpec(value_ops=(), value_inputs=(np.dtype(np.float32),) * 3, staged=(), ops=(), inputs=(),
                              taps=(), scalars=(), value_scalars=0, outputs=(), index="int", local=local, tile=tile,
                              halo=(2, 2), value_classes=classes)
    source, _ = sg.generate(spec((16, 64), (14, 62), ("row", "splat", "gather")))
    assert "for (int i = ly; i < 16; i += 16)" in source and "t % " not in source
    assert "vin0[VO0 + gb * VC0 + gy * VA0 + gx]" in source
    assert "vin1[VO1 + gb * VC1 + gy * VA1]" in source
    assert "vin2[VO2 + gb * VC2 + gy * VA2 + gx * VB2]" in source
    source, _ = sg.generate(spec((8, 32), (32, 32), ("row", "row", "row")))
    assert "t / 34" in source and "t % 34" in source
