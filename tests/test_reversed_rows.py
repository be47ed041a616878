"""Rows read backwards (`x[..., ::-1]`, `flip` along the last axis) in element-wise blocks:
the layout class `stridedm1`, whose last stride -1 is spelled in the source so that vectors
are read backwards (a load and a shuffle) instead of element by element. Values against
numpy for each dtype kind, row length (whole vectors, a tail, rows too short for vectors)
and launch (vectors along rows, the 2-D grid of drivers that pack work-items into lanes).
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import rand, server_settings

import clients

DTYPES = [np.float32, np.float64, np.int8, np.uint16, np.int64, np.bool_]
SHAPES = [(37, 53), (4, 256), (5, 3), (300,)]


def _host(shape, dtype) -> np.ndarray:
    if dtype == np.bool_:
        return rand(shape) > 0
    if np.dtype(dtype).kind == "f":
        return rand(shape).astype(dtype)
    return (rand(shape) * 50).astype(dtype)


def _block(x, ns):
    """A reversed read, a reversed read with an offset, and a plain one, in one block."""
    if x.dtype == np.bool_:
        return ns.logical_xor(x[..., ::-1], x) | x[..., -1::-1]
    return x[..., ::-1] * 3 + x - ns.flip(x, axis=-1)


@pytest.mark.parametrize("pack_lanes", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_reversed_rows_match_numpy(dtype, shape, pack_lanes):
    if dtype == np.float64 and not clients.client_for().fp64:
        pytest.skip("no fp64 on this device")
    a = _host(shape, dtype)
    with server_settings(pack_lanes=pack_lanes):
        got = _block(clients.asarray(a), clients).numpy()
    np.testing.assert_array_equal(got, _block(a, np))


def test_a_reversed_row_is_read_in_vectors():
    """Where the driver's kernels take vectors, a flip along the rows keeps them (it ran
    as scalar code, element by element, before the class)."""
    server = clients.client_for().server
    a = rand((64, 1024))
    with server_settings(pack_lanes=False), clients.inspect() as rec:
        got = (clients.flip(clients.asarray(a), axis=1) + 1.0).numpy()
    np.testing.assert_array_equal(got, np.flip(a, axis=1) + np.float32(1))
    (kernel,) = rec.kernels
    assert kernel.variant == f"width {server.widths.of_size(4)}", kernel.variant


def test_other_negative_strides_stay_element_by_element():
    a = rand((16, 64))
    x = clients.asarray(a)
    with clients.inspect() as rec:
        got = (x[:, ::-2] + x[::-1, ::-2]).numpy()
    np.testing.assert_array_equal(got, a[:, ::-2] + a[::-1, ::-2])
    assert len(rec.kernels) == 1
