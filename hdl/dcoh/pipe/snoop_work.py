"""The work of snoops that need the internal caches: one state machine per entry, woken by what it waits for.

The decision stage (C) hands a snoop here when its answer needs the copies of its line: to learn whether
an E line's copies are E or M (a *query*: the command KEEP), and/or to take permission or data from them
(a *probe* through the coalescer, then the command that downgrades or invalidates them); or when it
changes the snoop filter (the answer lane owns the filter's write port), then ready to answer at once.
Each entry then moves on its own, taking no pipeline slot:

=========== ============================================ ==========================================
state       waits for                                    then
=========== ============================================ ==========================================
QUERY       the command register (one command a cycle)   QUERY_WAIT (its command is loaded)
QUERY_WAIT  its answer (answers come in command order;   PROBE_ADD, or ANSWER if the copies keep
            it settles two cycles later, from registers) what the snoop leaves them
PROBE_ADD   room in the probe queue                      PROBE_OUT
PROBE_OUT   the coalescer taking it (known a cycle       PROBE_WAIT
            later)
PROBE_WAIT  the caches taking a probe message naming     CMD
            its line
CMD         the command register                         CMD_WAIT (its command is loaded)
CMD_WAIT    its answer (dirty, and the line: written     ANSWER (two cycles after the answer:
            into the entry's slot of the data memory)    it settles from registers)
ANSWER      the ``answer`` register                      LANE
LANE        the answer lane (the top's) taking it        FREE, or DATA_OUT if the answer has data
DATA_OUT    its line read out of the data memory         FREE
=========== ============================================ ==========================================

The verdict (the response, the next state, whether data goes) is worked out once, as the entry becomes
ready to answer, from the state the query or the command settled (an E line is M if a copy was dirty),
and kept in the entry.  The ``answer`` port's payload is a register, loaded with the lowest entry ready
to answer whenever it is empty or taken, so the answer lane (the snoop filter's writer, the top's)
starts from flops; so are the command port's payload and the probe queue's head.  Several entries wait
on each at once; each takes the lowest-numbered entry that wants it (a one-hot grant from a parallel
prefix OR, and a one-level select).  Commands may be outstanding several at a time (up to
``cmd_depth``): the caches answer them in order, and a FIFO of entry numbers (with the state and snoop
each answer is judged by) says whose answer comes next.

The line's data is kept in a memory with one slot per entry (written from ``cmd_rsp``), and read out by
the entry's number when its D2H Data goes, into the output register of ``d2h_data``: no line moves
through the control path.

``busy(line)`` (``cam_line`` / ``cam_hit``): the line has a snoop being answered here (an entry in any
state until the answer lane takes it, or the allocation about to be written; DATA_OUT no longer counts:
the line's state is settled).  C holds a second snoop to such a line.  ``freed``: an entry went back to FREE in this cycle (C may hold a snoop for want of an
entry).  ``can_alloc`` / ``alloc_idx``: the lowest free entry, which ``alloc`` takes (written into it
at the next edge: a registered allocation).

Asserts: ``alloc`` names a free entry; an answer to a command always has an entry waiting for it.
"""

import operator
from functools import reduce

from amaranth.hdl import Assert, Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import data, enum, fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from cxl.coherence import DevState as D
from cxl.messages import D2HDataHdr, D2HRspOpcode as Rsp, H2DReqOpcode as Snp, ID_WIDTH
from hdl.link.ports import LINE_BITS, DataMsg

from ..coalescer import Probe
from ..encodings import CacheCmd, CacheCmdRsp, CmdOp, STATE_BITS, STATE_CODE
from ..engine_tables import verdict_table

__all__ = ["WorkState", "WorkAlloc", "WorkAnswer", "SnoopWork", "lowest", "pick"]


class WorkState(enum.Enum, shape=4):
    FREE = 0
    QUERY = 1
    QUERY_WAIT = 2
    PROBE_ADD = 3
    PROBE_OUT = 4
    PROBE_WAIT = 5
    CMD = 6
    CMD_WAIT = 7
    ANSWER = 8
    LANE = 9
    DATA_OUT = 10


class WorkAlloc(data.StructLayout):
    """What C writes into a new entry: the snoop, its line's snoop-filter way and copies, the state C
    found (``st``), and whether the entry starts with a query, with a probe, or (``answer``: no copy to
    ask, but the snoop filter changes) ready to answer; with the command and the verdict C worked out.
    ``req``: the line has a request of the device in flight (tracker entry ``cqid``), whose state the
    answer lane reads and writes instead of the snoop filter's.  ``evict``: no snoop but a
    back-invalidation (the request side's: a way or its own line to free), which writes the line back
    under CQID ``cqid`` once its copies are taken (probe, then INV)."""
    def __init__(self, addr_width, way_bits, caches, tracker=2):
        super().__init__({"line": addr_width, "way": max(way_bits, 1), "presence": caches, "op": Snp,
                          "uqid": ID_WIDTH, "st": STATE_BITS, "query": 1, "answer": 1, "cmd": CmdOp,
                          "rsp": Rsp, "nxt": STATE_BITS, "data": 1, "req": 1, "cqid": range(tracker),
                          "evict": 1})


class WorkAnswer(data.StructLayout):
    """An entry ready to be answered, as the answer lane sees it."""
    def __init__(self, entries, addr_width, way_bits, caches, tracker=2):
        super().__init__({"idx": range(entries), "line": addr_width, "way": max(way_bits, 1),
                          "presence": caches, "uqid": ID_WIDTH, "st": STATE_BITS, "rsp": Rsp,
                          "nxt": STATE_BITS, "data": 1, "probed": 1, "op": Snp, "req": 1,
                          "cqid": range(tracker), "evict": 1})


def lowest(m, bits, name):
    """(any, index, grant) of the lowest set bit of ``bits``: a priority encoder built as a tree (a lower
    part of a power-of-two size first, then the rest, whose index gets that power's bit), log2 of the
    width deep, not a chain of one mux per bit; and the same choice one-hot (``grant``: each bit and no
    lower one, from a parallel prefix OR), for whoever acts on the chosen bit without decoding the index."""
    def enc(lo, hi):
        if hi - lo == 1:
            return bits[lo], Const(0, 0)
        half = 1 << ((hi - lo - 1).bit_length() - 1)     # the largest power of two below the size
        k = half.bit_length() - 1
        a_any, a_idx = enc(lo, lo + half)
        b_any, b_idx = enc(lo + half, hi)
        b_full = Cat(b_idx, Const(0, k - len(b_idx)), Const(1, 1))
        return a_any | b_any, Mux(a_any, Cat(a_idx, Const(0, k + 1 - len(a_idx))), b_full)

    def prefix_or(xs):                                   # p[i] = xs[0] | ... | xs[i], log2 deep
        if len(xs) == 1:
            return list(xs)
        half = len(xs) // 2
        lo, hi = prefix_or(xs[:half]), prefix_or(xs[half:])
        return lo + [lo[-1] | h for h in hi]
    n = len(bits)
    idx = Signal(range(max(n, 2)), name=f"{name}_idx")
    grant = Signal(n, name=f"{name}_grant")
    anyv, tree = enc(0, n)
    before = prefix_or([bits[i] for i in range(n)])
    m.d.comb += [idx.eq(tree), grant.eq(Cat(bits[0], *(bits[i] & ~before[i - 1] for i in range(1, n))))]
    return anyv, idx, grant


def pick(m, idx, items, name):
    """``items[idx]`` as a signal: a one-level select (a Switch, which Yosys builds as a parallel
    multiplexer), not a chain of one mux per item."""
    out = Signal.like(items[0], name=name)
    with m.Switch(idx):
        for i, item in enumerate(items):
            with m.Case(i):
                m.d.comb += out.eq(item)
    return out


class SnoopWork(wiring.Component):
    """``entries`` work entries (module docstring); ``cmd_depth`` commands outstanding at most."""

    def __init__(self, entries, caches, addr_width, sf_ways, block, cmd_depth=4, tracker=2, set_bits=0):
        for name, v, lo in (("entries", entries, 1), ("cmd_depth", cmd_depth, 1)):
            if not isinstance(v, int) or isinstance(v, bool) or v < lo:
                raise ValueError(f"SnoopWork: {name}={v!r}: must be an integer >= {lo}")
        self.entries, self.caches, self.addr_width = entries, caches, addr_width
        self.way_bits = exact_log2(sf_ways)
        self.block, self.block_bits = block, exact_log2(block)
        self.cmd_depth, self.tracker, self.set_bits = cmd_depth, tracker, set_bits
        super().__init__({
            "can_alloc": Out(1), "alloc_idx": Out(range(max(entries, 2))),
            "alloc": In(stream.Signature(WorkAlloc(addr_width, self.way_bits, caches, tracker))),
            # ``cam_evict``: the line's entry is a back-invalidation; ``cam_set``: an entry's line is in
            # the set of ``cam_line`` (the request side chooses no victim there meanwhile)
            "cam_line": In(addr_width), "cam_hit": Out(1), "cam_evict": Out(1), "cam_set": Out(1),
            # ``cam_line``'s value in the next cycle, and whether ``alloc``'s line is it (the CAM's line
            # compares are made a cycle early, into registers)
            "cam_next_line": In(addr_width), "alloc_line_next": In(1),
            "cmd": Out(stream.Signature(CacheCmd(caches, addr_width))),
            "cmd_rsp": In(stream.Signature(CacheCmdRsp())),
            "probe_add": Out(stream.Signature(Probe(addr_width, caches))),
            "probe_evict": Out(1),      # the probe offered on ``probe_add`` is a back-invalidation's
            "probe_taken": In(1), "probe_block": In(addr_width - self.block_bits), "probe_lines": In(block),
            "answer": Out(stream.Signature(WorkAnswer(entries, addr_width, self.way_bits, caches, tracker))),
            "d2h_data": Out(stream.Signature(DataMsg(D2HDataHdr))),
            # the line of a request's write-back buffer (a snoop to a line being written back forwards
            # it): ``wb_read`` reads tracker entry ``cqid``, its line comes in ``wb_data`` a cycle later
            "wb_read": Out(data.StructLayout({"en": 1, "cqid": range(tracker)})), "wb_data": In(LINE_BITS),
            # the requests a work entry names (their tracker entries must not be freed before it ends)
            "pinned": Out(tracker),
            "pinned_next": Out(tracker),       # ``pinned``'s value in the next cycle
            # a back-invalidation's line (its copies' data), read as the answer lane takes it: valid from
            # the next cycle until the next back-invalidation is taken
            "evict_value": Out(LINE_BITS),
            "freed": Out(1), "idle": Out(1),   # ``idle``: every entry free (none about to be taken)
            "states": Out(data.ArrayLayout(WorkState, entries)),       # (for benches' diagnostics)
        })

    def elaborate(self, platform):
        m = Module()
        n, K, AW = self.entries, self.caches, self.addr_width
        layout = data.StructLayout({
            "state": WorkState, "line": AW, "way": max(self.way_bits, 1), "presence": K, "op": Snp,
            "uqid": ID_WIDTH, "st": STATE_BITS, "cmd": CmdOp, "rsp": Rsp, "nxt": STATE_BITS, "data": 1,
            "probed": 1, "req": 1, "cqid": range(self.tracker), "evict": 1})
        e = [Signal(layout, name=f"work{i}") for i in range(n)]

        def in_state(*states):
            return Cat(*(Cat(*(x.state == s for s in states)).any() for x in e))

        # ---- allocation (C): the lowest free entry, written a cycle later ---------------------------
        # C's allocation is registered (``pend``: the snoop and the one-hot entry it takes) and written
        # into its entry at the next edge, so C's decision reaches a register, not every entry's enables.
        # Meanwhile the pending entry is not free (``can_alloc`` and the choice leave it out) and its line
        # is busy (the CAM compares it too).
        pend_valid, pend_grant = Signal(), Signal(n)
        pend = Signal.like(self.alloc.p)
        free_now = in_state(WorkState.FREE) & ~Mux(pend_valid, pend_grant, 0)
        can, idx, g_free = lowest(m, free_now, "free")
        m.d.comb += [self.can_alloc.eq(can), self.alloc_idx.eq(idx), self.alloc.ready.eq(can)]
        m.d.sync += [pend_valid.eq(self.alloc.valid), pend.eq(self.alloc.p), pend_grant.eq(g_free)]
        a = pend
        for i in range(n):                  # (the entry's state: its moves, below)
            with m.If(pend_valid & pend_grant[i]):
                m.d.sync += [e[i].line.eq(a.line), e[i].way.eq(a.way), e[i].presence.eq(a.presence),
                             e[i].op.eq(a.op), e[i].uqid.eq(a.uqid), e[i].st.eq(a.st), e[i].cmd.eq(a.cmd),
                             e[i].rsp.eq(a.rsp), e[i].nxt.eq(a.nxt), e[i].data.eq(a.data),
                             e[i].probed.eq(~a.query & ~a.answer), e[i].req.eq(a.req), e[i].cqid.eq(a.cqid),
                             e[i].evict.eq(a.evict)]
        m.d.sync += Assert(~self.alloc.valid | can, "snoop work: an entry allocated with none free")

        # ---- the line's snoop is being answered here (or its entry is about to be written) -------
        # Each entry's line (and the pending allocation's) is compared with ``cam_line``'s next value
        # into a register (``line_eq``), with the line the entry takes at this edge; the states of the
        # cycle are applied to those, so the CAM starts from flops.  (Reset: lines of zeros, equal.)
        live = [(x.state != WorkState.FREE) & (x.state != WorkState.DATA_OUT) for x in e]
        line_eq = Signal(n + 1, init=(1 << (n + 1)) - 1)
        for i, x in enumerate(e):
            m.d.sync += line_eq[i].eq(Mux(pend_valid & pend_grant[i],
                                          (pend.line == self.cam_next_line), x.line == self.cam_next_line))
        m.d.sync += line_eq[n].eq(self.alloc_line_next)
        busy = Cat(*(lv & line_eq[i] for i, lv in enumerate(live)), pend_valid & line_eq[n])
        m.d.sync += Assert(busy == Cat(*(lv & (x.line == self.cam_line) for lv, x in zip(live, e)),
                                       pend_valid & (pend.line == self.cam_line)),
                           "snoop work: the registered line compares are stale")
        evict = Cat(*(x.evict for x in e), pend.evict)
        sb = self.set_bits
        same_set = Cat(*((x.state != WorkState.FREE) & (x.line[:sb] == self.cam_line[:sb]) for x in e),
                       pend_valid & (pend.line[:sb] == self.cam_line[:sb])) if sb else \
            Cat(*(x.state != WorkState.FREE for x in e), pend_valid)
        m.d.comb += [self.cam_hit.eq(busy.any()), self.cam_evict.eq((busy & evict).any()),
                     self.cam_set.eq(same_set.any())]

        # ---- commands: the lowest entry that wants one goes into the command register (the port's
        # payload, from flops) whenever it is empty or taken; the entry waits for its answer from then
        # on, and its number joins ``order`` (answers come in the order the commands went)
        # ``order`` carries with each entry's number the state and snoop its answer is judged by, so the
        # answer needs no select among the entries
        idx_bits = ceil_log2(max(n, 2))
        order_layout = data.StructLayout({"idx": idx_bits, "st": STATE_BITS, "op": Snp})
        m.submodules.order = order = fifo.SyncFIFO(width=order_layout.size, depth=self.cmd_depth)
        want, c_idx, g_cmd = lowest(m, in_state(WorkState.QUERY, WorkState.CMD), "cmd")
        c_e = pick(m, c_idx, e, "c_e")
        cmd_free = ~self.cmd.valid | self.cmd.ready
        cmd_load = want & cmd_free & order.w_rdy
        with m.If(cmd_free):
            m.d.sync += self.cmd.valid.eq(cmd_load)
        with m.If(cmd_load):
            m.d.sync += [self.cmd.p.line.eq(c_e.line), self.cmd.p.caches.eq(c_e.presence),
                         self.cmd.p.op.eq(Mux(c_e.state == WorkState.QUERY, CmdOp.KEEP, c_e.cmd))]
        order_in = Signal(order_layout)
        m.d.comb += [order_in.idx.eq(c_idx), order_in.st.eq(c_e.st), order_in.op.eq(c_e.op),
                     order.w_data.eq(order_in), order.w_en.eq(cmd_load)]

        # The answer: to the entry at the head of ``order``.  Its line goes into the entry's slot of the
        # data memory at once (a query's answer writes a slot its command's answer overwrites later); the
        # answer itself is registered with the head (``s_*``), the verdict on it is worked out from those
        # flops and registered in turn (``v_*``), and the entry takes it in the cycle after: two cycles
        # from the answer, each starting from flops.
        head = data.View(order_layout, order.r_data)
        m.d.comb += [self.cmd_rsp.ready.eq(1), order.r_en.eq(self.cmd_rsp.valid)]
        m.d.sync += Assert(~self.cmd_rsp.valid | order.r_rdy, "snoop work: a command answer with no command out")
        m.submodules.lines = lines = Memory(shape=LINE_BITS, depth=n, init=[])
        lw = lines.write_port()
        m.d.comb += [lw.addr.eq(head.idx), lw.data.eq(self.cmd_rsp.p.data), lw.en.eq(self.cmd_rsp.valid)]
        s_valid, s_head = Signal(), Signal(order_layout)
        s_dirty, s_excl = Signal(), Signal()
        m.d.sync += [s_valid.eq(self.cmd_rsp.valid), s_head.eq(head),
                     s_dirty.eq(self.cmd_rsp.p.dirty), s_excl.eq(self.cmd_rsp.p.excl)]
        # the state the answer settles (an E line is M if a copy was dirty), and the verdict on it: the
        # table looked up for both states at once, the answer choosing
        to_m = s_dirty & (s_head.st == STATE_CODE[D.E])
        as_is, as_m = verdict_table(m, s_head.st, s_head.op), verdict_table(m, Const(STATE_CODE[D.M], STATE_BITS),
                                                                           s_head.op)
        v_valid, v_idx, v_st = Signal(), Signal(range(max(n, 2))), Signal(STATE_BITS)
        v_rsp, v_nxt, v_data = Signal(Rsp, init=Rsp.RspIHitI), Signal(STATE_BITS), Signal()
        v_cmd, probe = Signal(CmdOp), Signal()
        m.d.sync += [v_valid.eq(s_valid), v_idx.eq(s_head.idx),
                     v_st.eq(Mux(to_m, STATE_CODE[D.M], s_head.st))]
        for reg, field in ((v_rsp, "rsp"), (v_nxt, "nxt"), (v_data, "data"), (v_cmd, "cmd")):
            m.d.sync += reg.eq(Mux(to_m, as_m[field], as_is[field]))
        # after a query: the model's rule, fetch data or take away permission the copies have (S copies
        # unless the query found an E or M one)
        m.d.sync += probe.eq(Mux(to_m, Mux(s_excl, as_m["probe_rw"], as_m["probe_s"]),
                                 Mux(s_excl, as_is["probe_rw"], as_is["probe_s"])))

        # ---- probes: the lowest entry that wants to add one goes into a short queue whose head the
        # coalescer takes (one a cycle).  The queue's room is a register, so the coalescer's ready (worked
        # out from its slots in the same cycle) reaches only the queue, not the entries' choice; the
        # entry learns that its probe went in the next cycle (``p_sent``).
        p_want, p_idx, g_probe = lowest(m, in_state(WorkState.PROBE_ADD), "probe")
        p_e = pick(m, p_idx, e, "p_e")
        PL = len(Value.cast(self.probe_add.p))
        m.submodules.probes = probes = fifo.SyncFIFOBuffered(width=PL + idx_bits + 1, depth=4)
        probe_load = p_want & probes.w_rdy
        p_sent, p_sent_idx = Signal(), Signal(range(max(n, 2)))
        m.d.comb += [probes.w_en.eq(probe_load),
                     probes.w_data.eq(Cat(p_e.line, p_e.presence, p_idx, Const(0, idx_bits - len(p_idx)), p_e.evict)),
                     self.probe_add.valid.eq(probes.r_rdy), self.probe_add.p.eq(probes.r_data[:PL]),
                     self.probe_evict.eq(probes.r_data[PL + idx_bits]), probes.r_en.eq(self.probe_add.ready)]
        m.d.sync += [p_sent.eq(self.probe_add.valid & self.probe_add.ready),
                     p_sent_idx.eq(probes.r_data[PL:PL + idx_bits])]

        # ---- the answer register: the lowest entry ready to answer, for the answer lane (the top's)
        a_want, a_idx, g_answer = lowest(m, in_state(WorkState.ANSWER), "answer")
        a_e = pick(m, a_idx, e, "a_e")
        ap = self.answer.p
        answered = self.answer.valid & self.answer.ready
        load = a_want & (~self.answer.valid | self.answer.ready)
        with m.If(~self.answer.valid | self.answer.ready):
            m.d.sync += self.answer.valid.eq(a_want)
        with m.If(load):
            m.d.sync += [ap.idx.eq(a_idx), ap.line.eq(a_e.line), ap.way.eq(a_e.way), ap.presence.eq(a_e.presence),
                         ap.uqid.eq(a_e.uqid), ap.st.eq(a_e.st), ap.rsp.eq(a_e.rsp), ap.nxt.eq(a_e.nxt),
                         ap.data.eq(a_e.data), ap.probed.eq(a_e.probed), ap.op.eq(a_e.op), ap.req.eq(a_e.req),
                         ap.cqid.eq(a_e.cqid), ap.evict.eq(a_e.evict)]

        # ---- D2H Data: the entries whose answer has data, in answer order; the line read by number,
        # into the output register
        m.submodules.data_order = data_order = fifo.SyncFIFO(width=ceil_log2(max(n, 2)), depth=n)
        m.d.comb += [data_order.w_data.eq(ap.idx), data_order.w_en.eq(answered & ap.data)]
        # a back-invalidation's line, for its write-back's start
        er = lines.read_port()
        m.d.comb += [er.addr.eq(ap.idx), er.en.eq(answered & ap.evict), self.evict_value.eq(er.data)]

        # (a snoop to a line a request writes back forwards the request's buffer, read by its CQID)
        lr = lines.read_port()                          # registered: the line in the cycle after its read
        out_valid, out_uqid, out_wb = Signal(), Signal(ID_WIDTH), Signal()
        out_free = ~out_valid | self.d2h_data.ready
        take = out_free & data_order.r_rdy
        d_idx = data_order.r_data
        d_uqid = pick(m, d_idx, [x.uqid for x in e], "d_uqid")
        m.d.comb += [lr.addr.eq(d_idx), lr.en.eq(take), data_order.r_en.eq(take),
                     self.wb_read.en.eq(take), self.wb_read.cqid.eq(pick(m, d_idx, [x.cqid for x in e], "d_cqid")),
                     self.d2h_data.valid.eq(out_valid), self.d2h_data.p.hdr.valid.eq(1),
                     self.d2h_data.p.hdr.uqid.eq(out_uqid),
                     self.d2h_data.p.data.eq(Mux(out_wb, self.wb_data, lr.data))]
        with m.If(out_free):
            m.d.sync += out_valid.eq(take)
        with m.If(take):
            m.d.sync += [out_uqid.eq(d_uqid), out_wb.eq(pick(m, d_idx, [x.req for x in e], "d_req"))]

        # ---- the entries' state machines (every transition of one entry in one place) -----------
        # A probe message the caches took (``probe_taken``, registered by the top: the wake comes in the
        # cycle after) wakes the entries waiting on a line it names.  The coalescer keeps one group per
        # block at a time, but a probe to the block may open the next group in the cycle the message is
        # taken, and its entry waits in PROBE_WAIT by the time the wake comes: the line it names keeps
        # that entry asleep (its line cannot be in the old message: the entry that had it there is the
        # one being woken, still in use).
        for i, x in enumerate(e):
            named = self.probe_lines.bit_select(x.line[:self.block_bits], 1) if self.block_bits \
                else self.probe_lines[0]
            woken = self.probe_taken & (x.line[self.block_bits:] == self.probe_block) & named
            at = {st: x.state == st for st in WorkState}
            mine_v = v_valid & (v_idx == i)
            # Every move of the entry as (condition, next state); the conditions exclude each other (each
            # names the state it leaves), so the next state is an AND-OR of them, not a chain of selects.
            moves = [
                (at[WorkState.FREE] & pend_valid & pend_grant[i],
                 Mux(a.query, WorkState.QUERY, Mux(a.answer, WorkState.ANSWER, WorkState.PROBE_ADD))),
                (at[WorkState.QUERY] & cmd_load & g_cmd[i], WorkState.QUERY_WAIT),
                (at[WorkState.CMD] & cmd_load & g_cmd[i], WorkState.CMD_WAIT),
                (at[WorkState.QUERY_WAIT] & mine_v, Mux(probe, WorkState.PROBE_ADD, WorkState.ANSWER)),
                (at[WorkState.PROBE_ADD] & probe_load & g_probe[i], WorkState.PROBE_OUT),
                (at[WorkState.PROBE_OUT] & p_sent & (p_sent_idx == i), WorkState.PROBE_WAIT),
                (at[WorkState.PROBE_WAIT] & woken, WorkState.CMD),
                (at[WorkState.CMD_WAIT] & mine_v, WorkState.ANSWER),
                (at[WorkState.ANSWER] & load & g_answer[i], WorkState.LANE),
                (at[WorkState.LANE] & answered & (ap.idx == i), Mux(x.data, WorkState.DATA_OUT, WorkState.FREE)),
                (at[WorkState.DATA_OUT] & take & (d_idx == i), WorkState.FREE),
            ]
            moving = Cat(*(c for c, _ in moves)).any()
            terms = [Mux(c, Value.cast(t), 0) for c, t in moves] + [Mux(moving, 0, x.state.as_value())]
            m.d.sync += x.state.as_value().eq(reduce(operator.or_, terms))
            with m.If(at[WorkState.QUERY_WAIT] & mine_v):
                m.d.sync += [x.st.eq(v_st), x.rsp.eq(v_rsp), x.nxt.eq(v_nxt), x.data.eq(v_data),
                             x.cmd.eq(v_cmd), x.probed.eq(probe)]
            with m.If(at[WorkState.CMD_WAIT] & mine_v):
                # the verdict on the state the command's answer settles (dirty: E was M); a
                # back-invalidation sends no data of its own (its write-back does)
                m.d.sync += [x.st.eq(v_st), x.rsp.eq(v_rsp), x.nxt.eq(v_nxt), x.data.eq(v_data & ~x.evict)]
        busy_states = [st for st in WorkState if st != WorkState.FREE]
        m.d.comb += [self.freed.eq((answered & ~ap.data) | take),
                     self.idle.eq(~in_state(*busy_states).any() & ~pend_valid)]
        m.d.comb += [self.states[i].eq(x.state) for i, x in enumerate(e)]
        # ``pinned`` is a register, loaded with what the entries name after this cycle's moves (an entry
        # written from the pending allocation, or one ending): the response path's completion reads it
        # from a flop, not through every entry's state decode and CQID compare.  Its value is the same
        # in every cycle (the Assert compares it with the entries).
        ends = [(x.state == WorkState.LANE) & answered & (ap.idx == i) & ~x.data |
                (x.state == WorkState.DATA_OUT) & take & (d_idx == i) for i, x in enumerate(e)]
        starts = [(x.state == WorkState.FREE) & pend_valid & pend_grant[i] for i, x in enumerate(e)]
        pinned_now = Signal(self.tracker)
        for q in range(self.tracker):
            nxt = Cat(*(Mux(st, a.req & (a.cqid == q), (x.state != WorkState.FREE) & ~en & x.req & (x.cqid == q))
                        for x, st, en in zip(e, starts, ends))).any()
            m.d.comb += self.pinned_next[q].eq(nxt)
            m.d.sync += self.pinned[q].eq(nxt)
            m.d.comb += pinned_now[q].eq(Cat(*((x.state != WorkState.FREE) & x.req & (x.cqid == q)
                                                for x in e)).any())
        m.d.sync += Assert(self.pinned == pinned_now, "snoop work: the pinned register differs from the entries")
        return m
