"""A stream: one calling thread's queue of ops and the fusers that cut it into blocks."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from .fusers.base import Fuser, Plan
from .ir import OperationIr

if TYPE_CHECKING:
    from .server import FusionServer

log = logging.getLogger("fusion_server")


class Stream:
    """Ops of one thread, in order; blocks run as soon as every fuser has closed.

    `queue` holds every op not yet run; the fusers have seen its first `offered` ops.
    Running a block can stop with NeedsCompile before anything changes; `advance` picks
    up from exactly that state once the kernel is built.
    """

    def __init__(self, stream_id: int, fusers: list[Fuser], single: Callable[[OperationIr], Plan]):
        self.id = stream_id
        self.queue: list[OperationIr] = []
        self.offered = 0
        self.fusers = fusers
        self.single = single  # the plan for an op that no fuser takes

    def register(self, op: OperationIr, server: FusionServer) -> None:
        queue = self.queue
        queue.append(op)
        if self.offered == len(queue) - 1:
            # The common case, without advance()'s loop: offer the new op, and stop here
            # if some fuser took it.
            self.offered += 1
            accepted = False
            for fuser in self.fusers:
                if not fuser.closed and fuser.offer(op, server):
                    accepted = True
            if accepted:
                return
        self.advance(server)

    def advance(self, server: FusionServer, flush_reason: str | None = None) -> None:
        """Offer unseen ops, run blocks whose fusers have all closed; with a reason, run all."""
        fusers = self.fusers
        queue = self.queue
        while True:
            if self.offered:
                for fuser in fusers:
                    if not fuser.closed:
                        break
                else:  # every fuser has closed: run the best block
                    self._run_best(server, flush_reason or "no fuser takes the next op")
                    queue = self.queue
                    continue
            if self.offered < len(queue):
                op = queue[self.offered]
                self.offered += 1
                for fuser in fusers:
                    if not fuser.closed:
                        fuser.offer(op, server)
                continue
            if flush_reason and queue:
                for fuser in fusers:
                    if not fuser.closed:
                        fuser.closed = True
                        fuser.close_reason = flush_reason
                continue
            return

    def flush(self, server: FusionServer, why: str = "flush") -> None:
        """Run everything queued."""
        self.advance(server, why)

    def _run_best(self, server: FusionServer, why: str) -> None:
        best = max(self.fusers, key=lambda f: f.score(), default=None)
        if best is not None and best.score() > 0:
            plan = best.finish(server)
            reason = best.close_reason or why
            chosen = best.name
        else:
            plan = self.single(self.queue[0])
            reason = why
            chosen = "none (runs alone)"
        if server.recorders:  # for inspect()'s explanation: who took the block, and why it ended
            scores = ", ".join(f"{f.name} {f.score()}" for f in self.fusers)
            server.block_note = f"fuser {chosen} (scores: {scores}); closed: {reason}"
        server.run_plan(plan)  # may raise NeedsCompile: then nothing here has changed
        count = len(plan.ops)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "stream %s: block of %d ops (%s) closed: %s",
                self.id, count, ", ".join(getattr(o, "name", type(o).__name__) for o in plan.ops), reason,
            )
        self.queue = self.queue[count:]
        self.offered = 0
        for fuser in self.fusers:
            fuser.reset()
