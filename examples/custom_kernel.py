"""An opaque custom kernel (a prefix sum) between fused element-wise blocks."""

import numpy as np
import pyopencl as cl

import clients

SOURCE = """
__kernel void running_sum(__global const float* x, __global float* y, const int n)
{   // one work-item, sequential: small and simple, to show the mechanics
    float acc = 0.0f;
    for (int i = 0; i < n; ++i) { acc += x[i]; y[i] = acc; }
}
"""
_programs = {}


def launch(queue, inputs, outputs):
    """Enqueue the kernel on the server's queue; never wait here."""
    if queue.context not in _programs:
        _programs[queue.context] = cl.Program(queue.context, SOURCE).build()
    (x,), (y,) = inputs, outputs
    _programs[queue.context].running_sum(queue, (1,), None, x.data, y.data, np.int32(x.size))


cumsum = clients.custom.kernel("cumsum", launch, outputs=lambda x: [(x.shape, x.dtype)])


def main():
    a = np.linspace(0, 1, 1000, dtype=np.float32)
    x = clients.asarray(a)
    with clients.inspect() as rec:
        y = clients.sqrt(cumsum(x * 2.0)) + 1.0
        got = y.numpy()
    np.testing.assert_allclose(got, np.sqrt(np.cumsum(a * 2)) + 1, rtol=1e-4)
    print("kernels:", [(k.kind, k.ops) for k in rec.kernels])
    assert [k.kind for k in rec.kernels] == ["elementwise", "custom", "elementwise"]


if __name__ == "__main__":
    main()
