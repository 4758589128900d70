"""The deliberately broken variant of dcoh_one_response (formal/proof_dcoh_one_response.py): the same
harness with a response bound of 2 cycles instead of 20.  A snoop that queries and probes the copies takes
longer, so the liveness Assert must FAIL (at step 7): the harness's liveness check is not vacuous."""

import functools

from formal.common import Proof
from formal.dcoh_env import ENGINE, EXTRA_SCRIPT
from formal.proof_dcoh_one_response import ADDR_WIDTH, DCOHOneResponse

BROKEN_BOUND = 2

PROOF = Proof(
    name="dcoh_one_response_broken",
    mode="bmc", depth=10,
    harness=functools.partial(DCOHOneResponse, bound=BROKEN_BOUND),
    engine=ENGINE,
    extra_script=EXTRA_SCRIPT,
    description=f"BROKEN dcoh_one_response (DCOH(caches=2, sf 1x2, tracker=2, work=1, addr_width={ADDR_WIDTH})): "
                f"a pending snoop answered within {BROKEN_BOUND} cycles: must FAIL",
    expect="FAIL",
    quick=False,
)
