"""BROKEN variant of link_retry_unbounded (expected to FAIL): the same harness and invariants with wires
that may lose a flit.  The 68B link layer's sequence numbers are implicit (nothing in a flit names its
number), so a lost flit's successor arrives where the lost one was due: the stream invariant (each flit
on the wire is the one after the flit ahead of it) fails in the base case, two steps from reset, and
the property itself a few steps later (proof_link_retry_broken.py)."""

from formal.proof_link_retry_unbounded import induction_proof

PROOF = induction_proof("link_retry_unbounded_broken",
                        "BROKEN link_retry_unbounded (the wires may lose a flit): must FAIL", expect="FAIL", drop=True)
