"""Assignments that write into the old value's buffer: `x[key] = value` on a tensor whose
old value dies with the assignment scatters into its buffer (no copy of x), and only
then; a small region of a large tensor that is written already is scattered rather than
computed at every element by a `where`."""

from __future__ import annotations

import gc
import random
import signal
import threading

import numpy as np
import pytest

import clients
from clients import _indexing as I
from tests.conftest import counted_since, counters, rand, settle

IN_PLACE = "written into the old value's buffer"


@pytest.fixture
def small_regions(monkeypatch):
    """Basic assignments scatter on tensors of any size (the sizes here are small)."""
    monkeypatch.setattr(I, "SCATTER_REGION_MIN", {"CPU": 0, "other": 0})


def _written(a: np.ndarray) -> clients.Tensor:
    x = clients.asarray(a)
    settle()
    return x


def _scatters(rec) -> list:
    return [k for k in rec.kernels if k.kind == "move" and "scatter" in k.ops]


def test_an_index_array_assignment_writes_into_the_dying_old_value(baseline):
    a = rand((64, 32), seed=1)
    x = _written(a)
    held = clients.stats()["bytes_live"]
    idx = np.array([3, 60, 7])
    rows = rand((3, 32), seed=2)
    before = counters(("inplace_reuses",))
    with clients.inspect() as rec:
        x[idx] = rows
        got = x.numpy()
    a[idx] = rows
    np.testing.assert_array_equal(got, a)
    assert counted_since(before) == {"inplace_reuses": 1}
    (scatter,) = _scatters(rec)
    assert IN_PLACE in scatter.why
    assert not any(k.kind == "copy" for k in rec.kernels)
    del rows, got
    settle()
    assert clients.stats()["bytes_live"] == held  # x's one buffer, nothing beside it


def test_a_view_of_the_old_value_keeps_it_and_the_assignment_copies():
    a = rand((100,), seed=3)
    x = _written(a)
    view = x[10:20]
    before = counters(("inplace_reuses",))
    with clients.inspect() as rec:
        x[np.array([12, 15, 50])] = 7.0
    b = a.copy()
    b[[12, 15, 50]] = 7.0
    np.testing.assert_array_equal(x.numpy(), b)
    np.testing.assert_array_equal(view.numpy(), a[10:20])  # the old values, still
    assert counted_since(before) == {"inplace_reuses": 0}
    assert all(IN_PLACE not in k.why for k in _scatters(rec))


def test_an_imported_buffer_is_never_written_in_place():
    a = rand((50,), seed=4)
    x = _written(a)
    before = counters(("inplace_reuses",))
    y = x + 1.0  # (a pending reader of x, recorded before the assignment)
    x[np.array([1, 2])] = 0.0
    np.testing.assert_allclose(y.numpy(), a + 1, rtol=1e-6)
    b = a.copy()
    b[[1, 2]] = 0
    np.testing.assert_array_equal(x.numpy(), b)
    del before


def test_a_reader_recorded_before_the_assignment_sees_the_old_values(channel):
    a = rand((256,), seed=5)
    x = _written(a)
    y = x * 2.0  # lazy: not computed when the assignment is recorded
    z = clients.sum(x)
    x[np.arange(0, 256, 3)] = -1.0
    b = a.copy()
    b[::3] = -1
    np.testing.assert_allclose(y.numpy(), a * 2, rtol=1e-6)
    np.testing.assert_allclose(z.numpy(), a.sum(dtype=np.float64), rtol=1e-4)
    np.testing.assert_array_equal(x.numpy(), b)


def test_a_scatter_whose_value_is_the_old_value_itself_copies():
    at = clients.arange(8, dtype="int64")
    slot = clients.asarray(np.array([7, 6, 5, 4, 3, 2, 1, 0]))
    out = I.scatter_positions(at, slot, at)
    np.testing.assert_array_equal(out.numpy(), np.arange(8)[::-1])
    np.testing.assert_array_equal(at.numpy(), np.arange(8))


def test_another_thread_s_queued_read_of_the_old_value_sees_it():
    """A read recorded on another thread before the assignment, not yet registered (the
    inbox channel queues it without the lock), is counted before the scatter runs."""
    client = clients.client_for()
    if client.channel != "inbox":
        pytest.skip("the lock channel registers every op as it is recorded")
    a = rand((1024,), seed=6)
    x = _written(a)
    recorded, assigned = threading.Event(), threading.Event()
    got: list = []

    def reader():
        y = x * 3.0  # queued in this thread's inbox
        recorded.set()
        assigned.wait(30)
        got.append(y.numpy())

    th = threading.Thread(target=reader)
    th.start()
    assert recorded.wait(30)
    x[np.array([0, 5, 9])] = 100.0
    assigned.set()
    th.join(60)
    assert not th.is_alive()
    np.testing.assert_allclose(got[0], a * 3, rtol=1e-6)
    b = a.copy()
    b[[0, 5, 9]] = 100
    np.testing.assert_array_equal(x.numpy(), b)


KEYS = [
    (5,), (-1,), (slice(3, 9),), (slice(None, None, 41),), (slice(150, 100, -17),), (Ellipsis, 2),
    (1, slice(2, 30, 4)), (slice(None), 7), (None, 3, slice(1, 4)), (slice(60, 61), slice(0, 2)),
]


@pytest.mark.parametrize("key", KEYS, ids=str)
@pytest.mark.parametrize("value", ["scalar", "tensor"])
def test_a_small_region_of_a_written_tensor_is_scattered_in_place(small_regions, key, value):
    a = rand((200, 64), seed=7)  # (every key selects at most 1/16 of it)
    x = _written(a)
    want = a.copy()
    region = want[key]
    if value == "scalar":
        v = 2.5
    else:
        host = rand(region.shape[-1:] if region.ndim else (), seed=8)  # broadcast along the rest
        v = clients.asarray(host)
    want[key] = v if value == "scalar" else host
    before = counters(("inplace_reuses",))
    with clients.inspect() as rec:
        x[key] = v
        got = x.numpy()
    np.testing.assert_array_equal(got, want)
    (scatter,) = _scatters(rec)
    assert IN_PLACE in scatter.why
    assert counted_since(before) == {"inplace_reuses": 1}
    assert len(rec.kernels) == 1  # the scatter alone: no where, and a scalar needs no fill


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.int64, np.float64, np.complex64, np.bool_])
def test_region_scatters_keep_every_dtype(small_regions, dtype):
    a = (np.arange(300) % 7).astype(dtype).reshape(10, 30)
    x = _written(a)
    value = dtype(1) if dtype is not np.bool_ else True
    x[3, 4:20:3] = value.item() if hasattr(value, "item") else value
    want = a.copy()
    want[3, 4:20:3] = value
    np.testing.assert_array_equal(x.numpy(), want)


INDEX_KEYS = [
    (np.array([3, 0, -1]),), (np.array([[1, 2], [5, 5]]),), (slice(1, 4), np.array([0, 6, 2])),
    (np.array([0, 4]), np.array([1, -2])), (Ellipsis, np.array([3])), (np.array([2]), slice(None, None, 2)),
]


@pytest.mark.parametrize("key", INDEX_KEYS, ids=str)
@pytest.mark.parametrize("passed", ["constant", "argument"])
def test_a_scalar_assigned_through_index_arrays_is_the_scatter_s_argument(key, via, passed):
    """No tensor of the value is made first (a fill over the selection's shape was a launch
    of its own): the scatter writes the scalar, a kernel argument, also in a capture,
    where a scalar argument of the jitted call takes each call's value."""
    a = rand((6, 7), seed=11)
    x = _written(a)

    def assign(x, v):
        x[key] = -3.5 if passed == "constant" else v
        return x * 1.0

    with clients.inspect() as rec:
        got = via(assign)(x, -3.5 if passed == "constant" else 4.25).numpy()
    want = a.copy()
    want[key] = -3.5 if passed == "constant" else 4.25
    np.testing.assert_array_equal(got, want)
    assert len(_scatters(rec)) == 1
    assert not any("fill" in k.ops for k in rec.kernels)


def test_a_jitted_scatter_takes_each_call_s_scalar():
    @clients.jit
    def put(x, idx, v):
        x[idx] = v
        return x + 0.0

    a = rand((40,), seed=12)
    idx = clients.asarray(np.array([1, 30, -2]))
    for k, v in enumerate([1.5, -7.0, 1e30, float("nan")]):
        x = _written(a)
        before = clients.stats()
        got = put(x, idx, v).numpy()
        want = a.copy()
        want[[1, 30, -2]] = np.float32(v)
        np.testing.assert_array_equal(got, want)
        assert clients.stats()["jit_replays"] - before["jit_replays"] == (k > 0)


# Values a kernel argument must carry bit for bit: each dtype's ends, signed zeros, NaNs,
# infinities, subnormals, integers past float64's 53 bits, both parts of a complex value.
EDGES = {
    np.bool_: [True, False], np.int8: [-128, 127], np.uint8: [255], np.int16: [-32768], np.uint16: [65535],
    np.int32: [-2 ** 31], np.uint32: [2 ** 32 - 1], np.int64: [-2 ** 63, 2 ** 63 - 1, 2 ** 53 + 1],
    np.uint64: [2 ** 64 - 1, 2 ** 53 + 1], np.float32: [-0.0, float("nan"), float("-inf"), 1e-45, 3.4e38],
    np.float64: [-0.0, float("nan"), 5e-324, 1.0 + 2 ** -52],
    np.complex64: [complex(-0.0, 1.5), complex(float("nan"), float("-inf"))],
    np.complex128: [complex(1e-310, -0.0), complex(0.1, float("nan"))],
}


@pytest.mark.parametrize("dtype", list(EDGES), ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("way", ["index array", "region"])
def test_a_scattered_scalar_keeps_its_bits_in_every_dtype(small_regions, dtype, way):
    a = (np.arange(300) % 5).astype(dtype).reshape(10, 30)
    x = _written(a)
    want = a.copy()
    key = (np.array([7, 2, -1]), slice(3, 9)) if way == "index array" else (4, slice(1, 30, 7))
    for value in EDGES[dtype]:
        x[key] = value
        want[key] = value
    got = x.numpy()
    assert got.tobytes() == want.tobytes(), (got, want)


def test_a_large_region_or_a_value_still_to_compute_stays_a_fused_where(small_regions):
    a = rand((64, 40), seed=9)
    x = _written(a)
    with clients.inspect() as rec:
        x[2:60] = 1.0  # most of x: one pass either way, and the where needs no fill
        y = x * 2.0
        y[3] = 0.0  # y is not written yet: the where joins its block
        got = y.numpy()
    want = a.copy()
    want[2:60] = 1
    want = want * 2
    want[3] = 0
    np.testing.assert_array_equal(got, want)
    assert not _scatters(rec)
    assert len(rec.kernels) == 1


def test_the_size_rule_by_device_kind(client):
    kind = client.server.info.kind
    big = I.SCATTER_REGION_MIN.get(kind, I.SCATTER_REGION_MIN["other"])
    x = clients.zeros((big,), dtype="float32")
    settle()
    with clients.inspect() as rec:
        x[7] = 1.0
        x[big // 2:big // 2 + 4] = 2.0
        settle()
    assert len(_scatters(rec)) == 2
    small = clients.zeros((big // 2,), dtype="float32")
    settle()
    with clients.inspect() as rec:
        small[7] = 1.0
        settle()
    assert not _scatters(rec)
    host = x.numpy()
    assert host[7] == 1 and (host[big // 2:big // 2 + 4] == 2).all() and host.sum() == 9
    assert small.numpy()[7] == 1


@pytest.mark.timeout(300)
@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs POSIX interval timers")
def test_interrupted_in_place_assignments_leave_the_old_or_the_new_values(small_regions, baseline):
    """KeyboardInterrupt at random points of assignments that write in place: x then holds
    its values before the assignment or after it, never anything else; no buffer leaks."""
    from tests.test_interrupts import _Alarm, _lock_is_free, _restored

    rng = random.Random(11)
    model = rand((2048,), seed=10)
    x = _written(model)
    model = model.copy()
    interrupted = 0
    # (another library's garbage-collector callback cut by the alarm would keep its
    # traceback, and the tensors of its frames, for the rest of the session)
    callbacks, gc.callbacks[:] = gc.callbacks[:], []
    with _Alarm(KeyboardInterrupt, 11) as alarm, _restored(gc.callbacks, callbacks):
        for i in range(400):
            k = rng.randrange(2000)
            after = model.copy()
            if i % 2:
                after[k:k + 5] = float(i)
            else:
                after[[k, k + 7]] = float(i)
            try:
                alarm.arm(0.0005)
                if i % 2:
                    x[k:k + 5] = float(i)
                else:
                    x[np.array([k, k + 7])] = float(i)
                alarm.disarm()
            except KeyboardInterrupt:
                interrupted += 1
            finally:
                alarm.disarm()
            got = x.numpy()
            if np.array_equal(got, after):
                model = after
            else:
                np.testing.assert_array_equal(got, model, err_msg=f"assignment {i}: neither old nor new values")
    assert interrupted > 20
    assert _lock_is_free(clients.client_for())
    del x
    settle()
    assert clients.stats()["buffers_live"] == baseline


def test_every_assignment_of_a_loop_writes_in_place(small_regions, channel):
    """The handle an assignment rebinds dies at once or with the next registration: each
    of a loop's assignments finds its old value dead, and a lazy reader between them
    still sees the values it was recorded on."""
    x = _written(np.zeros(4096, np.float32))
    want = np.zeros(4096, np.float32)
    before = counters(("inplace_reuses",))
    for i in range(30):
        x[i] = float(i)
        want[i] = i
        if i % 3 == 0:
            x[np.array([i + 100, i + 200])] = 1.0
            want[[i + 100, i + 200]] = 1
    doubled = x * 2.0
    for i in range(5):
        x[i] = -1.0
    np.testing.assert_array_equal(doubled.numpy(), want * 2)
    want[:5] = -1
    np.testing.assert_array_equal(x.numpy(), want)
    assert counted_since(before) == {"inplace_reuses": 30 + 10 + 5}
