"""BROKEN variant of link_retry_unbounded (expected to FAIL): the same harness and invariants with wires
that may lose a flit.  The 68B link layer's sequence numbers are implicit (nothing in a flit names its
number), so a lost flit's successor arrives where the lost one was due: the stream invariant (each flit
on the wire is the one after the flit ahead of it) fails in the base case, two steps from reset, and
the property itself a few steps later (proof_link_retry_broken.py)."""

import functools

from formal.common import Proof
from formal.dcoh_env import ENGINE
from formal.link_retry_harness import LinkRetryPair
from formal.proof_link_retry_unbounded import DEPTH

PROOF = Proof(
    name="link_retry_unbounded_broken",
    mode="prove", depth=DEPTH,
    harness=functools.partial(LinkRetryPair, drop=True, invariants=True),
    expect="FAIL",
    engine=ENGINE,
    description="BROKEN link_retry_unbounded (the wires may lose a flit): must FAIL",
    quick=False,
)
