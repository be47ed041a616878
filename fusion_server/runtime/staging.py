"""Pinned host memory that small reads on an accelerator copy into.

A read command into pageable memory (a fresh numpy array) costs NVIDIA's driver more than
one into memory it pinned itself (a buffer made with ALLOC_HOST_PTR, mapped once): it
stages the copy through its own pinned memory. An H100 (OpenCL 3.0 CUDA, driver
580.159.04), the hand-written 16-op kernel on 1024 floats and its read, medians of 15
loops of 20: a blocking read 63.0 us; a non-blocking read waited for by polling its
status, as the library's reads are, 80.5 into pageable memory and 57.2 into pinned.
Through the library (a jitted 16-op chain on 1024 floats and its read, medians of 21
loops of 20, the same process): 63.6 us staged against 73.3; a jitted `x * 2.0` and its
read of 1 KiB 57.9 against 66.5, of 256 KiB 81.4 against 114.1, of 1 MiB 186.9 against
211.4 (4 MiB, past STAGED_READ_MAX_BYTES, pageable either way: 446 and 449).

So on accelerators a read of up to STAGED_READ_MAX_BYTES takes a slot of pinned memory,
and its `finish` copies the values out (a fresh array, as before). A slot is the read's
while its `finish` lives (a weak reference to it): whether `finish` ran or an interrupt
dropped it first, the slot is free once it is collected, with nothing to hand back and
no callback to lose. A copy still in flight into a slot given up that way is harmless:
the queue is in order, so the next read into the slot completes after it.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable

import numpy as np
import pyopencl as cl

from .device import DeviceInfo

STAGED_READ_MAX_BYTES = 1 << 20
SMALLEST_SLOT = 1 << 12  # slots come in powers of two from 4 KiB
SLOTS_PER_SIZE = 16  # reads in flight at once per size; more take pageable memory


def staged_reads_wanted(info: DeviceInfo) -> bool:
    """Whether reads on this device go through pinned slots: accelerators (GPUs and the
    like), not CPU devices (their buffers are host memory already) nor simulators.
    FUSION_STAGED_READS=0 turns them off, =1 on for any device but a simulator."""
    asked = os.environ.get("FUSION_STAGED_READS", "").strip()
    if info.is_simulator or asked == "0":
        return False
    return asked == "1" or info.kind != "CPU"


class Slot:
    """One pinned host region: its buffer, the host's mapped view, and the `finish` of
    the read that holds it (a weak reference; None before its first read)."""

    __slots__ = ("buffer", "array", "holder")

    def __init__(self, buffer: cl.Buffer, array: np.ndarray):
        self.buffer, self.array, self.holder = buffer, array, None

    def is_free(self) -> bool:
        return self.holder is None or self.holder() is None


class StagingSlots:
    """The pinned slots of one device runtime, by size. Used under the server lock (the
    taking); a slot frees itself when its holder is collected, on any thread."""

    def __init__(self, context: cl.Context, queue: cl.CommandQueue):
        self.context, self.queue = context, queue
        self.sizes: dict[int, list[Slot]] = {}

    def host_for(self, nbytes: int, dtype: np.dtype) -> tuple[np.ndarray, Slot] | None:
        """A pinned host array of `nbytes` bytes of `dtype` and its slot, or None (a read
        too long, or every slot of its size taken). Lend the slot to the read's `finish`
        (`lend`) before handing that out: till then nothing marks it taken."""
        if nbytes > STAGED_READ_MAX_BYTES or nbytes <= 0:
            return None
        size = max(SMALLEST_SLOT, 1 << (nbytes - 1).bit_length())
        slots = self.sizes.setdefault(size, [])
        slot = next((s for s in slots if s.is_free()), None)
        if slot is None:
            if len(slots) >= SLOTS_PER_SIZE:
                return None
            try:
                slot = self._make(size)
            except cl.Error:  # (no pinned memory to be had: the read takes pageable memory)
                return None
            slots.append(slot)
        return slot.array[:nbytes].view(dtype), slot

    @staticmethod
    def lend(slot: Slot, finish: Callable[[], np.ndarray]) -> None:
        """Mark `slot` taken until `finish` is collected."""
        slot.holder = weakref.ref(finish)

    def _make(self, size: int) -> Slot:
        # Mapped without blocking: the host pointer is there at once, and the read that
        # writes into it is enqueued after the map on the in-order queue (a blocking map
        # would wait, under the server lock, for all the work enqueued before it).
        buffer = cl.Buffer(self.context, cl.mem_flags.READ_WRITE | cl.mem_flags.ALLOC_HOST_PTR, size)
        array, _ = cl.enqueue_map_buffer(self.queue, buffer, cl.map_flags.READ | cl.map_flags.WRITE, 0, (size,),
                                         np.uint8, is_blocking=False)
        return Slot(buffer, array)

    def nbytes(self) -> int:
        """Pinned bytes held (free or lent)."""
        return sum(size * len(slots) for size, slots in self.sizes.items())
