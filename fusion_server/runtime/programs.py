"""Built kernels, kept in memory by specialization key.

pyopencl's own binary cache (on disk, keyed by source and device) makes a rebuild of a
known source cheaper, but a rebuild still costs tens of milliseconds on PoCL, so every
built kernel is kept here and retrieved once.

Every OpenCL build of the library goes through `build_kernel`, which recovers from a
poisoned driver cache; the cache's `build_once` also falls back to a kernel's scalar
variant when its vector build fails.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import warnings
from collections.abc import Callable, Hashable
from typing import Any, NamedTuple

import pyopencl as cl

log = logging.getLogger("fusion_server")

# Added to a build whose kernel the driver could not find in a program it reported as
# built: a driver cache entry left half-written by a crashed build (PoCL: every later
# process gets INVALID_KERNEL_NAME for that kernel). The option changes the driver's
# cache key, so the source is compiled afresh (and that entry is cached in turn).
FRESH_BUILD_OPTION = "-DFUSION_FRESH_BUILD=1"


# Drivers that log every build (Intel's CPU runtime does) make pyopencl warn at each one
# that it did not show the log; the log itself still shows with PYOPENCL_COMPILER_OUTPUT=1.
warnings.filterwarnings("ignore", message="Non-empty compiler output encountered", category=cl.CompilerWarning)


class KernelBuildError(RuntimeError):
    """The OpenCL compiler rejected a generated or user-written source."""


class BuiltKernel(NamedTuple):
    """A built kernel and the spec it was built from: the one asked for, or its scalar
    variant (`fallback` then says why the vector build failed)."""

    kernel: cl.Kernel
    spec: Any
    fallback: str = ""


class OwnedKernel(cl.Kernel):
    """A kernel that holds its program. Intel's CPU runtime invalidates a program once the
    application released it, though its kernels live on, and a replay clones kernels from
    their program (`kernel_program`)."""

    owner: cl.Program


def kernel_program(kernel: cl.Kernel) -> cl.Program:
    """The program `kernel` was created from (the one it holds, where it holds one)."""
    owner = getattr(kernel, "owner", None)
    return owner if owner is not None else kernel.program


def build_kernel(context: cl.Context, source: str, name: str, options: list[str] | tuple[str, ...] = ()) -> cl.Kernel:
    """Compile `source` and return its kernel `name`; KernelBuildError if the driver rejects it.

    A program that builds but lacks its kernel came from a broken driver cache entry:
    it is built once more with FRESH_BUILD_OPTION, with a warning naming the cache."""
    from .binaries import build_program

    try:
        program = build_program(context, source, options)
    except cl.Error as exc:
        raise KernelBuildError(f"OpenCL build of {name} failed:\n{exc}") from None
    try:
        kernel = OwnedKernel(program, name)
        kernel.owner = program
        return kernel
    except cl.Error as exc:
        if FRESH_BUILD_OPTION in options:
            raise KernelBuildError(f"OpenCL kernel {name} could not be created: {exc}") from None
        first = exc
    del program  # the broken program goes before the fresh build
    try:
        kernel = build_kernel(context, source, name, [*options, FRESH_BUILD_OPTION])
    except KernelBuildError as exc:
        # Fresh too: the driver itself loses the kernel (PoCL 3.0 does with some vector
        # code), which is no cache's fault.
        raise KernelBuildError(f"the OpenCL driver built {name} but could not create it ({first}); "
                               f"built again bypassing its cache, it failed too: {exc}") from None
    from .drivers import kernel_cache_of

    where = kernel_cache_of(context.devices[0])
    warnings.warn(
        f"the OpenCL driver built kernel {name} but could not create it ({first}): its kernel "
        f"cache ({where or 'unknown location'}) likely holds an entry left by a build that crashed. "
        "Rebuilt it fresh; deleting that cache directory clears such entries.",
        RuntimeWarning, stacklevel=2,
    )
    return kernel


class ProgramCache:
    def __init__(self, context: cl.Context, dump_dir: str | None = None):
        self.context = context
        self.dump_dir = dump_dir
        self._kernels: dict[Hashable, BuiltKernel] = {}
        self.compiles = 0
        self.fallbacks: dict[str, str] = {}  # kernel names built as scalar variants: why
        self.specs: dict[str, Any] = {}  # kernel name -> the spec it was built from (for inspect())
        self.arg_types: dict[str, list] = {}  # kernel name -> its scalar arguments' dtypes (None: a buffer)
        self.compile_seconds = 0.0
        self._lock = threading.Lock()  # guards counters and `_building`: builds run off the server lock
        self._building: dict[Hashable, threading.Lock] = {}  # keys being built, held by the builder
        self.failed: dict[Hashable, Exception] = {}  # keys whose build failed, with why
        self.options: tuple[str, ...] = ()  # build options of this device, added to every build
        self.closing = False  # set at interpreter exit: builds in flight finish, none start

    def get(self, key: Hashable) -> BuiltKernel | None:
        return self._kernels.get(key)

    def keys(self) -> list[Hashable]:
        """The specialization keys built so far."""
        return list(self._kernels)

    def wait_idle(self) -> None:
        """Return once no build is in flight (used at exit, before the driver goes away)."""
        with self._lock:
            builds = list(self._building.values())
        for done in builds:
            done.wait(60)

    def build_once(
        self,
        key: Hashable,
        make_source: Callable[[Any], tuple[str, str]],
        options: tuple[str, ...] = (),
        arg_dtypes: Callable[[Any], list] | None = None,
        scalar_variant: Any = None,
    ) -> BuiltKernel:
        """The kernel for `key`, built by exactly one thread however many ask at once.

        `make_source(spec)` and `arg_dtypes(spec)` are called with `key`; if that build
        fails and `scalar_variant` is a spec, it is built instead (once) and kept under `key`.
        """
        while True:
            built = self._kernels.get(key)
            if built is not None:
                return built
            mine = None
            try:
                with self._lock:
                    if self.closing:
                        raise RuntimeError("the process is exiting: no new kernels are built")
                    other = self._building.get(key)
                    if other is None or other.is_set():  # (a set one: its builder was interrupted)
                        # (one statement, no call between its two stores: an interrupt
                        # cannot leave the build registered without `mine` set)
                        mine = self._building[key] = threading.Event()
                if mine is not None:
                    return self._build_or_fall_back(key, make_source, options, arg_dtypes, scalar_variant)
            finally:
                if mine is not None:  # the build ended, built or not: waiters go on
                    mine.set()
                    with self._lock:
                        if self._building.get(key) is mine:
                            self._building.pop(key)
            other.wait(None)  # another thread builds it: a host wait, not a device wait
            # Built (returned above), or its build failed and left no kernel: try ours.

    def _build_or_fall_back(self, key, make_source, options, arg_dtypes, scalar_variant) -> BuiltKernel:
        source, name = make_source(key)
        try:
            kernel = self.build(key, source, name, options, arg_dtypes(key) if arg_dtypes else None)
            built = BuiltKernel(kernel, key)
        except KernelBuildError as exc:
            if scalar_variant is None:
                raise
            why = first_lines(str(exc))
            log.warning("the vector build of %s failed; building it as scalar code: %s", name, why)
            source, scalar_name = make_source(scalar_variant)
            kernel = self.build(scalar_variant, source, scalar_name, options,
                                arg_dtypes(scalar_variant) if arg_dtypes else None)
            built = BuiltKernel(kernel, scalar_variant, why)
            with self._lock:
                self.fallbacks[scalar_name] = why
        self._kernels[key] = built
        return built

    def build(
        self, key: Hashable, source: str, name: str, options: tuple[str, ...] = (), arg_dtypes: list | None = None
    ) -> cl.Kernel:
        """Compile `source` and return its kernel `name` (counted, timed, dumped)."""
        if self.dump_dir:
            os.makedirs(self.dump_dir, exist_ok=True)
            with open(os.path.join(self.dump_dir, f"{name}.cl"), "w") as f:
                f.write(source)
        start = time.perf_counter()
        kernel = build_kernel(self.context, source, name, list(options) + list(self.options))
        if arg_dtypes is not None:
            kernel.set_scalar_arg_dtypes(arg_dtypes)
            self.arg_types[name] = arg_dtypes
        elapsed = time.perf_counter() - start
        with self._lock:
            self.compiles += 1
            self.compile_seconds += elapsed
        log.debug("compiled %s in %.1f ms", name, elapsed * 1e3)
        self.specs[name] = key
        return kernel


def first_lines(text: str, width: int = 400) -> str:
    """A long build log on one line: its first line and the compiler's first errors."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines[1:] if "error" in line.lower() and "clBuildProgram" not in line][:2]
    return " | ".join(lines[:1] + errors)[:width]
