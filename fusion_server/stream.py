"""A stream: one calling thread's queue of ops and the fusers that cut it into blocks."""

from __future__ import annotations

import logging

from .compiling import NeedsCompile
from .context import BlockContext, Plan
from .fusers.base import Fuser
from .ir import OperationIr
from .plans import FLUSH, BlockSigner, Decision, PlanNode, PlanRejected, PlanStore

log = logging.getLogger("fusion_server")


class Stream:
    """Ops of one thread, in order; blocks run as soon as every fuser has closed.

    `queue` holds every op not yet run. Either the stream follows its plan store
    (`node` is set: the queue is a stored sequence so far, and no fuser has seen it) or
    its fusers explore (they have seen the first `offered` ops). Running a block can stop
    with NeedsCompile before anything changes; `advance` picks up from exactly that state
    once the kernel is built.
    """

    def __init__(self, stream_id: int, fusers: list[Fuser], store: PlanStore | None = None):
        self.id = stream_id
        self.queue: list[OperationIr] = []
        self.offered = 0
        self.fusers = fusers
        self.store = store  # None: always explore
        self.node: PlanNode | None = store.root if store is not None else None
        self.signer: BlockSigner | None = None
        # Set while exploring a block whose stored plan was rejected (more values alive
        # than usual): that one-off decision is not stored over the usual one.
        self.rejected = False
        self.tape = None  # set while the stream captures (see capture.py): its blocks are recorded

    def register(self, op: OperationIr, ctx: BlockContext) -> None:
        queue = self.queue
        queue.append(op)
        node = self.node
        if node is not None:  # following the store: no fuser sees the op
            signer = self.signer
            if signer is None:
                signer = self.signer = BlockSigner(ctx.entries)
            child = node.children.get(signer.sign(op))
            if child is not None:
                self.node = child
                if child.decision is not None:
                    self.advance(ctx)  # replays the decision
                return
            self._explore(ctx)  # diverged: the fusers see the queue from its start
        elif self.offered == len(queue) - 1:
            # The common case, without advance()'s loop: offer the new op, and stop here
            # if some fuser took it.
            self.offered += 1
            accepted = False
            for fuser in self.fusers:
                if not fuser.closed and fuser.offer(op, ctx):
                    accepted = True
            if accepted:
                return
        self.advance(ctx)

    def advance(self, ctx: BlockContext, flush_reason: str | None = None) -> None:
        """Offer unseen ops, run blocks whose fusers have all closed; with a reason, run all."""
        fusers = self.fusers
        while True:
            queue = self.queue
            node = self.node
            if node is not None:
                if node.decision is None and flush_reason and queue:
                    node = node.children.get(FLUSH)
                    if node is None:
                        self._explore(ctx)
                        continue
                    self.node = node
                if node.decision is not None:
                    self._replay(ctx, node)
                    continue
                return
            if self.offered:
                for fuser in fusers:
                    if not fuser.closed:
                        break
                else:  # every fuser has closed: run the best block
                    self._run_best(ctx, flush_reason or "no fuser takes the next op", flush_reason is not None)
                    continue
            if self.offered < len(queue):
                op = queue[self.offered]
                self.offered += 1
                for fuser in fusers:
                    if not fuser.closed:
                        fuser.offer(op, ctx)
                continue
            if flush_reason and queue:
                for fuser in fusers:
                    if not fuser.closed:
                        fuser.closed = True
                        fuser.close_reason = flush_reason
                continue
            return

    def flush(self, ctx: BlockContext, why: str = "flush") -> None:
        """Run everything queued."""
        self.advance(ctx, why)

    # -- exploring ---------------------------------------------------------------------
    def _explore(self, ctx: BlockContext, rejected: bool = False) -> None:
        """Stop following the store: the fusers see the queue from its start."""
        self.rejected = rejected
        self.node = None
        self.signer = None
        self.offered = 0
        ctx.counters["plan_misses"] += 1

    def _run_best(self, ctx: BlockContext, why: str, flushing: bool = False) -> None:
        best = max(self.fusers, key=lambda f: f.score(), default=None)
        if best is not None and best.score() > 0:
            plan = best.finish(ctx)
            reason = best.close_reason or why
            chosen = best.name
            decision = Decision(self.fusers.index(best), len(plan.ops), reason)
        else:
            plan = ctx.single_plan(self.queue[0])
            reason = why
            chosen = "none (runs alone)"
            decision = Decision(-1, 1, reason)
        note = ""
        if ctx.recorders:  # for inspect()'s explanation: who took the block, and why it ended
            scores = ", ".join(f"{f.name} {f.score()}" for f in self.fusers)
            note = f"fuser {chosen} (scores: {scores}); closed: {reason}"
        path = self._path(ctx, decision.count, flushing) if self.store is not None and not self.rejected else None
        try:
            ctx.run_plan(plan, note, self.tape)  # may raise NeedsCompile: then nothing here has changed
        except (NeedsCompile, PlanRejected):
            raise
        except BaseException:
            self._ran(ctx, plan, reason)  # the block is settled (failed): it never runs again
            raise
        ctx.counters["explorations"] += 1
        if path is not None:
            self.store.store(path, decision)
        self._ran(ctx, plan, reason)

    def _path(self, ctx: BlockContext, count: int, flushing: bool) -> list[tuple] | None:
        """The signatures of the block's ops and of what ended it (the next op, or a
        flush); None if one has none. A block that ends at the end of the queue without a
        flush (an op no fuser takes) has no ending: it runs as soon as it is matched."""
        signer = BlockSigner(ctx.entries)
        path = []
        for op in self.queue[:count + 1]:
            sig = signer.sign(op)
            if sig is None:
                return None
            path.append(sig)
        if len(self.queue) == count and flushing:
            path.append(FLUSH)
        return path

    # -- following the store -----------------------------------------------------------
    def _replay(self, ctx: BlockContext, node: PlanNode) -> None:
        """Run the first ops of the queue as the store says, without exploring."""
        decision = node.decision
        ops = self.queue[:decision.count]
        if decision.fuser < 0:
            plan = ctx.single_plan(ops[0])
        else:
            fuser = self.fusers[decision.fuser]
            replay = getattr(fuser, "replay", None)  # a fuser whose rules look at shapes alone
            plan = replay(ops, node.cache) if replay is not None else None
            if plan is None:  # the fuser checks each op again (its rules look at more than shapes)
                fuser.reset()
                if not all(fuser.offer(op, ctx) for op in ops) or fuser.score() != len(ops):
                    # It does not fit now (more values alive than usual, say): explore this
                    # once, without storing the one-off decision over the usual one.
                    fuser.reset()
                    self._explore(ctx, rejected=True)
                    return
                plan = fuser.finish(ctx)
                fuser.reset()
        reason = f"{decision.reason} (plan store)"
        note = ""
        if ctx.recorders:
            name = self.fusers[decision.fuser].name if decision.fuser >= 0 else "none (runs alone)"
            note = f"fuser {name} (from the plan store); closed: {reason}"
        try:
            ctx.run_plan(plan, note, self.tape)  # may raise NeedsCompile: then nothing here has changed
        except PlanRejected:
            self._explore(ctx, rejected=True)
            return
        except NeedsCompile:
            raise
        except BaseException:
            self._ran(ctx, plan, reason)  # the block is settled (failed): it never runs again
            raise
        ctx.counters["plan_hits"] += 1
        self._ran(ctx, plan, reason)

    def _ran(self, ctx: BlockContext, plan: Plan, reason: str) -> None:
        """The block ran: drop its ops, and follow the store again if the rest matches."""
        count = len(plan.ops)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "stream %s: block of %d ops (%s) closed: %s",
                self.id, count, ", ".join(getattr(o, "name", type(o).__name__) for o in plan.ops), reason,
            )
        self.queue = self.queue[count:]
        ctx.in_flight = None
        self.restart(ctx)

    def restart(self, ctx: BlockContext) -> None:
        """Explore (or follow the store for) the queue as it is, from its start."""
        self.offered = 0
        for fuser in self.fusers:
            fuser.reset()
        self.node = None
        self.signer = None
        self.rejected = False
        if self.store is not None:
            self._follow(ctx)

    def _follow(self, ctx: BlockContext) -> None:
        """Follow the store from its root if the queue so far is a stored sequence (up
        to a decision, which advance() then replays)."""
        node = self.store.root
        signer = BlockSigner(ctx.entries)
        for op in self.queue:
            node = node.children.get(signer.sign(op))
            if node is None:
                return  # explore: advance() offers the queue to the fusers
            if node.decision is not None:
                break
        self.node = node
        self.signer = signer
