"""Views of values computed in the same block.

A reshape that keeps the element order (a flat alias) reads the value's register: the
chain stays one kernel, the reshaped value is written only if it outlives the block, and
ops of other shapes with as many elements join the block when their inputs are read at
the flat index. Views in another element order (a transpose, a slice) recompute the
value at the view's coordinates: tests/test_remapped_views.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from _values import assert_tensor
from conftest import rand, server_settings
from hypothesis import given, settings
from hypothesis import strategies as st

import clients


def _ops(rec) -> list[list[str]]:
    return [k.ops for k in rec.kernels]


@pytest.mark.parametrize("shapes", [
    ((6, 4), (4, 6)),
    ((24,), (2, 3, 4)),
    ((2, 3, 4), (24,)),
    ((1, 24, 1), (24,)),
    ((5, 1), (1, 5)),
    ((0, 3), (3, 0)),
    ((), (1, 1)),
])
def test_reshape_inside_a_chain_is_one_kernel(shapes):
    before, after = shapes
    a = rand(before)
    t = clients.asarray(a)
    with clients.inspect() as rec:
        y = clients.reshape(clients.exp(t * 0.5), after) - 1.0
        got = y.numpy()
    np.testing.assert_allclose(got, np.exp(a * np.float32(0.5)).reshape(after) - 1, rtol=1e-5, atol=1e-6)
    assert len(rec.kernels) <= 1  # (none for an empty tensor)
    if a.size:
        assert rec.kernels[0].ops == ["multiply", "exp", "subtract"]


def test_broadcast_input_after_a_reshape_reads_at_the_new_shape():
    a, b = rand((6, 4)), rand((6,), seed=1)
    ta, tb = clients.asarray(a), clients.asarray(b)
    with clients.inspect() as rec:
        y = (clients.reshape(ta * 2, (4, 6)) + tb).numpy()
    np.testing.assert_allclose(y, (a * 2).reshape(4, 6) + b, rtol=1e-5, atol=1e-6)
    assert _ops(rec) == [["multiply", "add"]]


def test_broadcasts_in_two_shapes_close_the_block():
    a, b, c = rand((6, 4)), rand((4,), seed=1), rand((6,), seed=2)
    ta, tb, tc = clients.asarray(a), clients.asarray(b), clients.asarray(c)
    with clients.inspect() as rec:
        y = (clients.reshape(ta + tb, (4, 6)) * tc).numpy()
    np.testing.assert_allclose(y, (a + b).reshape(4, 6) * c, rtol=1e-5, atol=1e-6)
    assert _ops(rec) == [["add"], ["multiply"]]


def test_a_reshape_that_outlives_the_block_is_written():
    a = rand((3, 8))
    t = clients.asarray(a)
    with clients.inspect() as rec:
        kept = clients.reshape(clients.sin(t), (4, 6))
        y = kept * 3
        got_y = y.numpy()
    got_kept = kept.numpy()
    np.testing.assert_allclose(got_kept, np.sin(a).reshape(4, 6), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_y, np.sin(a).reshape(4, 6) * 3, rtol=1e-5, atol=1e-6)
    assert _ops(rec) == [["sin", "multiply"]]
    assert rec.kernels[0].bindings == 1 + 1 + 2 + 1  # n, input, sin's value and y, the scalar


def test_a_dropped_reshape_is_never_written():
    a = rand((3, 8))
    t = clients.asarray(a)
    with clients.inspect() as rec:
        y = clients.reshape(clients.sin(t), (4, 6)) * 3  # the sin value and its view die here
        got = y.numpy()
    np.testing.assert_allclose(got, np.sin(a).reshape(4, 6) * 3, rtol=1e-5, atol=1e-6)
    assert _ops(rec) == [["sin", "multiply"]]
    assert rec.kernels[0].bindings == 1 + 1 + 1 + 1  # n, input, y, the scalar


def test_other_shapes_of_as_many_elements_join_the_block():
    a, b = rand((6,)), rand((2, 3), seed=1)
    ta, tb = clients.asarray(a), clients.asarray(b)
    with clients.inspect() as rec:
        x, y = ta * 2, tb + 1
        got_x, got_y = x.numpy(), y.numpy()
    np.testing.assert_allclose(got_x, a * 2, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_y, b + 1, rtol=1e-5, atol=1e-6)
    assert _ops(rec) == [["multiply", "add"]]


@pytest.mark.parametrize("view", [
    lambda v: v.T,
    lambda v: v[1:],
    lambda v: v[:, ::2],
    lambda v: v[::-1, 1:4],
])
def test_views_in_another_order_recompute_the_value(view):
    a = rand((4, 6))
    t = clients.asarray(a)
    b = rand(view(a).shape, seed=2)  # (a row-major operand: `v.T + 1` alone runs in memory order)
    tb = clients.asarray(b)
    with clients.inspect() as rec:
        got = (view(clients.exp(t)) + tb).numpy()
    np.testing.assert_allclose(got, view(np.exp(a)) + b, rtol=1e-5, atol=1e-6)
    assert _ops(rec) == [["exp", "add"]]
    assert "recomputes exp at 1 view in another element order" in rec.explain()


def test_a_view_no_slice_makes_closes_the_block():
    """A slice of a value, flattened: its elements run across the value's rows, so no
    per-dimension map reads the value's inputs; the value is written and read back."""
    a = rand((4, 6))
    t = clients.asarray(a)
    with clients.inspect() as rec:
        got = (clients.exp(t)[1:].reshape(-1) + 1).numpy()
    np.testing.assert_allclose(got, np.exp(a)[1:].reshape(-1) + 1, rtol=1e-5, atol=1e-6)
    assert _ops(rec) == [["exp"], ["add"]]
    assert "no slice or transpose makes" in rec.explain()


def test_a_prefix_of_a_value_is_recomputed_not_aliased():
    a = rand((20,))
    t = clients.asarray(a)
    with clients.inspect() as rec:
        y = clients.reshape((t * 2)[:12], (3, 4)) + 1
        got = y.numpy()
    np.testing.assert_allclose(got, (a * 2)[:12].reshape(3, 4) + 1, rtol=1e-5, atol=1e-6)
    assert _ops(rec) == [["multiply", "add"]]


def test_replays_tell_a_reshape_from_a_prefix():
    """The plan store's signatures say which value a view reads and how many elements
    each shape has, so a stored decision is never replayed onto a look-alike."""
    def reshaped(n, m):
        a = rand((n * m,))
        t = clients.asarray(a)
        return clients.reshape(t * 2, (n, m)) + 1, (a * 2).reshape(n, m) + 1

    def prefix(total, n, m):
        a = rand((total,))
        t = clients.asarray(a)
        return clients.reshape((t * 2)[: n * m], (n, m)) + 1, (a * 2)[: n * m].reshape(n, m) + 1

    before = clients.stats()["plan_hits"]
    cases = [(lambda: reshaped(3, 4), False), (lambda: prefix(20, 3, 4), True), (lambda: reshaped(5, 7), False),
             (lambda: prefix(40, 5, 7), True), (lambda: reshaped(3, 4), False), (lambda: prefix(20, 3, 4), True)]
    with server_settings(run_cache_enabled=False):  # (every block through the plan store)
        for make, recomputes in cases:  # a reshape reads the register; a prefix recomputes the value
            with clients.inspect() as rec:
                y, want = make()
                got = y.numpy()
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
            assert _ops(rec) == [["multiply", "add"]]
            assert ("recomputes multiply" in rec.kernels[0].why) == recomputes
    assert clients.stats()["plan_hits"] > before


def test_replayed_reshape_chains_stay_one_kernel():
    before = clients.stats()["plan_hits"]
    for n in (8, 8, 12, 12, 16):
        a = rand((n, 3))
        t = clients.asarray(a)
        with clients.inspect() as rec:
            y = clients.reshape(clients.tanh(t), (3, n)) * 0.5
            got = y.numpy()
        np.testing.assert_allclose(got, np.tanh(a).reshape(3, n) * 0.5, rtol=1e-5, atol=1e-6)
        assert _ops(rec) == [["tanh", "multiply"]]
    assert clients.stats()["plan_hits"] - before >= 3


def test_reduction_of_a_reshaped_chain():
    a = rand((4, 6))
    t = clients.asarray(a)
    y = clients.sum(clients.reshape(t * t + 1, (6, 4)), axis=1)
    assert_tensor(y, ((a * a + 1).reshape(6, 4)).sum(axis=1))


@settings(max_examples=30, deadline=None)
@given(st.lists(st.sampled_from([1, 2, 3, 4]), min_size=1, max_size=4), st.data())
def test_random_reshape_chains_match_numpy(dims, data):
    shape = tuple(dims)
    size = int(np.prod(shape))
    factors = [d for d in range(1, size + 1) if size % d == 0]
    first = data.draw(st.sampled_from(factors))
    new = (first, size // first)
    a = rand(shape)
    t = clients.asarray(a)
    with clients.inspect() as rec:
        y = clients.reshape(clients.exp(t) - 0.5, new)
        z = clients.reshape(y * y, shape) + t
        got = z.numpy()
    want = ((np.exp(a) - np.float32(0.5)).reshape(new) ** 2).reshape(shape) + a
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert len(rec.kernels) == 1


@pytest.mark.parametrize("case", ["matmul", "times a column", "plus a row"])
def test_a_reshaped_value_read_broadcast_by_a_larger_op_is_read_at_its_coordinates(case):
    """A reshape of a block value keeps its element order, but read by an op of more
    elements (broadcast) it is read at that op's coordinates, not at the value's flat
    index (which the op's elements past the value's size would overrun)."""
    a, b = np.array([1, 2]).reshape(2, 1, 1, 1), np.arange(1, 6).reshape(5, 1, 1)
    ta, tb = clients.asarray(a), clients.asarray(b)
    if case == "matmul":  # (b + 1).mT, a reshape of the value, read over a's batch
        got, want = ta @ (tb + 1), a @ (b + 1)
    elif case == "times a column":
        got, want = ta * clients.reshape(tb + 1, (5, 1)), a * (b + 1).reshape(5, 1)
    else:
        got, want = clients.reshape(tb * 2, (1, 5)) + ta[:, :, 0, 0], (b * 2).reshape(1, 5) + a[:, :, 0, 0]
    np.testing.assert_array_equal(got.numpy(), want)
