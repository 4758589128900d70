"""The DCOH engine's dispatch: which event the engine starts, and when.

IDLE's decision (in priority order: the rescan due, ready work, H2D Rsp, H2D Data, the held snoop's replay,
snoops, CPU accesses), the end of an event (``rescan_next``: the rescan that follows it, or ``chain``: the
next event dispatched in the event's last cycle), the run of work (``chain_work``), and, below the FSM
(``build_dispatch_strobes``), the strobes that take the dispatched event's message and load its
registers, with the ``dispatch``, ``scan_before`` and ``work_line`` reports a shadow model follows
(docs/dcoh.md, "Micro-architecture").

Builders of :meth:`hdl.dcoh.dcoh.DCOH.elaborate` (``ctx``: docs/dcoh.md, "Source layout").
"""

from amaranth.hdl import Assert, Cat, Const, Mux, Signal

from .encodings import Dispatch

__all__ = ["build_dispatch_helpers", "build_idle_state", "build_dispatch_strobes"]


def build_dispatch_helpers(self, ctx):
    """The dispatch decisions (``dec``, ``aft``) and the helpers every event's last cycle calls."""
    W, data_in_, first, in_work, m, ops = ctx.W, ctx.data_in_, ctx.first, ctx.in_work, ctx.m, ctx.ops
    progress, q_len, replay, replay_go = ctx.progress, ctx.q_len, ctx.replay, ctx.replay_go
    rescan, rsp_in, scan_all, scan_i, sf = ctx.rescan, ctx.rsp_in, ctx.scan_all, ctx.scan_i, ctx.sf
    t_idx, wk = ctx.t_idx, ctx.wk

    work_ready = Cat(wk[i].valid & wk[i].ready for i in range(W))
    work_ready_idx = first(work_ready, W)

    early_cmd_taken = Signal()      # the dispatch's command was taken: the work goes to ANSWER_RSP
    cmd_free_here = Signal()        # the dispatching state neither offers a command nor takes an answer

    # The rescan that follows an event is a step of its own for a shadow model: ``dispatch`` shows
    # SCAN in its first cycle (the cycle after the event's last; no dispatch and no side-path take
    # can fall in that cycle), so that the snoops the side path answered while the event waited come
    # before it there too (docs/dcoh.md, "Snoop side path").
    scan_report = Signal()
    m.d.sync += scan_report.eq(0)

    def rescan_next(*also, writes_t=None, forwards_data=False, wakes=1):
        """The end of an event: the model's service() follows it (reported: ``scan_report``).  Outside
        a run of work nothing outranks a pending rescan in IDLE, so go to SCAN at once when accesses
        wait and the event woke them (``wakes``: it freed a CQID, a line, a work entry or a
        snoop-filter way, the model's ``Device.woken``), and drop the rescan (a no-op) otherwise,
        dispatching the next event in this same cycle (:func:`chain`; ``writes_t``: the tracker entry
        this cycle writes, if any); inside a run of work IDLE decides (more work first, then the SCAN
        that marks the run's end).  An event that frees nothing leaves every waiting access failing
        its try as in the last rescan, so skipping that rescan changes no outcome, only the cycles
        it took (three per waiting access)."""
        m.d.sync += list(also)
        with m.If(in_work):
            m.d.sync += rescan.eq(1)
            m.next = "IDLE"
            chain_work(writes_t)
        with m.Elif((q_len != 0) & wakes):
            m.d.sync += [scan_i.eq(0), progress.eq(0), scan_all.eq(0), scan_report.eq(1)]
            m.next = "SCAN"
        with m.Else():
            chain(writes_t, forwards_data)

    # The wide registers a dispatch loads (the H2D Data line into cmd_data, the snoop; the CPU access
    # with its line goes to its slot whenever that is free) are written once, below the FSM, from
    # these strobes: IDLE's dispatch runs in IDLE and in every state that chains, and writing them in
    # each would give every such state a 512-bit input multiplexer of its own.  (Below the FSM, these
    # writes take precedence over a state's own in the same cycle, as the dispatch's did when it came
    # last in that state.)
    load_h2d_line, take_snp = Signal(), Signal()
    stream_snoop, load_snp = Signal(), Signal()       # SNP_RES: the next snoop streams / snp takes it
    # The same for every other register a dispatch writes: ``go_any`` (a dispatch decision runs this
    # cycle, in IDLE or chained; ``go_q``: its ``q_now``), then one strobe per outcome.  The
    # narrow registers too: written in each chaining state, they gave each of those states a
    # multiplexer input per bit (yosys: 16 288 LUT4 for the DCOH with only the wide ones moved).
    go_any, go_aft = Signal(), Signal()      # go_aft: chain_work's dispatch after the run's SCAN
    go_q = Signal.like(q_len)
    cw_work, cw_scan = Signal(), Signal()      # chain_work's dispatch
    readies_work = Signal()         # this cycle readies a work entry again (see chain_work)

    def work_next():
        """A work item is dispatched: a snoop's work whose snoop-filter entry it keeps (``known``) goes
        straight to W_GO, the dispatch loading ``r`` from it (below the FSM); other work has its
        lookup issued with the dispatch, unless a lookup result is still held, then W_LOOK issues it."""
        with m.If(wk[work_ready_idx].known):
            with m.If(early_cmd_taken):
                m.next = "ANSWER_RSP"
            with m.Else():
                m.next = "W_GO"
        with m.Elif(sf.result.valid):
            m.next = "W_LOOK"
        with m.Else():
            m.next = "W_RES"

    def chain_work(writes_t=None):
        """The last cycle of a work item inside a run of work: dispatch what IDLE would in the next
        cycle (more work while some is ready, else the SCAN that ends the run), unless this cycle
        readies its own work entry again (a snoop's answer whose line's eviction follows it,
        ``readies_work``: IDLE would then choose among the entries ready at the edge; without this
        guard tests/test_rtl_dcoh.py's race replays fail).  Work that a probe taken in this cycle
        readies is not seen here: it runs after the work chosen now, or in the next run, after this
        SCAN; a shadow model follows either, as ``work_line`` names the line of each WORK.  A SCAN
        with no access waiting is the run's end mark alone (no access to try), so the event after
        it is dispatched in this same cycle too (:func:`chain`, with the rescan and the run taken as
        ended, ``aft``): ``dispatch`` shows that event and ``scan_before`` the SCAN before it."""
        with m.If(~readies_work):
            with m.If(work_ready.any()):
                m.d.comb += cw_work.eq(1)
                work_next()
            with m.Else():
                m.d.comb += cw_scan.eq(1)
                with m.If(q_len != 0):
                    m.next = "SCAN"
                with m.Else():
                    chain(writes_t, after_scan=True, q_now=0)

    def idle_dispatch(q_now, after_scan=False):
        """Start the next event (IDLE's dispatch, also run by :func:`chain` in the last cycle of an
        event).  ``q_now``: the number of waiting accesses after this cycle's own changes (q_len in
        IDLE and after an event that woke none of them; 0 after the scan's last access issued).
        ``after_scan``: chain_work's
        dispatch after the SCAN that ends a run of work, which takes its own decision (``aft``).
        The decisions are worked out once, outside the FSM, and so are the handshakes, the
        ``dispatch`` code and the registers it loads (below the FSM, from ``go_any`` / ``go_aft``);
        a state that dispatches only takes the transition."""
        d = aft if after_scan else dec
        m.d.comb += [(go_aft if after_scan else go_any).eq(1), go_q.eq(q_now)]
        with m.If(d["work"]):
            work_next()
        with m.Elif((d["scan"] & (q_len != 0)) | (d["cpu"] & ~d["cpu_look"])):
            m.next = "SCAN"
        with m.Elif(d["rsp"]):
            m.next = "RSP"
        with m.Elif(d["data"]):
            m.next = "DATA"
        with m.Elif(d["replay"] | d["snoop"]):
            m.next = "SNP_RES"
        with m.Elif(d["cpu_look"]):
            m.next = "S_RES"

    # IDLE's dispatch decision, in priority order.  Atomic units, as the model's moves: an event and
    # the rescan after it (event + service()), and all the work of acknowledged probes and the rescan
    # after it (flush + service()).  So a pending rescan goes before work that was acknowledged
    # meanwhile, but once work has started it goes on until none is ready.  A rescan with no access
    # waiting is a no-op (the model's service() then finds nothing to try): it is dropped at no cost
    # and the same cycle dispatches what comes next.  After a run of work it is still dispatched: its
    # SCAN marks the end of that work for the caches.  A CPU access's rescan starts at once (no run
    # of work is under way when the decision gets that far); when it is the only access waiting, the
    # scan's first step (its lookup) is issued with it (``cpu_look``).
    cpu_slot_free = Signal()            # the CPU access offered finds its cache's slot free
    m.d.comb += cpu_slot_free.eq(self.cpu_req.valid & ~ops[self.cpu_req.p.cache].valid)

    def decide(name, rescan_due, in_work_now, q_now):
        """The dispatch decision from the registers and the inputs: one strobe per outcome, and
        whether the pending rescan is dropped as a no-op (``empty_scan``)."""
        d = {n: Signal(name=f"{name}_{n}") for n in ("work", "scan", "rsp", "data", "replay", "snoop",
                                                    "cpu", "cpu_look", "empty_scan")}
        m.d.comb += d["empty_scan"].eq(rescan_due & (q_len == 0) & ~in_work_now)
        with m.If(work_ready.any() & in_work_now):
            m.d.comb += d["work"].eq(1)
        with m.Elif(rescan_due & ~d["empty_scan"]):
            m.d.comb += d["scan"].eq(1)
        with m.Elif(work_ready.any()):
            m.d.comb += d["work"].eq(1)
        with m.Elif(self.h2d_rsp.valid):
            m.d.comb += d["rsp"].eq(1)
        with m.Elif(self.h2d_data.valid):
            m.d.comb += d["data"].eq(1)
        with m.Elif(replay & replay_go):
            m.d.comb += d["replay"].eq(1)
        with m.Elif(~replay & self.h2d_req.valid):
            m.d.comb += d["snoop"].eq(1)
        with m.Elif(cpu_slot_free):
            m.d.comb += d["cpu"].eq(1)
        m.d.comb += d["cpu_look"].eq(d["cpu"] & ~replay & (q_now == 0) & sf.lookup.ready)
        return d

    dec = decide("dec", rescan, in_work, go_q)
    # chain_work's dispatch after the run's SCAN sees the rescan done and the run over, as IDLE would
    # in the next cycle.  A decision of its own, so that whether that SCAN goes this cycle (``cw_scan``,
    # late: it waits for the state's own outcome) selects between two finished decisions and does not
    # run through the priority chain of every dispatch (with one decision masked by ``cw_scan``, that
    # was the DCOH's critical path on the ECP5, docs/synth.md).
    aft = decide("aft", Const(0), Const(0), Const(0))

    def chain(writes_t=None, forwards_data=False, after_scan=False, q_now=None):
        """The last cycle of an event outside a run of work, with no rescan to follow (no access
        waiting, or none the event woke; ``q_now``: how many wait after this cycle, default
        ``q_len``): dispatch the next
        event in this same cycle, as IDLE would in the next one, so that events follow each other
        without an IDLE cycle between them.  What IDLE reads is as it would be a cycle later except
        for what this cycle writes at its edge, so the next event is not started here (IDLE takes it
        in the next cycle) when it would read such a thing:
          * an H2D Rsp / Data naming the tracker entry ``writes_t`` this cycle writes (IDLE registers
            the response table's verdict on that entry's state, and reads the line buffer at its CQID),
            except an H2D Data when ``forwards_data`` (an H2D Rsp's last cycle: its new state is
            forwarded to the Data's verdict, ``rsp_fwd``);
          * a held snoop (its replay decision reads ``replay_go``, which this cycle may set), or a
            rescan still due (its dispatch comes first in IDLE);
          * a snoop-filter result still held (``sf.result.valid``; the lookup port is then not ready).
        The lookup's busy mask is worked out in the result's cycle from the registers, which then
        hold this cycle's writes (``busy_at_result``): a CPU access looked up now cannot pick the way
        a tracker entry allocated in this cycle as its victim, and the entry a completion frees in
        this cycle no longer counts, as the model has completed it; the snoop filter's read port is
        transparent to its write port, so the lookup sees this cycle's update.  (An H2D Rsp naming a
        CQID allocated this cycle finds it not yet valid and is counted UNKNOWN_CQID, which it is: its
        request has not been sent.)"""
        # (a held result: ``sf.result.valid``, a register.  The lookup port's ready would say the
        # same here, as no chaining state takes a result, but it is driven through the result's
        # ready by the snoop fast path from the snoop filter's output: static timing then reports a
        # path from the block RAM into every chained dispatch, the critical path at 76be68e)
        hazard = replay | sf.result.valid
        if not after_scan:              # (after the run's SCAN the rescan is done)
            hazard = hazard | rescan
        if writes_t is not None:
            hazard = hazard | (self.h2d_rsp.valid & (t_idx(rsp_in.cqid) == writes_t))
            if not forwards_data:
                hazard = hazard | (self.h2d_data.valid & (t_idx(data_in_.hdr.cqid) == writes_t))
        m.next = "IDLE"
        with m.If(~hazard):
            idle_dispatch(q_len if q_now is None else q_now, after_scan)

    ctx.aft, ctx.chain, ctx.cmd_free_here, ctx.cpu_slot_free = aft, chain, cmd_free_here, cpu_slot_free
    ctx.cw_scan, ctx.cw_work, ctx.dec, ctx.early_cmd_taken = cw_scan, cw_work, dec, early_cmd_taken
    ctx.go_aft, ctx.go_any, ctx.go_q, ctx.idle_dispatch = go_aft, go_any, go_q, idle_dispatch
    ctx.load_h2d_line, ctx.load_snp, ctx.readies_work = load_h2d_line, load_snp, readies_work
    ctx.rescan_next, ctx.scan_report, ctx.stream_snoop = rescan_next, scan_report, stream_snoop
    ctx.take_snp, ctx.work_ready, ctx.work_ready_idx = take_snp, work_ready, work_ready_idx


def build_idle_state(self, ctx):
    """The IDLE state: dispatch the next event."""
    idle_dispatch, m, q_len = ctx.idle_dispatch, ctx.m, ctx.q_len

    with m.State("IDLE"):
        idle_dispatch(q_len)


def build_dispatch_strobes(self, ctx):
    """Below the FSM: what a dispatch takes and loads (driven once for every state that dispatches),
    and the ``dispatch`` / ``scan_before`` / ``work_line`` reports."""
    a_fromwork, a_maybe_m, a_op, a_probed = ctx.a_fromwork, ctx.a_maybe_m, ctx.a_op, ctx.a_probed
    a_state, a_uqid, aft, buf_r, cmd_data = ctx.a_state, ctx.a_uqid, ctx.aft, ctx.buf_r, ctx.cmd_data
    cmd_free_here, command_copies, cpu_slot_free = ctx.cmd_free_here, ctx.command_copies, ctx.cpu_slot_free
    cur_k, cur_t, cur_w, cw_scan, cw_work = ctx.cur_k, ctx.cur_t, ctx.cur_w, ctx.cw_scan, ctx.cw_work
    data_in_, dec, early_cmd_taken, engine = ctx.data_in_, ctx.dec, ctx.early_cmd_taken, ctx.engine
    go_aft, go_any, go_q, in_work, k_maybe_m = ctx.go_aft, ctx.go_any, ctx.go_q, ctx.in_work, ctx.k_maybe_m
    k_nxt, k_state, latch_data, latch_rsp = ctx.k_nxt, ctx.k_state, ctx.latch_data, ctx.latch_rsp
    load_h2d_line, load_snp, look_line = ctx.load_h2d_line, ctx.load_snp, ctx.look_line
    look_valid, m, ops, pick, pick_k = ctx.look_valid, ctx.m, ctx.ops, ctx.pick, ctx.pick_k
    progress, q_done, q_len, queue, r, r_th = ctx.progress, ctx.q_done, ctx.q_len, ctx.queue, ctx.r, ctx.r_th
    r_w, r_wh, replay, replay_go, rescan = ctx.r_w, ctx.r_wh, ctx.replay, ctx.replay_go, ctx.rescan
    rsp_in, scan_all, scan_i, scan_report = ctx.rsp_in, ctx.scan_all, ctx.scan_i, ctx.scan_report
    sd_r, sd_w, second_held, sf, slow_snp = ctx.sd_r, ctx.sd_w, ctx.second_held, ctx.sf, ctx.slow_snp
    snp, t_idx, take_snp, wk, work_ready_idx = ctx.snp, ctx.t_idx, ctx.take_snp, ctx.wk, ctx.work_ready_idx
    work_table = ctx.work_table


    with m.If(load_h2d_line):
        m.d.sync += cmd_data.eq(data_in_.data)
    with m.If(take_snp | load_snp):
        m.d.sync += snp.eq(self.h2d_req.p)
    # The CPU access offered is written into its cache's slot (ops[k].req and the store data) whenever
    # that slot is free, taken or not: a free slot's request is read by nothing (only the accesses
    # waiting, ops[k].valid, are tried), and the cycle that takes the access writes it as well.  So
    # these 600-odd flops' enables wait for no dispatch decision (through cpu_req.ready, the DCOH's
    # critical path on the ECP5 before, docs/synth.md).
    m.d.comb += sd_w.en.eq(cpu_slot_free)
    with m.If(cpu_slot_free):
        k_in = self.cpu_req.p.cache
        m.d.sync += [ops[k_in].req.kind.eq(self.cpu_req.p.kind), ops[k_in].req.line.eq(self.cpu_req.p.line),
                     ops[k_in].req.variant.eq(self.cpu_req.p.variant)]
    # IDLE's dispatch (idle_dispatch), driven here for every state that runs it, and chain_work's.
    # (ANSWER_RSP is not among the states that leave ``cmd`` free: its cycle takes the answer to the
    # last command, and the caches take a command only after the cycle its predecessor's answer went)
    m.d.comb += cmd_free_here.eq(Cat(engine.ongoing(st) for st in (
        "IDLE", "SNP_SLOW", "ANSWER_SEND", "ANSWER_DATA")).any())
    # These assignments come after the FSM, so they take precedence over a state's own in the same
    # cycle, as the dispatch's did when it came last in that state.
    go = {n: Signal(name=f"go_{n}") for n in ("work", "scan", "rsp", "data", "replay", "snoop", "cpu",
                                               "cpu_look")}
    chained_work = {"work": cw_work, "scan": cw_scan}
    for n in go:
        m.d.comb += go[n].eq((go_any & dec[n]) | (go_aft & aft[n]) | chained_work.get(n, 0))
    with m.If(go_any | go_aft):
        # the line of a lookup issued by the dispatch (a replay, a new snoop, or a new CPU access
        # when neither of those is there), driven whether or not one is issued, so that it does not
        # wait for the priority decision (the snoop's line selected first, then against the CPU
        # access's: the same function with the CPU's line innermost mapped to ~1 500 more LUT4 on
        # the ECP5, docs/synth.md)
        snoop_line = Mux(replay, slow_snp.addr, self.h2d_req.p.addr)
        m.d.comb += look_line.eq(Mux(self.h2d_req.valid | replay, snoop_line, self.cpu_req.p.line))
        # cmd_data is dead here: it takes the H2D Data line whether or not the message is taken
        # (its load enable is then the state alone), and the buffer is read at the H2D Rsp's CQID
        # (RSP loads the line from it if the response asks for data)
        m.d.comb += [load_h2d_line.eq(1), buf_r.addr.eq(rsp_in.cqid),
                     self.h2d_rsp.ready.eq(go["rsp"]), self.h2d_data.ready.eq(go["data"]),
                     self.h2d_req.ready.eq(go["snoop"] & sf.lookup.ready), self.cpu_req.ready.eq(go["cpu"]),
                     look_valid.eq(go["replay"] | go["snoop"] | go["cpu_look"]),
                     take_snp.eq(go["snoop"])]
    with m.If(go_any & dec["empty_scan"]):
        m.d.sync += rescan.eq(0)
    for n, code in (("work", Dispatch.WORK), ("scan", Dispatch.SCAN), ("rsp", Dispatch.RSP),
                    ("data", Dispatch.DATA), ("replay", Dispatch.REPLAY), ("cpu", Dispatch.CPU)):
        with m.If(go[n]):
            m.d.comb += self.dispatch.eq(code)
    with m.If(go["snoop"]):
        m.d.comb += self.dispatch.eq(Mux(sf.lookup.ready, Dispatch.SNOOP, Dispatch.NONE))
    with m.If(scan_report):
        m.d.comb += self.dispatch.eq(Dispatch.SCAN)
    # chain_work's SCAN, then the event it chained (``dispatch``); a chained dispatch that takes nothing
    # leaves ``dispatch`` at SCAN alone.  (A chained snoop always has the lookup port: chain() does not
    # dispatch while a result is held.)
    m.d.comb += self.scan_before.eq(cw_scan & Cat(go[n] for n in ("work", "rsp", "data", "replay", "snoop",
                                                                   "cpu")).any())
    m.d.sync += Assert(~self.scan_before |
                       ((self.dispatch != Dispatch.NONE) & (self.dispatch != Dispatch.SCAN)),
                       "scan_before without an event after the SCAN")
    # the line of the work item WORK dispatches (for testbenches: a shadow model works that line then)
    m.d.comb += self.work_line.eq(wk[work_ready_idx].line)
    with m.If(go["work"]):
        # the work item's snoop and its lookup (work_next)
        w_next = wk[work_ready_idx]
        m.d.comb += [work_table.take.valid.eq(1), work_table.take.idx.eq(work_ready_idx)]
        m.d.sync += [cur_w.eq(work_ready_idx), in_work.eq(1),
                     a_op.eq(w_next.snp_op), a_uqid.eq(w_next.snp_uqid)]
        with m.If(w_next.known):
            # what W_RES would latch from the lookup: the kept entry (a hit: the snoop probed its
            # copies), no request on the line, the work's own entry
            m.d.sync += [r.line.eq(w_next.line), r.hit.eq(1), r.hit_way.eq(w_next.way), r.entry.eq(w_next.sf),
                         r_th.eq(0), r_wh.eq(1), r_w.eq(work_ready_idx), q_done.eq(0)]
            # ... and W_GO's command of the copies, offered in the dispatch's own cycle when the
            # dispatching state neither drives the cmd port nor takes an answer from the caches
            # (they answer one command at a time); the work then goes straight to ANSWER_RSP if
            # the caches take it (else W_GO offers it again)
            with m.If(cmd_free_here & (w_next.sf.presence != 0)):
                command_copies(k_nxt, w_next.line, w_next.sf.presence)
                m.d.comb += early_cmd_taken.eq(self.cmd.ready)
                m.d.sync += [a_state.eq(k_state), a_maybe_m.eq(k_maybe_m), a_probed.eq(1), a_fromwork.eq(1)]
        with m.Elif(~sf.result.valid):
            m.d.comb += [look_valid.eq(1), look_line.eq(w_next.line)]
    with m.If(go["scan"]):
        m.d.sync += [rescan.eq(0), scan_i.eq(0), progress.eq(0), scan_all.eq(0), in_work.eq(0)]
    with m.If(go["rsp"]):
        m.d.sync += [*latch_rsp, replay_go.eq(1), cur_t.eq(t_idx(rsp_in.cqid))]
    with m.If(go["data"]):
        m.d.sync += [*latch_data, replay_go.eq(1), cur_t.eq(t_idx(data_in_.hdr.cqid))]
    # a host response may end the stall of a parked snoop's work (snoop_path.py, W_GO): it is worked
    # again after this event (ready at the next edge; the engine is in the event's states until then)
    m.d.comb += work_table.wake.eq(go["rsp"] | go["data"])
    with m.If(go["replay"]):
        # the held snoop is looked up again (SNP_RES reads ``snp``; a replay never shares its cycle
        # with take_snp or load_snp)
        m.d.sync += [replay.eq(0), replay_go.eq(0), snp.eq(slow_snp)]
    m.d.sync += Assert(~go["replay"] | ~(take_snp | load_snp), "a replay and a new snoop load snp together")
    with m.If(go["snoop"]):
        m.d.sync += second_held.eq(0)
    with m.If(go["cpu"]):
        k_in = self.cpu_req.p.cache
        m.d.sync += [ops[k_in].valid.eq(1), ops[k_in].victim_valid.eq(0),
                     queue[go_q].eq(k_in), q_len.eq(go_q + 1),
                     rescan.eq(0), scan_i.eq(0), progress.eq(0), scan_all.eq(0)]
    with m.If(go["cpu_look"]):
        m.d.sync += cur_k.eq(self.cpu_req.p.cache)
        m.d.comb += [sd_r.addr.eq(self.cpu_req.p.cache), pick.eq(1), pick_k.eq(self.cpu_req.p.cache)]

    ctx.go = go
