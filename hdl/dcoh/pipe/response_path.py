"""The pipelined DCOH's response path: the host's H2D Rsp and H2D Data through a short pipeline over the tracker.

The second event class of the pipelined engine (docs/dcoh_pipeline.md), built and checked on its own: the
responses to the device's requests, from the request's start (``start``: the request path's port) to its
completion.  A response needs no snoop-filter lookup: the tracker entry its CQID names holds all it is
judged by, so the path is a pipeline over the tracker (as OpenPiton's L2 has a response pipeline beside
its request pipeline), and the snoop filter is written once, at a read's completion.

Stages
------
A (cycle N)
    One message is taken, an H2D Rsp or an H2D Data (the two take turns when both are offered), into
    the event register, while the lane queue has room for it and the events already in B and C.
B (N+1: read)
    The tracker's state of the CQID the message names (flip-flops, one select by the registered CQID, with
    C's write of this cycle forwarded) goes into C's register.  An H2D Data's line goes into the
    request's slot of the line RAM (line data stays in RAM, moved by the CQID), enabled by a per-entry
    bit "this state declares Data" kept beside the state (an Assert checks it against C's verdict).
C (N+2: decide and commit)
    The response table (:func:`hdl.dcoh.engine_tables.response_table`, from ``cxl.coherence``) decides the
    event from C's register.  An event the table declares writes the request's new state (and, for a
    GO-S / GO-E, which grant it carried).  If the event sends data (a write pull) or completes the
    request (its new state is stable), C queues an *action* for the lane.  C never waits (A counted the
    room); an event naming a CQID not in use or not declared for its request's state is counted and
    dropped (``UNKNOWN_CQID``, ``UNDECLARED``), as the DCOH does.  C reports what it applied on the
    commit port.
Lane (L1: the queue's head read, L2: act)
    The actions in C's order.  L1 reads the request's buffer slot and its start fields (registered RAM
    outputs) as the action enters L2; L2 sends the pulled line (``d2h_data``; a Bogus pull sends zeros),
    then, for a completion: a store granted E whose line other caches still hold first invalidates them
    (``cmd`` INV, waiting for its answer), then the snoop filter takes the fill (the entry the request
    allocated or upgraded: the granted state, the filling cache alone, the pseudo-LRU touched), the
    cache its answer (``cpu_rsp``: the state to install and the line), and the CQID is freed (``freed``).
    One action a cycle when the ports take at once; L2 holds while a port waits.

A request is *completing* from C's decision until the lane frees it: the tracker keeps its stable state,
and an H2D message naming it meanwhile counts as ``UNKNOWN_CQID``, as it would once it is freed.

Commit port (a shadow model's order)
------------------------------------
``commit`` names what C did in this cycle with the message taken two cycles earlier (``commit_cqid``):
``RSP`` / ``DATA`` applied it (the model's ``on_h2d_rsp`` / ``on_h2d_data``; with ``defer_complete`` the
model completes the request where the lane frees it, ``freed``), or ``DROP`` (counted as a protocol
error; the model raises on it).

What the request path must keep (when the two are put together, docs/dcoh_pipeline.md)
-------------------------------------------------------------------------------------
``start`` writes a whole entry: the request's opcode, line, start state, snoop-filter way, the cache it
serves, whether that is a CPU access and a store, the other caches' copies (``others``: an upgrade from S
invalidates them at its completion) and the line it writes back (write-backs and uncached writes).  It
is refused while an H2D Data is in B (the line RAM's one write port).  A snoop that takes the copies of a
line with a request on it must clear that request's ``others``; a snoop to a completing line must wait
for the lane (the model completes at once).
"""

from amaranth.hdl import Assert, Cat, Module, Mux, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from cxl.coherence import DevState as D, RESPONSE_TABLE
from cxl.messages import ADDR_WIDTH, D2HDataHdr, D2HReqOpcode as Req, H2DDataHdr, H2DRsp, H2DRspOpcode as HRsp, \
    ID_WIDTH, MAX_IDS
from hdl.link.ports import DataMsg, LINE_BITS

from ..encodings import (CacheCmd, CacheCmdRsp, CacheState, CmdOp, CpuRsp, ErrorKind, EVENTS, EVENT_CODE,
                         STATE_BITS, STATE_CODE)
from ..engine_tables import is_stable, response_table, rsp_event
from ..snoop_filter import SFOp, SFState, Update

__all__ = ["ResponsePath", "ResponseCommit", "RequestStart", "WriteBackStart", "LANE_DEPTH"]

LANE_DEPTH = 4          # actions queued for the lane (A counts the room, so C never waits)


class ResponseCommit(enum.Enum, shape=2):
    """What C did with the message it decided (``commit``)."""
    NONE = 0
    RSP = 1             #: applied an H2D Rsp (the model's on_h2d_rsp now)
    DATA = 2            #: applied an H2D Data (the model's on_h2d_data now)
    DROP = 3            #: dropped it: a CQID not in use, or a response its request's state does not declare


class RequestStart(data.StructLayout):
    """A request started in tracker entry ``idx`` (the request path's C, or a bench)."""
    def __init__(self, tracker, caches, ways, addr_width=ADDR_WIDTH):
        super().__init__({
            "idx": range(tracker), "op": Req, "line": addr_width, "state": STATE_BITS,
            "way": max(exact_log2(ways), 1), "cache": range(max(caches, 2)), "cpu": 1, "store": 1,
            "others": caches, "value": LINE_BITS})


class WriteBackStart(data.StructLayout):
    """A back-invalidated line's write-back, to start in tracker entry ``idx`` (the CQID its
    back-invalidation took; the request path's start register takes it)."""
    def __init__(self, tracker, addr_width, ways):
        super().__init__({"idx": range(tracker), "op": Req, "line": addr_width, "state": STATE_BITS,
                          "way": max(exact_log2(ways), 1)})


def _info_layout(caches, ways, addr_width):
    """A request's fields that only the lane reads (kept in RAM, read by CQID)."""
    return data.StructLayout({"op": Req, "line": addr_width, "way": max(exact_log2(ways), 1),
                              "cache": range(max(caches, 2)), "cpu": 1, "store": 1, "others": caches})


def _action_layout(tracker):
    return data.StructLayout({"cqid": range(tracker), "pull": 1, "bogus": 1, "uqid": ID_WIDTH, "done": 1,
                              "state": STATE_BITS})


def declares_data(state):
    """The response table declares an H2D Data in the device state code ``state``."""
    states = sorted({STATE_CODE[s] for (s, e) in RESPONSE_TABLE if e == "Data"})
    return Cat(state == c for c in states).any()


class ResponsePath(wiring.Component):
    """Parameters: ``caches`` (1..32), ``tracker`` (CQIDs, 2..4096), ``sf_ways`` (a power of two: the way
    field of the snoop filter's update), ``addr_width``.  Ports in the module docstring; ``sf_update`` is
    the snoop filter's update port (one write a cycle, always taken)."""

    def __init__(self, *, caches=2, tracker=16, sf_ways=4, addr_width=ADDR_WIDTH):
        def bad(name, value, why):
            raise ValueError(f"ResponsePath: {name}={value!r}: {why}")
        is_int = lambda v: isinstance(v, int) and not isinstance(v, bool)
        if not is_int(caches) or not 1 <= caches <= 32:
            bad("caches", caches, "must be an integer in 1..32")
        if not is_int(tracker) or not 2 <= tracker <= MAX_IDS:
            bad("tracker", tracker, f"must be an integer in 2..{MAX_IDS} (12-bit CQID)")
        if not is_int(sf_ways) or sf_ways < 1 or sf_ways & (sf_ways - 1):
            bad("sf_ways", sf_ways, "must be a power of two >= 1")
        self.caches, self.tracker, self.sf_ways, self.addr_width = caches, tracker, sf_ways, addr_width
        super().__init__({
            "h2d_rsp": In(stream.Signature(H2DRsp)),
            "h2d_data": In(stream.Signature(DataMsg(H2DDataHdr))),
            "start": In(stream.Signature(RequestStart(tracker, caches, sf_ways, addr_width))),
            "d2h_data": Out(stream.Signature(DataMsg(D2HDataHdr))),
            "cpu_rsp": Out(stream.Signature(CpuRsp(caches, addr_width))),
            "cmd": Out(stream.Signature(CacheCmd(caches, addr_width))),
            "cmd_rsp": In(stream.Signature(CacheCmdRsp())),
            "sf_update": Out(stream.Signature(Update(addr_width, sf_ways, caches))),
            "freed": Out(data.StructLayout({"valid": 1, "cqid": range(tracker)})),
            "commit": Out(ResponseCommit), "commit_cqid": Out(range(tracker)),
            "in_use": Out(tracker),
            # for the snoop side (hdl/dcoh/pipe/engine.py): every request's state; the snoop answer lane's
            # write of a request's state (with ``clear_peers``: the snoop took the copies an upgrade's
            # completion would invalidate); what C applies in this cycle (the lane waits for another
            # cycle rather than write the same request); a read of a request's line (a write-back's, for
            # a snoop that forwards it), registered
            "states": Out(data.ArrayLayout(STATE_BITS, tracker)),
            "snoop_write": In(data.StructLayout({"valid": 1, "cqid": range(tracker), "state": STATE_BITS,
                                                 "clear_peers": 1})),
            "c_apply": Out(data.StructLayout({"valid": 1, "cqid": range(tracker)})),
            "wb_read": In(data.StructLayout({"en": 1, "cqid": range(tracker)})), "wb_data": Out(LINE_BITS),
            "pinned": In(tracker),      # requests a snoop's work names: their completion waits
            "pinned_next": In(tracker),     # ``pinned`` in the next cycle (the lane registers its bit)
            "idle": Out(1),
            "protocol_errors": Out(16), "last_error": Out(ErrorKind),
        })

    def elaborate(self, platform):
        m = Module()
        T, K = self.tracker, self.caches
        # ---- the tracker: what C reads and writes in flip-flops, the rest in RAM ---------------------
        valid = Signal(T)
        state = [Signal(STATE_BITS, name=f"state{i}") for i in range(T)]
        granted_e = Signal(T)
        # whether the request's state declares an H2D Data, kept beside the state so that the buffer's
        # write enable is one bit selected by the CQID, not the response table's verdict
        wants_data = Signal(T)
        # the snoop side took the copies an upgrade's completion would otherwise invalidate
        no_peers = Signal(T)
        m.d.comb += [self.in_use.eq(valid)] + [self.states[i].eq(state[i]) for i in range(T)]
        info_layout = _info_layout(K, self.sf_ways, self.addr_width)
        m.submodules.info = info = Memory(shape=info_layout, depth=T, init=[])
        m.submodules.buf = buf = Memory(shape=LINE_BITS, depth=T, init=[])
        info_w, buf_w = info.write_port(), buf.write_port()
        info_r, buf_r = info.read_port(transparent_for=()), buf.read_port(transparent_for=())
        wb_r = buf.read_port(transparent_for=())
        m.d.comb += [wb_r.en.eq(self.wb_read.en), wb_r.addr.eq(self.wb_read.cqid), self.wb_data.eq(wb_r.data)]

        # ---- A: take one message into the event register --------------------------------------------
        ev = Signal(data.StructLayout({"valid": 1, "data": 1, "cqid": ID_WIDTH, "opcode": HRsp,
                                       "rsp_data": ID_WIDTH}))
        ev_line = Signal(LINE_BITS)
        c_valid_early = Signal()        # (C's valid, declared before C: A counts both stages' events)
        m.submodules.lane_q = lane_q = SyncFIFO(width=_action_layout(T).size, depth=LANE_DEPTH)
        room = lane_q.level + ev.valid + c_valid_early < LANE_DEPTH
        data_turn = Signal()            # the two channels take turns when both are offered
        take_rsp = self.h2d_rsp.valid & room & ~(self.h2d_data.valid & data_turn)
        take_data = self.h2d_data.valid & room & ~take_rsp
        m.d.comb += [self.h2d_rsp.ready.eq(take_rsp), self.h2d_data.ready.eq(take_data)]
        m.d.sync += ev.valid.eq(take_rsp | take_data)
        with m.If(take_rsp):
            m.d.sync += [ev.data.eq(0), ev.cqid.eq(self.h2d_rsp.p.cqid), ev.opcode.eq(self.h2d_rsp.p.opcode),
                         ev.rsp_data.eq(self.h2d_rsp.p.rsp_data), data_turn.eq(1)]
        with m.If(take_data):
            m.d.sync += [ev.data.eq(1), ev.cqid.eq(self.h2d_data.p.hdr.cqid), ev_line.eq(self.h2d_data.p.data),
                         data_turn.eq(0)]

        # ---- B: the request's tracker state, read into C's register ----------------------------------
        # (selected by the CQID from the flip-flops, with what C writes in this same cycle forwarded, so
        # that C starts from registers)
        b_idx = ev.cqid[:(T - 1).bit_length()]
        c = Signal(data.StructLayout({"valid": 1, "data": 1, "idx": range(T), "in_range": 1, "opcode": HRsp,
                                      "rsp_data": ID_WIDTH, "state": STATE_BITS, "live_entry": 1,
                                      "granted_e": 1, "wrote": 1}))
        rd_state, rd_valid, rd_granted_e = Signal(STATE_BITS), Signal(), Signal()
        with m.Switch(b_idx):
            for i in range(T):
                with m.Case(i):
                    m.d.comb += [rd_state.eq(state[i]), rd_valid.eq(valid[i]), rd_granted_e.eq(granted_e[i])]
        # An H2D Data's line goes into the request's slot here, in B: the write enable is the entry's
        # "state declares Data" bit (an entry in such a state is live; a free or completing one is in a
        # stable state, which declares none), less a Data right behind a Data to the same request (a
        # duplicate, which C drops: the first one's C makes the state stop declaring Data in this cycle;
        # no legal response does that otherwise).  An Assert checks it against C's verdict.
        b_in_range = ev.cqid < T
        dup_data = c.valid & c.data & (c.idx == b_idx)
        b_write = ev.valid & ev.data & b_in_range & wants_data.bit_select(b_idx, 1) & ~dup_data
        m.d.comb += c_valid_early.eq(c.valid)
        m.d.sync += [c.valid.eq(ev.valid), c.data.eq(ev.data), c.idx.eq(b_idx), c.in_range.eq(b_in_range),
                     c.opcode.eq(ev.opcode), c.rsp_data.eq(ev.rsp_data), c.wrote.eq(b_write)]

        # ---- C: decide and commit --------------------------------------------------------------------
        idx = c.idx
        live = c.in_range & c.live_entry & ~is_stable(c.state)
        rsp_code, rsp_known = rsp_event(m, c.opcode, c.rsp_data)
        code, code_ok = Signal(range(len(EVENTS))), Signal()
        m.d.comb += [code.eq(Mux(c.data, EVENT_CODE["Data"], rsp_code)), code_ok.eq(c.data | rsp_known)]
        legal, nxt, granted, send, bogus = response_table(m, c.state, code)
        go_s, go_e = code == EVENT_CODE["GO-S"], code == EVENT_CODE["GO-E"]
        # GRANTED (the data of a read whose GO came first): the grant that GO carried
        new_state = Signal(STATE_BITS)
        m.d.comb += new_state.eq(Mux(granted, Mux(c.granted_e, STATE_CODE[D.E], STATE_CODE[D.S]), nxt))
        apply = c.valid & live & code_ok & legal
        drop = c.valid & ~apply
        done = is_stable(new_state)
        with m.If(apply):
            with m.Switch(idx):
                for i in range(T):
                    with m.Case(i):
                        m.d.sync += [state[i].eq(new_state), wants_data[i].eq(declares_data(new_state))]
                        with m.If(go_s | go_e):
                            m.d.sync += granted_e[i].eq(go_e)
        action = Signal(_action_layout(T))
        m.d.comb += [action.cqid.eq(idx), action.pull.eq(send), action.bogus.eq(bogus),
                     action.uqid.eq(c.rsp_data), action.done.eq(done), action.state.eq(new_state),
                     lane_q.w_en.eq(apply & (send | done)), lane_q.w_data.eq(action.as_value())]
        # the buffer's one write port: an H2D Data's line (in B), else a request's start (refused meanwhile)
        start = self.start.p
        start_go = self.start.valid & self.start.ready
        m.d.comb += self.start.ready.eq(~(ev.valid & ev.data))
        with m.If(ev.valid & ev.data):
            m.d.comb += [buf_w.en.eq(b_write), buf_w.addr.eq(b_idx), buf_w.data.eq(ev_line)]
        with m.Else():
            m.d.comb += [buf_w.en.eq(self.start.valid), buf_w.addr.eq(start.idx), buf_w.data.eq(start.value)]
        m.d.comb += [info_w.en.eq(start_go), info_w.addr.eq(start.idx)]
        m.d.comb += [getattr(info_w.data, f).eq(getattr(start, f)) for f in info_layout.members]
        # the snoop side's write of a request's state (never in the cycle C applies to the same request:
        # the snoop lane waits then, ``c_apply``; never to a request starting, which it cannot see yet)
        sw = self.snoop_write
        with m.If(sw.valid):
            with m.Switch(sw.cqid):
                for i in range(T):
                    with m.Case(i):
                        m.d.sync += [state[i].eq(sw.state), wants_data[i].eq(declares_data(sw.state))]
                        with m.If(sw.clear_peers):
                            m.d.sync += no_peers[i].eq(1)
        m.d.comb += [self.c_apply.valid.eq(apply), self.c_apply.cqid.eq(idx)]
        with m.If(start_go):
            with m.Switch(start.idx):
                for i in range(T):
                    with m.Case(i):
                        m.d.sync += [state[i].eq(start.state), granted_e[i].eq(0), no_peers[i].eq(0),
                                     wants_data[i].eq(declares_data(start.state))]
        m.d.comb += [self.commit.eq(Mux(apply, Mux(c.data, ResponseCommit.DATA, ResponseCommit.RSP),
                                        Mux(drop, ResponseCommit.DROP, ResponseCommit.NONE))),
                     self.commit_cqid.eq(idx)]
        with m.If(drop):
            m.d.sync += [self.protocol_errors.eq(self.protocol_errors + 1),
                         self.last_error.eq(Mux(live, ErrorKind.UNDECLARED, ErrorKind.UNKNOWN_CQID))]

        # ---- the lane: L1 reads the head's slot and fields, L2 acts -----------------------------------
        l2 = Signal(_action_layout(T))
        l2_valid = Signal()
        inv_sent, inv_done = Signal(), Signal()
        l2_info = info_r.data
        finish = Signal()
        load = lane_q.r_rdy & (~l2_valid | finish)
        head = data.View(_action_layout(T), lane_q.r_data)
        m.d.comb += [lane_q.r_en.eq(load), info_r.en.eq(load), buf_r.en.eq(load),
                     info_r.addr.eq(head.cqid), buf_r.addr.eq(head.cqid)]
        dd = self.d2h_data
        m.d.comb += [dd.p.hdr.valid.eq(1), dd.p.hdr.uqid.eq(l2.uqid), dd.p.hdr.bogus.eq(l2.bogus),
                     dd.p.data.eq(Mux(l2.bogus, 0, buf_r.data))]
        k_mask = Signal(K)
        m.d.comb += k_mask.eq(1 << l2_info.cache)
        is_e, is_s = l2.state == STATE_CODE[D.E], l2.state == STATE_CODE[D.S]
        # The lane's request's ``no_peers`` and ``pinned`` bits are registers of the lane (``l2_no_peers``,
        # ``l2_pinned``), loaded with the bits of the request it holds in the next cycle as they will be
        # then (this cycle's writes of ``no_peers`` taken in), so that its completion does not select them
        # by the CQID in its own cycle.  (Asserts compare them with the selected bits.)
        l2_no_peers, l2_pinned = Signal(), Signal()
        need_inv = is_e & l2_info.store & (l2_info.others != 0) & ~l2_no_peers & ~inv_done
        cr, cmd = self.cpu_rsp, self.cmd
        m.d.comb += [cr.p.cache.eq(l2_info.cache), cr.p.line.eq(l2_info.line), cr.p.data.eq(buf_r.data),
                     cr.p.state.eq(Mux(is_e, Mux(l2_info.store, CacheState.M, CacheState.E),
                                       Mux(is_s, CacheState.S, CacheState.I))),
                     cmd.p.line.eq(l2_info.line), cmd.p.caches.eq(l2_info.others), cmd.p.op.eq(CmdOp.INV)]
        # The pull and the completion may go in one cycle (a write-back's GO_WritePull): the completion
        # is offered once the pulled line is taken or being taken.
        completes, filling = Signal(), Signal()
        upd = self.sf_update
        m.d.comb += filling.eq(is_e | is_s)         # the completion writes the snoop filter
        pulled = ~l2.pull | dd.ready
        m.d.comb += dd.valid.eq(l2_valid & l2.pull)
        with m.If(l2_valid & l2.pull & dd.ready):
            m.d.sync += l2.pull.eq(0)
        with m.If(l2_valid & l2.done & pulled):
            with m.If(need_inv):
                m.d.comb += [cmd.valid.eq(~inv_sent), self.cmd_rsp.ready.eq(inv_sent)]
                with m.If(cmd.valid & cmd.ready):
                    m.d.sync += inv_sent.eq(1)
                with m.If(self.cmd_rsp.valid & inv_sent):
                    m.d.sync += inv_done.eq(1)
            with m.Else():
                # the fill and the cache's answer go together: each offered once the other is taken
                # (the filter's update may wait for a writer with priority, the cache for its port)
                # (and neither while a snoop's work names the request: it may still read its buffer)
                free_to_go = ~l2_pinned
                m.d.comb += [cr.valid.eq(free_to_go & l2_info.cpu & (~filling | upd.ready)),
                             upd.valid.eq(free_to_go & filling & (~l2_info.cpu | cr.ready)),
                             completes.eq(free_to_go & (~filling | upd.ready) & (~l2_info.cpu | cr.ready))]
        m.d.comb += finish.eq(l2_valid & pulled & (~l2.done | completes))
        # (after L2's own updates: a new action loaded in the cycle L2 finishes takes its registers)
        with m.If(load):
            m.d.sync += [l2.eq(head), l2_valid.eq(1), inv_sent.eq(0), inv_done.eq(0)]
        with m.Elif(finish):
            m.d.sync += l2_valid.eq(0)
        m.d.comb += [upd.p.op.eq(SFOp.MODIFY),
                     upd.p.line.eq(l2_info.line), upd.p.way.eq(l2_info.way),
                     upd.p.entry.state.eq(Mux(is_e, SFState.E, SFState.S)), upd.p.entry.dirty.eq(0),
                     upd.p.entry.presence.eq(k_mask), upd.p.touch.eq(1),
                     self.freed.valid.eq(completes), self.freed.cqid.eq(l2.cqid)]
        # the tracker's writes: C's state, a start's entry, the lane's free (never the same entry: C
        # leaves a completing request alone, a start takes a free entry)
        for i in range(T):
            set_i = self.start.valid & self.start.ready & (start.idx == i)
            free_i = completes & (l2.cqid == i)
            with m.If(set_i):
                m.d.sync += valid[i].eq(1)
            with m.Elif(free_i):
                m.d.sync += valid[i].eq(0)
        m.d.comb += self.idle.eq(~ev.valid & ~lane_q.r_rdy & ~l2_valid)

        # (the lane's registered bits, above: its request in the next cycle, ``q``)
        q = Mux(load, head.cqid, l2.cqid)
        m.d.sync += [
            l2_no_peers.eq(Mux(start_go & (start.idx == q), 0,
                               Mux(sw.valid & sw.clear_peers & (sw.cqid == q), 1, no_peers.bit_select(q, 1)))),
            l2_pinned.eq(self.pinned_next.bit_select(q, 1)),
            Assert(l2_no_peers == no_peers.bit_select(l2.cqid, 1), "response path: the lane's no_peers bit is stale"),
            Assert(l2_pinned == self.pinned.bit_select(l2.cqid, 1), "response path: the lane's pinned bit is stale"),
        ]

        # ---- B's forwarding: what C writes in this cycle ----------------------------------------------
        # (A start or the lane's free in this cycle need none: a message naming a request the lane frees
        # finds it in a stable state, not live either way; one naming a request started in this cycle
        # cannot come from a host that has not yet seen its D2H Req, and counts as a CQID not in use.)
        fwd_c = apply & (idx == b_idx)
        fwd_snoop = sw.valid & (sw.cqid == b_idx)
        m.d.sync += [
            c.state.eq(Mux(fwd_c, new_state, Mux(fwd_snoop, sw.state, rd_state))),
            c.granted_e.eq(Mux(fwd_c & (go_s | go_e), go_e, rd_granted_e)),
            c.live_entry.eq(rd_valid),
        ]

        # ---- checks ----------------------------------------------------------------------------------
        start_idx_valid = Signal()
        with m.Switch(start.idx):
            for i in range(T):
                with m.Case(i):
                    m.d.comb += start_idx_valid.eq(valid[i])
        m.d.sync += [
            Assert(~(c.valid & c.data) | (c.wrote == apply), "response path: the buffer's write in B "
                   "differs from C's verdict on that H2D Data"),
            Assert(~(self.start.valid & self.start.ready) | ~start_idx_valid,
                   "response path: a request started in a tracker entry in use"),
            Assert(~(self.start.valid & self.start.ready & completes) | (start.idx != l2.cqid),
                   "response path: a request started in the entry the lane frees"),
            Assert(~lane_q.w_en | lane_q.w_rdy, "response path: the lane queue overflowed"),
            Assert(~(sw.valid & apply) | (sw.cqid != idx), "response path: a snoop's write to the request C "
                   "applies a response to"),
            Assert(~sw.valid | valid.bit_select(sw.cqid, 1), "response path: a snoop's write to a free entry"),
            Assert(~completes | valid.bit_select(l2.cqid, 1), "response path: a free entry completed"),
        ]
        return m
