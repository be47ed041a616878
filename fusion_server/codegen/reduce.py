"""OpenCL C for a reduction with its element-wise prologue and epilogue fused in.

The prologue (element-wise ops over the reduction's input shape) is computed while
reading; the epilogue (element-wise ops over the output shape) before writing. Two
strategies, chosen per device and size (the key says which):

  loop   one work-item per output element loops over the reduced elements. CPUs run a
         work-group as a loop anyway: this streams each row through one core's cache
         (measured on PoCL: 21.6 GB/s for row sums, against 6.2 GB/s for a tree).
  group  one work-group per output element: each work-item accumulates a strided share,
         then a tree in local memory. GPUs need the parallelism within a row and
         coalesced reads (consecutive work-items read consecutive elements).
  columns  (CPUs) one work-item per strip of `vectors` x `width` consecutive output
         elements along a kept axis that is contiguous in memory: vectors across the
         outputs, each reduced row of the strip read once (sums, products, max, min).
         One column per work-item read one float per cache line and a new page per
         step: a sum down the columns of 1024 x 1024 floats took 20 ms on PoCL (2
         cores), 2 to 3 ms in strips, against 1.1 for the row sum of the same data.

A `chunked` spec is the first of two passes (reductions into few outputs over many
elements, see fusers/reduce.chunks_for): it writes one partial result per chunk of each
output's reduced elements, and a plain reduction of those runs the epilogue.
"""

from __future__ import annotations

import functools
import hashlib
from typing import NamedTuple

import numpy as np

from .. import dtypes as dt
from . import complex_math
from . import elementwise as ew
from . import epilogue as ep
from . import expressions as ex
from . import signature as sig

GROUP_SIZE = 256
FIXED_BINDINGS = 3  # parameters every reduction kernel has: nout, nred, meta


class ReduceSpec(NamedTuple):
    """Everything the reduction kernel's source depends on; the program cache's key."""

    kind: str  # sum, prod, max, min, argmax, argmin
    acc: np.dtype  # accumulator dtype
    prologue: ew.KernelSpec  # ops over the input shape; outputs=(value reduced,) or () for input 0
    epilogue: ew.KernelSpec  # ops over the output shape; its input 0 is the reduced value
    kept_rank: int  # collapsed kept dims (0: a single output element)
    red_rank: int  # collapsed reduced dims
    strategy: str  # "loop", "group" or "columns"
    index: str  # "int" or "long"
    out_rank: int  # dims of the output, for strided epilogue inputs (0 if none)
    writes: tuple[int, ...] = ()  # prologue values also written out (at the input's shape)
    width: int = 1  # loop: elements per step along a contiguous reduced axis; columns: outputs per work-item
    # A sum or product that widens (float32 -> float64, int32 -> int64) where the wider
    # element size has a narrower qualified width: width / acc_width accumulators of
    # acc_width lanes each, so the prologue keeps its own width. 0: acc_width = width.
    acc_width: int = 0
    vectors: int = 1  # columns: vectors of `width` outputs per work-item
    # A first pass: output g is the partial result of chunk g / nkept (chunks of equal
    # length, a multiple of `width`) of the reduced elements of output g % nkept (nkept:
    # the kept dims' product); the second pass reduces the chunks and runs the epilogue.
    chunked: bool = False


def scalar_variant(spec: ReduceSpec) -> ReduceSpec | None:
    """The same reduction reading one element per step, if `spec` reads vectors (the
    metadata and arguments do not change)."""
    if spec.width == 1:
        return None
    return spec._replace(width=1, acc_width=0, prologue=spec.prologue._replace(width=1))


def _acc_parts(spec: ReduceSpec) -> tuple[int, int]:
    """(accumulators, lanes each) of the vector loop."""
    lanes = spec.acc_width or spec.width
    return spec.width // lanes, lanes


def _lanes(first: int, count: int) -> str:
    """An OpenCL swizzle of `count` lanes from `first` (.s0123)."""
    return ".s" + "".join(f"{lane:x}" for lane in range(first, first + count))


def kernel_name(spec: ReduceSpec) -> str:
    digest = hashlib.sha1(repr(spec).encode()).hexdigest()[:10]
    return f"reduce_{spec.kind}_{digest}"


def arg_dtypes(spec: ReduceSpec) -> list:
    index = np.int32 if spec.index == "int" else np.int64
    buffers = 1 + len(spec.epilogue.outputs) + len(spec.writes) + len(spec.prologue.inputs)
    buffers += len(spec.epilogue.inputs) - 1
    return [index, index] + [None] * buffers + list(spec.prologue.scalars) + list(spec.epilogue.scalars)


def _identity(kind: str, acc: np.dtype) -> str:
    t = dt.CL_NAME[acc]
    if kind == "sum":
        return f"(({t})0)"
    if kind == "prod":
        return f"(({t})(1, 0))" if acc.kind == "c" else f"(({t})1)"
    if dt.is_bool(acc):
        return "((uchar)0)" if kind in ("max", "argmax") else "((uchar)1)"
    if dt.is_unsigned(acc):  # (the largest value: all bits set)
        return f"(({t})0)" if kind in ("max", "argmax") else f"(({t})~(({t})0))"
    big = {"float": "INFINITY", "double": "INFINITY", "int": "INT_MAX", "long": "LONG_MAX",
           "char": "CHAR_MAX", "short": "SHRT_MAX"}[t]
    small = {"float": "-INFINITY", "double": "-INFINITY", "int": "INT_MIN", "long": "LONG_MIN",
             "char": "CHAR_MIN", "short": "SHRT_MIN"}[t]
    return small if kind in ("max", "argmax") else big


def _better(kind: str, acc: np.dtype, v: str, best: str, vector: bool = False) -> str:
    """Condition under which value `v` replaces `best` (NaN wins and stays, as in numpy);
    with `vector`, a lane mask (bitwise operators: && and || do not apply to vectors)."""
    op = ">" if kind in ("max", "argmax") else "<"
    if dt.is_float(acc):
        both, either = ("&", "|") if vector else ("&&", "||")
        return f"((({best}) == ({best})) {both} ((({v}) {op} ({best})) {either} {ex.is_nan(v)}))"
    return f"(({v}) {op} ({best}))"


def _same(acc: np.dtype, v: str, best: str) -> str:
    """Whether `v` and `best` tie (NaN ties with NaN)."""
    if dt.is_float(acc):
        return f"(({v}) == ({best}) || ({ex.is_nan(v)} && {ex.is_nan(best)}))"
    return f"(({v}) == ({best}))"


def _fold(kind: str, acc: np.dtype, a: str, v: str) -> str:
    """The loop's statement folding `v` into `a`: branch-free for max and min, which keep
    NaN in a flag (fmax would drop it) applied after the loop."""
    if kind in ("max", "min"):
        if dt.is_float(acc):
            return f"{a} = f{kind}({a}, {v}); nan_seen |= {ex.is_nan(v)};"
        if not dt.is_bool(acc):  # (integers: the two-lane spelling of scalar min and max)
            return f"{a} = {ex.emit('maximum' if kind == 'max' else 'minimum', [a, v], acc, 1)[0]};"
    return _combine(kind, acc, a, v)


def _combine(kind: str, acc: np.dtype, a: str, v: str) -> str:
    """Statement folding value `v` into accumulator `a` (not for arg kinds)."""
    if kind == "sum":
        return _add_into(acc, a, v, 1)
    if kind == "prod":
        return _multiply_into(acc, a, v, 1)
    return f"if ({_better(kind, acc, v, a)}) {a} = {v};"


def _add_into(acc: np.dtype, a: str, v: str, width: int) -> str:
    """`a += v`, wrapping around as numpy's sums of integers (ex.wrapping)."""
    return f"{a} = {ex.arithmetic('+', [a, v], acc, width)};"


def _multiply_into(acc: np.dtype, a: str, v: str, width: int) -> str:
    """`a *= v`, for complex values too (a product of complex numbers is no product of
    lanes), wrapping around for integers."""
    if acc.kind == "c":
        return f"{a} = {complex_math.call('multiply', [a, v], dt.CL_NAME[dt.real_of(acc)])};"
    return f"{a} = {ex.arithmetic('*', [a, v], acc, width)};"


def _prologue_loads(spec: ReduceSpec, indent: str) -> list[str]:
    """Loads of the prologue inputs at p{k} (computed from kept and reduced coords)."""
    lines = []
    for k, (dtype, _) in enumerate(spec.prologue.inputs):
        lines.append(f"{indent}const {dt.CL_NAME[dtype]} x{k} = in{k}[p{k}];")
    return lines


def _value_to_reduce(spec: ReduceSpec) -> tuple[str, np.dtype]:
    pro = spec.prologue
    if pro.outputs:
        j = pro.outputs[0]
        return f"v{j}", pro.ops[j].out
    return "x0", pro.inputs[0][0]


def _positions(spec: ReduceSpec, r: str, indent: str) -> list[str]:
    """Positions of the inputs (p) and the written prologue values (w) at reduced
    element number `r`, from their bases (b, bw) and reduced strides."""
    lines = []
    targets = [(f"p{k}", f"b{k}", f"R{k}") for k in range(len(spec.prologue.inputs))]
    targets += [(f"w{m}", f"bw{m}", f"RW{m}") for m in range(len(spec.writes))]
    if spec.red_rank == 1:
        for pos, base, st in targets:
            lines.append(f"{indent}const IDX {pos} = {base} + {r} * {st}_0;")
    else:
        lines.append(f"{indent}IDX rr = {r};")
        for d in range(spec.red_rank - 1, 0, -1):
            lines.append(f"{indent}const IDX q{d} = rr % RD{d}; rr /= RD{d};")
        lines.append(f"{indent}const IDX q0 = rr;")
        for pos, base, st in targets:
            terms = " + ".join(f"q{d} * {st}_{d}" for d in range(spec.red_rank))
            lines.append(f"{indent}const IDX {pos} = {base} + {terms};")
    return lines


def _loop_body(spec: ReduceSpec, r: str, indent: str) -> list[str]:
    """Statements for reduced element number `r`: positions, loads, prologue, fold."""
    lines = _positions(spec, r, indent)
    lines += _prologue_loads(spec, indent)
    for k, dtype in enumerate(spec.prologue.scalars):
        lines.append(f"{indent}const {dt.CL_NAME[dtype]} s{k} = a{k};")
    for j, op in enumerate(spec.prologue.ops):
        lines += [indent + line for line in ew._op_expr(spec.prologue, op, j, 1)]
    for m, j in enumerate(spec.writes):
        lines.append(f"{indent}wout{m}[w{m}] = v{j};")
    value, vdtype = _value_to_reduce(spec)
    v = ex.cast(value, vdtype, spec.acc, 1)
    if spec.kind in ("argmax", "argmin"):
        lines.append(f"{indent}{{ const {dt.CL_NAME[spec.acc]} val = {v};")
        lines.append(f"{indent}  if ({_better(spec.kind, spec.acc, 'val', 'acc')}) {{ acc = val; arg = {r}; }} }}")
    else:
        fold = _fold(spec.kind, spec.acc, "acc", "val")
        lines.append(f"{indent}{{ const {dt.CL_NAME[spec.acc]} val = {v}; {fold} }}")
    return lines


def _vector_fold(kind: str, acc: np.dtype, a: str, v: str, width: int) -> str:
    if kind in ("argmax", "argmin"):
        # Per lane, the first best value and its index (argv); lanes meet after the loop.
        index = dt.CL_MASK_NAME[acc]
        return (f"const {index}{width} better = {_better(kind, acc, v, a, vector=True)}; "
                f"{a} = better ? ({v}) : {a}; argv = better ? lanes + ({index})r : argv;")
    if kind == "sum":
        return _add_into(acc, a, v, width)
    if kind == "prod":
        return _multiply_into(acc, a, v, width)
    if dt.is_float(acc):
        # A compare and a blend, and NaN lanes gathered in a mask tested once after the
        # loop: PoCL calls fmax/fmin and any() as functions (max ran at 0.58x sum's speed).
        op = ">" if kind == "max" else "<"
        return f"{a} = (({v}) {op} ({a})) ? ({v}) : ({a}); nanv |= {ex.is_nan(v)};"
    return f"{a} = {kind}({a}, {v});"


def _vector_body(spec: ReduceSpec, indent: str) -> list[str]:
    """`width` consecutive reduced elements from r: vector loads, prologue, fold into accv."""
    W = spec.width
    pro = spec.prologue
    lines = []
    for k, (dtype, cls) in enumerate(pro.inputs):
        lines.append(f"{indent}const IDX p{k} = b{k} + r * R{k}_0;")
        load = ex.vload(f"in{k} + p{k}", dtype, W) if cls == "strided1" else ex.splat(f"in{k}[p{k}]", dtype, W)
        lines.append(f"{indent}const {ex.type_name(dtype, W)} x{k} = {load};")
    for m in range(len(spec.writes)):
        lines.append(f"{indent}const IDX w{m} = bw{m} + r;")
    for k, dtype in enumerate(pro.scalars):
        lines.append(f"{indent}const {ex.type_name(dtype, W)} s{k} = {ex.splat(f'a{k}', dtype, W)};")
    for j, op in enumerate(pro.ops):
        lines += [indent + line for line in ew._op_expr(pro, op, j, W)]
    for m, j in enumerate(spec.writes):
        lines.append(indent + ex.vstore(f"v{j}", f"wout{m} + w{m}", pro.ops[j].out, W))
    value, vdtype = _value_to_reduce(spec)
    parts, lanes = _acc_parts(spec)
    if parts == 1:
        v = ex.cast(value, vdtype, spec.acc, W)
        lines.append(f"{indent}{{ const {ex.type_name(spec.acc, W)} val = {v}; "
                     f"{_vector_fold(spec.kind, spec.acc, 'accv', 'val', W)} }}")
        return lines
    for p in range(parts):
        v = ex.cast(f"({value}){_lanes(p * lanes, lanes)}", vdtype, spec.acc, lanes)
        lines.append(f"{indent}{{ const {ex.type_name(spec.acc, lanes)} val = {v}; "
                     f"{_vector_fold(spec.kind, spec.acc, f'accv{p}', 'val', lanes)} }}")
    return lines


def _epilogue(spec: ReduceSpec, indent: str) -> list[str]:
    """Loads at output element `o`, the epilogue ops, and the stores."""
    result = "arg" if spec.kind in ("argmax", "argmin") else "acc"
    first = spec.epilogue.inputs[0][0]
    value = ex.cast(result, _result_dtype(spec), first, 1)
    return ep.body(spec.epilogue, spec.out_rank, value, len(spec.prologue.inputs),
                   len(spec.prologue.scalars), indent)


def _result_dtype(spec: ReduceSpec) -> np.dtype:
    return dt.int64 if spec.kind in ("argmax", "argmin") else spec.acc


def _base_and_strides(spec: ReduceSpec, src: list[str], base: str, start: str, strides: str, pos: int) -> int:
    """Declare `base` (where output element o's row starts: `start` plus the kept
    coordinates times the kept strides) and the reduced strides `strides`_d, read from
    `meta` at `pos`; returns the next position."""
    kept = []
    for d in range(spec.kept_rank):
        kept.append(f"kc{d} * (IDX)meta[{pos}]")
        pos += 1
    src.append(f"  const IDX {base} = {' + '.join([start] + kept)};")
    return _reduced_strides(spec, src, strides, pos)


def _reduced_strides(spec: ReduceSpec, src: list[str], strides: str, pos: int) -> int:
    """Declare the reduced strides `strides`_d, read from `meta` at `pos`; returns the
    next position."""
    for d in range(spec.red_rank):
        src.append(f"  const IDX {strides}_{d} = (IDX)meta[{pos}];")
        pos += 1
    return pos


@functools.lru_cache(maxsize=1024)
def parameters(spec: ReduceSpec) -> tuple[sig.Param, ...]:
    """The kernel's parameters: the output and reduced element counts, the metadata,
    the outputs (the epilogue's, then the prologue values written), the inputs (the
    prologue's, then the epilogue's but the result), the scalars (prologue, epilogue)."""
    pro, epi = spec.prologue, spec.epilogue
    params = [sig.size("nout"), sig.size("nred"), sig.meta()]  # (FIXED_BINDINGS)
    params += [sig.out(epi.inputs[0][0] if ref == -1 else epi.ops[ref].out, f"out{m}")
               for m, ref in enumerate(epi.outputs)]
    params += [sig.out(pro.ops[j].out, f"wout{m}") for m, j in enumerate(spec.writes)]
    params += [sig.input_(dtype, f"in{k}") for k, (dtype, _) in enumerate(pro.inputs)]
    params += [sig.input_(epi.inputs[k][0], f"in{len(pro.inputs) + k - 1}") for k in range(1, len(epi.inputs))]
    params += [sig.scalar(dtype, f"a{k}") for k, dtype in enumerate(list(pro.scalars) + list(epi.scalars))]
    return tuple(params)


def metadata(spec: ReduceSpec, kept_dims, red_dims, inputs: list, writes: list, out_shape: tuple[int, ...],
             epi_layouts: list) -> tuple[int, ...]:
    """The int64 metadata of a launch, in the order `generate` reads it: the kept dims
    (when there are kept dims), the reduced dims; per prologue input (offset, kept
    strides, reduced strides); per written prologue value (kept strides, reduced
    strides); the output's dims (when an epilogue input is strided); the epilogue
    inputs' layouts."""
    kept = spec.kept_rank > 0
    meta: list[int] = list(kept_dims) if kept else []
    meta += list(red_dims)
    for offset, ks, rs in inputs:
        meta.append(offset)
        meta += (list(ks) if kept else []) + list(rs)
    for ks, rs in writes:
        meta += (list(ks) if kept else []) + list(rs)
    if spec.out_rank:
        meta += list(out_shape)
    meta += ep.metadata(epi_layouts)
    return tuple(meta) or (0,)


def generate(spec: ReduceSpec) -> tuple[str, str]:
    """(source, kernel name) for `spec`."""
    name = kernel_name(spec)
    pro, epi = spec.prologue, spec.epilogue
    types = {d for d, _ in pro.inputs + epi.inputs} | set(pro.scalars) | set(epi.scalars) | {spec.acc}
    types |= {op.out for op in pro.ops + epi.ops} | {op.compute for op in pro.ops + epi.ops}
    # (a product of complex values multiplies them as the op does)
    product = (ew.TraceOp("multiply", spec.acc, spec.acc, ()),) if spec.kind == "prod" else ()
    src = ex.prelude(pro.ops + epi.ops + product, types)
    src.append(f"typedef {spec.index} IDX;")
    if spec.width > 1:
        src += ex.vector_access({d for d, _ in pro.inputs} | {pro.ops[j].out for j in spec.writes}, spec.width)
    src.append(f"__kernel void {name}({sig.declare(parameters(spec))})")
    src.append("{")
    if spec.strategy == "columns":
        src += _columns_body(spec)
        src.append("}")
        return "\n".join(src) + "\n", name
    group = spec.strategy == "group"
    # A chunked first pass computes partial result g: chunk g / nkept of the reduced
    # elements of output o = g % nkept (nout counts the partial results).
    out_id = "g" if spec.chunked else "o"
    if group:
        src.append(f"  const IDX {out_id} = (IDX)get_group_id(0);")
        src.append("  const IDX lid = (IDX)get_local_id(0);")
    else:
        src.append(f"  const IDX {out_id} = (IDX)get_global_id(0);")
        src.append(f"  if ({out_id} >= nout) return;")
    # Metadata: kept dims, reduced dims, then per prologue input its offset, kept strides
    # and reduced strides, per written value its strides, then the epilogue's (output
    # dims if needed, each non-contiguous input's layout).
    pos = 0
    for d in range(spec.kept_rank):
        src.append(f"  const IDX KD{d} = (IDX)meta[{pos}];")
        pos += 1
    for d in range(spec.red_rank):
        src.append(f"  const IDX RD{d} = (IDX)meta[{pos}];")
        pos += 1
    if spec.chunked:
        src.append(f"  const IDX nkept = {' * '.join(['(IDX)1'] + [f'KD{d}' for d in range(spec.kept_rank)])};")
        src.append("  const IDX o = g % nkept, chunk = g / nkept, nchunks = nout / nkept;")
    if spec.kept_rank:
        src.append("  IDX krem = o;")
        for d in range(spec.kept_rank - 1, 0, -1):
            src.append(f"  const IDX kc{d} = krem % KD{d}; krem /= KD{d};")
        src.append("  const IDX kc0 = krem;")
    for k in range(len(pro.inputs)):
        src.append(f"  const IDX O{k} = (IDX)meta[{pos}];")
        pos = _base_and_strides(spec, src, f"b{k}", f"O{k}", f"R{k}", pos + 1)
    for m in range(len(spec.writes)):
        pos = _base_and_strides(spec, src, f"bw{m}", "0", f"RW{m}", pos)
    decls, pos = ep.declarations(epi, spec.out_rank, pos)
    src += decls
    acc_t = dt.CL_NAME[spec.acc]
    is_arg = spec.kind in ("argmax", "argmin")
    src.append(f"  {acc_t} acc = {_identity(spec.kind, spec.acc)};")
    if is_arg:
        src.append("  long arg = 0;")
    step = f"(IDX){GROUP_SIZE}" if group else "1"
    begin, end = ("rbeg", "rend") if spec.chunked else ("0", "nred")
    if spec.chunked:  # (chunks start at multiples of the vector width: aligned like the rows)
        W = max(spec.width, 1)
        src.append(f"  const IDX clen = ((nred + nchunks - 1) / nchunks + {W - 1}) / {W} * {W};")
        src.append("  const IDX rbeg = chunk * clen;")
        src.append("  const IDX rend = nred - rbeg < clen ? nred : rbeg + clen;")
    start = f"{begin} + lid" if group else begin
    nan_flag = spec.kind in ("max", "min") and dt.is_float(spec.acc)
    if nan_flag:
        src.append("  int nan_seen = 0;")
    if spec.width > 1:
        W = spec.width
        parts, lanes = _acc_parts(spec)
        vtype = ex.type_name(spec.acc, lanes)
        for accv in ["accv"] if parts == 1 else [f"accv{p}" for p in range(parts)]:
            src.append(f"  {vtype} {accv} = ({vtype})({_identity(spec.kind, spec.acc)});")
        mask = f"{dt.CL_MASK_NAME[spec.acc]}{W}"
        if nan_flag:
            src.append(f"  {mask} nanv = 0;")
        if is_arg:  # lane indices in the mask's integer type (the fuser checks they fit)
            src.append(f"  {mask} argv = 0;")
            src.append(f"  const {mask} lanes = ({mask})({', '.join(str(lane) for lane in range(W))});")
        src.append(f"  IDX r = {begin};")
        src.append(f"  for (; r <= {end} - {W}; r += {W}) {{")  # (r + W could overflow the index type)
        src += _vector_body(spec, "    ")
        src.append("  }")
        if nan_flag:
            src.append("  if (any(nanv)) nan_seen = 1;")
        for p in range(parts if parts > 1 else 0):  # (sums and products only)
            for lane in range(lanes):
                val = f"accv{p}" if lanes == 1 else f"accv{p}.s{lane:x}"
                src.append(f"  {{ const {acc_t} val = {val}; {_fold(spec.kind, spec.acc, 'acc', 'val')} }}")
        for lane in range(W if parts == 1 else 0):
            if is_arg:  # the best value; among ties (lanes are not in index order) the first index
                src.append(f"  {{ const {acc_t} val = accv.s{lane:x}; const long at = (long)argv.s{lane:x};")
                src.append(f"    if ({_better(spec.kind, spec.acc, 'val', 'acc')} || "
                           f"({_same(spec.acc, 'val', 'acc')} && at < arg)) {{ acc = val; arg = at; }} }}")
            else:
                src.append(f"  {{ const {acc_t} val = accv.s{lane:x}; {_fold(spec.kind, spec.acc, 'acc', 'val')} }}")
        src.append(f"  for (; r < {end}; ++r) {{")
    else:
        src.append(f"  for (IDX r = {start}; r < {end}; r += {step}) {{")
    src += _loop_body(spec, "r", "    ")
    src.append("  }")
    if nan_flag:
        src.append(f"  if (nan_seen) acc = ({acc_t})NAN;")
    if group:
        src.append(f"  __local {acc_t} vals[{GROUP_SIZE}];")
        if is_arg:
            src.append(f"  __local long args[{GROUP_SIZE}];")
            src.append("  args[lid] = arg;")
        src.append("  vals[lid] = acc;")
        src.append("  barrier(CLK_LOCAL_MEM_FENCE);")
        src.append(f"  for (IDX span = {GROUP_SIZE // 2}; span > 0; span >>= 1) {{")
        src.append("    if (lid < span) {")
        if is_arg:
            # Equal values (NaN ties with NaN): the smaller index wins, as numpy returns the first.
            better = _better(spec.kind, spec.acc, "vals[lid + span]", "vals[lid]")
            tie = f"({_same(spec.acc, 'vals[lid + span]', 'vals[lid]')} && args[lid + span] < args[lid])"
            take = "vals[lid] = vals[lid + span]; args[lid] = args[lid + span];"
            src.append(f"      if ({better} || {tie}) {{ {take} }}")
        else:
            src.append(f"      {acc_t} mine = vals[lid]; {_combine(spec.kind, spec.acc, 'mine', 'vals[lid + span]')}")
            src.append("      vals[lid] = mine;")
        src.append("    }")
        src.append("    barrier(CLK_LOCAL_MEM_FENCE);")
        src.append("  }")
        src.append("  if (lid != 0) return;")
        src.append("  acc = vals[0];")
        if is_arg:
            src.append("  arg = args[0];")
    if spec.chunked:  # (no epilogue: the second pass runs it)
        src.append("  out0[g] = acc;")
    else:
        src.append("  {")
        src += _epilogue(spec, "    ")
        src.append("  }")
    src.append("}")
    return "\n".join(src) + "\n", name


def _columns_body(spec: ReduceSpec) -> list[str]:
    """The body of a `columns` kernel: work-item g computes the outputs [g * S, g * S + S)
    along the one kept axis (S = vectors x width), a vector of `width` at a time, each
    reduced element read once for all of them (one page of each input per step, not one
    per vector: a sum down the columns of 4096 x 4096 floats took 43 ms in vectors of 16
    per work-item on a 2-core KVM guest, where every new page costs a nested page walk);
    the outputs past the last whole vector one at a time. Sums, products, max and min.

    A chunked first pass (see the fuser's two passes) gives work-item g the same outputs
    of column group g % groups over chunk g / groups of the reduced elements, and writes
    partial result (chunk, o) to `out0[chunk * nkept + o]`: wide strips of whole rows
    read one after another, where one work-item per strip walked every row of the
    matrix a page apart."""
    W, V, pro = spec.width, spec.vectors, spec.prologue
    acc_t = dt.CL_NAME[spec.acc]
    if spec.chunked:  # (`nout` counts the partial results: chunks x kept outputs)
        src = ["  const IDX nkept = (IDX)meta[0], nchunks = nout / nkept;",
               f"  const IDX groups = (nkept + {V * W - 1}) / {V * W}, g = (IDX)get_global_id(0);",
               "  if (g >= groups * nchunks) return;",
               f"  const IDX chunk = g / groups, o0 = (g - chunk * groups) * {V * W};",
               "  const IDX clen = (nred + nchunks - 1) / nchunks, rbeg = chunk * clen;",
               "  const IDX rend = nred - rbeg < clen ? nred : rbeg + clen;"]
        kept, rbeg, rend = "nkept", "rbeg", "rend"
    else:
        src = [f"  const IDX o0 = (IDX)get_global_id(0) * {V * W};", "  if (o0 >= nout) return;"]
        kept, rbeg, rend = "nout", "0", "nred"

    def result(indent: str) -> list[str]:  # (output o's value is `acc`)
        if spec.chunked:
            return [f"{indent}out0[chunk * nkept + o] = acc;"]
        return _epilogue(spec, indent)

    pos = 1  # (meta[0], the kept dim, is nout itself)
    for d in range(spec.red_rank):
        src.append(f"  const IDX RD{d} = (IDX)meta[{pos}];")
        pos += 1
    # Per input its offset, kept stride (1, or 0 when broadcast) and reduced strides; per
    # written value its kept stride (1) and reduced strides.
    for k in range(len(pro.inputs)):
        src.append(f"  const IDX O{k} = (IDX)meta[{pos}]; const IDX K{k} = (IDX)meta[{pos + 1}];")
        pos = _reduced_strides(spec, src, f"R{k}", pos + 2)
    for m in range(len(spec.writes)):
        src.append(f"  const IDX KW{m} = (IDX)meta[{pos}];")
        pos = _reduced_strides(spec, src, f"RW{m}", pos + 1)
    decls, pos = ep.declarations(spec.epilogue, spec.out_rank, pos)
    src += decls

    def bases(at: str, indent: str) -> list[str]:
        lines = [f"{indent}const IDX b{k} = O{k} + {at} * K{k};" for k in range(len(pro.inputs))]
        return lines + [f"{indent}const IDX bw{m} = {at} * KW{m};" for m in range(len(spec.writes))]

    identity = _identity(spec.kind, spec.acc)
    vtype = ex.type_name(spec.acc, W)
    # Float max and min: NaN lanes gathered in a mask per vector (see _vector_fold).
    nan_flag = spec.kind in ("max", "min") and dt.is_float(spec.acc)
    mask = dt.CL_MASK_NAME[spec.acc] + (str(W) if W > 1 else "") if nan_flag else ""
    src.append(f"  const IDX left = ({kept} - o0) / {W};")
    src.append(f"  const int nvec = left < {V} ? (int)left : {V};  /* whole vectors of outputs */")
    src += bases("o0", "  ")
    src.append(f"  {vtype} accs[{V}];")
    src.append(f"  for (int v = 0; v < {V}; ++v) accs[v] = ({vtype})({identity});")
    if nan_flag:
        src.append(f"  {mask} nans[{V}];")
        src.append(f"  for (int v = 0; v < {V}; ++v) nans[v] = ({mask})(0);")
    src.append(f"  for (IDX r = {rbeg}; r < {rend}; ++r) {{")
    src += _positions(spec, "r", "    ")
    src.append("    for (int v = 0; v < nvec; ++v) {")
    for k, (dtype, cls) in enumerate(pro.inputs):
        at = f"p{k} + (IDX)(v * {W}) * K{k}"
        load = ex.vload(f"in{k} + {at}", dtype, W) if cls == "strided1" and W > 1 else \
            ex.splat(f"in{k}[{at}]", dtype, W)
        src.append(f"      const {ex.type_name(dtype, W)} x{k} = {load};")
    for k, dtype in enumerate(pro.scalars):
        src.append(f"      const {ex.type_name(dtype, W)} s{k} = {ex.splat(f'a{k}', dtype, W)};")
    for j, op in enumerate(pro.ops):
        src += ["      " + line for line in ew._op_expr(pro, op, j, W)]
    for m, j in enumerate(spec.writes):
        at = f"wout{m} + w{m} + v * {W}"
        src.append("      " + (ex.vstore(f"v{j}", at, pro.ops[j].out, W) if W > 1 else f"*({at}) = v{j};"))
    value, vdtype = _value_to_reduce(spec)
    v = ex.cast(value, vdtype, spec.acc, W)
    keep_nan = (f"{mask} nanv = nans[v]; ", " nans[v] = nanv;") if nan_flag else ("", "")
    src.append(f"      {{ const {vtype} val = {v}; {vtype} a = accs[v]; {keep_nan[0]}"
               f"{_vector_fold(spec.kind, spec.acc, 'a', 'val', W)} accs[v] = a;{keep_nan[1]} }}")
    src.append("    }")
    src.append("  }")
    src.append("  for (int v = 0; v < nvec; ++v) {")
    src.append(f"    const {vtype} av = accs[v];")
    if nan_flag:
        src.append(f"    const {mask} nv = nans[v];")
    for lane in range(W):
        swizzle = f".s{lane:x}" if W > 1 else ""
        value = f"nv{swizzle} ? ({acc_t})NAN : av{swizzle}" if nan_flag else f"av{swizzle}"
        src.append(f"    {{ const IDX o = o0 + (IDX)(v * {W} + {lane}); const {acc_t} acc = {value};")
        src += result("      ")
        src.append("    }")
    src.append("  }")
    src.append(f"  const IDX end = o0 + {V * W} < {kept} ? o0 + {V * W} : {kept};")
    src.append(f"  for (IDX o = o0 + (IDX)(nvec * {W}); o < end; ++o) {{  /* past the last whole vector */")
    src += bases("o", "    ")
    src.append(f"    {acc_t} acc = {identity};")
    if nan_flag:
        src.append("    int nan_seen = 0;")
    src.append(f"    for (IDX r = {rbeg}; r < {rend}; ++r) {{")
    src += _loop_body(spec, "r", "      ")
    src.append("    }")
    if nan_flag:
        src.append(f"    if (nan_seen) acc = ({acc_t})NAN;")
    src.append("    {")
    src += result("      ")
    src.append("    }")
    src.append("  }")
    return src
