"""FusionClient: the one mutex-guarded channel from user code to a device's server.

Lock discipline (the rules every locked section follows):

1. A locked section only enqueues (kernels, copies, markers). It never waits for the
   device: `read` and `sync` release the lock first and wait after (invariant 1).
2. A dropped handle never takes the lock: its weak reference's callback (a deque's
   `append`, see tensor.DropRef) pushes it onto `drops`, and the next locked section, on
   any thread, drains it first (invariant 2). The garbage collector may drop a handle
   inside a locked section; that only appends to the deque.
3. The lock is not re-entrant, and re-entry is detected: code running under the lock
   (a custom launch function, a fuser) that calls back into the client gets a
   ReentrancyError instead of a deadlock (invariant 3).
4. A client belongs to the process that made it; after a fork it raises instead of
   touching a lock or a device context inherited in an unknown state.
"""

from __future__ import annotations

import atexit
import functools
import itertools
import os
import threading
import weakref
from collections import deque
from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from itertools import repeat, starmap
from typing import Any, TypeVar

import numpy as np

from fusion_server.compiling import NeedsCompile
from fusion_server.errors import DroppedTensorError, FusionError, ReentrancyError
from fusion_server.ir import OperationIr, TensorIr, ViewOp, outputs_of
from fusion_server.runtime import waits
from fusion_server.server import MODES, FusionServer, Recorder

from . import _collector, _traced

T = TypeVar("T")
_get_ident = threading.get_ident
_live_clients: weakref.WeakSet[FusionClient] = weakref.WeakSet()


def _mark_forked() -> None:
    # The child inherits the lock in whatever state it was and a device context the
    # driver does not support across fork: every client refuses further use.
    for client in list(_live_clients):
        client._forked = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_mark_forked)


def _close_all_at_exit() -> None:
    for client in list(_live_clients):
        client.close_at_exit()


# Daemon threads may still be queuing work or building kernels when the interpreter
# exits; a driver torn down under them can crash the process.
atexit.register(_close_all_at_exit)


MAX_PENDING_DROPS = 256  # registering drains dropped ids only past this many
# The inbox channel (see FusionClient.record): a recording thread registers its queue once
# it holds this many ops and the lock is free (else it records on), and waits for the
# lock past INBOX_MAX.
# Waiting sooner trades latency for little: with 8 threads recording chains
# (benchmarks.recurring's, alternated in one process), INBOX_MAX 256 against 4096 gave
# 0.62 against 0.62 of one thread's ops/s and a p99 of 2.1 ms against 29 us on an H100's
# host, 0.64 against 0.61 and 2.2 ms against 30 us on PoCL 5 there; only Intel's CPU
# runtime on a 2-core Zen 4 gained (0.86 to 0.94 against 0.57 to 0.74, p99 150 us).
INBOX_BATCH = 64
INBOX_MAX = 4096
# A thread whose queue holds a batch and failed to take the lock tries again BATCH_RETRY
# ops later. A lock that looks free may not be: a thread blocked on it is handed it by
# the operating system as it is released, and marks it taken only once it has the GIL
# back, which the recording thread holds for up to a switch interval (5 ms). Tried at
# every op, the recording threads failed to take it 2,553 times in 2,556 while 8 threads
# recorded 3,000 ops each (Intel's CPU runtime, a 2-core AMD EPYC); 264 tries with the
# retry. A failed try costs 0.44 us: about 1% of those threads' time, within that
# machine's noise.
BATCH_RETRY = 8
# A thread recording alone (no other thread has a queue) takes the lock once per
# LONE_BATCH ops instead: fewer, longer runs for the run cache, whose work per batch is
# partly fixed. The 2,048-op chain with launches (benchmarks.host_cost, PoCL 3.0): on Zen
# 3 5.31 to 5.44 us per op in batches of 64, 4.66 to 5.12 in 128, 4.17 to 4.30 in 256; on
# Zen 4 3.64 to 3.72 in 64, 3.12 to 3.16 in 256. Not with other threads: 8 threads
# recording in batches of 256 made 0.40 to 0.71 of one thread's ops/s, against 0.59 to
# 1.19 in batches of 64 (benchmarks.recurring, same runs), a longer locked section making
# the others wait in a convoy.
LONE_BATCH = 256
CHANNELS = ("inbox", "lock")  # the first is the default (see docs/architecture.md, "The channel")
# `call(flushing=...)` for a thread's queue registered as a batch (no flush follows), and
# for a flush or sync of all its work; any other value is the id of a tensor read.
BATCH = -2
ALL = -1


def _nothing(server: FusionServer) -> None:
    return None


def _drop_head(queue: deque, count: int) -> None:
    """Take the first `count` items off `queue` in one call, so that an interrupt leaves
    them all queued or all gone (one raised in a `__del__` that a popped handle runs is
    not raised here), in time of `count`: a queue that grew long while other threads held
    the lock (3,000 ops, say) goes by batches, and copying its rest for each batch cost
    0.2 us per op."""
    deque(starmap(queue.popleft, repeat((), count)), maxlen=0)


def _exit_nothing(self: Any, *exc: Any) -> None:
    return None


def _lock_if_free(lock: Any) -> tuple[Any, Any]:
    """Two context managers for `with taken as got, (held if got else NOT_HELD):`, which
    takes `lock` if it is free, without waiting, binds whether it did to `got`, and gives
    it back as the block ends however it ends. `taken.__enter__` is the lock's own
    `acquire(False)` and `held.__exit__` its own `__exit__` (a release), each reached
    through a static method (a partial, for the first): C code, called by the `with`
    statement itself. Between taking the lock and entering `held` the interpreter runs
    only loads, a store and a forward jump on one line: no call, so no signal handler's
    exception, and no new line, so no line event for a debugger's or coverage's tracer
    (`got = lock.acquire(False)` then `try:` allows both)."""
    taken = type("LockIfFree", (), {"__slots__": (), "__enter__": staticmethod(functools.partial(lock.acquire, False)),
                                    "__exit__": _exit_nothing})()
    held = type("LockHeld", (), {"__slots__": (), "__enter__": staticmethod(tuple),
                                 "__exit__": staticmethod(lock.__exit__)})()
    return taken, held


NOT_HELD = nullcontext()


def _sequence_after(queue: deque, count: int) -> int | None:
    """The sequence number of the queue's op after its first `count` (None: there is none)."""
    return queue[count][0] if count < len(queue) else None


class FusionClient:
    """Serializes every call into one FusionServer; see the module docstring."""

    def __init__(self, server: FusionServer):
        self.server = server
        self.fp64 = server.info.fp64
        # How long a main-thread wait polls before a helper thread takes it over (waits.py).
        self.spin_seconds = waits.SPIN_SECONDS if server.info.kind == "CPU" else waits.ACCELERATOR_SPIN_SECONDS
        self.drops: deque[int] = server.drops  # filled by Tensor.__del__, without the lock
        # Every handle's DropRef calls this one bound method: a new one per handle would be
        # one more object for the cyclic collector per op (see tensor.track).
        self.drop_callback = self.drops.append
        self.unpins: deque = server.unpin_inbox  # leases whose holders were collected (reads, exports, captures)
        self._lock = threading.Lock()
        self._lock_if_free, self._lock_held = _lock_if_free(self._lock)  # (the batch call's: see there)
        self._owner: int | None = None  # the thread holding the lock
        # Ops recorded without the lock, per thread, in the order they were made, with the
        # handles they read (kept alive until the op is registered): (sequence number, op,
        # *handles), one tuple (each object an op keeps queued is one more for the cyclic
        # collector: see tensor.track). The sequence is one for all threads: it orders ops
        # across queues.
        self.queues: dict[int, deque] = {}
        self.batch_ops = INBOX_BATCH  # ops a batch registers: LONE_BATCH while one thread records
        self._retry_at: dict[int, int] = {}  # per thread: the queue's length at which the batch call is tried again
        self._sequence = itertools.count()
        channel = os.environ.get("FUSION_CHANNEL", "").strip() or CHANNELS[0]
        if channel not in CHANNELS:
            raise FusionError(f"FUSION_CHANNEL={channel!r}: expected one of {CHANNELS}")
        self.channel = channel  # (sets `record`: see the property)
        _collector.tuning.configure()  # (FUSION_GC_THRESHOLD checked here, as FUSION_CHANNEL is)
        self._forked = False
        self._closed = False
        waits.guards.append(self._check_not_holding)
        _live_clients.add(self)

    # -- the lock ---------------------------------------------------------------------
    # Every locked section is `with self._lock:` with the owner set inside it and cleared
    # in its `finally`: acquiring and entering the block, and clearing and releasing, are
    # not split by an interrupt (a signal handler's exception is raised between byte
    # codes, and the lock is taken and given back by the `with` itself). `call`'s block is
    # `_section`, called on the `with` line, so that a tracer's line event cannot fall
    # between the block and the release either. The batch call, which must not wait,
    # takes the lock in `_batch_if_free` (see `_lock_if_free`). Any exception
    # other than the library's own errors that leaves a section, KeyboardInterrupt and
    # SystemExit included, first lets the server recover (`_recover`).
    def _check(self, me: int) -> None:
        """Raise instead of entering: re-entry from under the lock, after exit, after fork."""
        if self._owner == me and self._lock.locked():
            raise ReentrancyError(
                "fusion_server was called from code running under its own lock (a custom "
                "launch function or fuser); enqueue work on the given queue instead"
            )
        if self._closed:
            if threading.current_thread().daemon:
                self._lock.acquire()  # held until the process ends: this thread just stops
            raise FusionError("the interpreter is exiting: fusion_server accepts no more work")
        if self._forked:
            raise FusionError(
                "this device's client was created in another process; fusion_server "
                "cannot be used after fork (use the 'spawn' start method)"
            )

    def _arrived(self) -> bool:
        """Whether drops, unpins or ended threads wait to be applied (see `_drain`)."""
        return bool(self.drops or self.server.ended_streams or self.unpins)

    def _drain(self) -> None:
        """Apply what arrived without the lock: drops, unpins, ended threads' streams."""
        server = self.server
        server.drain_drops()
        unpins = self.unpins
        while unpins:
            server.unpin(unpins[0])  # (popped once applied: an interrupt loses none)
            unpins.popleft()
        if server.ended_streams:
            # Rare and off every hot path: build under the lock rather than leave it queued.
            server.compile_under_lock = True
            try:
                for sid in list(server.ended_streams):  # what the thread recorded, first
                    queue = self.queues.get(sid)
                    if queue:
                        self._register_queue(sid, queue)
                    if queue is not None and not queue:
                        del self.queues[sid]  # (its id may serve a new thread, which marks itself)
                        self._retry_at.pop(sid, None)
                        self._size_batches()
                server.flush_ended_streams()
            finally:
                server.compile_under_lock = False

    def _recover(self, exc: BaseException) -> None:
        """Leave the server consistent after `exc` interrupted a locked section (the
        library's own errors are raised where nothing is half done)."""
        if isinstance(exc, FusionError):
            return
        for _ in range(1000):
            try:
                self.server.recover(exc, self.queues)
                self._size_batches()  # (an interrupt may have fallen between a queue's removal and it)
                return
            except Exception:
                raise  # a bug in the repair itself: never hide it
            except BaseException:  # interrupted again while repairing: repair from the start
                continue
    def close_at_exit(self) -> None:
        """Stop taking work, let builds in flight finish, wait for the device, and keep the
        lock: threads still running block on it instead of entering the driver."""
        if self._forked or self._closed:
            return
        if not self._lock.acquire(timeout=30):
            return  # a thread is stuck inside a locked section: leave everything as it is
        self._closed = True
        runtime = self.server.runtime
        runtime.programs.closing = True
        runtime.programs.wait_idle()
        waits.drain_at_exit(runtime.queue)

    def holds_lock(self) -> bool:
        """True when the calling thread is inside a locked section of this client (an
        owner left behind by a section a tracer's exception cut at its last line holds
        nothing: the lock is free)."""
        return self._owner == _get_ident() and self._lock.locked()

    def _check_not_holding(self) -> None:
        if self.holds_lock():
            raise FusionError("a device wait was attempted while holding the server lock")

    def call(self, fn: Callable[..., T], *args: Any, drain_after: bool = False, flushing: int | None = None) -> T:
        """Run `fn(server, *args)` in a locked section.

        When it needs a kernel built (NeedsCompile, raised before anything changed), the
        lock is released, the kernel is built, and `fn` runs again: every server entry
        point resumes where it stopped. What arrived without the lock (drops, unpins,
        ended threads) is applied first, or with `drain_after` once `fn` has returned:
        for an enqueue the device should start as soon as it can (a jitted call's).
        `flushing`: `fn` runs this thread's queued work (ALL of it; else the id of a tensor
        it reads), or the queue is a BATCH registered on the way; the run cache may then
        replay it (`_run_queue`).
        """
        me = _get_ident()
        while True:
            self._check(me)
            # (One line: a tracer's line event at the next would come before the release.)
            with self._lock: result, job = self._section(me, fn, args, drain_after, flushing)
            if job is None:
                return result
            job.run()  # outside the lock: other threads keep working meanwhile

    def _run_batches(self, stream_id: int) -> None:
        """A batch call (`call`'s BATCH): the thread's queue goes to the run cache
        `batch_ops` ops at a time, each batch starting where the stream's fusers cut
        blocks by count (the ops up to there are registered first: server.batch_gap), so
        that a loop's batches look alike however long a wait for the lock let the queue
        grow. Fewer ops left than a batch stay queued. A queue the run cache cannot take
        now (or whose stream does not cut by count) is registered whole, as usual."""
        server = self.server
        queue = self.queues[stream_id]
        batch = self.batch_ops
        while len(queue) >= batch:
            gap = server.batch_gap(stream_id) if server.takes_runs(stream_id) else None
            if gap is None:
                self._register_queue(stream_id, queue)
                return
            if gap:
                self._register_queue(stream_id, queue, before=queue[gap][0])
            elif not self._run_queue(stream_id, BATCH, batch):
                self._register_queue(stream_id, queue, before=_sequence_after(queue, batch))

    def _size_batches(self) -> None:
        """Batches of LONE_BATCH ops while one thread has a queue, INBOX_BATCH with more
        (see LONE_BATCH); with more, the cyclic collector's first two thresholds raised
        (clients/_collector.py). Set without the lock as queues come and go: a thread that
        reads it meanwhile only registers one batch at the other size."""
        alone = len(self.queues) <= 1
        self.batch_ops = LONE_BATCH if alone else INBOX_BATCH
        _collector.tuning.threads_recording(id(self), not alone)

    def _run_queue(self, stream_id: int, flushing: int, count: int | None = None) -> bool:
        """Before a flush, or as a batch is registered (`call`'s `flushing`): replay the
        thread's queue (its first `count` ops, if given) from the run cache, or capture it
        there, if it is a recurring run (fusion_server/runs.py): True, and those ops have
        left the queue. Else nothing happens (False), and they are registered as usual."""
        tid = flushing if flushing >= 0 else None
        server = self.server
        if self._arrived():
            # First: what died frees its buffers before the run takes new ones (the queue
            # keeps every handle its ops read alive), and an ended thread's queue that reads
            # a value of the run registers the run's ops now, not after it was judged a run.
            self._drain()
        queue = self.queues.get(stream_id)
        if not queue:
            return False
        # (a list of the head, when the run is not the whole queue: the same items, so the
        # liveness count sees the later ops' reads as references from beyond the run)
        run_ops = queue if count is None or count >= len(queue) else list(itertools.islice(queue, count))
        run = server.find_run(stream_id, run_ops, tid, flushing == BATCH)
        if run is None:
            return False
        variant = run.liveness(run_ops, server.handle_refs)
        whole = run_ops is queue
        del run_ops  # (its items hold handles: they die with the queue's, as the ops leave it)
        if server.replay_run(stream_id, run, variant):
            if whole:
                queue.clear()
            else:
                _drop_head(queue, count)
            server.finish_replay(run)
            return True
        run.dead = ()  # (their handles die as the queue is registered, as usual)
        tape = None
        try:
            tape = server.capture_run(stream_id, run, variant)
            if tape is None:
                return False
            self._register_queue(stream_id, queue, None if whole else _sequence_after(queue, count))
            why = f"tensor {tid} is read" if tid is not None else "flush" if flushing == ALL else \
                f"a batch of {len(run.outputs)} ops recurs"
            server.end_run_capture(stream_id, tape, run, variant, why, flushing == BATCH)
            return True
        except BaseException:
            if tape is not None:  # (else, an interrupt: the recovery ends the capture)
                server.abort_capture(stream_id, tape)
            raise

    def _register_queue(self, stream_id: int, queue: deque, before: int | None = None) -> None:
        """Register a thread's recorded ops (under the lock), in order, in its stream; with
        `before`, only those made before that sequence number. An op leaves its queue only
        once registered: after a kernel build or an interrupt, the next locked section
        resumes with it (the server recognizes an op it has queued already; after an
        interrupt, its recovery takes such ops off the queues). An op that
        reads a tensor still in another thread's queue has the ops made before it, on every
        thread, registered first; an op the server refuses fails its own outputs."""
        server = self.server
        while queue:
            server.register_run(stream_id, queue, before)  # the common ops, in a run
            if not queue:
                return
            head = queue[0]
            seq, op = head[0], head[1]
            if before is not None and seq >= before:
                return
            if op is not None:  # (None: a handle kept alive until the ops before it are registered)
                try:
                    server.register(stream_id, op)
                except DroppedTensorError as exc:
                    if self._register_writer_of(exc.tid, before=seq):
                        continue  # its input was another thread's, registered now: again
                    server.fail_unregistered(op, exc)
                except (NeedsCompile, ReentrancyError):
                    raise
                except Exception as exc:  # noqa: BLE001 (an op that cannot be queued: its values fail)
                    server.fail_unregistered(op, exc)
            queue.popleft()

    def _with_writers(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` under the lock; a tensor it names that another thread recorded and
        has not registered yet has the queues registered up to its op, in order, and `fn`
        runs again (the server's entry points look their tensors up before they change
        anything)."""
        while True:
            try:
                return fn(*args)
            except DroppedTensorError as exc:
                if not self._register_writer_of(exc.tid):
                    raise

    def _register_writer_of(self, tid: int | None, before: int | None = None) -> bool:
        """Register every thread's ops up to the queued op that makes tensor `tid` (made
        before `before`, if given), oldest first; False, registering nothing, if no queue
        holds it. Registering runs the blocks that close, and an interrupt while another
        thread's block runs here would fail that thread's work: not for an id nobody
        queued (one whose op an interrupt cut before it was queued)."""
        if tid is None:
            return False
        for queue in list(self.queues.values()):
            for seq, op, *_ in list(queue):
                if before is not None and seq >= before:
                    break
                if op is not None and any(out.id == tid for out in outputs_of(op)):
                    return self._register_all(before=seq + 1)
        return False

    def _register_all(self, before: int | None = None) -> bool:
        """Register every thread's queued ops made before `before` (all, if None), oldest
        first across the threads; True if there were any."""
        found = False
        while True:
            oldest = None
            for sid, queue in list(self.queues.items()):
                if queue and (before is None or queue[0][0] < before) and \
                        (oldest is None or queue[0][0] < oldest[1][0][0]):
                    oldest = (sid, queue)
            if oldest is None:
                return found
            found = True
            sid, queue = oldest
            self._register_queue(sid, queue, queue[0][0] + 1)  # its oldest op alone

    def register_other_threads(self) -> None:
        """Register the ops other threads have queued, oldest first (before an op that
        must come after every read of a value recorded so far)."""
        me = _get_ident()
        if any(q for sid, q in list(self.queues.items()) if sid != me):
            self.call(lambda server: self._register_all())

    def keep_until_registered(self, handle: Any) -> None:
        """Keep `handle` alive until every op recorded so far is registered (a handle that
        took over a rebound tensor's old id, which queued ops may read)."""
        me = _get_ident()
        self.register_other_threads()
        queue = self.queues.get(me)
        if queue:
            queue.append((next(self._sequence), None, handle))

    @property
    def channel(self) -> str:
        """"lock" or "inbox": how `record` queues ops (see `_record_in_queue`)."""
        return self._channel

    @channel.setter
    def channel(self, value: str) -> None:
        if value not in CHANNELS:
            raise ValueError(f"channel must be one of {CHANNELS}, not {value!r}")
        self._channel = value
        # The hot path takes no detour: on the lock channel `record` is `register` itself.
        self.record = self.register if value == "lock" else self._record_in_queue

    # -- the operations -----------------------------------------------------------------
    def _record_in_queue(self, op: OperationIr, *reads: Any) -> None:
        """Queue `op`, whose input handles are `reads`: the hot path of every element-wise
        op, reduction and matmul. On the inbox channel the op joins this thread's queue
        without the lock (the handles ride along, so no input dies before the op is counted
        as its reader); the thread takes the lock once per batch (`batch_ops`), and skips it
        while another thread holds it (its next locked section registers them). Every
        locked section of the thread registers its queue first. The lock channel registers
        each op at once, as `register` does."""
        me = _get_ident()
        if self._owner == me or self._forked or self._closed:
            self._check(me)
        queue = self.queues.get(me)
        if queue is None:  # this thread's first op: its stream is flushed when it ends
            queue = self.queues[me] = deque()
            self._size_batches()
            self.server.mark_thread(me)
        queue.append((next(self._sequence), op) + reads)
        n = len(queue)
        if n >= self.batch_ops:
            if n >= INBOX_MAX:
                self.call(_nothing, flushing=BATCH)
            # (the lock checked here first: a long queue meets a held lock at every op;
            # after a failed try, tried again BATCH_RETRY ops later, or at once if the
            # queue was registered meanwhile and is a batch again: see BATCH_RETRY)
            elif not self._lock.locked() and not 0 < self._retry_at.get(me, 0) - n <= BATCH_RETRY \
                    and not self._batch_if_free(me):
                self._retry_at[me] = n + BATCH_RETRY

    def _batch_if_free(self, me: int) -> bool:
        """The batch call of a thread whose queue holds a batch: registered now if the lock
        is free, else left queued for the thread's next locked section, without waiting
        (False).
        Why never wait: a thread blocked on the lock is handed it by the operating system
        when it is released, before that thread has the GIL back; the recording thread
        that holds the GIL and saw the lock free then found it taken, blocked in turn, and
        the GIL changed hands at every step. The `with` line takes the lock and gives it
        back (see `_lock_if_free`); its block is on that line, with no `try` (whose first
        instruction, a jump's target, the interpreter leaves outside the `with`'s cover,
        where a tracer's line event can raise)."""
        while True:
            # (One line: a tracer's line event at the next would come before the release.)
            with self._lock_if_free as got, (self._lock_held if got else NOT_HELD): job = got and self._batch(me)
            if not job:
                return got
            job.run()  # outside the lock; then the batch again, if the lock is free

    def _section(self, me: int, fn: Callable[..., T], args: tuple, drain_after: bool,
                 flushing: int | None) -> tuple[T | None, Any]:
        """The body of `call`'s locked section (and of the batch call's), under the lock
        its caller took: (fn's result, None), or (None, the build job a kernel needs first)."""
        try:
            self._owner = me
            queue = self.queues.get(me)
            if flushing is not None and queue:
                if flushing == BATCH or len(queue) >= self.batch_ops:
                    # (a queue that grew while other threads held the lock goes
                    # by batches before a read, as it would have gone without them)
                    self._run_batches(me)
                if flushing != BATCH:
                    self._run_queue(me, flushing)
            queue = self.queues.get(me)
            if queue and flushing != BATCH:  # (a batch call leaves a short tail queued)
                self._register_queue(me, queue)
            if not drain_after and self._arrived():
                self._drain()
            result = self._with_writers(fn, self.server, *args)
            if drain_after and self._arrived():
                self._drain()
            return result, None
        except NeedsCompile as need:
            return None, need.job
        except BaseException as exc:
            self._recover(exc)
            raise
        finally:
            self._owner = None

    def _batch(self, me: int) -> Any:
        """The batch call's section: None, or the build job a kernel needs first."""
        return self._section(me, _nothing, (), False, BATCH)[1]

    def register(self, op: OperationIr, *reads: Any) -> None:
        """Queue `op` now, in a locked section (`reads`, its input handles, are not needed:
        they are alive until this returns). Its output handles exist before this is called,
        so that an interrupt anywhere from here on drops them (a half-registered op is then
        released instead of kept forever)."""
        me = _get_ident()  # the hot path of the lock channel: `call`, spelled out
        if self._owner == me or self._forked or self._closed:
            self._check(me)
        with self._lock:
            self._owner = me
            try:
                if self.queues:
                    queue = self.queues.get(me)
                    if queue:
                        self._register_queue(me, queue)
                server = self.server
                # Drops wait for the next block (or any other call): draining them here
                # would cost every op a call, and only blocks look at what is alive.
                if len(self.drops) > MAX_PENDING_DROPS or server.ended_streams or self.unpins:
                    self._drain()
                self._with_writers(server.register, me, op)
                return
            except NeedsCompile as need:
                job = need.job
            except BaseException as exc:
                self._recover(exc)
                raise
            finally:
                self._owner = None
        job.run()
        self.call(lambda server: server.register(me, op))  # resumes the queued op

    def upload(self, ir: TensorIr, host: np.ndarray) -> None:
        self.call(lambda server: server.upload(ir, host))

    def read(self, tid: int) -> np.ndarray:
        """The tensor's values on the host; the device wait happens outside the lock."""
        if _traced.tracing:
            _traced.refuse_read("reads a tensor's values")
        event, finish = self.call(lambda server: server.read(tid), flushing=tid)
        waits.wait(event, self.spin_seconds)
        return finish()

    def sync(self) -> None:
        """Run this thread's queued work and wait until the device has done it all."""
        if _traced.tracing:
            _traced.refuse_read("waits for the device")
        me = _get_ident()
        event = self.call(lambda server: server.sync(me), flushing=ALL)
        waits.wait(event, self.spin_seconds)

    def flush(self) -> None:
        """Launch this thread's queued work and submit it to the device, without waiting for it."""
        me = _get_ident()
        self.call(lambda server: server.launch_stream(me), flushing=ALL)

    def stats(self) -> dict:
        def counted(server: FusionServer) -> dict:
            out = server.stats()  # (pending_ops: also what threads recorded and have not registered)
            # (a view is no work to run: it only makes an entry when registered)
            out["pending_ops"] += sum(1 for q in list(self.queues.values()) for item in list(q)
                                      if item[1] is not None and type(item[1]) is not ViewOp)
            return out

        return self.call(counted)

    @contextmanager
    def inspect(self):
        """Record every launch on this device while the block runs.

        On exit the calling thread's queue is launched (not waited for), so the record
        covers the work written inside the block.
        """
        rec = Recorder()
        self.call(lambda server: server.recorders.append(rec))
        try:
            yield rec
        finally:
            me = _get_ident()

            def stop(server: FusionServer) -> None:
                server.flush_stream(me, "inspect() ends")
                server.recorders.remove(rec)

            self.call(stop)

    def set_mode(self, mode: str) -> None:
        """Switch between "lazy" (fused) and "eager" (one kernel per op) for all threads."""

        if mode not in MODES:  # (checked here too: an error inside the locked section runs a recovery)
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        # (the same mode again changes nothing: the streams, plans and run cache stay)
        self.call(lambda server: None if server.mode == mode else server.reconfigure("mode changes", mode=mode))
