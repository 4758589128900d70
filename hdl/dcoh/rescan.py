"""The rescan of the waiting CPU accesses (the model's ``Device.service``).

SCAN takes up the next waiting access (in the first round only a woken one), S_RES latches its lookup and
the access, S_TRY decides it as the model does (issue a request, fill it inside the device, evict, start a
back-invalidation, or wait, recording why), and the states after it carry the decision out.  The wake-up
rule's registers (``why_*``, ``woken``) are set by the events that free what an access waits for
(docs/dcoh.md, "Waking the waiting accesses").

Builders of :meth:`hdl.dcoh.dcoh.DCOH.elaborate` (``ctx``: docs/dcoh.md, "Source layout").
"""

from amaranth.hdl import Assert, Cat, Const, Mux, Signal
from amaranth.lib import data

from cxl.messages import D2HReqOpcode as Req
from cxl.coherence import DevState as D, REQUEST_START

from .encodings import CacheState, CmdOp, CpuKind, STATE_BITS, STATE_CODE, UNCACHED
from .snoop_filter import SFState, SFOp, AllocKind

__all__ = ["build_rescan_helpers", "build_rescan_states", "build_access_states", "build_wake_rule"]


def build_rescan_helpers(self, ctx):
    """The access being tried (``cur_k``, ``cur``), SCAN's choice among the waiting accesses, and the
    helpers of the rescan's states (``dequeue``, ``scan_on``, ``take_copy``)."""
    AW, K, chain, first, m, ops, progress = ctx.AW, ctx.K, ctx.chain, ctx.first, ctx.m, ctx.ops, ctx.progress
    q_len, queue, r, scan_all, scan_i, sd_r = ctx.q_len, ctx.queue, ctx.r, ctx.scan_all, ctx.scan_i, ctx.sd_r
    wcam, woken = ctx.wcam, ctx.woken

    # the access being tried by the rescan: SCAN latches its cache index when it issues the lookup
    # (queue and scan_i do not move until the try is over), so S_TRY and the states after it select
    # the access through one register, not through queue[scan_i]
    cur_k = Signal(range(max(K, 2)))
    m.d.comb += sd_r.addr.eq(cur_k)            # (SCAN and the CPU dispatch override it)
    cur_op = ops[cur_k]
    # ... and S_RES copies that access (all but its line of data, which it loads into cmd_data) into
    # flops, so S_TRY's decision and the states after it start from registers, not from ops' K-way select
    cur = Signal(data.StructLayout({"kind": CpuKind, "line": AW, "variant": 1, "victim_valid": 1,
                                    "victim": AW}))
    # SCAN's choice: the queue positions from scan_i on that hold an access to try (``pick``: one is
    # taken up, ``pick_k`` its cache index; SCAN and the CPU dispatch's own lookup drive them)
    scan_cand = Signal(K)
    m.d.comb += scan_cand.eq(Cat((j >= scan_i) & (j < q_len) &
                                 (scan_all | (woken.bit_select(queue[j], 1) if self.wake_per_access else 1))
                                 for j in range(K)))
    scan_found, scan_at = scan_cand.any(), first(scan_cand, K)
    pick, pick_k = Signal(), Signal.like(cur_k)
    self.scan_pick = pick                                        # tests and benches count the tries
    # S_TRY leaves the access waiting (``try_wait``), for these reasons
    try_wait, try_cqid, try_work, try_loc = Signal(), Signal(), Signal(), Signal()
    snp_wake = Signal()         # a snoop's answer changed its line's snoop-filter entry, no request on it
    res_alloc_free = r.alloc == AllocKind.FREE
    victim_busy = wcam(cur.victim).any()

    def dequeue():
        """Take queue[scan_i] out (the later ones move up); the scan will go round again."""
        for j in range(K - 1):
            with m.If(scan_i <= j):
                m.d.sync += queue[j].eq(queue[j + 1])
        m.d.sync += [q_len.eq(q_len - 1), progress.eq(1)]

    def scan_on():
        """After a dequeue: round the queue again, unless that was the last access waiting (then the
        next event is dispatched in this same cycle, :func:`chain`)."""
        with m.If(q_len == 1):
            chain(q_now=0)
        with m.Else():
            m.next = "SCAN"

    def take_copy():
        """An eviction: the evicting cache hands over its copy (a ``cmd`` INV to it alone), offered
        from S_TRY's decision on and repeated in S_EVICT while the caches are not ready."""
        m.d.comb += [self.cmd.valid.eq(1), self.cmd.p.line.eq(r.line),
                     self.cmd.p.caches.eq(Const(1, K) << cur_k), self.cmd.p.op.eq(CmdOp.INV)]
        with m.If(self.cmd.ready):
            m.next = "S_EVICT_RSP"
        with m.Else():
            m.next = "S_EVICT"

    ctx.cur, ctx.cur_k, ctx.cur_op, ctx.dequeue, ctx.pick = cur, cur_k, cur_op, dequeue, pick
    ctx.pick_k, ctx.res_alloc_free, ctx.scan_at, ctx.scan_found = pick_k, res_alloc_free, scan_at, scan_found
    ctx.scan_on, ctx.snp_wake, ctx.take_copy, ctx.try_cqid = scan_on, snp_wake, take_copy, try_cqid
    ctx.try_loc, ctx.try_wait, ctx.try_work, ctx.victim_busy = try_loc, try_wait, try_work, victim_busy


def build_rescan_states(self, ctx):
    """The rescan's states: SCAN takes up the next access, S_RES latches it and its lookup, S_TRY
    decides it."""
    K, bi_caches, bi_line, buf_w, chain = ctx.K, ctx.bi_caches, ctx.bi_line, ctx.buf_w, ctx.chain
    cmd_data, cqids, cur, cur_k, cur_op = ctx.cmd_data, ctx.cqids, ctx.cur, ctx.cur_k, ctx.cur_op
    dequeue, hit_entry, look_line, look_valid = ctx.dequeue, ctx.hit_entry, ctx.look_line, ctx.look_valid
    m, new_txn, new_work, ops, pick, pick_k = ctx.m, ctx.new_txn, ctx.new_work, ctx.ops, ctx.pick, ctx.pick_k
    progress, q_len, queue, r, r_th, r_wh = ctx.progress, ctx.q_len, ctx.queue, ctx.r, ctx.r_th, ctx.r_wh
    reply_state, res, res_alloc_free, scan_all = ctx.reply_state, ctx.res, ctx.res_alloc_free, ctx.scan_all
    scan_at, scan_found, scan_i, scan_on = ctx.scan_at, ctx.scan_found, ctx.scan_i, ctx.scan_on
    scan_report, sd_r, sf, sf_update = ctx.scan_report, ctx.sd_r, ctx.sf, ctx.sf_update
    take_copy, tcam, try_cqid, try_loc = ctx.take_copy, ctx.tcam, ctx.try_cqid, ctx.try_loc
    try_wait, try_work, victim_busy, w_free = ctx.try_wait, ctx.try_work, ctx.victim_busy, ctx.w_free
    wcam = ctx.wcam

    # ---------------------------------------------------------------- rescan of waiting accesses
    with m.State("SCAN"):
        # the next access to try: the first one at or after scan_i, in the first round only a
        # woken one (the others are passed over in no cycle)
        with m.If(~scan_found):
            with m.If(progress & (q_len != 0)):     # once more round what is still waiting
                m.d.sync += [scan_i.eq(0), progress.eq(0), scan_all.eq(1)]
            with m.Elif(scan_report):               # (its first cycle shows SCAN on ``dispatch``)
                m.next = "IDLE"
            with m.Else():                          # the rescan is over: the next event now
                chain()
        with m.Else():
            k_at = queue[scan_at]
            m.d.comb += [look_valid.eq(1), look_line.eq(ops[k_at].req.line), sd_r.addr.eq(k_at),
                         pick.eq(1), pick_k.eq(k_at)]
            m.d.sync += [cur_k.eq(k_at), scan_i.eq(scan_at)]
            m.next = "S_RES"
    with m.State("S_RES"):
        th, wh = tcam(res.line), wcam(res.line)
        m.d.comb += sf.result.ready.eq(1)
        m.d.sync += [r.eq(res), *hit_entry(th), r_wh.eq(wh.any()),
                     cmd_data.eq(sd_r.data),           # a store's / uncached write's line
                     cur.kind.eq(cur_op.req.kind), cur.line.eq(cur_op.req.line),
                     cur.variant.eq(cur_op.req.variant), cur.victim_valid.eq(cur_op.victim_valid),
                     cur.victim.eq(cur_op.victim)]
        m.next = "S_TRY"
    with m.State("S_TRY"):
        k = cur_k
        req = cur
        mine = Signal(K)
        m.d.comb += mine.eq(1 << k)
        hit = r.hit & (r.entry.state != SFState.PLACEHOLDER)
        peers = r.entry.presence & ~mine
        have_cqid = cqids.one_free
        kind = req.kind

        def fail(*why):
            """The access waits on (its reasons: "cqid", "work", "loc"); the scan goes on."""
            wait_for(*why)
            m.d.sync += scan_i.eq(scan_i + 1)
            m.next = "SCAN"

        def wait_for(*why):
            m.d.comb += [try_wait.eq(1), try_cqid.eq("cqid" in why), try_work.eq("work" in why),
                         try_loc.eq("loc" in why)]

        def issued():                           # off the queue; the cache waits for cpu_rsp
            dequeue()
            scan_on()

        def txn(code, state, has_way=0, way=0):
            m.d.comb += cqids.alloc.ready.eq(1)
            new_txn(cqids.alloc.payload, code, req.line, STATE_CODE[state], k, 1,
                    kind == CpuKind.STORE, has_way, way)

        def back_invalidate(line, way, presence):
            m.d.comb += cqids.alloc.ready.eq(1)
            new_work(line, way, evict=1, evict_cqid=cqids.alloc.payload)
            m.d.sync += [bi_line.eq(line), bi_caches.eq(presence)]
            wait_for("loc")                     # the back-invalidation's work on the line
            m.next = "S_PROBE"

        def miss(code):
            start = REQUEST_START[(code, D.I)]
            with m.If(~have_cqid):
                fail("cqid")
            with m.Elif(res_alloc_free):
                sf_update(SFOp.ALLOCATE, req.line, r.alloc_way, SFState.PLACEHOLDER, 0, 0)
                txn(code, start, 1, r.alloc_way)
                m.d.sync += ops[k].victim_valid.eq(0)
                issued()
            with m.Elif(r.alloc == AllocKind.VICTIM):
                with m.If(cur.victim_valid & victim_busy):
                    fail("loc")                 # our victim is still being back-invalidated
                with m.Elif(~cqids.two_free | ~w_free.any()):
                    fail("loc", "cqid", "work")
                with m.Else():
                    m.d.sync += [ops[k].victim_valid.eq(1), ops[k].victim.eq(r.victim_line)]
                    back_invalidate(r.victim_line, r.alloc_way, r.victim.presence)
            with m.Else():                      # every way busy
                fail("loc", "cqid", "work")

        gone = (kind == CpuKind.EVICT) & (~hit | ((r.entry.presence & mine) == 0))
        with m.If(gone):                        # the model checks this before the line's
            m.d.sync += reply_state.eq(CacheState.I)            # pending work
            m.next = "S_REPLY"                  # the cache no longer holds it: done
        with m.Elif(r_th | r_wh):
            fail("loc")                         # a request or probes pending on the line
        with m.Elif(kind == CpuKind.LOAD):
            with m.If(hit):                     # another internal cache has it: fill from it
                m.d.sync += reply_state.eq(CacheState.S)
                m.next = "S_LFILL"
            with m.Elif(req.variant):
                miss(Req.RdAny)
            with m.Else():
                miss(Req.RdShared)
        with m.Elif(kind == CpuKind.STORE):
            with m.If(hit & (r.entry.state == SFState.E)):   # device exclusive: take it inside
                m.d.sync += reply_state.eq(CacheState.M)   # cmd_data: the store's line
                m.next = "S_SFILL"
            with m.Elif(hit):                   # device holds it in S: upgrade
                with m.If(~have_cqid):
                    fail("cqid")
                with m.Elif(req.variant):
                    txn(Req.RdOwnNoData, REQUEST_START[(Req.RdOwnNoData, D.S)], 1, r.hit_way)
                    issued()
                with m.Else():
                    txn(Req.RdOwn, REQUEST_START[(Req.RdOwn, D.S)], 1, r.hit_way)
                    issued()
            with m.Elif(req.variant):
                miss(Req.RdOwnNoData)
            with m.Else():
                miss(Req.RdOwn)
        with m.Elif(kind == CpuKind.EVICT):
            with m.If((peers != 0) | have_cqid):
                take_copy()                     # take the copy out of the cache first
            with m.Else():
                fail("cqid")
        with m.Else():                          # uncached: flush the device's own copies first
            with m.If(hit):
                with m.If(cqids.two_free & w_free.any()):
                    back_invalidate(req.line, r.hit_way, r.entry.presence)
                with m.Else():
                    fail("loc", "cqid", "work")
            with m.Elif(~have_cqid):
                fail("cqid")
            with m.Else():
                m.d.comb += [buf_w.en.eq(1), buf_w.addr.eq(cqids.alloc.payload)]   # cmd_data: its line
                for name, code in UNCACHED.items():
                    with m.If(kind == CpuKind[name.upper()]):
                        txn(code, REQUEST_START[(code, D.I)])
                issued()


def build_access_states(self, ctx):
    """The states that carry out S_TRY's decision: an eviction's copy taken from its cache, a
    back-invalidation's probe, an internal fill for a load or a store, the reply to the cache."""
    K, await_cmd_rsp, buf_w, cmd_dirty = ctx.K, ctx.await_cmd_rsp, ctx.buf_w, ctx.cmd_dirty
    coal_push, cqids, cur, cur_k, dequeue = ctx.coal_push, ctx.cqids, ctx.cur, ctx.cur_k, ctx.dequeue
    latch_line, m, new_txn, ops, r = ctx.latch_line, ctx.m, ctx.new_txn, ctx.ops, ctx.r
    reply_state, scan_i, scan_on, sf_update = ctx.reply_state, ctx.scan_i, ctx.scan_on, ctx.sf_update
    take_copy = ctx.take_copy


    with m.State("S_EVICT"):                    # (the caches were not ready in S_TRY)
        take_copy()
    await_cmd_rsp("S_EVICT_RSP", "S_EVICT_SET", latch_line)
    with m.State("S_EVICT_SET"):
        req = cur
        peers = r.entry.presence & ~(Const(1, K) << cur_k)
        with m.If(peers != 0):                  # others still hold it: no message
            sf_update(SFOp.MODIFY, r.line, r.hit_way, r.entry.state, r.entry.dirty, peers)
            m.d.sync += reply_state.eq(CacheState.I)
            m.next = "S_REPLY"
        with m.Else():
            sf_update(SFOp.FREE, r.line, r.hit_way)
            cqid = cqids.alloc.payload
            m.d.comb += [buf_w.en.eq(1), buf_w.addr.eq(cqid), cqids.alloc.ready.eq(1)]
            code = Signal(Req, init=Req.DirtyEvict)
            state = Signal(STATE_BITS)
            with m.If(r.entry.dirty | cmd_dirty):
                m.d.comb += [code.eq(Req.DirtyEvict), state.eq(STATE_CODE[REQUEST_START[(Req.DirtyEvict, D.M)]])]
            with m.Elif(r.entry.state == SFState.E):
                m.d.comb += [code.eq(Mux(req.variant, Req.CleanEvictNoData, Req.CleanEvict)),
                             state.eq(STATE_CODE[D.EI_A])]
            with m.Else():
                # S: CleanEvict is for E lines only (cxl.coherence.REQUEST_START)
                m.d.comb += [code.eq(Req.CleanEvictNoData),
                             state.eq(STATE_CODE[REQUEST_START[(Req.CleanEvictNoData, D.S)]])]
            new_txn(cqid, code, r.line, state, cur_k, 1, 0, 0, 0)
            dequeue()
            scan_on()
    with m.State("S_PROBE"):                    # back-invalidation: one probe to the coalescer
        m.d.comb += coal_push.eq(1)             # (or its queue)
        m.d.sync += scan_i.eq(scan_i + 1)
        m.next = "SCAN"
    with m.State("S_LFILL"):                    # internal fill for a load: peers E/M -> S
        m.d.comb += [self.cmd.valid.eq(1), self.cmd.p.line.eq(r.line),
                     self.cmd.p.caches.eq(r.entry.presence & ~(Const(1, K) << cur_k)),
                     self.cmd.p.op.eq(CmdOp.TO_S)]
        with m.If(self.cmd.ready):
            m.next = "S_LFILL_RSP"
    await_cmd_rsp("S_LFILL_RSP", "S_LFILL_SET", latch_line)
    with m.State("S_LFILL_SET"):
        sf_update(SFOp.MODIFY, r.line, r.hit_way, r.entry.state, r.entry.dirty | cmd_dirty,
                  r.entry.presence | (Const(1, K) << cur_k), touch=1)
        m.next = "S_REPLY"
    with m.State("S_SFILL"):                    # internal fill for a store: invalidate the peers
        peers = r.entry.presence & ~(Const(1, K) << cur_k)
        with m.If(peers != 0):
            m.d.comb += [self.cmd.valid.eq(1), self.cmd.p.line.eq(r.line), self.cmd.p.caches.eq(peers),
                         self.cmd.p.op.eq(CmdOp.INV)]
            with m.If(self.cmd.ready):
                m.next = "S_SFILL_RSP"
        with m.Else():
            m.next = "S_SFILL_SET"
    await_cmd_rsp("S_SFILL_RSP", "S_SFILL_SET")
    with m.State("S_SFILL_SET"):
        sf_update(SFOp.MODIFY, r.line, r.hit_way, SFState.E, r.entry.dirty, Const(1, K) << cur_k,
                  touch=1)
        m.next = "S_REPLY"
    with m.State("S_REPLY"):                    # finished inside the device: tell the cache
        m.d.comb += [self.cpu_rsp.valid.eq(1), self.cpu_rsp.p.cache.eq(cur_k),
                     self.cpu_rsp.p.line.eq(cur.line), self.cpu_rsp.p.state.eq(reply_state)]
        with m.If(self.cpu_rsp.ready):
            m.d.sync += ops[cur_k].valid.eq(0)
            dequeue()
            scan_on()


def build_wake_rule(self, ctx):
    """The wake-up rule's registers: what a failed try waits for, and the events that free it."""
    K, cqids, ct, cur_k, cur_t, cur_w, go = ctx.K, ctx.cqids, ctx.ct, ctx.cur_k, ctx.cur_t, ctx.cur_w, ctx.go
    m, ops, pick, pick_k, r, set_bits = ctx.m, ctx.ops, ctx.pick, ctx.pick_k, ctx.r, ctx.set_bits
    snp_wake, tracker, try_cqid, try_loc = ctx.snp_wake, ctx.tracker, ctx.try_cqid, ctx.try_loc
    try_wait, try_work, wcur, why_cqid = ctx.try_wait, ctx.try_work, ctx.wcur, ctx.why_cqid
    why_loc, why_work, wk, woken = ctx.why_loc, ctx.why_work, ctx.wk, ctx.woken

    # ---- the wake-up rule's registers (see ``why_cqid``): what a failed try waits for, and the
    # events that free it.  A line is freed by a completion (its tracker entry, at ``cur_t``), by the
    # end of a line's work (its work entry) and by a snoop answer that changed its snoop-filter entry
    # with no request on the line; each also frees its set's ways for ``loc``.
    def same_set(a, b):
        return (a[:set_bits] == b[:set_bits]) if set_bits else Const(1)
    freed_lines = ((tracker.free.valid, ct.line), (wcur.clr_valid, wk[cur_w].line), (snp_wake, r.line))
    m.d.sync += Assert(~tracker.free.valid | (tracker.free.idx == cur_t),
                       "a tracker entry freed other than the one at cur_t (the wake-up rule reads ct)")
    for k in range(K):
        loc_freed = Cat(v & same_set(ops[k].req.line, line) for v, line in freed_lines).any()
        wake = ((why_cqid[k] & cqids.free_valid) | (why_work[k] & wcur.clr_valid) | (why_loc[k] & loc_freed))
        with m.If(wake | (go["cpu"] & (self.cpu_req.p.cache == k))):
            m.d.sync += woken[k].eq(1)
        with m.If(pick & (pick_k == k)):           # its try comes after every event so far
            m.d.sync += woken[k].eq(0)
        with m.If(try_wait & (cur_k == k)):
            m.d.sync += [why_cqid[k].eq(try_cqid), why_work[k].eq(try_work), why_loc[k].eq(try_loc)]
