"""OpenCL C for the CPU sort of many short rows: a bitonic network in 16-lane vectors.

One work-item sorts one row of up to a few thousand 4-byte values (`sort(x)` of ints,
unsigned ints or floats, values only), with its keys (codegen/sort.py's order, as
unsigned ints) in a private array of `uint16` vectors, the row padded to a power of two
`width` with keys that sort last. First each vector's 16 lanes are sorted by compare-
exchanges between lanes (a lane shuffle, a min and a max); then, for every merge size
k = 32 .. width, pairs of vectors far apart are compare-exchanged in sweeps over the
array, and the last steps (distances below GROUP vectors, then between lanes) run on
GROUP vectors held in registers. Nothing is ordered by position: keys that tie stand
for equal values, except zeros (+0.0 and -0.0) and NaNs, which a last pass over the row
writes in their input order where the sort put their keys (numpy's stable order, bit
for bit).

The radix sort (`runs` in codegen/sort.py) moves one key at a time through memory;
this does 16 compare-exchanges per instruction in registers and L1. Measured on PoCL 3.0
(a 2-core Intel Xeon with AVX-512, 2^20 float32 in rows, kernel time, medians of 10),
against numpy's sort of the same array: rows of 256 1.04 ms (numpy 1.12), of 1024 1.38
(numpy 1.97; the radix sort 6.4), of 4096 2.0 (numpy 2.44), of 16384 3.0 (numpy 2.76:
a private array of 64 KiB no longer stays in L1, and the radix sort takes those rows).
Lane shuffles are clang's `__builtin_shufflevector` (OpenCL's `shuffle()` and `select()`
took 12 ms for rows of 1024 on that driver); a driver whose compiler lacks it builds
the radix sort instead (`scalar_variant` in codegen/sort.py).
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as dt

LANES = 16
GROUP = 8  # vectors held in registers for the last steps of each merge (16 measured no faster)
MIN_WIDTH = LANES
MAX_WIDTH = 1 << 12
DTYPES = (dt.float32, dt.int32, dt.uint32)

_ONES, _ZERO = "0xFFFFFFFFu", "0u"

# Each dtype's 16 values f to their keys x (order-preserving unsigned ints, before a
# descending sort inverts them), and keys {k} back to values. Floats: -0.0 made +0.0;
# NaNs are made the largest key after the inversion (in generate).
_TO_KEYS = {
    dt.float32: """
  uint16 x = f == (float16)0.0f ? (uint16)0u : as_uint16(f);
  x ^= as_uint16(as_int16(x) >> 31) | (uint16)0x80000000u;""",
    dt.int32: "\n  uint16 x = as_uint16(f) ^ (uint16)0x80000000u;",
    dt.uint32: "\n  uint16 x = f;",
}
_FROM_KEYS = {
    dt.float32: "as_float16({k} ^ (as_int16({k}) < 0 ? (uint16)0x80000000u : (uint16)0xFFFFFFFFu))",
    dt.int32: "as_int16({k} ^ (uint16)0x80000000u)",
    dt.uint32: "{k}",
}


def _perm(j: int) -> str:
    return ", ".join(str(lane ^ j) for lane in range(LANES))


def _lanes(pick) -> str:
    """A uint16 constant: all ones in the lanes where `pick(lane)`."""
    return "(uint16)(" + ", ".join(_ONES if pick(lane) else _ZERO for lane in range(LANES)) + ")"


def _lane_step(var: str, j: int, lower: str) -> str:
    """Compare-exchange lane l of `var` with lane l ^ j: the minimum where `lower` is all ones."""
    return (f"{{ const uint16 o = __builtin_shufflevector({var}, {var}, {_perm(j)}); "
            f"{var} = as_int16({lower}) < 0 ? MIN({var}, o) : MAX({var}, o); }}")


def _sort_lanes() -> list[str]:
    """Steps that sort x's 16 lanes ascending, or descending where d is all ones."""
    steps = []
    for k in (2, 4, 8):
        j = k // 2
        while j:
            steps.append(_lane_step("x", j, _lanes(lambda lane, j=j, k=k: ((lane & j) == 0) == ((lane & k) == 0))))
            j //= 2
    steps += [_lane_step("x", j, f"{_lanes(lambda lane, j=j: (lane & j) == 0)} ^ d") for j in (8, 4, 2, 1)]
    return steps


def _group_steps(group: int) -> list[str]:
    """The last steps of merge size k on vectors g0.. g{group-1} (directions d0..): those
    between vectors (distance J vectors, J < group, while J <= k / 32), then between lanes."""
    steps = []
    far = group // 2
    while far:
        steps.append(f"if ({far} <= k / {2 * LANES}) {{")
        for i in range(group):
            if i & far == 0:
                a, b = f"g{i}", f"g{i + far}"
                steps.append(f"  {{ const uint16 lo = MIN({a}, {b}), hi = MAX({a}, {b}); "
                             f"{a} = as_int16(d{i}) < 0 ? hi : lo; {b} = as_int16(d{i}) < 0 ? lo : hi; }}")
        steps.append("}")
        far //= 2
    for i in range(group):
        steps += [_lane_step(f"g{i}", j, f"{_lanes(lambda lane, j=j: (lane & j) == 0)} ^ d{i}") for j in (8, 4, 2, 1)]
    return steps


def kernel_name(dtype: np.dtype, width: int) -> str:
    return f"sort_lanes_{dtype.name}_{width}"


def width_for(n: int) -> int:
    """The padded row of the kernel that sorts rows of `n`: a power of two, at least MIN_WIDTH."""
    return max(MIN_WIDTH, 1 << max(n - 1, 0).bit_length())


def supports(dtype: np.dtype, n: int) -> bool:
    """Whether rows of `n` values of `dtype` can be sorted by this kernel."""
    return dtype in DTYPES and 0 < n <= MAX_WIDTH


def network(dtype: np.dtype, group: int) -> str:
    """OpenCL C of the network's functions for values of `dtype` (T, defined before): `put`
    (a vector of values to a row), `sort_lanes` (a vector's lanes) and `merge_vectors`
    (the merges of vectors already sorted in their lanes, the last one writing values; the
    vectors a power of two, at least `group`)."""
    ind = "\n      "
    values = {i: _FROM_KEYS[dtype].format(k=f"(g{i} ^ invert)") for i in range(group)}
    return f"""
typedef {dt.CL_NAME[dtype]}16 T16;
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) < (b) ? (b) : (a))

/* Values v to vector vi of a row of n: the lanes within it. */
void put(const T16 v, const int vi, const int n, __global T *dst)
{{
  if ((vi + 1) * 16 <= n) {{
    vstore16(v, vi, dst);
  }} else if (vi * 16 < n) {{
    T lane[16];
    vstore16(v, 0, lane);
    for (int l = 0; vi * 16 + l < n; ++l) dst[vi * 16 + l] = lane[l];
  }}
}}

/* x's lanes sorted: ascending, or descending where d is all ones. */
uint16 sort_lanes(uint16 x, const uint16 d)
{{
  {(chr(10) + '  ').join(_sort_lanes())}
  return x;
}}

/* Bitonic merges of runs of k keys, k = 32 .. 16 * vectors, over v (each vector sorted,
   ascending in even vectors and descending in odd); the last writes the first n values
   of the keys (inverted back by `invert`) to dst. */
void merge_vectors(uint16 *v, const int vectors, const uint16 invert, const int n, __global T *dst)
{{
  const uint16 ones = (uint16){_ONES};
  for (int k = {2 * LANES}; k <= vectors * 16; k <<= 1) {{
    for (int far = k / {2 * LANES}; far >= {group}; far >>= 1) {{
      for (int vi = 0; vi < vectors; ++vi) {{
        if (vi & far) continue;
        const uint16 a = v[vi], b = v[vi + far];
        const uint16 lo = MIN(a, b), hi = MAX(a, b);
        const int up = ((vi * 16) & k) == 0;
        v[vi] = up ? lo : hi;
        v[vi + far] = up ? hi : lo;
      }}
    }}
    for (int v0 = 0; v0 < vectors; v0 += {group}) {{
      {ind.join(f"uint16 g{i} = v[v0 + {i}];" for i in range(group))}
      {ind.join(f"const uint16 d{i} = ((v0 + {i}) * 16 & k) ? ones : ~ones;" for i in range(group))}
      {ind.join(_group_steps(group))}
      if (k < vectors * 16) {{
        {(ind + '  ').join(f"v[v0 + {i}] = g{i};" for i in range(group))}
      }} else if ((v0 + {group}) * 16 <= n) {{
        {(ind + '  ').join(f"vstore16({values[i]}, v0 + {i}, dst);" for i in range(group))}
      }} else {{
        {(ind + '  ').join(f"put({values[i]}, v0 + {i}, n, dst);" for i in range(group))}
      }}
    }}
  }}
  if (vectors == 1) put({_FROM_KEYS[dtype].format(k='(v[0] ^ invert)')}, 0, n, dst);
}}
"""


def generate(dtype: np.dtype, width: int, name: str, parameters: str) -> str:
    """The kernel `name(parameters)` sorting rows of `dtype` padded to `width` (parameters:
    in, in_off, rows, n, desc, values; see codegen/sort.py)."""
    vectors = width // LANES
    if dt.is_float(dtype):  # NaNs last both ways; any zero or NaN makes the last pass run
        special = """
  const int16 nan = isnan(f);
  x = nan ? (uint16)0xFFFFFFFFu : x;
  *special |= (nan | (f == (T16)0)) & ~as_int16(pad);"""
        fix_up = """
  if (any(special)) {  /* numpy keeps each zero's and NaN's bits, in input order */
    int zeros = 0, nans = 0, below = 0;  /* below: the values that sort before the zeros */
    for (int i = 0; i < n; ++i) {
      const T f = src[i];
      zeros += f == (T)0;
      nans += isnan(f);
      below += desc ? f > (T)0 : f < (T)0;
    }
    int z = below, q = n - nans;
    for (int i = 0; i < n; ++i) {
      const T f = src[i];
      if (f == (T)0) dst[z++] = f;
      else if (isnan(f)) dst[q++] = f;
    }
  }"""
    else:
        special = fix_up = ""
    return f"""
typedef {dt.CL_NAME[dtype]} T;
{network(dtype, min(GROUP, vectors))}
/* The keys of f (lanes where `pad` is all ones: after every key), their lanes sorted:
   ascending, or descending where d is all ones. */
uint16 sorted_keys(const T16 f, const uint16 invert, const uint16 pad, const uint16 d, int16 *special)
{{{_TO_KEYS[dtype]}
  x = (x ^ invert) | pad;{special}
  return sort_lanes(x, d);
}}

__kernel void {name}({parameters})
{{
  const long row = get_global_id(0);
  if (row >= rows) return;
  __global const T *src = in + in_off + row * n;
  __global T *dst = values + row * n;
  const uint16 invert = desc ? (uint16){_ONES} : (uint16){_ZERO}, ones = (uint16){_ONES};
  int16 special = (int16)0;
  uint16 v[{vectors}];
  /* Each vector's keys, its lanes sorted: ascending in even vectors, descending in odd. */
  const int whole = n / 16;
  for (int vi = 0; vi < whole; ++vi)
    v[vi] = sorted_keys(vload16(vi, src), invert, ~ones, (vi & 1) ? ones : ~ones, &special);
  for (int vi = whole; vi < {vectors}; ++vi) v[vi] = ones;
  const int left = n - whole * 16;
  if (left) {{  /* the last lanes: read as a whole vector where the array goes on after them */
    T16 f;
    if ((row + 1) * n + 16 - left <= (long)rows * n) {{
      f = vload16(whole, src);
    }} else {{
      T lane[16];
      for (int l = 0; l < 16; ++l) lane[l] = l < left ? src[whole * 16 + l] : (T)1;
      f = vload16(0, lane);
    }}
    const uint16 pad = as_uint16((int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15) >= left);
    v[whole] = sorted_keys(f, invert, pad, (whole & 1) ? ones : ~ones, &special);
  }}
  merge_vectors(v, {vectors}, invert, n, dst);{fix_up}
}}
"""


def bucket_function(dtype: np.dtype, width: int) -> str:
    """OpenCL C of `sort_bucket_in_lanes`, for the bucket sort's last stage (codegen/sort.py,
    T and KEY_MAX defined before): a bucket of `len` packed words (key << 32 | position in
    the row, keys already inverted for a descending sort, in the row's order) sorted by
    the network into `dst`, its values made from the keys, zeros and NaNs read from
    `row_in` in the bucket's order; 0 (nothing done) for a bucket longer than `width`."""
    if dt.is_float(dtype):
        special = "\n      special |= (x == zero_key) | (x == ones);"
        special_tail = ("\n      special |= ((x == zero_key) | (x == ones)) & "
                        "((int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15) < len - vi * 16);")
        fix_up = """
  if (any(special)) {  /* numpy keeps each zero's and NaN's bits, in the row's order */
    int zeros = 0, nans = 0, below = 0;
    for (int i = 0; i < len; ++i) {
      const uint k = (uint)(w[i] >> 32);
      zeros += k == zero_key.s0;
      nans += k == KEY_MAX;
      below += k < zero_key.s0;
    }
    int z = below, q = len - nans;
    for (int i = 0; i < len; ++i) {
      const uint k = (uint)(w[i] >> 32);
      if (k == zero_key.s0) dst[z++] = row_in[(uint)w[i]];
      else if (k == KEY_MAX) dst[q++] = row_in[(uint)w[i]];
    }
  }"""
    else:
        special = special_tail = fix_up = ""
    return f"""{network(dtype, GROUP)}
int sort_bucket_in_lanes(__global const ulong *w, const int len, const int desc, __global const T *row_in,
                         __global T *dst)
{{
  if (len > {width}) return 0;
  const uint16 invert = desc ? (uint16){_ONES} : (uint16){_ZERO}, ones = (uint16){_ONES};
  const uint16 zero_key = (uint16)0x80000000u ^ invert;
  int16 special = (int16)0;
  int vectors = {GROUP};
  while (vectors * 16 < len) vectors <<= 1;
  uint16 v[{width // LANES}];
  for (int vi = 0; vi < vectors; ++vi) {{
    uint16 x = ones;
    if ((vi + 1) * 16 <= len) {{
      x = convert_uint16(vload16(vi, w) >> (ulong16)32);{special}
    }} else if (vi * 16 < len) {{
      uint lane[16];
      for (int l = 0; l < 16; ++l) lane[l] = vi * 16 + l < len ? (uint)(w[vi * 16 + l] >> 32) : KEY_MAX;
      x = vload16(0, lane);{special_tail}
    }}
    v[vi] = sort_lanes(x, (vi & 1) ? ones : ~ones);
  }}
  merge_vectors(v, vectors, invert, len, dst);{fix_up}
  return 1;
}}
"""
