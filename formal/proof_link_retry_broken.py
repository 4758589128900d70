"""BROKEN variant of link_retry (expected to FAIL): the same harness with wires that may lose a flit.
The 68B link layer's sequence numbers are implicit (nothing in a flit names its number), so a lost
flit's successor is taken in its place and the checker sees a flit out of order: the property can
fail, and the proof's assumptions leave such runs in."""

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
    description="BROKEN link_retry (the wires may lose a flit): must FAIL",
    quick=False,
)
