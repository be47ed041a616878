"""The plan that runs searchsorted: one binary search per value (`codegen/search.py`).

No fuser takes a SearchOp, so it runs alone, in its place in the stream, like a sort.
"""

from __future__ import annotations

import numpy as np

from ..codegen import search as sc
from ..codegen import signature as sig
from ..context import BlockContext
from ..ir import SearchOp, size_of
from .base import LonePlan
from .sort import check_rows


class SearchPlan(LonePlan):
    op: SearchOp

    def execute(self, ctx: BlockContext) -> None:
        op = self.op
        entries = ctx.entries
        row, values = (entries[t] for t in op.inputs)
        out = entries[op.out.id]
        if ctx.fail_if_inputs_failed("searchsorted", [row, values], [out]):
            return
        spec = sc.SearchSpec("search", op.side, row.ir.dtype)
        kernel = ctx.kernel_for(spec)  # (NeedsCompile before anything changes)
        ctx.allocate(out.storage)
        m = size_of(values.ir.shape)
        if m:
            check_rows(row)
            check_rows(values)
            args = sig.bind(sc.parameters(spec),
                            input=[row.storage.buffer, values.storage.buffer],
                            scalar=[np.int64(row.offset), np.int64(size_of(row.ir.shape)),
                                    np.int64(values.offset), np.int64(m)],
                            out=[out.storage.buffer])
            ctx.launch(kernel, m, None, args, "search", ["searchsorted"], len(args))
        ctx.mark_ready([out.storage])
