"""H2D Rsp and H2D Data: the host's responses to the device's requests.

The response table's verdict on the request a message names is worked out as IDLE takes the message and
registered (``latch_rsp``, ``latch_data``); RSP, RSP_DATA, DATA and ADVANCE move the request, and a request
that reaches a stable state completes: its CQID is freed, the snoop filter filled and its cache told
(C_RES .. C_DONE).

Builders of :meth:`hdl.dcoh.dcoh.DCOH.elaborate` (``ctx``: docs/dcoh.md, "Source layout").
"""

from amaranth.hdl import Const, Mux, Signal

from cxl.messages import D2HReqOpcode as Req
from cxl.coherence import DevState as D

from .encodings import CacheState, CmdOp, ErrorKind, EVENT_CODE, STATE_BITS, STATE_CODE
from .engine_tables import is_stable, response_table, rsp_event
from .snoop_filter import SFState, SFOp

__all__ = ["build_response_verdicts", "build_completion", "build_response_states"]


def build_response_verdicts(self, ctx):
    """The response table's verdicts on the H2D Rsp and H2D Data offered, registered as IDLE takes them."""
    T, cur_t, data_in_, dv_cqid, ev, m = ctx.T, ctx.cur_t, ctx.data_in_, ctx.dv_cqid, ctx.ev, ctx.m
    rsp_in, t_idx, trk = ctx.rsp_in, ctx.t_idx, ctx.trk

    # H2D Rsp / Data: the tracker entry a message names and the response table's verdict on it are
    # worked out from the input when IDLE takes the message and registered (IDLE writes no tracker
    # entry, so this is what RSP / DATA would read a cycle later); RSP / DATA then start from flops.

    in_code, in_ok = rsp_event(m, rsp_in.opcode, rsp_in.rsp_data)
    rsp_t_in = trk[t_idx(rsp_in.cqid)]
    e_in = response_table(m, rsp_t_in.state, in_code)
    ev_code, ev_ok, ev_live, ev_granted_e = Signal.like(in_code), Signal(), Signal(), Signal()
    e_legal, e_nxt, e_granted, e_send, e_bogus = (Signal.like(v) for v in e_in)
    latch_rsp = [ev.eq(rsp_in), ev_code.eq(in_code), ev_ok.eq(in_ok),
                 ev_live.eq((rsp_in.cqid < T) & rsp_t_in.valid), ev_granted_e.eq(rsp_t_in.granted_e),
                 *(q.eq(v) for q, v in zip((e_legal, e_nxt, e_granted, e_send, e_bogus), e_in))]
    ct = trk[cur_t]          # the request an H2D Rsp / Data names (IDLE sets cur_t as it takes one)
    # the state an H2D Rsp moves its request to (GRANTED: E or S by the GO that came first)
    e_new = Signal(STATE_BITS)
    m.d.comb += e_new.eq(Mux(e_granted, Mux(ev_granted_e, STATE_CODE[D.E], STATE_CODE[D.S]), e_nxt))
    # An H2D Data taken (chained, see chain()) in the last cycle of the H2D Rsp that moves the same
    # request without completing it (a GO before its data) is judged on the state that Rsp writes
    # at this cycle's edge, forwarded here (``rsp_fwd``: RSP is in that cycle), not on the
    # tracker's register, which still holds the state before it.
    rsp_fwd = Signal()
    data_t_in = trk[t_idx(data_in_.hdr.cqid)]
    d_fwd = rsp_fwd & (t_idx(data_in_.hdr.cqid) == cur_t)
    data_state_in = Signal(STATE_BITS)
    data_granted_in = Signal()
    m.d.comb += [data_state_in.eq(Mux(d_fwd, e_new, data_t_in.state)),
                 data_granted_in.eq(Mux(d_fwd & (ev_code == EVENT_CODE["GO-S"]), 0,
                                        Mux(d_fwd & (ev_code == EVENT_CODE["GO-E"]), 1,
                                            data_t_in.granted_e)))]
    d_in = response_table(m, data_state_in, Const(EVENT_CODE["Data"], in_code.shape()))
    dv_live, dv_granted_e = Signal(), Signal()
    d_legal, d_nxt, d_granted = (Signal.like(v) for v in d_in[:3])
    latch_data = [dv_cqid.eq(data_in_.hdr.cqid),
                  dv_live.eq((data_in_.hdr.cqid < T) & data_t_in.valid), dv_granted_e.eq(data_granted_in),
                  *(q.eq(v) for q, v in zip((d_legal, d_nxt, d_granted), d_in))]
    # the state an H2D Data moves its request to
    d_new = Signal(STATE_BITS)
    m.d.comb += d_new.eq(Mux(d_granted, Mux(dv_granted_e, STATE_CODE[D.E], STATE_CODE[D.S]), d_nxt))

    ctx.ct, ctx.d_legal, ctx.d_new, ctx.dv_live, ctx.e_bogus = ct, d_legal, d_new, dv_live, e_bogus
    ctx.e_legal, ctx.e_new, ctx.e_send, ctx.ev_code, ctx.ev_live = e_legal, e_new, e_send, ev_code, ev_live
    ctx.ev_ok, ctx.latch_data, ctx.latch_rsp, ctx.rsp_fwd = ev_ok, latch_data, latch_rsp, rsp_fwd


def build_completion(self, ctx):
    """The helpers that complete a request: ``fill_sf``, ``tell_cache``, ``advance``."""
    K, cqids, ct, cur_t, look_line = ctx.K, ctx.cqids, ctx.ct, ctx.cur_t, ctx.look_line
    look_valid, m, ops, replay_go = ctx.look_valid, ctx.m, ctx.ops, ctx.replay_go
    rescan_next, rsp_fwd, sf_update, tracker = ctx.rescan_next, ctx.rsp_fwd, ctx.sf_update, ctx.tracker

    def fill_sf(state):
        """A completed read's fill: its snoop-filter entry (a placeholder until now) takes the state
        (E or S) and the filling cache, and becomes the most recently used way of its set."""
        mine = Signal(K, name="fill_presence")
        m.d.comb += mine.eq(1 << ct.cache)
        sf_update(SFOp.MODIFY, ct.line, ct.way, Mux(state == STATE_CODE[D.E], SFState.E, SFState.S), 0,
                  mine, touch=1)

    def tell_cache(state=None, writes_t=None):
        """A completed request tells its cache (a CPU access's: cpu_rsp; else nothing to say), then
        the rescan; a cache that is not ready is waited for in C_DONE.  ``state``: the request's
        state (default: the tracker's; the state written this cycle when it completes in this
        cycle, which then also names the entry it writes, ``writes_t``)."""
        st = ct.state if state is None else state
        with m.If(ct.cpu):
            m.d.comb += [self.cpu_rsp.valid.eq(1), self.cpu_rsp.p.cache.eq(ct.cache),
                         self.cpu_rsp.p.line.eq(ct.line)]
            with m.If(st == STATE_CODE[D.E]):
                m.d.comb += self.cpu_rsp.p.state.eq(Mux(ct.store, CacheState.M, CacheState.E))
            with m.Elif(st == STATE_CODE[D.S]):
                m.d.comb += self.cpu_rsp.p.state.eq(CacheState.S)
            with m.Else():
                m.d.comb += self.cpu_rsp.p.state.eq(CacheState.I)
            with m.If(self.cpu_rsp.ready):
                rescan_next(ops[ct.cache].valid.eq(0), replay_go.eq(1), writes_t=writes_t)
            with m.Else():
                m.next = "C_DONE"
        with m.Else():
            rescan_next(replay_go.eq(1), writes_t=writes_t)

    def advance(new_state, from_rsp=False, line_ready=False):
        """The request at ``cur_t`` (IDLE set it when it took the H2D Rsp / Data) moved to
        ``new_state`` (written this cycle): a stable state completes it -- the CQID is freed and the
        cache filled or told; otherwise it waits for the host's next message and the rescan follows.
        Through ``ct`` = trk[cur_t] only: one select of the tracker's lines, shared by every state
        that completes a request.  ``line_ready``: cmd_data holds the request's line in this cycle
        (an H2D Data: IDLE loaded it), so a fill or an uncached read completes here; ``from_rsp``:
        an H2D Rsp, whose line (if any) RSP loads only at this cycle's edge."""
        with m.If(is_stable(new_state)):
            m.d.comb += [cqids.free_valid.eq(1), cqids.free_cqid.eq(cur_t)]
            m.d.comb += [tracker.free.valid.eq(1), tracker.free.idx.eq(cur_t)]
            with m.If((new_state != STATE_CODE[D.I]) & ct.store):
                # a store's fill must know the other holders (an upgrade from S leaves S copies
                # to invalidate): look the line up
                m.d.comb += [look_valid.eq(1), look_line.eq(ct.line)]
                m.next = "C_RES"
            with m.Elif(new_state != STATE_CODE[D.I]):
                # a load's fill needs no lookup: the line was a placeholder (a miss from I: the
                # line was busy all along, so no other cache got a copy), the way is the tracker's
                if line_ready:
                    fill_sf(new_state)
                    tell_cache(new_state, writes_t=cur_t)
                else:
                    m.next = "C_FILL"
            with m.Else():
                # an uncached read (RdCurr) hands its line to the cache; nothing else completing
                # in I carries one, so those tell their cache at once
                if line_ready:
                    tell_cache(new_state, writes_t=cur_t)
                elif from_rsp:
                    with m.If(ct.op != Req.RdCurr):
                        tell_cache(new_state, writes_t=cur_t)
                    with m.Else():
                        m.next = "C_DONE"
                else:
                    m.next = "C_DONE"
        with m.Else():                  # (the line stays busy, nothing freed: no rescan)
            if from_rsp:
                m.d.comb += rsp_fwd.eq(1)
            rescan_next(writes_t=cur_t, forwards_data=from_rsp, wakes=0)

    ctx.advance, ctx.fill_sf, ctx.tell_cache = advance, fill_sf, tell_cache


def build_response_states(self, ctx):
    """The states of an H2D Rsp or Data and of a request's completion."""
    K, advance, await_cmd_rsp, bogus, buf_r = ctx.K, ctx.advance, ctx.await_cmd_rsp, ctx.bogus, ctx.buf_r
    buf_w, cmd_data, count_error, ct, cur_t = ctx.buf_w, ctx.cmd_data, ctx.count_error, ctx.ct, ctx.cur_t
    d_legal, d_new, data_sent, data_valid = ctx.d_legal, ctx.d_new, ctx.data_sent, ctx.data_valid
    dv_cqid, dv_live, e_bogus, e_legal, e_new = ctx.dv_cqid, ctx.dv_live, ctx.e_bogus, ctx.e_legal, ctx.e_new
    e_send, ev, ev_code, ev_live, ev_ok = ctx.e_send, ctx.ev, ctx.ev_code, ctx.ev_live, ctx.ev_ok
    fill_sf, m, r, res, set_state, sf = ctx.fill_sf, ctx.m, ctx.r, ctx.res, ctx.set_state, ctx.sf
    sf_update, tell_cache, tracker = ctx.sf_update, ctx.tell_cache, ctx.tracker

    # ---------------------------------------------------------------- host responses
    with m.State("RSP"):
        # IDLE read the buffer at this CQID: the line to send (a Bogus one is zeros), or the line
        # a completed request hands to the cache; RSP_DATA reads it again for ADVANCE
        m.d.comb += buf_r.addr.eq(ev.cqid)
        m.d.sync += [cmd_data.eq(Mux(e_send & e_bogus, 0, buf_r.data))]
        with m.If(~ev_live):
            count_error(ErrorKind.UNKNOWN_CQID)
            m.next = "IDLE"
        with m.Elif(~ev_ok | ~e_legal):
            count_error(ErrorKind.UNDECLARED)
            m.next = "IDLE"
        with m.Else():
            set_state(cur_t, e_new)
            with m.If(ev_code == EVENT_CODE["GO-S"]):
                m.d.comb += [tracker.set.grant.eq(1), tracker.set.granted_e.eq(0)]
            with m.If(ev_code == EVENT_CODE["GO-E"]):
                m.d.comb += [tracker.set.grant.eq(1), tracker.set.granted_e.eq(1)]
            with m.If(e_send):
                m.d.sync += bogus.eq(e_bogus)
                m.next = "RSP_DATA"
            with m.Else():                      # cmd_data has the line (loaded above)
                advance(e_new, from_rsp=True)
    with m.State("RSP_DATA"):
        m.d.comb += [data_valid.eq(1), self.d2h_data.p.hdr.uqid.eq(ev.rsp_data),
                     self.d2h_data.p.hdr.bogus.eq(bogus)]
        m.d.comb += buf_r.addr.eq(ev.cqid)
        with m.If(data_sent):
            m.next = "ADVANCE"
    with m.State("DATA"):
        with m.If(~dv_live):
            count_error(ErrorKind.UNKNOWN_CQID)
            m.next = "IDLE"
        with m.Elif(~d_legal):
            count_error(ErrorKind.UNDECLARED)
            m.next = "IDLE"
        with m.Else():
            m.d.comb += [buf_w.en.eq(1), buf_w.addr.eq(dv_cqid)]
            set_state(cur_t, d_new)
            advance(d_new, line_ready=True)     # cmd_data has the line (since IDLE)
    with m.State("ADVANCE"):                    # after RSP_DATA
        # the completed line goes to the cache from cmd_data: RSP_DATA read the buffer at this
        # CQID (C_RES .. C_DONE do not touch cmd_data)
        m.d.sync += cmd_data.eq(buf_r.data)
        advance(ct.state)
    with m.State("C_RES"):               # a read/ownership request completed: fill the cache
        m.d.comb += sf.result.ready.eq(1)
        m.d.sync += r.eq(res)
        m.next = "C_FILL"
    with m.State("C_FILL"):
        k = ct.cache
        mine = Signal(K)
        m.d.comb += mine.eq(1 << k)
        others = r.entry.presence & ~mine
        with m.If(ct.store & (ct.state == STATE_CODE[D.E]) & (others != 0)):
            m.d.comb += [self.cmd.valid.eq(1), self.cmd.p.line.eq(ct.line),
                         self.cmd.p.caches.eq(others), self.cmd.p.op.eq(CmdOp.INV)]
            with m.If(self.cmd.ready):
                m.next = "C_INV_RSP"
        with m.Else():
            fill_sf(ct.state)
            tell_cache()                        # in the cycle the fill is written
    await_cmd_rsp("C_INV_RSP", "C_FILL2")
    with m.State("C_FILL2"):
        sf_update(SFOp.MODIFY, ct.line, ct.way, SFState.E, 0, 1 << ct.cache, touch=1)
        tell_cache()
    with m.State("C_DONE"):               # tell the cache (the line is in cmd_data since it completed)
        tell_cache()
