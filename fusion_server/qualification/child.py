"""The child process that runs canaries: `python -m fusion_server.qualification.child`.

It reads one JSON line naming the device, then one line per job, and writes one JSON line
before and after each canary (flushed), then one when the job is done. If the driver
aborts or hangs inside a canary, the parent sees which one from the last "start" line.
The child stops a job at its first failing canary and takes the next job.

Faults can be injected for tests: {"<job>/<canary label>": "abort" | "wrong" | "build" |
"hang"} in the job, where <job> is "4x16" (element size x width), "common", or
"mixed@16.16.8.4" (the mixed job at those widths of 1-, 2-, 4- and 8-byte elements).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import traceback


def _emit(**message) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def _server_for(spec: dict):
    from ..runtime.device import list_devices
    from ..server import FusionServer

    devices = list_devices()
    info = next((d for d in devices if d.index == spec["index"] and d.name == spec["name"]
                 and d.platform == spec["platform"]), None)
    if info is None:
        raise RuntimeError(f"device {spec} is not listed in the child ({[d.label for d in devices]})")
    server = FusionServer(info)
    server.compile_under_lock = True  # no client here: builds happen in line
    server.build_fallback = False  # a vector build that fails is the finding, not a reason to fall back
    server.pack_lanes = False  # every canary at the job's width, on drivers that pack lanes too
    return server


def _classify(exc: BaseException) -> tuple[str, str]:
    """(how, detail) of a canary that raised."""
    from ..runtime.programs import KernelBuildError, first_lines
    from .canaries import CanaryFailed

    if isinstance(exc, CanaryFailed):
        return exc.how, exc.detail
    seen = exc
    while seen is not None:
        if isinstance(seen, KernelBuildError):
            return "build", first_lines(str(seen))
        seen = seen.__cause__
    return "error", first_lines(f"{type(exc).__name__}: {exc}")


def _broken_build(original):
    """A build that appends an #error: the driver rejects the source (an injected fault)."""
    def broken(key, source, name, options=(), arg_dtypes=None):
        return original(key, source + "\n#error injected build failure\n", name, options, arg_dtypes)

    return broken


def run_job(server, job: dict) -> bool:
    from ..runtime.widths import VectorWidths
    from .canaries import common_canaries, mixed_canaries, vector_canaries

    fp64 = server.info.fp64
    name = job["id"]
    if job["kind"] == "common":
        canaries, widths = common_canaries(fp64), VectorWidths.uniform(1)
    elif job["kind"] == "mixed":
        canaries, widths = mixed_canaries(fp64), VectorWidths.from_dict(job["widths"])
    else:
        canaries, widths = vector_canaries(job["size"], fp64), VectorWidths.uniform(job["width"])
    server.widths = widths
    faults = job.get("faults", {})
    for canary in canaries:
        fault = faults.get(f"{name}/{canary.label}")
        _emit(job=job["id"], canary=canary.label, event="start")
        if fault == "abort":
            os.abort()
        if fault == "hang":
            threading.Event().wait(10**6)  # a canary that never returns
        programs = server.runtime.programs
        if fault == "build":
            programs.build = _broken_build(programs.build)
        server.reduce_strategy = server.matmul_strategy = None
        try:
            canary.run(server, fp64, corrupt=fault == "wrong")
        except Exception as exc:  # noqa: BLE001 (every failure is a finding)
            how, detail = _classify(exc)
            _emit(job=job["id"], canary=canary.label, event="fail", how=how, detail=detail)
            return False  # the rest of the job is moot: this width is out
        finally:
            vars(programs).pop("build", None)  # the injected build, if any, goes with its canary
        _emit(job=job["id"], canary=canary.label, event="pass")
    return True


def main() -> int:
    try:
        server = _server_for(json.loads(sys.stdin.readline()))
    except Exception:  # noqa: BLE001
        _emit(event="setup-failed", detail=traceback.format_exc()[-400:])
        return 1
    _emit(event="ready")
    for line in sys.stdin:
        job = json.loads(line)
        _emit(job=job["id"], event="done", ok=run_job(server, job))
    return 0


if __name__ == "__main__":
    sys.exit(main())
