"""No live CQID is handed out again: CQIDAllocator (hdl/dcoh/cqid.py) with depth 4.

Environment (Assumes, the request tracker's rule that the block asserts on its inputs): a free names
a CQID that is in range and live.  ``alloc.ready`` is free every cycle.  Reset stays low.
Property (Asserts): an allocation (``alloc.valid & alloc.ready``) never hands out a live CQID; the
payload is in range; ``count`` equals the number of live CQIDs; plus the block's own three Asserts.
Mode prove (k-induction).
"""

from amaranth.hdl import Assert, Assume, Elaboratable, Module

from hdl.dcoh.cqid import CQIDAllocator
from formal.common import Proof, drive_inputs, no_reset

DEPTH = 4


class CQIDNoReuse(Elaboratable):
    def __init__(self, depth=DEPTH):
        self.dut = CQIDAllocator(depth)
        self.depth = depth

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        drive_inputs(m, dut)
        no_reset(m)
        live_bit = lambda i: (dut.live >> i)[0]
        took = dut.alloc.valid & dut.alloc.ready
        popcount = sum(dut.live[i].as_unsigned() for i in range(self.depth))
        m.d.comb += [
            Assume(~dut.free_valid | ((dut.free_cqid < self.depth) & live_bit(dut.free_cqid))),
            Assert(~took | (dut.alloc.payload < self.depth), "harness: allocated CQID out of range"),
            Assert(~took | ~live_bit(dut.alloc.payload), "harness: live CQID handed out again"),
            Assert(dut.count == popcount, "harness: count != number of live CQIDs"),
        ]
        return m


PROOF = Proof(
    name="cqid_no_reuse",
    mode="prove", depth=4,
    harness=CQIDNoReuse,
    description=f"CQIDAllocator(depth={DEPTH}): no live CQID handed out again; count == popcount(live)",
)
