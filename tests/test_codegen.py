"""Code generation details: layout classes, dimension collapsing, kernel source."""

from __future__ import annotations

import numpy as np
import pytest

from fusion_server.codegen import elementwise as cg
from fusion_server.codegen import expressions as ex
from fusion_server.codegen.layout import broadcast_strides, classify, collapse

f32 = np.dtype(np.float32)


def test_broadcast_strides_zero_where_repeated():
    assert broadcast_strides((3, 1), (1, 1), (2, 3, 4)) == (0, 1, 0)


def test_classes():
    assert classify((4, 8), (8, 1), 0) == "contig"
    assert classify((4, 8), (8, 1), 5) == "offset"
    assert classify((4, 8), (0, 0), 3) == "scalar"
    assert classify((4, 8), (1, 4), 0) == "strided"


def test_collapse_merges_contiguous_runs():
    dims, sets = collapse((2, 3, 4), [(12, 4, 1), (0, 0, 1)])
    assert dims == (6, 4) and sets == [(4, 1), (0, 1)]
    dims, sets = collapse((2, 1, 4), [(4, 4, 1)])
    assert dims == (8,) and sets == [(1,)]


def test_source_depends_only_on_the_key():
    op = cg.TraceOp("multiply", f32, f32, (("i", 0), ("s", 0)))
    spec = cg.KernelSpec((op,), ((f32, "contig"),), (f32,), (0,), 4, "int", 0)
    src, name = cg.generate(spec)
    assert cg.generate(spec) == (src, name)
    assert "VLOAD(float, 4, in0 + idx)" in src and "VSTORE(float, 4, v0, out0 + idx);" in src
    assert "meta" not in src  # contiguous inputs need no metadata
    strided = spec._replace(inputs=((f32, "strided1"),), rank=2)
    src2, name2 = cg.generate(strided)
    assert name2 != name and "meta" in src2


@pytest.mark.parametrize("plain", [False, True])
def test_vector_access_at_unaligned_addresses(server, plain):
    """Both forms of vector access (vloadN / vstoreN, and the plain dereferences of
    unaligned vector types that CPU drivers get) read and write at any element offset."""
    import pyopencl as cl

    op = cg.TraceOp("multiply", f32, f32, (("i", 0), ("s", 0)))
    spec = cg.KernelSpec((op,), ((f32, "offset"),), (f32,), (0,), 8, "int", 0)
    src, name = cg.generate(spec)
    ctx, queue = server.runtime.context, server.runtime.queue
    options = ["-D" + ex.PLAIN_VECTORS] if plain else []
    kernel = cl.Kernel(cl.Program(ctx, src).build(options=options), name)
    host = np.arange(1003, dtype=np.float32)
    mf = cl.mem_flags
    src_buf = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=host)
    dst_buf = cl.Buffer(ctx, mf.WRITE_ONLY, host.nbytes)
    meta = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=np.array([3], np.int64))
    n = 1000  # read from element 3 on: 12 bytes past an aligned address; 1000 = 125 x 8
    kernel(queue, ((n + 7) // 8,), None, np.int32(n), meta, dst_buf, src_buf, np.float32(2))
    out = np.empty(n, np.float32)
    cl.enqueue_copy(queue, out, dst_buf)
    np.testing.assert_array_equal(out, host[3:] * 2)


def test_cpu_devices_build_with_plain_vector_access(server):
    options = server.runtime.programs.options
    if server.info.kind == "CPU" and not server.info.is_simulator:
        assert options == ("-D" + ex.PLAIN_VECTORS,)
    else:
        assert ex.PLAIN_VECTORS not in " ".join(options)
