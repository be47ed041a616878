"""Custom element-wise ops fuse; custom kernels keep their place; resolve and from_cl."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pytest

import clients
from tests.conftest import rand, settle

TIMEOUT = 60

softplus = clients.custom.elementwise("softplus", "x > 20 ? x : log1p(exp(x))")
lerp = clients.custom.elementwise("lerp", "a + t * (b - a)", inputs=("a", "b"), params=("t",))


def np_softplus(v):
    return np.where(v > 20, v, np.log1p(np.exp(v)))


def test_custom_op_fuses_between_builtins(via):
    a = rand(1001) * 10
    x = clients.asarray(a)
    run = via(lambda x: softplus(x * 2.0) - 1.0)
    with clients.inspect() as rec:
        got = run(x).numpy()
    np.testing.assert_allclose(got, np_softplus(a * 2) - 1, rtol=1e-5, atol=1e-6)
    assert len(rec.kernels) == 1
    assert rec.kernels[0].ops == ["multiply", "custom_softplus", "subtract"]


def test_custom_params_are_runtime_values_and_broadcast(via):
    a, b = rand((4, 6), seed=1), rand(6, seed=2)
    x, y = clients.asarray(a), clients.asarray(b)
    run = via(lambda x, y, t: lerp(x, y, t=t))
    run(x, y, 0.5).numpy()
    before = clients.stats()["compiles"]
    for t in (0.0, 0.25, 1.0):
        np.testing.assert_allclose(run(x, y, t).numpy(), a + np.float32(t) * (b - a), rtol=1e-5, atol=1e-6)
    assert clients.stats()["compiles"] == before


def test_custom_op_output_dtype_and_names_that_look_generated():
    # Names like x0 / n / idx are the generated code's own: they must not collide.
    f = clients.custom.elementwise("clash", "x0 * n + idx", inputs=("x0", "n"), params=("idx",),
                                   dtype=np.float64)
    a, b = rand(10, seed=3), rand(10, seed=4)
    got = f(clients.asarray(a), clients.asarray(b), idx=3.0)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got.numpy(), (a * b + np.float32(3)).astype(np.float64), rtol=1e-6)


def test_bad_custom_sources_raise_at_definition():
    with pytest.raises(clients.custom.CustomOpError, match="does not compile"):
        clients.custom.elementwise("broken", "x +* 2")
    with pytest.raises(clients.custom.CustomOpError, match="does not compile"):
        clients.custom.elementwise("unknown_name", "x + y")
    with pytest.raises(clients.custom.CustomOpError, match="not a valid identifier"):
        clients.custom.elementwise("bad name", "x")
    with pytest.raises(clients.custom.CustomOpError, match="one OpenCL C expression"):
        clients.custom.elementwise("two", "x; y")
    with pytest.raises(TypeError, match="needs the params"):
        lerp(clients.asarray([1.0]), clients.asarray([2.0]))
    np.testing.assert_allclose((clients.asarray([1.0]) + 1.0).numpy(), [2.0])


_PROGRAMS: dict = {}


def scale_kernel(ctx):
    if ctx not in _PROGRAMS:
        program = cl.Program(ctx, """
            __kernel void scale_rev(__global const float* x, __global float* y, const float k, const int n)
            { int i = get_global_id(0); if (i < n) y[i] = k * x[n - 1 - i]; }
        """).build()
        _PROGRAMS[ctx] = cl.Kernel(program, "scale_rev")
    return _PROGRAMS[ctx]


def launch_scale_reversed(queue, inputs, outputs, *, k):
    (x,), (y,) = inputs, outputs
    n = x.size
    scale_kernel(queue.context)(queue, (n,), None, x.data, y.data, np.float32(k), np.int32(n))


reverse_scale = clients.custom.kernel(
    "reverse_scale", launch_scale_reversed, outputs=lambda x, *, k: [(x.shape, x.dtype)]
)


def test_custom_kernel_outputs_fuse_later_and_keep_order(via):
    a = rand(333)
    x = clients.asarray(a)

    def around(x):
        before = clients.exp(x) * 0.5  # a block before the custom kernel
        mid = reverse_scale(before, k=3.0)
        return (mid + 1.0) * 2.0  # fused after it

    run = via(around)
    with clients.inspect() as rec:
        got = run(x).numpy()
    np.testing.assert_allclose(got, (np.exp(a)[::-1] * 0.5 * 3 + 1) * 2, rtol=1e-5)
    assert [k.kind for k in rec.kernels] == ["elementwise", "custom", "elementwise"]
    assert rec.kernels[2].ops == ["add", "multiply"]


def test_custom_kernel_with_several_outputs(via):
    def launch(queue, inputs, outputs):
        cl.enqueue_copy(queue, outputs[0].data, inputs[0].data)
        cl.enqueue_copy(queue, outputs[1].data, inputs[0].data)

    twice = clients.custom.kernel("twice", launch, outputs=lambda x: [(x.shape, x.dtype), (x.shape, x.dtype)])
    a = rand(17)
    p, q = via(twice)(clients.asarray(a))
    np.testing.assert_array_equal((p + q).numpy(), a + a)


def test_failing_launch_marks_outputs_failed_only():
    def launch(queue, inputs, outputs):
        raise RuntimeError("launch exploded")

    boom = clients.custom.kernel("boom", launch, outputs=lambda x: [(x.shape, x.dtype)])
    x = clients.asarray(rand(5))
    y = boom(x)
    with pytest.raises(clients.TensorFailedError, match="boom.*launch exploded"):
        y.numpy()
    np.testing.assert_allclose((x * 2.0).numpy(), rand(5) * 2, rtol=1e-6)


def test_launch_calling_back_into_clients_gets_reentrancy_error():
    def launch(queue, inputs, outputs):
        clients.asarray([1.0])  # not allowed under the lock

    bad = clients.custom.kernel("calls_back", launch, outputs=lambda x: [(x.shape, x.dtype)])
    y = bad(clients.asarray(rand(3)))
    with pytest.raises(clients.TensorFailedError) as info:
        y.numpy()
    assert isinstance(info.value.__cause__, clients.ReentrancyError)
    np.testing.assert_allclose((clients.asarray([2.0]) * 2.0).numpy(), [4.0])


def test_user_event_gate_does_not_deadlock_other_threads():
    """The deadlock fusion backends hit: A reads through a gated kernel while B works."""
    ctx = clients.client_for().server.runtime.context
    gate = cl.UserEvent(ctx)

    def launch(queue, inputs, outputs):
        cl.enqueue_copy(queue, outputs[0].data, inputs[0].data, wait_for=[gate])

    gated = clients.custom.kernel("gated_copy", launch, outputs=lambda x: [(x.shape, x.dtype)])
    a = rand(64)
    x = clients.asarray(a)
    y = gated(x) * 2.0
    a_waiting = threading.Event()
    box: dict = {}
    readers: list[int] = []

    def hook():  # called by every wait before it blocks: holds B back until A is inside its wait
        if threading.get_ident() in readers:
            a_waiting.set()

    def reader():
        readers.append(threading.get_ident())
        box["value"] = y.numpy()  # waits until the gate opens, with the lock released

    from fusion_server.runtime import waits

    waits.guards.append(hook)
    th_a = threading.Thread(target=reader, daemon=True)
    th_a.start()
    try:
        assert a_waiting.wait(TIMEOUT)
    finally:
        waits.guards.remove(hook)
    b_box: dict = {}

    def worker_b():
        try:
            launched = clients.stats()["kernels_launched"]
            z = clients.sin(x) + 1.0
            clients.flush()  # registers and launches, reads nothing
            b_box["launched"] = clients.stats()["kernels_launched"] - launched
            b_box["z"] = z
        finally:
            gate.set_status(cl.command_execution_status.COMPLETE)

    th_b = threading.Thread(target=worker_b, daemon=True)
    th_b.start()
    th_b.join(TIMEOUT)
    assert not th_b.is_alive(), "B blocked: the server lock was held while A waited"
    th_a.join(TIMEOUT)
    assert not th_a.is_alive(), "A's read never completed"
    assert b_box["launched"] == 1
    np.testing.assert_allclose(box["value"], a * 2, rtol=1e-6)
    np.testing.assert_allclose(b_box["z"].numpy(), np.sin(a) + 1, rtol=1e-5, atol=1e-6)


def test_resolve_flushes_and_returns_the_buffer_without_copy():
    a = rand((6, 5))
    x = clients.asarray(a)
    y = clients.exp(x)[1:, ::2]  # a view of a computed tensor
    arr = clients.resolve(y)
    assert isinstance(arr, cla.Array)
    assert arr.shape == (5, 3) and arr.dtype == np.float32
    assert arr.strides == (20, 8) and arr.offset == 20
    whole = np.empty(30, np.float32)
    cl.enqueue_copy(arr.queue, whole, arr.base_data)
    got = np.lib.stride_tricks.as_strided(whole[5:], arr.shape, arr.strides)
    np.testing.assert_allclose(got, np.exp(a)[1:, ::2], rtol=1e-6)


def test_resolved_buffer_survives_the_tensor(baseline):
    a = rand(100)
    y = clients.asarray(a) * 3.0
    arr = clients.resolve(y)
    del y
    settle()
    # Other work that would love to reuse a freed buffer of this size:
    junk = [clients.asarray(rand(100, seed=i)) + 1.0 for i in range(5)]
    for j in junk:
        j.numpy()
    np.testing.assert_allclose(arr.get(), a * 3, rtol=1e-6)
    del arr, junk, j
    gc.collect()
    settle()
    assert clients.stats()["buffers_live"] == baseline


def test_from_cl_round_trip_without_copy():
    server = clients.client_for().server
    queue = server.runtime.queue
    a = rand((4, 6))
    arr = cla.to_device(queue, a)
    t = clients.from_cl(arr)
    np.testing.assert_array_equal(t.numpy(), a)
    np.testing.assert_allclose((t * 2.0 + 1.0).numpy(), a * 2 + 1, rtol=1e-6)
    back = clients.resolve(t)
    assert back.data.int_ptr == arr.data.int_ptr  # the same buffer
    view = clients.from_cl(arr[:, ::3])
    np.testing.assert_array_equal(view.numpy(), a[:, ::3])


def test_bad_imports_raise_clearly():
    other_ctx = cl.Context([clients.client_for().server.info.device])
    foreign = cla.zeros(cl.CommandQueue(other_ctx), 4, np.float32)
    with pytest.raises(ValueError, match="another OpenCL context"):
        clients.from_cl(foreign)
    queue = clients.client_for().server.runtime.queue
    with pytest.raises(TypeError, match="not supported"):
        clients.from_cl(cla.zeros(queue, 4, np.float16))
    with pytest.raises(TypeError, match="pyopencl.array.Array"):
        clients.from_cl(np.zeros(4))
    base = cla.zeros(queue, 8, np.float32)
    lying = cla.Array(queue, (16,), np.float32, data=base.data)  # claims more than the buffer holds
    with pytest.raises(ValueError, match="outside its buffer"):
        clients.from_cl(lying)
    np.testing.assert_allclose((clients.asarray([1.0]) + 1.0).numpy(), [2.0])


def _double_plus_one_fuser():
    """A pattern fuser for `x * 2.0 + 1.0`, run by a hand-written kernel."""
    from fusion_server.fusers import PatternFuser

    src = """__kernel void twice_plus_one(__global const float* x, __global float* y, const int n)
             { int i = get_global_id(0); if (i < n) y[i] = 2.0f * x[i] + 1.0f; }"""
    kernels: dict = {}

    def run(queue, inputs, output, scalars):
        k = kernels.get(queue.context)
        if k is None:
            k = kernels[queue.context] = cl.Kernel(cl.Program(queue.context, src).build(), "twice_plus_one")
        k(queue, (output.size,), None, inputs[0].data, output.data, np.int32(output.size))

    def accept(k, op):
        values = [float(v.value) for v in op.inputs if type(v) is not int]
        return op.out.dtype == np.float32 and values == ([2.0] if k == 0 else [1.0])

    return PatternFuser("twice_plus_one", ["multiply", "add"], run, accept=accept)


def test_custom_fuser_claims_its_pattern_and_competes():
    template = _double_plus_one_fuser()
    clients.custom.register_fuser(lambda ctx: template.fresh())
    try:
        a = rand(100)
        x = clients.asarray(a)
        with clients.inspect() as rec:
            got = (x * 2.0 + 1.0).numpy()
        np.testing.assert_allclose(got, a * 2 + 1, rtol=1e-6)
        assert [k.kind for k in rec.kernels] == ["custom-fuser"]
        assert "fuser twice_plus_one" in rec.kernels[0].why
        # Another chain: the pattern fuser scores 0 and the element-wise fuser takes it.
        with clients.inspect() as rec:
            got = (x * 3.0 + 1.0).numpy()
        np.testing.assert_allclose(got, a * 3 + 1, rtol=1e-6)
        assert [k.kind for k in rec.kernels] == ["elementwise"]
        # The intermediate is kept: the pattern's kernel cannot provide it, so the block
        # runs as an ordinary fused kernel that writes both values.
        with clients.inspect() as rec:
            mid = x * 2.0
            out = mid + 1.0
            got_out = out.numpy()
        np.testing.assert_allclose(got_out, a * 2 + 1, rtol=1e-6)
        np.testing.assert_allclose(mid.numpy(), a * 2, rtol=1e-6)
    finally:
        clients.custom.unregister_fusers()
    with clients.inspect() as rec:
        (x * 2.0 + 1.0).numpy()
    assert [k.kind for k in rec.kernels] == ["elementwise"]


def test_custom_names_are_renamed_once_each():
    """Inputs `x` and `u_x` are two values (the renaming maps every identifier in one
    pass); a name that is also a built-in function stays the function when called."""
    both = clients.custom.elementwise("two_names", "x + 10 * u_x", inputs=("x", "u_x"))
    a, b = rand(64, seed=1), rand(64, seed=2)
    np.testing.assert_allclose(both(clients.asarray(a), clients.asarray(b)).numpy(), a + 10 * b, rtol=1e-6)
    shadow = clients.custom.elementwise("shadow", "exp * 2 + exp(exp)", inputs=("exp",))
    np.testing.assert_allclose(shadow(clients.asarray(a)).numpy(), a * 2 + np.exp(a), rtol=1e-5)
    for bad in ("int", "float4", "double", "uchar16"):
        with pytest.raises(clients.custom.CustomOpError, match="keyword or type name"):
            clients.custom.elementwise(f"bad_{bad}", "x", inputs=(bad,))


def test_custom_expressions_are_checked_for_the_dtype_of_each_call():
    """`x % 2` is defined although floats cannot take it; a call with float inputs raises
    at the call, naming the dtype, and integer calls compute numpy's values (for non-
    negative operands, where C's % and numpy's agree)."""
    mod = clients.custom.elementwise("int_mod", "x % 2")
    a = np.arange(10, dtype=np.int32)
    np.testing.assert_array_equal(mod(clients.asarray(a)).numpy(), a % 2)
    with pytest.raises(clients.custom.CustomOpError, match="does not compile for float32 inputs"):
        mod(clients.asarray(a.astype(np.float32)))
    root = clients.custom.elementwise("float_root", "sqrt(x)")
    np.testing.assert_allclose(root(clients.asarray(a.astype(np.float32))).numpy(), np.sqrt(a), rtol=1e-6)
    with pytest.raises(clients.custom.CustomOpError, match="int32 inputs"):
        root(clients.asarray(a))
    np.testing.assert_allclose((clients.asarray([1.0]) + 1.0).numpy(), [2.0])  # nothing else affected
