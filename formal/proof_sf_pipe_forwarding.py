"""The pipelined snoop filter forwards every write: PipelinedSnoopFilter (hdl/dcoh/sf_pipe.py) with
sets=2, ways=2, caches=1, addr_width=4 (3-bit tags), with and without stalls (``stall`` below).

Environment: every input (lookups, result back-pressure, updates of any kind to any way, entries,
busy masks) is free every cycle, except that an allocation keeps the caller's guarantee (below) and,
with ``stall=False``, every result is taken.  Reset stays low.
Property (the block's own Asserts): in every cycle each stage's row (R: the RAM's output merged with
the writes made to its set since the read; F: that output in its flop with the writes since; A: the
row register the answer is worked out from) equals the row the memory holds now, and at most one way
hits.  The three equalities are the induction's own strengthening: what one stage holds is what the
next one is built from.  The block's duplicate-tag Assert needs the caller's guarantee about
allocations, assumed as formal/proof_snoop_filter_no_dup_tag.py assumes it (with that proof's Assert
over every set, which makes it inductive).  Mode prove (k-induction).
"""

from amaranth.hdl import Assume, Elaboratable

from hdl.dcoh.sf_pipe import PipelinedSnoopFilter
from formal.common import Proof
from formal.proof_snoop_filter_no_dup_tag import (assert_no_duplicate_tags, assume_fresh_allocations, harness_module,
                                                  observed)

SETS, WAYS, CACHES, ADDR_WIDTH = 2, 2, 1, 4


Observed = observed(PipelinedSnoopFilter)      # + one asynchronous read port per set for the harness


class SfPipeForwarding(Elaboratable):
    def __init__(self, stall=True, dut_cls=Observed):
        self.dut = dut_cls(SETS, WAYS, CACHES, ADDR_WIDTH, stall=stall)
        self.stall = stall

    def elaborate(self, platform):
        dut = self.dut
        m = harness_module(dut, platform)
        if not self.stall:
            m.d.comb += Assume(dut.result.ready)      # the contract of stall=False
        # the caller's guarantee for allocations, which keeps the block's duplicate-tag Assert true, and
        # that invariant over every set (as formal/proof_snoop_filter_no_dup_tag.py has them)
        assume_fresh_allocations(m, dut, dut.rows)
        assert_no_duplicate_tags(m, dut.rows, dut.ways)
        return m


def proof(name, stall, dut_cls=Observed, expect="PASS", what=""):
    """The proof for ``stall``, on ``dut_cls`` (a broken variant's subclass: ``expect="FAIL"``)."""
    return Proof(
        name=name, mode="prove", depth=4,
        harness=lambda: SfPipeForwarding(stall=stall, dut_cls=dut_cls),
        engine="smtbmc --unroll z3",
        extra_script=["memory_map", "opt -fast"],
        description=f"{what}PipelinedSnoopFilter(sets={SETS}, ways={WAYS}, caches={CACHES}, addr_width={ADDR_WIDTH}, "
                    f"stall={stall}): every stage's row is the stored row (forwarding)"
                    + (": must FAIL" if expect == "FAIL" else ""),
        expect=expect,
    )


PROOF = proof("sf_pipe_forwarding", stall=True)
