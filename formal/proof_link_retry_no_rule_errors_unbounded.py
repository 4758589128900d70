"""Without rule errors, a receiver in NORMAL never gets a RETRY.Ack it cannot place, in every reachable
state (k-induction): the stale-Ack case that hdl/link/retry.py answers with a new WAIT needs a rule
error (a CRC-good flit that breaks a rule, which moves the receiver's Eseq back).

The harness of formal/proof_link_retry_unbounded.py with ``rule_errors=False`` (the unpackers never
report a rule error; everything else as free as there) and one more Assert: no CRC-good RETRY.Ack taken
in NORMAL is ignored for lack of a place among the flits received since the last resume.  Its
invariants add group 6 of formal/link_retry_invariants.py: without rule errors the Eseqs a receiver
asks for never go back, so the Reqs and Acks in flight name flits in stream order, and in NORMAL they
all name the receiver's resume point.  Since the block without its stale-Ack branch differs from the
block with it only where that Assert fails, the bug that ``abc pdr`` found (docs/link_layer.md, "A
stale RETRY.Ack") cannot happen without a rule error at these sizes.  Not vacuous: with rule
errors allowed again (and nothing else changed), a BMC of this harness fails that Assert at step
16; and without group 6 the induction finds counterexamples (an older episode's Ack arriving after a
later resume).
"""

from formal.link_retry_harness import params_text
from formal.proof_link_retry_unbounded import induction_proof

PROOF = induction_proof(
    "link_retry_no_rule_errors_unbounded",
    f"link_retry_unbounded's harness ({params_text()}) without rule errors: a receiver in NORMAL never gets a "
    "RETRY.Ack it cannot place (the stale-Ack case needs a rule error), in every reachable state (k-induction)",
    rule_errors=False)
