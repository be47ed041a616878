"""Fusion: chains become one kernel, only needed values are written, kernels are reused."""

from __future__ import annotations

import numpy as np
import pytest

import clients
from tests.conftest import rand, run_python, server_settings, settle


def chain10(x, y):
    t = x * 2.0 + y
    t = clients.exp(t * 0.1) - 1.0
    t = clients.maximum(t, y) * t
    t = clients.sqrt(clients.abs(t)) + 0.5
    return t / (y * y + 1.0)


def chain10_np(x, y):
    t = x * np.float32(2.0) + y
    t = np.exp(t * np.float32(0.1)) - np.float32(1.0)
    t = np.maximum(t, y) * t
    t = np.sqrt(np.abs(t)) + np.float32(0.5)
    return t / (y * y + np.float32(1.0))


def test_ten_op_chain_is_one_kernel(via):
    a, b = rand(1001, seed=1), rand(1001, seed=2)
    x, y = clients.asarray(a), clients.asarray(b)
    run = via(chain10)
    with clients.inspect() as rec:
        out = run(x, y).numpy()
    np.testing.assert_allclose(out, chain10_np(a, b), rtol=1e-5, atol=1e-6)
    assert len(rec.kernels) == 1
    k = rec.kernels[0]
    assert k.kind == "elementwise"
    assert len(k.ops) >= 10
    # n + 2 inputs + 1 output + scalars (values are runtime args)
    assert k.bindings == 1 + 2 + 1 + 5


def test_intermediate_kept_alive_is_written_with_its_value():
    a = rand(257, seed=3)
    x = clients.asarray(a)
    with clients.inspect() as rec:
        mid = clients.exp(x) * 3.0  # kept by the user
        out = clients.tanh(mid) + 1.0
        got_out = out.numpy()
    assert len(rec.kernels) == 1
    np.testing.assert_allclose(got_out, np.tanh(np.exp(a) * 3) + 1, rtol=1e-5)
    np.testing.assert_allclose(mid.numpy(), np.exp(a) * 3, rtol=1e-5)
    assert len(rec.kernels) == 1  # reading `mid` needed no new kernel: it was an output


def test_dropped_intermediates_are_never_allocated(baseline):
    n = 1 << 16
    x = clients.asarray(rand(n))
    settle()
    before = clients.stats()
    t = x * 2.0
    for _ in range(10):
        t = clients.sin(t) + 1.0  # each old `t` is dropped before the block runs
    t.numpy()
    after = clients.stats()
    # One new buffer: the output. No intermediate was ever allocated.
    assert after["buffers_live"] - before["buffers_live"] == 1
    assert after["kernels_launched"] - before["kernels_launched"] == 1


def test_peak_memory_is_inputs_plus_output():
    n = 1 << 18
    x, y = clients.asarray(rand(n, seed=4)), clients.asarray(rand(n, seed=5))
    settle()
    server = clients.client_for().server
    pool = server.runtime.pool
    start = pool.live_bytes
    pool.peak_live_bytes = start
    out = chain10(x, y)
    out.numpy()
    from fusion_server.runtime.pool import bucket_size

    assert pool.peak_live_bytes - start == bucket_size(4 * n)  # one float32 output, no intermediates


def test_new_scalar_value_does_not_recompile():
    x = clients.asarray(rand(100))
    (x * 3.0 + 1.0).numpy()
    before = clients.stats()["compiles"]
    for s in (0.5, -2.0, 7.25):
        np.testing.assert_allclose((x * s + 1.0).numpy(), rand(100) * np.float32(s) + 1, rtol=1e-6)
    assert clients.stats()["compiles"] == before


def test_new_size_does_not_recompile():
    (clients.asarray(rand(64)) * 3.0 - 1.0).numpy()
    before = clients.stats()["compiles"]
    for n in (1, 5, 1000, 4099):
        a = rand(n, seed=n)
        np.testing.assert_allclose((clients.asarray(a) * 3.0 - 1.0).numpy(), a * 3 - 1, rtol=1e-6)
    assert clients.stats()["compiles"] == before


def test_binding_limit_with_thirty_inputs():
    arrays = [rand(300, seed=i) for i in range(30)]
    with server_settings(max_bindings=8):
        xs = [clients.asarray(a) for a in arrays]
        with clients.inspect() as rec:
            acc = xs[0]
            for x in xs[1:]:
                acc = acc + x * 0.5
            got = acc.numpy()
    want = arrays[0].copy()
    for a in arrays[1:]:
        want = want + a * np.float32(0.5)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert len(rec.kernels) > 1
    assert max(k.bindings for k in rec.kernels) <= 8


def test_binding_limit_from_environment():
    code = (
        "import numpy as np, clients\n"
        "xs = [clients.asarray(np.full(50, i, np.float32)) for i in range(30)]\n"
        "with clients.inspect() as rec:\n"
        "    acc = xs[0]\n"
        "    for x in xs[1:]: acc = acc + x\n"
        "    v = acc.numpy()\n"
        "assert (v == sum(range(30))).all(), v\n"
        "print(max(k.bindings for k in rec.kernels), len(rec.kernels))\n"
    )
    out = run_python(code, FUSION_MAX_BINDINGS="8")
    assert out.returncode == 0, out.stderr
    most, count = map(int, out.stdout.split())
    assert most <= 8 and count > 1


def test_max_ops_closes_blocks():
    x = clients.asarray(rand(64))
    with server_settings(max_ops=4):
        with clients.inspect() as rec:
            t = x
            for _ in range(10):
                t = t + 1.0
            got = t.numpy()
    np.testing.assert_allclose(got, rand(64) + 10, rtol=1e-6)
    assert [len(k.ops) for k in rec.kernels] == [4, 4, 2]


def test_eager_mode_launches_one_kernel_per_op():
    a = rand(99)
    x = clients.asarray(a)
    with server_settings(mode="eager"):
        with clients.inspect() as rec:
            got = (clients.exp(x) * 2.0 + 1.0).numpy()
    np.testing.assert_allclose(got, np.exp(a) * 2 + 1, rtol=1e-5)
    assert [k.ops for k in rec.kernels] == [["exp"], ["multiply"], ["add"]]


def test_shape_change_closes_the_block():
    a, b = rand((4, 8)), rand(8)
    x, y = clients.asarray(a), clients.asarray(b)
    with clients.inspect() as rec:
        s = clients.exp(y) + 1.0  # shape (8,)
        out = (x * s).numpy()  # shape (4, 8): a new block
    np.testing.assert_allclose(out, a * (np.exp(b) + 1), rtol=1e-5)
    assert len(rec.kernels) == 2


def test_broadcast_inputs_fuse_into_one_kernel():
    a, b, c = rand((6, 8)), rand(8, seed=1), rand((6, 1), seed=2)
    x, y, z = clients.asarray(a), clients.asarray(b), clients.asarray(c)
    with clients.inspect() as rec:
        out = (clients.tanh(x + y) * z - y).numpy()
    np.testing.assert_allclose(out, np.tanh(a + b) * c - b, rtol=1e-5, atol=1e-6)
    assert len(rec.kernels) == 1


def test_creation_functions_fuse_with_their_consumers():
    a = rand(50)
    x = clients.asarray(a)
    with clients.inspect() as rec:
        out = (x + clients.ones(50, dtype=clients.float32) * 2.0 + clients.arange(50).astype(clients.float32))
        got = out.numpy()
    np.testing.assert_allclose(got, a + 2 + np.arange(50, dtype=np.float32), rtol=1e-6)
    assert len(rec.kernels) == 1


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_vector_and_scalar_tails_agree(dtype):
    # sizes around multiples of the vector width exercise the tail path
    for n in (3, 4, 5, 8, 9, 1023):
        a = (np.arange(n) % 7 - 3).astype(dtype)
        got = (clients.asarray(a) * 3 + 1).numpy()
        np.testing.assert_array_equal(got, a * 3 + 1)


def test_loop_reuses_buffers_in_place():
    a = rand(4096)
    x = clients.asarray(a)
    x = x * 2.0 + 1.0
    x.numpy()
    settle()
    before = clients.stats()
    want = a * np.float32(2) + np.float32(1)
    for _ in range(10):
        x = x * 2.0 + 1.0  # the old x dies with the block: its buffer becomes the new x
        x.numpy()
        want = want * np.float32(2) + np.float32(1)
    after = clients.stats()
    np.testing.assert_allclose(x.numpy(), want, rtol=1e-6)
    assert after["inplace_reuses"] - before["inplace_reuses"] == 10
    assert after["buffers_allocated"] == before["buffers_allocated"]
    assert after["buffer_reuses"] == before["buffer_reuses"]  # not even the pool was needed


def test_no_in_place_reuse_while_the_input_is_alive():
    a = rand(100)
    x = clients.asarray(a)
    before = clients.stats()["inplace_reuses"]
    y = x * 2.0
    y.numpy()
    assert clients.stats()["inplace_reuses"] == before
    np.testing.assert_array_equal(x.numpy(), a)  # untouched


@pytest.mark.parametrize("n", [1000, 37, 1])
def test_min_max_normalization_is_three_kernels(n):
    """The full reductions run ahead of the open element-wise block (their inputs are
    computed), the repeated min(b) is the first one's result, and the 0-d `max - min`
    joins the block: min, max, and one element-wise kernel, at any size (a replay from
    the plan store included)."""
    a = rand(n, seed=n) + 2.0
    b = clients.asarray(a)
    for _ in range(2):  # the second time from the plan store
        with clients.inspect() as rec:
            y = (b - clients.min(b)) / (clients.max(b) - clients.min(b))
            got = y.numpy()
        want = (a - a.min()) / (a.max() - a.min()) if n > 1 else np.full(1, np.nan, np.float32)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)
        assert [k.kind for k in rec.kernels] == ["reduce", "reduce", "elementwise"]


def test_a_zero_d_value_in_a_block_is_written_once_and_a_block_of_them_grows():
    a = rand(4096) + 1.0
    x = clients.asarray(a)
    lo, hi = clients.min(x), clients.max(x)
    clients.sync()
    with clients.inspect() as rec:
        span = hi - lo  # 0-d, computed by every work-item of the block, kept
        y = (x - lo) / span
        got, got_span = y.numpy(), float(span)
    assert len(rec.kernels) == 1 and rec.kernels[0].ops == ["subtract", "subtract", "divide"]
    np.testing.assert_allclose(got_span, a.max() - a.min(), rtol=1e-6)
    np.testing.assert_allclose(got, (a - a.min()) / (a.max() - a.min()), rtol=1e-5)
    three = clients.asarray(np.float32(3.0))
    with clients.inspect() as rec:
        z = (three + 1.0) * x  # a block that starts with a 0-d op and takes x's shape
        got = z.numpy()
    assert len(rec.kernels) == 1
    np.testing.assert_allclose(got, 4 * a, rtol=1e-6)


def test_an_empty_op_shares_no_kernel_with_values_of_another_size():
    # A block of one-element values used to take the shape of an empty op ("grows") and
    # run it at the block's one element: its strided input's coordinates were divided by a
    # zero dimension (SIGFPE on x86) and its empty output written past its end.
    host = np.arange(6, dtype=np.int64).reshape(2, 3)
    empty_view = clients.asarray(host)[:, :0]
    with clients.inspect() as rec:
        a = clients.full((), 2, dtype=clients.int32)
        b = empty_view * a
        d = clients.full((), 5, dtype=clients.int64)
        e = clients.full((4,), 7, dtype=clients.int64) + clients.sum(b)
        assert int(a) == 2 and b.numpy().shape == (2, 0) and int(d) == 5
        np.testing.assert_array_equal(e.numpy(), np.full(4, 7))
    # The empty product runs nowhere (no kernel has it), the values around it alone.
    assert not any("multiply" in k.ops for k in rec.kernels), rec.explain()
    assert "one is empty" in rec.explain()
