"""The pipelined DCOH's request path: the internal caches' accesses through A / B1 / B2 / C over the snoop filter.

The third event class of the pipelined engine (docs/dcoh_pipeline.md), built and checked with the response
path (hdl/dcoh/pipe/engine.py): the accesses the internal caches cannot finish themselves (``cpu_req``:
misses, upgrades, evictions, uncached accesses), one per cache at a time, each held in a *slot* of its
cache, a state machine woken by what it waits for.  No rescan: an access that cannot go on parks with its
reason (a CQID, or its line or set), and the event that frees that wakes it.

Stages
------
A (cycle N)
    One slot that wants a pass (a new access, one woken, or one whose commands were answered: those
    first), the lowest-numbered, enters and its line's snoop-filter lookup is issued.
B1, B2 (N+1, N+2)
    The snoop filter's read and forward stages (hdl/dcoh/sf_pipe.py, ``stall=False``); B2 compares the
    access's line with the lines busy on this side (a request in the tracker, another slot's command or
    answer; flip-flops) into C's register.
C (N+3: decide and commit)
    From the forwarded row, that busy bit and the free CQIDs, the access is decided as the golden model's
    ``_try_issue`` does, in one of these ways:

    * *issue*: a request starts (a miss takes a free way as a placeholder, an upgrade from S keeps its
      way, an uncached access needs none): the lowest free CQID; the tracker entry starts from a register
      a cycle later (``start``, to the response path; its line of data read from RAM by C), and the D2H
      Req is queued then;
    * *command first*: an internal fill (a load from a peer's copy: its E/M peers to S; a store to a line
      the device holds E: the peers invalidated) or an eviction (the cache's own copy taken) needs the
      caches: the slot queues its command and, when
      the answer comes, wants a second pass, the *finish*, which writes the snoop filter and answers the
      cache, or, for an eviction that leaves no copy, frees the entry and starts the write-back;
    * *answer*: an eviction of a line the cache no longer holds, a store to an E line no peer holds:
      ``cpu_rsp`` queued (``cpu_rsp`` leaves through a queue that always has room: one answer a cache);
    * *back-invalidate*: a miss whose set is full frees a way (the pseudo-LRU victim, unless a request
      is on its line: then the lowest way whose line has none), an uncached access to a line the device
      holds frees that line: a work entry of the snoop side takes the line (``bi``) and one more CQID,
      for the write-back it starts when its copies are taken (``ext_start``); the access parks on the
      set (or its line) meanwhile;
    * *park*: its line has a request or a command in flight, no CQID is free, or its set has no free
      way and no victim can be taken now (a back-invalidation of its own still running, fewer than two
      CQIDs free, no work entry free, or a work entry or another access's command or answer on a line
      of the set, which the model may not know of yet); *retry* (a pass again at once): the start
      register is busy, the access is right behind C's
      own on the same line (B2 could not see that decision), or its set's row lacks C's write of the
      last cycle.

    C's write to the snoop filter is made from a register at the next edge (so C's decision reaches no
    forwarding path of the filter); an access of that set in C in that next cycle, whose row lacks it,
    goes round again.  The response path's fill takes the port in the other cycles.


Commit port (a shadow model's order)
------------------------------------
``commit`` with ``commit_cache``: the golden model's ``_try_issue`` of that cache's access now, which must
succeed (issue, fill, evict or finish); ``commit_bi``: the same try, which fails having started a
back-invalidation.  An issue and an answer commit at their pass; an internal fill and
an eviction at their finish, where the snoop filter changes and an eviction takes its CQID.  Within a
cycle, after the completions (``freed``: the CQID a completion frees may be taken in its cycle, as the
model takes the lowest free one) and before the response path's commits.
"""

from amaranth.hdl import Assert, Cat, Module, Mux, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from cxl.coherence import DevState as D, REQUEST_START
from cxl.messages import ADDR_WIDTH, D2HReq, D2HReqOpcode as Req, MAX_IDS
from hdl.link.ports import LINE_BITS

from ..encodings import CacheCmd, CacheCmdRsp, CacheState, CmdOp, CpuKind, CpuReq, CpuRsp, STATE_BITS, STATE_CODE, UNCACHED
from ..sf_pipe import PipelinedSnoopFilter
from ..engine_tables import line_state, write_back
from ..snoop_filter import AllocKind, SFOp, SFState, Update
from .response_path import RequestStart, WriteBackStart
from .snoop_work import WorkAlloc, lowest, pick

__all__ = ["RequestPath", "Finish"]


class Finish(enum.Enum, shape=2):
    """What an access's second pass does, once its command is answered."""
    LOAD_FILL = 0       #: the peers were downgraded to S: the cache gets an S copy
    STORE_FILL = 1      #: the peers were invalidated: the cache gets the line in M
    EVICT = 2           #: the cache's copy was taken: the entry keeps the peers, or is freed and written back


class RequestPath(wiring.Component):
    """Parameters: ``caches`` (1..32), ``tracker`` (CQIDs, 2..4096), ``sf_sets`` / ``sf_ways`` (powers of
    two), ``addr_width``.  ``sf`` (the pipelined snoop filter) is built here so that tests can preload it;
    ``fill`` is the response path's update of it, taken in the cycles C's write does not land."""

    def __init__(self, *, caches=2, tracker=16, sf_sets=64, sf_ways=4, addr_width=ADDR_WIDTH, shared_sf=None):
        def bad(name, value, why):
            raise ValueError(f"RequestPath: {name}={value!r}: {why}")
        is_int = lambda v: isinstance(v, int) and not isinstance(v, bool)
        if not is_int(caches) or not 1 <= caches <= 32:
            bad("caches", caches, "must be an integer in 1..32")
        if not is_int(tracker) or not 2 <= tracker <= MAX_IDS:
            bad("tracker", tracker, f"must be an integer in 2..{MAX_IDS} (12-bit CQID)")
        self.caches, self.tracker, self.sf_sets, self.sf_ways = caches, tracker, sf_sets, sf_ways
        self.addr_width = addr_width
        # ``shared_sf``: the parent's snoop filter (hdl/dcoh/pipe/engine.py), reached through the ``sf``
        # port; else one is built here
        sf = shared_sf if shared_sf is not None else \
            PipelinedSnoopFilter(sf_sets, sf_ways, caches, addr_width, stall=False)      # checks the rest
        self.set_bits, self.shared_sf = sf.set_bits, shared_sf is not None
        members = {"sf": In(sf.signature)} if self.shared_sf else {}
        if not self.shared_sf:
            self.sf = sf
        super().__init__(members | {
            "cpu_req": In(stream.Signature(CpuReq(caches, addr_width))),
            "cpu_rsp": Out(stream.Signature(CpuRsp(caches, addr_width))),
            "cmd": Out(stream.Signature(CacheCmd(caches, addr_width))),
            "cmd_rsp": In(stream.Signature(CacheCmdRsp())),
            "start": Out(stream.Signature(RequestStart(tracker, caches, sf_ways, addr_width))),
            "d2h_push": Out(stream.Signature(D2HReq)),     # always taken (the transmit's queues)
            "freed": In(data.StructLayout({"valid": 1, "cqid": range(tracker)})),
            "fill": In(stream.Signature(Update(addr_width, sf_ways, caches))),
            "commit": Out(1), "commit_cache": Out(range(max(caches, 2))),
            "commit_bi": Out(1),
            "idle": Out(1),
            "cqids_in_use": Out(tracker),       # the CQIDs taken (a back-invalidation's from its commit)
            # ---- the snoop side (hdl/dcoh/pipe/engine.py; tied off when alone) ----------------------
            # for the line in the filter's result (a snoop's, in its C): the tracker entry that has it
            # (one-hot), and whether an access works on it (a command, or an answer not yet taken)
            "t_match": Out(tracker), "line_busy": Out(1),
            # for C's line: a snoop's work holds it (the access waits), or a line of its set; and a
            # snoop's work ended
            "ext_busy": In(1), "ext_set_busy": In(1), "ext_wake": In(1),
            # back-invalidations: a work entry of the snoop side taken (``bi_can``: one is free), the
            # write-back it starts (its line in ``ext_value`` from the next cycle)
            "bi": Out(stream.Signature(WorkAlloc(addr_width, exact_log2(sf_ways), caches, tracker))),
            "bi_can": In(1),
            "bi_line_next": Out(1),     # the line ``bi`` offers is the filter's ``next_line``
            "ext_start": In(stream.Signature(WriteBackStart(tracker, addr_width, sf_ways))),
            "ext_value": In(LINE_BITS),
        })

    def elaborate(self, platform):
        m = Module()
        K, T, AW = self.caches, self.tracker, self.addr_width
        KB = range(max(K, 2))
        sf = self.sf
        if not self.shared_sf:
            m.submodules.sf = sf

        # ---- the slots: one access per cache ---------------------------------------------------------
        s_valid, s_want, s_fly, s_fin_pass, s_lane, s_issued = (Signal(K, name=n) for n in (
            "s_valid", "s_want", "s_fly", "s_fin_pass", "s_lane", "s_issued"))
        # answered inside the device, until the cache takes its cpu_rsp: the line stays busy meanwhile,
        # so that no later command to that cache's copy can reach it before the answer does
        s_answer = Signal(K, name="s_answer")
        # a line or way freed while the slot was in flight (B2's view of the busy lines may be a cycle old)
        s_woke = Signal(K, name="s_woke")
        s_why_cqid, s_why_loc = Signal(K, name="s_why_cqid"), Signal(K, name="s_why_loc")
        s_cq_res = Signal(K, name="s_cq_res")      # a CQID reserved for this eviction's finish
        s_kind = [Signal(CpuKind, name=f"s_kind{k}") for k in range(K)]
        s_line = [Signal(AW, name=f"s_line{k}") for k in range(K)]
        s_variant, s_dirty = Signal(K, name="s_variant"), Signal(K, name="s_dirty")
        s_fin = [Signal(Finish, name=f"s_fin{k}") for k in range(K)]
        s_cqid = [Signal(range(T), name=f"s_cqid{k}") for k in range(K)]
        s_cmd_mask = [Signal(K, name=f"s_cmd_mask{k}") for k in range(K)]
        s_cmd_op = [Signal(CmdOp, name=f"s_cmd_op{k}") for k in range(K)]
        # an access's line of data (uncached writes) and what its command returned, by cache
        m.submodules.cpu_data = cpu_data = Memory(shape=LINE_BITS, depth=K, init=[])
        m.submodules.cmd_data = cmd_data = Memory(shape=LINE_BITS, depth=K, init=[])
        cpu_w, cmd_w = cpu_data.write_port(), cmd_data.write_port()
        cpu_r_c, cmd_r_c = cpu_data.read_port(transparent_for=()), cmd_data.read_port(transparent_for=())
        cmd_r_out = cmd_data.read_port(transparent_for=())

        # ---- the tracker's lines (busy); a CQID not in use is free --------------------------------------
        t_valid = Signal(T)
        t_line = [Signal(AW, name=f"t_line{i}") for i in range(T)]

        req = self.cpu_req
        take = req.valid & ~s_valid.bit_select(req.p.cache, 1)
        m.d.comb += [req.ready.eq(take), cpu_w.en.eq(take), cpu_w.addr.eq(req.p.cache), cpu_w.data.eq(req.p.data)]

        # ---- A: one slot a cycle ---------------------------------------------------------------------
        cand = s_want & ~s_fly
        fin_any, fin_k, _ = lowest(m, cand & s_fin_pass, "a_fin")
        new_any, new_k, _ = lowest(m, cand, "a_new")
        # (the lookup port's ready: a shared filter's other client may have it in this cycle)
        a_go = (fin_any | new_any) & sf.lookup.ready
        a_k = Signal(KB)
        m.d.comb += a_k.eq(Mux(fin_any, fin_k, new_k))
        m.d.comb += [sf.lookup.valid.eq(fin_any | new_any), sf.lookup.p.eq(pick(m, a_k, s_line, "a_line")),
                     sf.result.ready.eq(1)]
        side = data.StructLayout({"valid": 1, "k": KB, "fin": 1})
        b1, b2 = Signal(side), Signal(side)
        c = Signal(data.StructLayout({"valid": 1, "k": KB, "fin": 1, "busy": 1, "behind": 1}))
        m.d.sync += [b1.valid.eq(a_go), b1.k.eq(a_k), b1.fin.eq(fin_any), b2.eq(b1),
                     c.valid.eq(b2.valid), c.k.eq(b2.k), c.fin.eq(b2.fin)]
        # B2 compares the access's line with the lines busy on this side (a request in the tracker, a
        # command or an answer of another slot) into C's register, so that C starts from it.  What
        # changes in B2's cycle: a line C makes busy then (``behind``: C has the same line; the access
        # goes round again rather than park on what may not be busy), a line freed then (the slot's
        # ``s_woke``: a park at C is woken at once).
        b2_line = pick(m, b2.k, s_line, "b2_line")
        c_line = pick(m, c.k, s_line, "c_line")
        m.d.sync += [
            c.busy.eq(Cat(t_valid[i] & (t_line[i] == b2_line) for i in range(T)).any() |
                      Cat((s_lane[j] | s_answer[j]) & (s_line[j] == b2_line) & (j != b2.k) for j in range(K)).any()),
            c.behind.eq(c.valid & (c_line == b2_line)),
        ]

        # ---- C: decide and commit ----------------------------------------------------------------------
        k = c.k
        res = sf.result.p
        kind = pick(m, k, s_kind, "c_kind")
        mine = Signal(K)
        m.d.comb += mine.eq(1 << k)
        hit = res.hit & (res.entry.state != SFState.PLACEHOLDER)
        presence = Mux(res.hit, res.entry.presence, 0)
        peers = presence & ~mine
        line = res.line
        res_row = sf.result_row
        busy = c.busy | self.ext_busy
        sb = self.set_bits
        # No victim is chosen in a set where a snoop's work holds a line (``ext_set_busy``), nor where
        # an access of a cache works on one: its command or its answer, which the model has not seen
        # yet, must not meet a back-invalidation's.
        slot_set_busy = Cat((s_lane[j] | s_answer[j]) & ((s_line[j][:sb] == line[:sb]) if sb else 1)
                            for j in range(K)).any()
        # the ways whose lines have a request: the victim choice passes over them, as the model's does
        # (each tracker entry's line compared with each way's a cycle early: below)
        busy_eq = [Signal(self.sf_ways, name=f"busy_eq{i}", init=(1 << self.sf_ways) - 1) for i in range(T)]
        for w in range(self.sf_ways):
            m.d.comb += sf.result_busy[w].eq(Cat(t_valid[i] & busy_eq[i][w] for i in range(T)).any())
        # the lowest free CQID, as the model takes it after this cycle's completion (freed first)
        freed_now = Signal(T)
        m.d.comb += freed_now.eq(Mux(self.freed.valid, 1 << self.freed.cqid, 0))
        cq_free = ~t_valid | freed_now
        cq_any, cqid, cq_grant = lowest(m, cq_free, "cq")
        # An eviction that leaves no copy takes its CQID at its finish pass, after its command took the
        # cache's copy; the line is busy meanwhile, so a snoop to it waits.  Were the CQID gone by then,
        # that snoop would wait for a completion, whose GO the host holds back until the snoop (and
        # every snoop behind it) is answered: a deadlock.  So such an eviction reserves a CQID at its
        # first pass (``s_cq_res``, a count, not a number: the finish takes the lowest free one, as the
        # model does), and the others take one only beyond the reservations.
        # The CQIDs to spare (free less reserved, not counting this cycle's completion) are a counter
        # register moved by C's takes and reservations and by the completions, so that C compares a flop
        # with a constant instead of counting the free CQIDs (a popcount and an adder in its decision).
        # The Assert checks it against the count.
        spare = Signal(range(-K - 1, T + 1), init=T)
        cq_one = (spare > 0) | ((spare == 0) & self.freed.valid)          # a CQID to spare
        cq_two = (spare > 1) | ((spare == 1) & self.freed.valid)          # two (a back-invalidation keeps
                                                                          # one for the access)
        # the start register (below): free, or handing its request over in this cycle
        start_valid = Signal()
        start_ok = ~start_valid | self.start.ready
        variant = s_variant.bit_select(k, 1)
        fin = pick(m, k, s_fin, "c_fin")
        cmd_dirty = s_dirty.bit_select(k, 1)

        # what C does (exclusive): each names the fields its action writes
        issue, lane, answer, park, retry, fin_done = (Signal(name=n) for n in (
            "c_issue", "c_lane", "c_answer", "c_park", "c_retry", "c_fin_done"))
        why_cqid, why_loc = Signal(), Signal()
        code, st = Signal(Req, init=Req.RdCurr), Signal(STATE_BITS)
        way, others = Signal.like(res.hit_way), Signal(K)
        bi_go, bi_line, bi_way, bi_entry = Signal(), Signal(AW), Signal.like(res.hit_way), Signal.like(res.entry)
        bi_victim = Signal()            # the back-invalidation's line is the victim's, not the access's
        reserve = Signal()              # an eviction's first pass reserves the CQID its finish takes
        lane_op, lane_mask, lane_fin = Signal(CmdOp), Signal(K), Signal(Finish)
        rsp_state = Signal(CacheState)
        sf_w = sf.update
        upd_r, upd_r_valid = Signal(sf.update.p.shape()), Signal()
        c_upd = Signal(sf.update.p.shape())         # C's write, made at the next edge (below)
        c_sf = Signal()                             # C writes the filter
        value_from_cmd = Signal()

        def sf_write(op, way_, state, dirty, presence_, touch=0):
            m.d.comb += [c_sf.eq(1), c_upd.op.eq(op), c_upd.line.eq(line), c_upd.way.eq(way_),
                         c_upd.entry.state.eq(state), c_upd.entry.dirty.eq(dirty),
                         c_upd.entry.presence.eq(presence_), c_upd.touch.eq(touch)]

        def wait(cqid=0, loc=0):
            m.d.comb += [park.eq(1), why_cqid.eq(cqid), why_loc.eq(loc)]

        def by_variant(codes, frm):
            """(opcode, start state code) of the access's variant: ``codes`` = (variant 0, variant 1)."""
            return (Mux(variant, codes[1], codes[0]),
                    Mux(variant, STATE_CODE[REQUEST_START[(codes[1], frm)]], STATE_CODE[REQUEST_START[(codes[0], frm)]]))

        def start_request(code_, state_code, way_=0, others_=0):
            """Issue a request: needs a CQID (checked by the caller) and the start port."""
            with m.If(~start_ok):
                m.d.comb += retry.eq(1)
            with m.Else():
                m.d.comb += [issue.eq(1), code.eq(code_), st.eq(state_code), way.eq(way_), others.eq(others_)]

        def miss(codes):
            with m.If(~cq_one):
                wait(cqid=1)
            with m.Elif(res.alloc == AllocKind.FREE):
                start_request(*by_variant(codes, D.I), res.alloc_way)
                with m.If(start_ok):
                    sf_write(SFOp.ALLOCATE, res.alloc_way, SFState.PLACEHOLDER, 0, 0)
            # (while its own victim is being back-invalidated, that work is in the set: it waits, as the
            # model's access does while its victim has work)
            with m.Elif((res.alloc == AllocKind.VICTIM) & cq_two & self.bi_can & ~self.ext_set_busy &
                        ~slot_set_busy):
                back_invalidate(res.victim_line, res.alloc_way, res.victim, victim=1)
                wait(loc=1)
            with m.Else():              # every way busy, or no CQID or work entry to spare
                wait(cqid=1, loc=1)

        def back_invalidate(line_, way_, entry_, victim=0):
            """Free a way (or the access's own line): a work entry of the snoop side and a CQID."""
            m.d.comb += [bi_go.eq(1), bi_line.eq(line_), bi_way.eq(way_), bi_entry.eq(entry_),
                         bi_victim.eq(victim)]

        def to_lane(op, mask, fin_):
            m.d.comb += [lane.eq(1), lane_op.eq(op), lane_mask.eq(mask), lane_fin.eq(fin_)]

        # C's write of the last cycle reaches the filter in this one: a row of its set read before it
        # lacks it, so an access in that set goes round again
        # and so does a miss that would choose a victim in the set the response path's fill writes in this
        # cycle (the fill waits while C's write goes): the completion that fills is before this C in the
        # commit order, and the fill touches the set's pseudo-LRU bits and frees its line from the busy
        # mask, which only a victim choice reads
        same_set = lambda x: (x[:sb] == line[:sb]) if sb else 1       # noqa: E731
        fill_now = self.fill.valid & ~upd_r_valid
        victim_choice = ~res.hit & (res.alloc != AllocKind.FREE)
        stale = c.valid & ((upd_r_valid & same_set(upd_r.line)) |
                           (fill_now & victim_choice & same_set(self.fill.p.line)))
        with m.If(stale):
            m.d.comb += retry.eq(1)
        with m.Elif(c.valid & ~c.fin):
            gone = (kind == CpuKind.EVICT) & (~hit | ((presence & mine) == 0))
            with m.If(gone):                                   # (the model's cache hit: nothing to evict)
                m.d.comb += [answer.eq(1), rsp_state.eq(CacheState.I)]
            with m.Elif(c.behind):                             # (B2 could not see C's decision)
                m.d.comb += retry.eq(1)
            with m.Elif(busy):
                wait(loc=1)
            with m.Elif(kind == CpuKind.LOAD):
                with m.If(hit):
                    to_lane(CmdOp.TO_S, peers, Finish.LOAD_FILL)
                with m.Else():
                    miss((Req.RdShared, Req.RdAny))
            with m.Elif(kind == CpuKind.STORE):
                with m.If(hit & (res.entry.state == SFState.E)):
                    with m.If(peers != 0):
                        to_lane(CmdOp.INV, peers, Finish.STORE_FILL)
                    with m.Else():                         # no peer: the cache takes it at once
                        m.d.comb += [answer.eq(1), rsp_state.eq(CacheState.M)]
                        sf_write(SFOp.MODIFY, res.hit_way, SFState.E, res.entry.dirty, mine, touch=1)
                with m.Elif(hit):                          # S: an upgrade
                    with m.If(~cq_one):
                        wait(cqid=1)
                    with m.Else():
                        start_request(*by_variant((Req.RdOwn, Req.RdOwnNoData), D.S), res.hit_way, peers)
                with m.Else():
                    miss((Req.RdOwn, Req.RdOwnNoData))
            with m.Elif(kind == CpuKind.EVICT):
                with m.If((peers == 0) & ~cq_one):
                    wait(cqid=1)
                with m.Else():                              # the copy taken first
                    to_lane(CmdOp.INV, mine, Finish.EVICT)
                    m.d.comb += reserve.eq(peers == 0)
            with m.Else():                                  # uncached
                with m.If(hit):                             # its own copies first: a back-invalidation
                    with m.If(cq_two & self.bi_can):
                        back_invalidate(line, res.hit_way, res.entry)
                        wait(loc=1)
                    with m.Else():
                        wait(cqid=1, loc=1)
                with m.Elif(~cq_one):
                    wait(cqid=1)
                with m.Else():
                    for name, code_ in UNCACHED.items():
                        with m.If(kind == CpuKind[name.upper()]):
                            start_request(code_, STATE_CODE[REQUEST_START[(code_, D.I)]])
        with m.Elif(c.valid & c.fin):                       # the second pass: the command was answered
            with m.Switch(fin):
                with m.Case(Finish.LOAD_FILL):
                    m.d.comb += [fin_done.eq(1), rsp_state.eq(CacheState.S)]
                    sf_write(SFOp.MODIFY, res.hit_way, res.entry.state, res.entry.dirty | cmd_dirty,
                             presence | mine, touch=1)
                with m.Case(Finish.STORE_FILL):
                    m.d.comb += [fin_done.eq(1), rsp_state.eq(CacheState.M)]
                    sf_write(SFOp.MODIFY, res.hit_way, SFState.E, res.entry.dirty, mine, touch=1)
                with m.Case(Finish.EVICT):
                    with m.If(peers != 0):                  # others keep it: no message
                        m.d.comb += [fin_done.eq(1), rsp_state.eq(CacheState.I)]
                        sf_write(SFOp.MODIFY, res.hit_way, res.entry.state, res.entry.dirty, peers)
                    with m.Else():
                        dirty = res.entry.dirty | cmd_dirty
                        ev_code, ev_state = write_back(
                            m, Mux(dirty, STATE_CODE[D.M], Mux(res.entry.state == SFState.E, STATE_CODE[D.E],
                                                               STATE_CODE[D.S])), variant)
                        with m.If(~cq_any):                  # (never: its first pass reserved one)
                            wait(cqid=1)
                        with m.Elif(~start_ok):
                            m.d.comb += retry.eq(1)
                        with m.Else():
                            m.d.comb += [issue.eq(1), code.eq(ev_code), st.eq(ev_state), value_from_cmd.eq(1)]
                            sf_write(SFOp.FREE, res.hit_way, SFState.S, 0, 0)

        # ---- C's writes ----------------------------------------------------------------------------
        # A request starts from a register a cycle after C (C's decision reaches no RAM's write enable in
        # the response path): the start register, whose line of data (an uncached write's, or an evicted
        # copy) C reads from RAM by the cache's number; the D2H Req is queued as the tracker takes it, so
        # the host never sees a request its tracker entry does not hold yet.
        # A back-invalidated line's write-back (``ext_start``: the snoop side's answer lane, its line in
        # ``ext_value`` from the next cycle) goes through a register of its own (``ext_r``), whose
        # ``ready`` comes from flops (the lane's decision does not wait for C's), and from there takes the
        # start register in a cycle C issues nothing.  ``ext_value`` stays as it is until the start
        # register hands the write-back over: no other write-back is taken before then.
        start_r = Signal(data.StructLayout({f: self.start.p.shape().members[f] for f in
                                            ("idx", "op", "line", "state", "way", "cache", "cpu", "store",
                                             "others")}))
        start_from_cmd, start_from_ext = Signal(), Signal()
        ext = self.ext_start
        ext_r, ext_r_valid = Signal.like(ext.p), Signal()
        ext_go = ext_r_valid & start_ok & ~issue
        m.d.comb += ext.ready.eq(~ext_r_valid & ~(start_valid & start_from_ext))
        with m.If(ext.valid & ext.ready):
            m.d.sync += [ext_r_valid.eq(1), ext_r.eq(ext.p)]
        with m.Elif(ext_go):
            m.d.sync += ext_r_valid.eq(0)
        with m.If(issue):
            m.d.sync += [start_valid.eq(1), start_r.idx.eq(cqid), start_r.op.eq(code), start_r.line.eq(line),
                         start_r.state.eq(st), start_r.way.eq(way), start_r.cache.eq(k), start_r.cpu.eq(1),
                         start_r.store.eq(kind == CpuKind.STORE), start_r.others.eq(others),
                         start_from_cmd.eq(value_from_cmd), start_from_ext.eq(0)]
        with m.Elif(ext_go):
            m.d.sync += [start_valid.eq(1), start_r.idx.eq(ext_r.idx), start_r.op.eq(ext_r.op),
                         start_r.line.eq(ext_r.line), start_r.state.eq(ext_r.state), start_r.way.eq(ext_r.way),
                         start_r.cache.eq(0), start_r.cpu.eq(0), start_r.store.eq(0), start_r.others.eq(0),
                         start_from_cmd.eq(0), start_from_ext.eq(1)]
        with m.Elif(self.start.ready):
            m.d.sync += start_valid.eq(0)
        hold = start_valid & ~self.start.ready
        m.d.comb += [cpu_r_c.addr.eq(k), cmd_r_c.addr.eq(k), cpu_r_c.en.eq(~hold), cmd_r_c.en.eq(~hold)]
        sp = self.start.p
        m.d.comb += [self.start.valid.eq(start_valid), sp.idx.eq(start_r.idx), sp.op.eq(start_r.op),
                     sp.line.eq(start_r.line), sp.state.eq(start_r.state), sp.way.eq(start_r.way),
                     sp.cache.eq(start_r.cache), sp.cpu.eq(start_r.cpu), sp.store.eq(start_r.store),
                     sp.others.eq(start_r.others),
                     sp.value.eq(Mux(start_from_ext, self.ext_value, Mux(start_from_cmd, cmd_r_c.data, cpu_r_c.data)))]
        # the D2H Req goes to the transmit's queues (hdl/dcoh/pipe/request_tx.py) as its entry starts
        dp = self.d2h_push.p
        m.d.comb += [self.d2h_push.valid.eq(start_valid & self.start.ready), dp.valid.eq(1),
                     dp.opcode.eq(start_r.op), dp.cqid.eq(start_r.idx), dp.addr.eq(start_r.line)]
        # the snoop filter's one write: the response path's fill, else C's
        # C's write from its register (so C's decision reaches no forwarding path of the filter), else
        # the response path's fill, which waits in that cycle
        m.d.sync += [upd_r.eq(c_upd), upd_r_valid.eq(c_sf)]
        m.d.comb += [sf_w.valid.eq(upd_r_valid | self.fill.valid), self.fill.ready.eq(~upd_r_valid),
                     sf_w.p.eq(Mux(upd_r_valid, upd_r.as_value(), self.fill.p.as_value()))]
        # the tracker's lines (and so the CQIDs in use); a back-invalidation takes its CQID at once, under
        # the line it frees (its write-back's, later)
        for i in range(T):
            with m.If((issue | bi_go) & (cqid == i)):
                m.d.sync += [t_valid[i].eq(1), t_line[i].eq(Mux(bi_go, bi_line, line))]
            with m.Elif(self.freed.valid & (self.freed.cqid == i)):
                m.d.sync += t_valid[i].eq(0)
        # the work entry of a back-invalidation: its probe, then INV, of every copy of the line
        b = self.bi.p
        bi_st, _ = line_state(m, 1, bi_entry, 0, 0)
        m.d.comb += [self.bi.valid.eq(bi_go), b.line.eq(bi_line), b.way.eq(bi_way),
                     b.presence.eq(bi_entry.presence), b.st.eq(bi_st), b.cmd.eq(CmdOp.INV), b.evict.eq(1),
                     b.cqid.eq(cqid)]

        # ---- the cpu_rsp queue (an answer a cache at most: never full) -----------------------------
        rsp_layout = data.StructLayout({"k": KB, "line": AW, "state": CacheState})
        m.submodules.rsp_q = rsp_q = SyncFIFO(width=rsp_layout.size, depth=K)
        rsp_in = Signal(rsp_layout)
        done_here = answer | fin_done
        m.d.comb += [rsp_in.k.eq(k), rsp_in.line.eq(line), rsp_in.state.eq(rsp_state),
                     rsp_q.w_en.eq(done_here), rsp_q.w_data.eq(rsp_in.as_value())]
        # the output register: the head and its cache's line of data (read as the head moves in)
        out, out_valid = Signal(rsp_layout), Signal()
        out_take = rsp_q.r_rdy & (~out_valid | self.cpu_rsp.ready)
        head = data.View(rsp_layout, rsp_q.r_data)
        m.d.comb += [rsp_q.r_en.eq(out_take), cmd_r_out.addr.eq(head.k), cmd_r_out.en.eq(out_take)]
        with m.If(out_take):
            m.d.sync += [out.eq(head), out_valid.eq(1)]
        with m.Elif(self.cpu_rsp.ready):
            m.d.sync += out_valid.eq(0)
        m.d.comb += [self.cpu_rsp.valid.eq(out_valid), self.cpu_rsp.p.cache.eq(out.k),
                     self.cpu_rsp.p.line.eq(out.line), self.cpu_rsp.p.state.eq(out.state),
                     self.cpu_rsp.p.data.eq(cmd_r_out.data)]

        # ---- the command lane: the slots' commands in order, answered in order --------------------
        m.submodules.cmd_q = cmd_q = SyncFIFO(width=len(Signal(KB)), depth=K)
        m.submodules.ans_q = ans_q = SyncFIFO(width=len(Signal(KB)), depth=K)
        m.d.comb += [cmd_q.w_en.eq(lane), cmd_q.w_data.eq(k)]
        ck = cmd_q.r_data
        cmd = self.cmd
        m.d.comb += [cmd.valid.eq(cmd_q.r_rdy & ans_q.w_rdy), cmd.p.line.eq(pick(m, ck, s_line, "cmd_line")),
                     cmd.p.caches.eq(pick(m, ck, s_cmd_mask, "cmd_mask")), cmd.p.op.eq(pick(m, ck, s_cmd_op, "cmd_op")),
                     cmd_q.r_en.eq(cmd.valid & cmd.ready), ans_q.w_en.eq(cmd.valid & cmd.ready), ans_q.w_data.eq(ck)]
        ak = ans_q.r_data
        answered = self.cmd_rsp.valid & ans_q.r_rdy
        m.d.comb += [self.cmd_rsp.ready.eq(ans_q.r_rdy), ans_q.r_en.eq(answered),
                     cmd_w.en.eq(answered), cmd_w.addr.eq(ak), cmd_w.data.eq(self.cmd_rsp.p.data)]

        # ---- the slots' moves ------------------------------------------------------------------------
        wake_cqid = self.freed.valid
        answer_taken = self.cpu_rsp.valid & self.cpu_rsp.ready
        # (an answer taken wakes a cycle later: the port's ready comes from outside, late)
        answer_taken_r = Signal()
        m.d.sync += answer_taken_r.eq(answer_taken)
        # a line freed, or a way (by a completion, an answer taken, an eviction's write-back, a snoop)
        wake_loc = self.freed.valid | answer_taken_r | (issue & c.fin) | self.ext_wake
        for j in range(K):
            here = c.valid & (k == j)
            with m.If(take & (req.p.cache == j)):
                m.d.sync += [s_valid[j].eq(1), s_want[j].eq(1), s_kind[j].eq(req.p.kind), s_line[j].eq(req.p.line),
                             s_variant[j].eq(req.p.variant), s_fin_pass[j].eq(0), s_issued[j].eq(0),
                             s_why_cqid[j].eq(0), s_why_loc[j].eq(0), s_cq_res[j].eq(0)]
            with m.If(a_go & (a_k == j)):
                m.d.sync += [s_fly[j].eq(1), s_want[j].eq(0), s_woke[j].eq(0)]
            with m.Elif(s_fly[j] & wake_loc):
                m.d.sync += s_woke[j].eq(1)
            with m.If(here):
                m.d.sync += s_fly[j].eq(0)
                with m.If(retry):
                    m.d.sync += s_want[j].eq(1)
                with m.If(park):
                    m.d.sync += [s_why_cqid[j].eq(why_cqid), s_why_loc[j].eq(why_loc),
                                 s_want[j].eq(wake_cqid | wake_loc | s_woke[j])]  # an event since B2
                with m.If(reserve):
                    m.d.sync += s_cq_res[j].eq(1)
                with m.If((issue | fin_done) & c.fin):
                    m.d.sync += s_cq_res[j].eq(0)
                with m.If(lane):
                    m.d.sync += [s_lane[j].eq(1), s_cmd_op[j].eq(lane_op), s_cmd_mask[j].eq(lane_mask),
                                 s_fin[j].eq(lane_fin)]
                with m.If(issue):
                    m.d.sync += [s_issued[j].eq(1), s_lane[j].eq(0), s_fin_pass[j].eq(0), s_cqid[j].eq(cqid)]
                with m.If(answer | fin_done):
                    m.d.sync += [s_answer[j].eq(1), s_lane[j].eq(0), s_fin_pass[j].eq(0)]
            with m.If(answer_taken & (out.k == j)):
                m.d.sync += [s_valid[j].eq(0), s_answer[j].eq(0)]
            with m.If(answered & (ak == j)):
                m.d.sync += [s_dirty[j].eq(self.cmd_rsp.p.dirty), s_fin_pass[j].eq(1), s_want[j].eq(1)]
            # (a parked finish pass, an eviction's waiting for a CQID, is woken as well)
            with m.If(~(here & park) & s_valid[j] & ~s_want[j] & ~s_fly[j] & (~s_lane[j] | s_fin_pass[j]) &
                      ~s_issued[j] & ~s_answer[j] &
                      ((s_why_cqid[j] & wake_cqid) | (s_why_loc[j] & wake_loc))):
                m.d.sync += s_want[j].eq(1)
            # an issued access ends with its request (the response path answers the cache)
            with m.If(s_issued[j] & self.freed.valid & (self.freed.cqid == s_cqid[j])):
                m.d.sync += [s_valid[j].eq(0), s_issued[j].eq(0)]

        # ---- the line compares with the filter's result, a cycle early ----------------------------------
        # The tracker's lines and the slots' lines are compared with the line (and each way's line) the
        # filter's result holds in the next cycle (``next_line``, ``next_row``: the result register's
        # next contents) into registers, and the valid bits of the cycle are applied to those: the
        # result's cycle starts from flops.  Corrections for what changes at this edge: the entry C
        # writes (its line: the access's or the victim's), a new access's line; and this cycle's write
        # to the filter, which may replace a way's tag (``next_written``: the tag is ``next_wline``'s).
        nl, nrow, nwr, nwl = sf.next_line, sf.next_row, sf.next_written, sf.next_wline
        way_next = [Cat(nl[:sb], nrow.ways[w].tag) for w in range(self.sf_ways)]

        def new_eq(target):             # the line C writes into the tracker now, compared with ``target``
            return Mux(bi_go & bi_victim, res.victim_line == target, line == target)
        m.d.comb += self.bi_line_next.eq(Mux(bi_victim, res.victim_line == nl, line == nl))
        tm_eq = Signal(T, init=(1 << T) - 1)
        new_wl = new_eq(nwl)
        new_way = [new_eq(way_next[w]) for w in range(self.sf_ways)]
        for i in range(T):
            set_i = (issue | bi_go) & (cqid == i)
            old_wl = t_line[i] == nwl
            m.d.sync += tm_eq[i].eq(Mux(set_i, new_eq(nl), t_line[i] == nl))
            for w in range(self.sf_ways):
                m.d.sync += busy_eq[i][w].eq(Mux(set_i, Mux(nwr[w], new_wl, new_way[w]),
                                                 Mux(nwr[w], old_wl, t_line[i] == way_next[w])))
        s_eq = Signal(K, init=(1 << K) - 1)
        for j in range(K):
            m.d.sync += s_eq[j].eq(Mux(take & (req.p.cache == j), req.p.line == nl, s_line[j] == nl))

        # ---- what the snoop side sees of the line in the filter's result --------------------------------
        # (a request still in the start register is in ``t_match`` already, and its tracker entry still
        # holds the last request's stable state: the snoop side holds a snoop to it as to a completing
        # request; hdl/dcoh/pipe/engine.py asserts it)
        m.d.comb += [
            self.t_match.eq(t_valid & tm_eq),
            self.line_busy.eq(((s_lane | s_answer) & s_eq).any()),
        ]
        m.d.sync += [
            Assert(self.t_match == Cat(t_valid[i] & (t_line[i] == line) for i in range(T)),
                   "request path: the registered tracker line compare is stale"),
            Assert(self.line_busy == Cat((s_lane[j] | s_answer[j]) & (s_line[j] == line) for j in range(K)).any(),
                   "request path: the registered slot line compare is stale"),
        ]
        for w in range(self.sf_ways):
            way_line = Cat(line[:sb], res_row.ways[w].tag)
            m.d.sync += Assert(sf.result_busy[w] == Cat(t_valid[i] & (t_line[i] == way_line) for i in range(T)).any(),
                               "request path: the registered busy ways are stale")

        # ---- the spare CQIDs' counter (above): a CQID taken (a request issued or a back-invalidation),
        # one freed, a reservation made or used
        res_add = c.valid & reserve & ~s_cq_res.bit_select(k, 1)
        res_use = c.valid & (issue | fin_done) & c.fin & s_cq_res.bit_select(k, 1)
        m.d.sync += spare.eq(spare - (issue | bi_go) + self.freed.valid - res_add + res_use)
        free_count = Signal(range(T + 1))
        reserved = Signal(range(K + 1))
        m.d.comb += [free_count.eq(sum(~t_valid[i] for i in range(T))),
                     reserved.eq(sum(s_cq_res[j] for j in range(K)))]
        m.d.sync += [
            Assert(spare + reserved == free_count, "request path: the spare CQIDs' counter drifted"),
            Assert(~self.freed.valid | t_valid.bit_select(self.freed.cqid, 1),
                   "request path: a completion freed a CQID not in use"),
        ]

        # ---- commit port and status --------------------------------------------------------------------
        m.d.comb += [self.commit.eq(issue | answer | fin_done), self.commit_bi.eq(bi_go),
                     self.commit_cache.eq(k)]
        # (an access whose request is issued waits for the host, not for this path: idle as far as it goes)
        m.d.comb += [self.idle.eq(~(s_valid & ~s_issued).any() & ~start_valid & ~ext_r_valid & ~rsp_q.r_rdy &
                                   ~out_valid),
                     self.cqids_in_use.eq(t_valid)]
        m.d.sync += [
            Assert(~(c.valid & c.fin) | hit, "request path: a finish pass whose line left the snoop filter"),
            Assert(~(c.valid & c.fin & (fin == Finish.EVICT) & (peers == 0)) | cq_any,
                   "request path: an eviction's finish found no CQID, though its first pass reserved one"),
            Assert(~c.valid | s_fly.bit_select(k, 1), "request path: C decides a slot not in flight"),
            Assert(~self.cmd_rsp.valid | ans_q.r_rdy, "request path: a command answer with no command out"),
            Assert(~self.d2h_push.valid | self.d2h_push.ready, "request path: a D2H Req not taken"),
            Assert(~rsp_q.w_en | rsp_q.w_rdy, "request path: the cpu_rsp queue overflowed"),
            Assert(~cmd_q.w_en | cmd_q.w_rdy, "request path: the command queue overflowed"),
        ]
        return m
