"""What a block writes and which of its ops run, decided from the entries alone.

A block computes some values; it writes those still needed after it (a live handle, a
later reader, a view, a pin) and runs only the ops those need (backward liveness). A view
of a block value in the same element order (a flat alias) reads the value's register; one
in another order recomputes the value where it reads it (remap.py).
Shared by every fuser whose blocks hold element-wise ops.
"""

from __future__ import annotations

from ..handles import PENDING, Entry
from ..ir import ElementwiseOp, size_of


def flat_readable(entry: Entry, size: int) -> bool:
    """Whether an input is read at the flat index of any shape of `size` elements it
    broadcasts to: C-contiguous over all of them, or one element."""
    n = size_of(entry.ir.shape)
    return n == 1 or (entry.contiguous and n == size)


def flat_alias(entry: Entry, value_storages: dict[int, int], entries: dict) -> int | None:
    """The id of the block value that `entry` reads in the same element order (a reshape
    of it: same storage, C-contiguous from offset 0, as many elements), or None.

    A block computes every value at the same flat index, so such a view reads the
    value's register, and a reshape inside a chain costs nothing."""
    tid = value_storages.get(id(entry.storage))
    if tid is None or not entry.contiguous:
        return None
    value = entries.get(tid)
    if value is None or value.storage is not entry.storage or size_of(value.ir.shape) != size_of(entry.ir.shape):
        return None
    return tid


def inblock_reads(ops: list[ElementwiseOp]) -> list[int]:
    """For each op, how many ops of the block read its value."""
    produced = {op.out.id: j for j, op in enumerate(ops)}
    reads = [0] * len(ops)
    for op in ops:
        for operand in op.inputs:
            if type(operand) is int:
                j = produced.get(operand)
                if j is not None:
                    reads[j] += 1
    return reads


def view_slots(ops: list[ElementwiseOp], entries: dict) -> tuple[list, list]:
    """The operands that read a block value through a view, as (op position, operand
    position, position of the op computing the value): those of flat aliases (see
    flat_alias), then those of views in another element order (recomputed, remap.py)."""
    aliases, remaps = [], []
    storages = None
    for j, op in enumerate(ops):
        for s, operand in enumerate(op.inputs):
            if type(operand) is not int:
                continue
            e = entries.get(operand)
            if e is None or e.storage.status != PENDING:
                continue
            if storages is None:
                storages = {}
                for k, o in enumerate(ops):
                    value = entries.get(o.out.id)
                    if value is not None:
                        storages[id(value.storage)] = k
            target = storages.get(id(e.storage))
            if target is not None and ops[target].out.id != operand:
                # (read by an op of another size, the view is broadcast: read at that op's
                # coordinates, not at the value's flat index)
                flat = e.contiguous and size_of(e.ir.shape) == size_of(ops[target].out.shape) \
                    and size_of(op.out.shape) == size_of(e.ir.shape)
                (aliases if flat else remaps).append((j, s, target))
    return aliases, remaps


def needed_values(ops: list[ElementwiseOp], entries: dict, reads: list[int] | None = None,
                  aliases: dict[int, int] | None = None, more_reads: dict[int, int] | None = None) -> set[int]:
    """Positions of the ops whose value must be written: a live handle, a reader after
    the block, a view of it, or a pin. `reads`: inblock_reads(ops), if known. A flat
    alias read in the block (`aliases`: its id -> the value's op) needs the value written
    only if it lives on after the block. `more_reads`: reads of values or aliases by ops
    of the block other than `ops` (a reduction reading its prologue), by id."""
    if reads is None:
        reads = inblock_reads(ops)
    if more_reads:
        produced = {op.out.id: j for j, op in enumerate(ops)}
        reads = list(reads)
        for tid, n in more_reads.items():
            j = produced.get(tid)
            if j is not None:
                reads[j] += n
    needed: set[int] = set()
    dying: dict[int, int] = {}  # op position -> its aliases that die with the block
    if aliases:
        alias_reads: dict[int, int] = {}
        if more_reads:
            for tid, n in more_reads.items():
                if tid in aliases:
                    alias_reads[tid] = n
        for op in ops:
            for operand in op.inputs:
                if type(operand) is int and operand in aliases:
                    alias_reads[operand] = alias_reads.get(operand, 0) + 1
        for tid, j in aliases.items():
            e = entries[tid]
            if e.alive or e.readers > alias_reads.get(tid, 0):
                needed.add(j)
            else:
                dying[j] = dying.get(j, 0) + 1
    for j, op in enumerate(ops):
        e = entries[op.out.id]
        st = e.storage
        if e.alive or e.readers > reads[j] or st.refs > 1 + dying.get(j, 0) or st.pins:
            needed.add(j)
    return needed


def liveness(ops: list[ElementwiseOp], needed: set[int], aliases: dict[int, int] | None = None) -> list[bool]:
    """Backward liveness: an op runs when its value is written or feeds one that runs."""
    produced = {op.out.id: j for j, op in enumerate(ops)}
    if aliases:
        produced.update(aliases)
    live = [False] * len(ops)
    used = set(needed)
    for j in range(len(ops) - 1, -1, -1):
        if j in used:
            live[j] = True
            for operand in ops[j].inputs:
                if type(operand) is int and operand in produced:
                    used.add(produced[operand])
    return live


def epilogue_outputs(result_id: int, epilogue: list[ElementwiseOp], needed: set[int], vmap: dict[int, int],
                     entries: dict) -> tuple[list[int], list[Entry]]:
    """What a reduction or matmul block writes: its result itself (value -1) when needed
    after the block or when there is no epilogue, then every needed epilogue value."""
    result = entries[result_id]
    reads = sum(1 for op in epilogue for i in op.inputs if i == result_id)
    outputs: list[int] = []
    out_entries: list[Entry] = []
    if result.alive or result.readers > reads or result.storage.refs > 1 or not epilogue:
        outputs.append(-1)
        out_entries.append(result)
    for j in sorted(needed):
        outputs.append(vmap[j])
        out_entries.append(entries[epilogue[j].out.id])
    return outputs, out_entries
