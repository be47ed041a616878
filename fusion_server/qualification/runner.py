"""Running the canaries in child processes and turning what they report into a verdict.

Jobs: `common` (the families without a vector width), and per element size its widths
from the widest the device prefers down to 2. A width is needed once every wider one
failed; a worker with nothing needed to do runs the next narrower width ahead of time
(its result is used only if the wider one fails). A size whose every vector width fails
is checked at width 1 (scalar code). Once every size is decided alone, `mixed` jobs run
blocks over two sizes at those widths (a block runs at the narrower size's width); a
failure halves the width that set the block's, and the mixed job runs again. A child
that crashes (a compiler abort, a segfault) or stays inside one canary past the timeout
is replaced, and its job counts as failed by that canary.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from ..runtime.device import DeviceInfo
from ..runtime.widths import ELEMENT_SIZES, VectorWidths
from .verdict import Failure, Verdict, driver_of, now

log = logging.getLogger("fusion_server")

DEFAULT_TIMEOUT = 30.0  # seconds one canary may take (its build included) before it counts as a hang
_NOISE = ("warning generated", "warnings generated", "CompilerWarning", "lambda: self._prg", "PYOPENCL_COMPILER_OUTPUT")
COMMON = 0  # the `size` of the common job
MIXED = -1  # the `size` of a job of blocks over two element sizes, at the widths found so far


@dataclass(frozen=True)
class Job:
    size: int  # element size in bytes; COMMON or MIXED
    width: int  # MIXED: the attempt
    widths: tuple[int, ...] = ()  # MIXED: the width of each element size it runs at

    @property
    def name(self) -> str:
        if self.size == COMMON:
            return "common"
        if self.size == MIXED:
            return "mixed@" + ".".join(map(str, self.widths))
        return f"{self.size}x{self.width}"

    @property
    def label(self) -> str:
        if self.size == COMMON:
            return "common"
        if self.size == MIXED:
            return f"mixed sizes at {VectorWidths(*self.widths)}"
        return f"{self.size}-byte x {self.width}"

    def message(self, faults: dict[str, str]) -> dict:
        prefix = self.name + "/"
        mine = {k: v for k, v in faults.items() if k.startswith(prefix)}
        if self.size == COMMON:
            return {"id": self.name, "kind": "common", "faults": mine}
        if self.size == MIXED:
            return {"id": self.name, "kind": "mixed", "widths": dict(zip(ELEMENT_SIZES, self.widths)), "faults": mine}
        return {"id": self.name, "kind": "vector", "size": self.size, "width": self.width, "faults": mine}


def candidates(preferred: int) -> list[int]:
    """Vector widths to try, widest first (1, scalar code, is the last resort)."""
    return [w for w in (16, 8, 4, 2) if w <= preferred]


@dataclass
class _Child:
    proc: subprocess.Popen
    stderr: IO
    job: Job | None = None
    canary: str = "(starting)"
    deadline: float = 0.0
    started: float = 0.0
    ready: bool = False
    gone: bool = False

    def send(self, job: Job, faults: dict[str, str], timeout: float) -> None:
        self.job, self.canary = job, "(starting)"
        self.started = time.monotonic()
        self.deadline = self.started + timeout
        if self.ready:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps(job.message(faults)) + "\n")
            self.proc.stdin.flush()

    def crash_detail(self) -> str:
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(timeout=10)
        if code < 0:
            try:
                how = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"killed by signal {-code}"
        else:
            how = f"exited with status {code}"
        self.stderr.seek(0)
        text = self.stderr.read().decode(errors="replace")
        lines = [line.strip() for line in text.splitlines() if line.strip() and not any(n in line for n in _NOISE)]
        tail = " | ".join(lines[-3:])[:400]
        return f"{how}: {tail}" if tail else how


@dataclass
class _Plan:
    """What is known so far: each job's outcome (True passed, False failed, None running);
    once every size is decided alone, the widths the mixed jobs narrow."""

    preferred: int
    mixed_sizes: dict[str, tuple[int, ...]]  # mixed canary label -> the element sizes it touches
    outcomes: dict[Job, bool | None] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    widths: dict[int, int] | None = None  # set once every size is decided alone; mixed jobs narrow it
    mixed: dict[tuple[int, ...], tuple[bool, str] | None] = field(default_factory=dict)  # widths -> result
    mixed_done: bool = False
    mixed_scalar_failed: bool = False

    def start(self, job: Job) -> None:
        self.outcomes[job] = None
        if job.size == MIXED:
            self.mixed[job.widths] = None

    def record(self, job: Job, ok: bool, canary: str) -> None:
        self.outcomes[job] = ok
        if job.size == MIXED:
            self.mixed[job.widths] = (ok, canary)
        self._settle()

    def _settle(self) -> None:
        """Apply the mixed results found for the current widths (narrowing after a
        failure, until a result is missing or the widths pass)."""
        if self.mixed_done or not self._decided():
            return
        if self.widths is None:
            self.widths = {s: max(1, self.width_of(s) or 1) for s in ELEMENT_SIZES}
        while True:
            result = self.mixed.get(self._key())
            if result is None:
                return
            ok, canary = result
            if ok:
                self.mixed_done = True
                return
            sizes = set(self.mixed_sizes.get(canary, ELEMENT_SIZES))
            width = min(self.widths[s] for s in sizes)
            if width == 1:  # scalar code of mixed sizes failed: nothing narrower to try
                self.mixed_done = self.mixed_scalar_failed = True
                return
            for s in sizes:  # the sizes that set the block's width go narrower
                if self.widths[s] == width:
                    self.widths[s] = width // 2

    def _decided(self) -> bool:
        return all(self.width_of(s) is not None for s in ELEMENT_SIZES)

    def _key(self) -> tuple[int, ...]:
        assert self.widths is not None
        return tuple(self.widths[s] for s in ELEMENT_SIZES)

    def width_of(self, size: int) -> int | None:
        """The size's qualified width once it is decided, else None; 0 when even scalar code failed."""
        for w in [*candidates(self.preferred), 1]:
            outcome = self.outcomes.get(Job(size, w), "untried")
            if outcome is True:
                return w
            if outcome is not False:
                return None
        return 0

    def _guess(self) -> tuple[int, ...]:
        """The widths every size would get if its widest width not yet failed passes."""
        out = []
        for size in ELEMENT_SIZES:
            out.append(next((w for w in candidates(self.preferred)
                             if self.outcomes.get(Job(size, w), "untried") is not False), 1))
        return tuple(out)

    def next_job(self, speculate: bool) -> Job | None:
        """A job that is needed now (every wider width failed), or with `speculate` one
        that may be needed (a narrower width of a size still being decided; the mixed
        job at the widths every size gets if its running job passes)."""
        self._settle()
        if not self.mixed_done and self.widths is not None and self._key() not in self.mixed:
            return Job(MIXED, len(self.mixed), self._key())
        if speculate and self.widths is None and self._guess() not in self.mixed:
            return Job(MIXED, len(self.mixed), self._guess())  # (the one guess a machine that passes needs)
        # The long chains first (4 and 8 bytes may need three widths in turn), then the rest.
        for size in (4, 8, COMMON, 1, 2):
            if size == COMMON:
                if Job(COMMON, 1) not in self.outcomes:
                    return Job(COMMON, 1)
                continue
            if self.width_of(size) is not None:
                continue
            undecided = False
            for w in [*candidates(self.preferred), 1]:
                outcome = self.outcomes.get(Job(size, w), "untried")
                if outcome == "untried":
                    if not undecided or speculate:
                        return Job(size, w)
                    break
                if outcome is None:
                    undecided = True  # running: a narrower one is only a guess
                    if not speculate:
                        break
        return None

    def done(self) -> bool:
        return self.outcomes.get(Job(COMMON, 1)) is not None and self.mixed_done


def qualify(
    info: DeviceInfo,
    faults: dict[str, str] | None = None,
    timeout: float | None = None,
    workers: int | None = None,
) -> Verdict:
    """Run the canary set for `info` in child processes and return the verdict.

    `faults` injects failures for tests: {"4x16/elementwise-float32": "abort"} (or
    "wrong", "build", "hang"); "common/<canary>" for the common job, and
    "mixed@16.16.8.4/<canary>" for the mixed job at those widths (1-, 2-, 4-, 8-byte)."""
    start = time.perf_counter()
    from .canaries import mixed_canaries

    plan = _Plan(info.vector_width, {c.label: c.sizes for c in mixed_canaries(info.fp64)})
    workers = workers or min(4, max(1, os.cpu_count() or 1))
    with tempfile.TemporaryDirectory(prefix="fusion-qualify-") as scratch:
        children = _schedule(info, plan, dict(faults or {}), timeout or _env_timeout(), workers, Path(scratch))
    alone = {s: plan.width_of(s) for s in ELEMENT_SIZES}
    return Verdict(
        device=info.label,
        driver=driver_of(info),
        widths=dict(plan.widths or {s: 1 for s in ELEMENT_SIZES}),
        preferred={s: info.vector_width for s in ELEMENT_SIZES},
        failures=plan.failures,
        common_ok=plan.outcomes.get(Job(COMMON, 1)) is True,
        scalar_ok=all(alone.values()) and not plan.mixed_scalar_failed,
        seconds=round(time.perf_counter() - start, 2),
        children=children,
        measured=now(),
    )


def _env_timeout() -> float:
    try:
        return float(os.environ.get("FUSION_QUALIFY_TIMEOUT", "") or DEFAULT_TIMEOUT)
    except ValueError:
        return DEFAULT_TIMEOUT


def _child_env(scratch: Path, n: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSION_")}
    # A private driver cache: a build that crashes must not leave a broken entry in the
    # user's (PoCL then fails that kernel in every later process).
    cache = scratch / f"driver-cache-{n}"
    cache.mkdir(exist_ok=True)
    env["POCL_CACHE_DIR"] = str(cache)
    env["PYOPENCL_NO_CACHE"] = "1"
    root = str(Path(__file__).resolve().parent.parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _start(info: DeviceInfo, n: int, scratch: Path, events: queue.Queue) -> _Child:
    err = tempfile.TemporaryFile(dir=scratch)
    proc = subprocess.Popen(
        [sys.executable, "-m", "fusion_server.qualification.child"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True, bufsize=1,
        env=_child_env(scratch, n),
    )
    child = _Child(proc, err)
    assert proc.stdin is not None
    proc.stdin.write(json.dumps({"platform": info.platform, "name": info.name, "index": info.index}) + "\n")
    proc.stdin.flush()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                events.put((child, json.loads(line)))
            except ValueError:
                continue  # a driver printing to stdout: not ours
        events.put((child, None))

    threading.Thread(target=read, daemon=True, name="fusion-qualify-reader").start()
    return child


def _schedule(info: DeviceInfo, plan: _Plan, faults: dict[str, str], timeout: float, workers: int,
              scratch: Path) -> int:
    """Run jobs until the plan is decided; returns how many children were started."""
    events: queue.Queue = queue.Queue()
    everyone: list[_Child] = []

    def finish(child: _Child, ok: bool, failure: Failure | None = None) -> None:
        job, child.job = child.job, None
        if job is None:
            return
        if failure is not None:
            plan.failures.append(failure)
        plan.record(job, ok, child.canary)
        log.debug("qualification job %s %s in %.2f s", job.label, "passed" if ok else "failed",
                  time.monotonic() - child.started)

    try:
        while not plan.done():
            live = [c for c in everyone if not c.gone]
            for speculate in (False, True):
                for child in [c for c in live if c.job is None]:
                    job = plan.next_job(speculate)
                    if job is None:
                        break
                    plan.start(job)
                    child.send(job, faults, timeout)
                while len(live) < workers:
                    job = plan.next_job(speculate)
                    if job is None:
                        break
                    plan.start(job)
                    child = _start(info, len(everyone) + 1, scratch, events)
                    everyone.append(child)
                    live.append(child)
                    child.send(job, faults, timeout)
            busy = [c for c in live if c.job]
            if not busy:
                raise RuntimeError("qualification has nothing to run but is not decided")  # a bug
            try:
                child, message = events.get(timeout=max(0.01, min(c.deadline for c in busy) - time.monotonic()))
            except queue.Empty:
                for c in busy:
                    if time.monotonic() >= c.deadline:
                        c.gone = True
                        c.proc.kill()
                        finish(c, False, Failure(c.job.label, c.canary, "hang", f"no result after {timeout:.0f} s"))
                continue
            if child.gone:
                continue  # what a replaced child says after the fact
            if message is None:  # the child is gone
                child.gone = True
                if child.job is not None:
                    finish(child, False, Failure(child.job.label, child.canary, "crash", child.crash_detail()))
                continue
            event = message.get("event")
            if event == "ready":
                child.ready = True
                if child.job is not None:
                    child.send(child.job, faults, timeout)
            elif event == "setup-failed":
                child.gone = True
                finish(child, False, Failure(child.job.label if child.job else "?", "(setup)", "error",
                                             message.get("detail", "")))
            elif event == "start":
                child.canary = message["canary"]
                child.deadline = time.monotonic() + timeout
            elif event == "fail":
                child.canary = message["canary"]
                plan.failures.append(Failure(child.job.label, message["canary"], message["how"], message["detail"]))
            elif event == "done":
                finish(child, bool(message["ok"]))
    finally:
        for c in everyone:  # speculative jobs nobody needs any more end here
            if c.proc.poll() is None:
                c.proc.kill()
            c.proc.wait(timeout=10)
            c.stderr.close()
    # Failures of guesses that turned out moot (a wider width passed) say nothing.
    decided = {s: plan.width_of(s) for s in ELEMENT_SIZES}
    plan.failures[:] = [f for f in plan.failures if _relevant(f, decided)]
    return len(everyone)


def _relevant(failure: Failure, decided: dict[int, int | None]) -> bool:
    if not failure.job[0].isdigit():  # common, mixed
        return True
    size, width = (int(part) for part in failure.job.replace("-byte x ", " ").split())
    return width > (decided.get(size) or 0)
