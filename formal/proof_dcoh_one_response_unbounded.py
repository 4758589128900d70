"""The snoop-response harness's safety, unbounded: every D2H Rsp retires exactly one pending snoop of its
UQID, in every reachable state, by k-induction.

The harness is formal/dcoh_one_response_harness.py with slow caches (``slow_caches``: the caches take
commands and completions and answer commands whenever they please, which includes at once, so the
DCOH's snoop side path runs too; the host is free, as there) and the invariants of
formal/dcoh_invariants.py asserted beside the property.  Those make it inductive: with them, k-induction
at depth ``DEPTH`` proves the property, every invariant (among them: every pending snoop is held by
exactly one place in the DCOH, so none is dropped unanswered) and every Assert of the DCOH's blocks (tracker
and work table never start an entry in use, free an entry twice or write a free one; the CQID
allocator never hands out a live CQID; credit counters, snoop filter, coalescer, probe queue) for
every reachable state, not only for the first steps.  Found by reading the counterexamples to
induction at depth 8 and stating why each could not happen (docs/formal.md); depth 4 is enough, depth
3 is not (the QoS arbiter's starvation counters), 6 leaves a margin.
Not vacuous: proof_dcoh_one_response_unbounded_broken.py (the same harness on a DCOH whose answer
carries the wrong UQID) FAILs in its base case, and proof_dcoh_one_response_reached.py shows the states
the property is about reachable (a probed snoop's work answered, an answer from a request's
transient state, the side path's answer, a held snoop replayed, a snoop-filter hit after a fill).
"""

import functools

from formal.common import Proof
from formal.dcoh_env import ENGINE, EXTRA_SCRIPT
from formal.dcoh_one_response_harness import ADDR_WIDTH, DCOHOneResponse

DEPTH = 6

HARNESS = functools.partial(DCOHOneResponse, slow_caches=True, invariants=True)

PROOF = Proof(
    name="dcoh_one_response_unbounded",
    mode="prove", depth=DEPTH,
    harness=HARNESS,
    engine=ENGINE,
    extra_script=EXTRA_SCRIPT,
    description=f"DCOH(caches=2, sf 1x2, tracker=2, work=1, addr_width={ADDR_WIDTH}), host free, slow caches: every "
                "D2H Rsp retires exactly one pending snoop of its UQID, every pending snoop is held by exactly one "
                "place in the DCOH, and every Assert of the DCOH's blocks holds, in every reachable state "
                "(k-induction with the invariants of formal/dcoh_invariants.py)",
    quick=False,
)
