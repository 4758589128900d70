"""BROKEN variant of link_delivery (expected to FAIL): the same harness with wires that duplicate the flits
they hit (``FaultMode.DUP``) instead of flipping a bit.  A duplicated flit has a good CRC, and the 68B
link layer's sequence numbers are implicit (nothing in a flit names its number), so the receiver takes it
twice and a checker sees a message twice: the property can fail, and the proof's assumptions leave such
runs in."""

from formal.common import Proof
from formal.dcoh_env import ENGINE
from formal.proof_link_delivery import SCRIPT, LinkDelivery
from hdl.link.loopback import FaultMode

DEPTH = 16


def harness():
    return LinkDelivery(fault_mode=FaultMode.DUP)


PROOF = Proof(
    name="link_delivery_broken",
    mode="bmc", depth=DEPTH,
    harness=harness,
    expect="FAIL",
    engine=ENGINE,
    extra_script=SCRIPT,
    description="BROKEN link_delivery (the wires duplicate the flits they hit): must FAIL",
    quick=False,
)
