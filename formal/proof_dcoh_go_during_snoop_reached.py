"""Reachability witness (mode cover) for the parked work of a snoop, in dcoh_one_response_unbounded's
harness (slow caches, host free, the invariants of formal/dcoh_invariants.py asserted).  A probed snoop's
work on an upgrade's line (SM_AD) whose GO comes while the probe is out finds the line in SM_D, whose
snoops stall until the data (CXL 3.x §3.2.5.2 forbids that GO, docs/sources.md §1.7, but the free host
sends it): the engine parks the work, counts GO_DURING_SNOOP, and answers once the data has come.  PASS
means SBY found a trace for every Cover within ``DEPTH`` steps:

* the work parks (the load that fills the line S, the store's RdOwn, the SnpInv and its probe, the GO:
  step 13);
* the host's next H2D Rsp or Data readies it again (step 15);
* the parked work answers its snoop, after the data (step 23).

The unbounded proof shows that no snoop is ever answered from a state whose snoops stall (the DCOH's own
Assert in its answer states) and that the answer still retires its pending snoop exactly once; this
proof shows that the path it is about is taken.  With the park left out (W_GO answering at once, as the
engine did before), dcoh_one_response's harness with slow caches FAILs that Assert at step 15.
"""

from amaranth.hdl import Cover, Signal

from formal.common import Proof
from formal.dcoh_env import ENGINE, EXTRA_SCRIPT
from formal.dcoh_one_response_harness import ADDR_WIDTH, DCOHOneResponse

DEPTH = 24


class GoDuringSnoop(DCOHOneResponse):
    def __init__(self):
        super().__init__(slow_caches=True, invariants=True)

    def elaborate(self, platform):
        m = super().elaborate(platform)
        dut = self.dut
        c = dut.debug
        park, wake, wk0 = c.work_table.cur.park, c.work_table.wake, c.work_table.entries[0]
        parked_once = Signal()
        with m.If(park):
            m.d.sync += parked_once.eq(1)
        sent = dut.d2h_rsp.valid & dut.d2h_rsp.ready
        m.d.comb += [
            Cover(park, "a probed snoop's work parks: its line's GO came while the probe was out"),
            Cover(wake & wk0.parked, "the host's next H2D Rsp or Data readies the parked work"),
            Cover(sent & ~c.side_rsp & c.a_fromwork & parked_once, "a parked work answers its snoop"),
        ]
        return m


PROOF = Proof(
    name="dcoh_go_during_snoop_reached",
    mode="cover", depth=DEPTH,
    harness=GoDuringSnoop,
    engine=ENGINE,
    extra_script=EXTRA_SCRIPT,
    description=f"WITNESS for dcoh_one_response_unbounded (DCOH(caches=2, sf 1x2, tracker=2, work=1, addr_width="
                f"{ADDR_WIDTH}), slow caches, the invariants asserted): a snoop's work whose line's GO came while "
                "its probe was out parks, is readied by the next H2D Rsp or Data, and answers after the data",
    quick=False,
)
