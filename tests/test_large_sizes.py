"""Index arithmetic in generated kernels is right past 2^31 elements: loop bounds and
vector steps cannot overflow, and sizes near the limit take 64-bit indices."""

from __future__ import annotations

import numpy as np
import pytest

import clients


def _fits(n: int, buffers: int) -> bool:
    info = clients.default_device().info
    return info.max_alloc_bytes >= n and info.global_mem_bytes >= buffers * n


@pytest.mark.timeout(600)
@pytest.mark.parametrize("n", [2**31 - 1, 2**31 + 7])
def test_element_wise_and_reductions_over_more_than_2_31_one_byte_elements(n):
    if not _fits(n, 2):
        pytest.skip(f"the device cannot allocate {n} bytes in one buffer")
    x = clients.ones((n,), dtype=bool)  # an element-wise kernel writing n elements
    x[n - 1] = False  # and one reading them all, with the flat index at the end
    assert int(clients.sum(x)) == n - 1  # a reduction whose loop runs to n
    np.testing.assert_array_equal(x[-3:].numpy(), [True, True, False])
    y = clients.logical_not(x)
    assert int(clients.sum(y)) == 1
    assert bool(clients.any(y[: n - 1])) is False
    assert int(clients.argmin(x)) == n - 1
    del x, y
    clients.sync()
