"""A block's ops in relative form: the trace that codegen turns into a kernel.

Inputs are numbered by first use, scalars by position and values by op, so that one
trace (and one built kernel) serves every block of the same structure whatever its ids,
sizes and scalar values; the slots say where each input and scalar sits among the ops'
operands, to bind them per launch.
"""

from __future__ import annotations

import numpy as np

from ..codegen import elementwise as cg
from ..codegen.expressions import needs_scalar_code
from ..ir import ElementwiseOp

# Sizes past this take 64-bit indices. The margin covers what a launch adds to the size:
# work-items padded to whole work-groups, times the vector width (at most 1024 x 16).
INT32_LIMIT = 2**31 - 1 - (1 << 16)


def index_type(largest: int) -> str:
    """The index type of a kernel whose biggest size (elements, work-items) is `largest`."""
    return "long" if largest > INT32_LIMIT else "int"


def spec_index_value(index: str, n: int) -> np.integer:
    return np.int32(n) if index == "int" else np.int64(n)


def needs_scalar_trace(trace, scalar_exprs: set) -> bool:
    """Whether a trace must run as scalar code: an op with no vector form for its dtype,
    or a custom expression that builds on this device as scalar code only."""
    return any(needs_scalar_code(t.name, t.compute) or (t.expr, t.compute) in scalar_exprs for t in trace)


def relative_slots(ops: list[ElementwiseOp], live: list[bool], first_inputs: tuple = (),
                   aliases: dict[int, int] | None = None, remaps: dict[int, tuple[int, ...]] | None = None):
    """The live ops as TraceOps: inputs numbered by first use (after `first_inputs`),
    scalars by position, values by op (flat aliases, `aliases`, by the op of their value).
    Returns (trace, input slots, scalar slots, scalar dtypes, op position -> value
    index); a slot (j, s) is operand s of op j, so that the same structure binds the
    tensors and scalars of any block like this one.

    `remaps`: views read in another element order (id -> the positions of the ops their
    value depends on, see remap.py). Each reading op's shape gets the view's own copy of
    those ops, just before it; their inputs from outside get slots of their own,
    (j, s, reading op's position, the view's operand position there), read at the view's
    coordinates."""
    produced = {op.out.id: j for j, op in enumerate(ops)}
    if aliases:
        produced.update(aliases)
    in_pos: dict = {tid: k for k, tid in enumerate(first_inputs)}
    in_slots: list[tuple] = []
    scalar_slots: list[tuple[int, int]] = []
    scalar_dtypes: list = []
    vmap: dict[int, int] = {}
    trace: list[cg.TraceOp] = []
    clones: dict[tuple[int, tuple], int] = {}  # (view id, reader's shape) -> the clone's value
    cloned_scalars: dict[tuple[int, int], int] = {}

    def clone(view: int, reader: int, operand_pos: int) -> int:
        key = (view, ops[reader].out.shape)
        done = clones.get(key)
        if done is not None:
            return done
        local: dict[int, int] = {}  # cone op position -> value index of its copy
        cone = remaps[view]
        for c in cone:
            args = []
            for s, operand in enumerate(ops[c].inputs):
                if type(operand) is int:
                    k = produced.get(operand)
                    if k is not None and k in local:
                        args.append(("v", local[k]))
                        continue
                    ikey = (view, key[1], operand)
                    k = in_pos.get(ikey)
                    if k is None:
                        k = in_pos[ikey] = len(in_pos)
                        in_slots.append((c, s, reader, operand_pos))
                    args.append(("i", k))
                else:
                    k = cloned_scalars.get((c, s))
                    if k is None:
                        k = cloned_scalars[(c, s)] = len(scalar_slots)
                        scalar_slots.append((c, s))
                        scalar_dtypes.append(operand.dtype)
                    args.append(("s", k))
            op = ops[c]
            local[c] = len(trace)
            trace.append(cg.TraceOp(op.name, op.compute, op.out.dtype, tuple(args), op.expr, op.params))
        done = clones[key] = local[cone[-1]]
        return done

    for j, op in enumerate(ops):
        if not live[j]:
            continue
        args = []
        for s, operand in enumerate(op.inputs):
            if type(operand) is int:
                if remaps and operand in remaps:
                    args.append(("v", clone(operand, j, s)))
                    continue
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
    return ([entries[ops[slot[0]].inputs[slot[1]]] for slot in in_slots],
            [ops[j].inputs[s].value for j, s in scalar_slots])


def relative_form(ops: list[ElementwiseOp], live: list[bool], entries: dict, first_inputs: tuple = ()):
    """`relative_slots`, bound: (trace, input entries (`first_inputs` first), scalar
    values, scalar dtypes, op position -> value index)."""
    trace, in_slots, scalar_slots, scalar_dtypes, vmap = relative_slots(ops, live, first_inputs)
    in_entries, scalars = bind_slots(ops, in_slots, scalar_slots, entries)
    return trace, [entries[tid] for tid in first_inputs] + in_entries, scalars, scalar_dtypes, vmap
