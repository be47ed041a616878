"""The move kernel's variants (codegen/gather.py): gathers and scatters over a flat index,
over a 2-D grid (a long last axis), and with the strides that are 0 or 1 spelled as
constants. Values against numpy for each; the variant against the kernel's name in
inspect() (`_grid`, and the unit strides after the last underscore).
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import rand

import clients
from fusion_server.codegen import gather as gg

LONG = gg.GRID_ROW_MIN + 5  # (a last axis long enough for the grid, and ragged in a group)
SHORT = gg.GRID_ROW_MIN - 3


def _moves(rec) -> list[str]:
    return [k.name for k in rec.kernels if k.kind == "move"]


def _idx(n: int, size: int, seed: int, dtype=np.int64) -> np.ndarray:
    """`size` indices into an axis of n, negative ones among them."""
    i = np.random.default_rng(seed).integers(-n, n, size)
    return i.astype(dtype)


GATHERS = {
    # name: (x's shape, key from the indices, (axis size, count) of each index array,
    # whether the grid runs)
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
def test_gathers_match_numpy_in_each_variant(case, index_dtype):
    shape, key_of, sizes, grid = GATHERS[case]
    a = rand(shape, seed=len(case))
    idx = [_idx(n, count, seed=k, dtype=index_dtype) for k, (n, count) in enumerate(sizes)]
    x = clients.asarray(a)
    for on_device in (False, True):
        key = key_of([clients.asarray(i) for i in idx] if on_device else idx)
        with clients.inspect() as rec:
            got = x[key].numpy()
        np.testing.assert_array_equal(got, a[key_of(idx)])
        (name,) = _moves(rec)
        assert ("_grid_" in name) == grid, name


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
    for grid in (False, True):
        guarded = gg.move_source(np.dtype(np.float32), (np.dtype(np.int64),), 2, grid=grid)
        exact = gg.move_source(np.dtype(np.float32), (np.dtype(np.int64),), 2, grid=grid, guarded=False)
        assert "return" in guarded and "return" not in exact


def test_grid_rows_beyond_the_launch_limit_take_the_flat_index(monkeypatch):
    monkeypatch.setattr(gg, "GRID_MAX_ROWS", 10)
    a = rand((40, LONG))
    i = _idx(40, 11, seed=4)
    with clients.inspect() as rec:
        got = clients.asarray(a)[i].numpy()
    np.testing.assert_array_equal(got, a[i])
    (name,) = _moves(rec)
    assert "_grid" not in name


SCATTERS = {
    "1-D": ((300,), lambda i: np.s_[i[0]], (50,)),
    "rows": ((40, LONG), lambda i: np.s_[i[0]], (12, LONG)),
    "columns of a view": ((30, 2 * LONG), lambda i: np.s_[1:, i[0]], (29, 7)),
    "short rows": ((40, SHORT), lambda i: np.s_[i[0]], (12, SHORT)),
}


@pytest.mark.parametrize("case", SCATTERS)
def test_scatters_match_numpy_in_each_variant(case):
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
