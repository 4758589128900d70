"""BROKEN variant of dcoh_swmr_unbounded (expected to FAIL): the same harness and invariants on a DCOH whose
store filled inside the device (S_SFILL, a store to a line the device holds in E) sends its peers TO_S
instead of INV, so the storing cache gets M while a peer keeps an S copy.  The base case finds it
(hence the depth, beyond the proof's 6), so the unbounded proof's assumptions leave such runs in: it
is not vacuous."""

from hdl.dcoh.dcoh import DCOH, CmdOp
from formal.common import Proof
from formal.dcoh_env import ENGINE, EXTRA_SCRIPT
from formal.dcoh_swmr_harness import ADDR_WIDTH, DCOHSWMR

DEPTH = 12


class StoreFillLeavesPeersS(DCOH):
    """A DCOH whose S_SFILL commands TO_S where it should command INV (a statement after the engine's own:
    the later assignment wins)."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        with m.If(self.debug.engine.ongoing("S_SFILL")):
            m.d.comb += self.cmd.p.op.eq(CmdOp.TO_S)
        return m


def harness():
    return DCOHSWMR(invariants=True, dcoh_cls=StoreFillLeavesPeersS)


PROOF = Proof(
    name="dcoh_swmr_unbounded_broken",
    mode="prove", depth=DEPTH,
    harness=harness,
    expect="FAIL",
    engine=ENGINE,
    extra_script=EXTRA_SCRIPT,
    description=f"BROKEN dcoh_swmr_unbounded (DCOH(caches=2, sf 1x2, tracker=2, work=1, addr_width={ADDR_WIDTH}) whose "
                "store filled inside the device sends its peers TO_S instead of INV): must FAIL",
    quick=False,
)
