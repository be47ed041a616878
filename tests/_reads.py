"""Shared checks of the read paths (reads in place, staged reads): each path's tests call
them with the stats counter that path bumps."""

from __future__ import annotations

import numpy as np
import pytest

import clients
from tests.conftest import rand

READ_DTYPES = ["float32", "float64", "int8", "int64", "uint16", "bool", "complex64"]


def assert_read_of_dtype(client, dtype: str, counter: str) -> None:
    """Values a kernel wrote in `dtype`, read back: numpy's, and one read counted under
    `counter` (a stats key)."""
    if dtype == "float64" and not client.fp64:
        pytest.skip("no fp64 on this device")
    a = (rand((33, 17), seed=3) * 100).astype(dtype)
    before = clients.stats()[counter]
    got = clients.flip(clients.asarray(a), axis=0).numpy()  # (values a kernel wrote)
    assert clients.stats()[counter] == before + 1
    assert got.dtype == a.dtype
    np.testing.assert_array_equal(got, np.flip(a, 0))


def assert_reads_of_views(picks, counter: str) -> None:
    """Each view `pick(x)` of a (40, 30) value read back laid out as numpy does: a
    C-contiguous array of its own, numpy's values, one read each counted under `counter`."""
    a = rand((40, 30), seed=4)
    x = clients.asarray(a) * 2.0
    want = a * np.float32(2.0)
    before = clients.stats()[counter]
    for pick in picks:
        got, expected = pick(x).numpy(), pick(want)
        assert got.shape == expected.shape
        assert got.flags.c_contiguous and got.flags.owndata  # (a copy of its own, as numpy returns)
        np.testing.assert_array_equal(got, expected)
    assert clients.stats()[counter] == before + len(picks)
