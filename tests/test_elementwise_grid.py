"""Strided element-wise blocks over a 2-D grid, where the driver packs work-items into lanes.

Intel's CPU runtime runs work-items in vector lanes. A strided block's flat index, divided
by the row length to find each element's coordinates, hid from its vectorizer that
neighbouring work-items read neighbouring elements: every load was a gather. Over a 2-D
grid (KernelSpec.grid) a work-item's column is its first global id and its row the
second. Forced here with the server's `pack_lanes` setting, so that every driver runs
these kernels; values against numpy, the variant against inspect().
"""

from __future__ import annotations

import numpy as np
import pytest
from _values import box_blur
from conftest import rand, server_settings

import clients
from fusion_server.codegen import elementwise as cg
from fusion_server.fusers import elementwise as ew

GRID = "width 1, 2-D grid"


CASES = {
    # nine views of a value recomputed, rows of 300 (a group's columns cover them ragged)
    "box blur": ((40, 302), lambda x: box_blur(x * x), lambda a: box_blur(a * a)),
    # a transposed read: the last stride is not 1 (of a value read in its own order too: a
    # CPU writes one read only transposed, see test_transposed_inputs.py)
    "transpose": ((260, 260), lambda x: (lambda v: v - v.T)(x * 3 + 1), lambda a: (a * 3 + 1) - (a * 3 + 1).T),
    # three collapsed dimensions, an input broadcast along the rows (last stride 0)
    "planes": ((3, 11, 290), lambda x: x[:, 1:, 1:] + x[:, :-1, :-1] * x[:, 1:, :1],
               lambda a: a[:, 1:, 1:] + a[:, :-1, :-1] * a[:, 1:, :1]),
}


@pytest.mark.parametrize("case", CASES)
def test_strided_blocks_run_over_a_grid_where_the_driver_packs_lanes(case):
    shape, build, want = CASES[case]
    a = rand(shape, seed=len(case))
    x = clients.asarray(a)
    # (recomputed at every view: GPUs would stage the blur's value in local memory)
    with server_settings(pack_lanes=True, recompute_budget=10**6), clients.inspect() as rec:
        got = build(x).numpy()
    np.testing.assert_allclose(got, want(a), rtol=1e-5, atol=1e-5)
    assert [k.variant for k in rec.kernels] == [GRID]
    with clients.inspect() as rec:  # (the driver's own rule again)
        np.testing.assert_allclose(build(x).numpy(), want(a), rtol=1e-5, atol=1e-5)
    if clients.client_for().server.pack_lanes:
        assert [k.variant for k in rec.kernels] == [GRID]
    else:
        assert GRID not in [k.variant for k in rec.kernels]


def test_short_rows_and_contiguous_blocks_keep_their_kernels():
    """Rows shorter than GRID_ROW_MIN would leave most of a group's lanes idle; a block
    with no strided input has no rows to follow."""
    a = rand((300, ew.GRID_ROW_MIN - 2))
    x = clients.asarray(a)
    with server_settings(pack_lanes=True), clients.inspect() as rec:
        shifted = (x[:, 1:] + x[:, :-1]).numpy()
        flat = (x * 2 + 1).numpy()
    np.testing.assert_allclose(shifted, a[:, 1:] + a[:, :-1], rtol=1e-6)
    np.testing.assert_allclose(flat, a * 2 + 1, rtol=1e-6)
    shifted_kernel, flat_kernel = rec.kernels
    assert shifted_kernel.variant != GRID and flat_kernel.variant == "width 1"


def test_a_grid_kernel_replays_under_jit():
    a, b = rand((40, 400), seed=1), rand((40, 400), seed=2)
    with server_settings(pack_lanes=True):
        f = clients.jit(lambda x: x[:, 2:] * 0.5 - x[:, :-2])
        for host in (a, b, a):
            with clients.inspect() as rec:
                got = f(clients.asarray(host)).numpy()
            np.testing.assert_allclose(got, host[:, 2:] * np.float32(0.5) - host[:, :-2], rtol=1e-6, atol=1e-6)
            assert [k.variant for k in rec.kernels] == [GRID]
    assert clients.stats()["jit_replays"] >= 2


def test_the_grid_source_follows_the_work_item_along_rows():
    """The column is the first global id, the row the second; a last stride known to be 1
    (or 0) is left out of the address, so that neighbouring work-items read neighbouring
    (or the same) elements."""
    trace = (cg.TraceOp("add", np.dtype(np.float32), np.dtype(np.float32), (("i", 0), ("i", 1))),
             cg.TraceOp("add", np.dtype(np.float32), np.dtype(np.float32), (("v", 0), ("i", 2))))
    f32 = np.dtype(np.float32)
    spec = cg.KernelSpec(ops=trace, inputs=((f32, "strided1"), (f32, "strided0"), (f32, "strided")), scalars=(),
                         outputs=(1,), width=1, index="long", rank=3, grid=True)
    source, _ = cg.generate(spec)
    assert "const IDX col = (IDX)get_global_id(0), row = (IDX)get_global_id(1);" in source
    assert "const IDX q0 = c0 * S0_0 + c1 * S0_1 + c2;" in source
    assert "const IDX q1 = c0 * S1_0 + c1 * S1_1;" in source
    assert "const IDX q2 = c0 * S2_0 + c1 * S2_1 + c2 * S2_2;" in source
    assert "const IDX c2 = col;" in source and "IDX rem = row;" in source and "c1 = rem % D1" in source


@pytest.mark.parametrize("pack_lanes", [True, False])
def test_element_wise_kernels_index_in_64_bits_where_the_driver_packs_lanes(pack_lanes):
    """Intel's vectorizer made every load and store at a 32-bit index made from the
    work-item's id a gather or a scatter ("16-way vectorized, 1 gathers 1 scatters" for
    `out[i] = in[i] * a + 1`): such drivers get 64-bit indices, others keep 32 bits
    where the sizes allow. (The kernels of a trace of their own, looked up among those
    built.)"""
    a = np.abs(rand((300, 520), seed=7))
    x = clients.asarray(a)
    with server_settings(pack_lanes=pack_lanes):
        got_flat = (clients.hypot(x * 3.5, 0.75) - 1.25).numpy()
        got_rows = (clients.hypot(x[:, 3:] * 3.5, x[:, :-3]) - 1.25).numpy()
    np.testing.assert_allclose(got_flat, np.hypot(a * np.float32(3.5), np.float32(0.75)) - np.float32(1.25),
                               rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got_rows, np.hypot(a[:, 3:] * np.float32(3.5), a[:, :-3]) - np.float32(1.25),
                               rtol=1e-6, atol=1e-6)
    built = {(k.index, k.grid) for k in clients.client_for().server.runtime.programs.keys()
             if isinstance(k, cg.KernelSpec) and [op.name for op in k.ops] == ["multiply", "hypot", "subtract"]}
    index = "long" if pack_lanes else "int"
    assert {(index, False), (index, pack_lanes)} <= built
