"""SWMR over the DCOH's two internal caches and the snoop filter's inclusion of what they hold, unbounded:
formal/dcoh_swmr_harness.py's harness (two abstract MESI caches that follow the co-simulation's cache BFM, host entirely
free) with the invariants of formal/dcoh_invariants.py asserted beside the property: the DCOH's own
(``add_invariants``, without the snoop holders, since this host keeps no snoop rule) and the caches'
against it (``add_cache_invariants``).  With them, k-induction at depth ``DEPTH`` proves, for every
reachable state, that no line ever has a cache in E or M while the other holds a copy, that every copy
is in the snoop filter with its cache's presence bit (an E or M copy under an E entry with its bit
alone), that the DCOH never issues a command while one is unanswered, and every Assert of the DCOH's
blocks.  Found from the counterexamples to induction as for dcoh_one_response_unbounded (docs/formal.md); depth
4 is enough, 3 is not.
Not vacuous: proof_dcoh_swmr_unbounded_broken.py (a DCOH whose store fill inside the device leaves the
peers' copies in S) FAILs, and proof_dcoh_swmr_reached.py shows the states the property is about
reachable.
"""

import functools

from formal.common import Proof
from formal.dcoh_env import ENGINE, EXTRA_SCRIPT
from formal.dcoh_swmr_harness import ADDR_WIDTH, DCOHSWMR

DEPTH = 6

HARNESS = functools.partial(DCOHSWMR, invariants=True)

PROOF = Proof(
    name="dcoh_swmr_unbounded",
    mode="prove", depth=DEPTH,
    harness=HARNESS,
    engine=ENGINE,
    extra_script=EXTRA_SCRIPT,
    description=f"DCOH(caches=2, sf 1x2, tracker=2, work=1, addr_width={ADDR_WIDTH}) with two abstract MESI caches "
                "(BFM rules), host entirely free: no line ever has a cache in E/M while the other holds a copy, and "
                "every copy is in the snoop filter with its presence bit, in every reachable state (k-induction with "
                "the invariants of formal/dcoh_invariants.py)",
    quick=False,
)
