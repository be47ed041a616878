"""A block's ops in relative form: the trace that codegen turns into a kernel.

Inputs are numbered by first use, scalars by position and values by op, so that one
trace (and one built kernel) serves every block of the same structure whatever its ids,
sizes and scalar values; the slots say where each input and scalar sits among the ops'
operands, to bind them per launch.
"""

from __future__ import annotations

import numpy as np

from ..codegen import elementwise as cg
from ..ir import ElementwiseOp

# Sizes past this take 64-bit indices. The margin covers what a launch adds to the size:
# work-items padded to whole work-groups, times the vector width (at most 1024 x 16).
INT32_LIMIT = 2**31 - 1 - (1 << 16)


def index_type(largest: int) -> str:
    """The index type of a kernel whose biggest size (elements, work-items) is `largest`."""
    return "long" if largest > INT32_LIMIT else "int"


def spec_index_value(index: str, n: int) -> np.integer:
    return np.int32(n) if index == "int" else np.int64(n)


def relative_slots(ops: list[ElementwiseOp], live: list[bool], first_inputs: tuple = (),
                   aliases: dict[int, int] | None = None):
    """The live ops as TraceOps: inputs numbered by first use (after `first_inputs`),
    scalars by position, values by op (flat aliases, `aliases`, by the op of their value).
    Returns (trace, input slots, scalar slots, scalar dtypes, op position -> value
    index); a slot (j, s) is operand s of op j, so that the same structure binds the
    tensors and scalars of any block like this one."""
    produced = {op.out.id: j for j, op in enumerate(ops)}
    if aliases:
        produced.update(aliases)
    in_pos: dict[int, int] = {tid: k for k, tid in enumerate(first_inputs)}
    in_slots: list[tuple[int, int]] = []
    scalar_slots: list[tuple[int, int]] = []
    scalar_dtypes: list = []
    vmap: dict[int, int] = {}
    trace: list[cg.TraceOp] = []
    for j, op in enumerate(ops):
        if not live[j]:
            continue
        args = []
        for s, operand in enumerate(op.inputs):
            if type(operand) is int:
                if operand in produced:
                    args.append(("v", vmap[produced[operand]]))
                    continue
                k = in_pos.get(operand)
                if k is None:
                    k = in_pos[operand] = len(in_pos)
                    in_slots.append((j, s))
                args.append(("i", k))
            else:
                args.append(("s", len(scalar_slots)))
                scalar_slots.append((j, s))
                scalar_dtypes.append(operand.dtype)
        vmap[j] = len(trace)
        trace.append(cg.TraceOp(op.name, op.compute, op.out.dtype, tuple(args), op.expr, op.params))
    return trace, in_slots, scalar_slots, scalar_dtypes, vmap


def bind_slots(ops: list[ElementwiseOp], in_slots: list, scalar_slots: list, entries: dict) -> tuple[list, list]:
    """The input entries and scalar values that `relative_slots`' slots name in `ops`."""
    return ([entries[ops[j].inputs[s]] for j, s in in_slots], [ops[j].inputs[s].value for j, s in scalar_slots])


def relative_form(ops: list[ElementwiseOp], live: list[bool], entries: dict, first_inputs: tuple = ()):
    """`relative_slots`, bound: (trace, input entries (`first_inputs` first), scalar
    values, scalar dtypes, op position -> value index)."""
    trace, in_slots, scalar_slots, scalar_dtypes, vmap = relative_slots(ops, live, first_inputs)
    in_entries, scalars = bind_slots(ops, in_slots, scalar_slots, entries)
    return trace, [entries[tid] for tid in first_inputs] + in_entries, scalars, scalar_dtypes, vmap
