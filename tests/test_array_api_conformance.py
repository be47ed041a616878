"""Array API 2021.12 names the conformance suite found missing: broadcast_arrays,
from_dlpack, and the array's __dlpack__, __dlpack_device__ and to_device."""

import inspect

import numpy as np
import pytest

import clients


@pytest.mark.parametrize("shapes", [[(3,), (2, 1)], [(4, 1, 2), (3, 1), ()], [(0, 2), (1,)]])
def test_broadcast_arrays_matches_numpy(shapes):
    hosts = [np.arange(int(np.prod(s)), dtype=np.float32).reshape(s) for s in shapes]
    got = clients.broadcast_arrays(*(clients.asarray(h) for h in hosts))
    for g, want in zip(got, np.broadcast_arrays(*hosts)):
        assert g.shape == want.shape
        np.testing.assert_array_equal(g.numpy(), want)


def test_broadcast_arrays_rejects_mismatched_shapes():
    with pytest.raises(ValueError):
        clients.broadcast_arrays(clients.ones((2, 3)), clients.ones((4,)))


def test_dlpack_exports_a_host_copy():
    a = np.arange(6, dtype=np.int64).reshape(2, 3)
    t = clients.asarray(a) * 2
    assert t.__dlpack_device__() == (1, 0)
    np.testing.assert_array_equal(np.from_dlpack(t), a * 2)
    with pytest.raises(ValueError):
        t.__dlpack__(stream=1)


def test_from_dlpack_copies_to_the_device():
    a = np.linspace(-1, 1, 7, dtype=np.float32)
    t = clients.from_dlpack(a)
    assert isinstance(t, clients.Tensor) and t.dtype == np.float32
    np.testing.assert_array_equal(t.numpy(), a)
    with pytest.raises(TypeError):
        clients.from_dlpack([1, 2, 3])


def test_to_device_on_its_own_device_is_the_same_tensor():
    t = clients.asarray(np.arange(4, dtype=np.int32))
    assert t.to_device(t.device) is t
    with pytest.raises(ValueError):
        t.to_device(t.device, stream=0)


@pytest.mark.parametrize("func, params", [
    (clients.from_dlpack, [("x", inspect.Parameter.POSITIONAL_ONLY)]),
    (clients.Tensor.to_device, [("self", inspect.Parameter.POSITIONAL_ONLY),
                                ("device", inspect.Parameter.POSITIONAL_ONLY),
                                ("stream", inspect.Parameter.KEYWORD_ONLY)]),
    (clients.Tensor.__dlpack__, [("self", inspect.Parameter.POSITIONAL_ONLY),
                                 ("stream", inspect.Parameter.KEYWORD_ONLY)]),
])
def test_signatures_follow_the_standard(func, params):
    got = [(p.name, p.kind) for p in inspect.signature(func).parameters.values()]
    assert got == params


def test_constants_are_the_standard_floats():
    assert (clients.e, clients.pi) == (np.e, np.pi)
    assert clients.inf == np.inf and np.isnan(clients.nan)
    assert all(type(getattr(clients, n)) is float and n in clients.__all__ for n in ("e", "inf", "nan", "pi"))
