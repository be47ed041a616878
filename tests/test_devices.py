"""Device choice: FUSION_DEVICE by index or name, GPUs first, never the simulator by default."""

from __future__ import annotations

import dataclasses
import os

import pytest

import clients
from fusion_server.errors import DeviceError
from fusion_server.runtime import device as device_mod
from tests.conftest import run_python


def fake(index, platform, name, kind):
    real = clients.devices()[0].info
    return dataclasses.replace(real, index=index, platform=platform, name=name, kind=kind)


@pytest.fixture
def machine(monkeypatch):
    listing = [
        fake(0, "Oclgrind", "Oclgrind Simulator", "GPU"),
        fake(1, "Portable Computing Language", "pthread-cpu", "CPU"),
        fake(2, "NVIDIA CUDA", "NVIDIA H200", "GPU"),
    ]
    monkeypatch.setattr(device_mod, "list_devices", lambda: listing)
    return listing


def test_default_prefers_a_real_gpu_over_the_simulator(machine):
    assert device_mod.select_device(None).name == "NVIDIA H200"


def test_default_falls_back_to_pocl(machine):
    del machine[2]
    assert device_mod.select_device(None).name == "pthread-cpu"


def test_simulator_only_when_named(machine):
    assert device_mod.select_device("oclgrind").name == "Oclgrind Simulator"
    del machine[1:]
    with pytest.raises(DeviceError, match="only the Oclgrind simulator"):
        device_mod.select_device(None)


def test_select_by_index_and_substring(machine):
    assert device_mod.select_device("1").name == "pthread-cpu"
    assert device_mod.select_device("nvidia").name == "NVIDIA H200"


def test_unknown_device_lists_what_exists(machine):
    with pytest.raises(DeviceError, match="matches no device.*NVIDIA H200"):
        device_mod.select_device("tpu")
    with pytest.raises(DeviceError, match="only 3 devices"):
        device_mod.select_device("7")


def test_devices_list_their_limits():
    devs = clients.devices()
    assert devs
    limits = devs[0].limits
    assert limits["max_bindings"] >= 6
    assert limits["global_mem_bytes"] > 0
    assert isinstance(devs[0].fp64, bool)


def test_one_server_per_device():
    x = clients.asarray([1.0])
    assert clients.client_for(x.device) is clients.client_for()
    assert clients.client_for(x.device.index) is x._client
    assert x.device == clients.default_device()


_EXIT_PROBE = """
import atexit, sys
seen = {}
def after_the_library():  # registered first, so it runs after the library's exit hooks
    print("extra references at exit:", sys.getrefcount(seen["context"]) - seen["before"])
atexit.register(after_the_library)
import clients
x = clients.asarray([1.0, 2.0, 3.0])
jitted = clients.jit(lambda t: clients.sum(t * 2 + 1))
assert float(jitted(x)) == 15.0 and float(jitted(x)) == 15.0
seen["context"] = clients.client_for().server.runtime.context
seen["before"] = sys.getrefcount(seen["context"])
"""


def test_the_device_context_outlives_the_interpreter_so_a_driver_cannot_abort_at_exit():
    """PoCL 3.0 aborts the process when its last context goes while it still counts an
    LLVM module (a run whose tests all passed exited 134): at exit the library keeps
    each live context, and the process exits 0."""
    done = run_python(_EXIT_PROBE)
    assert done.returncode == 0, done.stderr
    assert "extra references at exit: 1" in done.stdout, (done.stdout, done.stderr)


class _Lanes:
    """A device's vector preferences, as a driver reports them."""

    def __init__(self, preferred: int, native: int):
        self.preferred_vector_width_float = preferred
        self.native_vector_width_float = native


@pytest.mark.parametrize("kind, preferred, native, packs", [
    ("CPU", 1, 16, True),  # Intel's CPU runtime
    ("CPU", 16, 16, False),  # PoCL
    ("CPU", 1, 1, False),  # a scalar machine: nothing to pack
    ("GPU", 1, 1, False),  # NVIDIA's
])
def test_a_driver_that_packs_work_items_into_lanes_is_known_by_its_preferences(kind, preferred, native, packs):
    real = clients.default_device().info
    info = dataclasses.replace(real, kind=kind, device=_Lanes(preferred, native))
    assert info.packs_work_items is packs


@pytest.mark.parametrize("preferred, native, alone", [(1, 16, True), (16, 16, False)])
def test_heavy_work_items_run_alone_where_the_driver_packs_lanes(monkeypatch, preferred, native, alone):
    """Work-items that loop (a row each: reductions, scans, the sort's radix stage) get
    work-groups of one where the driver packs work-items into lanes; elsewhere groups
    shrink on CPUs until every core gets several, and light work keeps the full size."""
    ctx = clients.client_for().server.ctx
    info = dataclasses.replace(ctx.info, kind="CPU", compute_units=2, device=_Lanes(preferred, native))
    monkeypatch.setattr(ctx, "info", info)
    assert ctx.group_size(1 << 20) == ctx.local_size
    heavy = ctx.group_size(1024, heavy=True)
    assert heavy == (1 if alone else min(ctx.local_size, 128))


def test_contiguous_element_wise_kernels_are_scalar_code_where_the_driver_packs_lanes():
    import numpy as np

    info = clients.default_device().info
    server = clients.client_for().server
    host = np.random.default_rng(3).random((64, 1024), dtype=np.float32)
    x = clients.asarray(host)
    with clients.inspect() as rec:
        flat = (x * 2.0 + 1.0).numpy()
    with clients.inspect() as rows:
        shifted = (x[:, 1:] + x[:, :-1]).numpy()
    np.testing.assert_allclose(flat, host * 2 + 1, rtol=1e-6)
    np.testing.assert_allclose(shifted, host[:, 1:] + host[:, :-1], rtol=1e-6)
    qualified = server.widths.of_size(4)
    assert server.pack_lanes == (info.packs_work_items and not os.environ.get("FUSION_VECTOR_WIDTH"))
    assert [k.variant for k in rec.kernels] == [f"width {1 if server.pack_lanes else qualified}"]
    # Views along rows: vectors along each row, or, where the driver packs work-items, one
    # work-item per element over a 2-D grid (tests/test_elementwise_grid.py).
    assert [k.variant for k in rows.kernels] == (["width 1, 2-D grid"] if server.pack_lanes else
                                                 [f"width {qualified}" + (" along rows" if qualified > 1 else "")])
    # Widths set by hand are taken as they are, and the rule comes back with the old widths.
    from fusion_server.runtime.widths import VectorWidths
    from tests.conftest import server_settings

    before = server.pack_lanes
    with server_settings(widths=VectorWidths.uniform(4)), clients.inspect() as forced:
        np.testing.assert_allclose((x * 3.0).numpy(), host * 3, rtol=1e-6)
        assert not server.pack_lanes
    assert [k.variant for k in forced.kernels] == ["width 4"] and server.pack_lanes == before
