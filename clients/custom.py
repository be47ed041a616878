"""Custom operations: element-wise expressions that fuse, and opaque kernels of your own.

    softplus = clients.custom.elementwise("softplus", "x > 20 ? x : log1p(exp(x))")
    y = softplus(clients.exp(x) - 1.0) * 2.0        # one fused kernel

    def launch(queue, inputs, outputs, *, k):
        my_program.my_kernel(queue, (n,), None, inputs[0].data, outputs[0].data, np.int32(k))

    topk = clients.custom.kernel("topk", launch, outputs=lambda x, *, k: [((k,), x.dtype)])
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from fusion_server import dtypes as dt
from fusion_server.codegen import elementwise as cg
from fusion_server.context import BlockContext
from fusion_server.fusers.base import Fuser
from fusion_server.ir import CustomKernelOp, ElementwiseOp, TensorIr

from . import _functions as F
from .devices import client_for
from .tensor import Tensor

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Names an input or param cannot have: OpenCL C's keywords and type names (the generated
# code declares each name as a variable of the op's type).
_C_WORDS = set("""auto break case char const continue default do double else enum extern float for goto
half if inline int long register restrict return short signed sizeof static struct switch typedef union
unsigned void volatile while bool true false uchar ushort uint ulong size_t ptrdiff_t intptr_t uintptr_t
global local constant private kernel read_only write_only read_write""".split())
_VECTOR_TYPE = re.compile(r"^(u?(char|short|int|long)|float|double|half|bool)(2|3|4|8|16)$")
_IDENTIFIER = re.compile(r"(?<![\w.])[A-Za-z_]\w*")


class TensorSpec(NamedTuple):
    """What `outputs(...)` of a custom kernel learns about each input."""

    shape: tuple[int, ...]
    dtype: np.dtype


class CustomOpError(ValueError):
    """A custom op's definition is invalid (bad name, or source that does not compile)."""


def _check_name(what: str, name: str) -> None:
    if not isinstance(name, str) or not _NAME.match(name) or keyword.iskeyword(name):
        raise CustomOpError(f"{what} {name!r} is not a valid identifier")


def _rename(expr: str, names: Sequence[str]) -> str:
    """The user's variable names, each as `u_<name>`, in one pass over the identifiers:
    a name is never renamed twice (with inputs `x` and `u_x`, `x + 10*u_x` reads both),
    and calls (`name(`) and members (`.name`) are left alone."""
    mine = set(names)

    def rename(match: re.Match) -> str:
        word = match.group(0)
        if word not in mine or expr[match.end():].lstrip().startswith("("):
            return word
        return f"u_{word}"

    return _IDENTIFIER.sub(rename, expr)


def elementwise(
    name: str,
    expr: str,
    inputs: Sequence[str] = ("x",),
    params: Sequence[str] = (),
    dtype: Any = None,
) -> Callable[..., Tensor]:
    """A fusable element-wise op from an OpenCL C expression.

    `expr` uses the names in `inputs` (tensors, broadcast together) and `params` (scalars
    given as keyword arguments at each call; new values never recompile). Inputs and
    params are converted to the promoted dtype of the input tensors; the result has
    `dtype` (default: that promoted dtype). The expression is compiled once here, so an
    error in it raises now, with the compiler's message. Calls fuse with the built-in
    ops around them into one kernel.
    """
    _check_name("custom op name", name)
    inputs, params = tuple(inputs), tuple(params)
    if not inputs:
        raise CustomOpError("a custom element-wise op needs at least one input")
    for n in inputs + params:
        _check_name("input or param name", n)
        if n in _C_WORDS or _VECTOR_TYPE.match(n):
            raise CustomOpError(f"name {n!r} is an OpenCL C keyword or type name")
    if len(set(inputs + params)) != len(inputs + params):
        raise CustomOpError(f"duplicate names in inputs {inputs} and params {params}")
    if not isinstance(expr, str) or not expr.strip() or ";" in expr or "{" in expr:
        raise CustomOpError(f"expr must be one OpenCL C expression, got {expr!r}")
    out_dtype = dt.normalize(dtype) if dtype is not None else None
    code = _rename(expr, inputs + params)
    names = tuple(f"u_{n}" for n in inputs + params)
    op_name = f"custom_{name}"
    args = tuple(("i", k) for k in range(len(inputs))) + tuple(("s", k) for k in range(len(params)))
    checked: dict[tuple, str] = {}  # (server, compute, result) -> "" or why it does not build

    def check(server, compute: np.dtype, result: np.dtype) -> str:
        """Build the op for `compute` once per device: '' if it builds, else the reason.
        (A vector form is used where it builds too.)"""
        key = (id(server), compute, result)
        why = checked.get(key)
        if why is None:
            trial = cg.TraceOp(op_name, compute, result, args, code, names)
            why = checked[key] = server.check_expression(trial, len(inputs), len(params))
        return why

    # Check now that it builds for one of the dtypes it is most likely called with (`x % 2`
    # builds for integers only); each dtype it is called with is checked at its first
    # call, so an expression that does not fit its inputs raises where it is used.
    client = client_for()
    # (complex64 last: an expression over complex values sees float2 values, .x the real part)
    kinds = [dt.float32, dt.int32, dt.int64] + ([dt.float64] if client.fp64 else []) + [dt.complex64]
    reasons = []
    for d in kinds:
        reasons.append(check(client.server, d, out_dtype or d))
        if not reasons[-1]:
            break
    else:
        raise CustomOpError(f"custom op {name!r}: expression {expr!r} does not compile for any of "
                            f"{', '.join(d.name for d in kinds)}:\n{reasons[0]}")

    def apply(*tensors: Any, **values: Any) -> Tensor:
        if len(tensors) != len(inputs):
            raise TypeError(f"{name}() takes {len(inputs)} tensor arguments ({', '.join(inputs)}), "
                            f"got {len(tensors)}")
        if set(values) != set(params):
            raise TypeError(f"{name}() needs the params {params}, got {tuple(values)}")
        cl_client = F._client_of(tensors)
        ts = [t if type(t) is Tensor else F._as_tensor(t, cl_client) for t in tensors]
        compute = ts[0].dtype
        for t in ts[1:]:
            compute = dt.promote(compute, t.dtype)
        result = out_dtype or compute
        why = check(cl_client.server, compute, result)
        if why:
            raise CustomOpError(f"custom op {name!r}: expression {expr!r} does not compile for "
                                f"{compute.name} inputs:\n{why}")
        shape = F.broadcast_shapes(*(t.shape for t in ts))
        operands = tuple(t._id for t in ts) + tuple(
            F.scalar_operand(values[p], compute) for p in params
        )
        out = F._new(cl_client, shape, result)
        t = Tensor._make(cl_client, out.id, shape, result)
        cl_client.register(ElementwiseOp(op_name, operands, compute, out, code, names))
        return t

    apply.__name__ = name
    apply.__doc__ = f"Custom element-wise op {name}: {expr} over {inputs + params}."
    return apply


def kernel(
    name: str,
    launch: Callable[..., None],
    outputs: Callable[..., Sequence[tuple[Sequence[int], Any]]],
) -> Callable[..., Tensor | tuple[Tensor, ...]]:
    """An opaque op that runs your own OpenCL work, in its place in the stream.

    `outputs(*specs, **params)` gives `[(shape, dtype), ...]` from the inputs' specs
    (each has `.shape` and `.dtype`). `launch(queue, inputs, outputs, **params)` gets the
    device's command queue and `pyopencl.array.Array`s over the input buffers and freshly
    allocated outputs; it enqueues its work and must never wait (it runs under the
    server lock; calling back into `clients` there raises ReentrancyError). If it raises,
    its outputs are marked failed and reading them raises with the cause.
    """
    _check_name("custom kernel name", name)
    if not callable(launch) or not callable(outputs):
        raise CustomOpError("launch and outputs must be callables")

    def apply(*tensors: Any, **params: Any) -> Tensor | tuple[Tensor, ...]:
        client = F._client_of(tensors)
        ts = [t if type(t) is Tensor else F._as_tensor(t, client) for t in tensors]
        specs = [TensorSpec(t.shape, t.dtype) for t in ts]
        declared = list(outputs(*specs, **params))
        if not declared:
            raise CustomOpError(f"custom kernel {name!r}: outputs() declared no output")
        irs = []
        for shape, dtype in declared:
            shape = F._shape_arg(shape)
            irs.append(F._new(client, shape, dt.normalize(dtype)))
        op = CustomKernelOp(name, tuple(t._id for t in ts), tuple(irs), launch, tuple(sorted(params.items())))
        made = tuple(Tensor._make(client, ir.id, ir.shape, ir.dtype) for ir in irs)
        client.register(op)
        return made[0] if len(made) == 1 else made

    apply.__name__ = name
    apply.__doc__ = f"Custom kernel {name}."
    return apply


def register_fuser(factory: Callable[[BlockContext], Fuser], device: Any = None) -> None:
    """Offer every later block of `device`'s streams to a fuser made by `factory(ctx)`.

    The fuser follows the protocol of `fusion_server.fusers.base.Fuser`, sees the
    device's block context (`fusion_server.context.BlockContext`), and competes with the
    built-in fusers on score; see docs/custom-ops.md for a worked example.
    """
    client_for(device).call(lambda server: server.add_fuser(factory))


def unregister_fusers(device: Any = None) -> None:
    """Remove every fuser added with `register_fuser`."""

    client_for(device).call(lambda server: server.reconfigure("fusers changed", fuser_factories=[]))


__all__ = ["CustomOpError", "TensorIr", "TensorSpec", "elementwise", "kernel", "register_fuser", "unregister_fusers"]
