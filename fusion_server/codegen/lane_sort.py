"""OpenCL C for the CPU sort of many short rows: a bitonic network in 16-lane vectors
(8-lane where the device qualified no more for 4-byte values).

One work-item sorts one row of up to a few thousand 4-byte values (`sort(x)` of ints,
unsigned ints or floats, values only), with its keys (codegen/sort.py's order, as
unsigned ints) in a private array of `uint16` vectors (L = 16 lanes; `uint8`, L = 8),
the row padded to a power of two `width` with keys that sort last. First each vector's
L lanes are sorted by compare-exchanges between lanes (a lane shuffle, a min and a
max); then, for every merge size k = 2L .. width, pairs of vectors far apart are
compare-exchanged in sweeps over the
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

In 8 lanes (PoCL 3.0 on a 2-core AMD Zen 4, whose LLVM builds for AVX2 and fails 16
lanes of 4-byte ints), 2^20 float32 in rows of 1024, wall time of sort and wait, medians
of 15 in alternation: 2.9 to 4.5 ms against the radix sort's 6.2 to 8.6 and numpy's 6.8
to 7.1; rows of 16 1.7 (radix 11.5), of 4096 6.3 (radix 8.9, numpy 16.5). Only rows:
that driver builds the bucket stage's network in 8 lanes wrong (fusers/sort.py).
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as dt

LANES = 16  # the widest network, for devices qualified at 16 lanes of 4-byte values
NARROW_LANES = 8  # for devices qualified at 8 (AVX2 machines; PoCL 3.0 on AMD Zen 4)
GROUP = 8  # vectors held in registers for the last steps of each merge (16 measured no faster)
MAX_WIDTH = 1 << 12
DTYPES = (dt.float32, dt.int32, dt.uint32)

_ONES, _ZERO = "0xFFFFFFFFu", "0u"

# Each dtype's values f (L lanes) to their keys x (order-preserving unsigned ints, before
# a descending sort inverts them), and keys {k} back to values. Floats: -0.0 made +0.0;
# NaNs are made the largest key after the inversion (in generate).
_TO_KEYS = {
    dt.float32: """
  uint{L} x = f == (float{L})0.0f ? (uint{L})0u : as_uint{L}(f);
  x ^= as_uint{L}(as_int{L}(x) >> 31) | (uint{L})0x80000000u;""",
    dt.int32: "\n  uint{L} x = as_uint{L}(f) ^ (uint{L})0x80000000u;",
    dt.uint32: "\n  uint{L} x = f;",
}
_FROM_KEYS = {
    dt.float32: "as_float{L}({k} ^ (as_int{L}({k}) < 0 ? (uint{L})0x80000000u : (uint{L})0xFFFFFFFFu))",
    dt.int32: "as_int{L}({k} ^ (uint{L})0x80000000u)",
    dt.uint32: "{k}",
}


def lanes_for(qualified: int) -> int:
    """The network's lanes on a device qualified at `qualified` lanes of 4-byte values: 16
    or 8 (0: none; the radix sort then)."""
    return LANES if qualified >= LANES else NARROW_LANES if qualified >= NARROW_LANES else 0


def _to_keys(dtype: np.dtype, lanes: int) -> str:
    return _TO_KEYS[dtype].replace("{L}", str(lanes))


def _from_keys(dtype: np.dtype, lanes: int, k: str) -> str:
    return _FROM_KEYS[dtype].replace("{L}", str(lanes)).format(k=k)


def _lane_numbers(lanes: int) -> str:
    """An int vector constant of the lane numbers, 0 .. lanes - 1."""
    return f"(int{lanes})(" + ", ".join(map(str, range(lanes))) + ")"


def _perm(j: int, lanes: int) -> str:
    return ", ".join(str(lane ^ j) for lane in range(lanes))


def _lanes(pick, lanes: int) -> str:
    """A uint vector constant: all ones in the lanes where `pick(lane)`."""
    return f"(uint{lanes})(" + ", ".join(_ONES if pick(lane) else _ZERO for lane in range(lanes)) + ")"


def _lane_step(var: str, j: int, lower: str, lanes: int) -> str:
    """Compare-exchange lane l of `var` with lane l ^ j: the minimum where `lower` is all ones."""
    return (f"{{ const uint{lanes} o = __builtin_shufflevector({var}, {var}, {_perm(j, lanes)}); "
            f"{var} = as_int{lanes}({lower}) < 0 ? MIN({var}, o) : MAX({var}, o); }}")


def _halves(lanes: int) -> list[int]:
    """lanes / 2, lanes / 4, .. 1: the distances of a merge's steps between lanes."""
    return [lanes >> s for s in range(1, lanes.bit_length())]


def _sort_lanes(lanes: int) -> list[str]:
    """Steps that sort x's lanes ascending, or descending where d is all ones."""
    steps = []
    k = 2
    while k < lanes:
        j = k // 2
        while j:
            steps.append(_lane_step("x", j, _lanes(lambda lane, j=j, k=k: ((lane & j) == 0) == ((lane & k) == 0),
                                                   lanes), lanes))
            j //= 2
        k *= 2
    steps += [_lane_step("x", j, f"{_lanes(lambda lane, j=j: (lane & j) == 0, lanes)} ^ d", lanes)
              for j in _halves(lanes)]
    return steps


def _group_steps(group: int, lanes: int) -> list[str]:
    """The last steps of merge size k on vectors g0.. g{group-1} (directions d0..): those
    between vectors (distance J vectors, J < group, while J <= k / (2 lanes)), then
    between lanes."""
    steps = []
    far = group // 2
    while far:
        steps.append(f"if ({far} <= k / {2 * lanes}) {{")
        for i in range(group):
            if i & far == 0:
                a, b = f"g{i}", f"g{i + far}"
                steps.append(f"  {{ const uint{lanes} lo = MIN({a}, {b}), hi = MAX({a}, {b}); "
                             f"{a} = as_int{lanes}(d{i}) < 0 ? hi : lo; {b} = as_int{lanes}(d{i}) < 0 ? lo : hi; }}")
        steps.append("}")
        far //= 2
    for i in range(group):
        steps += [_lane_step(f"g{i}", j, f"{_lanes(lambda lane, j=j: (lane & j) == 0, lanes)} ^ d{i}", lanes)
                  for j in _halves(lanes)]
    return steps


def kernel_name(dtype: np.dtype, width: int, lanes: int = LANES) -> str:
    return f"sort_lanes_{dtype.name}_{width}" + ("" if lanes == LANES else f"_x{lanes}")


def width_for(n: int, lanes: int = LANES) -> int:
    """The padded row of the kernel that sorts rows of `n`: a power of two, at least a vector."""
    return max(lanes, 1 << max(n - 1, 0).bit_length())


def supports(dtype: np.dtype, n: int) -> bool:
    """Whether rows of `n` values of `dtype` can be sorted by this kernel."""
    return dtype in DTYPES and 0 < n <= MAX_WIDTH


def network(dtype: np.dtype, group: int, lanes: int = LANES) -> str:
    """OpenCL C of the network's functions for values of `dtype` (T, defined before) in
    vectors of `lanes`: `put` (a vector of values to a row), `sort_lanes` (a vector's
    lanes) and `merge_vectors` (the merges of vectors already sorted in their lanes, the
    last one writing values; the vectors a power of two, at least `group`)."""
    ind = "\n      "
    L = lanes
    values = {i: _from_keys(dtype, L, f"(g{i} ^ invert)") for i in range(group)}
    return f"""
typedef {dt.CL_NAME[dtype]}{L} T{L};
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) < (b) ? (b) : (a))

/* Values v to vector vi of a row of n: the lanes within it. */
void put(const T{L} v, const int vi, const int n, __global T *dst)
{{
  if ((vi + 1) * {L} <= n) {{
    vstore{L}(v, vi, dst);
  }} else if (vi * {L} < n) {{
    T lane[{L}];
    vstore{L}(v, 0, lane);
    for (int l = 0; vi * {L} + l < n; ++l) dst[vi * {L} + l] = lane[l];
  }}
}}

/* x's lanes sorted: ascending, or descending where d is all ones. */
uint{L} sort_lanes(uint{L} x, const uint{L} d)
{{
  {(chr(10) + '  ').join(_sort_lanes(L))}
  return x;
}}

/* Bitonic merges of runs of k keys, k = {2 * L} .. {L} * vectors, over v (each vector sorted,
   ascending in even vectors and descending in odd); the last writes the first n values
   of the keys (inverted back by `invert`) to dst. */
void merge_vectors(uint{L} *v, const int vectors, const uint{L} invert, const int n, __global T *dst)
{{
  const uint{L} ones = (uint{L}){_ONES};
  for (int k = {2 * L}; k <= vectors * {L}; k <<= 1) {{
    for (int far = k / {2 * L}; far >= {group}; far >>= 1) {{
      for (int vi = 0; vi < vectors; ++vi) {{
        if (vi & far) continue;
        const uint{L} a = v[vi], b = v[vi + far];
        const uint{L} lo = MIN(a, b), hi = MAX(a, b);
        const int up = ((vi * {L}) & k) == 0;
        v[vi] = up ? lo : hi;
        v[vi + far] = up ? hi : lo;
      }}
    }}
    for (int v0 = 0; v0 < vectors; v0 += {group}) {{
      {ind.join(f"uint{L} g{i} = v[v0 + {i}];" for i in range(group))}
      {ind.join(f"const uint{L} d{i} = ((v0 + {i}) * {L} & k) ? ones : ~ones;" for i in range(group))}
      {ind.join(_group_steps(group, L))}
      if (k < vectors * {L}) {{
        {(ind + '  ').join(f"v[v0 + {i}] = g{i};" for i in range(group))}
      }} else if ((v0 + {group}) * {L} <= n) {{
        {(ind + '  ').join(f"vstore{L}({values[i]}, v0 + {i}, dst);" for i in range(group))}
      }} else {{
        {(ind + '  ').join(f"put({values[i]}, v0 + {i}, n, dst);" for i in range(group))}
      }}
    }}
  }}
  if (vectors == 1) put({_from_keys(dtype, L, '(v[0] ^ invert)')}, 0, n, dst);
}}
"""


def generate(dtype: np.dtype, width: int, name: str, parameters: str, lanes: int = LANES) -> str:
    """The kernel `name(parameters)` sorting rows of `dtype` padded to `width` in vectors
    of `lanes` (parameters: in, in_off, rows, n, desc, values; see codegen/sort.py)."""
    L = lanes
    vectors = width // L
    if dt.is_float(dtype):  # NaNs last both ways; any zero or NaN makes the last pass run
        special = f"""
  const int{L} nan = isnan(f);
  x = nan ? (uint{L})0xFFFFFFFFu : x;
  *special |= (nan | (f == (T{L})0)) & ~as_int{L}(pad);"""
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
{network(dtype, min(GROUP, vectors), L)}
/* The keys of f (lanes where `pad` is all ones: after every key), their lanes sorted:
   ascending, or descending where d is all ones. */
uint{L} sorted_keys(const T{L} f, const uint{L} invert, const uint{L} pad, const uint{L} d, int{L} *special)
{{{_to_keys(dtype, L)}
  x = (x ^ invert) | pad;{special}
  return sort_lanes(x, d);
}}

__kernel void {name}({parameters})
{{
  const long row = get_global_id(0);
  if (row >= rows) return;
  __global const T *src = in + in_off + row * n;
  __global T *dst = values + row * n;
  const uint{L} invert = desc ? (uint{L}){_ONES} : (uint{L}){_ZERO}, ones = (uint{L}){_ONES};
  int{L} special = (int{L})0;
  uint{L} v[{vectors}];
  /* Each vector's keys, its lanes sorted: ascending in even vectors, descending in odd. */
  const int whole = n / {L};
  for (int vi = 0; vi < whole; ++vi)
    v[vi] = sorted_keys(vload{L}(vi, src), invert, ~ones, (vi & 1) ? ones : ~ones, &special);
  for (int vi = whole; vi < {vectors}; ++vi) v[vi] = ones;
  const int left = n - whole * {L};
  if (left) {{  /* the last lanes: read as a whole vector where the array goes on after them */
    T{L} f;
    if ((row + 1) * n + {L} - left <= (long)rows * n) {{
      f = vload{L}(whole, src);
    }} else {{
      T lane[{L}];
      for (int l = 0; l < {L}; ++l) lane[l] = l < left ? src[whole * {L} + l] : (T)1;
      f = vload{L}(0, lane);
    }}
    const uint{L} pad = as_uint{L}({_lane_numbers(L)} >= left);
    v[whole] = sorted_keys(f, invert, pad, (whole & 1) ? ones : ~ones, &special);
  }}
  merge_vectors(v, {vectors}, invert, n, dst);{fix_up}
}}
"""


def bucket_function(dtype: np.dtype, width: int) -> str:
    """OpenCL C of `sort_bucket_in_lanes`, for the bucket sort's last stage (codegen/sort.py,
    T and KEY_MAX defined before): a bucket of `len` packed words (key << 32 | position in
    the row, keys already inverted for a descending sort, in the row's order) sorted by
    the network in 16-lane vectors into `dst` (not in 8: fusers/sort.buckets_in_lanes),
    its values made from the keys, zeros and NaNs read from `row_in` in the bucket's
    order; 0 (nothing done) for a bucket longer than `width`."""
    L = LANES
    if dt.is_float(dtype):
        special = "\n      special |= (x == zero_key) | (x == ones);"
        special_tail = (f"\n      special |= ((x == zero_key) | (x == ones)) & "
                        f"({_lane_numbers(L)} < len - vi * {L});")
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
    return f"""{network(dtype, GROUP, L)}
int sort_bucket_in_lanes(__global const ulong *w, const int len, const int desc, __global const T *row_in,
                         __global T *dst)
{{
  if (len > {width}) return 0;
  const uint{L} invert = desc ? (uint{L}){_ONES} : (uint{L}){_ZERO}, ones = (uint{L}){_ONES};
  const uint{L} zero_key = (uint{L})0x80000000u ^ invert;
  int{L} special = (int{L})0;
  int vectors = {GROUP};
  while (vectors * {L} < len) vectors <<= 1;
  uint{L} v[{width // L}];
  for (int vi = 0; vi < vectors; ++vi) {{
    uint{L} x = ones;
    if ((vi + 1) * {L} <= len) {{
      x = convert_uint{L}(vload{L}(vi, w) >> (ulong{L})32);{special}
    }} else if (vi * {L} < len) {{
      uint lane[{L}];
      for (int l = 0; l < {L}; ++l) lane[l] = vi * {L} + l < len ? (uint)(w[vi * {L} + l] >> 32) : KEY_MAX;
      x = vload{L}(0, lane);{special_tail}
    }}
    v[vi] = sort_lanes(x, (vi & 1) ? ones : ~ones);
  }}
  merge_vectors(v, vectors, invert, len, dst);{fix_up}
  return 1;
}}
"""
