"""A custom fuser: recognise `log(exp(x) + 1)` and run a numerically stable softplus.

Written naively, softplus overflows: exp(100) is inf in float32, so log(exp(x) + 1) gives
inf where the answer is 100. The fuser below claims that chain of three ops wherever a
block starts with it and launches its own kernel, which computes the stable form.
"""

import numpy as np
import pyopencl as cl

import clients
from fusion_server.fusers import PatternFuser
from fusion_server.ir import Scalar

SOURCE = """
__kernel void stable_softplus(__global const float* x, __global float* y, const int n)
{
    int i = get_global_id(0);
    if (i < n) { float v = x[i]; y[i] = v > 20.0f ? v : log1p(exp(v)); }
}
"""
_programs = {}


def run(queue, inputs, output, scalars):
    """Enqueue the stable kernel (never wait: this runs under the server lock)."""
    if queue.context not in _programs:
        _programs[queue.context] = cl.Kernel(cl.Program(queue.context, SOURCE).build(), "stable_softplus")
    x = inputs[0]
    _programs[queue.context](queue, (x.size,), None, x.data, output.data, np.int32(x.size))


def adds_one(k, op):
    """Only `exp(x) + 1.0` (a float32 chain) continues the pattern at its second op."""
    if op.out.dtype != np.float32:
        return False
    if k != 1:
        return True
    return any(type(v) is Scalar and float(v.value) == 1.0 for v in op.inputs)


def main():
    template = PatternFuser("stable_softplus", ["exp", "add", "log"], run, accept=adds_one)
    clients.custom.register_fuser(lambda ctx: template.fresh())
    try:
        a = np.array([-30.0, -1.0, 0.0, 1.0, 30.0, 100.0], np.float32)
        x = clients.asarray(a)
        with clients.inspect() as rec:
            y = clients.log(clients.exp(x) + 1.0)
            got = y.numpy()
        want = np.where(a > 20, a, np.log1p(np.exp(np.minimum(a, 20))))
        print("stable softplus:", got)
        print("kernels:", [(k.kind, k.ops) for k in rec.kernels])
        assert rec.kernels[0].kind == "custom-fuser"
        np.testing.assert_allclose(got, want, rtol=1e-6)
        print("naive numpy gives", np.log(np.exp(a) + 1))
    finally:
        clients.custom.unregister_fusers()


if __name__ == "__main__":
    main()
