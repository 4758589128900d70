"""A deliberately broken variant of the DCOH's snoop-response harness (formal/dcoh_one_response_harness.py),
as a BMC: a response bound of 2 cycles instead of the harness's ``BOUND``.  A snoop that queries and
probes the copies takes longer, so the liveness Assert must FAIL (at step 6-7): the harness's liveness
check can fail."""

import functools

from formal.common import Proof
from formal.dcoh_env import ENGINE, EXTRA_SCRIPT
from formal.dcoh_one_response_harness import ADDR_WIDTH, DCOHOneResponse

BROKEN_BOUND = 2

PROOF = Proof(
    name="dcoh_one_response_broken",
    mode="bmc", depth=10,
    harness=functools.partial(DCOHOneResponse, bound=BROKEN_BOUND),
    engine=ENGINE,
    extra_script=EXTRA_SCRIPT,
    description=f"BROKEN dcoh_one_response harness (DCOH(caches=2, sf 1x2, tracker=2, work=1, addr_width={ADDR_WIDTH})): "
                f"a pending snoop answered within {BROKEN_BOUND} cycles: must FAIL",
    expect="FAIL",
    quick=False,
)
