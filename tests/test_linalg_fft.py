"""The `linalg` and `fft` extensions against numpy: the device-side functions (diagonal,
trace, outer, cross, norms, matrix_power, shifts, frequencies) and the host-side ones
(factorizations through numpy.linalg, transforms through numpy.fft), dtypes kept."""

from __future__ import annotations

import math

import numpy as np
import pytest

import clients
from clients import fft, linalg

RTOL = {np.float32: 2e-5, np.float64: 1e-12, np.complex64: 2e-5, np.complex128: 1e-12}


def matrices(dtype, shape, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, shape)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.uniform(-1, 1, shape)
    return a.astype(dtype)


def close(got, want, dtype) -> None:
    host = got.numpy()
    assert host.dtype == np.asarray(want).dtype, (host.dtype, np.asarray(want).dtype)
    np.testing.assert_allclose(host, want, rtol=RTOL[np.dtype(dtype).type] * 50, atol=RTOL[np.dtype(dtype).type])


@pytest.fixture(params=[np.float32, np.float64, np.complex64], ids=lambda d: d.__name__)
def dtype(request):
    if np.dtype(request.param) == np.float64 and not clients.client_for().fp64:
        pytest.skip("no fp64 on this device")
    return request.param


@pytest.mark.parametrize("offset", [0, 1, -2, 7])
def test_diagonal_is_a_view_and_trace_sums_it(dtype, offset):
    a = matrices(dtype, (2, 4, 5), 1)
    x = clients.asarray(a)
    d = linalg.diagonal(x, offset=offset)
    close(d, np.diagonal(a, offset, -2, -1), dtype)
    close(linalg.trace(x, offset=offset), np.trace(a, offset, axis1=-2, axis2=-1), dtype)
    ints = np.arange(20, dtype=np.int32).reshape(4, 5)
    got = linalg.trace(clients.asarray(ints), offset=offset)
    assert got.dtype == np.int64 and int(got) == np.trace(ints, offset)


def test_outer_and_cross(dtype):
    a, b = matrices(dtype, (6,), 2), matrices(dtype, (4,), 3)
    close(linalg.outer(clients.asarray(a), clients.asarray(b)), np.outer(a, b), dtype)
    u, v = matrices(dtype, (5, 3), 4), matrices(dtype, (3,), 5)
    close(linalg.cross(clients.asarray(u), clients.asarray(v)), np.cross(u, v), dtype)
    with pytest.raises(ValueError, match="3 elements"):
        linalg.cross(clients.asarray(a), clients.asarray(a))


@pytest.mark.parametrize("ord", [2, 1, math.inf, -math.inf, 0, 3.5])
def test_vector_norm(dtype, ord):
    a = matrices(dtype, (3, 7), 6)
    a[0, 2] = 0
    x = clients.asarray(a)
    for axis in (None, 1, (0, 1)):
        close(linalg.vector_norm(x, axis=axis, ord=ord), np.asarray(np.linalg.vector_norm(a, axis=axis, ord=ord)),
              dtype)
    assert linalg.vector_norm(x, keepdims=True).shape == (1, 1)


@pytest.mark.parametrize("ord", ["fro", 1, -1, math.inf, -math.inf, 2, -2, "nuc"])
def test_matrix_norm(dtype, ord):
    a = matrices(dtype, (2, 4, 3), 7)
    close(linalg.matrix_norm(clients.asarray(a), ord=ord), np.linalg.matrix_norm(a, ord=ord), dtype)
    assert linalg.matrix_norm(clients.asarray(a), ord=ord, keepdims=True).shape == (2, 1, 1)


@pytest.mark.parametrize("n", [0, 1, 2, 5, -3])
def test_matrix_power(dtype, n):
    a = matrices(dtype, (2, 3, 3), 8) + 2 * np.eye(3, dtype=dtype)
    close(linalg.matrix_power(clients.asarray(a), n), np.linalg.matrix_power(a, n), dtype)


def test_factorizations_on_the_host(dtype):
    a = matrices(dtype, (2, 4, 4), 9)
    spd = a @ np.conj(np.swapaxes(a, -1, -2)) + 4 * np.eye(4, dtype=dtype)
    x, s = clients.asarray(a), clients.asarray(spd)
    close(linalg.det(x), np.linalg.det(a), dtype)
    close(linalg.inv(x), np.linalg.inv(a), dtype)
    close(linalg.cholesky(s), np.linalg.cholesky(spd), dtype)
    close(linalg.cholesky(s, upper=True), np.linalg.cholesky(spd, upper=True), dtype)
    sign, logabs = linalg.slogdet(x)
    close(sign, np.linalg.slogdet(a).sign, dtype)
    close(logabs, np.linalg.slogdet(a).logabsdet, dtype)
    w, v = linalg.eigh(s)
    close(w, np.linalg.eigh(spd).eigenvalues, dtype)
    close(linalg.eigvalsh(s), np.linalg.eigvalsh(spd), dtype)
    assert linalg.eig(x).eigenvalues.dtype.kind == "c" and linalg.eigvals(s).dtype.kind == "c"
    np.testing.assert_allclose(np.sort_complex(linalg.eigvals(x).numpy().ravel()),
                               np.sort_complex(np.linalg.eigvals(a).ravel()), rtol=1e-3)
    b = matrices(dtype, (2, 4, 2), 10)
    close(linalg.solve(x, clients.asarray(b)), np.linalg.solve(a, b), dtype)
    q, r = linalg.qr(x, mode="complete")
    close(q @ r, a, dtype)
    u, sv, vh = linalg.svd(x, full_matrices=False)
    close(linalg.svdvals(x), np.linalg.svd(a, compute_uv=False), dtype)
    close((u * clients.astype(sv, u.dtype)[..., None, :]) @ vh, a, dtype)
    close(linalg.pinv(x), np.linalg.pinv(a), dtype)
    assert linalg.matrix_rank(x).numpy().tolist() == [4, 4]
    assert linalg.matrix_rank(clients.asarray(np.ones((3, 3), dtype))).numpy().tolist() == 1


def test_host_factorization_errors_are_value_errors():
    singular = clients.asarray(np.zeros((3, 3), np.float32))
    with pytest.raises(ValueError, match="linalg.inv"):
        linalg.inv(singular)
    with pytest.raises(ValueError, match="square"):
        linalg.det(clients.asarray(np.zeros((2, 3), np.float32)))
    with pytest.raises(TypeError, match="floating"):
        linalg.inv(clients.asarray(np.eye(2, dtype=np.int32)))


@pytest.mark.parametrize("name", ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft", "fftn", "ifftn", "rfftn",
                                  "irfftn"])
def test_transforms_match_numpy_and_keep_single_precision(name):
    rng = np.random.default_rng(11)
    single = np.complex64 if name in ("fft", "ifft", "irfft", "hfft", "fftn", "ifftn", "irfftn") else np.float32
    a = rng.uniform(-1, 1, (4, 6)).astype(np.float32)
    if np.dtype(single).kind == "c":
        a = (a + 1j * rng.uniform(-1, 1, (4, 6))).astype(single)
    kwargs = {"norm": "ortho"} if name.endswith("n") else {"n": 5, "axis": 0, "norm": "forward"}
    got = getattr(fft, name)(clients.asarray(a), **kwargs)
    want = getattr(np.fft, name)(a, **kwargs)
    assert got.dtype.itemsize == (8 if name in ("fft", "ifft", "rfft", "ihfft", "fftn", "ifftn", "rfftn") else 4)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="norm"):
        getattr(fft, name)(clients.asarray(a), norm="sideways")


def test_frequencies_and_shifts():
    for n in (1, 4, 7):
        np.testing.assert_allclose(fft.fftfreq(n, d=0.25).numpy(), np.fft.fftfreq(n, d=0.25))
        np.testing.assert_allclose(fft.rfftfreq(n, dtype=clients.float32).numpy(), np.fft.rfftfreq(n))
    y = np.arange(30).reshape(5, 6)
    for axes in (None, 0, (1,), (0, 1)):
        np.testing.assert_array_equal(fft.fftshift(clients.asarray(y), axes=axes).numpy(), np.fft.fftshift(y, axes))
        np.testing.assert_array_equal(fft.ifftshift(clients.asarray(y), axes=axes).numpy(),
                                      np.fft.ifftshift(y, axes))
    with pytest.raises(TypeError, match="real floating"):
        fft.fftfreq(4, dtype=clients.int32)


def test_bad_arguments_raise_at_the_call():
    v = clients.asarray(np.ones(3, np.float32))
    m = clients.asarray(np.ones((3, 3), np.float32))
    cases = [
        (ValueError, lambda: linalg.diagonal(v)),
        (ValueError, lambda: linalg.outer(m, v)),
        (TypeError, lambda: linalg.cross(clients.asarray(np.ones(3, bool)), v)),
        (np.exceptions.AxisError, lambda: linalg.cross(v, v, axis=0)),
        (ValueError, lambda: linalg.matrix_norm(m, ord=3)),
        (ValueError, lambda: linalg.qr(m, mode="raw")),
        (TypeError, lambda: linalg.solve(clients.asarray(np.eye(2, dtype=np.int32)),
                                         clients.asarray(np.ones(2, np.int32)))),
        (TypeError, lambda: linalg.vector_norm(clients.asarray(np.ones(3, np.int32)))),
        (TypeError, lambda: linalg.det("not a tensor")),
        (TypeError, lambda: fft.fft(np.ones(4))),
        (TypeError, lambda: fft.fft(v)),  # (a real tensor: fft takes complex ones)
        (TypeError, lambda: fft.rfft(clients.asarray(np.ones(4, np.complex64)))),
        (ValueError, lambda: fft.fft(clients.asarray(np.ones(4, np.complex64)), n=0)),
        (ValueError, lambda: fft.fftfreq(0)),
        (TypeError, lambda: fft.fftshift(np.ones(4))),
    ]
    for error, call in cases:
        with pytest.raises(error):
            call()
    np.testing.assert_array_equal(v.numpy(), np.ones(3, np.float32))  # (the server is intact)


def test_norms_and_shifts_of_edge_shapes():
    empty = clients.asarray(np.zeros((0, 3), np.float32))
    np.testing.assert_array_equal(linalg.vector_norm(empty, axis=0, ord=math.inf).numpy(), np.zeros(3))
    assert fft.fftshift(clients.asarray(np.arange(4.0)), axes=()).numpy().tolist() == [0, 1, 2, 3]
    m = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(linalg.matrix_power(clients.asarray(m[:, :2]), 1).numpy(), m[:, :2])
    np.testing.assert_array_equal(clients.from_dlpack(clients.asarray(np.zeros((0, 2))), copy=True).numpy(),
                                  np.zeros((0, 2)))
