"""Matrix product with a fused epilogue, against BLAS, the unfused ops and cuBLAS.

    out = maximum(a @ w + bias, 0)      a: M x K, w: K x N, bias: N, float32

M = N = K = 1024 on CPU devices, 4096 on GPUs (--n overrides). Variants, all "compute and
wait":

- fused:    lazy tensors: one product kernel, the bias and the activation in its
            epilogue (product kernels per run reported and held to 1 in the summary; a
            large product on a GPU packs an operand read along k first: one kernel more)
- eager:    the same code after `clients.set_mode("eager")`: the product, then one
            kernel per element-wise op
- numpy:    `np.maximum(a @ w + bias, 0)` (BLAS)
- cuBLAS:   PyTorch on CUDA, `relu(addmm(bias, a, w))` in float32 with TF32 off (only
            where PyTorch with CUDA is installed; skipped with a note otherwise)

Each result is checked against numpy's float64 product (rtol 1e-3). Reported: time,
GFLOP/s (2*M*N*K / time), kernel time on the device of fused and eager, and ours /
cuBLAS (cuBLAS time / fused time: the share of cuBLAS's speed reached).

Layouts: the same product with A, B or both stored transposed (`a.T @ w` with `a` stored
K x M, ...), fused against cuBLAS (or numpy where there is none) on the same transposed
operands; ours / peer as a speed ratio, and the kernel variant the plan chose.

    python -m benchmarks.matmul [--n N] [--repeat N] [--out DIR]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import clients

from . import common
from . import device_timing as dtime

NAME = "matmul"
CPU_N, GPU_N = 1024, 4096
# Seconds of samples per variant at most (a slow variant gets fewer samples, never < 2).
BUDGET_S = 8.0
MIN_REPEAT = 2
RTOL = 1e-3


def default_n() -> int:
    queue = clients.client_for().server.runtime.queue
    return GPU_N if dtime.is_gpu(queue) else CPU_N


def _check(name: str, got: np.ndarray, want: np.ndarray) -> float:
    """Max error relative to the result's largest magnitude; fails above RTOL."""
    if got.shape != want.shape:
        raise AssertionError(f"{name}: result has shape {got.shape}, expected {want.shape}")
    scale = float(np.max(np.abs(want))) or 1.0
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=RTOL * 1e-1 * scale, err_msg=f"{name} differs from numpy")
    return float(np.max(np.abs(got - want))) / scale


def _torch_variant(a: np.ndarray, w: np.ndarray, bias: np.ndarray
                   ) -> tuple[Callable[[], Any] | None, Callable[[Any], np.ndarray] | None, str]:
    """(run, to numpy, note) for PyTorch on CUDA, or (None, None, why not)."""
    try:
        import torch
    except ImportError:
        return None, None, "PyTorch is not installed: the cuBLAS row is skipped"
    if not torch.cuda.is_available():
        return None, None, "PyTorch has no CUDA device here: the cuBLAS row is skipped"
    # Full float32 products, as ours: TF32 would trade precision for speed.
    torch.backends.cuda.matmul.allow_tf32 = False
    ta, tw, tb = (torch.from_numpy(v).cuda() for v in (a, w, bias))

    def run() -> Any:
        out = torch.relu(torch.addmm(tb, ta, tw))
        torch.cuda.synchronize()
        return out

    name = torch.cuda.get_device_name()
    return run, lambda out: out.cpu().numpy(), f"cuBLAS through PyTorch {torch.__version__} on {name}, TF32 off"


def _let_blas_threads_sleep() -> None:
    # OpenBLAS's threads spin on the cores for a while after numpy returns: 0.1 s was not
    # enough on a 2-core machine (a device kernel timed then ran at half speed), 0.5 s was.
    time.sleep(0.5)


def run(n: int | None = None, repeat: int = 10) -> dict:
    """Every variant, checked against numpy; the results."""
    n = n or default_n()
    m = k = n
    rng = np.random.default_rng(3)
    a = rng.standard_normal((m, k), dtype=np.float32)
    w = rng.standard_normal((k, n), dtype=np.float32)
    bias = rng.standard_normal(n, dtype=np.float32)
    want = np.maximum(a.astype(np.float64) @ w.astype(np.float64) + bias, 0)
    flops = 2.0 * m * n * k
    clients.set_mode("lazy")
    ta, tw, tb = clients.asarray(a), clients.asarray(w), clients.asarray(bias)
    notes = []

    records: dict[str, list] = {"fused": [], "eager": []}

    def ours(name: str, mode: str, recorded: bool = False) -> Callable[[], clients.Tensor]:
        def call() -> clients.Tensor:
            clients.set_mode(mode)  # (a no-op in the timed rounds, which keep to one mode)
            if not recorded:
                out = clients.maximum(ta @ tw + tb, 0)
            else:  # (inspect() launches at its exit, the way a read does not: untimed calls)
                with clients.inspect() as rec:
                    out = clients.maximum(ta @ tw + tb, 0)
                records[name].append(rec.kernels)
            clients.sync()
            return out  # kept alive until the sync: a dropped result is never computed
        return call

    variants: dict[str, Callable[[], Any]] = {"fused": ours("fused", "lazy"), "eager": ours("eager", "eager")}
    results: dict[str, Callable[[Any], np.ndarray]] = {"fused": lambda t: t.numpy(), "eager": lambda t: t.numpy()}
    variants["numpy"] = lambda: np.maximum(a @ w + bias, 0)
    results["numpy"] = lambda x: x
    gpu = dtime.is_gpu(clients.client_for().server.runtime.queue)
    if gpu:
        torch_run, torch_result, note = _torch_variant(a, w, bias)
        if torch_run is not None:
            variants["cuBLAS"], results["cuBLAS"] = torch_run, torch_result
    else:  # (a CPU device against a GPU's library would compare machines, not kernels)
        note = "the device is a CPU: the cuBLAS row is left out"
    notes.append(note)

    # Warm up (compiles, first allocations), check, and size each variant's samples from
    # a second, timed call.
    errors, counts = {}, {}
    try:
        for name, fn in variants.items():
            errors[name] = _check(name, results[name](fn()), want)
            start = time.perf_counter()
            fn()
            once = time.perf_counter() - start
            counts[name] = max(MIN_REPEAT, min(repeat, int(BUDGET_S / max(once, 1e-9))))
        for recs in records.values():
            recs.clear()
        # Each variant is timed at its best. On a CPU device every variant brings threads
        # of its own onto the same cores, so each is timed in blocks of consecutive calls
        # (common.time_blocks), after BLAS's threads went to sleep: for 70 ms after
        # numpy's product, four of ours in a row took 17 to 20 ms against 10 alone, and
        # ours after a pause ran 1.1x slower than after another call (numpy's product up
        # to 1.7x; a 2-core Intel Xeon). On a GPU no variant pauses (the GPU lowers its
        # clock while idle: a 4096^3 product took 0.24 to 0.3 ms longer after a 0.5 s
        # pause on the H200, ours and cuBLAS's alike), and numpy runs in rounds of its own
        # (its threads spinning after a product slowed the host side of the next
        # variant's call). Eager mode is timed on its own everywhere: a change of mode
        # drops the streams and the run cache, which fused calls would otherwise rebuild.
        if gpu:
            timings = common.time_rounds({name: fn for name, fn in variants.items() if name not in ("eager", "numpy")},
                                         repeat, warmup=0, repeats=counts, apart=("cuBLAS",))
            timings.update(common.time_rounds({"numpy": variants["numpy"]}, repeat, warmup=1,
                                              setup={"numpy": lambda: a @ w}, repeats=counts))
        else:
            timings = common.time_blocks({"fused": variants["fused"], "numpy": variants["numpy"]}, repeat,
                                         before=_let_blas_threads_sleep)
        clients.set_mode("eager")
        timings.update(common.time_blocks({"eager": variants["eager"]}, counts["eager"] if gpu else repeat,
                                          blocks=1, before=None if gpu else _let_blas_threads_sleep))
        clients.set_mode("lazy")
        timings = {name: timings[name] for name in variants}
        # The kernels and their device times, from calls of their own after the timed ones.
        for name, mode in (("eager", "eager"), ("fused", "lazy")):
            for _ in range(min(repeat, 5)):
                ours(name, mode, recorded=True)()
    finally:
        clients.set_mode("lazy")

    fused_kernels = records["fused"][0] if records["fused"] else []
    device = {}
    for mode, recs in records.items():
        seconds = [sum(k.device_seconds or 0.0 for k in kernels) for kernels in recs]
        if recs and all(k.device_seconds is not None for kernels in recs for k in kernels):
            device[mode] = common.Timing(seconds).to_dict()
            device[mode]["gflop_per_s"] = flops / device[mode]["median_s"] / 1e9
    out: dict[str, Any] = {
        "benchmark": NAME,
        "expression": "maximum(a @ w + bias, 0)",
        "m": m, "n": n, "k": k,
        "dtype": "float32",
        "flops": flops,
        "kernels_per_fused_run": len(fused_kernels),
        "product_kernels_per_fused_run": sum(1 for kk in fused_kernels if "matmul" in kk.ops),
        "fused_kernels": [{"kind": kk.kind, "ops": kk.ops} for kk in fused_kernels],
        "kernels_per_eager_run": len(records["eager"][0]) if records["eager"] else None,
        "variants": {
            name: {**t.to_dict(), "gflop_per_s": flops / t.median / 1e9, "max_error_of_scale": errors[name]}
            for name, t in timings.items()
        },
        "device_kernel_time": device or None,
        "ratios": {f"fused_vs_{name}": common.ratio(t, timings["fused"])
                   for name, t in timings.items() if name != "fused"},
        "ratio_meaning": "time of the other variant / time of fused: above 1, fused is faster",
        "notes": notes,
    }
    if "cuBLAS" in timings:
        out["ours_over_cublas"] = out["ratios"]["fused_vs_cuBLAS"]
    out["layouts"] = layouts(a, w, bias, want, max(MIN_REPEAT, min(repeat, counts["fused"])),
                             cublas="cuBLAS" in variants)
    return out


def layouts(a: np.ndarray, w: np.ndarray, bias: np.ndarray, want: np.ndarray, repeat: int,
            cublas: bool) -> dict:
    """The fused product with each operand stored row-major or transposed, against the
    peer on the same operands (cuBLAS where `cublas`, as run() found it, else numpy):
    {layout: {variant, ours_over_peer, ...}}."""
    if cublas:
        import torch
    out = {}
    for a_t, w_t in ((False, False), (True, False), (False, True), (True, True)):
        name = ("A^T" if a_t else "A") + " @ " + ("B^T" if w_t else "B")
        sa, sw = (np.ascontiguousarray(v.T) if t else v for v, t in ((a, a_t), (w, w_t)))
        ta, tw, tb = clients.asarray(sa), clients.asarray(sw), clients.asarray(bias)
        xa, xw = (ta.T if a_t else ta), (tw.T if w_t else tw)
        with clients.inspect() as rec:  # (the kernels, from a call of their own: see run())
            kept = clients.maximum(xa @ xw + tb, 0)  # (a dropped result is never computed)
        clients.sync()
        kernels = rec.kernels
        del kept

        def ours(xa=xa, xw=xw, tb=tb) -> clients.Tensor:
            result = clients.maximum(xa @ xw + tb, 0)
            clients.sync()
            return result

        if cublas:
            ga, gw, gb = (torch.from_numpy(v).cuda() for v in (sa, sw, bias))
            pa, pw = (ga.T if a_t else ga), (gw.T if w_t else gw)

            def peer(pa=pa, pw=pw, gb=gb) -> Any:
                result = torch.relu(torch.addmm(gb, pa, pw))
                torch.cuda.synchronize()
                return result
        else:
            na, nw = (sa.T if a_t else sa), (sw.T if w_t else sw)

            def peer(na=na, nw=nw) -> Any:
                return np.maximum(na @ nw + bias, 0)
        _check(f"fused {name}", ours().numpy(), want)
        # As in run(): on a CPU device in blocks of consecutive calls.
        if cublas:
            timings = common.time_rounds({"fused": ours, "peer": peer}, repeat, warmup=1, apart=("peer",))
        else:
            timings = common.time_blocks({"fused": ours, "peer": peer}, repeat, before=_let_blas_threads_sleep)
        packs = "".join(f", {k.ops[0]}" for k in kernels[:-1])  # (copies made before the product)
        out[name] = {"variant": kernels[-1].variant + packs if kernels else "", "kernels": len(kernels),
                     "fused_ms": common.ms(timings["fused"].median), "peer_ms": common.ms(timings["peer"].median),
                     "peer": "cuBLAS" if cublas else "numpy",
                     "ours_over_peer": common.ratio(timings["peer"], timings["fused"])}
    return out


HEADERS = ["variant", "median ms", "best ms", "GFLOP/s", "fused speed-up"]


def summary_rows(result: dict) -> list[list[Any]]:
    return common.variant_rows(result, rate="gflop_per_s")


def report(result: dict) -> None:
    common.print_table(
        f"matmul {result['expression']}, {result['m']}x{result['k']} @ {result['k']}x{result['n']} float32",
        HEADERS, summary_rows(result),
    )
    kernels = "; ".join(f"{k['kind']} ({', '.join(k['ops'])})" for k in result["fused_kernels"])
    print(f"kernels per run: fused {result['kernels_per_fused_run']} [{kernels}], "
          f"eager {result['kernels_per_eager_run']}")
    dev = result["device_kernel_time"]
    if dev:
        print("kernel time on the device: " + ", ".join(
            f"{mode} {common.ms(d['median_s']):.3g} ms ({d['gflop_per_s']:.0f} GFLOP/s)" for mode, d in dev.items()))
    if "ours_over_cublas" in result:
        print(f"ours / cuBLAS (speed): {result['ours_over_cublas']['of_medians']:.2f}")
    rows = [[name, r["variant"], r["fused_ms"], r["peer_ms"], r["ours_over_peer"]["of_medians"]]
            for name, r in result.get("layouts", {}).items()]
    if rows:
        peer = next(iter(result["layouts"].values()))["peer"]
        common.print_table("operand layouts (maximum(x @ y + bias, 0))",
                           ["layout", "our kernel", "fused ms", f"{peer} ms", f"ours / {peer} (speed)"], rows)
    for note in result["notes"]:
        print(f"note: {note}")


def main(argv: list[str] | None = None) -> dict:
    def configure(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--n", type=int, default=None,
                            help=f"M = N = K (default: {CPU_N} on CPU devices, {GPU_N} on GPUs; --size is ignored)")

    return common.run_main(NAME, __doc__, run, report, argv, configure=configure,
                           call=lambda args: run(args.n, args.repeat),
                           json_name=lambda args, result: f"{NAME}-{result['n']}.json")


if __name__ == "__main__":
    main()
