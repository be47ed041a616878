"""Code generation details: layout classes, dimension collapsing, kernel source."""

from __future__ import annotations

import numpy as np

from fusion_server.codegen import elementwise as cg
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
    assert "vload4(0, in0 + idx)" in src and "vstore4(v0, 0, out0 + idx)" in src
    assert "meta" not in src  # contiguous inputs need no metadata
    strided = spec._replace(inputs=((f32, "strided1"),), rank=2)
    src2, name2 = cg.generate(strided)
    assert name2 != name and "meta" in src2
