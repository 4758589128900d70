"""The snoop side path, and the DCOH's ``idle`` status.

While the engine waits for an internal cache in the middle of an event, the side path answers the snoops
the fast path would (a miss in the snoop filter, the tracker and the work table, or an S line the snoop
leaves in S) on a line the waiting event does not touch, so that a slow cache does not stall them
(docs/dcoh.md, "Snoop side path").

Builders of :meth:`hdl.dcoh.dcoh.DCOH.elaborate` (``ctx``: docs/dcoh.md, "Source layout").
"""

from amaranth.hdl import Cat, Mux, Signal

from cxl.messages import D2HRspOpcode as Rsp

from .encodings import Dispatch
from .engine_tables import keeps_s, legal_snoop

__all__ = ["build_side_path"]


def build_side_path(self, ctx):
    """The side path's lookup, its answer register, and ``idle``."""
    class_fifos, ct, cur, engine, go = ctx.class_fifos, ctx.ct, ctx.cur, ctx.engine, ctx.go
    look_line, look_valid, m, q_len, r = ctx.look_line, ctx.look_valid, ctx.m, ctx.q_len, ctx.r
    replay, replay_go, res, rescan = ctx.replay, ctx.replay_go, ctx.res, ctx.rescan
    rsp_port_sent, scan_report, sf, side_rsp = ctx.rsp_port_sent, ctx.scan_report, ctx.sf, ctx.side_rsp
    side_rsp_op, side_rsp_uqid, tcam, wcam = ctx.side_rsp_op, ctx.side_rsp_uqid, ctx.tcam, ctx.wcam
    work_ready = ctx.work_ready

    # ---- the snoop side path: snoops that change nothing, answered while the engine waits on a cache
    # The engine waits for an internal cache's handshake in the middle of an event (a command, its
    # answer, a cpu_rsp); a cache that holds it back would otherwise stall every snoop, snoop-filter
    # misses included.  While the engine sits in such a state, and the handshake does not complete in
    # this cycle (so it is still there in the next one), the side path looks up the snoop offered on
    # h2d_req without taking it; in the next cycle it takes the snoop if the fast path's rule answers
    # it (a miss in the snoop filter, the tracker and the work table, or an S line the snoop leaves
    # in S) and its line is none the waiting event touches (r, ct, cur), and commits the answer into
    # a response register that goes out before any response of the engine's.  It is dispatched
    # (SNOOP) in that cycle: the shadow model has taken the waiting event at its dispatch and takes
    # the rescan after it at its SCAN (scan_report), so the snoop comes between them there too, and
    # it answers alike because the event changes no other line and no waiting access has been tried
    # in either.  In a rescan's own states only the access being tried may wait (the shadow takes a
    # rescan whole).  No snoop is held (replay: later snoops wait behind it).  The lookup result is
    # always taken in the next cycle, so the engine finds the lookup port free when it leaves the
    # wait; a chained dispatch in that cycle sees the result and leaves the dispatch to IDLE
    # (chain()), the one cycle this path can cost.
    def waiting(states, handshake_pending):
        # (FSM.ongoing of a name the FSM does not have adds a state that is never entered: a misspelt
        # name would switch the side path off there without a word)
        unknown = [st for st in states if st not in engine.encoding]
        assert not unknown, f"snoop side path: no engine state {unknown}"
        return Cat(engine.ongoing(st) for st in states).any() & handshake_pending
    cmd_waits = ("SNP_QUERY", "ANSWER", "W_GO", "C_FILL")
    cmd_rsp_waits = ("SNP_QUERY_RSP", "ANSWER_RSP", "EV_RSP", "C_INV_RSP")
    scan_cmd_waits = ("S_EVICT", "S_LFILL", "S_SFILL")
    scan_cmd_rsp_waits = ("S_EVICT_RSP", "S_LFILL_RSP", "S_SFILL_RSP")
    ctx.cmd_rsp_states = cmd_rsp_waits + scan_cmd_rsp_waits     # every state that waits for ``cmd_rsp``
    cmd_pending = self.cmd.valid & ~self.cmd.ready
    cmd_rsp_pending = ~self.cmd_rsp.valid
    cpu_rsp_pending = self.cpu_rsp.valid & ~self.cpu_rsp.ready
    event_wait = (waiting(cmd_waits, cmd_pending) | waiting(cmd_rsp_waits, cmd_rsp_pending) |
                  waiting(("C_DONE",), cpu_rsp_pending))
    scan_wait = (waiting(scan_cmd_waits, cmd_pending) | waiting(scan_cmd_rsp_waits, cmd_rsp_pending) |
                 waiting(("S_REPLY",), cpu_rsp_pending))
    side_window = Signal()
    m.d.comb += side_window.eq((event_wait | (scan_wait & (q_len == 1))) & ~replay)
    side_look = Signal()            # the side path looked the offered snoop up in the last cycle
    side_issue = side_window & ~side_look & ~side_rsp & self.h2d_req.valid & sf.lookup.ready
    with m.If(side_issue):
        m.d.comb += [look_valid.eq(1), look_line.eq(self.h2d_req.p.addr)]
    m.d.sync += side_look.eq(side_issue)
    ctx.side_look = side_look
    side_keeps, side_keep_rsp = keeps_s(m, self.h2d_req.p.opcode)
    engine_dispatch = Cat(*go.values()).any()
    side_take = Signal()
    with m.If(side_look):
        m.d.comb += sf.result.ready.eq(1)
        # (a stream keeps its payload until taken; the line is compared all the same, so that a sender
        # that does not is answered for what it offers now, or not at all)
        offered = self.h2d_req.valid & (self.h2d_req.p.addr == res.line)
        touched = (res.line == r.line) | (res.line == ct.line) | (res.line == cur.line)
        unchanged = ~res.hit | (res.hit_clean_s & side_keeps)
        # (a reserved opcode is left to the engine, which names and drops it: SNP_RES)
        legal = legal_snoop(self.h2d_req.p.opcode)
        m.d.comb += side_take.eq(offered & ~tcam(res.line).any() & ~wcam(res.line).any() & ~touched &
                                 unchanged & legal & ~engine_dispatch & ~scan_report)
    with m.If(side_take):
        m.d.comb += [self.h2d_req.ready.eq(1), self.dispatch.eq(Dispatch.SNOOP)]
        m.d.sync += [side_rsp.eq(1), side_rsp_op.eq(Mux(res.hit, side_keep_rsp, Rsp.RspIHitI)),
                     side_rsp_uqid.eq(self.h2d_req.p.uqid)]
    with m.If(side_rsp):
        m.d.comb += [self.d2h_rsp.p.opcode.eq(side_rsp_op), self.d2h_rsp.p.uqid.eq(side_rsp_uqid)]
        with m.If(rsp_port_sent):
            m.d.sync += side_rsp.eq(0)

    # work waiting for its probe to be acknowledged is the caches' move, not the engine's
    # ... and a D2H request still queued for transmission is not idle either
    queued = Cat(f.level != 0 for f in class_fifos).any()
    m.d.comb += self.idle.eq(engine.ongoing("IDLE") & ~rescan & ~work_ready.any() & ~(replay & replay_go) &
                             ~queued & ~side_rsp)
