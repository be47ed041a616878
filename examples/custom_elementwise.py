"""A custom element-wise op, written as an OpenCL C expression, fused with built-in ops."""

import numpy as np

import clients

# A smooth clamp with a runtime parameter: new values of `k` never recompile.
soft_clamp = clients.custom.elementwise(
    "soft_clamp", "lo + (hi - lo) / (1.0f + exp(-k * x))", inputs=("x", "lo", "hi"), params=("k",)
)


def main():
    rng = np.random.default_rng(0)
    a = rng.standard_normal(1 << 16).astype(np.float32)
    x = clients.asarray(a)
    lo, hi = clients.asarray(np.float32(-1.0)), clients.asarray(np.float32(2.0))
    with clients.inspect() as rec:
        y = soft_clamp(x * 3.0, lo, hi, k=1.5) + 0.5
        got = y.numpy()
    want = -1.0 + 3.0 / (1.0 + np.exp(-1.5 * (a * 3))) + 0.5
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    print("kernels launched:", len(rec.kernels), "ops:", rec.kernels[0].ops)
    assert len(rec.kernels) == 1


if __name__ == "__main__":
    main()
