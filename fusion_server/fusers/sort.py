"""The plan that sorts rows on the device (kernels in `codegen/sort.py`).

GPUs sort tiles in local memory (a bitonic network), then merge runs in passes for rows
longer than a tile. CPU devices sort a row per work-item, or, for fewer long rows than
cores, sort each row by buckets: keys counted, cut into buckets of about equal counts,
moved to their bucket, and each bucket sorted into place by one work-item. A work-item
sorts the values of 4-byte ints or floats by a bitonic network in vector lanes
(`codegen/lane_sort.py`), anything else by a radix sort.

No fuser takes a SortOp, so it runs alone, in its place in the stream: the block before
it is launched first and later ops read its outputs like any tensor. Every launch is
recorded (kind "sort"), so `inspect()` counts the passes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import pyopencl as cl

from ..codegen import lane_sort
from ..codegen import signature as sig
from ..codegen import sort as sg
from ..context import BlockContext
from ..errors import FusionError
from ..ir import SortOp, size_of
from .base import LonePlan

if TYPE_CHECKING:
    from ..handles import Entry

# Work-items per work-group of the tile kernel; each sorts two pairs, so a tile holds
# twice as many. On a GPU, 512 items keep a tile of 1024 pairs (8 to 12 KiB of local
# memory) on one compute unit with room for several groups, and a 1024-element row
# needs no merge pass. Other devices that are not CPUs (CPUs take the radix stage) get
# 1024 items: 2048 pairs (16 to 24 KiB).
TILE_ITEMS = {"GPU": 512}
TILE_ITEMS_OTHER = 1024
# Merged pairs per work-item of a merge pass: a binary search starts each chunk, so longer
# chunks search less; a GPU wants many short ones for parallelism, a CPU few long ones.
MERGE_CHUNK = {"GPU": 8}
MERGE_CHUNK_OTHER = 32
MAX_ROW = 1 << 30  # positions and run bounds are 32-bit ints in the kernels
# CPU devices: rows up to RUN_SPLIT_MIN are each sorted whole by one work-item, and so
# are longer ones when there are at least as many rows as cores. Fewer long rows are
# sorted by buckets (codegen/sort.py): a bucket is radix-sorted by one work-item, up to
# BUCKET_PAIRS pairs (128 KiB of packed 4-byte keys, twice that with the radix sort's
# second copy: a core's L2 cache), at least four buckets per core, so that buckets of
# unequal sizes still share the cores out evenly. The keys are counted and moved in
# chunks, two per core, at most MAX_CHUNKS per row.
# Before the buckets, a long row was cut into radix-sorted segments, one per core, merged
# in passes, the last on one core: one row of 2^20 floats took 16 ms of kernel time
# against 12.5 on 2 cores of a Zen 3 (PoCL 3.0), 7 against 2.2 to 3 on 16 Xeon cores
# (PoCL 5.0).
RUN_SPLIT_MIN = 1 << 12
# Buckets sorted by the vector network (values of 4-byte ints and floats) hold at most
# LANE_BUCKET keys (bins of more aside): the network's work grows with the padded width
# (a power of two), so a bucket stops at 4096. (Buckets cut at equal shares of the row,
# aiming at 3584, overshot by up to a bin: 2^20 normal floats made 24 buckets of 4096 to
# 4970 keys, padded to 8192, and the bucket stage took 2.77 ms against 2.47 capped, on
# Intel's CPU runtime on a 2-core Zen 4.) A bucket up to LANE_BUCKET_WIDTH long (one bin
# of many keys) is sorted so too, a longer one (many equal keys) by the radix sort.
LANE_BUCKET = 4096
LANE_BUCKET_WIDTH = 1 << 13
BUCKET_PAIRS = 1 << 14
MAX_CHUNKS = 16
# Buckets capped at `cap` keys: two in a row hold more than cap, so a row of n needs at
# most 2 ceil(n / cap) + 1, within MAX_BUCKETS while n <= _CAPPED_SPAN * cap / 2.
_CAPPED_SPAN = sg.MAX_BUCKETS - 3


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _pow2_floor(n: int) -> int:
    return 1 << (max(n, 1).bit_length() - 1)


def _pow2_ceil(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def first_stage_for(kind: str) -> str:
    """The first stage of a sort on a device of `kind`: "runs" on CPUs, "tiles" else."""
    return "runs" if kind == "CPU" else "tiles"


def by_buckets(n: int, rows: int, compute_units: int) -> bool:
    """CPU devices: whether rows of `n` are sorted by buckets (else each by a work-item)."""
    return n > RUN_SPLIT_MIN and rows < compute_units


def bucket_layout(n: int, rows: int, compute_units: int, pairs: int = BUCKET_PAIRS) -> tuple[int, int, int]:
    """CPU devices: (the keys per chunk, the buckets per row at most, the keys a bucket
    takes at most) of a bucket sort whose buckets hold up to `pairs` keys (or fewer: at
    least four per core). The plan fills each bucket with whole bins while it stays
    within that cap, so two buckets in a row hold more than it: a row needs at most
    2 n / cap + 1 of them, which MAX_BUCKETS bounds (the cap grows where it must)."""
    chunks = max(1, min(MAX_CHUNKS, _ceil_div(2 * compute_units, rows), _ceil_div(n, RUN_SPLIT_MIN)))
    spread = max(2, _ceil_div(4 * compute_units, rows))  # buckets wanted per row at least
    cap = max(1, min(pairs, _ceil_div(n, spread)), _ceil_div(2 * n, _CAPPED_SPAN))
    return _ceil_div(n, chunks), min(sg.MAX_BUCKETS, 2 * _ceil_div(n, cap) + 1), cap


def dealing_step(items: int) -> int:
    """The step by which the bucket stage deals its `items` buckets to work-items (the
    bucket of work-item g: g * step modulo items): near items / phi and prime to it, so
    that any run of consecutive work-items (a work-group, a share a driver hands a core)
    takes buckets from all over. The plan fills a row's buckets in order and leaves those
    past the last that holds keys empty. Launched one per work-group, PoCL 3.0 on 2 cores
    ran the buckets of 2^20 floats in 6.1 ms dealt in order and 3.2 dealt so (3.2 before
    the plan capped buckets: 64 of equal shares); 3.7 to 4.0 in 9 groups of 16."""
    step = max(1, round(items * 0.6180339887))
    while math.gcd(step, items) != 1:
        step += 1
    return step


def longest_row_for(cap: int) -> int:
    """The longest row whose buckets can all be capped at `cap` keys (bucket_layout)."""
    return _CAPPED_SPAN * cap // 2


def by_lanes(dtype: np.dtype, n: int, lanes: int) -> bool:
    """CPU devices: whether rows of `n` values of `dtype` (values only, a work-item per
    row) are sorted by the vector bitonic network (codegen/lane_sort.py) rather than the
    radix sort: faster for every length measured, 1 to 4096, on PoCL 3.0 on a 2-core
    Intel Xeon. Only where the device qualified `lanes` (its width for 4-byte values) at
    one of the network's widths, 16 or 8: the PoCL that pip brings, on AMD Zen 4, fails
    16 lanes of 4-byte ints in qualification (its compiler spun for minutes on the
    16-lane network, and aborted the process on one long row's), and sorts in 8."""
    return lane_sort.lanes_for(lanes) > 0 and lane_sort.supports(dtype, n)


def buckets_in_lanes(dtype: np.dtype, n: int, lanes: int) -> bool:
    """CPU devices: whether the buckets of a bucket sort of rows of `n` (values only) are
    sorted by the vector bitonic network: 4-byte ints or floats, rows short enough for
    buckets of at most LANE_BUCKET keys, on a device qualified at 16 `lanes`. Not in 8:
    PoCL 3.0 on AMD Zen 4 (qualified at 8) built the bucket stage in 8 lanes into a
    kernel that sorted almost nothing right, or that it could not create, where Intel's
    CPU runtime sorted right in 8 lanes too; the rows' network in 8 lanes, which the
    qualification's sort canary checks, sorted right on both."""
    return lanes >= lane_sort.LANES and dtype in lane_sort.DTYPES and n <= longest_row_for(LANE_BUCKET)


def check_rows(entry: Entry) -> None:
    """Raise unless `entry`'s rows are C-ordered (size-1 dimensions aside)."""
    expected = 1
    for n, s in zip(reversed(entry.ir.shape), reversed(entry.strides)):
        if n != 1 and s != expected:
            raise FusionError(f"sort input {entry.ir.id} is not in C order (strides {entry.strides})")
        expected *= n


class SortPlan(LonePlan):
    """Sorts every row of the op's input; see `codegen/sort.py` for the kernels."""

    op: SortOp

    def execute(self, ctx: BlockContext) -> None:
        op = self.op
        entries = ctx.entries
        src = entries[op.input]
        outs = [entries[o.id] for o in op.outputs]
        if ctx.fail_if_inputs_failed(f"sort ({op.name})", [src], outs):
            return
        shape = src.ir.shape
        n = shape[-1] if shape else 1
        rows = size_of(shape) // n if n else 0
        if n > MAX_ROW:
            raise FusionError(f"rows of {n} elements are longer than the sort supports ({MAX_ROW})")
        values = op.name == "sort"
        dtype = src.ir.dtype
        widths = {}  # the stages that sort in vector lanes: their widths
        network = lane_sort.LANES  # the "lanes" stage's vectors (the only stage when it runs)
        if first_stage_for(ctx.info.kind) == "runs":
            by_rows = not (rows and by_buckets(n, rows, ctx.info.compute_units))
            stages = ("runs",) if by_rows else ("histogram", "plan", "scatter", "buckets")
            lanes = ctx.widths.of_size(4)
            if by_rows and values and by_lanes(dtype, n, lanes):
                network = lane_sort.lanes_for(lanes)
                stages, widths = ("lanes",), {"lanes": lane_sort.width_for(n, network)}
            elif not by_rows and values and buckets_in_lanes(dtype, n, lanes):
                widths = {"buckets": LANE_BUCKET_WIDTH}
        else:
            stages = ("tiles", "merge")
        # All built before anything changes (NeedsCompile); a kernel sorting in lanes may
        # come back as its radix form (its build's fallback), launched as such.
        built = [ctx.built_for(sg.SortSpec("sort", stage, dtype, values, not values, widths.get(stage, 0), network))
                 for stage in stages]
        specs, kernels = [b.spec for b in built], [b.kernel for b in built]
        for e in outs:
            ctx.allocate(e.storage)
        if rows == 0 or n == 0:
            ctx.mark_ready([e.storage for e in outs])
            return
        check_rows(src)
        result = outs[0].storage.buffer
        results = [result, None] if values else [None, result]
        pool = ctx.pool
        held: list = []  # scratch (buffer, nbytes) taken so far: an allocation failing frees them

        def scratch(nbytes: int) -> cl.Buffer | None:
            if not nbytes:
                return None
            buf = pool.alloc(nbytes)
            held.append((buf, nbytes))
            return buf

        try:
            if stages[0] == "tiles":
                self._tiles_and_merges(ctx, specs, kernels, src, rows, n, results, scratch)
            else:
                self._on_a_cpu(ctx, specs, kernels, src, rows, n, results, scratch)
        finally:  # also when a launch fails: the scratch goes back to the pool
            # The in-order queue runs the passes before any later use of these buffers.
            for buf, nbytes in held:
                pool.free(buf, nbytes)
        ctx.mark_ready([e.storage for e in outs])

    def _on_a_cpu(self, ctx: BlockContext, specs: list, kernels: list, src: Entry, rows: int, n: int,
                  results: list, scratch: Callable) -> None:
        """A work-item per row, or the bucket sort's four stages (see codegen/sort.py)."""
        op = self.op
        source = [np.int64(src.offset)]
        rows_n = [np.int32(rows), np.int32(n)]
        desc = np.int32(op.descending)
        if specs[0].stage == "lanes":
            args = sig.bind(sg.parameters(specs[0]), input=[src.storage.buffer], scalar=[*source, *rows_n, desc],
                            out=[results[0]])
            self._launch_rows(ctx, kernels[0], rows, args)
            return
        size = rows * n
        # Two copies of the keys and their positions for the radix sort; 4-byte keys travel
        # packed with their positions, 8 bytes each, in the keys' buffer of a copy. (Rows
        # short enough for the insertion sort need none.)
        kbytes = sg.key_bytes(src.ir.dtype)
        copy = (0, 0) if n <= sg.SHORT_RUN else (size * 8, 0) if kbytes == 4 else (size * kbytes, size * 4)
        keys_a, idx_a = (scratch(b) for b in copy)
        keys_b, idx_b = (scratch(b) for b in copy)
        copies = [keys_a, idx_a or keys_a, keys_b, idx_b or keys_b]  # (packed: no positions' buffer)
        if len(specs) == 1:
            launches = [(rows, dict(input=[src.storage.buffer], scalar=[*source, *rows_n, desc],
                                    out=[*copies, *results]))]
        else:
            pairs = LANE_BUCKET if specs[-1].width else BUCKET_PAIRS
            chunk, buckets, cap = bucket_layout(n, rows, ctx.info.compute_units, pairs)
            items = rows * _ceil_div(n, chunk)
            hist, table = scratch(items * sg.BINS * 4), scratch(rows * sg.BINS * 2)
            offsets, bounds = scratch(items * buckets * 4), scratch(rows * (buckets + 1) * 4)
            launches = [
                (items, dict(input=[src.storage.buffer], scalar=[*source, *rows_n, np.int32(chunk), desc],
                             out=[hist])),
                (rows, dict(input=[hist], scalar=[*rows_n, np.int32(items // rows), np.int32(buckets), np.int32(cap)],
                            out=[table, offsets, bounds])),
                (items, dict(input=[src.storage.buffer, table, offsets],
                             scalar=[*source, *rows_n, np.int32(chunk), desc, np.int32(buckets)],
                             out=copies[:2])),
                (rows * buckets, dict(input=[src.storage.buffer, bounds],
                                      scalar=[*source, *rows_n, desc, np.int32(buckets),
                                              np.int32(dealing_step(rows * buckets))],
                                      out=[*copies, *results])),
            ]
        for spec, kernel, (items, roles) in zip(specs, kernels, launches):
            self._launch_rows(ctx, kernel, items, sig.bind(sg.parameters(spec), **roles), spec.stage == "buckets")

    def _launch_rows(self, ctx: BlockContext, kernel: cl.Kernel, items: int, args: list, alone: bool = False) -> None:
        """Launch `items` work-items of a CPU sort kernel, each looping long: several
        work-groups per core (a CPU driver runs one on one core at a time); a driver that
        packs work-items into lanes runs them alone (as ctx.group_size), and so does any
        driver where `alone` (buckets of unequal sizes, some empty: a core takes the next
        as it is done, see dealing_step)."""
        local = 1 if alone or ctx.info.packs_work_items else \
            _pow2_floor(max(1, min(64, items // (4 * ctx.info.compute_units))))
        ctx.launch(kernel, _ceil_div(items, local) * local, local, args, "sort", [self.op.name], len(args))

    def _tiles_and_merges(self, ctx: BlockContext, specs: list, kernels: list, src: Entry, rows: int, n: int,
                          results: list, scratch: Callable) -> None:
        """GPUs: the bitonic tiles, then merge passes until a run covers the row."""
        op = self.op
        (tiles_spec, merge_spec), (tiles, merge) = specs, kernels
        device = ctx.info.device
        kbytes = sg.key_bytes(src.ir.dtype)
        in_off = np.int64(src.offset)
        # The tile kernel: segments of a power of two no longer than a tile.
        most = TILE_ITEMS.get(ctx.info.kind, TILE_ITEMS_OTHER)
        most = min(most, tiles.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, device),
                   device.local_mem_size // (2 * (kbytes + 4)))
        most = _pow2_floor(most)
        seg = min(_pow2_ceil(n), 2 * most)
        per_row = _ceil_div(n, seg)
        # Few short rows need no big work-group: a tile of at least one segment is enough.
        items = max(seg // 2, min(most, _pow2_ceil(rows * per_row * seg) // 2), 1)
        n_tiles = _ceil_div(rows * per_row * seg, 2 * items)
        final = per_row == 1
        # Scratch: the sorted runs and their positions (merge passes ping-pong between two).
        size = rows * n
        pairs = [] if final else [tuple(scratch(b) for b in (size * kbytes, size * 4)) for _ in range(2)]
        keys, idx = pairs[0] if pairs else (None, None)
        scalars = [in_off, *map(np.int32, (rows, n, seg, op.descending, final))]
        args = sig.bind(sg.parameters(tiles_spec), input=[src.storage.buffer], scalar=scalars,
                        out=[keys, idx, *results],
                        local=[cl.LocalMemory(2 * items * kbytes), cl.LocalMemory(2 * items * 4)])
        ctx.launch(tiles, n_tiles * items, items, args, "sort", [op.name], len(args))

        # Merge passes: runs of `seg` pairs double until one covers the row.
        most = _pow2_floor(min(ctx.local_size,
                               merge.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, device)))
        run, k = seg, 0
        while run < n:
            (k_in, i_in), (k_out, i_out) = pairs[k % 2], pairs[(k + 1) % 2]
            last = 2 * run >= n
            chunk = min(MERGE_CHUNK.get(ctx.info.kind, MERGE_CHUNK_OTHER), 2 * run)  # a power of two
            per_row = _ceil_div(n, chunk)
            local = min(most, _pow2_ceil(per_row))  # a short row's work-group is no wider than it
            groups = rows * _ceil_div(per_row, local)
            args = sig.bind(sg.parameters(merge_spec), input=[k_in, i_in, src.storage.buffer],
                            scalar=[*map(np.int32, (rows, n, run, chunk, last, op.descending)), in_off],
                            out=[k_out, i_out, *results])
            ctx.launch(merge, groups * local, local, args, "sort", [op.name], len(args))
            run, k = 2 * run, k + 1
