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
    """Ops of one thread, in order; blocks run as soon as every fuser has closed."""

    def __init__(self, stream_id: int, fusers: list[Fuser], single: Callable[[OperationIr], Plan]):
        self.id = stream_id
        self.queue: list[OperationIr] = []
        self.fusers = fusers
        self.single = single  # the plan for an op that no fuser takes

    def register(self, op: OperationIr, server: FusionServer) -> None:
        self.queue.append(op)
        still_open = False
        for fuser in self.fusers:
            if not fuser.closed and fuser.offer(op, server):
                still_open = True
        if not still_open:
            self._run_best(server, "no fuser takes the next op")

    def flush(self, server: FusionServer, why: str = "flush") -> None:
        """Run everything queued."""
        while self.queue:
            for fuser in self.fusers:
                if not fuser.closed:
                    fuser.closed = True
                    fuser.close_reason = why
            self._run_best(server, why)

    def _run_best(self, server: FusionServer, why: str) -> None:
        best = max(self.fusers, key=lambda f: f.score(), default=None)
        if best is not None and best.score() > 0:
            plan = best.finish(server)
            reason = best.close_reason or why
        else:
            plan = self.single(self.queue[0])
            reason = why
        count = len(plan.ops)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "stream %s: block of %d ops (%s) closed: %s",
                self.id, count, ", ".join(getattr(o, "name", type(o).__name__) for o in plan.ops), reason,
            )
        rest = self.queue[count:]
        self.queue = []
        for fuser in self.fusers:
            fuser.reset()
        server.run_plan(plan)
        for op in rest:
            self.register(op, server)
