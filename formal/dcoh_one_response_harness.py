"""The harness of the DCOH's snoop-response proofs: every accepted H2D snoop gets exactly one D2H response
(at most one: safety; at least one within ``BOUND`` cycles: liveness).  DCOH (hdl/dcoh/dcoh.py) with
caches=2, sf_sets=1, sf_ways=2, tracker=2, work=1, coalesce_window=0, coalesce_block=1,
coalesce_groups=1, credits=2, addr_width=1 (two lines).

Environment
-----------
Free every cycle (``AnySeq``): ``h2d_rsp`` and ``h2d_data`` (valid and header: any opcode, any CQID,
any GO state, in any order -- the DCOH must count and drop what is illegal), ``h2d_req`` valid,
address and UQID, ``cpu_req`` (valid, kind, cache, line, variant: anything; the DCOH's ready keeps
one access per cache), and the ``dirty``/``excl`` bits of ``cmd_rsp``.
Tied: every line-data input is 0 (``h2d_data``, ``cpu_req``, ``cmd_rsp``; no control decision reads
line data); ``d2h_req/rsp/data.ready``, ``cpu_rsp.ready``, ``probe.ready`` and ``cmd.ready`` are 1;
``cmd_rsp`` is valid exactly from the cycle after a ``cmd`` handshake until it is taken (the caches
answer a command in one cycle); each D2H credit is returned one cycle after its message.
Assumes (the host's snoop rules, facts §1.1 / the model's ProtocolError):
  * a snoop's opcode is SnpData, SnpInv or SnpCur;
  * the host sends no snoop to a line while an earlier snoop to that line is unanswered (the DCOH
    counts that as SECOND_SNOOP and holds it until the first is answered; the model raises;
    tests/test_rtl_dcoh.py checks that path), and a snoop's UQID differs from
    the UQID of every unanswered snoop (UQIDs are unique in flight);
  * reset stays low;
  * with the answer bound (not ``slow_caches``), also CXL 3.x §3.2.5.2's rule that the host sends no GO
    (an H2D Rsp of ``cxl.messages.GO_OPCODES``) to a request for a line while a snoop to that line is pending
    (docs/sources.md §1.7, which speaks of any GO; the golden model raises ProtocolError at a GO
    itself, the opcode its devices take for reads and ownership).  The safety proofs' host may: the DCOH then
    counts GO_DURING_SNOOP and parks the snoop's work until the line's data, and that parked work holds
    the one work entry, so a snoop to the other line that needs it is held for as long as the host
    withholds the data, without any H2D message that would mark it disturbed (PDR found such a run:
    docs/formal.md).

Property
--------
The harness keeps, per line, ``pending`` (a snoop was accepted: ``h2d_req.valid & ready``) and its
UQID.  Safety (Assert): every D2H Rsp handshake carries the UQID of a pending snoop, which it then
retires -- so no response without a snoop and never a second response for one snoop.
Bounded liveness (Assert): a pending snoop is answered within ``BOUND`` cycles, counted from its
acceptance or from the last cycle its line was stalled (the tracker holds the line's request in
IS_D/IM_D/SM_D: the model holds snoops there until the data arrives, which only the host can send),
unless the host delivered an H2D Rsp or H2D Data (handshake) while the snoop was pending and its line
not stalled -- the engine serves host responses before a held snoop, so a host that keeps sending
them can delay it without bound.  I.e. the liveness bound covers every run in which the host is
quiet while the snoop waits for the DCOH alone; the safety Assert covers every run.
Plus the block's own Asserts (credit counters, coalescer, snoop filter, CQID allocator).

The safety Assert is proven for every reachable state by k-induction, with slow caches and the
invariants of formal/dcoh_invariants.py (formal/proof_dcoh_one_response_unbounded.py).  The liveness
bound is not proven: the BMC that checked it (``dcoh_one_response``, depth 24) is retired, as no snoop
could exceed the bound within the steps its time budget reached, and random runs of this configuration
check it instead (tests/test_formal.py ``test_dcoh_answer_bound_holds_in_random_runs``);
formal/proof_dcoh_one_response_broken.py shows the Assert failing with a bound of 2.  PDR (``abc pdr``)
with the invariants assumed found the GO rule above missing (a 60-step counterexample) and, with the
rule, gave no verdict in 45 minutes (docs/formal.md).
"""

from amaranth.asserts import AnySeq
from amaranth.hdl import Assert, Assume, Cat, Elaboratable, Module, Signal

from cxl.messages import GO_OPCODES, H2DReqOpcode as Snp, ID_WIDTH
from formal.common import no_reset
from formal.dcoh_invariants import ObservedSnoopFilter, add_invariants
from formal.dcoh_env import drive_dcoh_inputs, return_credits, small_dcoh, stalled_line

ADDR_WIDTH = 1
# cycles from acceptance (or the end of a stall) to the response, for snoops the host does not disturb.
# Not proven (module docstring): random runs answer such snoops up to 27 cycles after the cycle that
# follows their acceptance (a snoop that finds the one work entry taken by a back-invalidation is held,
# replayed once that work is done, queries the caches again and is probed); 32 leaves a margin.  The
# 20 a depth-24 BMC once reached was too few for states deeper than its steps.
BOUND = 32

TIED_HIGH = ("d2h_req.ready", "d2h_rsp.ready", "d2h_data.ready", "cpu_rsp.ready", "probe.ready",
             "cmd.ready")


class DCOHOneResponse(Elaboratable):
    def __init__(self, bound=BOUND, addr_width=ADDR_WIDTH, slow_caches=False, forbid_side_snoop=False,
                 invariants=False, dcoh_cls=None):
        self.bound = bound            # 2: the liveness Assert FAILs at step 6 (proof_dcoh_one_response_broken.py)
        self.addr_width = addr_width
        # slow_caches: the caches take cmd and cpu_rsp only when they please and answer a command any number
        # of cycles late (free inputs), so the DCOH waits on them mid-event and its snoop side path runs;
        # the liveness bound is then not asserted (a cache may hold the DCOH up for ever), safety is.
        self.slow_caches = slow_caches
        # forbid_side_snoop: Assert that no snoop is taken while a command's answer is owed -- which only
        # the side path does, so this FAILs where the side path is reached (a reachability witness)
        self.forbid_side_snoop = forbid_side_snoop
        # invariants: also Assert the invariants of formal/dcoh_invariants.py, which make the safety
        # Assert inductive (proof_dcoh_one_response_unbounded.py); dcoh_cls: a DCOH subclass in place of
        # the DCOH (a deliberately broken variant)
        self.invariants = invariants
        self.dcoh_cls = dcoh_cls

    def elaborate(self, platform):
        m = Module()
        AW = self.addr_width
        extra = {}
        if self.invariants:
            extra["snoop_filter_cls"] = ObservedSnoopFilter
        if self.dcoh_cls is not None:
            extra["dcoh_cls"] = self.dcoh_cls
        dut = small_dcoh(m, platform, addr_width=AW, **extra)
        self.dut = dut                   # (a subclass's Covers read it: proof_dcoh_one_response_reached.py)
        tied = tuple(n for n in TIED_HIGH if not (self.slow_caches and n in ("cmd.ready", "cpu_rsp.ready")))
        skip = tied + ("cmd_rsp.valid", "crd_req", "crd_rsp", "crd_data")
        drive_dcoh_inputs(m, dut, skip=skip)
        for name in tied:
            port, sig = name.split(".")
            m.d.comb += getattr(getattr(dut, port), sig).eq(1)
        no_reset(m)
        return_credits(m, dut)

        # the caches answer a command in the next cycle (slow caches: in any later cycle)
        cmd_pending = Signal()
        with m.If(dut.cmd_rsp.valid & dut.cmd_rsp.ready):
            m.d.sync += cmd_pending.eq(0)
        with m.If(dut.cmd.valid & dut.cmd.ready):
            m.d.sync += cmd_pending.eq(1)
        answer_now = AnySeq(1) if self.slow_caches else 1
        m.d.comb += dut.cmd_rsp.valid.eq(cmd_pending & answer_now)

        req = dut.h2d_req
        snp_line = req.p.addr[:AW]
        accepted = req.valid & req.ready
        rsp_sent = dut.d2h_rsp.valid & dut.d2h_rsp.ready
        host_msg = (dut.h2d_rsp.valid & dut.h2d_rsp.ready) | (dut.h2d_data.valid & dut.h2d_data.ready)
        m.d.comb += Assume(~req.valid | (req.p.opcode == Snp.SnpData) | (req.p.opcode == Snp.SnpInv) |
                           (req.p.opcode == Snp.SnpCur))
        if self.forbid_side_snoop:
            m.d.comb += Assert(~(accepted & cmd_pending), "harness: a snoop taken while a command's answer is owed")

        go = dut.h2d_rsp
        is_go = Cat(*(go.p.opcode == op for op in sorted(GO_OPCODES, key=lambda op: op.value))).any()
        matched, pendings, uqids = [], [], []
        for line in range(2 ** AW):
            pending = Signal(name=f"pending{line}")
            uqid = Signal(ID_WIDTH, name=f"uqid{line}")
            age = Signal(range(self.bound + 2), name=f"age{line}")
            disturbed = Signal(name=f"disturbed{line}")
            stalled = Signal(name=f"stalled{line}")
            m.d.comb += stalled.eq(stalled_line(dut, line))
            pendings.append(pending)
            uqids.append(uqid)
            hit = Signal(name=f"rsp_hit{line}")
            m.d.comb += hit.eq(rsp_sent & pending & (dut.d2h_rsp.p.uqid == uqid))
            matched.append(hit)
            # host rules: one unanswered snoop per line, distinct UQIDs in flight
            m.d.comb += Assume(~(req.valid & (snp_line == line) & pending))
            m.d.comb += Assume(~(req.valid & pending & (req.p.uqid == uqid)))
            # with the answer bound: no GO to a request for a line whose snoop is pending (module docstring)
            if not self.slow_caches:
                to_line = Cat(*(dut.trk[i].valid & (dut.trk[i].line == line) & (go.p.cqid == i)
                                for i in range(dut.tracker))).any()
                m.d.comb += Assume(~(go.valid & is_go & to_line & pending))
            # bookkeeping (a new snoop in the same cycle as the old one's response: the new one wins)
            with m.If(hit):
                m.d.sync += pending.eq(0)
            with m.If(stalled | ~pending):
                m.d.sync += age.eq(0)
            with m.Elif(age <= self.bound):
                m.d.sync += age.eq(age + 1)
            with m.If(pending & ~stalled & host_msg):
                m.d.sync += disturbed.eq(1)
            with m.If(accepted & (snp_line == line)):
                m.d.sync += [pending.eq(1), uqid.eq(req.p.uqid), age.eq(0), disturbed.eq(0)]
            if not self.slow_caches:
                m.d.comb += Assert(~pending | disturbed | (age <= self.bound),
                                   f"harness: snoop to line {line} not answered within {self.bound} cycles")
        any_hit = matched[0]
        for h in matched[1:]:
            any_hit = any_hit | h
        m.d.comb += Assert(~rsp_sent | any_hit, "harness: D2H Rsp without a pending snoop of its UQID")
        if self.invariants:
            add_invariants(m, dut, pendings, uqids)
        return m
