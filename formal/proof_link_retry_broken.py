"""BROKEN variant of link_retry_unbounded's harness, without its invariants (expected to FAIL, by BMC): wires
that may lose a flit.  The 68B link layer's sequence numbers are implicit (nothing in a flit names its
number), so a lost flit's successor is taken in its place and the checker sees a flit out of order:
the property alone catches it (FAIL at step 5), not only the invariants (which
proof_link_retry_unbounded_broken.py shows failing first, at step 2)."""

import functools

from formal.common import Proof
from formal.dcoh_env import ENGINE
from formal.link_retry_harness import LinkRetryPair

DEPTH = 10

PROOF = Proof(
    name="link_retry_broken",
    mode="bmc", depth=DEPTH,
    harness=functools.partial(LinkRetryPair, drop=True),
    expect="FAIL",
    engine=ENGINE,
    description="BROKEN link_retry_unbounded's harness without its invariants (the wires may lose a flit): "
                "the property must FAIL",
    quick=False,
)
