"""The DCOH's blocks and registers beside its engine.

The snoop filter's lookup and update ports, the tracker and its line buffer, the work table, the waiting CPU
accesses and their store data, the D2H request transmit (per-class CQID FIFOs, the arbiter, the credit
counters), the D2H response and data outputs, the probe path to the coalescer, the engine's registers, and
the helpers through which the engine's states write the tables and wait for the caches' answers.

Builders of :meth:`hdl.dcoh.dcoh.DCOH.elaborate` (``ctx``: docs/dcoh.md, "Source layout").
"""

import functools
import operator

from amaranth.hdl import Assert, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, fifo
from amaranth.lib.memory import Memory
from amaranth.utils import exact_log2

from hdl.link.ports import LINE_BITS, channel_shape
from cxl.messages import ID_WIDTH, Channel, D2HRspOpcode as Rsp, H2DReqOpcode as Snp
from cxl.device import REQUEST_PRIORITY

from .encodings import CacheState, CpuKind, STATE_BITS
from .tracker import TrackerTable, tracker_entry
from .work_table import WorkTable, work_entry
from .qos import CreditCounter, PriorityArbiter
from .snoop_filter import SFEntry

__all__ = ["build_blocks", "build_waiting_accesses", "build_lookup_helpers", "build_sf_ports", "build_d2h",
           "build_probe_path", "build_registers", "build_write_helpers"]


def build_blocks(self, ctx):
    """The module, the sub-blocks (snoop filter, coalescer, CQIDs, DevLoad, arbiter, credit counters,
    per-class CQID FIFOs), the tracker with its line buffer, and the work table."""
    m = Module()
    K, T, W = self.caches, self.tracker, self.work
    AW = self.addr_width
    set_bits = exact_log2(self.sf_sets)
    way_bits = exact_log2(self.sf_ways)
    m.submodules.sf = sf = self.sf
    m.submodules.coal = coal = self.coal
    m.submodules.cqids = cqids = self.cqids
    m.submodules.devload = dl = self.devload_block
    m.submodules.arb = arb = PriorityArbiter(3, self.starvation_bound)
    m.submodules.crd_req = crq = CreditCounter(self.credits)
    m.submodules.crd_rsp = crs = CreditCounter(self.credits)
    m.submodules.crd_data = crd = CreditCounter(self.credits)
    class_fifos = []
    for c in range(3):
        f = fifo.SyncFIFOBuffered(width=ID_WIDTH, depth=T)
        m.submodules[f"class{c}"] = f
        class_fifos.append(f)

    m.d.comb += [crq.ret.eq(self.crd_req), crs.ret.eq(self.crd_rsp), crd.ret.eq(self.crd_data),
                 dl.occupancy.eq(cqids.count), self.devload.eq(dl.level),
                 self.msgs_in.eq(coal.msgs_in), self.msgs_out.eq(coal.msgs_out)]

    # ---- tracker (registers, hdl/dcoh/tracker.py) and its data buffer (a memory: one line per CQID)
    m.submodules.tracker = tracker = TrackerTable(T, tracker_entry(K, AW, way_bits, STATE_BITS))
    trk = self.trk = tracker.entries                       # tests read it (tracker states)
    m.submodules.buf = buf = Memory(shape=LINE_BITS, depth=T, init=[])
    buf_w = buf.write_port()
    buf_r = buf.read_port()
    m.d.comb += buf_r.en.eq(1)

    # ---- work table: lines with probes outstanding (a held snoop and/or a back-invalidation) --
    m.submodules.work_table = work_table = WorkTable(W, work_entry(AW, way_bits, SFEntry(K)))
    wk = work_table.entries

    ctx.AW, ctx.K, ctx.T, ctx.W, ctx.arb, ctx.buf_r, ctx.buf_w = AW, K, T, W, arb, buf_r, buf_w
    ctx.class_fifos, ctx.coal, ctx.cqids, ctx.crd, ctx.crq, ctx.crs = class_fifos, coal, cqids, crd, crq, crs
    ctx.m, ctx.set_bits, ctx.sf, ctx.tracker, ctx.trk, ctx.wk = m, set_bits, sf, tracker, trk, wk
    ctx.work_table = work_table


def build_waiting_accesses(self, ctx):
    """The waiting CPU accesses (one slot per cache, a queue of cache indices), their store data, and
    the wake-up rule's reason and ``woken`` bits."""
    AW, K, m = ctx.AW, ctx.K, ctx.m

    # ---- waiting CPU accesses: one per cache, a queue of cache indices in arrival order --------
    # The line a store or an uncached write brings waits apart, in a memory indexed by cache
    # (``store_data``), not beside the access in flip-flops: the rescan reads it by index into the
    # line register (S_RES), through the memory's registered read port.
    # (an entry's cache is its index)
    AccessReq = data.StructLayout({"kind": CpuKind, "line": AW, "variant": 1})
    ops = Signal(data.ArrayLayout(data.StructLayout({
        "valid": 1, "req": AccessReq, "victim_valid": 1, "victim": AW}), K))
    queue = Signal(data.ArrayLayout(range(max(K, 2)), K))
    q_len = Signal(range(K + 1))
    self.ops, self.queue, self.q_len = ops, queue, q_len         # tests read them
    m.submodules.store_data = store_data = Memory(shape=LINE_BITS, depth=max(K, 2), init=[])
    sd_w = store_data.write_port()
    # read at the index the access being tried will have (``cur_k``'s next value: SCAN and the CPU
    # dispatch drive it), so S_RES finds its line; transparent, for a store taken and looked
    # up in the same cycle
    sd_r = store_data.read_port(transparent_for=(sd_w,))
    m.d.comb += [sd_w.addr.eq(self.cpu_req.p.cache), sd_w.data.eq(self.cpu_req.p.data), sd_r.en.eq(1)]
    # What each waiting access waits for, and whether an event freed it since the access's last try
    # (the model's ``CpuOp.why`` and ``Device.woken``; docs/dcoh.md, "Waking the waiting accesses").
    # A failed try records its reasons, one bit each: a CQID, a work entry, or ``loc``, its line or a
    # way of its line's set.  ``loc`` is woken by any event that frees a line of that set, a superset
    # of the model's keys (set-index compares instead of line compares; an access woken for
    # nothing fails its try again, without side effects, which the model's ``verify_wake`` checks).
    # A new access is woken; a rescan's first round tries only the woken accesses (``scan_all``
    # clear), the rounds after an issue try every one.
    why_cqid, why_work, why_loc = Signal(K), Signal(K), Signal(K)
    woken = Signal(K)
    scan_all = Signal()
    self.woken = woken                                           # tests read it

    ctx.ops, ctx.q_len, ctx.queue, ctx.scan_all, ctx.sd_r, ctx.sd_w = ops, q_len, queue, scan_all, sd_r, sd_w
    ctx.why_cqid, ctx.why_loc, ctx.why_work, ctx.woken = why_cqid, why_loc, why_work, woken


def build_lookup_helpers(self, ctx):
    """The tracker index of a CQID, the tracker's and the work table's line compares, a priority
    encoder, and the free work entries."""
    T, W, m, trk, wk = ctx.T, ctx.W, ctx.m, ctx.trk, ctx.wk

    tbits = (T - 1).bit_length()

    def t_idx(cqid):
        """A CQID as a tracker index: only its low log2(T) bits, so that the tracker's read muxes and
        write decoders are as narrow as the tracker (a CQID from the host is range-checked apart)."""
        return cqid[:tbits]

    def tcam(line):
        return Cat(trk[i].valid & (trk[i].line == line) for i in range(T))

    def wcam(line):
        return Cat(wk[i].valid & (wk[i].line == line) for i in range(W))

    def first(bits, n):
        """Index of the lowest set bit (0 if none)."""
        idx = Signal(range(max(n, 2)))
        for i in reversed(range(n)):
            with m.If(bits[i]):
                m.d.comb += idx.eq(i)
        return idx



    w_free = Cat(~wk[i].valid for i in range(W))
    w_free_idx = first(w_free, W)

    ctx.first, ctx.t_idx, ctx.tcam, ctx.w_free, ctx.w_free_idx = first, t_idx, tcam, w_free, w_free_idx
    ctx.wcam = wcam


def build_sf_ports(self, ctx):
    """The snoop filter's lookup port (with the busy mask of the looked-up set's ways) and its update
    helper."""
    AW, T, W, m, set_bits, sf, trk, wk = ctx.AW, ctx.T, ctx.W, ctx.m, ctx.set_bits, ctx.sf, ctx.trk, ctx.wk

    # ---- snoop-filter lookup port; the busy mask over the ways of the looked-up line's set -------
    # is read by the snoop filter in the result's cycle (``busy_at_result``), worked out from the
    # tracker and work-table registers for the result's line.  Those registers then hold whatever
    # the lookup's own cycle wrote: a tracker entry allocated with a way in that cycle is busy, and
    # the entry a completion freed in it is not, which a lookup issued by a chained dispatch (see
    # chain()) needs, without a path from this cycle's writes into the lookup.  No result is held
    # across a change of those registers where the allocation matters (every state that reads an
    # allocation takes its result at once).
    look_line = Signal(AW)
    look_valid = Signal()
    res = sf.result.p
    busy = Signal(self.sf_ways)
    lset = res.line[:set_bits] if set_bits else Const(0, 1)
    cur_t = Signal(range(max(T, 2)))                    # tracker entry being advanced/completed
    for w in range(self.sf_ways):
        hits = []
        for i in range(T):
            hits.append(trk[i].valid & trk[i].has_way & (trk[i].way == w) &
                        ((trk[i].line[:set_bits] == lset) if set_bits else 1))
        for i in range(W):
            hits.append(wk[i].valid & (wk[i].way == w) &
                        ((wk[i].line[:set_bits] == lset) if set_bits else 1))
        m.d.comb += busy[w].eq(Cat(*hits).any())
    m.d.comb += [sf.lookup.valid.eq(look_valid), sf.lookup.p.line.eq(look_line),
                 sf.lookup.p.busy.eq(0), sf.result_busy.eq(busy)]

    # ---- snoop-filter update port (one per cycle; ready is tied to 1) ---------------------------
    upd = sf.update
    def sf_update(op, line, way, state=None, dirty=None, presence=None, touch=0):
        m.d.comb += [upd.valid.eq(1), upd.p.op.eq(op), upd.p.line.eq(line), upd.p.way.eq(way),
                     upd.p.touch.eq(touch)]
        if state is not None:
            m.d.comb += [upd.p.entry.state.eq(state), upd.p.entry.dirty.eq(dirty),
                         upd.p.entry.presence.eq(presence)]

    ctx.cur_t, ctx.look_line, ctx.look_valid, ctx.res = cur_t, look_line, look_valid, res
    ctx.sf_update = sf_update


def build_d2h(self, ctx):
    """The D2H request transmit (per-class CQID FIFOs, the arbiter, the credit counter) and the D2H
    response and data outputs the engine drives."""
    arb, class_fifos, crd, crq, crs, m = ctx.arb, ctx.class_fifos, ctx.crd, ctx.crq, ctx.crs, ctx.m
    t_idx, trk = ctx.t_idx, ctx.trk

    # ---- D2H request transmit: per-class FIFOs of CQIDs, the arbiter, the credit counter ---------
    push_cqid = Signal(ID_WIDTH)
    push_class = Signal(range(3))
    push = Signal()
    for c, f in enumerate(class_fifos):
        m.d.comb += [f.w_data.eq(push_cqid), f.w_en.eq(push & (push_class == c)),
                     arb.req[c].eq(f.r_rdy)]
    head = Signal(ID_WIDTH)
    for c, f in enumerate(class_fifos):
        with m.If(arb.grant[c]):
            m.d.comb += head.eq(f.r_data)
    head_t = trk[t_idx(head)]
    m.d.comb += [
        self.d2h_req.valid.eq(arb.valid & (crq.available != 0)),
        self.d2h_req.p.valid.eq(1), self.d2h_req.p.opcode.eq(head_t.op),
        self.d2h_req.p.cqid.eq(head), self.d2h_req.p.addr.eq(head_t.line),
    ]
    sent = self.d2h_req.valid & self.d2h_req.ready
    m.d.comb += [arb.advance.eq(sent), crq.take.eq(sent)]
    for c, f in enumerate(class_fifos):
        m.d.comb += f.r_en.eq(sent & arb.grant[c])

    # ---- D2H response / data outputs (driven by the engine) -----------------------------------
    rsp_valid, data_valid = Signal(), Signal()
    # a response the snoop side path committed (hdl/dcoh/side_path.py): it goes out before the
    # engine's, which wait for it
    side_rsp = Signal()
    side_rsp_op = Signal(Rsp, init=Rsp.RspIHitI)
    side_rsp_uqid = Signal(ID_WIDTH)
    m.d.comb += [
        self.d2h_rsp.valid.eq((rsp_valid | side_rsp) & (crs.available != 0)),
        self.d2h_data.valid.eq(data_valid & (crd.available != 0)),
        self.d2h_rsp.p.valid.eq(1), self.d2h_data.p.hdr.valid.eq(1),
    ]
    rsp_port_sent = self.d2h_rsp.valid & self.d2h_rsp.ready
    rsp_sent = rsp_port_sent & ~side_rsp                # the engine's response went
    # the same, for a state that offers a response whatever else is offered (ANSWER_SEND): it does not
    # go through ``rsp_valid``, which the snoop fast path drives from the snoop filter's output.  One
    # of the two shared nets (the other: the lookup port's ready, see chain()) through which static
    # timing saw a path from the block RAM through the fast path into a chained dispatch, a false
    # path (the states are exclusive); with both cut the DCOH routes at 65.4 MHz (docs/synth.md)
    rsp_can = (crs.available != 0) & self.d2h_rsp.ready & ~side_rsp
    data_sent = self.d2h_data.valid & self.d2h_data.ready
    m.d.comb += [crs.take.eq(rsp_port_sent), crd.take.eq(data_sent)]

    ctx.data_sent, ctx.data_valid, ctx.push, ctx.push_class = data_sent, data_valid, push, push_class
    ctx.push_cqid, ctx.rsp_can, ctx.rsp_port_sent, ctx.rsp_sent = push_cqid, rsp_can, rsp_port_sent, rsp_sent
    ctx.rsp_valid, ctx.side_rsp, ctx.side_rsp_op = rsp_valid, side_rsp, side_rsp_op
    ctx.side_rsp_uqid = side_rsp_uqid


def build_probe_path(self, ctx):
    """The probes: the coalescer's messages to the caches (taking one readies the work it covers), and
    the queue in front of the coalescer."""
    AW, K, W, coal, m, wk, work_table = ctx.AW, ctx.K, ctx.W, ctx.coal, ctx.m, ctx.wk, ctx.work_table

    # ---- probes: the coalescer's merged messages go to the caches; taking one readies the work --
    m.d.comb += [self.probe.valid.eq(coal.messages.valid), self.probe.p.eq(coal.messages.p),
                 coal.messages.ready.eq(self.probe.ready)]
    probe_taken = self.probe.valid & self.probe.ready
    bb = exact_log2(self.coalesce_block)
    for i in range(W):
        line = wk[i].line
        covered = (line[bb:] == coal.messages.p.block) & coal.messages.p.lines.bit_select(line[:bb], 1) \
            if bb else (line == coal.messages.p.block) & coal.messages.p.lines[0]
        m.d.comb += work_table.readied[i].eq(probe_taken & wk[i].valid & covered)
    # The engine hands a probe on and goes on: it never waits for the coalescer.  A probe the coalescer
    # cannot take at once (no free group) waits in a queue in front of it, in order; the coalescer's
    # groups free only when the caches take a message, and caches may take the next message only once
    # the engine has done the work of the last one (tb/system_tb.py does), so an engine waiting here
    # could wait forever.  The queue cannot overflow: every probe comes with a work entry of its own
    # that stays valid until a message naming its line is taken, so at most ``work`` probes wait.
    # When the queue is empty and the coalescer ready, the probe goes straight through (no cycle added).
    # The probe handed on this cycle: a probing snoop's from SNP_SLOW, in its decision's cycle, or a
    # back-invalidation's, which S_TRY registers (``bi_line``, ``bi_caches``) for S_PROBE.
    coal_push = Signal()
    coal_line = Signal(AW)
    coal_caches = Signal(K)
    bi_line = Signal(AW)
    bi_caches = Signal(K)
    m.d.comb += [coal_line.eq(bi_line), coal_caches.eq(bi_caches)]     # (SNP_SLOW overrides them)
    m.submodules.probe_q = probe_q = fifo.SyncFIFO(width=AW + K, depth=W)
    queued_probe = data.View(data.StructLayout({"line": AW, "caches": K}), probe_q.r_data)
    m.d.comb += [
        coal.probes.valid.eq(probe_q.r_rdy | coal_push),
        coal.probes.p.line.eq(Mux(probe_q.r_rdy, queued_probe.line, coal_line)),
        coal.probes.p.caches.eq(Mux(probe_q.r_rdy, queued_probe.caches, coal_caches)),
        probe_q.r_en.eq(coal.probes.ready),
        probe_q.w_data.eq(Cat(coal_line, coal_caches)),
        probe_q.w_en.eq(coal_push & (probe_q.r_rdy | ~coal.probes.ready)),
    ]
    m.d.sync += Assert(~probe_q.w_en | probe_q.w_rdy, "probe queue overflow: a probe without a work entry")

    ctx.bi_caches, ctx.bi_line, ctx.coal_caches, ctx.coal_line = bi_caches, bi_line, coal_caches, coal_line
    ctx.coal_push, ctx.probe_q, ctx.queued_probe = coal_push, probe_q, queued_probe


def build_registers(self, ctx):
    """The engine's registers: the snoop and its latched lookup, the H2D Rsp and Data, the rescan's, the
    line register, the answer context; ``count_error``, ``hit_entry``."""
    K, T, W, first, m, res, trk = ctx.K, ctx.T, ctx.W, ctx.first, ctx.m, ctx.res, ctx.trk

    # ---- engine registers ---------------------------------------------------------------------
    snp = Signal(channel_shape(Channel.H2D_REQ))       # the snoop being looked up (SNP_RES)
    # the snoop the slow path handles, and holds for its replay: SNP_RES copies ``snp`` into it as it
    # takes the lookup result, so that ``snp`` is free again in that cycle whichever path the snoop
    # takes, and can load the next snoop offered without waiting for that choice (``build_dispatch_strobes``)
    slow_snp = Signal(channel_shape(Channel.H2D_REQ))
    replay = Signal()                                   # snp is held (stalled) and must be re-run
    replay_go = Signal()                                # something changed since: re-run it
    second_held = Signal()                              # snp is held as a second snoop to its line
    r = Signal.like(res)                                # latched lookup result
    r_t = Signal(range(max(T, 2)))                      # tracker hit index
    r_tstate = Signal(STATE_BITS)                      # ... and that entry's state when r was latched
    r_th = Signal()
    r_w = Signal(range(max(W, 2)))                      # work hit index
    r_wh = Signal()
    ev = Signal(channel_shape(Channel.H2D_RSP))         # latched H2D Rsp
    dv_cqid = Signal(ID_WIDTH)                          # latched H2D Data's CQID (its line: cmd_data)
    rescan = Signal()
    in_work = Signal()       # a run of acknowledged work is under way (its rescan comes after it)
    scan_i = Signal(range(K + 1))
    progress = Signal()
    cur_w = Signal(range(max(W, 2)))                    # work entry being finished
    # the one line register: every line the engine moves passes through it.  It is loaded from the
    # caches (cmd_rsp), the host (H2D Data, in IDLE), the buffer, a waiting store, or zeroed, and it
    # alone drives the buffer's write data, D2H Data and cpu_rsp: a 512-bit line then has one input
    # multiplexer (its selects from the FSM state and flops) and no output multiplexers, which is what
    # let the DCOH route on the ECP5 (docs/dcoh.md, "FPGA timing and routing").  It is dead in IDLE.
    cmd_data = Signal(LINE_BITS)
    cmd_dirty = Signal()
    bogus = Signal()                                    # the D2H Data being sent is Bogus
    errors = Signal(16)
    reply_state = Signal(CacheState)                    # what S_REPLY tells the cache to install
    m.d.comb += self.protocol_errors.eq(errors)

    # answer context (the slow snoop path and the work path share it)
    a_op = Signal(Snp, init=Snp.SnpData)
    a_uqid = Signal(ID_WIDTH)
    a_state = Signal(STATE_BITS)      # device state of the line (E: maybe M until the probe says)
    a_maybe_m = Signal()               # state E from the snoop filter: M if a copy is dirty
    a_probed = Signal()                # the copies were probed: command them
    a_fromwork = Signal()

    def count_error(kind):
        m.d.sync += [errors.eq(errors + 1), self.last_error.eq(kind)]


    def hit_entry(th):
        """Latch the tracker hit of a lookup result: whether there is one, the index of the first hit
        entry, and its state -- selected with the one-hot of the first hit (a prefix OR, then an
        AND-OR), not through the index, so the state is registered in the lookup's result cycle and
        the snoop path after it starts from a flop.  (It cannot go stale: no tracker entry is written
        between a result cycle and the states that read the latched state, SNP_SLOW -- also when it
        is re-entered after a query of the copies -- and W_GO.)"""
        hits = Signal(T, name="hit_entries")      # a signal: each use of a Cat of comparisons re-emits them
        m.d.comb += hits.eq(th)
        first_oh = Cat(hits[i] & ~hits[:i].any() if i else hits[0] for i in range(T))
        state = Signal(STATE_BITS, name="hit_state")
        m.d.comb += state.eq(functools.reduce(operator.or_, (Mux(first_oh[i], trk[i].state, 0) for i in range(T))))
        return [r_th.eq(hits.any()), r_t.eq(first(hits, T)), r_tstate.eq(state)]

    rsp_in, data_in_ = self.h2d_rsp.p, self.h2d_data.p

    ctx.a_fromwork, ctx.a_maybe_m, ctx.a_op, ctx.a_probed = a_fromwork, a_maybe_m, a_op, a_probed
    ctx.a_state, ctx.a_uqid, ctx.bogus, ctx.cmd_data = a_state, a_uqid, bogus, cmd_data
    ctx.cmd_dirty, ctx.count_error, ctx.cur_w, ctx.data_in_ = cmd_dirty, count_error, cur_w, data_in_
    ctx.dv_cqid, ctx.ev, ctx.hit_entry, ctx.in_work, ctx.progress = dv_cqid, ev, hit_entry, in_work, progress
    ctx.r, ctx.r_t, ctx.r_th, ctx.r_tstate, ctx.r_w, ctx.r_wh = r, r_t, r_th, r_tstate, r_w, r_wh
    ctx.replay, ctx.replay_go, ctx.reply_state, ctx.rescan = replay, replay_go, reply_state, rescan
    ctx.rsp_in, ctx.scan_i, ctx.second_held, ctx.slow_snp = rsp_in, scan_i, second_held, slow_snp
    ctx.snp = snp


def build_write_helpers(self, ctx):
    """The helpers through which the engine's states write the tracker and the work table, start a
    D2H request, and wait for the caches' answer to a command; the line register's outputs."""
    buf_w, cmd_data, cmd_dirty, cur_w, m = ctx.buf_w, ctx.cmd_data, ctx.cmd_dirty, ctx.cur_w, ctx.m
    push, push_class, push_cqid, t_idx = ctx.push, ctx.push_class, ctx.push_cqid, ctx.t_idx
    tracker, w_free_idx, work_table = ctx.tracker, ctx.w_free_idx, ctx.work_table

    # ---- the tables' write ports, driven by the engine's states (hdl/dcoh/tracker.py, work_table.py) ----
    def set_state(idx, state):
        m.d.comb += [tracker.set.valid.eq(1), tracker.set.idx.eq(idx), tracker.set.state.eq(state)]

    def new_work(line, way, snoop=0, snp_op=Snp.SnpData, snp_uqid=0, evict=0, evict_cqid=0, known=0,
                 sf_entry=None):
        e = work_table.new.entry
        m.d.comb += [work_table.new.valid.eq(1), work_table.new.idx.eq(w_free_idx),
                     e.valid.eq(1), e.ready.eq(0), e.line.eq(line), e.way.eq(way), e.snoop.eq(snoop),
                     e.snp_op.eq(snp_op), e.snp_uqid.eq(snp_uqid), e.evict.eq(evict),
                     e.evict_cqid.eq(evict_cqid), e.known.eq(known)]
        if sf_entry is not None:
            m.d.comb += e.sf.eq(sf_entry)

    wcur = work_table.cur
    m.d.comb += wcur.idx.eq(cur_w)

    # ---- new tracker entry (a D2H request) -----------------------------------------------------
    def new_txn(cqid, op, line, state, cache, cpu, store, has_way, way):
        e = tracker.new.entry
        m.d.comb += [tracker.new.valid.eq(1), tracker.new.idx.eq(t_idx(cqid)),
                     e.valid.eq(1), e.op.eq(op), e.line.eq(line), e.state.eq(state), e.cache.eq(cache),
                     e.cpu.eq(cpu), e.store.eq(store), e.granted_e.eq(0), e.has_way.eq(has_way),
                     e.way.eq(way)]
        m.d.comb += [push.eq(1), push_cqid.eq(cqid)]
        with m.Switch(op):
            for o, c in REQUEST_PRIORITY.items():
                with m.Case(o):
                    m.d.comb += push_class.eq(c)


    def await_cmd_rsp(name, then, latch=()):
        """FSM state ``name``: wait for the caches' answer to a ``cmd``, latch it, go to ``then``."""
        with m.State(name):
            m.d.comb += self.cmd_rsp.ready.eq(1)
            with m.If(self.cmd_rsp.valid):
                m.d.sync += list(latch)
                m.next = then

    latch_line = [cmd_dirty.eq(self.cmd_rsp.p.dirty), cmd_data.eq(self.cmd_rsp.p.data)]
    m.d.comb += [buf_w.data.eq(cmd_data), self.d2h_data.p.data.eq(cmd_data), self.cpu_rsp.p.data.eq(cmd_data)]

    ctx.await_cmd_rsp, ctx.latch_line, ctx.new_txn = await_cmd_rsp, latch_line, new_txn
    ctx.new_work, ctx.set_state, ctx.wcur = new_work, set_state, wcur
