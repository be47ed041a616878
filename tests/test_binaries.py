"""Binaries kept by the library for drivers without a cache of their own (runtime/binaries.py)."""

from __future__ import annotations

import numpy as np
import pyopencl as cl
import pyopencl.cache
import pytest

from fusion_server.runtime import binaries
from fusion_server.runtime.programs import build_kernel

SOURCE = "__kernel void twice(__global float* a) { a[get_global_id(0)] *= 2.0f; }"


def _uncached_devices() -> list[cl.Device]:
    from fusion_server.runtime.device import list_devices

    return [d.device for d in list_devices() if not binaries.driver_caches_builds(d.device)]


@pytest.fixture
def context(monkeypatch, tmp_path):
    devices = _uncached_devices()
    if not devices:
        pytest.skip("every device here caches its own builds")
    monkeypatch.setenv("FUSION_CACHE_DIR", str(tmp_path))

    def no_pyopencl_cache(*args, **kwargs):
        raise AssertionError("pyopencl's cache (and its lock file) was used")

    monkeypatch.setattr(pyopencl.cache, "create_built_program_from_source_cached", no_pyopencl_cache)
    return cl.Context([devices[0]])


def _run(context: cl.Context, kernel: cl.Kernel) -> np.ndarray:
    queue = cl.CommandQueue(context)
    host = np.arange(8, dtype=np.float32)
    buf = cl.Buffer(context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=host)
    kernel(queue, (8,), None, buf)
    cl.enqueue_copy(queue, host, buf)
    queue.finish()
    return host


def _built_from_source(monkeypatch) -> list[str]:
    seen: list[str] = []
    real = binaries.from_source
    monkeypatch.setattr(binaries, "from_source", lambda c, s, o: seen.append(s) or real(c, s, o))
    return seen


def test_a_build_is_kept_and_the_next_one_reads_it(context, monkeypatch):
    seen = _built_from_source(monkeypatch)
    np.testing.assert_array_equal(_run(context, build_kernel(context, SOURCE, "twice")), np.arange(8) * 2)
    assert seen == [SOURCE]
    kept = list(binaries.binaries_dir().glob("*.bin"))
    assert [p.name for p in kept] == [binaries.binary_key(context.devices[0], SOURCE, ()) + ".bin"]
    np.testing.assert_array_equal(_run(context, build_kernel(context, SOURCE, "twice")), np.arange(8) * 2)
    assert seen == [SOURCE]  # the second came from the binary
    build_kernel(context, SOURCE, "twice", ["-DOTHER=1"])
    assert len(seen) == 2 and len(list(binaries.binaries_dir().glob("*.bin"))) == 2  # options are in the key


def test_a_damaged_binary_is_built_again_and_replaced(context, monkeypatch):
    seen = _built_from_source(monkeypatch)
    build_kernel(context, SOURCE, "twice")
    (path,) = binaries.binaries_dir().glob("*.bin")
    good = path.read_bytes()
    path.write_bytes(b"not a binary")
    np.testing.assert_array_equal(_run(context, build_kernel(context, SOURCE, "twice")), np.arange(8) * 2)
    assert len(seen) == 2 and path.read_bytes() == good


@pytest.mark.parametrize("error", [KeyboardInterrupt, OSError])
def test_an_interrupted_write_leaves_no_file_behind(context, monkeypatch, error):
    def interrupted(src, dst):
        raise error("while renaming")

    monkeypatch.setattr(binaries.os, "replace", interrupted)
    if error is KeyboardInterrupt:
        with pytest.raises(KeyboardInterrupt):
            build_kernel(context, SOURCE, "twice")
    else:  # a cache that cannot be written is no error: the kernel is still built
        np.testing.assert_array_equal(_run(context, build_kernel(context, SOURCE, "twice")), np.arange(8) * 2)
    assert list(binaries.binaries_dir().iterdir()) == []
    monkeypatch.undo()
