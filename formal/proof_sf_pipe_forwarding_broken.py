"""Deliberately broken variant of proof_sf_pipe_forwarding: a PipelinedSnoopFilter that forwards no
write into a row in flight (the RTL file is untouched: a subclass overrides ``_forward_mask``).  Same
harness and property; SBY must report FAIL (a counterexample: a lookup, then a write to its set before
its answer, and a stage's row that is not the stored row).  tests/test_formal.py runs it with the
quick proofs and checks the status."""

from amaranth.hdl import Const

from formal.proof_sf_pipe_forwarding import Observed, proof


class NoForwarding(Observed):
    """BROKEN on purpose: a write never reaches the rows of the lookups in flight."""

    def _forward_mask(self, w_set, w_mask, line_set):
        return Const(0, len(w_mask))


PROOF = proof("sf_pipe_forwarding_broken", stall=True, dut_cls=NoForwarding, expect="FAIL",
              what="BROKEN (no forwarding) ")
