"""BROKEN variant of dcoh_one_response_unbounded (expected to FAIL): the same harness and invariants on a
DCOH whose answer from ANSWER_SEND carries its snoop's UQID with the lowest bit flipped.  The base case
finds the response without a pending snoop of its UQID (at step 6: a snoop to an E line is looked up,
decided and answered; hence the depth, beyond the proof's 6), so the unbounded proof's assumptions
leave such runs in: it is not vacuous."""

DEPTH = 10

from formal.common import Proof
from formal.dcoh_env import ENGINE, EXTRA_SCRIPT
from formal.dcoh_one_response_harness import ADDR_WIDTH, DCOHOneResponse
from hdl.dcoh.dcoh import DCOH


class AnswerWithWrongUQID(DCOH):
    """A DCOH whose ANSWER_SEND state answers with a wrong UQID (a statement after the engine's own:
    the later assignment wins)."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        with m.If(self.debug.engine.ongoing("ANSWER_SEND")):
            m.d.comb += self.d2h_rsp.p.uqid.eq(self.debug.a_uqid ^ 1)
        return m


def harness():
    return DCOHOneResponse(slow_caches=True, invariants=True, dcoh_cls=AnswerWithWrongUQID)


PROOF = Proof(
    name="dcoh_one_response_unbounded_broken",
    mode="prove", depth=DEPTH,
    harness=harness,
    expect="FAIL",
    engine=ENGINE,
    extra_script=EXTRA_SCRIPT,
    description=f"BROKEN dcoh_one_response_unbounded (DCOH(caches=2, sf 1x2, tracker=2, work=1, addr_width="
                f"{ADDR_WIDTH}) answering from ANSWER_SEND with a wrong UQID): must FAIL",
    quick=False,
)
