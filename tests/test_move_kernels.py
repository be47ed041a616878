"""The move kernel's variants (codegen/gather.py): gathers, scatters and concatenation over
a flat index, over a 2-D grid or by rows (a long last axis: the grid on GPUs and on drivers
that pack work-items into lanes, rows on other CPU drivers), and with the strides that are
0 or 1 spelled as constants. Values against numpy for each; the variant against the
kernel's name in inspect() (`_grid` or `_rows`, and the unit strides after the last
underscore). Every layout runs on every device through `layout_for`, patched.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import rand

import clients
from fusion_server.codegen import gather as gg

LONG = gg.GRID_ROW_MIN + 5  # (a last axis long enough for the grid, and ragged in a group)
LAYOUTS = ("grid", "rows")


@pytest.fixture(params=LAYOUTS)
def layout(request, monkeypatch):
    """Each layout of a long last axis, whatever the device would choose."""
    def forced(shape, cpu, packs_lanes):
        return request.param if len(shape) >= 2 and shape[-1] >= gg.GRID_ROW_MIN else "flat"

    monkeypatch.setattr(gg, "layout_for", forced)
    return request.param
SHORT = gg.GRID_ROW_MIN - 3


def _moves(rec) -> list[str]:
    return [k.name for k in rec.kernels if k.kind == "move"]


def _idx(n: int, size: int, seed: int, dtype=np.int64) -> np.ndarray:
    """`size` indices into an axis of n, negative ones among them."""
    i = np.random.default_rng(seed).integers(-n, n, size)
    return i.astype(dtype)


GATHERS = {
    # name: (x's shape, key from the indices, (axis size, count) of each index array,
    # whether its last axis is long: the grid or rows)
    "1-D take": ((1000,), lambda i: np.s_[i[0]], [(1000, 777)], False),
    "rows": ((50, LONG), lambda i: np.s_[i[0]], [(50, 37)], True),
    "columns": ((40, 60), lambda i: np.s_[:, i[0]], [(60, LONG)], True),
    "short rows": ((50, SHORT), lambda i: np.s_[i[0]], [(50, 37)], False),
    "rank 3, grid": ((6, 7, LONG), lambda i: np.s_[i[0], 1:, ::-1], [(6, 5)], True),
    "rank 3, flat": ((6, 7, SHORT), lambda i: np.s_[i[0], :, ::2], [(6, 5)], False),
    "two index arrays": ((9, 8, LONG), lambda i: np.s_[i[0], i[1]], [(9, 30), (8, 30)], True),
    "strided source": ((30, 2 * LONG), lambda i: np.s_[i[0], ::2], [(30, 12)], True),
}


@pytest.mark.parametrize("case", GATHERS)
@pytest.mark.parametrize("index_dtype", [np.int64, np.int32])
def test_gathers_match_numpy_in_each_variant(case, index_dtype, layout):
    shape, key_of, sizes, long = GATHERS[case]
    a = rand(shape, seed=len(case))
    idx = [_idx(n, count, seed=k, dtype=index_dtype) for k, (n, count) in enumerate(sizes)]
    x = clients.asarray(a)
    for on_device in (False, True):
        key = key_of([clients.asarray(i) for i in idx] if on_device else idx)
        with clients.inspect() as rec:
            got = x[key].numpy()
        np.testing.assert_array_equal(got, a[key_of(idx)])
        (name,) = _moves(rec)
        assert (f"_{layout}_" in name) == long and "_flat" not in name, name


def test_a_one_dimensional_take_spells_its_unit_strides():
    """The output, the index and the source advance by 1: constants in the kernel (the
    strides a gather's output never moves by, 0, are left out)."""
    a = rand((500,))
    i = _idx(500, 300, seed=3)
    with clients.inspect() as rec:
        got = clients.take(clients.asarray(a), clients.asarray(i)).numpy()
    np.testing.assert_array_equal(got, np.take(a, i))
    (name,) = _moves(rec)
    # dst, src, index along the walk: 1, 0, 1; the index's dst and src strides: 0, 1
    assert "_1d_" in name and name.endswith("_10101"), name
    source = gg.move_source(np.dtype(np.float32), (np.dtype(np.int64),), 1, units=(1, 0, 1, 0, 1))
    assert "ds0" not in source.split("{", 1)[1] and "* sa0" not in source


def test_cpu_devices_launch_exactly_their_work_items_and_gpus_test_the_end():
    """Launched over exactly its work-items, a CPU device's kernel tests no id against the
    space's end (PoCL made slow code of the test); elsewhere the launch is padded to whole
    groups and the kernel returns past the end."""
    cpu = clients.client_for().server.info.kind == "CPU"
    a = rand((33, LONG))
    i = _idx(33, 9, seed=5)
    with clients.inspect() as rec:
        got = clients.asarray(a)[clients.asarray(i)].numpy()
    np.testing.assert_array_equal(got, a[i])
    (name,) = _moves(rec)
    assert ("_exact_" in name) == cpu, name
    for layout in ("flat", *LAYOUTS):
        guarded = gg.move_source(np.dtype(np.float32), (np.dtype(np.int64),), 2, layout=layout)
        exact = gg.move_source(np.dtype(np.float32), (np.dtype(np.int64),), 2, layout=layout, guarded=False)
        assert "return" in guarded and "return" not in exact


def test_grid_rows_beyond_a_gpus_launch_limit_take_the_flat_index(monkeypatch):
    monkeypatch.setattr(gg, "GRID_MAX_ROWS", 10)
    assert gg.layout_for((11, LONG), False, False) == "flat"
    assert gg.layout_for((10, LONG), False, False) == "grid"
    assert gg.layout_for((11, LONG), True, True) == "grid"  # (CPU devices have no such limit)
    assert gg.layout_for((gg.ROWS_MIN, LONG), True, False) == "rows"
    assert gg.layout_for((gg.ROWS_MIN - 1, LONG), True, False) == "flat"  # (too few rows to share)
    assert gg.layout_for((11, SHORT), True, False) == gg.layout_for((LONG,), False, False) == "flat"
    a = rand((40, LONG))
    i = _idx(40, 11, seed=4)
    with clients.inspect() as rec:
        got = clients.asarray(a)[i].numpy()
    np.testing.assert_array_equal(got, a[i])
    (name,) = _moves(rec)
    server = clients.client_for().server
    expected = gg.layout_for((11, LONG), server.info.kind == "CPU", server.pack_lanes)
    assert (f"_{expected}_" in name) if expected != "flat" else ("_grid" not in name and "_rows" not in name), name


SCATTERS = {
    "1-D": ((300,), lambda i: np.s_[i[0]], (50,)),
    "rows": ((40, LONG), lambda i: np.s_[i[0]], (12, LONG)),
    "columns of a view": ((30, 2 * LONG), lambda i: np.s_[1:, i[0]], (29, 7)),
    "short rows": ((40, SHORT), lambda i: np.s_[i[0]], (12, SHORT)),
}


@pytest.mark.parametrize("case", SCATTERS)
def test_scatters_match_numpy_in_each_variant(case, layout):
    shape, key_of, value_shape = SCATTERS[case]
    a = rand(shape, seed=7)
    n = shape[-1] if case == "columns of a view" else shape[0]
    # (distinct indices: numpy's order among repeated ones is not the device's)
    i = np.random.default_rng(8).permutation(np.arange(-n, 0))[:value_shape[-1] if case == "columns of a view"
                                                                   else value_shape[0]]
    v = rand(value_shape, seed=9)
    want = a.copy()
    want[key_of([i])] = v
    x = clients.asarray(a)
    x[key_of([clients.asarray(i)])] = clients.asarray(v)
    np.testing.assert_array_equal(x.numpy(), want)


def test_a_gather_of_no_elements_and_of_one_element():
    a = rand((5, LONG))
    x = clients.asarray(a)
    empty = np.array([], np.int64)
    np.testing.assert_array_equal(x[empty].numpy(), a[empty])
    np.testing.assert_array_equal(clients.take(x, 7).numpy(), np.take(a, 7))


CONCATS = {
    # name: (shapes, axis, pieces from the tensors: views are read in their own layouts)
    "rows": ([(5, LONG), (3, LONG)], 0, lambda x, y: [x, y]),
    "columns": ([(6, LONG), (6, 7)], 1, lambda x, y: [x, y]),
    "columns of views": ([(6, 2 * LONG), (9, 7)], 1, lambda x, y: [x[:, ::2], y.T[:, :6].T[:6]]),
    "rank 3, middle axis": ([(2, 5, LONG), (2, 3, LONG)], 1, lambda x, y: [x, y[:, ::-1]]),
}


@pytest.mark.parametrize("case", CONCATS)
def test_concatenation_matches_numpy_in_each_variant(case, layout):
    shapes, axis, pieces = CONCATS[case]
    a, b = (rand(s, seed=k) for k, s in enumerate(shapes))
    want = np.concatenate(pieces(a, b), axis=axis)
    with clients.inspect() as rec:
        got = clients.concat(pieces(clients.asarray(a), clients.asarray(b)), axis=axis).numpy()
    np.testing.assert_array_equal(got, want)
    # one command per piece, and nothing else (a view is not copied first)
    assert [k.kind for k in rec.kernels] == ["copy", "copy"]


def test_roll_copies_two_slices_per_axis():
    a = rand((9, 2 * LONG - 3))
    x = clients.asarray(a)
    for shift, axis in ((5, 1), (-2, 0), ((3, -4), (0, 1)), (7, None)):
        with clients.inspect() as rec:
            got = clients.roll(x, shift, axis=axis).numpy()
        np.testing.assert_array_equal(got, np.roll(a, shift, axis=axis))
        moved = 1 if axis is None or type(axis) is int else len(axis)
        assert [k.kind for k in rec.kernels] == ["copy"] * (2 * moved)
