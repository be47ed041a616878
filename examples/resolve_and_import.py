"""Reach the buffer behind a lazy tensor, and wrap an existing pyopencl array."""

import numpy as np
import pyopencl.array as cla

import clients


def main():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = clients.asarray(a)
    y = clients.exp(x * 0.1)  # lazy
    buf = clients.resolve(y)  # runs what y needs; returns its buffer, no copy
    print("resolved:", type(buf).__name__, buf.shape, buf.dtype)
    del y  # the buffer stays valid while `buf` lives
    np.testing.assert_allclose(buf.get(), np.exp(a * 0.1), rtol=1e-6)

    queue = clients.client_for().server.runtime.queue
    mine = cla.to_device(queue, np.full(5, 3.0, np.float32))
    t = clients.from_cl(mine)  # no copy: the tensor reads `mine`'s buffer
    np.testing.assert_allclose((t * t).numpy(), np.full(5, 9.0))
    print("imported and squared:", (t * t).numpy())


if __name__ == "__main__":
    main()
