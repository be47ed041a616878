"""The cyclic garbage collector while several threads record.

Each op a thread records keeps a few objects the collector tracks (the handle, its drop
ref, the op, the queue's entry) until the thread's queue is registered. Alone, a thread
registers its queue within a batch, and most of them die young. With several threads the
interpreter switches between them every few milliseconds, a queue waits while its
thread is switched out (or while another thread holds the lock), and the collector's
young collections, which come every 700 new objects by default (about every 120 ops),
find thousands of queued ops alive: it promotes them, walks them again in older
collections, and the full collections they bring walk the whole heap. That cost 8
threads recording chains a quarter of their throughput (BENCHMARKS.md, "The collector
and 8 recording threads").

So while two or more threads have queues, the first threshold is raised to at least
RECORDING_THRESHOLD (fewer young collections, and most queued ops die before one comes)
and the second to at least RECORDING_SECOND (the queued ops a young collection promotes
die before a middle one walks them, and the full collections that count the middle ones
come as seldom), and each is put back when one thread is left, unless the program
changed it meanwhile. A
thread counts from its first recorded op until it has ended and a later locked section
took its queue away: a pool's worker that recorded once keeps the threshold raised while
it lives.
`FUSION_GC_THRESHOLD` sets the raised value; 0 leaves the collector alone.
"""

from __future__ import annotations

import gc
import os

from fusion_server.errors import FusionError

RECORDING_THRESHOLD = 7000
# 8 threads recording chains (a probe of benchmarks.recurring's workers, medians of 9 to
# 15 samples): with the second threshold at CPython's 10, 0.80 and 0.74 of one thread's
# ops/s on a 2-core Zen 4, 0.79 on an H100's 16-CPU host, the middle collections 0.2 to
# 0.75 us an op; at 100, 0.80 and 0.80 there, 0.90 on the H100's host, none.
RECORDING_SECOND = 100


def _setting() -> int:
    raw = os.environ.get("FUSION_GC_THRESHOLD", "").strip()
    if not raw:
        return RECORDING_THRESHOLD
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise FusionError(f"FUSION_GC_THRESHOLD={raw!r}: expected a count of objects (0: leave the collector alone)")
    return value


class CollectorTuning:
    """Raises the collector's first two thresholds while several threads record (see the
    module docstring); one per process, shared by every device's client. Its state
    changes without a lock, from threads recording and from locked sections: a thread
    switch between two changes can leave the thresholds raised, or not, until the next
    change (a performance setting only; values never depend on it)."""

    def __init__(self, threshold: int | None = None):
        self.threshold = threshold  # (None: FUSION_GC_THRESHOLD's, read by `configure`)
        # (the first and second thresholds to put back while raised; None for one left as it was)
        self.saved: tuple[int, int | None] | None = None
        self.clients: set[int] = set()  # ids of the clients that have several threads recording

    def configure(self) -> None:
        """Read FUSION_GC_THRESHOLD, once (a client calls this as it is made)."""
        if self.threshold is None:
            self.threshold = _setting()

    def threads_recording(self, client_id: int, several: bool) -> None:
        """Client `client_id` has several recording threads now (or no longer)."""
        if several:
            self.clients.add(client_id)
        else:
            self.clients.discard(client_id)
        self._apply()

    def retune(self, threshold: int) -> None:
        """Raise to `threshold` from now on (0: leave the collector alone), the current
        thresholds put back first if raised (benchmarks compare both)."""
        clients, self.clients = self.clients, set()
        self._apply()
        self.threshold, self.clients = threshold, clients
        self._apply()

    def _apply(self) -> None:
        self.configure()
        current = gc.get_threshold()
        if self.clients and self.saved is None:
            if 0 < current[0] < self.threshold:  # (0: the program turned collection off)
                second = current[1] if current[1] < RECORDING_SECOND else None
                self.saved = (current[0], second)  # (first: an interrupt after it puts nothing wrong back)
                gc.set_threshold(self.threshold, RECORDING_SECOND if second is not None else current[1], *current[2:])
        elif not self.clients and self.saved is not None:
            (first, second), self.saved = self.saved, None
            # (each as the program left it if it set its own meanwhile; the third as it is now)
            gc.set_threshold(first if current[0] == self.threshold else current[0],
                             second if second is not None and current[1] == RECORDING_SECOND else current[1],
                             *current[2:])


tuning = CollectorTuning()
