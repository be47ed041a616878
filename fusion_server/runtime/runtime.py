"""One device's OpenCL state: context, the in-order queue, buffers, programs."""

from __future__ import annotations

import atexit
import ctypes
import os
import weakref
from collections import OrderedDict

import numpy as np
import pyopencl as cl

from .device import DeviceInfo
from .pool import BufferPool
from .programs import ProgramCache

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
        self.pool = BufferPool(self.context, max(info.global_mem_bytes // 4, 1 << 20), exact)
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
        driver may hold commands until a flush or a blocking wait (NVIDIA's does), and a
        wait that polls first would poll for nothing."""
        event = cl.enqueue_marker(self.queue)
        self.queue.flush()
        return event
