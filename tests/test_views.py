"""Views (reshape, permute, slices, expand, squeeze, broadcast) against numpy.

A view reads its source's buffer through another layout; reading it and computing on it
must give what numpy gives for the same view of the same array.
"""

from __future__ import annotations

import numpy as np
import pytest
from _values import assert_tensor
from hypothesis import given, settings
from hypothesis import strategies as st

import clients
from fusion_server.fusers.elementwise import GRID_ROW_MIN

SETTINGS = settings(max_examples=25, deadline=None)


def _pair(shape=(4, 6), dtype=np.float32):
    a = (np.arange(int(np.prod(shape))) * 1.5 - 7).astype(dtype).reshape(shape)
    return a, clients.asarray(a)


# -- reshape ------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(24,), (2, 12), (3, -1), (-1, 2, 3), (2, 3, 4), (1, 24, 1), (-1,)])
def test_reshape_contiguous(shape):
    a, t = _pair()
    assert_tensor(t.reshape(shape), a.reshape(shape))
    assert_tensor(clients.reshape(t, shape), a.reshape(shape))


def test_reshape_accepts_separate_ints():
    a, t = _pair()
    assert_tensor(t.reshape(6, 4), a.reshape(6, 4))


def test_reshape_of_transpose_needs_a_copy():
    a, t = _pair()
    assert_tensor(t.T.reshape(-1), a.T.reshape(-1))
    assert_tensor(t.T.reshape(3, 8) + 1, a.T.reshape(3, 8) + 1)


def test_reshape_of_strided_view_without_copy():
    a, t = _pair((4, 6))
    # Rows with a step stay contiguous along each row: splitting a row needs no copy.
    assert_tensor(t[::2].reshape(2, 2, 3), a[::2].reshape(2, 2, 3))
    assert_tensor(t[1:3].reshape(-1), a[1:3].reshape(-1))


def test_reshape_of_sliced_columns_needs_a_copy():
    a, t = _pair((4, 6))
    assert_tensor(t[:, 1::2].reshape(-1) * 2, a[:, 1::2].reshape(-1) * 2)


def test_reshape_copy_false_refuses_copying():
    _, t = _pair()
    with pytest.raises(ValueError, match="copy"):
        clients.reshape(t.T, (24,), copy=False)


@pytest.mark.parametrize("shape", [(5, 5), (7, -1), (-1, -1), (0, -1), (25,)])
def test_impossible_reshape_raises(shape):
    _, t = _pair()
    with pytest.raises(ValueError, match="reshape"):
        t.reshape(shape)


def test_reshape_of_a_pending_result():
    a, t = _pair()
    assert_tensor((t * 2).reshape(6, 4) - 1, (a * 2).reshape(6, 4) - 1)


# -- permute and transpose ----------------------------------------------------------------
def test_transpose_2d():
    a, t = _pair((3, 5))
    assert t.T.shape == (5, 3)
    assert_tensor(t.T, a.T)


@pytest.mark.parametrize("axes", [(0, 1, 2), (2, 0, 1), (1, 0, 2), (0, 2, 1), (2, 1, 0), (-1, 0, 1)])
def test_permute_dims_3d(axes):
    a, t = _pair((2, 3, 4))
    assert_tensor(clients.permute_dims(t, axes), np.transpose(a, axes))


def test_transpose_of_1d_and_0d_is_identity():
    a, t = _pair((5,))
    assert_tensor(t.T, a)
    s = clients.asarray(np.float64(3.5))
    assert_tensor(s.T, np.array(3.5))


def test_permute_dims_rejects_non_permutation():
    _, t = _pair((2, 3, 4))
    with pytest.raises(ValueError, match="permutation"):
        clients.permute_dims(t, (0, 0, 1))
    with pytest.raises(IndexError, match="out of range"):
        clients.permute_dims(t, (0, 1, 3))


# -- slicing ---------------------------------------------------------------------------
KEYS = [
    np.s_[1:3],
    np.s_[::2],
    np.s_[1::3],
    np.s_[::-1],
    np.s_[-2::-2],
    np.s_[1:, ::-1],
    np.s_[:, 1:5:2],
    np.s_[2],
    np.s_[-1],
    np.s_[1, 2],
    np.s_[-1, ::-2],
    np.s_[None],
    np.s_[:, None, 2:],
    np.s_[...],
    np.s_[..., 1],
    np.s_[1, ...],
    np.s_[..., None],
    np.s_[5:1],
    np.s_[:, 10:],
    np.s_[np.int64(2), 1:],
]


@pytest.mark.parametrize("key", KEYS, ids=repr)
def test_basic_slicing_matches_numpy(key):
    a, t = _pair((4, 6))
    assert_tensor(t[key], a[key])


@pytest.mark.parametrize("key", KEYS, ids=repr)
def test_elementwise_on_slices(key):
    a, t = _pair((4, 6))
    assert_tensor(t[key] * 3 + 1, a[key] * 3 + 1)


def test_slicing_3d_with_steps():
    a, t = _pair((3, 5, 8), np.int64)
    assert_tensor(t[::2, 1::2, ::-3], a[::2, 1::2, ::-3])
    assert_tensor(t[:, ::-1, 2:7] - 5, a[:, ::-1, 2:7] - 5)


def test_integer_index_to_zero_d():
    a, t = _pair((4, 6))
    v = t[2, 3]
    assert v.shape == ()
    assert float(v) == float(a[2, 3])
    assert_tensor(v + 1, a[2, 3] + np.float32(1))


@pytest.mark.parametrize("key", [np.s_[4], np.s_[-5], np.s_[0, 6], np.s_[1, -7]], ids=repr)
def test_out_of_range_index_raises(key):
    _, t = _pair((4, 6))
    with pytest.raises(IndexError, match="out of bounds"):
        t[key]


def test_too_many_indices_raises():
    _, t = _pair((4, 6))
    with pytest.raises(IndexError, match="too many indices"):
        t[1, 2, 3]


def test_two_ellipses_raise():
    _, t = _pair((4, 6))
    with pytest.raises(IndexError, match="ellipsis"):
        t[..., 1, ...]


def test_non_index_key_raises():
    _, t = _pair((4, 6))
    with pytest.raises(IndexError, match="float64"):
        t[[0.5, 1.0]]
    with pytest.raises(IndexError, match="str"):
        t["a"]


# -- expand_dims, squeeze, broadcast_to -------------------------------------------------
@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
def test_expand_dims(axis):
    a, t = _pair((4, 6))
    assert_tensor(clients.expand_dims(t, axis), np.expand_dims(a, axis))


def test_expand_dims_out_of_range_raises():
    _, t = _pair((4, 6))
    with pytest.raises(IndexError, match="out of range"):
        clients.expand_dims(t, 3)


@pytest.mark.parametrize("axis", [None, 0, 2, (0, 2), -1])
def test_squeeze(axis):
    a = np.arange(6, dtype=np.int32).reshape(1, 6, 1)
    assert_tensor(clients.squeeze(clients.asarray(a), axis), np.squeeze(a, axis))


def test_squeeze_of_non_unit_axis_raises():
    t = clients.asarray(np.zeros((1, 6, 1)))
    with pytest.raises(ValueError, match="squeeze"):
        clients.squeeze(t, 1)


@pytest.mark.parametrize(
    "src, shape", [((3,), (2, 3)), ((3, 1), (3, 4)), ((1,), (5,)), ((), (2, 2)), ((1, 4), (2, 3, 4))]
)
def test_broadcast_to(src, shape):
    a = (np.arange(int(np.prod(src)), dtype=np.float64) + 1).reshape(src)
    t = clients.broadcast_to(clients.asarray(a), shape)
    assert_tensor(t, np.broadcast_to(a, shape))
    assert_tensor(t * 2 - 1, np.broadcast_to(a, shape) * 2 - 1)


def test_broadcast_to_incompatible_raises():
    t = clients.asarray(np.zeros((3,)))
    with pytest.raises(ValueError, match="broadcast"):
        clients.broadcast_to(t, (4,))
    with pytest.raises(ValueError, match="broadcast"):
        clients.broadcast_to(clients.asarray(np.zeros((2, 3))), (3,))


# -- views of views, and ops on views ---------------------------------------------------
def test_views_of_views():
    a, t = _pair((6, 8))
    va = a[1:][::2].T[1:-1, ::-1][None, ..., 1:]
    vt = t[1:][::2].T[1:-1, ::-1][None, ..., 1:]
    assert_tensor(vt, va)
    assert_tensor(vt + 0.5, va + 0.5)


def test_transpose_plus_tensor():
    a, t = _pair((3, 4))
    b = np.arange(12, dtype=np.float32).reshape(4, 3) * 10
    assert_tensor(t.T + clients.asarray(b), a.T + b)
    assert_tensor(clients.asarray(b) - t.T, b - a.T)


def test_step_slice_times_scalar():
    a, t = _pair((37,))
    assert_tensor(t[::2] * 3, a[::2] * 3)
    assert_tensor(t[1::2] * 3, a[1::2] * 3)


def test_reversed_columns_plus_one():
    a, t = _pair((4, 6))
    assert_tensor(t[1:, ::-1] + 1, a[1:, ::-1] + 1)


def test_two_views_of_one_tensor_in_one_expression():
    a, t = _pair((8, 8))
    assert_tensor(t[:4] * t[4:], a[:4] * a[4:])
    assert_tensor(t + t.T, a + a.T)
    assert_tensor(t[::2, ::2] - t[1::2, 1::2], a[::2, ::2] - a[1::2, 1::2])


def test_views_of_pending_results():
    a, t = _pair((4, 6))
    y = t * 2
    assert_tensor(y[::-1, 1::2] + y[:, :3].reshape(4, 3), (a * 2)[::-1, 1::2] + (a * 2)[:, :3])
    assert_tensor((t + 1).T[1:], (a + 1).T[1:])


def test_view_keeps_source_alive():
    a, t = _pair((4, 6))
    v = (t - 3)[1:, ::2]
    del t
    assert_tensor(v * 2, (a - 3)[1:, ::2] * 2)


def test_offset_view_with_odd_length_and_vector_tail():
    a, t = _pair((1001,))
    assert_tensor(t[3:] + t[:-3], a[3:] + a[:-3])
    assert_tensor(clients.exp(t[5:] * 0.01), np.exp(a[5:] * np.float32(0.01)))


def test_broadcast_view_against_slice():
    a, t = _pair((4, 8))
    row = t[0]
    col = t[:, 3:4]
    assert_tensor(row + col, a[0] + a[:, 3:4])
    assert_tensor(clients.broadcast_to(row, (4, 8)) * t, np.broadcast_to(a[0], (4, 8)) * a)


def test_empty_slice_and_ops():
    a, t = _pair((4, 6))
    assert_tensor(t[2:2], a[2:2])
    assert_tensor(t[:, 4:1] + 1, a[:, 4:1] + 1)


# -- random views -------------------------------------------------------------------------
def _slices(n: int):
    return st.builds(
        slice,
        st.one_of(st.none(), st.integers(-n - 1, n + 1)),
        st.one_of(st.none(), st.integers(-n - 1, n + 1)),
        st.one_of(st.none(), st.sampled_from([1, 2, 3, -1, -2])),
    )


@SETTINGS
@given(data=st.data())
def test_random_slices_match_numpy(data):
    shape = data.draw(st.lists(st.integers(1, 6), min_size=1, max_size=3).map(tuple))
    key = tuple(data.draw(_slices(n)) for n in shape)
    a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    t = clients.asarray(a)
    assert_tensor(t[key], a[key])
    assert_tensor(t[key] - 2, a[key] - 2)


@SETTINGS
@given(data=st.data())
def test_random_permutation_then_reshape(data):
    shape = data.draw(st.lists(st.integers(1, 4), min_size=2, max_size=3).map(tuple))
    axes = tuple(data.draw(st.permutations(range(len(shape)))))
    a = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    t = clients.asarray(a)
    assert_tensor(clients.permute_dims(t, axes).reshape(-1), np.transpose(a, axes).reshape(-1))


# -- vectors along rows ---------------------------------------------------------------------
@pytest.mark.parametrize("cols", [37, 70, 130, 1001])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_strided_rows_of_no_multiple_of_the_width_still_load_vectors(cols, dtype):
    """Rows that are no multiple of the vector width: vectors along each row, the row's
    last partial vector element by element (a stencil over 2046-wide rows)."""
    a = (np.arange(9 * (cols + 3)) % 97).astype(dtype).reshape(9, cols + 3)
    b = (np.arange(8 * cols) % 13).astype(dtype).reshape(8, cols)
    t, tb = clients.asarray(a), clients.asarray(b)
    with clients.inspect() as rec:
        got = (t[1:, 2:-1] * 2 + t[:-1, 3:] - tb).numpy()
    np.testing.assert_array_equal(got, a[1:, 2:-1] * dtype(2) + a[:-1, 3:] - b)
    server = clients.client_for().server
    width = server.widths.for_dtypes({np.dtype(dtype)})
    if server.pack_lanes and cols >= GRID_ROW_MIN:  # (a work-item per element: test_elementwise_grid.py)
        assert rec.kernels[0].variant == "width 1, 2-D grid"
    elif cols >= 4 * width > 4:
        assert rec.kernels[0].variant == f"width {width} along rows"


def test_the_flat_index_along_rows_counts_every_element():
    a = np.arange(5 * 75, dtype=np.float32).reshape(5, 75)
    t = clients.asarray(a)
    got = (t[:, 3:] + clients.reshape(clients.arange(5 * 72, dtype=clients.float32), (5, 72))).numpy()
    np.testing.assert_array_equal(got, a[:, 3:] + np.arange(5 * 72, dtype=np.float32).reshape(5, 72))


@pytest.mark.parametrize("direct", [True, False], ids=["direct-read", "enqueue_copy"])
def test_uploads_and_reads_of_views_by_either_copy_function(monkeypatch, direct):
    """Uploads and reads copy through pyopencl's buffer-to-host and host-to-buffer
    functions themselves, or through enqueue_copy where a pyopencl lacks them: reads of
    views from their first element."""
    import fusion_server.runtime.runtime as rt

    if not direct:
        monkeypatch.setattr(rt, "_read_buffer", None)
        monkeypatch.setattr(rt, "_write_buffer", None)
    elif rt._read_buffer is None or rt._write_buffer is None:
        pytest.skip("this pyopencl has no buffer copy functions of its own")
    a = np.arange(60, dtype=np.float32).reshape(6, 10)
    x = clients.asarray(a)
    np.testing.assert_array_equal(x[2:5, 3:].numpy(), a[2:5, 3:])
    np.testing.assert_array_equal(x[4:].numpy(), a[4:])
    np.testing.assert_array_equal((x * 2.0)[1].numpy(), a[1] * 2)
