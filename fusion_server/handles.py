"""What the server knows of every tensor id: its storage, layout, status and readers.

A `Storage` is one device buffer (or the promise of one: a pending op will write it).
An `Entry` is a tensor id's view of a storage: shape, dtype, strides and offset in
elements. Views share a storage. A storage's buffer goes back to the pool when no entry
refers to it and nothing pins it (invariant 4).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from operator import attrgetter

import numpy as np

from .errors import DroppedTensorError
from .ir import _STRIDES, TensorIr, contiguous_strides, size_of

PENDING = 0  # an op in a stream will write it
READY = 1  # written, or its writer is enqueued on the in-order queue
FAILED = 2  # the block that writes it failed; `error` says why
# (for maps over many entries and storages at once)
STORAGE_OF = attrgetter("storage")
BUFFER_OF = attrgetter("buffer")
STATUS_OF = attrgetter("status")
NBYTES_OF = attrgetter("nbytes")


class Storage:
    __slots__ = ("buffer", "nbytes", "status", "stream", "error", "refs", "pins", "owned", "writer")

    def __init__(self, nbytes: int, status: int, stream: int | None = None):
        self.buffer = None
        self.nbytes = nbytes
        self.status = status
        self.stream = stream  # the stream whose queue holds the writer, while PENDING
        self.error: BaseException | None = None
        self.refs = 0  # entries that refer to it
        self.pins = 0  # resolved arrays and other outside holders
        self.owned = True  # False: the buffer belongs to the user (imported), never pooled
        self.writer: int | None = None  # id of the op output that writes it, while PENDING


class PinLease(weakref.ref):
    """A pin on `storage` that ends when its referent, the holder (a read's `finish`, a
    resolved array, a host map's span, a trace's tape, a capture's keeper), is collected,
    however the holder's frame ends: the callback, a deque's `append` (C code), queues
    the lease for the next locked section to unpin, as a dropped handle's ref queues its
    id (clients/tensor.DropRef). `pinned` is set in the same line as the pin itself."""

    __slots__ = ("storage", "pinned")


class Entry:
    __slots__ = ("ir", "storage", "strides", "offset", "alive", "readers", "contiguous")

    def __init__(
        self, ir: TensorIr, storage: Storage, strides: tuple[int, ...], offset: int, contiguous: bool
    ):
        self.ir = ir
        self.storage = storage
        self.strides = strides
        self.offset = offset
        self.alive = True  # the client still holds a handle
        self.readers = 0  # queued ops that read it
        self.contiguous = contiguous  # C-contiguous from offset 0
        storage.refs += 1


_object_new = object.__new__


def pending_entry(ir: TensorIr, nbytes: int, stream: int) -> Entry:
    """`Entry(ir, Storage(nbytes, PENDING, stream), contiguous strides, 0, True)` without
    the two __init__ calls: every recorded op makes one, so the slots are set here directly
    (keep them in step with the classes above)."""
    st = _object_new(Storage)
    st.buffer = None
    st.nbytes = nbytes
    st.status = PENDING
    st.stream = stream
    st.error = None
    st.refs = 1
    st.pins = 0
    st.owned = True
    st.writer = ir.id
    e = _object_new(Entry)
    e.ir = ir
    e.storage = st
    e.strides = _STRIDES.get(ir.shape) or contiguous_strides(ir.shape)
    e.offset = 0
    e.alive = True
    e.readers = 0
    e.contiguous = True
    return e


def laid_out(entry: Entry, flat: np.ndarray, lo: int) -> np.ndarray:
    """`entry`'s values as a view of `flat`, the elements lo.. of its buffer (span_of's
    lo) on the host."""
    if entry.contiguous:
        return flat.reshape(entry.ir.shape)
    strides = tuple(s * flat.itemsize for s in entry.strides)
    return np.lib.stride_tricks.as_strided(flat[entry.offset - lo:], entry.ir.shape, strides)


def span_of(shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> tuple[int, int]:
    """The lowest and one-past-highest element a layout touches (offset, offset) if empty."""
    if size_of(shape) == 0:
        return offset, offset
    lo = hi = offset
    for n, s in zip(shape, strides):
        if s > 0:
            hi += (n - 1) * s
        else:
            lo += (n - 1) * s
    return lo, hi + 1


class HandleContainer:
    """The id -> Entry map, with the rules for when an entry and its buffer go away."""

    def __init__(self, free_buffer: Callable[[object, int], None]):
        self.entries: dict[int, Entry] = {}
        self._free_buffer = free_buffer

    def get(self, tid: int) -> Entry:
        entry = self.entries.get(tid)
        if entry is None:
            err = DroppedTensorError(
                f"tensor {tid} is unknown to this device's server (dropped, or from another device)"
            )
            err.tid = tid
            raise err
        return entry

    def new_storage(self, nbytes: int, status: int, stream: int | None = None) -> Storage:
        return Storage(nbytes, status, stream)

    def add(self, ir: TensorIr, storage: Storage, strides=None, offset: int = 0) -> Entry:
        if strides is None:
            strides = contiguous_strides(ir.shape)
        lo, hi = span_of(ir.shape, strides, offset)
        itemsize = ir.dtype.itemsize
        # Invariant 7: no layout may reach outside its buffer (an empty one reaches nothing).
        if hi > lo and (lo < 0 or hi * itemsize > storage.nbytes):
            raise IndexError(
                f"layout of tensor {ir.id} (shape {ir.shape}, strides {strides}, offset "
                f"{offset}) reaches elements [{lo}, {hi}) outside its buffer of "
                f"{storage.nbytes // itemsize} elements"
            )
        strides = tuple(strides)
        contiguous = offset == 0 and strides == contiguous_strides(ir.shape)
        entry = self.entries[ir.id] = Entry(ir, storage, strides, offset, contiguous)
        return entry

    def maybe_release(self, entry: Entry) -> None:
        """Forget `entry` if nobody can use it again; free its storage with the last one.

        The entry of a value still to be written stays until its op has run (the op's
        plan looks it up); a view of such a value goes as soon as it is dead (nothing
        else would look at it again once the value is written)."""
        if entry.alive or entry.readers:
            return
        if entry.storage.status == PENDING and entry.storage.writer == entry.ir.id:
            return
        tid = entry.ir.id
        entries = self.entries
        if entries.get(tid) is entry:
            del entries[tid]
            storage = entry.storage
            storage.refs -= 1
            if storage.buffer is not None:
                self.release_if_unused(storage)
            elif storage.refs <= 0 and storage.pins <= 0:  # (most dead values never got a buffer)
                storage.nbytes = -1

    def release_if_unused(self, storage: Storage) -> None:
        if storage.refs <= 0 and storage.pins <= 0 and storage.nbytes >= 0:
            buffer = storage.buffer
            if buffer is not None and storage.owned:
                # (taken from the storage before the pool has it: an interrupt between the
                # two loses the buffer, which the recovery finds, rather than leaving it
                # both free and held)
                storage.buffer = None
                self._free_buffer(buffer, storage.nbytes)
            storage.nbytes = -1  # released; never again
