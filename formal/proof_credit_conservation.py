"""Credit conservation of a channel's CreditCounter (hdl/dcoh/qos.py), initial = 3 credits.

Environment (Assumes, the sender's protocol rules that the block itself asserts on its inputs):
``take`` only while ``available != 0``; ``ret <= in_flight``.  Reset stays low.
Property (Assert, every cycle): ``available + in_flight == initial``, plus the block's own Asserts
(its comb "credit conservation" and its two sync protocol checks, which the Assumes discharge).
Mode prove (k-induction): the invariant is 1-inductive.
"""

from amaranth.hdl import Assert, Assume, Elaboratable, Module

from hdl.dcoh.qos import CreditCounter
from formal.common import Proof, drive_inputs, no_reset

INITIAL = 3


class CreditConservation(Elaboratable):
    def __init__(self, dut_cls=CreditCounter, initial=INITIAL):
        self.dut = dut_cls(initial)
        self.initial = initial

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        drive_inputs(m, dut)
        no_reset(m)
        m.d.comb += [
            Assume(~dut.take | (dut.available != 0)),
            Assume(dut.ret <= dut.in_flight),
            Assert(dut.available + dut.in_flight == self.initial, "harness: credit conservation"),
        ]
        return m


PROOF = Proof(
    name="credit_conservation",
    mode="prove", depth=4,
    harness=CreditConservation,
    description=f"CreditCounter(initial={INITIAL}): available + in_flight == initial",
)
