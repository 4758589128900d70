"""The pipelined DCOH's engine: the snoop path, the request path and the response path over one snoop filter.

``Engine`` puts together hdl/dcoh/pipe/snoop_pipe.py (host snoops through the window, their stages and
work entries), hdl/dcoh/pipe/request_path.py (the caches' accesses) and hdl/dcoh/pipe/response_path.py
(the host's responses over the tracker), and decides what they share:

* **One snoop filter, one lookup a cycle.**  The snoop side and the request side each offer a lookup
  into their own stage A; when both do, they take turns.  Each side follows its own lookups down its
  own side pipeline, so the filter's result (its line, row and hits) goes to both and only the side
  whose lookup it is decides on it: the two C stages are never busy in one cycle.
* **One write a cycle.**  The request side's (its C's registered write, else the response lane's fill)
  goes first: the rows in flight behind C count on it landing a cycle after C.  The snoop answer lane
  waits for a cycle in which it has the port.
* **Snoops see the requests.**  For the line in the filter's result the request side tells snoop C
  which tracker entry holds a request on it (``t_match``), and whether an access works on it (a
  command, or an answer not yet taken: ``line_busy``).  Snoop C reads the snoop table with the
  request's state (the response path's ``states``), holds a snoop to a line an access works on or whose
  request is completing or not yet started (the model finishes those at once) or whose state stalls
  snoops (GO seen, data not yet), and hands the others to a work entry when the answer changes the
  request's state or forwards its write-back buffer.  The answer lane writes the request's state
  (``snoop_write``) from the state it has then; it waits for a cycle in which the response path's C
  does not apply a response to the same request.  A request a work entry names is not freed before
  the entry ends (``pinned``).
* **A snoop does not pass an H2D Rsp** offered no later than it (CXL's order, docs/sources.md §1.1): the
  window takes no snoop while an H2D Rsp waits at the response path's port.
* **Accesses see the snoops.**  Request C parks an access whose line a work entry holds (the work
  entries' line compare on the result's line, ``ext_busy``); a work entry that ends wakes the parked
  accesses (``ext_wake``).
* **Shared ports.**  ``cmd``: the response lane's first, then the snoop work's, then the request
  path's; a queue of two bits per command outstanding says whose answer comes next (the caches answer
  in order).  ``cpu_rsp``: the response lane's first.  ``d2h_data``: the response lane's pulls first,
  then the snoops' data; the host matches D2H Data by its UQID.
* **Back-invalidations.**  Request C takes a work entry of the snoop side for one (``bi``: the two C
  stages share the filter's one lookup a cycle, so the work entries' one allocation a cycle goes to
  whichever decides) and a CQID; the entry probes and invalidates the line's copies as a snoop's does,
  and its answer lane frees the filter's entry and hands the write-back to the request path's start
  register through a register of its own (``wb_start``, ``evict_value``).  A snoop to a line being
  back-invalidated waits for the write-back to start, as for a request not yet started (the
  back-invalidation's CQID is in the tracker under that line, its entry in a stable state), and then
  reads that request's state.  Request C chooses
  no victim in a set where a work entry or another access's command or answer holds a line (the model
  may not know of that work yet, and passes over the lines it knows busy), and passes over the ways
  whose lines have a request (the filter's ``result_busy``).

Commit order within a cycle (a shadow model's): a probe message taken (``probe``), snoop C
(``commit_c``), the completions (``freed_valid``), request C (``commit``), the snoop answer lane
(``commit_lane``), a probe added (``commit_probe``), response C (``rsp_commit``).  Request C decides on
a row read before the snoop lane's write of the same cycle, so it goes before the lane.

``d2h_req`` leaves in the QoS order of hdl/dcoh/pipe/request_tx.py (the golden model's ``TxArbiter``).
The D2H credits are applied around the engine (hdl/dcoh/pipe/dcoh_top.py).
"""

from amaranth.hdl import Assert, Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from cxl.coherence import GRANTED, RESPONSE_TABLE, SNOOP_TABLE, STALL
from cxl.messages import ADDR_WIDTH, D2HDataHdr, D2HReq, D2HRsp, H2DDataHdr, H2DReq, H2DRsp
from hdl.link.ports import DataMsg

from ..engine_tables import is_stable
from ..encodings import CacheCmd, CacheCmdRsp, CpuReq, CpuRsp, ErrorKind, STATE_BITS
from ..sf_pipe import PipelinedSnoopFilter
from ..snoop_filter import SFOp
from .request_path import RequestPath
from .request_tx import RequestTransmit
from .response_path import ResponseCommit, ResponsePath
from .snoop_pipe import CommitC, SnoopPipe
from .snoop_work import lowest

__all__ = ["Engine"]


class Engine(wiring.Component):
    """Parameters: ``caches``, ``tracker`` (CQIDs), ``sf_sets``, ``sf_ways``, ``work`` (snoop work
    entries), ``window``, ``cmd_depth``, ``coalesce_window`` / ``coalesce_block`` / ``coalesce_groups``,
    ``starvation_bound`` (the D2H Req arbiter's), ``addr_width`` (each checked by the block that uses
    it).  ``sf`` is the snoop filter (tests preload it)."""

    def __init__(self, *, caches=2, tracker=16, sf_sets=64, sf_ways=4, work=8, window=8, cmd_depth=4,
                 coalesce_window=4, coalesce_block=4, coalesce_groups=4, starvation_bound=4,
                 addr_width=ADDR_WIDTH):
        # a snoop held on a stall goes again at the request's completion (``req_release``), which holds
        # only while every state whose snoops stall completes with its Data
        for (state, op), row in SNOOP_TABLE.items():
            if row[0] is STALL:
                nxt, _ = RESPONSE_TABLE[(state, "Data")]
                if nxt != GRANTED and not nxt.stable:
                    raise AssertionError(f"Engine: {state.name}'s snoops stall, but its Data leaves {nxt.name}, "
                                         "not a completion: a held snoop would wait for nothing")
        self.sf = PipelinedSnoopFilter(sf_sets, sf_ways, caches, addr_width, stall=False)
        self.snoop = SnoopPipe(caches=caches, sf_sets=sf_sets, sf_ways=sf_ways, work=work, window=window,
                               cmd_depth=cmd_depth, coalesce_window=coalesce_window,
                               coalesce_block=coalesce_block, coalesce_groups=coalesce_groups,
                               addr_width=addr_width, tracker=tracker, shared_sf=self.sf)
        self.req_path = RequestPath(caches=caches, tracker=tracker, sf_sets=sf_sets, sf_ways=sf_ways,
                                    addr_width=addr_width, shared_sf=self.sf)
        self.rsp_path = ResponsePath(caches=caches, tracker=tracker, sf_ways=sf_ways, addr_width=addr_width)
        self.transmit = RequestTransmit(tracker, starvation_bound)
        self.caches, self.tracker, self.sf_sets, self.sf_ways = caches, tracker, sf_sets, sf_ways
        self.coalesce_block = coalesce_block
        sp = self.snoop
        super().__init__({
            "h2d_req": In(stream.Signature(H2DReq)),
            "d2h_rsp": Out(stream.Signature(D2HRsp)),
            "probe": Out(sp.probe.signature),
            "cpu_req": In(stream.Signature(CpuReq(caches, addr_width))),
            "cpu_rsp": Out(stream.Signature(CpuRsp(caches, addr_width))),
            "cmd": Out(stream.Signature(CacheCmd(caches, addr_width))),
            "cmd_rsp": In(stream.Signature(CacheCmdRsp())),
            "d2h_req": Out(stream.Signature(D2HReq)),
            "h2d_rsp": In(stream.Signature(H2DRsp)),
            "h2d_data": In(stream.Signature(DataMsg(H2DDataHdr))),
            "d2h_data": Out(stream.Signature(DataMsg(D2HDataHdr))),
            # commit ports (the module docstring gives their order within a cycle)
            "commit_c": Out(CommitC), "commit_c_line": Out(addr_width),
            "commit_lane": Out(1), "commit_lane_line": Out(addr_width), "commit_lane_probed": Out(1),
            "commit_probe": Out(1), "commit_probe_line": Out(addr_width), "commit_probe_evict": Out(1),
            "commit": Out(1), "commit_bi": Out(1), "commit_cache": Out(range(max(caches, 2))),
            "rsp_commit": Out(ResponseCommit), "rsp_commit_cqid": Out(range(tracker)),
            "freed_valid": Out(1), "freed_cqid": Out(range(tracker)),
            "idle": Out(1), "cqids_in_use": Out(tracker),
            "snoop_errors": Out(16), "last_snoop_error": Out(ErrorKind),
            "protocol_errors": Out(16), "last_error": Out(ErrorKind),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.sf = sf = self.sf
        m.submodules.snoop = sp = self.snoop
        m.submodules.req_path = rq = self.req_path
        m.submodules.rsp_path = rs = self.rsp_path
        # CXL's order (docs/sources.md §1.1): a snoop does not pass an H2D Rsp that reached the engine no
        # later than it (the link hands a flit's messages over at one edge, a GO before the snoop behind
        # it).  The window takes no snoop while an H2D Rsp waits at the response path's port; one taken
        # in a snoop's cycle is applied two cycles later, before that snoop's C (three cycles at least).
        rsp_waiting = self.h2d_rsp.valid & ~rs.h2d_rsp.ready
        m.d.comb += [sp.h2d_req.valid.eq(self.h2d_req.valid & ~rsp_waiting), sp.h2d_req.p.eq(self.h2d_req.p),
                     self.h2d_req.ready.eq(sp.h2d_req.ready & ~rsp_waiting)]
        wiring.connect(m, sp.d2h_rsp, wiring.flipped(self.d2h_rsp))
        wiring.connect(m, sp.probe, wiring.flipped(self.probe))
        wiring.connect(m, wiring.flipped(self.cpu_req), rq.cpu_req)
        m.submodules.transmit = tx = self.transmit
        wiring.connect(m, rq.d2h_push, tx.push)
        wiring.connect(m, tx.d2h_req, wiring.flipped(self.d2h_req))
        wiring.connect(m, wiring.flipped(self.h2d_rsp), rs.h2d_rsp)
        wiring.connect(m, wiring.flipped(self.h2d_data), rs.h2d_data)
        wiring.connect(m, rq.start, rs.start)
        wiring.connect(m, rs.sf_update, rq.fill)
        m.d.comb += rq.freed.eq(rs.freed)

        # ---- the snoop filter: lookups taking turns, the result to both, the request side's write first
        snoop_turn = Signal()
        s_lk, r_lk = sp.sf.lookup, rq.sf.lookup
        m.d.comb += [s_lk.ready.eq(~r_lk.valid | snoop_turn), r_lk.ready.eq(~s_lk.valid | ~snoop_turn),
                     sf.lookup.valid.eq(s_lk.valid | r_lk.valid),
                     sf.lookup.p.eq(Mux(s_lk.valid & s_lk.ready, s_lk.p, r_lk.p))]
        with m.If(s_lk.valid & r_lk.valid):
            m.d.sync += snoop_turn.eq(~snoop_turn)
        # (only the request side's decision uses the victim choice, and its busy ways)
        m.d.comb += [sf.result.ready.eq(1), sf.result_busy.eq(rq.sf.result_busy)]
        for side in (sp.sf, rq.sf):
            m.d.comb += [side.result.valid.eq(sf.result.valid), side.result.p.eq(sf.result.p),
                         side.result_row.eq(sf.result_row), side.result_hits.eq(sf.result_hits),
                         side.next_line.eq(sf.next_line), side.next_row.eq(sf.next_row),
                         side.next_written.eq(sf.next_written), side.next_wline.eq(sf.next_wline)]
        s_up, r_up = sp.sf.update, rq.sf.update
        m.d.comb += [r_up.ready.eq(1), s_up.ready.eq(~r_up.valid),
                     sf.update.valid.eq(r_up.valid | s_up.valid),
                     sf.update.p.eq(Mux(r_up.valid, r_up.p, s_up.p))]
        # (the snoop lane's payload does not wait for its valid: it replaces no tag, so the filter's
        # ``next_written`` and ``next_wline`` where it matters are the request side's alone)
        m.d.sync += Assert(s_up.p.op != SFOp.ALLOCATE, "engine: the snoop lane's write would allocate")

        # ---- what each side sees of the other --------------------------------------------------------
        t_any, t_idx, _ = lowest(m, rq.t_match, "t_match")
        t_state = Signal(STATE_BITS)
        m.d.comb += t_state.eq(rs.states[t_idx])
        completing = t_any & is_stable(t_state)
        m.d.comb += [sp.req.hit.eq(t_any & ~completing), sp.req.busy.eq(rq.line_busy | completing),
                     sp.req.state.eq(t_state), sp.req.cqid.eq(t_idx),
                     sp.lane_req_state.eq(rs.states[sp.lane_cqid]),
                     sp.lane_req_blocked.eq(rs.c_apply.valid & (rs.c_apply.cqid == sp.lane_cqid)),
                     rs.snoop_write.eq(sp.req_write), rs.wb_read.eq(sp.wb_read), sp.wb_data.eq(rs.wb_data),
                     rs.pinned.eq(sp.pinned), rs.pinned_next.eq(sp.pinned_next),
                     rq.ext_busy.eq(sp.work_block.cam_hit), rq.ext_set_busy.eq(sp.work_block.cam_set),
                     rq.ext_wake.eq(sp.line_freed)]
        # back-invalidations: request C's work entry, the write-back its answer lane starts
        wiring.connect(m, rq.bi, sp.bi)
        wiring.connect(m, sp.wb_start, rq.ext_start)
        m.d.comb += [rq.bi_can.eq(sp.can_alloc), rq.ext_value.eq(sp.evict_value), sp.bi_line_next.eq(rq.bi_line_next)]
        # A held snoop goes again after anything it may have waited for: a completion (which also ends
        # a stall: each state whose snoops stall completes with its Data), a request started (its
        # tracker entry written from the start register, which may wait there after its commit), an
        # access's command issued or answer taken, a work entry ending (the snoop path's own).
        rq_answer_taken = rq.cpu_rsp.valid & rq.cpu_rsp.ready
        started = rq.start.valid & rq.start.ready
        m.d.comb += sp.req_release.eq(rs.freed.valid | started | rq.commit | rq_answer_taken)
        # A request in the start register, or a back-invalidation's CQID before its write-back starts,
        # is in ``t_match`` before its tracker entry is written: the entry's state is then its last
        # request's, stable, so the snoop holds (not read as a request's).
        m.d.sync += Assert(~(t_any & ~rs.in_use.bit_select(t_idx, 1)) | is_stable(t_state),
                           "engine: a snoop read the state of a request not yet started")

        # ---- cmd: the response lane's, the snoop work's, the request path's; whose answer is next ----
        K = self.caches
        m.submodules.whose = whose = SyncFIFO(width=2, depth=K + 2 + self.snoop.work_block.cmd_depth)
        srcs = (rs.cmd, sp.cmd, rq.cmd)          # 0: the response lane's, 1: the snoop work's, 2: the request path's
        out = self.cmd
        m.d.comb += out.valid.eq(Cat(s.valid for s in srcs).any() & whose.w_rdy)
        chosen = Signal(2)
        m.d.comb += [chosen.eq(Mux(rs.cmd.valid, 0, Mux(sp.cmd.valid, 1, 2))),
                     out.p.eq(Mux(rs.cmd.valid, rs.cmd.p, Mux(sp.cmd.valid, sp.cmd.p, rq.cmd.p)))]
        for i, s in enumerate(srcs):
            m.d.comb += s.ready.eq(out.ready & whose.w_rdy & (chosen == i))
        m.d.comb += [whose.w_en.eq(out.valid & out.ready), whose.w_data.eq(chosen)]
        to = whose.r_data
        for i, s in enumerate((rs.cmd_rsp, sp.cmd_rsp, rq.cmd_rsp)):
            m.d.comb += [s.p.eq(self.cmd_rsp.p), s.valid.eq(self.cmd_rsp.valid & whose.r_rdy & (to == i))]
        m.d.comb += [self.cmd_rsp.ready.eq(whose.r_rdy & Mux(to == 0, rs.cmd_rsp.ready,
                                                             Mux(to == 1, sp.cmd_rsp.ready, rq.cmd_rsp.ready))),
                     whose.r_en.eq(self.cmd_rsp.valid & self.cmd_rsp.ready)]

        # ---- cpu_rsp and d2h_data: the response lane's first ------------------------------------------
        for o, first, second in ((self.cpu_rsp, rs.cpu_rsp, rq.cpu_rsp), (self.d2h_data, rs.d2h_data, sp.d2h_data)):
            m.d.comb += [o.valid.eq(first.valid | second.valid), o.p.eq(Mux(first.valid, first.p, second.p)),
                         first.ready.eq(o.ready), second.ready.eq(o.ready & ~first.valid)]

        m.d.comb += [
            self.commit_c.eq(sp.commit_c), self.commit_c_line.eq(sp.commit_c_line),
            self.commit_lane.eq(sp.commit_lane), self.commit_lane_line.eq(sp.commit_lane_line),
            self.commit_lane_probed.eq(sp.commit_lane_probed),
            self.commit_probe.eq(sp.commit_probe), self.commit_probe_line.eq(sp.commit_probe_line),
            self.commit_probe_evict.eq(sp.commit_probe_evict),
            self.cqids_in_use.eq(rq.cqids_in_use),
            self.commit.eq(rq.commit), self.commit_bi.eq(rq.commit_bi), self.commit_cache.eq(rq.commit_cache),
            self.rsp_commit.eq(rs.commit), self.rsp_commit_cqid.eq(rs.commit_cqid),
            self.freed_valid.eq(rs.freed.valid), self.freed_cqid.eq(rs.freed.cqid),
            self.idle.eq(rq.idle & rs.idle & sp.idle & ~whose.r_rdy & tx.empty),
            self.snoop_errors.eq(sp.protocol_errors), self.last_snoop_error.eq(sp.last_error),
            self.protocol_errors.eq(rs.protocol_errors), self.last_error.eq(rs.last_error),
        ]
        return m
