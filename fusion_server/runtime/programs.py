"""Built kernels, kept in memory by specialization key.

pyopencl's own binary cache (on disk, keyed by source and device) makes a rebuild of a
known source cheaper, but a rebuild still costs tens of milliseconds on PoCL, so every
built kernel is kept here and retrieved once.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Hashable

import pyopencl as cl

log = logging.getLogger("fusion_server")


class KernelBuildError(RuntimeError):
    """The OpenCL compiler rejected a generated or user-written source."""


class ProgramCache:
    def __init__(self, context: cl.Context, dump_dir: str | None = None):
        self.context = context
        self.dump_dir = dump_dir
        self._kernels: dict[Hashable, cl.Kernel] = {}
        self.compiles = 0
        self.compile_seconds = 0.0
        self._lock = threading.Lock()  # guards counters and `_building`: builds run off the server lock
        self._building: dict[Hashable, threading.Lock] = {}  # keys being built, held by the builder
        self.failed: dict[Hashable, Exception] = {}  # keys whose build failed, with why
        self.options: tuple[str, ...] = ()  # build options of this device, added to every build
        self.closing = False  # set at interpreter exit: builds in flight finish, none start

    def get(self, key: Hashable) -> cl.Kernel | None:
        return self._kernels.get(key)

    def wait_idle(self) -> None:
        """Return once no build is in flight (used at exit, before the driver goes away)."""
        with self._lock:
            gates = list(self._building.values())
        for gate in gates:
            with gate:
                pass

    def build_once(
        self,
        key: Hashable,
        make_source: Callable[[], tuple[str, str]],
        options: tuple[str, ...] = (),
        arg_dtypes: list | None = None,
    ) -> cl.Kernel:
        """The kernel for `key`, built by exactly one thread however many ask at once."""
        kernel = self._kernels.get(key)
        if kernel is not None:
            return kernel
        with self._lock:
            if self.closing:
                raise RuntimeError("the process is exiting: no new kernels are built")
            gate = self._building.get(key)
            mine = gate is None
            if mine:
                gate = self._building[key] = threading.Lock()
                gate.acquire()
        if not mine:
            with gate:  # another thread builds it; this is a host wait, not a device wait
                pass
            kernel = self._kernels.get(key)
            if kernel is not None:
                return kernel
            return self.build_once(key, make_source, options, arg_dtypes)  # its build failed: try ours
        try:
            source, name = make_source()
            kernel = self.build(key, source, name, options, arg_dtypes)
        finally:
            with self._lock:
                del self._building[key]
            gate.release()
        return kernel

    def build(
        self, key: Hashable, source: str, name: str, options: tuple[str, ...] = (), arg_dtypes: list | None = None
    ) -> cl.Kernel:
        """Compile `source`, keep kernel `name` under `key`, and return it."""
        import time

        if self.dump_dir:
            os.makedirs(self.dump_dir, exist_ok=True)
            with open(os.path.join(self.dump_dir, f"{name}.cl"), "w") as f:
                f.write(source)
        start = time.perf_counter()
        try:
            program = cl.Program(self.context, source).build(options=list(options) + list(self.options))
        except cl.RuntimeError as exc:
            raise KernelBuildError(f"OpenCL build of {name} failed:\n{exc}") from None
        kernel = cl.Kernel(program, name)
        if arg_dtypes is not None:
            kernel.set_scalar_arg_dtypes(arg_dtypes)
        elapsed = time.perf_counter() - start
        with self._lock:
            self.compiles += 1
            self.compile_seconds += elapsed
        log.debug("compiled %s in %.1f ms", name, elapsed * 1e3)
        self._kernels[key] = kernel
        return kernel
