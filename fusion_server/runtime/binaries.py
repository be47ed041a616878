"""Compiled programs kept on disk, for drivers that keep no cache of their own.

PoCL and NVIDIA's driver cache builds from source themselves. For the others (Intel's CPU
runtime) pyopencl would, behind a lock file: a build interrupted between taking and
dropping it (a KeyboardInterrupt is enough) leaves the file behind, and every later build
of any process then waits a minute and fails. This cache takes no lock. A binary is
written to a temporary file and renamed into place, so a reader finds a whole binary or
none, two processes that build the same source both write the same bytes, and an
interrupt leaves at most a temporary file, which is removed on the way out.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import pyopencl as cl

from .drivers import binaries_dir, driver_caches_builds

FORMAT = "1"  # bump when what is stored or how it is keyed changes


def binary_key(device: cl.Device, source: str, options: list[str] | tuple[str, ...]) -> str:
    """What a binary depends on: the driver and device, the build options and the source."""
    parts = [FORMAT, device.platform.name, device.name, device.driver_version, device.version,
             " ".join(options), source]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _read(path: Path) -> bytes | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    return data or None


def _write(path: Path, data: bytes) -> None:
    """Write `data` to `path` whole or not at all; a read-only cache is no error."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        tmp = None
    except OSError:
        pass
    finally:
        if tmp is not None:  # failed, or interrupted, between creating and renaming it
            try:
                os.unlink(tmp)
            except OSError:
                pass


def from_source(context: cl.Context, source: str, options: list[str] | tuple[str, ...]) -> cl.Program:
    # A program made from the driver's own object builds uncached: pyopencl's cache and its
    # lock file stay out of it.
    return cl.Program(cl._cl._Program(context, source)).build(options=list(options))


def build_program(context: cl.Context, source: str, options: list[str] | tuple[str, ...]) -> cl.Program:
    """`source` built for the context's device: by the driver, which caches it, or from this
    cache's binary, or from source (the binary then kept). Raises cl.Error if it fails."""
    device = context.devices[0]
    if len(context.devices) != 1 or driver_caches_builds(device):
        return cl.Program(context, source).build(options=list(options))
    path = binaries_dir() / f"{binary_key(device, source, options)}.bin"
    binary = _read(path)
    if binary is not None:
        try:
            return cl.Program(context, [device], [binary]).build(options=list(options))
        except cl.Error:
            pass  # not a binary this driver takes any more: built again below, and replaced
    program = from_source(context, source, options)
    try:
        built = program.get_info(cl.program_info.BINARIES)[0]
    except cl.Error:
        built = b""
    if built:
        _write(path, bytes(built))
    return program
