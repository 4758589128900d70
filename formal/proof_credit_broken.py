"""Deliberately broken variant of proof_credit_conservation: a CreditCounter whose ``in_flight`` is
not decremented by returned credits (the RTL file is untouched: a subclass overrides ``elaborate``).
Same harness, same Assumes, same property; SBY must report FAIL (a counterexample: take one credit,
return it, and available + in_flight == initial + 1).  tests/test_formal.py checks that it does.
"""

from amaranth.hdl import Assert, Module

from hdl.dcoh.qos import CreditCounter
from formal.common import Proof
from formal.proof_credit_conservation import INITIAL, CreditConservation


class LeakyCreditCounter(CreditCounter):
    """BROKEN on purpose: returned credits are added to ``available`` but not taken off ``in_flight``."""

    def elaborate(self, platform):
        m = Module()
        spent = self.take & (self.available != 0)
        m.d.sync += [
            self.available.eq(self.available - spent + self.ret),
            self.in_flight.eq(self.in_flight + spent),          # bug: "- self.ret" missing
        ]
        m.d.comb += Assert(self.available + self.in_flight == self.initial, "credit conservation")
        return m


PROOF = Proof(
    name="credit_conservation_broken",
    mode="prove", depth=4,
    harness=lambda: CreditConservation(dut_cls=LeakyCreditCounter),
    description=f"BROKEN CreditCounter(initial={INITIAL}) (return not subtracted from in_flight): must FAIL",
    expect="FAIL",
)
