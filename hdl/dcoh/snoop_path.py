"""Snoops from the host, their answer, and the work of a probed line.

SNP_RES takes the snoop filter's answer: a miss, or an S line the snoop leaves in S, is answered at once and
the next snoop streams behind it (the fast path); anything else goes to SNP_SLOW, which queries an E line's
copies, holds the snoop, starts a probe with its work entry, or answers.  The answer commands the copies,
sends the response (and data) and commits the line's new state.  A line's work, once the caches have taken
its probe, answers the snoop it holds or evicts the line of a back-invalidation (W_LOOK .. EV_ISSUE).

Builders of :meth:`hdl.dcoh.dcoh.DCOH.elaborate` (``ctx``: docs/dcoh.md, "Source layout").
"""

from amaranth.hdl import Assert, Mux, Signal

from cxl.messages import D2HReqOpcode as Req, D2HRspOpcode as Rsp
from cxl.coherence import DevState as D

from .encodings import CmdOp, Dispatch, ErrorKind, STATE_BITS, STATE_CODE
from .engine_tables import cmd_op_for, keeps_s, legal_snoop, line_state, perm_none, perm_rw, snoop_table
from .snoop_filter import SFState, SFOp

__all__ = ["build_snoop_verdicts", "build_snoop_states", "build_answer_states", "build_work_states"]


def build_snoop_verdicts(self, ctx):
    """The snoop table's verdicts the snoop states read, from the latched lookup and the registers."""
    a_maybe_m, a_op, a_state, m, r, r_th = ctx.a_maybe_m, ctx.a_op, ctx.a_state, ctx.m, ctx.r, ctx.r_th
    r_tstate, slow_snp, snp, wk = ctx.r_tstate, ctx.slow_snp, ctx.snp, ctx.wk
    work_ready_idx = ctx.work_ready_idx

    # snoop table evaluations used by the slow path (state from the latched lookup)
    # q_*: what a query (cmd KEEP) of an E line's copies said: the DCOH cannot see a silent E->M
    q_done, q_dirty, q_excl = Signal(), Signal(), Signal()
    r_state0, r_maybe_m0 = line_state(m, r.hit, r.entry, r_th, r_tstate)
    r_state, r_maybe_m = Signal(STATE_BITS), Signal()
    m.d.comb += [r_state.eq(Mux(r_maybe_m0 & q_done & q_dirty, STATE_CODE[D.M], r_state0)),
                 r_maybe_m.eq(r_maybe_m0 & ~q_done)]
    # the most permission the internal copies have (the model's ``copies``): S copies unless an E
    # line's query found an E/M one
    copies_rw = r_maybe_m0 & q_done & q_excl
    s_stall, s_rsp, s_nxt, s_data = snoop_table(m, r_state, slow_snp.opcode)
    a_stall, a_rsp, a_nxt, a_data = snoop_table(m, a_state, a_op)      # ANSWER: how to command the copies
    w_stall, _, w_nxt, _ = snoop_table(m, r_state, a_op)  # W_GO: the same, a cycle before a_state is loaded
    # The WORK dispatch of a work that kept its snoop-filter entry (``known``: a hit, no request on the
    # line) decides W_GO's command itself, from the entry as the dispatch reads it
    k_entry = wk[work_ready_idx]
    k_state, k_maybe_m = line_state(m, 1, k_entry.sf, 0, 0)
    _, _, k_nxt, _ = snoop_table(m, k_state, k_entry.snp_op)

    # The cycle that ends the command of the copies (ANSWER_RSP as the caches answer, or ANSWER when
    # there is nothing to command) settles the line's state (E -> M if a copy was dirty) and registers
    # the snoop table's verdict on it, which ANSWER_SEND / ANSWER_DATA use (their SF and tracker
    # updates then start from flops, not from the table)
    f_state = Signal(STATE_BITS)
    settle_dirty = Signal()          # a copy was dirty: the caches' answer, in the cycle it comes
    m.d.comb += f_state.eq(Mux(a_maybe_m & settle_dirty, STATE_CODE[D.M], a_state))
    _, f_rsp, f_nxt, f_data = snoop_table(m, f_state, a_op)
    v_rsp, v_nxt, v_data = Signal.like(f_rsp), Signal.like(f_nxt), Signal.like(f_data)
    v_none, v_changed = Signal(), Signal()

    s_keeps, s_keep_rsp = keeps_s(m, snp.opcode)

    ctx.a_data, ctx.a_nxt, ctx.a_rsp, ctx.copies_rw, ctx.f_data = a_data, a_nxt, a_rsp, copies_rw, f_data
    ctx.f_nxt, ctx.f_rsp, ctx.f_state, ctx.k_maybe_m, ctx.k_nxt = f_nxt, f_rsp, f_state, k_maybe_m, k_nxt
    ctx.k_state, ctx.q_dirty, ctx.q_done, ctx.q_excl = k_state, q_dirty, q_done, q_excl
    ctx.r_maybe_m, ctx.r_state, ctx.s_data, ctx.s_keep_rsp = r_maybe_m, r_state, s_data, s_keep_rsp
    ctx.s_keeps, ctx.s_nxt, ctx.s_stall, ctx.settle_dirty = s_keeps, s_nxt, s_stall, settle_dirty
    ctx.v_changed, ctx.v_data, ctx.v_none, ctx.v_nxt, ctx.v_rsp = v_changed, v_data, v_none, v_nxt, v_rsp
    ctx.a_stall, ctx.w_nxt, ctx.w_stall = a_stall, w_nxt, w_stall


def build_snoop_states(self, ctx):
    """The snoop states: SNP_RES (the fast path, one snoop per cycle), SNP_SLOW (query, hold, probe or
    answer) and the query of an E line's copies."""
    K, W, a_fromwork, a_maybe_m, a_op = ctx.K, ctx.W, ctx.a_fromwork, ctx.a_maybe_m, ctx.a_op
    a_probed, a_state, a_uqid, await_cmd_rsp = ctx.a_probed, ctx.a_state, ctx.a_uqid, ctx.await_cmd_rsp
    coal_caches, coal_line, coal_push = ctx.coal_caches, ctx.coal_line, ctx.coal_push
    copies_rw, count_error, first, hit_entry = ctx.copies_rw, ctx.count_error, ctx.first, ctx.hit_entry
    load_snp, look_line, look_valid, m = ctx.load_snp, ctx.look_line, ctx.look_valid, ctx.m
    new_work, q_dirty, q_done, q_excl, r = ctx.new_work, ctx.q_dirty, ctx.q_done, ctx.q_excl, ctx.r
    r_maybe_m, r_state, r_th, r_w, r_wh = ctx.r_maybe_m, ctx.r_state, ctx.r_th, ctx.r_w, ctx.r_wh
    replay, replay_go, res, rescan_next = ctx.replay, ctx.replay_go, ctx.res, ctx.rescan_next
    rsp_can, rsp_sent, rsp_valid, s_data = ctx.rsp_can, ctx.rsp_sent, ctx.rsp_valid, ctx.s_data
    s_keep_rsp, s_keeps, s_nxt, s_stall = ctx.s_keep_rsp, ctx.s_keeps, ctx.s_nxt, ctx.s_stall
    second_held, sf, slow_snp, snp = ctx.second_held, ctx.sf, ctx.slow_snp, ctx.snp
    stream_snoop, tcam, w_free, wcam, wk = ctx.stream_snoop, ctx.tcam, ctx.w_free, ctx.wcam, ctx.wk
    work_ready, work_table = ctx.work_ready, ctx.work_table

    # ---------------------------------------------------------------- snoops
    with m.State("SNP_RES"):
        # A reserved opcode (none of SnpData, SnpInv, SnpCur): named and dropped, no response and no
        # state change, as the link's unpacker drops one (RxError.OPCODE); the snoop table has no row
        # for it, and its default (no stall, next state I) would free a line or end a request.  (The
        # side path leaves such a snoop to the engine.)
        reserved = ~legal_snoop(snp.opcode)
        with m.If(reserved):
            m.d.comb += sf.result.ready.eq(1)
            count_error(ErrorKind.RESERVED_SNOOP)
            m.next = "IDLE"
        with m.Else():
            th, wh = tcam(res.line), wcam(res.line)
            m.d.comb += look_line.eq(self.h2d_req.p.addr)   # the streamed next snoop (as in IDLE)
            # Streamed, one per cycle: a snoop to a line the device does not hold (RspIHitI), and one
            # to a line it holds in S that leaves it in S (SnpData, SnpCur): neither touches a copy, the
            # snoop filter or the tracker, so the slow path would only reach the same answer later.
            s_hit = res.hit_clean_s & s_keeps
            fast = ~th.any() & ~wh.any() & (~res.hit | s_hit)
            # the next snoop streams behind a fast one if nothing of higher priority waits; ``snp``
            # takes it whenever the result is taken, fast or slow (``load_snp``, ``build_dispatch_strobes``)
            m.d.comb += [stream_snoop.eq(~work_ready.any() & ~self.h2d_rsp.valid & ~self.h2d_data.valid &
                                         self.h2d_req.valid),
                         load_snp.eq(rsp_can & stream_snoop)]
            # The result is taken only in a cycle a response can go (``rsp_can``), by either path: so
            # its ready, and through it the lookup port's ready and the RAM's read enable, do not wait
            # for the answer worked out from the RAM's output (with the fast path alone waiting, that
            # was the DCOH's critical path on the ECP5, RAM output -> RAM address, docs/synth.md).
            # A slow snoop then waits while the response channel is blocked, as the fast one does;
            # the channel's credits and ready come back whatever the engine does.
            m.d.comb += sf.result.ready.eq(rsp_can)
            # The slow path's registers take the snoop and its result whenever the result is taken,
            # fast or slow (a fast snoop leaves them to be overwritten: nothing reads them after it),
            # so their clock enables do not wait for the verdict from the RAM's output either.
            with m.If(rsp_can):
                m.d.sync += [slow_snp.eq(snp), r.eq(res), *hit_entry(th),
                             r_wh.eq(wh.any()), r_w.eq(first(wh, W)), q_done.eq(0)]
            with m.If(fast):
                m.d.comb += [rsp_valid.eq(1), self.d2h_rsp.p.opcode.eq(Mux(res.hit, s_keep_rsp, Rsp.RspIHitI)),
                             self.d2h_rsp.p.uqid.eq(snp.uqid)]
                with m.If(rsp_sent):
                    with m.If(stream_snoop):
                        m.d.comb += [look_valid.eq(1), self.h2d_req.ready.eq(sf.lookup.ready),
                                     self.dispatch.eq(Mux(sf.lookup.ready, Dispatch.SNOOP, Dispatch.NONE))]
                        m.d.sync += second_held.eq(0)
                    with m.Else():
                        m.next = "IDLE"         # no rescan: these snoops changed nothing
            with m.Elif(rsp_can):
                m.next = "SNP_SLOW"

    with m.State("SNP_SLOW"):
        presence = Signal(K)
        m.d.comb += presence.eq(Mux(r.hit, r.entry.presence, 0))
        # the model's rule: fetch data, or take away permission the copies have
        need_probe = (presence != 0) & ((s_data & (r_state != STATE_CODE[D.MI_A])) |
                                        perm_none(s_nxt) | (copies_rw & ~perm_rw(s_nxt)))
        with m.If(~r_wh & r_maybe_m & (presence != 0)):
            m.next = "SNP_QUERY"               # E or M? and E or S copies? ask the caches
        with m.Elif(r_wh):
            with m.If(wk[r_w].snoop):
                # a host that breaks the one-snoop-per-line rule (the model raises ProtocolError):
                # named once, and the snoop is held, not dropped, so that it is still answered
                # once the first one is (the host would otherwise wait for its response forever)
                with m.If(~second_held):
                    count_error(ErrorKind.SECOND_SNOOP)
                m.d.sync += [replay.eq(1), replay_go.eq(0), second_held.eq(1)]
            with m.Else():
                m.d.comb += [work_table.snoop.valid.eq(1), work_table.snoop.idx.eq(r_w),
                             work_table.snoop.op.eq(slow_snp.opcode), work_table.snoop.uqid.eq(slow_snp.uqid)]
            m.next = "IDLE"
        with m.Elif(s_stall):
            m.d.sync += [replay.eq(1), replay_go.eq(0)]
            m.next = "IDLE"
        with m.Elif(need_probe):
            with m.If(w_free.any()):
                # the work entry and its probe (to the coalescer or its queue) in this cycle;
                # the engine goes on (the caches take the probe later, which readies the work)
                # With no request on the line, its snoop-filter entry stays as it is now until
                # the work is done (the line is busy: no access, snoop or back-invalidation
                # changes it), so the work keeps it and needs no lookup (``known``)
                new_work(r.line, r.hit_way, snoop=1, snp_op=slow_snp.opcode, snp_uqid=slow_snp.uqid,
                         known=~r_th, sf_entry=r.entry)
                m.d.comb += [coal_push.eq(1), coal_line.eq(r.line), coal_caches.eq(presence)]
                rescan_next(wakes=0)           # (it takes a work entry, frees nothing)
            with m.Else():                      # no work entry: hold the snoop until one frees
                m.d.sync += [replay.eq(1), replay_go.eq(0)]
                m.next = "IDLE"
        with m.Else():
            m.d.sync += [a_op.eq(slow_snp.opcode), a_uqid.eq(slow_snp.uqid), a_state.eq(r_state),
                         a_maybe_m.eq(r_maybe_m), a_probed.eq(0), a_fromwork.eq(0)]
            m.next = "ANSWER"

    with m.State("SNP_QUERY"):
        m.d.comb += [self.cmd.valid.eq(1), self.cmd.p.line.eq(r.line),
                     self.cmd.p.caches.eq(r.entry.presence), self.cmd.p.op.eq(CmdOp.KEEP)]
        with m.If(self.cmd.ready):
            m.next = "SNP_QUERY_RSP"
    await_cmd_rsp("SNP_QUERY_RSP", "SNP_SLOW",
                  [q_done.eq(1), q_dirty.eq(self.cmd_rsp.p.dirty), q_excl.eq(self.cmd_rsp.p.excl)])


def build_answer_states(self, ctx):
    """The answer to a snoop (ANSWER .. ANSWER_DATA): command the copies, send the response and its
    data, commit the line's new state (``apply_answer``)."""
    a_data, a_fromwork, a_maybe_m, a_nxt = ctx.a_data, ctx.a_fromwork, ctx.a_maybe_m, ctx.a_nxt
    a_probed, a_rsp, a_state, a_uqid, buf_r = ctx.a_probed, ctx.a_rsp, ctx.a_state, ctx.a_uqid, ctx.buf_r
    cmd_data, cmd_dirty, cur_w, data_sent = ctx.cmd_data, ctx.cmd_dirty, ctx.cur_w, ctx.data_sent
    data_valid, f_data, f_nxt, f_rsp, f_state = ctx.data_valid, ctx.f_data, ctx.f_nxt, ctx.f_rsp, ctx.f_state
    latch_line, m, r, r_t, r_th = ctx.latch_line, ctx.m, ctx.r, ctx.r_t, ctx.r_th
    readies_work, replay_go, rescan_next = ctx.readies_work, ctx.replay_go, ctx.rescan_next
    rsp_can, rsp_valid, set_state, settle_dirty = ctx.rsp_can, ctx.rsp_valid, ctx.set_state, ctx.settle_dirty
    sf_update, snp_wake, v_changed, v_data = ctx.sf_update, ctx.snp_wake, ctx.v_changed, ctx.v_data
    v_none, v_nxt, v_rsp, wcur, wk = ctx.v_none, ctx.v_nxt, ctx.v_rsp, ctx.wcur, ctx.wk

    # ---------------------------------------------------------------- answer a snoop
    def apply_answer(nxt=v_nxt, none=v_none, changed=v_changed):
        """The snoop's answer goes out this cycle: its state change commits with it.  The verdict
        (next state, no permission left, state changed): the one registered as the answer settled,
        or given (ANSWER_RSP's early answer)."""
        with m.If(r_th):
            set_state(r_t, nxt)
            with m.If(none & r.hit & (r.entry.presence != 0)):
                sf_update(SFOp.MODIFY, r.line, r.hit_way, SFState.PLACEHOLDER, 0, 0)
        with m.Elif(r.hit & changed):
            with m.If(nxt == STATE_CODE[D.S]):
                sf_update(SFOp.MODIFY, r.line, r.hit_way, SFState.S, 0, r.entry.presence)
            with m.Elif(nxt == STATE_CODE[D.I]):
                sf_update(SFOp.FREE, r.line, r.hit_way)
        with m.If(a_fromwork):
            m.d.comb += wcur.clr_snoop.eq(1)
            with m.If(~wk[cur_w].evict):
                m.d.comb += wcur.clr_valid.eq(1)
            with m.Else():
                m.d.comb += wcur.set_ready.eq(1)          # the eviction follows (a fresh lookup)
                m.d.comb += readies_work.eq(1)
        # an answer wakes the waiting accesses when it changed a snoop-filter entry with no
        # request on its line (a way freed); on a request's line the line stays busy (a
        # probe's answer, ``a_fromwork``, is inside a run of work, which always ends in a SCAN)
        m.d.comb += snp_wake.eq(~r_th & r.hit & changed)
        rescan_next(replay_go.eq(1), writes_t=r_t, wakes=~r_th & changed)

    # E from the snoop filter is M if a copy was dirty
    def verdict(state, nxt):
        """What an answer commits (apply_answer): the next state, whether it leaves the copies no
        permission, whether the state changes."""
        return nxt, perm_none(nxt), nxt != state
    settle = [a_state.eq(f_state), a_maybe_m.eq(0), v_rsp.eq(f_rsp), v_data.eq(f_data),
              *(q.eq(v) for q, v in zip((v_nxt, v_none, v_changed), verdict(f_state, f_nxt)))]

    def command_copies(nxt, line=r.line, copies=r.entry.presence):
        """Offer the command that gives the line's copies what the snoop leaves them (state ``nxt``)."""
        m.d.comb += [self.cmd.valid.eq(1), self.cmd.p.line.eq(line), self.cmd.p.caches.eq(copies),
                     self.cmd.p.op.eq(cmd_op_for(m, nxt))]

    # No snoop is answered from a state whose snoops stall (GO seen, data not: the table's Stall rows give
    # no response, and an answer would tell the host the device holds nothing while the GO's grant is on
    # its way to a cache): SNP_SLOW holds such a snoop, W_GO parks such a work.  Checked in every answer
    # state (simulation and the formal proofs; removed before synthesis).
    def never_from_a_stall():
        m.d.sync += Assert(~ctx.a_stall, "DCOH: a snoop answered from a state whose snoops stall")

    with m.State("ANSWER"):
        never_from_a_stall()
        # command the copies (probed lines only) and collect dirty/data
        with m.If(a_probed & (r.hit & (r.entry.presence != 0))):
            command_copies(a_nxt)
            with m.If(self.cmd.ready):
                m.next = "ANSWER_RSP"
        with m.Else():
            m.d.sync += [cmd_dirty.eq(0), cmd_data.eq(0), *settle]
            m.next = "ANSWER_SEND"
        m.d.comb += buf_r.addr.eq(r_t)           # MI_A: the write-back buffer holds the line
    with m.State("ANSWER_RSP"):
        never_from_a_stall()
        m.d.comb += [self.cmd_rsp.ready.eq(1), settle_dirty.eq(self.cmd_rsp.p.dirty),
                     buf_r.addr.eq(r_t)]
        # Early answer: when the caches' answer cannot change the verdict (the line's state is
        # known, not an E line that may have turned M, and the snoop takes no data), the response
        # goes out in the cycle the caches answer, with the verdict on the registered state (a_*,
        # = what settle would register), instead of from ANSWER_SEND a cycle later.  (An SnpInv
        # to an S line: its probe's work is then 3 engine cycles.)  Unless the response cannot
        # go in this cycle (no credit, the port not ready, a side-path response first): then
        # ANSWER_SEND, as for any other answer.
        early = ~a_maybe_m & ~a_data
        with m.If(self.cmd_rsp.valid):
            with m.If(early):
                m.d.comb += [rsp_valid.eq(1), self.d2h_rsp.p.opcode.eq(a_rsp),
                             self.d2h_rsp.p.uqid.eq(a_uqid)]
            with m.If(early & rsp_can):
                apply_answer(*verdict(a_state, a_nxt))
            with m.Else():
                m.d.sync += [*latch_line, *settle]
                m.next = "ANSWER_SEND"
    with m.State("ANSWER_SEND"):
        never_from_a_stall()
        m.d.comb += [rsp_valid.eq(1), self.d2h_rsp.p.opcode.eq(v_rsp), self.d2h_rsp.p.uqid.eq(a_uqid),
                     buf_r.addr.eq(r_t)]             # (before apply_answer: a chained dispatch
        with m.If(a_state == STATE_CODE[D.MI_A]):      # sets its own address)
            m.d.sync += cmd_data.eq(buf_r.data)       # (re)loaded while the response waits
        with m.If(rsp_can):                          # = rsp_sent in this state
            with m.If(v_data):
                m.next = "ANSWER_DATA"
            with m.Else():
                apply_answer()
    with m.State("ANSWER_DATA"):
        never_from_a_stall()
        m.d.comb += [data_valid.eq(1), self.d2h_data.p.hdr.uqid.eq(a_uqid)]
        with m.If(data_sent):
            apply_answer()

    ctx.command_copies = command_copies


def build_work_states(self, ctx):
    """The work of a line whose probe the caches took (W_LOOK .. EV_ISSUE): answer the snoop it
    holds, or evict the line of a back-invalidation."""
    a_fromwork, a_maybe_m, a_probed, a_state = ctx.a_fromwork, ctx.a_maybe_m, ctx.a_probed, ctx.a_state
    await_cmd_rsp, buf_w, cmd_data, cmd_dirty = ctx.await_cmd_rsp, ctx.buf_w, ctx.cmd_data, ctx.cmd_dirty
    command_copies, cqids, cur_w, hit_entry = ctx.command_copies, ctx.cqids, ctx.cur_w, ctx.hit_entry
    latch_line, look_line, look_valid, m = ctx.latch_line, ctx.look_line, ctx.look_valid, ctx.m
    new_txn, q_done, r, r_maybe_m, r_state = ctx.new_txn, ctx.q_done, ctx.r, ctx.r_maybe_m, ctx.r_state
    r_w, r_wh, replay_go, res, rescan, sf = ctx.r_w, ctx.r_wh, ctx.replay_go, ctx.res, ctx.rescan, ctx.sf
    sf_update, tcam, w_nxt, wcur, wk = ctx.sf_update, ctx.tcam, ctx.w_nxt, ctx.wcur, ctx.wk
    count_error, w_stall = ctx.count_error, ctx.w_stall

    # ---------------------------------------------------------------- work after its probes
    with m.State("W_LOOK"):
        m.d.comb += [look_valid.eq(1), look_line.eq(wk[cur_w].line)]
        m.d.comb += wcur.clr_ready.eq(1)
        m.next = "W_RES"
    with m.State("W_RES"):
        th = tcam(res.line)
        m.d.comb += sf.result.ready.eq(1)
        m.d.sync += [r.eq(res), *hit_entry(th), r_wh.eq(1), r_w.eq(cur_w),
                     q_done.eq(0)]
        m.next = "W_GO"
    with m.State("W_GO"):
        w = wk[cur_w]
        with m.If(w.snoop & w_stall):
            # The line's request took its GO while the probe was out (an upgrade, SM_AD -> SM_D).
            # CXL 3.x §3.2.5.2 forbids that GO (no GO to a line while a snoop to it is pending,
            # docs/sources.md §1.7): counted, once per snoop (an H2D Rsp for another request readies
            # the work again, and it parks once more).  The snoop table stalls a snoop to such a line
            # until the data, as it does one still in H2D Req; this one was taken already, so it waits
            # in its entry (parked), which the next H2D Data or Rsp readies again, and is answered
            # from the state the data leaves.  The run of work still ends in its SCAN (``rescan``).
            with m.If(~w.go_during):
                count_error(ErrorKind.GO_DURING_SNOOP)
            m.d.comb += wcur.park.eq(1)
            m.d.sync += rescan.eq(1)
            m.next = "IDLE"
        with m.Elif(w.snoop):
            # (a_op and a_uqid were loaded with the dispatch) ANSWER's command of the copies, offered
            # here already: a probed snoop always has one unless a snoop took the copies meanwhile
            m.d.sync += [a_state.eq(r_state), a_maybe_m.eq(r_maybe_m), a_probed.eq(1), a_fromwork.eq(1)]
            m.next = "ANSWER"
            with m.If(r.hit & (r.entry.presence != 0)):
                command_copies(w_nxt)
                with m.If(self.cmd.ready):
                    m.next = "ANSWER_RSP"
        with m.Elif(~r.hit):                      # a snoop took the line: nothing to evict
            m.d.comb += [cqids.free_valid.eq(1), cqids.free_cqid.eq(w.evict_cqid)]
            m.d.comb += wcur.clr_valid.eq(1)
            m.d.sync += [rescan.eq(1), replay_go.eq(1)]
            m.next = "IDLE"
        with m.Else():
            with m.If(r.entry.presence != 0):
                m.d.comb += [self.cmd.valid.eq(1), self.cmd.p.line.eq(r.line),
                             self.cmd.p.caches.eq(r.entry.presence), self.cmd.p.op.eq(CmdOp.INV)]
                with m.If(self.cmd.ready):
                    m.next = "EV_RSP"
            with m.Else():
                m.d.sync += [cmd_dirty.eq(0), cmd_data.eq(0)]
                m.next = "EV_ISSUE"
    await_cmd_rsp("EV_RSP", "EV_ISSUE", latch_line)
    with m.State("EV_ISSUE"):
        w = wk[cur_w]
        dirty = r.entry.dirty | cmd_dirty
        sf_update(SFOp.FREE, r.line, r.hit_way)
        m.d.comb += [buf_w.en.eq(1), buf_w.addr.eq(w.evict_cqid)]
        with m.If(dirty):
            new_txn(w.evict_cqid, Req.DirtyEvict, r.line, STATE_CODE[D.MI_A], 0, 0, 0, 0, 0)
        with m.Elif(r.entry.state == SFState.E):
            new_txn(w.evict_cqid, Req.CleanEvict, r.line, STATE_CODE[D.EI_A], 0, 0, 0, 0, 0)
        with m.Else():
            new_txn(w.evict_cqid, Req.CleanEvictNoData, r.line, STATE_CODE[D.SI_A], 0, 0, 0, 0, 0)
        m.d.comb += wcur.clr_valid.eq(1)
        m.d.sync += [rescan.eq(1), replay_go.eq(1)]
        m.next = "IDLE"
