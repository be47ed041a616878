"""Reductions of views of values computed in their block's prologue.

A reshape that keeps the element order (a flat alias) of a prologue value reads the
value's register, so `sum(reshape(exp(x) * 2, ...))` is one reduce kernel; the value is
written only if it (or its view) outlives the block. Prologue ops may have other shapes
of as many elements; an op reading an input at coordinates must have the reduction
input's shape. Views in another element order close the block.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import rand, server_settings
from hypothesis import given, settings
from hypothesis import strategies as st

import clients


def _ops(rec) -> list[list[str]]:
    return [k.ops for k in rec.kernels]


def _close(got, want, rtol=1e-5, atol=1e-5):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=rtol, atol=atol)


def _reduce_np(name, x, axis, keepdims):
    if name == "mean":
        return np.mean(x, axis=axis, keepdims=keepdims)
    if name == "argmax":
        return np.argmax(x, axis=axis, keepdims=keepdims)
    return getattr(np, name)(x, axis=axis, keepdims=keepdims)


def _reduce(name, x, axis, keepdims):
    return getattr(clients, name)(x, axis=axis, keepdims=keepdims)


# (shape of the chain, shape of its reshape, axis)
CASES = [
    ((4, 6), (6, 4), 1),
    ((4, 6), (6, 4), 0),
    ((4, 6), (6, 4), None),
    ((2, 3, 4), (4, 6), -1),
    ((24,), (2, 3, 4), (0, 2)),
    ((24,), (2, 3, 4), (1,)),
    ((2, 3, 4), (24,), 0),
    ((1, 24, 1), (6, 1, 4), (1, 2)),
    ((6, 4), (24, 1), 1),  # a reduced dim of size 1
    ((5, 1), (1, 5), 0),
    ((1,), (), None),
    ((3, 5, 7), (7, 15), 0),  # odd sizes: vector tails
]


@pytest.mark.parametrize("name", ["sum", "max", "mean", "argmax", "min", "prod"])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("keepdims", [False, True])
def test_reduction_of_a_reshaped_prologue_is_one_kernel(name, case, keepdims):
    before, after, axis = case
    if name == "argmax" and isinstance(axis, tuple):
        axis = axis[0]
    a = rand(before)
    t = clients.asarray(a)
    with clients.inspect() as rec:
        y = _reduce(name, clients.reshape(t * t + 0.5, after), axis, keepdims)
        got = y.numpy()
    want = _reduce_np(name, (a * a + np.float32(0.5)).reshape(after), axis, keepdims)
    assert got.shape == want.shape
    if name == "argmax":
        np.testing.assert_array_equal(got, want)
    else:
        _close(got, want, rtol=1e-4)
    ops = ["sum", "multiply"] if name == "mean" else [name]  # (mean: a sum, then 1/n)
    assert _ops(rec) == [["multiply", "add", *ops]]


@pytest.mark.parametrize("case", [
    ((0, 3), (3, 0), 1),  # nothing reduced: zeros
    ((0, 3), (3, 0), 0),  # no output element
    ((0, 3), (3, 0), None),
    ((2, 0, 3), (0, 6), 0),
])
@pytest.mark.parametrize("keepdims", [False, True])
def test_empty_reshaped_prologues(case, keepdims):
    before, after, axis = case
    a = rand(before)
    t = clients.asarray(a)
    with clients.inspect() as rec:
        y = clients.sum(clients.reshape(clients.exp(t) * 2, after), axis=axis, keepdims=keepdims)
        got = y.numpy()
    want = np.sum((np.exp(a) * 2).reshape(after), axis=axis, keepdims=keepdims)
    assert got.shape == want.shape
    _close(got, want)
    assert len(rec.kernels) <= 1  # (none when there is no output element)
    assert all(k.kind == "reduce" for k in rec.kernels)


def test_the_examples_are_one_kernel():
    a = rand((4, 6))
    t = clients.asarray(a)
    x = rand((3, 4, 10), seed=1)
    tx = clients.asarray(x)
    with clients.inspect() as rec:
        s = clients.sum(clients.reshape(t * t + 1, (6, 4)), axis=1)
        m = clients.mean(clients.reshape(clients.exp(tx) * 2, (3, 8, -1)), axis=-1)
        got_s, got_m = s.numpy(), m.numpy()
    _close(got_s, (a * a + 1).reshape(6, 4).sum(axis=1))
    _close(got_m, (np.exp(x) * 2).reshape(3, 8, -1).mean(axis=-1), rtol=1e-5)
    assert _ops(rec) == [["multiply", "add", "sum"], ["exp", "multiply", "sum", "multiply"]]
    assert all(k.kind == "reduce" for k in rec.kernels)


def test_a_dropped_alias_is_never_written():
    a = rand((4, 6))
    t = clients.asarray(a)
    with clients.inspect() as rec:
        y = clients.sum(clients.reshape(t * t + 1, (6, 4)), axis=1)  # value and view die here
        got = y.numpy()
    _close(got, (a * a + 1).reshape(6, 4).sum(axis=1))
    assert _ops(rec) == [["multiply", "add", "sum"]]
    assert rec.kernels[0].bindings == 3 + 1 + 1 + 1  # n, nred, meta; the result; t; the scalar


def test_an_alias_kept_alive_is_written_and_reads_back():
    a = rand((4, 6))
    t = clients.asarray(a)
    with clients.inspect() as rec:
        kept = clients.reshape(t * t + 1, (6, 4))
        y = clients.sum(kept, axis=1)
        got_y = y.numpy()
    _close(kept.numpy(), (a * a + 1).reshape(6, 4))
    _close(got_y, (a * a + 1).reshape(6, 4).sum(axis=1))
    assert _ops(rec) == [["multiply", "add", "sum"]]
    assert rec.kernels[0].bindings == 3 + 2 + 1 + 1  # ... the result and the value written


def test_a_value_kept_alive_is_written_and_reads_back():
    a = rand((4, 6))
    t = clients.asarray(a)
    with clients.inspect() as rec:
        v = clients.exp(t) - 1
        y = clients.max(clients.reshape(v, (3, 8)), axis=0, keepdims=True)
        got_y = y.numpy()
    _close(v.numpy(), np.exp(a) - 1)
    _close(got_y, (np.exp(a) - 1).reshape(3, 8).max(axis=0, keepdims=True))
    assert _ops(rec) == [["exp", "subtract", "max"]]
    assert rec.kernels[0].bindings == 3 + 2 + 1 + 1


def test_an_alias_read_by_the_prologue_and_kept_alive_is_written():
    a = rand((4, 6))
    t = clients.asarray(a)
    with clients.inspect() as rec:
        kept = clients.reshape(clients.exp(t), (6, 4))
        y = clients.sum(kept * 2 + kept, axis=1)
        got_y = y.numpy()
    _close(kept.numpy(), np.exp(a).reshape(6, 4))
    _close(got_y, (np.exp(a).reshape(6, 4) * 3).sum(axis=1), rtol=1e-5)
    assert _ops(rec) == [["exp", "multiply", "add", "sum"]]
    assert rec.kernels[0].bindings == 3 + 2 + 1 + 1


def test_an_epilogue_reading_a_view_of_a_prologue_value_closes_the_block():
    a = rand((6,))
    t = clients.asarray(a)
    with clients.inspect() as rec:
        v = t * 2
        s = clients.sum(clients.reshape(v, (6, 1)), axis=1)  # shape (6,), as v
        y = s + clients.reshape(v, (6,))
        del v
        got = y.numpy()
    _close(got, (a * 2) + (a * 2))
    assert _ops(rec) == [["multiply", "sum"], ["add"]]


def test_a_value_read_later_through_another_view_is_written():
    a = rand((4, 6))
    t = clients.asarray(a)
    v = clients.exp(t)
    later = v.T  # a view that lives on, in another order: the value must be written
    del v
    with clients.inspect() as rec:
        y = clients.sum(clients.reshape(later.T, (24,)) * 2)
        got_y = y.numpy()
    _close(got_y, (np.exp(a) * 2).sum(), rtol=1e-5)
    _close(later.numpy(), np.exp(a).T)
    assert _ops(rec) == [["exp", "multiply", "sum"]]
    assert rec.kernels[0].bindings == 3 + 2 + 1 + 1  # the value written for its other view


def test_prologue_ops_read_flat_aliases_of_earlier_values():
    a = rand((4, 6))
    t = clients.asarray(a)
    with clients.inspect() as rec:
        u = clients.reshape(clients.exp(t), (24,)) * 2
        w = clients.reshape(clients.reshape(u, (2, 12)) - 1, (3, 8))
        y = clients.sum(w, axis=1)
        del u, w
        got = y.numpy()
    _close(got, ((np.exp(a).reshape(24) * 2).reshape(2, 12) - 1).reshape(3, 8).sum(axis=1), rtol=1e-5)
    assert _ops(rec) == [["exp", "multiply", "subtract", "sum"]]
    assert rec.kernels[0].bindings == 3 + 1 + 1 + 2  # nothing but the result written


def test_prologue_values_of_other_shapes_are_written_in_their_order():
    a, b = rand((4, 6)), rand((2, 12), seed=1)
    ta, tb = clients.asarray(a), clients.asarray(b)
    with clients.inspect() as rec:
        other = tb + 1  # another shape of as many elements, alive after the block
        v = ta * 2  # also alive, in a shape other than the reduction's input
        y = clients.sum(clients.reshape(v, (6, 4)), axis=0)
        got_y = y.numpy()
    _close(other.numpy(), b + 1)
    _close(v.numpy(), a * 2)
    _close(got_y, (a * 2).reshape(6, 4).sum(axis=0))
    assert _ops(rec) == [["add", "multiply", "sum"]]


@pytest.mark.parametrize("view", [
    (lambda v: v[1:], lambda v: v[1:]),
    (lambda v: v[:, ::2], lambda v: v[:, ::2]),
    (lambda v: clients.reshape(v[:2], (3, 4)), lambda v: v[:2].reshape(3, 4)),  # a prefix: not an alias
])
def test_views_in_another_order_close_the_block(view):
    ours, theirs = view
    a = rand((4, 6))
    t = clients.asarray(a)
    with clients.inspect() as rec:
        got = clients.sum(ours(clients.exp(t)), axis=0).numpy()
    _close(got, theirs(np.exp(a)).sum(axis=0), rtol=1e-5)
    assert _ops(rec) == [["exp"], ["sum"]]


def test_a_transposed_value_reduces_in_its_memory_order_as_one_kernel():
    """A transpose is no view to close on: the reduction runs over the value in memory
    order, its axes mapped (clients/_reductions.py, _in_dense_order)."""
    a = rand((4, 6))
    t = clients.asarray(a)
    with clients.inspect() as rec:
        got = clients.sum(clients.exp(t).T, axis=0).numpy()
        got2 = clients.sum(clients.exp(t).T + 1, axis=1).numpy()
    _close(got, np.exp(a).T.sum(axis=0), rtol=1e-5)
    _close(got2, (np.exp(a).T + 1).sum(axis=1), rtol=1e-5)
    assert _ops(rec) == [["exp", "sum"], ["exp", "add", "sum"]]


def test_broadcast_input_in_the_reductions_shape_is_one_kernel():
    a, b = rand((4, 6)), rand((4,), seed=1)
    ta, tb = clients.asarray(a), clients.asarray(b)
    with clients.inspect() as rec:
        y = clients.sum(clients.reshape(ta * 2, (6, 4)) + tb, axis=1)
        got = y.numpy()
    _close(got, ((a * 2).reshape(6, 4) + b).sum(axis=1))
    assert _ops(rec) == [["multiply", "add", "sum"]]


def test_strided_input_in_the_reductions_shape_is_one_kernel():
    a, b = rand((4, 6)), rand((4, 6), seed=1)
    ta, tb = clients.asarray(a), clients.asarray(b)
    with clients.inspect() as rec:
        y = clients.max(clients.reshape(clients.exp(ta), (6, 4)) * tb.T, axis=0)
        got = y.numpy()
    _close(got, (np.exp(a).reshape(6, 4) * b.T).max(axis=0))
    assert _ops(rec) == [["exp", "multiply", "max"]]


@pytest.mark.parametrize("case", [
    ((6,), False),  # broadcast along the first shape's rows
    ("T", False),  # strided: a transposed (6, 4) tensor
    ((4, 6), True),  # contiguous, as many elements: read at the flat index
    ((1,), True),  # one element
    ((), True),
])
def test_coordinates_in_the_first_shape_close_the_block(case):
    shape, joins = case
    a = rand((4, 6))
    b = rand((6, 4), seed=1).T if shape == "T" else rand(shape, seed=1)
    ta = clients.asarray(a)
    tb = clients.asarray(b.T).T if shape == "T" else clients.asarray(b)
    with clients.inspect() as rec:
        y = clients.sum(clients.reshape(ta + tb, (6, 4)), axis=1)
        got = y.numpy()
    _close(got, (a + b).reshape(6, 4).sum(axis=1))
    assert _ops(rec) == ([["add", "sum"]] if joins else [["add"], ["sum"]])


def test_replays_of_a_reshaped_reduction_stay_one_kernel():
    before = clients.stats()["plan_hits"]
    for n in (4, 4, 8, 8, 4, 12):
        a = rand((n, 6), seed=n)
        t = clients.asarray(a)
        with clients.inspect() as rec:
            y = clients.sum(clients.reshape(t * t + 1, (6, n)), axis=1) * 0.5
            m = clients.argmax(clients.reshape(clients.exp(t) - 2, (3, 2 * n)), axis=-1)
            got_y, got_m = y.numpy(), m.numpy()
        _close(got_y, (a * a + 1).reshape(6, n).sum(axis=1) * 0.5)
        np.testing.assert_array_equal(got_m, (np.exp(a) - 2).reshape(3, 2 * n).argmax(axis=-1))
        assert _ops(rec) == [["multiply", "add", "sum", "multiply"], ["exp", "subtract", "argmax"]]
    assert clients.stats()["plan_hits"] - before >= 6


def test_replays_tell_a_reshape_from_other_views():
    """Same ops, same sizes; the reduction reads a reshape, a transpose or a prefix of the
    prologue's value: a replay never runs one as the other."""
    a = rand((6, 6))
    variants = [
        (lambda v: clients.reshape(v, (4, 9)), lambda v: v.reshape(4, 9), 1),
        (lambda v: v.T, lambda v: v.T, 1),  # (reduced in the value's memory order)
        (lambda v: clients.reshape(v[:4], (4, 6)), lambda v: v[:4].reshape(4, 6), 2),
    ]
    before = clients.stats()["plan_hits"]
    for _ in range(3):
        for ours, theirs, kernels in variants:
            t = clients.asarray(a)
            with clients.inspect() as rec:
                got = clients.sum(ours(clients.sin(t) * 3), axis=0).numpy()
            _close(got, theirs(np.sin(a) * 3).sum(axis=0), rtol=1e-5)
            assert len(rec.kernels) == kernels
    assert clients.stats()["plan_hits"] > before


def test_a_replay_checks_what_the_alias_keeps_alive():
    """A stored decision is replayed by offering its ops to the fuser again, which looks
    at what is alive now: with the value and its alias kept, both prologue values must be
    written, over the binding limit, so the fuser refuses and the block runs as two
    kernels, right; that one-off does not replace the usual decision."""
    # n, nred, meta, the result, t, a scalar, and one prologue value that may be written
    # (the reduction's input is alive while it is registered).
    with server_settings(max_bindings=7):
        def run(keep: bool, n: int):
            a = rand((n, 6), seed=n)
            t = clients.asarray(a)
            with clients.inspect() as rec:
                if keep:
                    square = t * t
                    kept = clients.reshape(square + 1, (6, n))
                    y = clients.sum(kept, axis=1)
                else:
                    y = clients.sum(clients.reshape(t * t + 1, (6, n)), axis=1)
                got = y.numpy()
            _close(got, (a * a + 1).reshape(6, n).sum(axis=1))
            if keep:
                _close(square.numpy(), a * a)
                _close(kept.numpy(), (a * a + 1).reshape(6, n))
            return _ops(rec)

        fused, split = [["multiply", "add", "sum"]], [["multiply", "add"], ["sum"]]
        assert run(False, 4) == fused
        hits = clients.stats()["plan_hits"]
        assert run(False, 8) == fused
        assert clients.stats()["plan_hits"] > hits
        assert run(True, 4) == split
        assert run(True, 8) == split
        hits = clients.stats()["plan_hits"]
        assert run(False, 4) == fused
        assert run(False, 12) == fused
        assert clients.stats()["plan_hits"] - hits >= 2


def test_a_replay_checks_coordinates_against_the_reductions_shape():
    """A broadcast input read at the reduction's shape joins the block; the same ops
    with the broadcast in the first shape do not, and a replay never confuses them."""
    for _ in range(3):
        for first in (False, True):
            a = rand((4, 6))
            b = rand((6,) if first else (4,), seed=1)
            ta, tb = clients.asarray(a), clients.asarray(b)
            with clients.inspect() as rec:
                if first:
                    y = clients.sum(clients.reshape(ta * 2 + tb, (6, 4)), axis=1)
                    want = (a * 2 + b).reshape(6, 4).sum(axis=1)
                else:
                    y = clients.sum(clients.reshape(ta * 2, (6, 4)) + tb, axis=1)
                    want = ((a * 2).reshape(6, 4) + b).sum(axis=1)
                got = y.numpy()
            _close(got, want)
            assert _ops(rec) == ([["multiply", "add"], ["sum"]] if first else [["multiply", "add", "sum"]])


@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from([1, 2, 3, 4]), min_size=1, max_size=4), st.data())
def test_random_reshaped_reductions_match_numpy(dims, data):
    shape = tuple(dims)
    size = int(np.prod(shape))
    first = data.draw(st.sampled_from([d for d in range(1, size + 1) if size % d == 0]))
    new = (first, size // first)
    axis = data.draw(st.sampled_from([None, 0, 1, -1, (0, 1)]))
    keepdims = data.draw(st.booleans())
    name = data.draw(st.sampled_from(["sum", "max", "min", "mean"]))
    a = rand(shape)
    t = clients.asarray(a)
    with clients.inspect() as rec:
        y = _reduce(name, clients.reshape(clients.exp(t) - 0.5, new) * 2, axis, keepdims)
        got = y.numpy()
    _close(got, _reduce_np(name, (np.exp(a) - np.float32(0.5)).reshape(new) * 2, axis, keepdims), rtol=1e-4)
    assert len(rec.kernels) == 1
    assert rec.kernels[0].kind == "reduce"
