"""Kernels of the row sort: a bitonic sort of tiles in local memory, then merge passes.

Every element becomes a pair (key, position in its row). The key is an unsigned integer
whose order is the order wanted: ints with the sign bit flipped, floats by their bits
(negatives inverted), -0.0 made +0.0 (numpy compares them equal), every NaN the largest
key in both directions, all bits inverted for a descending sort. Ties are broken by the
position, so the order is total: any sorting network gives the stable result.

- `sort_tiles`: each work-group sorts a tile of 2 * local-size pairs. A tile holds
  several short rows (each padded to a power of two with pairs that sort last) or one
  chunk of a long row. When a row fits one tile the kernel writes the results;
  otherwise it writes sorted runs of pairs to scratch buffers.
- `runs` (CPU devices, in place of `sort_tiles`): each work-item sorts one segment of a
  row alone, an LSD radix sort of its keys by bytes (stable: ties keep their positions),
  skipping a byte every key shares. A CPU runs a work-group as a loop on one core and
  the tiles' bitonic network as one loop per barrier step: 2^20 floats took 127 ms that
  way, 3.6x numpy's time, and a row sort per work-item needs no barrier at all.
- `merge`: neighbouring sorted runs merged into one, each work-item writing a chunk of
  the merged run: a binary search on the merge path finds where its chunk starts in
  both runs, then it merges sequentially. The last pass writes the results.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .. import dtypes as dt
from . import signature as sig


class SortSpec(NamedTuple):
    """One sort kernel: which stage, for which dtype, writing which results."""

    kind: str  # always "sort": keeps these keys apart from other kernels' in the cache
    stage: str  # "tiles", "runs" or "merge"
    dtype: np.dtype
    values: bool  # the final pass writes the sorted values
    indices: bool  # the final pass writes the positions (int64)


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


# Runs up to this long are insertion-sorted by the `runs` kernel (radix histograms cost
# 256 counters per byte whatever the run's length).
SHORT_RUN = 64


def key_bytes(dtype: np.dtype) -> int:
    """Bytes of one sort key of `dtype` (4 or 8)."""
    return 8 if _KEYS[dtype][0] == "ulong" else 4


def scalar_variant(spec: SortSpec) -> None:
    """Sort kernels have no vector form to fall back from."""
    return None


def kernel_name(spec: SortSpec) -> str:
    outs = ("v" if spec.values else "") + ("i" if spec.indices else "")
    return f"sort_{spec.stage}_{spec.dtype.name}_{outs}"


def parameters(spec: SortSpec) -> tuple[sig.Param, ...]:
    """The kernel's parameters. Tiles: the input and its offset, rows, n, the segment,
    descending, final; the keys and indices out, the values and indices (the result);
    local keys and indices. Runs: as tiles, with the radix sort's second copy of the keys
    and indices (for 4-byte keys, both hold packed 8-byte words) in place of local memory.
    Merge: the keys and indices in, rows, n, the run, the chunk,
    final; the keys and indices out; the input and its offset; the result."""
    i32, i64 = np.dtype(np.int32), np.dtype(np.int64)
    result = [sig.raw("out", "__global T *values"), sig.raw("out", "__global long *indices")]
    if spec.stage in ("tiles", "runs"):
        last = (sig.raw("local", "__local KEY *lk"), sig.raw("local", "__local uint *li")) \
            if spec.stage == "tiles" else \
            (sig.raw("out", "__global KEY *tmp_keys"), sig.raw("out", "__global uint *tmp_idx"))
        return (sig.raw("input", "__global const T *in"), sig.scalar(i64, "in_off"),
                *(sig.scalar(i32, n) for n in ("rows", "n", "seg", "desc", "final")),
                sig.raw("out", "__global KEY *keys_out"), sig.raw("out", "__global uint *idx_out"), *result,
                *last)
    return (sig.raw("input", "__global const KEY *keys"), sig.raw("input", "__global const uint *idx"),
            *(sig.scalar(i32, n) for n in ("rows", "n", "run", "chunk", "final")),
            sig.raw("out", "__global KEY *keys_out"), sig.raw("out", "__global uint *idx_out"),
            sig.raw("input", "__global const T *in"), sig.scalar(i64, "in_off"), *result)


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

void write_result(__global const T *in, const long row_at, const long at, const uint ix,
                  __global T *values, __global long *indices)
{
#if WRITE_VALUES
    values[at] = in[row_at + ix];
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
            write_result(in, in_off + row * n, at, li[e], values, indices);
        else {
            keys_out[at] = lk[e];
            idx_out[at] = li[e];
        }
    }
}
"""

_RUNS = """
void prefix_sums(uint *count)  /* a byte's counts to the first position of its keys */
{
    uint sum = 0;
    for (int d = 0; d < 256; ++d) {
        const uint c = count[d];
        count[d] = sum;
        sum += c;
    }
}

void sort_run(__global const T *src, const int start, const int len, const long base, const int desc,
              __global KEY *keys_out, __global uint *idx_out, __global KEY *tmp_keys, __global uint *tmp_idx,
              const int final, __global const T *row_in, const long row_at,
              __global T *values, __global long *indices)
{
    if (len <= SHORT_RUN) {  /* short: an insertion sort costs less than 256-bucket histograms */
        KEY pk[SHORT_RUN];
        uint pi[SHORT_RUN];
        for (int i = 0; i < len; ++i) {
            const KEY k = key_of(src[i], desc);
            int j = i;
            for (; j > 0 && pk[j - 1] > k; --j) {  /* equal keys stay in order */
                pk[j] = pk[j - 1];
                pi[j] = pi[j - 1];
            }
            pk[j] = k;
            pi[j] = (uint)(start + i);
        }
        for (int i = 0; i < len; ++i) {
            if (final)
                write_result(row_in, 0, row_at + i, pi[i], values, indices);
            else {
                keys_out[base + i] = pk[i];
                idx_out[base + i] = pi[i];
            }
        }
        return;
    }
    uint count[PASSES][256];
    for (int p = 0; p < PASSES; ++p)
        for (int d = 0; d < 256; ++d) count[p][d] = 0;
#if PACKED
    /* 4-byte keys: key and position in one 8-byte word, whose order is the pairs' order:
       one load and one store per move, and half the streams a pass scatters into. */
    __global ulong *wa = (__global ulong *)tmp_keys + base, *wb = (__global ulong *)tmp_idx + base;
    for (int i = 0; i < len; ++i) {
        const KEY k = key_of(src[i], desc);
        wa[i] = ((ulong)k << 32) | (ulong)(start + i);
        for (int p = 0; p < PASSES; ++p) count[p][(k >> (8 * p)) & 255u]++;
    }
    const uint first = (uint)(wa[0] >> 32);
    for (int p = 0; p < PASSES; ++p) {
        const int shift = 8 * p;
        if (count[p][(first >> shift) & 255u] == (uint)len) continue;  /* one byte for all */
        prefix_sums(count[p]);
        for (int i = 0; i < len; ++i) {  /* in order: equal bytes keep their order */
            const ulong w = wa[i];
            wb[count[p][((uint)(w >> 32) >> shift) & 255u]++] = w;
        }
        __global ulong *t = wa; wa = wb; wb = t;
    }
    for (int i = 0; i < len; ++i) {
        if (final)
            write_result(row_in, 0, row_at + i, (uint)wa[i], values, indices);
        else {
            keys_out[base + i] = (KEY)(wa[i] >> 32);
            idx_out[base + i] = (uint)wa[i];
        }
    }
#else
    for (int i = 0; i < len; ++i) {  /* keys, positions, and every byte's histogram at once */
        const KEY k = key_of(src[i], desc);
        keys_out[base + i] = k;
        idx_out[base + i] = (uint)(start + i);
        for (int p = 0; p < PASSES; ++p) count[p][(uint)(k >> (8 * p)) & 255u]++;
    }
    __global KEY *ka = keys_out + base, *kb = tmp_keys + base;
    __global uint *ia = idx_out + base, *ib = tmp_idx + base;
    for (int p = 0; p < PASSES; ++p) {
        const int shift = 8 * p;
        if (count[p][(uint)(ka[0] >> shift) & 255u] == (uint)len) continue;  /* one byte for all */
        prefix_sums(count[p]);
        for (int i = 0; i < len; ++i) {  /* in order: equal bytes keep their order */
            const KEY k = ka[i];
            const uint at = count[p][(uint)(k >> shift) & 255u]++;
            kb[at] = k;
            ib[at] = ia[i];
        }
        __global KEY *tk = ka; ka = kb; kb = tk;
        __global uint *ti = ia; ia = ib; ib = ti;
    }
    if (final) {
        for (int i = 0; i < len; ++i)
            write_result(row_in, 0, row_at + i, ia[i], values, indices);
    } else if (ka != keys_out + base) {
        for (int i = 0; i < len; ++i) {
            keys_out[base + i] = ka[i];
            idx_out[base + i] = ia[i];
        }
    }
#endif
}

__kernel void NAME(PARAMETERS)
{
    const int cpr = (n + seg - 1) / seg;  /* segments per row */
    const long g = get_global_id(0);
    if (g >= (long)rows * cpr) return;
    const long row = g / cpr;
    const int start = (int)(g % cpr) * seg;
    sort_run(in + in_off + row * n + start, start, min(seg, n - start), row * n + start, desc,
             keys_out, idx_out, tmp_keys, tmp_idx, final, in + in_off + row * n, row * n, values, indices);
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
            write_result(in, in_off + base, base + at, ix, values, indices);
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
    key, body = _KEYS[spec.dtype]
    t = dt.CL_NAME[spec.dtype]
    src = []
    if spec.dtype == dt.float64:
        src.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
    src += [
        f"typedef {t} T;",
        f"typedef {key} KEY;",
        f"#define KEY_MAX (({key})~({key})0)",
        f"#define IS_NAN(v) {'isnan(v)' if dt.is_float(spec.dtype) else '0'}",
        f"#define WRITE_VALUES {int(spec.values)}",
        f"#define WRITE_INDICES {int(spec.indices)}",
        f"#define PASSES {8 if key == 'ulong' else 4}",
        f"#define SHORT_RUN {SHORT_RUN}",
        f"#define PACKED {int(key == 'uint')}",
        f"KEY raw_key(const T v)\n{{{body}\n}}",
        _COMMON,
        {"tiles": _TILES, "runs": _RUNS, "merge": _MERGE}[spec.stage].replace("NAME", name).replace(
            "PARAMETERS", sig.declare(parameters(spec))),
    ]
    return "\n".join(src), name
