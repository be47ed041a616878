"""One device's OpenCL state: context, the in-order queue, buffers, programs."""

from __future__ import annotations

import atexit
import ctypes
import os
import warnings
import weakref
from collections import OrderedDict

import numpy as np
import pyopencl as cl

from .device import DeviceInfo
from .pool import SHARED_MEMORY, BufferPool
from .programs import ProgramCache
from .staging import StagingSlots, staged_reads_wanted
from .waits import wait

_live: weakref.WeakSet[DeviceRuntime] = weakref.WeakSet()
# The functions pyopencl's enqueue_copy ends in for copies between a buffer and the host,
# called directly: enqueue_copy works the direction out in Python, 1.5 of a read's 11 us
# (Intel's CPU runtime), and every read and upload of a value comes through here.
# (enqueue_copy where a pyopencl lacks them.)
_read_buffer = getattr(cl._cl, "_enqueue_read_buffer", None)
_write_buffer = getattr(cl._cl, "_enqueue_write_buffer", None)


def _keep_contexts_past_exit() -> None:
    """Keep every live device context until the process is gone.

    PoCL 3.0 aborts the process (SIGABRT, "still have references to IRs") when its last
    context is released while its compiler still counts an LLVM module that one of its
    error paths forgot to uncount; at interpreter exit, where Python frees objects in any
    order, that turned a passing run into exit status 134. Releasing a context at exit
    frees nothing the operating system does not free anyway, so the live ones get one
    reference Python never gives back."""
    for runtime in list(_live):
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(runtime.context))


atexit.register(_keep_contexts_past_exit)


# Reads in place checked against a read command, per device runtime (a driver's claim of
# shared memory is checked on values, as qualification checks its kernels), each on its
# first HOST_READ_CHECKED elements (a long read copied twice would cost the check its time).
HOST_READ_CHECKS = 8
HOST_READ_CHECKED = 1 << 14
# Longer reads take a read command, whose copy the driver spreads over its threads:
# `(x + 1.0).numpy()` on Intel's CPU runtime (2-core AMD EPYC, medians of 31, us): 2^10
# floats 14.6 by command and 9.0 in place, 2^16 26.2 and 16.0, 2^18 53.4 and 45.9, 2^20
# 132 and 139, 2^22 775 and 959 (PoCL 3.0: level throughout, within its noise).
HOST_READ_MAX_BYTES = 1 << 20


def host_reads_possible(info: DeviceInfo) -> bool:
    """Whether reads take values from the host's view of a buffer instead of a read
    command: a CPU device (its buffers are host memory) whose driver offers fine-grained
    buffer SVM, which makes the host's view of shared memory coherent with the device's
    at each completed command. Not for simulators (a memory checker sees plain buffers).

    By default not on PoCL, where it does not pay: its read command costs what a marker
    does. A 1024-element kernel and its read (a 2-core AMD EPYC, us): Intel's CPU runtime
    13.7 by command, 6.8 in place; PoCL 3.0 27 and 26. A jitted 16-op chain on 1024
    floats, built and read in loops of 30 (benchmarks.jit's loop timing, two runs each):
    Intel's runtime 44.0, 31.6 by command against 28.3, 25.5 in place; PoCL 39.2, 52.6
    against 40.7, 60.6. FUSION_HOST_READS=0 turns reads in place off, =1 on wherever the
    driver offers such memory."""
    asked = os.environ.get("FUSION_HOST_READS", "").strip()
    if info.kind != "CPU" or info.is_simulator or asked == "0" or (info.is_pocl and asked != "1"):
        return False
    if SHARED_MEMORY is None:
        return False
    try:
        return bool(int(info.device.svm_capabilities) & int(cl.device_svm_capabilities.FINE_GRAIN_BUFFER))
    except (cl.Error, AttributeError, TypeError, ValueError):
        return False


class DeviceRuntime:
    """Context, one in-order command queue (invariant 5), buffer pool, program cache."""

    def __init__(self, info: DeviceInfo, dump_dir: str | None = None):
        self.info = info
        self.context = cl.Context([info.device])
        _live.add(self)
        # FUSION_PROFILE=1: device timestamps on every command (inspect() shows kernel times).
        self.profiling = os.environ.get("FUSION_PROFILE", "").strip() not in ("", "0")
        props = cl.command_queue_properties.PROFILING_ENABLE if self.profiling else 0
        self.queue = cl.CommandQueue(self.context, properties=props)
        # Keep at most a quarter of the device's memory in free buffers.
        # FUSION_POOL=exact: exact-size buffers, never reused (for memory checkers).
        exact = os.environ.get("FUSION_POOL", "").strip().lower() == "exact"
        self.host_reads = not exact and host_reads_possible(info)
        # Small reads on accelerators copy into pinned memory (see staging.py).
        self.staging = StagingSlots(self.context, self.queue) if not exact and staged_reads_wanted(info) else None
        self.pool = BufferPool(self.context, max(info.global_mem_bytes // 4, 1 << 20), exact,
                               self.queue if self.host_reads else None)
        # The first reads in place are checked against a read command (see host_span).
        self.host_reads_to_check = HOST_READ_CHECKS
        self.programs = ProgramCache(self.context, dump_dir or os.environ.get("FUSION_DUMP_DIR"))
        self._meta: OrderedDict[bytes, cl.Buffer] = OrderedDict()
        # Work-items per work-group: CPUs run a work-group as a loop, so bigger groups
        # amortize better; 256 suits GPUs.
        self.local_size = min(256 if info.kind == "GPU" else 1024, info.max_work_group_size)

    def metadata_buffer(self, values: tuple[int, ...]) -> cl.Buffer:
        """A read-only int64 buffer holding `values`; recurring contents reuse one buffer."""
        data = np.asarray(values, dtype=np.int64).tobytes()
        buf = self._meta.get(data)
        if buf is not None:
            self._meta.move_to_end(data)
            return buf
        buf = cl.Buffer(
            self.context, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR, hostbuf=data
        )
        self._meta[data] = buf
        if len(self._meta) > 4096:
            self._meta.popitem(last=False)
        return buf

    def upload(self, buf: cl.Buffer, host: np.ndarray) -> cl.Event:
        """Non-blocking copy of `host` into `buf`; pyopencl keeps `host` alive until done."""
        if _write_buffer is not None:
            return _write_buffer(self.queue, buf, host, 0, None, False)
        return cl.enqueue_copy(self.queue, buf, host, is_blocking=False)

    def host_span(self, buf: cl.Buffer, nbytes: int) -> np.ndarray | None:
        """The bytes of `buf` as a host array to read `nbytes` of in place, once a marker
        enqueued after its writer has completed; None where the read takes a read command:
        not a buffer of the pool's shared memory, reads in place turned off, or a read of
        more than HOST_READ_MAX_BYTES."""
        return self.pool.host.get(id(buf)) if self.host_reads and nbytes <= HOST_READ_MAX_BYTES else None

    def host_read_event(self, buf: cl.Buffer, byte_offset: int, span: np.ndarray) -> tuple[cl.Event, np.ndarray | None]:
        """(event, check) for a read in place of `span`, the host's view of `buf` from
        `byte_offset`: a marker after the work enqueued so far, or for the first
        HOST_READ_CHECKS reads a read command of the span's head into `check`, for
        `trusted` to compare."""
        if self.host_reads_to_check <= 0:
            return self.marker(), None
        self.host_reads_to_check -= 1
        check = np.empty(min(span.size, HOST_READ_CHECKED), span.dtype)
        return self.download(check, buf, byte_offset), check

    def trusted(self, span: np.ndarray, check: np.ndarray | None, buf: cl.Buffer, byte_offset: int) -> np.ndarray:
        """After the wait on host_read_event's event (outside the server lock): `span`, or
        where its head differs from `check`, the values by a read command, waited for
        here; reads in place are then off for good, with a warning."""
        if check is None or np.array_equal(span[:check.size].view(np.uint8), check.view(np.uint8)):
            return span
        self.host_reads = False
        warnings.warn(f"{self.info.label}: a read in place of {check.nbytes} bytes differed from the read "
                      "command's; reads use read commands from now on (FUSION_HOST_READS=0 sets this from the "
                      "start)", RuntimeWarning, stacklevel=2)
        host = np.empty(span.size, span.dtype)
        wait(self.download(host, buf, byte_offset))
        return host

    def download(self, host: np.ndarray, buf: cl.Buffer, byte_offset: int = 0) -> cl.Event:
        """Non-blocking copy from `buf` into `host`; wait on the event before reading it.
        The queue is flushed: the host waits for this next (see `marker`)."""
        if _read_buffer is not None:
            event = _read_buffer(self.queue, buf, host, byte_offset, None, False)
        else:
            event = cl.enqueue_copy(self.queue, host, buf, src_offset=byte_offset, is_blocking=False)
        self.queue.flush()
        return event

    def map(self, buf: cl.Buffer, byte_offset: int, count: int, dtype: np.dtype) -> tuple[np.ndarray, cl.Event]:
        """`count` elements of `buf` from `byte_offset` as a host array over the buffer's
        own memory where the device's is the host's (a CPU device), read and written in
        place; unmapped when the array is collected. Wait on the event before using it."""
        array, event = cl.enqueue_map_buffer(self.queue, buf, cl.map_flags.READ | cl.map_flags.WRITE, byte_offset,
                                             (count,), dtype)
        self.queue.flush()
        return array, event

    def marker(self) -> cl.Event:
        """An event that completes after all enqueued work, which is submitted now: a
        driver may hold commands until a flush or a blocking wait (NVIDIA's starts an
        unflushed kernel 5 to 16 us late on an H100, 3 flushed), and a
        wait that polls first would poll for nothing."""
        event = cl.enqueue_marker(self.queue)
        self.queue.flush()
        return event
