"""Kernels of the row sort: on GPUs bitonic tiles and merge passes, on CPUs radix sorts.

Every element becomes a pair (key, position in its row). The key is an unsigned integer
whose order is the order wanted: ints with the sign bit flipped, floats by their bits
(negatives inverted), -0.0 made +0.0 (numpy compares them equal), every NaN the largest
key in both directions, all bits inverted for a descending sort. Ties are broken by the
position, so the order is total: any sorting network gives the stable result.

- `sort_tiles`: each work-group sorts a tile of 2 * local-size pairs. A tile holds
  several short rows (each padded to a power of two with pairs that sort last) or one
  chunk of a long row. When a row fits one tile the kernel writes the results;
  otherwise it writes sorted runs of pairs to scratch buffers.
- `runs` (CPU devices, in place of `sort_tiles`): each work-item sorts one row alone, an
  LSD radix sort of its keys by bytes (stable: ties keep their positions), skipping a
  byte every key shares; the last pass writes the results. A CPU runs a work-group as a
  loop on one core and the tiles' bitonic network as one loop per barrier step: 2^20
  floats took 127 ms that way, 3.6x numpy's time, and a sort per work-item needs no
  barrier at all.
- `lanes` (CPU devices, in place of `runs` for the values of rows of up to 4096 4-byte
  ints or floats): a bitonic network in 16-lane vectors (8 where the device qualified no
  more), a work-item per row, in
  `codegen/lane_sort.py` (2^20 floats in rows of 1024: 6.4 ms by `runs`, about 1.5 by
  lanes, numpy 2.0; rows of 16: 8.7 ms, 0.6 by lanes, numpy 2.0).
- `histogram`, `plan`, `scatter`, `buckets` (CPU devices, in place of `runs` for fewer
  long rows than cores): a sample sort whose sample is every key. Work-items count the
  top 16 bits of the keys of their chunk of a row (`histogram`, made cumulative); one
  work-item per row cuts the 2^16 bins into buckets of about equal counts, by binary
  searches of the counts, and works out where each chunk's keys of each bucket go
  (`plan`: summing every chunk's 2^16 bins instead took 3.7 ms of a 6 ms sort on 16
  cores); the chunks move their pairs there (`scatter`, stable); then each bucket, a
  range of keys small enough to stay in the core's cache, is radix-sorted by one
  work-item into its final place (`buckets`). It replaced radix-sorted segments (one per
  core) and merge passes, whose last pass runs on one core: one row of 2^20 floats took
  16 ms of kernel time that way on two cores of a Zen 3, 12.5 by buckets (PoCL 3.0); 7
  and 2.2 to 3 on 16 Xeon cores.  The values of 4-byte ints and floats sort their buckets
  (about 3584 keys each, so that most pad to 4096) with `codegen/lane_sort.py`'s network
  instead, a bucket longer than its width by the radix sort (2^20 floats on a 2-core
  Xeon: the bucket stage 3.4 to 4.8 ms radix-sorted, 3.1 in lanes).
- Sorted values are written from their keys (`value_of`, in every stage that writes the
  results), not read back from the row; only keys that stand for several values (zeros,
  NaNs) are (2^20 floats: 12.4 ms of the bucket stage reading every value back, 8.1 from
  the keys).
- `merge` (GPUs, after the tiles): neighbouring sorted runs merged into one, each
  work-item writing a chunk of the merged run: a binary search on the merge path finds
  where its chunk starts in both runs, then it merges sequentially. The last pass writes
  the results.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .. import dtypes as dt
from . import lane_sort
from . import signature as sig


class SortSpec(NamedTuple):
    """One sort kernel: which stage, for which dtype, writing which results."""

    kind: str  # always "sort": keeps these keys apart from other kernels' in the cache
    stage: str  # "tiles", "runs", "merge", "lanes", or the bucket sort's "histogram", "plan", "scatter", "buckets"
    dtype: np.dtype
    values: bool  # the final pass writes the sorted values
    indices: bool  # the final pass writes the positions (int64)
    width: int = 0  # "lanes": the padded row; "buckets": the longest bucket sorted in lanes (codegen/lane_sort.py)
    lanes: int = lane_sort.LANES  # "lanes": the network's vectors, 16 or 8 lanes (buckets: always 16)


_KEYS = {
    dt.bool_: ("uint", "return (uint)v;"),
    dt.uint8: ("uint", "return (uint)v;"),
    dt.uint16: ("uint", "return (uint)v;"),
    dt.uint32: ("uint", "return v;"),
    dt.uint64: ("ulong", "return v;"),
    dt.int8: ("uint", "return as_uint((int)v) ^ 0x80000000u;"),
    dt.int16: ("uint", "return as_uint((int)v) ^ 0x80000000u;"),
    dt.int32: ("uint", "return as_uint(v) ^ 0x80000000u;"),
    dt.int64: ("ulong", "return as_ulong(v) ^ 0x8000000000000000ul;"),
    dt.float32: ("uint", """
    uint b = as_uint(v);
    if (v == 0.0f) b = 0u;
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);"""),
    dt.float64: ("ulong", """
    ulong b = as_ulong(v);
    if (v == 0.0) b = 0ul;
    return (b & 0x8000000000000000ul) ? ~b : (b | 0x8000000000000000ul);"""),
}


# Each key back to its value (`key` the raw key, before a descending sort inverts it):
# what the sorted values are written from, without reading the input again. Not for the
# keys that stand for several values: zeros (+0.0 and -0.0) and NaNs (see value_of).
_VALUES = {
    dt.bool_: "return (T)k;",
    dt.uint8: "return (T)k;",
    dt.uint16: "return (T)k;",
    dt.uint32: "return k;",
    dt.uint64: "return k;",
    dt.int8: "return (T)as_int(k ^ 0x80000000u);",
    dt.int16: "return (T)as_int(k ^ 0x80000000u);",
    dt.int32: "return as_int(k ^ 0x80000000u);",
    dt.int64: "return as_long(k ^ 0x8000000000000000ul);",
    dt.float32: "return as_float((k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k);",
    dt.float64: "return as_double((k & 0x8000000000000000ul) ? (k & 0x7FFFFFFFFFFFFFFFul) : ~k);",
}


# Runs up to this long are insertion-sorted by the `runs` kernel (radix histograms cost
# 256 counters per byte whatever the run's length).
SHORT_RUN = 64
# The bucket sort's bins: the top bits of a key (2^16 bins of 4-byte counts per chunk).
BIN_BITS = 16
BINS = 1 << BIN_BITS
MAX_BUCKETS = 2048  # a bucket's number is a ushort; the scatter keeps a counter for each


def key_bytes(dtype: np.dtype) -> int:
    """Bytes of one sort key of `dtype` (4 or 8)."""
    return 8 if _KEYS[dtype][0] == "ulong" else 4


def scalar_variant(spec: SortSpec) -> SortSpec | None:
    """The kernel built when `spec`'s fails (a driver without clang's vector builtins): the
    radix sort for the lane sort, the radix-sorted buckets for buckets in lanes; other
    stages have no fallback."""
    if spec.stage == "lanes":
        return spec._replace(stage="runs", width=0, lanes=lane_sort.LANES)
    return spec._replace(width=0, lanes=lane_sort.LANES) if spec.width else None


def kernel_name(spec: SortSpec) -> str:
    if spec.stage == "lanes":
        return lane_sort.kernel_name(spec.dtype, spec.width, spec.lanes)
    outs = ("v" if spec.values else "") + ("i" if spec.indices else "")
    lanes = f"_lanes{spec.width}" if spec.width else ""
    return f"sort_{spec.stage}_{spec.dtype.name}_{outs}{lanes}"


def parameters(spec: SortSpec) -> tuple[sig.Param, ...]:
    """The kernel's parameters, per stage. Every stage that reads the input takes it and
    its offset first; stages that write the result end with the values and the indices.
    Tiles: rows, n, the segment, descending, final; the keys and indices out; the result;
    local keys and indices. Lanes: rows, n, descending; the values. Runs and buckets:
    rows, n, descending (buckets: the buckets per row, the step they are dealt by, their
    bounds); two copies of the keys and indices (for 4-byte keys, each copy's keys
    hold packed 8-byte words); the result. Histogram, plan and scatter: their counts,
    table and offsets (the plan: the most keys a bucket takes; see the kernels). Merge:
    the keys and indices in, rows, n, the run, the chunk, final, descending; the keys
    and indices out; the input and its offset; the result."""
    i32, i64 = np.dtype(np.int32), np.dtype(np.int64)
    result = (sig.raw("out", "__global T *values"), sig.raw("out", "__global long *indices"))
    source = (sig.raw("input", "__global const T *in"), sig.scalar(i64, "in_off"))
    first_copy = (sig.raw("out", "__global KEY *keys_a"), sig.raw("out", "__global uint *idx_a"))
    both_copies = (*first_copy, sig.raw("out", "__global KEY *keys_b"), sig.raw("out", "__global uint *idx_b"))
    stage = spec.stage
    if stage == "lanes":
        return (*source, *(sig.scalar(i32, n) for n in ("rows", "n", "desc")), result[0])
    if stage == "runs":
        return (*source, *(sig.scalar(i32, n) for n in ("rows", "n", "desc")), *both_copies, *result)
    if stage == "histogram":
        return (*source, *(sig.scalar(i32, n) for n in ("rows", "n", "chunk", "desc")),
                sig.raw("out", "__global uint *hist"))
    if stage == "plan":
        return (sig.raw("input", "__global const uint *hist"),
                *(sig.scalar(i32, n) for n in ("rows", "n", "chunks", "buckets", "cap")),
                sig.raw("out", "__global ushort *table"), sig.raw("out", "__global uint *offsets"),
                sig.raw("out", "__global uint *bounds"))
    if stage == "scatter":
        return (*source, *(sig.scalar(i32, n) for n in ("rows", "n", "chunk", "desc", "buckets")),
                sig.raw("input", "__global const ushort *table"), sig.raw("input", "__global const uint *offsets"),
                *first_copy)
    if stage == "buckets":
        return (*source, *(sig.scalar(i32, n) for n in ("rows", "n", "desc", "buckets", "step")),
                sig.raw("input", "__global const uint *bounds"), *both_copies, *result)
    if stage == "tiles":
        return (*source, *(sig.scalar(i32, n) for n in ("rows", "n", "seg", "desc", "final")),
                sig.raw("out", "__global KEY *keys_out"), sig.raw("out", "__global uint *idx_out"), *result,
                sig.raw("local", "__local KEY *lk"), sig.raw("local", "__local uint *li"))
    return (sig.raw("input", "__global const KEY *keys"), sig.raw("input", "__global const uint *idx"),
            *(sig.scalar(i32, n) for n in ("rows", "n", "run", "chunk", "final", "desc")),
            sig.raw("out", "__global KEY *keys_out"), sig.raw("out", "__global uint *idx_out"),
            *source, *result)


def arg_dtypes(spec: SortSpec) -> list:
    return sig.arg_dtypes(parameters(spec))


_COMMON = """
#define LESS(ka, ia, kb, ib) ((ka) < (kb) || ((ka) == (kb) && (ia) < (ib)))

KEY key_of(const T v, const int desc)
{
    if (IS_NAN(v)) return KEY_MAX;  /* NaN sorts last, in both directions */
    const KEY k = raw_key(v);
    return desc ? ~k : k;
}

T value_from_key(const KEY k)
{VALUE_BODY
}

/* The value of a sorted key: from the key itself, or read from the row at its position
   where the key stands for several values (NaNs, signed zeros: numpy keeps each one's
   bits; any key equal to one of those is read, which is always right). */
T value_of(KEY k, const int desc, __global const T *row_in, const uint ix)
{
    if (k == KEY_MAX) return row_in[ix];
    if (desc) k = ~k;
    if (IS_FLOAT && k == KEY_SIGN) return row_in[ix];
    return value_from_key(k);
}

/* One result: the value of key k (at position ix of the row `row_in`), or its position. */
void write_keyed(__global const T *row_in, const long at, const KEY k, const int desc, const uint ix,
                 __global T *values, __global long *indices)
{
#if WRITE_VALUES
    values[at] = value_of(k, desc, row_in, ix);
#endif
#if WRITE_INDICES
    indices[at] = (long)ix;
#endif
}
"""

_TILES = """
__kernel void NAME(PARAMETERS)
{
    const int lid = get_local_id(0), L = get_local_size(0);
    const int cpr = (n + seg - 1) / seg;                    /* segments per row */
    const long total = (long)rows * cpr;
    const long first = (long)get_group_id(0) * (2 * L / seg); /* this tile's first segment */
    for (int h = 0; h < 2; ++h) {
        const int e = lid + h * L;
        const long g = first + e / seg;
        KEY k = KEY_MAX;
        uint ix = 0xFFFFFFFFu;  /* padding: after every real pair */
        if (g < total) {
            const long row = g / cpr;
            const int col = (int)(g % cpr) * seg + e % seg;
            if (col < n) {
                k = key_of(in[in_off + row * n + col], desc);
                ix = (uint)col;
            }
        }
        lk[e] = k;
        li[e] = ix;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    /* Bitonic sort of every aligned block of `seg` pairs, all ascending: the first step
       of each stage compares mirrored pairs, the others halves. */
    for (int k = 2; k <= seg; k <<= 1) {
        for (int j = k >> 1; j > 0; j >>= 1) {
            const int a = ((lid & ~(j - 1)) << 1) | (lid & (j - 1));
            const int b = (j == k >> 1) ? (a ^ (k - 1)) : (a + j);
            const KEY ka = lk[a], kb = lk[b];
            const uint ia = li[a], ib = li[b];
            if (LESS(kb, ib, ka, ia)) {
                lk[a] = kb; lk[b] = ka;
                li[a] = ib; li[b] = ia;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }
    for (int h = 0; h < 2; ++h) {
        const int e = lid + h * L;
        const long g = first + e / seg;
        if (g >= total) continue;
        const long row = g / cpr;
        const int col = (int)(g % cpr) * seg + e % seg;
        if (col >= n) continue;  /* a segment's real pairs come first: padding sorts last */
        const long at = row * n + col;
        if (final)
            write_keyed(in + in_off + row * n, at, lk[e], desc, li[e], values, indices);
        else {
            keys_out[at] = lk[e];
            idx_out[at] = li[e];
        }
    }
}
"""

_RADIX = """
void prefix_sums(uint *count)  /* a byte's counts to the first position of its keys */
{
    uint sum = 0;
    for (int d = 0; d < 256; ++d) {
        const uint c = count[d];
        count[d] = sum;
        sum += c;
    }
}

/* The last byte of the keys whose histogram `count` is, by which `len` keys starting
   with `first` do not all agree (-1: they are all alike). */
int last_pass(uint count[PASSES][256], const KEY first, const int len)
{
    int last = -1;
    for (int p = 0; p < PASSES; ++p)
        if (count[p][(uint)(first >> (8 * p)) & 255u] != (uint)len) last = p;
    return last;
}

/* An LSD radix sort of `len` keys by their bytes (stable: equal bytes keep their order),
   `count` each byte's histogram: the passes before `last` (last_pass) move the keys
   between two copies, skipping the bytes every key shares; the last pass writes the
   results (values made from the keys, positions). A row or a bucket of the row
   `row_in`, written from position `at` of the results. */
#if PACKED
/* 4-byte keys: key and position in one 8-byte word, whose order is the pairs' order:
   one load and one store per move, and half the streams a pass scatters into. */
void radix_sort(__global ulong *wa, __global ulong *wb, const int len, uint count[PASSES][256],
                __global const T *row_in, const long at, const int desc, __global T *values, __global long *indices)
{
    const int last = last_pass(count, (KEY)(wa[0] >> 32), len);
    for (int p = 0; p < last; ++p) {
        const int shift = 8 * p;
        if (count[p][(uint)(wa[0] >> (32 + shift)) & 255u] == (uint)len) continue;  /* one byte for all */
        prefix_sums(count[p]);
        for (int i = 0; i < len; ++i) {
            const ulong w = wa[i];
            wb[count[p][((uint)(w >> 32) >> shift) & 255u]++] = w;
        }
        __global ulong *t = wa; wa = wb; wb = t;
    }
    if (last < 0) {
        for (int i = 0; i < len; ++i)
            write_keyed(row_in, at + i, (KEY)(wa[i] >> 32), desc, (uint)wa[i], values, indices);
        return;
    }
    const int shift = 8 * last;
    prefix_sums(count[last]);
    for (int i = 0; i < len; ++i) {
        const ulong w = wa[i];
        const KEY k = (KEY)(w >> 32);
        write_keyed(row_in, at + count[last][(k >> shift) & 255u]++, k, desc, (uint)w, values, indices);
    }
}
#else
/* 8-byte keys, kept beside their positions (ka, ia; kb, ib the second copy). */
void radix_sort(__global KEY *ka, __global uint *ia, __global KEY *kb, __global uint *ib, const int len,
                uint count[PASSES][256],
                __global const T *row_in, const long at, const int desc, __global T *values, __global long *indices)
{
    const int last = last_pass(count, ka[0], len);
    for (int p = 0; p < last; ++p) {
        const int shift = 8 * p;
        if (count[p][(uint)(ka[0] >> shift) & 255u] == (uint)len) continue;  /* one byte for all */
        prefix_sums(count[p]);
        for (int i = 0; i < len; ++i) {
            const KEY k = ka[i];
            const uint to = count[p][(uint)(k >> shift) & 255u]++;
            kb[to] = k;
            ib[to] = ia[i];
        }
        __global KEY *tk = ka; ka = kb; kb = tk;
        __global uint *ti = ia; ia = ib; ib = ti;
    }
    if (last < 0) {
        for (int i = 0; i < len; ++i)
            write_keyed(row_in, at + i, ka[i], desc, ia[i], values, indices);
        return;
    }
    const int shift = 8 * last;
    prefix_sums(count[last]);
    for (int i = 0; i < len; ++i) {
        const KEY k = ka[i];
        write_keyed(row_in, at + count[last][(uint)(k >> shift) & 255u]++, k, desc, ia[i], values, indices);
    }
}
#endif
"""

_RUNS = _RADIX + """
__kernel void NAME(PARAMETERS)
{
    const long row = get_global_id(0);
    if (row >= rows) return;
    __global const T *src = in + in_off + row * n;
    const long base = row * n;
    if (n <= SHORT_RUN) {  /* short: an insertion sort costs less than 256-bucket histograms */
        KEY pk[SHORT_RUN];
        uint pi[SHORT_RUN];
        for (int i = 0; i < n; ++i) {
            const KEY k = key_of(src[i], desc);
            int j = i;
            for (; j > 0 && pk[j - 1] > k; --j) {  /* equal keys stay in order */
                pk[j] = pk[j - 1];
                pi[j] = pi[j - 1];
            }
            pk[j] = k;
            pi[j] = (uint)i;
        }
        for (int i = 0; i < n; ++i)
            write_keyed(src, base + i, pk[i], desc, pi[i], values, indices);
        return;
    }
    uint count[PASSES][256];
    for (int p = 0; p < PASSES; ++p)
        for (int d = 0; d < 256; ++d) count[p][d] = 0;
#if PACKED
    __global ulong *wa = (__global ulong *)keys_a + base;
    for (int i = 0; i < n; ++i) {  /* the words, and every byte's histogram at once */
        const KEY k = key_of(src[i], desc);
        wa[i] = ((ulong)k << 32) | (ulong)i;
        for (int p = 0; p < PASSES; ++p) count[p][(k >> (8 * p)) & 255u]++;
    }
    radix_sort(wa, (__global ulong *)keys_b + base, n, count, src, base, desc, values, indices);
#else
    for (int i = 0; i < n; ++i) {  /* keys, positions, and every byte's histogram at once */
        const KEY k = key_of(src[i], desc);
        keys_a[base + i] = k;
        idx_a[base + i] = (uint)i;
        for (int p = 0; p < PASSES; ++p) count[p][(uint)(k >> (8 * p)) & 255u]++;
    }
    radix_sort(keys_a + base, idx_a + base, keys_b + base, idx_b + base, n, count, src, base, desc,
               values, indices);
#endif
}
"""

_BINS = """
#define BIN(k) ((uint)((k) >> (8 * sizeof(KEY) - BIN_BITS)))

/* Work-item g's chunk of a row: gives its row (-1: g is past the last chunk), and sets
   its first and end columns. */
long chunk_of(const long g, const int rows, const int n, const int chunk, int *start, int *end)
{
    const int chunks = (n + chunk - 1) / chunk;
    if (g >= (long)rows * chunks) return -1;
    *start = (int)(g % chunks) * chunk;
    *end = min(n, *start + chunk);
    return g / chunks;
}
"""

_HISTOGRAM = _BINS + """
__kernel void NAME(PARAMETERS)
{
    const long g = get_global_id(0);
    int start, end;
    const long row = chunk_of(g, rows, n, chunk, &start, &end);
    if (row < 0) return;
    __global uint *h = hist + g * BINS;
    for (int v = 0; v < BINS; ++v) h[v] = 0;
    __global const T *src = in + in_off + row * n;
    for (int i = start; i < end; ++i) h[BIN(key_of(src[i], desc))]++;
    uint sum = 0;
    for (int v = 0; v < BINS; ++v) {  /* cumulative: the plan sums a few bins, not all */
        sum += h[v];
        h[v] = sum;
    }
}
"""

_PLAN = """
uint keys_upto(__global const uint *h, const int chunks, const int v)  /* the row's keys in bins 0..v */
{
    uint c = 0;
    for (int k = 0; k < chunks; ++k) c += h[k * BINS + v];
    return c;
}

__kernel void NAME(PARAMETERS)
{
    const long row = get_global_id(0);
    if (row >= rows) return;
    __global const uint *h = hist + row * chunks * BINS;  /* each chunk's keys in bins 0..v */
    __global ushort *tab = table + row * BINS;
    __global uint *bnd = bounds + row * (buckets + 1);
    __global uint *off = offsets + row * chunks * buckets;
    /* Consecutive bins to a bucket while it holds at most `cap` keys (a bin is never
       split: a bin of more makes a bucket alone), found by a binary search of the counts;
       the last bucket takes whatever is left. Two buckets in a row hold more than `cap`,
       so a row of n needs at most 2 n / cap + 1 (fusers/sort.bucket_layout). Each
       chunk's keys of a bucket follow the earlier chunks' (the scatter is stable). */
    int first = 0;  /* the bucket's first bin */
    uint at = 0;    /* where its keys begin in the row */
    for (int b = 0; b < buckets; ++b) {
        int last = first - 1;  /* its last bin (none: an empty bucket) */
        if (first < BINS) {
            last = BINS - 1;
            if (b < buckets - 1 && keys_upto(h, chunks, last) > at + (uint)cap) {
                int lo = first;  /* the first bin that would take the bucket past cap */
                while (lo < last) {
                    const int mid = lo + (last - lo) / 2;
                    if (keys_upto(h, chunks, mid) > at + (uint)cap) last = mid;
                    else lo = mid + 1;
                }
                last = max(first, last - 1);
            }
        }
        for (int v = first; v <= last; ++v) tab[v] = (ushort)b;
        bnd[b] = at;
        for (int k = 0; k < chunks; ++k) {
            __global const uint *hk = h + k * BINS;
            const uint before = first > 0 ? hk[first - 1] : 0;
            off[k * buckets + b] = at;
            at += (last >= first ? hk[last] : before) - before;
        }
        first = last + 1;
    }
    bnd[buckets] = at;
}
"""

_SCATTER = _BINS + """
__kernel void NAME(PARAMETERS)
{
    const long g = get_global_id(0);
    int start, end;
    const long row = chunk_of(g, rows, n, chunk, &start, &end);
    if (row < 0) return;
    __global const ushort *tab = table + row * BINS;
    __global const uint *off = offsets + g * buckets;
    uint at[MAX_BUCKETS];
    for (int b = 0; b < buckets; ++b) at[b] = off[b];
    __global const T *src = in + in_off + row * n;
#if PACKED
    __global ulong *w = (__global ulong *)keys_a + row * n;
    for (int i = start; i < end; ++i) {
        const KEY k = key_of(src[i], desc);
        w[at[tab[BIN(k)]]++] = ((ulong)k << 32) | (ulong)i;
    }
#else
    __global KEY *ka = keys_a + row * n;
    __global uint *ia = idx_a + row * n;
    for (int i = start; i < end; ++i) {
        const KEY k = key_of(src[i], desc);
        const uint p = at[tab[BIN(k)]]++;
        ka[p] = k;
        ia[p] = (uint)i;
    }
#endif
}
"""

_BUCKETS = _RADIX + """
__kernel void NAME(PARAMETERS)
{
    const long items = (long)rows * buckets;
    if (get_global_id(0) >= items) return;
    const long g = get_global_id(0) * step % items;  /* buckets dealt from all over (fusers/sort.dealing_step) */
    const long row = g / buckets;
    __global const uint *bnd = bounds + row * (buckets + 1) + g % buckets;
    const int len = (int)(bnd[1] - bnd[0]);
    if (len == 0) return;
    const long base = row * n + bnd[0];
    __global const T *row_in = in + in_off + row * n;
#if LANE_WIDTH
    if (sort_bucket_in_lanes((__global const ulong *)keys_a + base, len, desc, row_in, values + base)) return;
#endif
    uint count[PASSES][256];
    for (int p = 0; p < PASSES; ++p)
        for (int d = 0; d < 256; ++d) count[p][d] = 0;
#if PACKED
    __global ulong *wa = (__global ulong *)keys_a + base;
    for (int i = 0; i < len; ++i) {
        const uint k = (uint)(wa[i] >> 32);
        for (int p = 0; p < PASSES; ++p) count[p][(k >> (8 * p)) & 255u]++;
    }
    radix_sort(wa, (__global ulong *)keys_b + base, len, count, row_in, base, desc, values, indices);
#else
    for (int i = 0; i < len; ++i) {
        const KEY k = keys_a[base + i];
        for (int p = 0; p < PASSES; ++p) count[p][(uint)(k >> (8 * p)) & 255u]++;
    }
    radix_sort(keys_a + base, idx_a + base, keys_b + base, idx_b + base, len, count, row_in, base, desc,
               values, indices);
#endif
}
"""

_MERGE = """
__kernel void NAME(PARAMETERS)
{
    const int L = get_local_size(0);
    const int per_row = (n + chunk - 1) / chunk;  /* work-items per row */
    const int groups = (per_row + L - 1) / L;     /* work-groups per row */
    const long row = get_group_id(0) / groups;
    const int item = (int)(get_group_id(0) % groups) * L + get_local_id(0);
    if (row >= rows || item >= per_row) return;
    const long base = row * n;
    const int first = item * chunk;  /* chunks never straddle two merged runs */
    const int a0 = first / (2 * run) * (2 * run), a1 = min(a0 + run, n), b1 = min(a0 + 2 * run, n);
    const int d = first - a0;
    /* Merge path: how many of the first d merged pairs come from run A. */
    int lo = max(0, d - (b1 - a1)), hi = min(d, a1 - a0);
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        const long p = base + a0 + mid, q = base + a1 + d - mid - 1;
        if (LESS(keys[p], idx[p], keys[q], idx[q])) lo = mid + 1;
        else hi = mid;
    }
    int i = a0 + lo, j = a1 + d - lo;
    KEY ka = 0, kb = 0;
    uint ia = 0, ib = 0;
    if (i < a1) { ka = keys[base + i]; ia = idx[base + i]; }
    if (j < b1) { kb = keys[base + j]; ib = idx[base + j]; }
    const int end = min(first + chunk, b1);
    for (int at = first; at < end; ++at) {
        const int take_a = j >= b1 || (i < a1 && LESS(ka, ia, kb, ib));
        const KEY k = take_a ? ka : kb;
        const uint ix = take_a ? ia : ib;
        if (final)
            write_keyed(in + in_off + base, base + at, k, desc, ix, values, indices);
        else {
            keys_out[base + at] = k;
            idx_out[base + at] = ix;
        }
        if (take_a) {
            if (++i < a1) { ka = keys[base + i]; ia = idx[base + i]; }
        } else if (++j < b1) {
            kb = keys[base + j]; ib = idx[base + j];
        }
    }
}
"""


def generate(spec: SortSpec) -> tuple[str, str]:
    """OpenCL C source of `spec`'s kernel and the kernel's name."""
    name = kernel_name(spec)
    if spec.stage == "lanes":
        return lane_sort.generate(spec.dtype, spec.width, name, sig.declare(parameters(spec)), spec.lanes), name
    key, body = _KEYS[spec.dtype]
    t = dt.CL_NAME[spec.dtype]
    src = dt.fp64_pragma((spec.dtype,))
    src += [
        f"typedef {t} T;",
        f"typedef {key} KEY;",
        f"#define KEY_MAX (({key})~({key})0)",
        f"#define IS_NAN(v) {'isnan(v)' if dt.is_float(spec.dtype) else '0'}",
        f"#define IS_FLOAT {int(dt.is_float(spec.dtype))}",
        f"#define KEY_SIGN (({key})1 << {63 if key == 'ulong' else 31})",
        f"#define WRITE_VALUES {int(spec.values)}",
        f"#define WRITE_INDICES {int(spec.indices)}",
        f"#define PASSES {8 if key == 'ulong' else 4}",
        f"#define SHORT_RUN {SHORT_RUN}",
        f"#define PACKED {int(key == 'uint')}",
        f"#define BIN_BITS {BIN_BITS}",
        f"#define BINS {BINS}",
        f"#define MAX_BUCKETS {MAX_BUCKETS}",
        f"#define LANE_WIDTH {spec.width}",
        f"KEY raw_key(const T v)\n{{{body}\n}}",
        _COMMON.replace("VALUE_BODY", "\n    " + _VALUES[spec.dtype]),
        lane_sort.bucket_function(spec.dtype, spec.width) if spec.width else "",
        {"tiles": _TILES, "runs": _RUNS, "merge": _MERGE, "histogram": _HISTOGRAM, "plan": _PLAN,
         "scatter": _SCATTER, "buckets": _BUCKETS}[spec.stage].replace("NAME", name).replace(
            "PARAMETERS", sig.declare(parameters(spec))),
    ]
    return "\n".join(src), name
