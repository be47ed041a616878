"""Shared helpers of the benchmarks: timing, the device under test, tables and JSON."""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

SIZES = {"small": 2**20, "large": 2**24}
RESULTS_DIR = Path(__file__).resolve().parent / "results"


# -- timing ---------------------------------------------------------------------------------
@dataclass
class Timing:
    """Wall-clock samples of one variant, in seconds."""

    samples: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def best(self) -> float:
        return min(self.samples)

    def to_dict(self) -> dict:
        q = np.percentile(self.samples, [25, 75]) if self.samples else (0.0, 0.0)
        return {
            "median_s": self.median,
            "min_s": self.best,
            "iqr_s": float(q[1] - q[0]),
            "repeats": len(self.samples),
            "samples_s": self.samples,
        }


def _timed(fn: Callable[[], Any]) -> float:
    # Keep the collector out of the timed call, as timeit does (a full collection before
    # each sample would evict the caches and slow down short samples); what fn returns is
    # dropped after the clock stops.
    gc.disable()
    try:
        start = time.perf_counter()
        result = fn()
        elapsed = time.perf_counter() - start
    finally:
        gc.enable()
    del result
    return elapsed


def bytecodes(fn: Callable[[], Any]) -> int:
    """How many Python bytecodes run in `fn()`: a count of the host's Python work that,
    unlike a time, a noisy machine leaves alone. Code in C (numpy, pyopencl's invoker, the
    driver) counts nothing. Counted with sys.monitoring's instruction events where Python
    has them (3.12 on: its settrace turns opcode events on only from the second trace),
    else sys.settrace's opcode events, on the calling thread."""
    count = 0
    monitoring = getattr(sys, "monitoring", None)
    if monitoring is not None:
        tool, event = monitoring.PROFILER_ID, monitoring.events.INSTRUCTION

        def counted(code, offset):
            nonlocal count
            count += 1

        monitoring.use_tool_id(tool, "benchmarks.common.bytecodes")
        monitoring.register_callback(tool, event, counted)
        monitoring.set_events(tool, event)
        try:
            fn()
        finally:
            monitoring.set_events(tool, 0)
            monitoring.register_callback(tool, event, None)
            monitoring.free_tool_id(tool)
        return count

    def tracer(frame, event, arg):
        nonlocal count
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False
        if event == "opcode":
            count += 1
        return tracer

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(previous)
    return count


def cpu_per_call(fn: Callable[[], Any], calls: int, samples: int) -> tuple[float, float]:
    """Median (thread CPU seconds, wall seconds) per call of `fn`, over `samples` samples
    of `calls` calls each; the device is waited for between samples, off the clock."""
    import clients

    cpu, wall = [], []
    for _ in range(samples):
        gc.disable()
        try:
            c0, w0 = time.thread_time(), time.perf_counter()
            for _ in range(calls):
                out = fn()
            c1, w1 = time.thread_time(), time.perf_counter()
        finally:
            gc.enable()
        del out
        clients.sync()
        cpu.append((c1 - c0) / calls)
        wall.append((w1 - w0) / calls)
    return statistics.median(cpu), statistics.median(wall)


def time_call(fn: Callable[[], Any], repeat: int, warmup: int = 1) -> Timing:
    """Time `fn` `repeat` times after `warmup` untimed calls.

    For device work, `fn` must end with a wait for the device (a `sync()`, a
    `queue.finish()`, a read), so that each sample covers the work it enqueued.
    """
    for _ in range(warmup):
        fn()
    return Timing([_timed(fn) for _ in range(repeat)])


def time_rounds(
    variants: dict[str, Callable[[], Any]],
    repeat: int,
    warmup: int = 1,
    setup: dict[str, Callable[[], Any]] | None = None,
    repeats: dict[str, int] | None = None,
    apart: tuple[str, ...] = (),
    burst: int = 1,
) -> dict[str, Timing]:
    """Time several variants in interleaved rounds (each round runs every variant once).

    On a shared, noisy machine interleaving spreads slow periods over all variants alike,
    so their ratios stay fair. Each callable must end with a device wait (see time_call).
    `setup[name]`, when given, runs untimed before every call of that variant.
    `repeats[name]` overrides `repeat` for one variant: it leaves the rounds after its
    last sample, or takes part in extra rounds at the end (cheap variants get more
    samples than slow ones that way).
    `apart`: variants that run through another driver on the same device (PyTorch's CUDA
    beside our OpenCL on the H200), timed in rounds of their own after the others: the
    GPU's switch from a CUDA context back to the OpenCL one cost the next variant 130 to
    170 us (NVIDIA's driver 580; a jitted 1024-element chain read 76 us alone, 246 us
    after a CUDA one), which no program using one of the two pays.
    `burst`: each round runs each variant that many times in a row, and its sample is the
    median of those calls: a call in a loop of its own, with the caches and the driver's
    threads as the previous call left them (a single call per round follows the other
    variants' work instead).
    """
    if any(name in variants for name in apart):
        kept = {name: fn for name, fn in variants.items() if name not in apart}
        out = time_rounds(kept, repeat, warmup, setup, repeats, burst=burst)
        out.update(time_rounds({name: fn for name, fn in variants.items() if name in apart},
                               repeat, warmup, setup, repeats, burst=burst))
        return {name: out[name] for name in variants}
    setup = setup or {}
    counts = {name: (repeats or {}).get(name, repeat) for name in variants}
    for name, fn in variants.items():
        for _ in range(warmup):
            setup.get(name, _nothing)()
            fn()
    out = {name: Timing([]) for name in variants}
    for r in range(max(counts.values(), default=0)):
        for name, fn in variants.items():
            if r < counts[name]:
                calls = []
                for _ in range(burst):
                    setup.get(name, _nothing)()
                    calls.append(_timed(fn))
                out[name].samples.append(statistics.median(calls))
    return out


def _nothing() -> None:
    return None


def time_blocks(variants: dict[str, Callable[[], Any]], repeat: int, blocks: int = 3,
                before: Callable[[], Any] | None = None) -> dict[str, Timing]:
    """Time variants that bring threads of their own onto the same cores (BLAS's, a CPU
    driver's) in blocks of consecutive calls, each variant's blocks alternated with the
    others' `blocks` times: every sample is taken in its variant's steady state, not
    while another's threads still spin on the cores, and slow periods of a shared machine
    still fall on all variants. `before()` runs before every block (to let the previous
    variant's threads go to sleep), and each block begins with an untimed call (to wake
    this one's). Samples pair by position, as `ratio` expects."""
    out = {name: Timing([]) for name in variants}
    for b in range(blocks):
        count = repeat // blocks + (1 if b < repeat % blocks else 0)
        for name, fn in variants.items():
            if before is not None:
                before()
            fn()
            for _ in range(count):
                out[name].samples.append(_timed(fn))
    return out


def against_peers(name: str, ours: Callable[[], Any], numpy_run: Callable[[], Any],
                  torch_run: Callable[[], Any] | None, torch_note: str, repeat: int) -> dict:
    """Our variant `name` against numpy and, where given, PyTorch, in interleaved rounds
    (PyTorch on CUDA apart, see time_rounds): each variant's timing, the torch note, and
    numpy's and torch's time over ours (`numpy_over_<name>`, `torch_over_<name>`)."""
    variants: dict[str, Callable[[], Any]] = {name: ours, "numpy": numpy_run}
    if torch_run is not None:
        variants["torch"] = torch_run
    wall = time_rounds(variants, repeat, warmup=1, apart=("torch",) if "CPU" not in torch_note else ())
    result: dict = {"variants": {k: t.to_dict() for k, t in wall.items()}, "torch": torch_note,
                    f"numpy_over_{name}": ratio(wall["numpy"], wall[name])}
    if "torch" in wall:
        result[f"torch_over_{name}"] = ratio(wall["torch"], wall[name])
    return result


def torch_variant(fn: Callable[..., Any], inputs: Sequence[np.ndarray]) -> tuple[Callable[[], Any] | None, str]:
    """PyTorch's variant for `against_peers`: `fn` of the inputs as torch tensors, on the
    GPU where PyTorch has CUDA (synchronized after each call), else on the CPU; with a
    note naming where it runs (None and why, where torch is not installed)."""
    try:
        import torch
    except ImportError:
        return None, "torch not installed"
    cuda = torch.cuda.is_available()
    tensors = [torch.from_numpy(a).cuda() if cuda else torch.from_numpy(a) for a in inputs]

    def run() -> Any:
        out = fn(*tensors)
        if cuda:
            torch.cuda.synchronize()
        return out

    where = torch.cuda.get_device_name() if cuda else f"the CPU ({torch.get_num_threads()} threads)"
    return run, f"PyTorch {torch.__version__} on {where}"


def peer_cells(result: dict, name: str = "ours") -> tuple[list[Any], list[Any]]:
    """The table cells of an `against_peers` result: ([our ms], [numpy ms, torch ms,
    numpy / ours, torch / ours]) (paired medians; None where torch did not run)."""
    v = result["variants"]
    return [ms(v[name]["median_s"])], [
        ms(v["numpy"]["median_s"]), None if "torch" not in v else ms(v["torch"]["median_s"]),
        result[f"numpy_over_{name}"]["paired_median"], result.get(f"torch_over_{name}", {}).get("paired_median")]


def print_peer_kernel_table(title: str, kernel_header: str, cases: dict[str, dict]) -> None:
    """A table of `against_peers` results, by case name, with the kernel's time and
    bandwidth (the results' "kernel_time" and "gb_per_s", where measured) after ours."""
    rows = []
    for name, r in cases.items():
        ours, peers = peer_cells(r)
        kernel = None if "kernel_time" not in r else ms(r["kernel_time"]["median_s"])
        rows.append([name, *ours, kernel, r.get("gb_per_s"), *peers])
    print_table(title, ["case", "ours ms", kernel_header, "kernel GB/s", "numpy ms", "torch ms",
                        "numpy / ours", "torch / ours"], rows)


def print_kernels(cases: dict[str, dict]) -> None:
    """Each case's kernels (its result's "kernels"), one line per case."""
    for name, r in cases.items():
        print(f"{name}: {'; '.join(r['kernels'])}")


def print_torch_notes(results: Sequence[dict]) -> None:
    """One line naming where PyTorch ran (or why not) in these `against_peers` results."""
    print("torch: " + "; ".join(sorted({r["torch"] for r in results})))


def ratio(numerator: Timing, denominator: Timing) -> dict:
    """numerator / denominator as a ratio of medians, and the median of per-round ratios
    (samples paired by position, as `time_rounds` produces them)."""
    paired = [a / b for a, b in zip(numerator.samples, denominator.samples) if b > 0]
    return {
        "of_medians": numerator.median / denominator.median,
        "paired_median": statistics.median(paired) if paired else float("nan"),
    }


# -- the device and the environment -----------------------------------------------------------
def device_info() -> dict:
    """The device that `clients` uses by default (FUSION_DEVICE, else its default)."""
    import clients

    info = clients.client_for().server.info
    return {
        "name": info.name,
        "platform": info.platform,
        "kind": info.kind,
        "compute_units": info.compute_units,
        "global_mem_bytes": info.global_mem_bytes,
    }


def device_description() -> str:
    """One line naming the device under test, e.g. 'NVIDIA H200 (NVIDIA CUDA, GPU, 132 CUs)'."""
    d = device_info()
    return f"{d['name']} ({d['platform']}, {d['kind']}, {d['compute_units']} CUs)"


def _git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5,
            cwd=Path(__file__).resolve().parent,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def environment() -> dict:
    """Date, versions and settings that a result depends on."""
    import pyopencl

    try:
        import numexpr

        numexpr_version: str | None = numexpr.__version__
    except ImportError:
        numexpr_version = None
    return {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "device": device_info(),
        "device_description": device_description(),
        "host_cpus": os.cpu_count(),
        # Other work on the machine skews timings: the load average says how much there was.
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "pyopencl": pyopencl.VERSION_TEXT,
        "numexpr": numexpr_version,
        "commit": _git_commit(),
        "env": {k: v for k, v in os.environ.items() if k.startswith("FUSION_")},
    }


# -- output ---------------------------------------------------------------------------------
def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table with right-aligned columns (the first one left-aligned)."""
    cells = [[str(h) for h in headers]] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(row: list[str]) -> str:
        parts = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), rule] + [line(r) for r in cells[1:]])


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    print(f"\n{title}\n{format_table(headers, rows)}", flush=True)


def ms(seconds: float) -> float:
    return seconds * 1e3


def us(seconds: float) -> float:
    return seconds * 1e6


def default_out_dir() -> Path:
    """$OUT when set, else benchmarks/results/."""
    out = os.environ.get("OUT", "").strip()
    return Path(out) if out else RESULTS_DIR


def write_json(path: Path | str, data: dict) -> Path:
    """Write `data` as indented JSON (numpy scalars become numbers), creating folders."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=_json_default) + "\n")
    return path


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def add_common_args(parser: Any, default_repeat: int) -> None:
    """--size, --repeat and --out, shared by every benchmark's command line."""
    parser.add_argument("--size", choices=sorted(SIZES), default="large",
                        help="array size: small = 2^20, large = 2^24 elements (default)")
    parser.add_argument("--repeat", type=int, default=default_repeat,
                        help=f"timed repeats per variant (default {default_repeat})")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for the JSON results (default: $OUT, else benchmarks/results/)")


def run_main(
    name: str,
    doc: str,
    run: Callable[..., dict],
    report: Callable[[dict], None],
    argv: list[str] | None = None,
    configure: Callable[[argparse.ArgumentParser], None] | None = None,
    call: Callable[[argparse.Namespace], dict] | None = None,
    json_name: Callable[[argparse.Namespace, dict], str] | None = None,
) -> dict:
    """The command line of one benchmark module: parse, run, report, write the JSON.

    By default `run(size, repeat)` is called and the JSON is `<name>-<size>.json`;
    `configure` adds arguments, `call` runs differently, `json_name` names the file.
    """
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    add_common_args(parser, default_repeat=10)
    if configure:
        configure(parser)
    args = parser.parse_args(argv)
    print(f"device: {device_description()}", flush=True)
    result = call(args) if call else run(args.size, args.repeat)
    report(result)
    file_name = json_name(args, result) if json_name else f"{name}-{args.size}.json"
    out = write_json((args.out or default_out_dir()) / file_name, {"environment": environment(), name: result})
    print(f"results: {out}")
    return result


def variant_rows(result: dict, rate: str = "gb_per_s") -> list[list[Any]]:
    """Table rows (variant, median ms, best ms, rate at the median, fused speed-up) of a
    result with "variants" (timings and `rate`) and "ratios" (fused_vs_<variant>)."""
    rows = []
    for name, v in result["variants"].items():
        r = 1.0 if name == "fused" else result["ratios"][f"fused_vs_{name}"]["of_medians"]
        rows.append([name, ms(v["median_s"]), ms(v["min_s"]), v[rate], r])
    return rows
