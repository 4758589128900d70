"""Link Layer Retry between two link ends over wires that may corrupt any flit (and stall), unbounded:
every retryable flit is retired good exactly once and in order at the other end, and acks are never
more than the flits outstanding, in every reachable state (k-induction).

Harness: formal/link_retry_harness.py -- two :class:`hdl.link.retry.LinkRetry` blocks (the LinkPort's
retry bookkeeping, unchanged) with abstract stand-ins for the port's wide parts (flits are sequence
tags with the acks they carry; retry buffer, output register, wire, pre-check stage, unpacker), at the
sizes of :data:`formal.link_retry_harness.PARAMS` (sequence numbers modulo 4, Req re-sends and ack
hand-overs every cycle).  Free every cycle: which flits the packers offer and the acks they carry,
wire stalls, which flits the wires corrupt, the unpackers' back-pressure, rule errors on CRC-good
flits, and a link error at any time.  With the invariants of formal/link_retry_invariants.py asserted
beside the property, k-induction at depth ``DEPTH`` proves the property, every invariant and the
block's own Asserts for every reachable state.  Found by reading counterexamples to induction and
stating why each could not happen; depth 2 is enough, 1 is not (the registered ``room`` flag's
Assert looks one cycle back), 4 leaves a margin at no cost (the last solver call dominates, ~70 s at
any depth).

The same harness without the invariants is where ``abc pdr`` found the stale-Ack bug (a counterexample
at step 49) that hdl/link/retry.py now handles (docs/link_layer.md, "A stale RETRY.Ack"); with that
fix taken out again, this proof's induction fails.  Not vacuous: proof_link_retry_unbounded_broken.py
(wires that may lose a flit) FAILs in its base case, proof_link_retry_broken.py (the same without the
invariants) FAILs on the property itself, and proof_link_retry_reached.py reaches the retry rules'
corners with every invariant holding.  The whole LinkPort pair, payload and CRC included, stays
bounded (proof_link_delivery.py).
"""

import functools

from formal.common import Proof
from formal.dcoh_env import ENGINE
from formal.link_retry_harness import LinkRetryPair, params_text

DEPTH = 4


def induction_proof(name, description, expect="PASS", **harness):
    """A k-induction of :class:`LinkRetryPair` with its invariants asserted, at ``DEPTH``; ``harness``:
    more of the pair's arguments (``params``, ``rule_errors``, ``drop``).  This proof's and its variants'."""
    return Proof(name=name, mode="prove", depth=DEPTH, expect=expect, engine=ENGINE, description=description,
                 harness=functools.partial(LinkRetryPair, invariants=True, **harness), quick=False)


PROOF = induction_proof(
    "link_retry_unbounded",
    f"two LinkRetry blocks ({params_text()}) over wires that may corrupt or stall any flit, rule errors and link "
    "errors free: every flit retired good exactly once and in order, acks never above the flits outstanding, in "
    "every reachable state (k-induction with the invariants of formal/link_retry_invariants.py)")
