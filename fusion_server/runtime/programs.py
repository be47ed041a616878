"""Built kernels, kept in memory by specialization key.

pyopencl's own binary cache (on disk, keyed by source and device) makes a rebuild of a
known source cheaper, but a rebuild still costs tens of milliseconds on PoCL, so every
built kernel is kept here and retrieved once.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Hashable

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
        self._lock = threading.Lock()  # guards the counters when builds run off the server lock

    def get(self, key: Hashable) -> cl.Kernel | None:
        return self._kernels.get(key)

    def build(self, key: Hashable, source: str, name: str, options: tuple[str, ...] = ()) -> cl.Kernel:
        """Compile `source`, keep kernel `name` under `key`, and return it."""
        import time

        if self.dump_dir:
            os.makedirs(self.dump_dir, exist_ok=True)
            with open(os.path.join(self.dump_dir, f"{name}.cl"), "w") as f:
                f.write(source)
        start = time.perf_counter()
        try:
            program = cl.Program(self.context, source).build(options=list(options))
        except cl.RuntimeError as exc:
            raise KernelBuildError(f"OpenCL build of {name} failed:\n{exc}") from None
        kernel = cl.Kernel(program, name)
        elapsed = time.perf_counter() - start
        with self._lock:
            self.compiles += 1
            self.compile_seconds += elapsed
        log.debug("compiled %s in %.1f ms", name, elapsed * 1e3)
        self._kernels[key] = kernel
        return kernel
