"""Array API 2021.12 names the conformance suite found missing: broadcast_arrays,
from_dlpack, and the array's __dlpack__, __dlpack_device__ and to_device."""

import gc
import inspect

import numpy as np
import pytest
from conftest import settle

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


def test_dlpack_takes_the_2023_12_keywords():
    a = np.arange(5, dtype=np.float32)
    t = clients.asarray(a) + 1
    # A versioned capsule (max_version) and a legacy one both carry the values.
    np.testing.assert_array_equal(np.from_dlpack(t, copy=True), a + 1)
    for kwargs in ({"max_version": (1, 0)}, {"max_version": None}, {"dl_device": (1, 0)}, {"copy": True}):
        capsule = t.__dlpack__(**kwargs)
        name = "dltensor_versioned" if kwargs.get("max_version") else "dltensor"
        assert f'"{name}"' in repr(capsule)
    with pytest.raises(BufferError, match="dl_device"):
        t.__dlpack__(dl_device=(2, 0))
    np.testing.assert_array_equal(t.numpy(), a + 1)  # a refused export leaves the tensor as it was


def test_dlpack_without_a_copy_maps_the_buffer_on_a_cpu_device(baseline):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = clients.asarray(a) * 2
    view = t[::-1, 1::2]  # (a view: strides and an offset)
    if clients.client_for().server.info.kind != "CPU":
        with pytest.raises(BufferError, match="copy=False"):
            view.__dlpack__(copy=False)
        return
    host = np.from_dlpack(view, copy=False)
    np.testing.assert_array_equal(host, (a * 2)[::-1, 1::2])
    twice = np.from_dlpack(view, copy=False)
    assert np.shares_memory(host, twice)  # (two maps of one buffer: the same memory)
    host[0, 0] = -1  # the tensor's own buffer: the write is the tensor's
    np.testing.assert_array_equal(t.numpy()[2, 1], -1)
    del t, view
    gc.collect()
    np.testing.assert_array_equal(twice[0, 0], -1)  # (the buffer outlives the tensor while exported)
    del host, twice
    settle()
    assert clients.stats()["buffers_live"] == baseline


def test_from_dlpack_takes_device_and_copy():
    a = np.arange(4, dtype=np.int16)
    t = clients.from_dlpack(a, device=clients.asarray(a).device, copy=True)
    assert t.dtype == np.int16
    np.testing.assert_array_equal(t.numpy(), a)
    assert clients.from_dlpack(t) is t and clients.from_dlpack(t, copy=False) is t
    twin = clients.from_dlpack(t, copy=True)
    assert twin is not t
    np.testing.assert_array_equal(twin.numpy(), a)
    with pytest.raises(BufferError, match="copy=False"):
        clients.from_dlpack(a, copy=False)
    with pytest.raises(TypeError, match="copy"):
        clients.from_dlpack(a, copy="yes")


def test_to_device_on_its_own_device_is_the_same_tensor():
    t = clients.asarray(np.arange(4, dtype=np.int32))
    assert t.to_device(t.device) is t
    with pytest.raises(ValueError):
        t.to_device(t.device, stream=0)


@pytest.mark.parametrize("func, params", [
    (clients.from_dlpack, [("x", inspect.Parameter.POSITIONAL_ONLY), ("device", inspect.Parameter.KEYWORD_ONLY),
                           ("copy", inspect.Parameter.KEYWORD_ONLY)]),
    (clients.Tensor.to_device, [("self", inspect.Parameter.POSITIONAL_ONLY),
                                ("device", inspect.Parameter.POSITIONAL_ONLY),
                                ("stream", inspect.Parameter.KEYWORD_ONLY)]),
    (clients.Tensor.__dlpack__, [("self", inspect.Parameter.POSITIONAL_ONLY),
                                 *((n, inspect.Parameter.KEYWORD_ONLY)
                                   for n in ("stream", "max_version", "dl_device", "copy"))]),
])
def test_signatures_follow_the_standard(func, params):
    got = [(p.name, p.kind) for p in inspect.signature(func).parameters.values()]
    assert got == params


def test_constants_are_the_standard_floats():
    assert (clients.e, clients.pi) == (np.e, np.pi)
    assert clients.inf == np.inf and np.isnan(clients.nan)
    assert all(type(getattr(clients, n)) is float and n in clients.__all__ for n in ("e", "inf", "nan", "pi"))


def test_finfo_fields_are_python_numbers():
    for dtype, host in ((clients.float32, np.float32), (clients.float64, np.float64)):
        for arg in (dtype, clients.asarray(host(1))):
            info = clients.finfo(arg)
            want = np.finfo(host)
            assert type(info.bits) is int and info.bits == want.bits
            for field in ("eps", "max", "min", "smallest_normal"):
                assert type(getattr(info, field)) is float
                assert getattr(info, field) == float(getattr(want, field))
            assert info.dtype == host


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32])
def test_vecdot_keeps_the_promoted_dtype(dtype):
    a = np.arange(12, dtype=dtype).reshape(3, 4)
    b = np.arange(4, dtype=dtype)[::-1].copy()
    got = clients.vecdot(clients.asarray(a), clients.asarray(b))
    want = np.vecdot(a, b)
    assert got.dtype == want.dtype == dtype
    np.testing.assert_array_equal(got.numpy(), want)
    empty = clients.vecdot(clients.asarray(a[:, :0]), clients.asarray(b[:0]))
    assert empty.dtype == dtype
    np.testing.assert_array_equal(empty.numpy(), np.zeros(3, dtype))


@pytest.mark.parametrize("key", [True, False, np.True_, (True,), (Ellipsis, True), (0, True), (True, 1),
                                 (slice(None), False, 1), (np.True_, None, 1)])
def test_zero_dimensional_boolean_index_reads_as_numpy(key):
    host = np.arange(6.0).reshape(2, 3)
    got = clients.asarray(host)[key]
    np.testing.assert_array_equal(got.numpy(), host[key])
    assert got.shape == host[key].shape


def test_zero_dimensional_boolean_tensor_index():
    host = np.float32(3.0)
    x = clients.asarray(host)
    for flag in (True, False):
        mask = clients.asarray(np.bool_(flag))
        np.testing.assert_array_equal(x[mask].numpy(), np.asarray(host)[np.bool_(flag)])


def test_zero_dimensional_boolean_index_assigns_as_numpy():
    host = np.arange(6.0).reshape(2, 3)
    x = clients.asarray(host)
    x[clients.asarray(np.False_)] = 5.0
    host[np.False_] = 5.0
    np.testing.assert_array_equal(x.numpy(), host)
    x[True] = 7.0
    host[True] = 7.0
    np.testing.assert_array_equal(x.numpy(), host)
    x[0, True] = clients.asarray(np.array([[1.0, 2.0, 3.0]]))
    host[0, True] = np.array([[1.0, 2.0, 3.0]])
    np.testing.assert_array_equal(x.numpy(), host)


def test_assigned_value_may_have_leading_unit_dimensions():
    host = np.zeros((2, 3))
    x = clients.asarray(host)
    value = np.arange(3.0).reshape(1, 1, 3)
    x[1] = clients.asarray(value)
    host[1] = value
    np.testing.assert_array_equal(x.numpy(), host)
    with pytest.raises(ValueError):
        x[1] = clients.asarray(np.ones((2, 3)))


@pytest.mark.parametrize("shape, mask_shape", [((1,), (0,)), ((3, 2), (0,)), ((3, 2), (3, 0))])
def test_mask_with_an_empty_side_selects_nothing(shape, mask_shape):
    host = np.arange(float(np.prod(shape))).reshape(shape)
    mask = np.zeros(mask_shape, bool)
    x = clients.asarray(host)
    assert x[mask].shape == host[mask].shape
    assert x[clients.asarray(mask)].shape == host[mask].shape
    x[clients.asarray(mask)] = -1.0
    np.testing.assert_array_equal(x.numpy(), host)


def test_mismatched_mask_still_raises():
    x = clients.asarray(np.ones((3, 2)))
    with pytest.raises(IndexError):
        x[np.ones(2, bool)]
    with pytest.raises(IndexError):
        x[clients.asarray(np.ones(2, bool))] = 1.0


@pytest.mark.parametrize("start, stop, num, endpoint", [(0, 10, 5, True), (-7, 3, 4, False), (-5, 5, 7, True),
                                                          (3, 3, 1, True), (0, 1, 0, True)])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_linspace_with_an_integer_dtype_floors_as_numpy(start, stop, num, endpoint, dtype):
    got = clients.linspace(start, stop, num, dtype=dtype, endpoint=endpoint)
    want = np.linspace(start, stop, num, dtype=dtype, endpoint=endpoint)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.numpy(), want)


def test_linspace_rejects_bool():
    with pytest.raises(TypeError):
        clients.linspace(0, 1, 3, dtype=clients.bool)


def test_broadcast_arrays_of_nothing_is_empty():
    assert clients.broadcast_arrays() == ()


def test_dlpack_without_a_copy_of_an_empty_tensor():
    t = clients.asarray(np.zeros((0, 3), np.float32))
    if clients.client_for().server.info.kind != "CPU":
        pytest.skip("a zero-copy export exists on CPU devices only")
    assert np.from_dlpack(t, copy=False).shape == (0, 3)


def test_map_to_host_refuses_a_device_with_its_own_memory(server, monkeypatch):
    t = clients.asarray(np.ones(3, np.float32))
    import dataclasses

    monkeypatch.setattr(server, "info", dataclasses.replace(server.info, kind="GPU"))
    with pytest.raises(BufferError, match="copy=False"):
        t.__dlpack__(copy=False)
    with pytest.raises(clients.FusionError, match="no map without a copy"):
        server.map_to_host(t._id)
