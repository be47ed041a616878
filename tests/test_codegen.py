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


def test_cpu_devices_build_with_plain_vector_access_and_float32_pow_through_double(server):
    options = server.runtime.programs.options
    if server.info.kind == "CPU" and not server.info.is_simulator:
        assert options == ("-D" + ex.PLAIN_VECTORS, *(["-D" + ex.POW_VIA_DOUBLE] if server.info.fp64 else []))
    else:
        assert options == ()


_POW_BASES = [2.0, -2.0, -2.0, 0.0, -0.0, -0.0, -0.0, np.inf, -np.inf, -np.inf, -np.inf, np.nan, 1.0, -1.0, -1.0,
              0.5, -0.5, 3.0, 1e30, 1e-30, -8.0, 7.5, 1e-3, 123.4, -3.0, 2.0, 2.0, np.nan, 0.0]
_POW_EXPONENTS = [2.2, 3.0, 2.2, -1.0, -3.0, 2.2, 3.0, 2.2, 3.0, 2.2, -3.0, 0.0, np.nan, np.inf, -np.inf,
                  np.inf, -np.inf, -2.0, 2.0, 2.0, 1 / 3, -0.7, 1.5, 16.5, 1e9, 200.0, -200.0, 1.0, 0.0]


@pytest.mark.parametrize("width", [1, 4, 8])
def test_float32_pow_through_double_is_numpys_pow(server, width):
    """The CPU devices' float32 pow (exp2 of b * log2|a| in double, rounded once; the
    special cases by select): numpy's values, its zeros' and infinities' signs, within an
    ulp for finite results (where numpy's own powf is an ulp off, as at 2 ** 2.2)."""
    import pyopencl as cl

    if not server.info.fp64:
        pytest.skip("the device has no fp64")
    ctx, queue = server.runtime.context, server.runtime.queue
    t = "float" if width == 1 else f"float{width}"
    load = "a[i]" if width == 1 else f"vload{width}(i, a)"
    other = "b[i]" if width == 1 else f"vload{width}(i, b)"
    store = "out[i] = r;" if width == 1 else f"vstore{width}(r, i, out);"
    src = (ex._POWF + f"\n__kernel void k(__global const float* a, __global const float* b, __global float* out)"
           f" {{ const int i = get_global_id(0); {t} r = fs_powf({load}, {other}); {store} }}")
    kernel = cl.Program(ctx, src).build(options=["-D" + ex.POW_VIA_DOUBLE]).k
    n = -(-len(_POW_BASES) // 8) * 8
    a = np.resize(np.array(_POW_BASES, np.float32), n)
    b = np.resize(np.array(_POW_EXPONENTS, np.float32), n)
    mf = cl.mem_flags
    ba = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a)
    bb = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=b)
    bo = cl.Buffer(ctx, mf.WRITE_ONLY, a.nbytes)
    kernel(queue, (n // width,), None, ba, bb, bo)
    got = np.empty_like(a)
    cl.enqueue_copy(queue, got, bo)
    with np.errstate(all="ignore"):
        want = a ** b
    number = ~np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), ~number)
    np.testing.assert_array_equal(np.signbit(got[number]), np.signbit(want[number]))
    exact = number & ~(np.isfinite(want) & (want != 0))  # (zeros and infinities)
    np.testing.assert_array_equal(got[exact], want[exact])
    finite = number & ~exact
    assert np.abs(got[finite].view(np.int32) - want[finite].view(np.int32)).max() <= 1
