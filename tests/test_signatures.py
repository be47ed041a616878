"""Kernel families declare their parameters once: the generated source's parameter list is
the declaration, and arguments bind through it (no device needed)."""

from __future__ import annotations

import numpy as np
import pytest

from fusion_server.codegen import elementwise as cg
from fusion_server.codegen import matmul as mg
from fusion_server.codegen import reduce as rg
from fusion_server.codegen import signature as sig
from fusion_server.codegen import sort as sg

F32 = np.dtype(np.float32)


def _epilogue(n_inputs: int = 1, outputs=(-1,)) -> cg.KernelSpec:
    return cg.KernelSpec((), tuple((F32, "contig") for _ in range(n_inputs)), (), outputs, 1, "int", 0)


def _specs():
    add = cg.TraceOp("add", F32, F32, (("i", 0), ("s", 0)))
    yield cg, cg.KernelSpec((add,), ((F32, "strided"),), (F32,), (0,), 1, "int", 1)
    pro = cg.KernelSpec((), ((F32, "strided"),), (), (), 1, "int", 0)
    yield rg, rg.ReduceSpec("sum", np.dtype(np.float64), pro, _epilogue(2), 1, 1, "loop", "int", 0)
    yield mg, mg.MatmulSpec(F32, _epilogue(2), 0, "int", 0, "rows")
    yield sg, sg.SortSpec("sort", "tiles", F32, True, False)
    yield sg, sg.SortSpec("sort", "merge", F32, True, False)


@pytest.mark.parametrize("module, spec", list(_specs()), ids=lambda v: getattr(v, "__name__", ""))
def test_the_source_declares_exactly_the_parameters(module, spec):
    source, name = module.generate(spec)
    assert f"{name}({sig.declare(module.parameters(spec))})" in source


def test_fixed_bindings_are_the_parameters_every_kernel_has():
    red = rg.ReduceSpec("sum", F32, cg.KernelSpec((), ((F32, "strided"),), (), (), 1, "int", 0), _epilogue(),
                        0, 1, "loop", "int", 0)
    # nout, nred, meta + one output + one input
    assert len(rg.parameters(red)) == rg.FIXED_BINDINGS + 2
    mm = mg.MatmulSpec(F32, _epilogue(), 0, "int", 0, "rows")
    assert len(mg.parameters(mm)) == mg.FIXED_BINDINGS + 1  # + the output


def test_bind_orders_arguments_by_parameter_and_checks_counts():
    params = [sig.size("n"), sig.out(F32, "out0"), sig.input_(F32, "in0"), sig.input_(F32, "in1"),
              sig.scalar(F32, "a0")]
    assert sig.bind(params, size=[1], input=["x", "y"], out=["o"], scalar=[2.0]) == [1, "o", "x", "y", 2.0]
    with pytest.raises(ValueError, match="more input parameters"):
        sig.bind(params, size=[1], input=["x"], out=["o"], scalar=[2.0])
    with pytest.raises(ValueError, match="3 input arguments for 2 parameters"):
        sig.bind(params, size=[1], input=["x", "y", "z"], out=["o"], scalar=[2.0])
    with pytest.raises(ValueError, match="no parameter role"):
        sig.bind(params, sizes=[1])
    assert sig.arg_dtypes(params) == [None, None, None, None, F32]
