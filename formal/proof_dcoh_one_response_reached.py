"""Reachability witness for dcoh_one_response_unbounded (mode cover): in its harness (slow caches, host
free, the invariants of formal/dcoh_invariants.py asserted), each situation the unbounded proof is
about happens within ``DEPTH`` steps.  PASS means SBY found a trace for every Cover:

* a probed snoop's work answers its snoop (the answer of a line whose copies the caches were asked to
  drop: the snoop's work entry, its probe through the coalescer, the command, the answer);
* a snoop is answered from a request's transient state (a snoop to a line with a request pending);
* the side path answers a snoop while the engine waits on a cache;
* a held snoop is looked up again (its replay);
* a snoop hits a line in the snoop filter after a read request completed and filled it.
"""

from amaranth.hdl import Cat, Cover, Signal

from cxl.messages import D2HRspOpcode as Rsp
from formal.common import Proof
from formal.dcoh_env import ENGINE, EXTRA_SCRIPT
from formal.dcoh_one_response_harness import ADDR_WIDTH, DCOHOneResponse

DEPTH = 12


class Reached(DCOHOneResponse):
    def __init__(self):
        super().__init__(slow_caches=True, invariants=True)

    def elaborate(self, platform):
        m = super().elaborate(platform)
        dut = self.dut
        c = dut.debug
        st = lambda *names: Cat(*(c.engine.ongoing(n) for n in names)).any()     # noqa: E731
        sent = dut.d2h_rsp.valid & dut.d2h_rsp.ready
        by_engine = sent & ~c.side_rsp
        filled = Signal()                 # a read or ownership request completed (its line filled)
        free = c.tracker.free
        with m.If(free.valid & c.trk[free.idx].has_way):
            m.d.sync += filled.eq(1)
        m.d.comb += [
            Cover(by_engine & st("ANSWER_RSP", "ANSWER_SEND") & c.a_fromwork, "a probed snoop's work answers it"),
            Cover(by_engine & st("ANSWER_RSP", "ANSWER_SEND") & c.r_th, "an answer from a request's transient state"),
            Cover(sent & c.side_rsp, "the side path answers a snoop"),
            Cover(c.go["replay"], "a held snoop is looked up again"),
            Cover(by_engine & filled & (dut.d2h_rsp.p.opcode != Rsp.RspIHitI), "a snoop hits a line after its fill"),
        ]
        return m


PROOF = Proof(
    name="dcoh_one_response_reached",
    mode="cover", depth=DEPTH,
    harness=Reached,
    engine=ENGINE,
    extra_script=EXTRA_SCRIPT,
    description=f"WITNESS for dcoh_one_response_unbounded (DCOH(caches=2, sf 1x2, tracker=2, work=1, addr_width="
                f"{ADDR_WIDTH}), slow caches, the invariants asserted): a probed snoop's work answered, an answer "
                "from a request's transient state, the side path's answer, a held snoop replayed, a hit after a fill",
    quick=False,
)
