"""A pool of device buffers, so that a freed buffer serves the next allocation."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pyopencl as cl

from ..errors import DeviceMemoryError

try:  # the flags of the shared memory behind a pool's buffers for reads in place
    SHARED_MEMORY = cl.svm_mem_flags.READ_WRITE | cl.svm_mem_flags.SVM_FINE_GRAIN_BUFFER
except AttributeError:  # (a pyopencl built without shared virtual memory: no reads in place)
    SHARED_MEMORY = None


def bucket_size(nbytes: int) -> int:
    """Allocation size class: 256-byte steps up to 64 KiB, then eighths of a power of 2.

    Rounding lets a buffer serve slightly different sizes; the waste is at most 1/8.
    """
    n = max(nbytes, 1)
    if n <= 65536:
        size = (n + 255) & ~255
    else:
        step = 1 << (n.bit_length() - 4)
        size = (n + step - 1) // step * step
    if len(_CLASSES) < 4096:  # (programs use few sizes; one that never recurs is not kept past that)
        _CLASSES[nbytes] = size
    return size


_CLASSES: dict[int, int] = {}  # bytes asked for -> its size class, as bucket_size found it


class BufferPool:
    """Free buffers by size class; at most `max_free_bytes` of them kept.

    With `exact=True` every buffer has exactly the size asked for and is released when
    freed: no reuse, no padding, so a memory checker sees every out-of-bounds access.
    """

    def __init__(self, context: cl.Context, max_free_bytes: int, exact: bool = False,
                 host_queue: cl.CommandQueue | None = None):
        self.context = context
        # With `host_queue` (CPU devices with fine-grained buffer SVM, not with `exact`:
        # see DeviceRuntime.host_reads), every buffer is shared virtual memory wrapped as a
        # buffer object: the host reads it in place once the device is done with it,
        # without a read command. The memory is freed on that queue, after the commands
        # that used it. Its bytes as a host array, by the buffer's id:
        self.host_queue = host_queue
        self.host: dict[int, np.ndarray] = {}
        self.max_free_bytes = 0 if exact else max_free_bytes
        self.exact = exact
        self._free: OrderedDict[int, list[cl.Buffer]] = OrderedDict()
        self.free_bytes = 0
        self._live: dict[int, tuple[cl.Buffer, int]] = {}  # handed out, not yet returned: id -> (buffer, size)
        self.live_bytes = 0
        self.peak_live_bytes = 0
        self.allocations = 0  # real device allocations
        self.reuses = 0
        # Called with (buffer, nbytes) for every buffer handed out, while set (a capture
        # follows which buffers its blocks allocate: see fusion_server/capture.py).
        self.watch = None

    def alloc(self, nbytes: int) -> cl.Buffer:
        size = max(nbytes, 1) if self.exact else _CLASSES.get(nbytes) or bucket_size(nbytes)
        bucket = self._free.get(size)
        if bucket:
            buf = bucket.pop()
            self.free_bytes -= size
            self.reuses += 1
        else:
            buf = self._create(size)
        self._live[id(buf)] = (buf, size)
        self.live_bytes += size
        self.peak_live_bytes = max(self.peak_live_bytes, self.live_bytes)
        if self.watch is not None:
            self.watch(buf, nbytes)
        return buf

    def _new_buffer(self, size: int) -> cl.Buffer:
        if self.host_queue is None:
            return cl.Buffer(self.context, cl.mem_flags.READ_WRITE, size)
        host = cl.svm_empty(self.context, SHARED_MEMORY, (size,), np.uint8, alignment=0, queue=self.host_queue)
        buf = cl.Buffer(self.context, cl.mem_flags.READ_WRITE | cl.mem_flags.USE_HOST_PTR, hostbuf=host)
        self.host[id(buf)] = host
        return buf

    def _create(self, size: int) -> cl.Buffer:
        try:
            buf = self._new_buffer(size)
        except (cl.MemoryError, cl.LogicError, cl.RuntimeError) as first:
            # Free everything we keep and try once more before giving up.
            self.trim(0)
            try:
                buf = self._new_buffer(size)
            except (cl.MemoryError, cl.LogicError, cl.RuntimeError) as exc:
                raise DeviceMemoryError(
                    f"device allocation of {size} bytes failed ({self.live_bytes} bytes live): {exc}"
                ) from first
        self.allocations += 1
        return buf

    def free(self, buf: cl.Buffer, nbytes: int) -> None:
        """Take `buf` back (`nbytes`: what was asked for; its size class is the one it
        was handed out with)."""
        held = self._live.pop(id(buf), None)
        if held is None:
            return  # not ours, or returned already (a repair after an interrupt got there first)
        size = held[1]
        self.live_bytes -= size
        self._free.setdefault(size, []).append(buf)
        self._free.move_to_end(size)
        self.free_bytes += size
        if self.free_bytes > self.max_free_bytes:
            self.trim(self.max_free_bytes)

    @property
    def live(self) -> int:
        """Buffers handed out and not yet returned."""
        return len(self._live)

    def reconcile(self, in_use: set[int]) -> int:
        """Take back every live buffer whose id is not in `in_use` (lost by an interrupted
        caller) and recount the byte totals; returns how many came back."""
        lost = [(buf, size) for key, (buf, size) in self._live.items() if key not in in_use]
        for buf, size in lost:
            self.free(buf, size)
        self.live_bytes = sum(size for _, size in self._live.values())
        self.free_bytes = sum(size * len(bucket) for size, bucket in self._free.items())
        return len(lost)

    def trim(self, keep_bytes: int) -> None:
        """Release free buffers, least recently used size classes first."""
        while self.free_bytes > keep_bytes and self._free:
            size, bucket = next(iter(self._free.items()))
            while bucket and self.free_bytes > keep_bytes:
                buf = bucket.pop()
                self.host.pop(id(buf), None)  # (its memory is freed on the queue, after its last user)
                buf.release()
                self.free_bytes -= size
            if not bucket:
                del self._free[size]
