"""The pipelined DCOH's snoop path: host snoops through stages A / B1 / B2 / C over the pipelined snoop filter.

The first event class of the pipelined engine (docs/dcoh_pipeline.md), built and checked on its own:
host snoops against the lines the snoop filter holds, with no request of the device in flight (no
tracker yet: the snoop table is read from the snoop filter's entry alone).  It takes a snoop every cycle
and answers snoops that need the internal caches at up to one a cycle as well, because their work waits
in entries of its own (hdl/dcoh/pipe/snoop_work.py) instead of in the pipeline.

Stages
------
A (cycle N)
    The oldest snoop not yet issued (hdl/dcoh/pipe/snoop_window.py) enters, and its line's snoop-filter
    lookup is issued, while the D2H Rsp queue has room for every snoop in flight and one more
    (``RSP_DEPTH`` entries, one kept for the answer lane: an answer is never refused at C).
B1, B2 (N+1, N+2)
    The snoop filter's read and forward stages (hdl/dcoh/sf_pipe.py, built with ``stall=False``: every
    stage moves every cycle); the snoop's opcode, UQID, window index and epoch move beside them.
C (N+3: decide and commit)
    From the forwarded snoop-filter row (it holds every write before this cycle) and the work entries'
    registers (a line with a snoop being answered): the snoop table's verdict on the line's state.  One of:

    * *answer*: neither the line's copies nor its snoop-filter entry change (a miss, an S line the
      snoop leaves in S, an E line's SnpCur...): the response into the D2H Rsp queue;
    * *work*: the answer needs the copies (an E line whose copies may be E or M: a query first; or a
      probe, for data or to take permission away), or it changes the snoop filter (a line whose entry
      names no copy): a work entry takes the snoop;
    * *hold*: no work entry is free, or the line still has a snoop being answered (a second snoop to a
      line, which CXL forbids: counted, ``SECOND_SNOOP``): the window takes back the snoop and every one
      issued behind it, and issues it again once a work entry frees;
    * *drop*: a reserved opcode (counted, ``RESERVED_SNOOP``), as the DCOH drops one.

    C never waits, and writes nothing but registers: the pending allocation of a work entry (written
    into the entry at the next edge), the queue, the window's pointers, the room count.  Its verdict is
    worked out for every way of the filter's row beside the tag compares and selected by the hit.

Answer lane
    Beside C, the work entries that are ready to answer, one a cycle, whatever C does: the response (into
    the queue after C's, in the same cycle: hdl/dcoh/pipe/out_queue.py takes two), the line's data (from
    the work's data memory), and the snoop filter's one write (only the lane writes the filter, so C's
    decision never reaches the filter's write port or the rows in flight in the same cycle).

Latency: a snoop that needs no copy is answered 3 cycles after A takes it (the response leaves the queue
in the next); one that probes, after its query, probe and command.  Throughput: one snoop a cycle into
A while nothing holds; the work entries, the coalescer, one command a cycle (the caches may have up to
``cmd_depth`` outstanding, answered in order) and the answer lane keep up with that when there are
enough entries for the round trip through the coalescer's window and the caches.

Commit port (a shadow model's order)
------------------------------------
A state change the golden model sees lands in one of four places, each reported in its cycle:

* ``commit_c`` (``ANSWER``): C answered the snoop to ``commit_c_line``: the model's ``on_snoop`` now;
* ``commit_lane``: the answer lane answered ``commit_lane_line``; ``commit_lane_probed``: after its
  probe (the model's ``finish_probe([line])``), else without one (after a query that found no probe
  needed, or an answer that only changes the snoop filter: the model's ``on_snoop``, which answers at
  once);
* ``commit_probe``: a work entry added the probe of ``commit_probe_line`` to the coalescer: the model's
  ``on_snoop`` (which makes the work and adds the probe) now;
* a probe message taken on ``probe``: the model's ``close_probe(block, lines)``.

A shadow applies a cycle's reports in the order: the probe message taken, ``commit_c``, ``commit_lane``,
``commit_probe`` (a probe taken before a probe added, as the coalescer frees a sent block's slot for a
new probe in the same cycle; the others name different lines).

Not yet here (the next steps of docs/dcoh_pipeline.md): requests of the device (the tracker, GO and
data), CPU accesses, back-invalidations, credits on the D2H channels.
"""

from amaranth.hdl import Assert, Cat, Module, Mux, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from cxl.coherence import DevState as D
from cxl.messages import ADDR_WIDTH, D2HDataHdr, D2HRsp, D2HRspOpcode as Rsp, H2DReq, H2DReqOpcode as Snp, \
    ID_WIDTH
from hdl.link.ports import DataMsg, LINE_BITS

from ..coalescer import InvalidationCoalescer, Message
from ..encodings import CacheCmd, CacheCmdRsp, ErrorKind, STATE_BITS, STATE_CODE
from ..engine_tables import cmd_op_for, legal_snoop, line_state, perm_none, snoop_table, write_back
from ..sf_pipe import PipelinedSnoopFilter
from ..snoop_filter import SFOp, SFState
from .out_queue import OutQueue
from .response_path import WriteBackStart
from .snoop_window import SnoopWindow
from .snoop_work import SnoopWork, WorkAlloc

__all__ = ["SnoopPipe", "CommitC", "RSP_DEPTH"]

RSP_DEPTH = 9           # D2H Rsp queue: C's answers never wait (A counts the snoops in flight)


class CommitC(enum.Enum, shape=3):
    """What C did with the snoop it decided (``commit_c``)."""
    NONE = 0
    ANSWER = 1          #: answered it (the model's on_snoop now)
    WORK = 2            #: handed it to a work entry (the model sees it when its probe is added)
    HOLD = 3            #: held it (the window takes it back)
    DROP = 4            #: dropped it (reserved opcode)


class SnoopPipe(wiring.Component):
    """Parameters: ``caches`` (1..32), ``sf_sets`` / ``sf_ways`` (powers of two), ``work`` (work entries),
    ``window`` (snoops in the window, a power of two >= 4), ``cmd_depth`` (commands outstanding),
    ``coalesce_window`` / ``coalesce_block`` / ``coalesce_groups`` (the coalescer's), ``addr_width``.

    ``sf`` (the pipelined snoop filter) is built here so that tests can preload its storage.
    """

    def __init__(self, *, caches=2, sf_sets=64, sf_ways=4, work=8, window=8, cmd_depth=4,
                 coalesce_window=4, coalesce_block=4, coalesce_groups=4, addr_width=ADDR_WIDTH, tracker=2,
                 shared_sf=None):
        self.caches, self.sf_sets, self.sf_ways, self.addr_width = caches, sf_sets, sf_ways, addr_width
        self.tracker, self.shared_sf = tracker, shared_sf is not None
        sf = shared_sf if shared_sf is not None else \
            PipelinedSnoopFilter(sf_sets, sf_ways, caches, addr_width, stall=False)
        self.set_bits = sf.set_bits
        self.coal = InvalidationCoalescer(coalesce_window, coalesce_block, coalesce_groups, caches, addr_width)
        self.work_block = SnoopWork(work, caches, addr_width, sf_ways, coalesce_block, cmd_depth, tracker,
                                    set_bits=self.set_bits)
        self.window = SnoopWindow(window)
        # ``shared_sf``: the parent's snoop filter (hdl/dcoh/pipe/engine.py), reached through the ``sf``
        # port; else one is built here
        members = {"sf": In(sf.signature)} if self.shared_sf else {}
        if not self.shared_sf:
            self.sf = sf
        super().__init__(members | {
            "h2d_req": In(stream.Signature(H2DReq)),
            "d2h_rsp": Out(stream.Signature(D2HRsp)),
            "d2h_data": Out(stream.Signature(DataMsg(D2HDataHdr))),
            "probe": Out(stream.Signature(Message(addr_width - exact_log2(coalesce_block), coalesce_block,
                                                  caches))),
            "cmd": Out(stream.Signature(CacheCmd(caches, addr_width))),
            "cmd_rsp": In(stream.Signature(CacheCmdRsp())),
            "commit_c": Out(CommitC), "commit_c_line": Out(addr_width),
            "commit_lane": Out(1), "commit_lane_line": Out(addr_width), "commit_lane_probed": Out(1),
            "commit_probe": Out(1), "commit_probe_line": Out(addr_width), "commit_probe_evict": Out(1),
            "protocol_errors": Out(16), "last_error": Out(ErrorKind),
            # ---- the device's requests (hdl/dcoh/pipe/engine.py; tied off when alone) --------------
            # C's line as the request side sees it in C's cycle: a request in flight on it (``hit``,
            # its tracker entry and state), or a reason to hold the snoop (``busy``: the request is
            # completing, or an access of the caches works on the line)
            "req": In(data.StructLayout({"hit": 1, "busy": 1, "state": STATE_BITS, "cqid": range(tracker)})),
            "req_release": In(1),       # something the request side held a snoop for may have cleared
            # the answer lane: the state of the request its entry names (``lane_cqid``), and whether the
            # response path writes that request in this cycle (the lane waits); the lane's write of it
            "lane_cqid": Out(range(tracker)), "lane_req_state": In(STATE_BITS), "lane_req_blocked": In(1),
            "req_write": Out(data.StructLayout({"valid": 1, "cqid": range(tracker), "state": STATE_BITS,
                                                "clear_peers": 1})),
            "wb_read": Out(data.StructLayout({"en": 1, "cqid": range(tracker)})), "wb_data": In(LINE_BITS),
            "pinned": Out(tracker), "pinned_next": Out(tracker),
            "line_freed": Out(1),       # a work entry ended (its line is no longer busy here)
            "idle": Out(1),             # no snoop or work left, no response queued
            # back-invalidations (the request side's): a work entry taken for one (``bi``, never in a cycle
            # snoop C takes one: the two C stages share the filter's one lookup a cycle); the write-back
            # each starts once its copies are taken (``wb_start``, its line in ``evict_value`` from the
            # next cycle)
            "bi": In(stream.Signature(WorkAlloc(addr_width, exact_log2(sf_ways), caches, tracker))),
            "can_alloc": Out(1),
            "bi_line_next": In(1),      # ``bi``'s line is the filter's next result line
            "wb_start": Out(stream.Signature(WriteBackStart(tracker, addr_width, sf_ways))),
            "evict_value": Out(LINE_BITS),
        })

    def elaborate(self, platform):
        m = Module()
        sf = self.sf
        if not self.shared_sf:
            m.submodules.sf = sf
        m.submodules.coal = coal = self.coal
        m.submodules.work = work = self.work_block
        m.submodules.window = win = self.window
        wiring.connect(m, wiring.flipped(self.h2d_req), win.h2d_req)
        wiring.connect(m, work.cmd, wiring.flipped(self.cmd))
        wiring.connect(m, wiring.flipped(self.cmd_rsp), work.cmd_rsp)
        wiring.connect(m, work.probe_add, coal.probes)
        wiring.connect(m, coal.messages, wiring.flipped(self.probe))
        wiring.connect(m, work.d2h_data, wiring.flipped(self.d2h_data))
        m.d.comb += [self.wb_read.eq(work.wb_read), work.wb_data.eq(self.wb_data), self.pinned.eq(work.pinned),
                     self.pinned_next.eq(work.pinned_next),
                     self.line_freed.eq(work.freed), self.can_alloc.eq(work.can_alloc),
                     self.evict_value.eq(work.evict_value)]
        # a probe message the caches took wakes its lines' work entries in the next cycle (registered:
        # the coalescer's output is worked out from its counters in the cycle it is offered)
        with m.If(self.probe.valid & self.probe.ready):
            m.d.sync += [work.probe_block.eq(self.probe.p.block), work.probe_lines.eq(self.probe.p.lines)]
        m.d.sync += work.probe_taken.eq(self.probe.valid & self.probe.ready)

        # ---- the D2H Rsp queue: C's answers first, then the answer lane's, in one cycle --------------
        m.submodules.rspq = rspq = OutQueue(D2HRsp, RSP_DEPTH)
        m.d.comb += self.idle.eq(win.empty & work.idle & (rspq.level == 0))
        wiring.connect(m, rspq.out, wiring.flipped(self.d2h_rsp))
        m.d.comb += [rspq.push_p.valid.eq(1), rspq.push2_p.valid.eq(1)]

        # ---- the side pipeline beside the snoop filter's stages B1, B2 ---------------------------
        side = data.StructLayout({"valid": 1, "epoch": 1, "idx": range(win.depth), "op": Snp, "uqid": ID_WIDTH})
        b1, b2, c = Signal(side), Signal(side), Signal(side)
        in_flight = b1.valid.as_unsigned() + b2.valid + c.valid
        # The queue's room less the snoops in flight that may still answer at C, kept in a register
        # (``room``) and moved by what happens in each cycle, so that A's and the answer lane's go start
        # from a flop: A reserves a place, the lane takes one, the port frees one, and a snoop that leaves
        # C without an answer (or was taken back) gives its place back (an Assert checks it against the
        # count).
        room = Signal(range(RSP_DEPTH + 1), init=RSP_DEPTH)
        # A: the next snoop and its lookup (the answer lane keeps one place of the queue for itself)
        # (the lookup port's ready: a shared filter's other client may have it in this cycle)
        a_go = win.issue.valid & (room >= 2) & sf.lookup.ready
        m.d.comb += [win.issue.ready.eq((room >= 2) & sf.lookup.ready),
                     sf.lookup.valid.eq(win.issue.valid & (room >= 2)),
                     sf.lookup.p.eq(win.issue.p.snoop.addr), sf.result.ready.eq(1), sf.result_busy.eq(0)]
        m.d.sync += [b1.valid.eq(a_go), b1.epoch.eq(win.issue.p.epoch), b1.idx.eq(win.issue.p.idx),
                     b1.op.eq(win.issue.p.snoop.opcode), b1.uqid.eq(win.issue.p.snoop.uqid),
                     b2.eq(b1), c.eq(b2)]

        # ---- C: decide and commit ------------------------------------------------------------------
        res = sf.result.p
        ev = Signal()
        m.d.comb += [ev.eq(c.valid & (c.epoch == win.epoch)), work.cam_line.eq(res.line),
                     work.cam_next_line.eq(sf.next_line),
                     work.alloc_line_next.eq(Mux(self.bi.valid, self.bi_line_next, res.line == sf.next_line))]
        # The verdict is worked out for every way of the row beside the tag compares, then selected by
        # the hit (a miss: state I), so the decision does not wait for the hit way's entry to be chosen.
        row, hits = sf.result_row, sf.result_hits
        ways = []
        for w in range(self.sf_ways):
            entry = row.ways[w].entry
            st_w, maybe_m_w = line_state(m, 1, entry, 0, 0)
            _, rsp_w, nxt_w, dat_w = snoop_table(m, st_w, c.op)
            copies_w = entry.presence != 0
            query_w = maybe_m_w & copies_w                        # E or M? ask the caches first
            probe_w = copies_w & (dat_w | perm_none(nxt_w))       # fetch data, or take away permission
            work_w = query_w | probe_w | (nxt_w != st_w)          # or the snoop filter's entry changes
            ways.append(dict(st=st_w, rsp=rsp_w, nxt=nxt_w, dat=dat_w, query=query_w, probe=probe_w, work=work_w))
        def by_hit(field, miss):
            out = Signal.like(ways[0][field], name=f"c_{field}")
            m.d.comb += out.eq(miss)
            for w in reversed(range(self.sf_ways)):
                with m.If(hits[w]):
                    m.d.comb += out.eq(ways[w][field])
            return out
        presence = Mux(res.hit, res.entry.presence, 0)
        # A line with a request of the device in flight: the snoop table is read with the request's
        # state (the model's line_state).  Its copies, if any, are S (an upgrade's), so a probe is needed
        # only to take their permission away; the answer lane then writes the request's state, not
        # the filter's entry.  A state whose snoops stall (the GO came, the data not yet) holds the
        # snoop until the request side releases it.
        rq = self.req
        t_stall, t_rsp, t_nxt, t_dat = snoop_table(m, rq.state, c.op)
        t_probe = (presence != 0) & perm_none(t_nxt)
        t_work = t_probe | t_dat | (t_nxt != rq.state)
        def by_line(field, t_value, miss):
            out = Signal.like(ways[0][field], name=f"c_{field}")
            m.d.comb += out.eq(miss)
            for w in reversed(range(self.sf_ways)):
                with m.If(hits[w]):
                    m.d.comb += out.eq(ways[w][field])
            with m.If(rq.hit):
                m.d.comb += out.eq(t_value)
            return out
        st = by_line("st", rq.state, STATE_CODE[D.I])
        rsp = by_line("rsp", t_rsp, Rsp.RspIHitI)
        nxt = by_line("nxt", t_nxt, STATE_CODE[D.I])
        dat = by_line("dat", t_dat, 0)
        need_query, need_probe = by_line("query", 0, 0), by_line("probe", t_probe, 0)
        need_work = Mux(rq.hit, t_work, Cat(*(hits[w] & ways[w]["work"] for w in range(self.sf_ways))).any())
        reserved = ~legal_snoop(c.op)
        # A second snoop to a line is the host's error; a snoop to a line being back-invalidated is not:
        # it waits for the write-back to start (the back-invalidation's CQID is in the tracker under that
        # line, in the stable state its last request left: ``rq.busy``, as for a request not yet
        # started), then reads that request's state.
        second = work.cam_hit & ~work.cam_evict
        req_hold = rq.busy | (rq.hit & t_stall)
        c_hold = ev & ~reserved & (second | req_hold | (need_work & ~work.can_alloc))
        c_work = ev & ~reserved & ~second & ~req_hold & need_work & work.can_alloc
        c_answer = ev & ~reserved & ~second & ~req_hold & ~need_work
        c_drop = ev & reserved
        # The release reaches the window from a register (what may clear a hold, from the request side's
        # decisions and ports, does not reach the window's issue in the same cycle).  A release is never
        # lost: one in the cycle of a hold, or later, reaches the window a cycle later, when the snoop is
        # held (or in the hold's cycle, where it wins).  One a cycle before the hold reaches the window in
        # the hold's cycle and wins too: the snoop goes again at once and is decided again (C had seen
        # what that release was for, so at worst it holds once more).  The cost: a held snoop goes again
        # a cycle later than its release.
        release_r = Signal()
        m.d.sync += release_r.eq(work.freed | self.req_release)
        m.d.comb += [win.pop.eq(c_drop | c_work | c_answer), win.hold.eq(c_hold), win.release.eq(release_r)]
        a = Signal.like(work.alloc.p)
        m.d.comb += [a.line.eq(res.line), a.way.eq(res.hit_way),
                     a.presence.eq(presence), a.op.eq(c.op), a.uqid.eq(c.uqid), a.st.eq(st),
                     a.query.eq(need_query), a.answer.eq(~need_query & ~need_probe),
                     a.cmd.eq(cmd_op_for(m, nxt)), a.rsp.eq(rsp), a.nxt.eq(nxt), a.data.eq(dat),
                     a.req.eq(rq.hit), a.cqid.eq(rq.cqid)]
        # the work entries' one allocation a cycle: snoop C's, or the request side's back-invalidation
        m.d.comb += [work.alloc.valid.eq(c_work | self.bi.valid), self.bi.ready.eq(work.can_alloc),
                     work.alloc.p.eq(Mux(self.bi.valid, self.bi.p, a))]
        with m.If(c_answer):
            m.d.comb += [rspq.push.eq(1), rspq.push_p.opcode.eq(rsp), rspq.push_p.uqid.eq(c.uqid)]

        # ---- the answer lane: the snoop filter's writer, the queue's second pusher ----------------
        lane = work.answer.p
        # A request's line: the verdict again, from the request's state now (a Data may have moved it
        # since C, e.g. SM_AD to SM_A, which a SnpInv leaves IM_A, not IM_AD; the response and the data
        # are the same either way); the request's state written, and the copies a probe took away
        # leave the filter's entry a placeholder with none.
        _, l_rsp, l_nxt, l_dat = snoop_table(m, self.lane_req_state, lane.op)
        l_drop_copies = lane.req & lane.probed & perm_none(l_nxt) & (lane.presence != 0)
        l_nxt_sf = lane.nxt != lane.st
        # (a back-invalidation frees the filter's entry and starts the write-back; it answers no snoop)
        lane_sf = Mux(lane.req, l_drop_copies, l_nxt_sf | lane.evict)   # the lane writes the snoop filter
        m.d.comb += self.lane_cqid.eq(lane.cqid)
        lane_ok = (~lane_sf | sf.update.ready) & ~(lane.req & self.lane_req_blocked)
        wb = self.wb_start
        m.d.comb += [wb.valid.eq(work.answer.valid & lane.evict & lane_ok), wb.p.idx.eq(lane.cqid),
                     wb.p.line.eq(lane.line), wb.p.way.eq(lane.way)]
        wb_code, wb_state = write_back(m, lane.st)         # (the model's _evict_after_back_invalidation)
        m.d.comb += [wb.p.op.eq(wb_code), wb.p.state.eq(wb_state)]
        lane_go = work.answer.valid & lane_ok & Mux(lane.evict, wb.ready, room >= 1)
        released = c.valid & ~c_answer
        lane_push = lane_go & ~lane.evict
        m.d.sync += [
            room.eq(room - a_go - lane_push + (self.d2h_rsp.valid & self.d2h_rsp.ready) + released),
            Assert(room == RSP_DEPTH - rspq.level - in_flight, "snoop pipe: the D2H Rsp room count drifted"),
        ]
        m.d.comb += [work.answer.ready.eq(lane_go),
                     rspq.push2.eq(lane_push), rspq.push2_p.opcode.eq(Mux(lane.req, l_rsp, lane.rsp)),
                     rspq.push2_p.uqid.eq(lane.uqid)]
        # (the write's payload from the lane's register alone, whether it goes or not: only its valid
        # waits for the lane's decision, so the line the filter writes, which its tag compares and the
        # request path's busy compares take in, does not; the lane never allocates, so its write replaces
        # no tag: hdl/dcoh/pipe/engine.py asserts it)
        upd = sf.update
        m.d.comb += [upd.valid.eq(lane_go & lane_sf), upd.p.line.eq(lane.line), upd.p.way.eq(lane.way),
                     upd.p.op.eq(Mux(~lane.evict & (lane.req | (lane.nxt == STATE_CODE[D.S])), SFOp.MODIFY,
                                     SFOp.FREE)),
                     upd.p.entry.state.eq(Mux(lane.req, SFState.PLACEHOLDER, SFState.S)),
                     upd.p.entry.dirty.eq(0),
                     upd.p.entry.presence.eq(Mux(lane.req, 0, lane.presence))]
        rw = self.req_write
        m.d.comb += [rw.valid.eq(lane_go & lane.req), rw.cqid.eq(lane.cqid), rw.state.eq(l_nxt),
                     rw.clear_peers.eq(l_drop_copies)]

        # ---- errors ------------------------------------------------------------------------------
        # A second snoop is counted once, not at every retry of its hold.
        second_counted = Signal()
        err = Mux(c_drop, ErrorKind.RESERVED_SNOOP, ErrorKind.SECOND_SNOOP)
        count = c_drop | (c_hold & second & ~second_counted)
        with m.If(count):
            m.d.sync += [self.protocol_errors.eq(self.protocol_errors + 1), self.last_error.eq(err)]
        with m.If(win.pop):
            m.d.sync += second_counted.eq(0)
        with m.Elif(c_hold & second):
            m.d.sync += second_counted.eq(1)

        # ---- the commit port ---------------------------------------------------------------------
        m.d.comb += [
            self.commit_c.eq(Mux(c_answer, CommitC.ANSWER, Mux(c_work, CommitC.WORK,
                             Mux(c_hold, CommitC.HOLD, Mux(c_drop, CommitC.DROP, CommitC.NONE))))),
            self.commit_c_line.eq(res.line),
            self.commit_lane.eq(lane_go), self.commit_lane_line.eq(lane.line),
            self.commit_lane_probed.eq(lane.probed),
            self.commit_probe.eq(work.probe_add.valid & work.probe_add.ready),
            self.commit_probe_line.eq(work.probe_add.p.line), self.commit_probe_evict.eq(work.probe_evict),
        ]

        # ---- checks ------------------------------------------------------------------------------
        m.d.sync += [
            Assert(~ev | (c.idx == win.head), "snoop pipe: C decides a snoop that is not the oldest"),
            Assert(~c_answer | ~dat, "snoop pipe: an answer with data and no copy to take it from"),
            Assert(~(ev & rq.hit & res.hit) | (res.entry.state != SFState.E),
                   "snoop pipe: a line with a request in flight has an E entry"),
            Assert(~(lane_go & lane.req) | (l_dat == lane.data),
                   "snoop pipe: a request's state changed whether its snoop forwards data"),
        ]
        return m
