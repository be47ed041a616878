"""Index arithmetic in generated kernels is right past 2^31 elements: loop bounds and
vector steps cannot overflow, and sizes near the limit take 64-bit indices."""

from __future__ import annotations

import os

import numpy as np
import pytest

import clients
from tests.conftest import run_python


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


_BOTCHED_BUILD_THEN_EXIT = """
import clients
n = 2**31 - 1
x = clients.ones((n,), dtype=bool)
x[n - 1] = False
assert int(clients.sum(x)) == n - 1
print("done")
"""


@pytest.mark.timeout(600)
def test_the_process_exits_cleanly_after_the_driver_botched_a_build():
    """PoCL 3.0 (LLVM 14) builds this fill's vector kernel (64-bit indices) without the
    kernel in it, twice, and still counts the program's LLVM module after releasing it;
    the release of its last context at interpreter exit then aborted the process: a run
    whose tests all passed exited 134. The library keeps its contexts past exit."""
    if not _fits(2**31 - 1, 1):
        pytest.skip("the device cannot allocate 2^31 bytes in one buffer")
    available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 0
    if available < 3 * 2**31:  # (the child's buffers come on top of what this process holds)
        pytest.skip("not enough free host memory for a second process's 2^31-byte buffers")
    done = run_python(_BOTCHED_BUILD_THEN_EXIT, timeout=540)
    assert done.returncode == 0 and "done" in done.stdout, done.stderr[-3000:]
