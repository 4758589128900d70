"""The reachability witness of dcoh_slow_caches: the same harness asserting that no snoop is taken while a
command's answer is owed, which only the DCOH's snoop side path does.  It must FAIL within the depth of
dcoh_slow_caches, so that proof's safety check covers runs in which the side path answers snoops."""

import functools

from formal.common import Proof
from formal.dcoh_env import ENGINE, EXTRA_SCRIPT
from formal.proof_dcoh_one_response import ADDR_WIDTH, DCOHOneResponse
from formal.proof_dcoh_slow_caches import DEPTH

PROOF = Proof(
    name="dcoh_slow_caches_side_reached",
    mode="bmc", depth=DEPTH,
    harness=functools.partial(DCOHOneResponse, slow_caches=True, forbid_side_snoop=True),
    engine=ENGINE,
    extra_script=EXTRA_SCRIPT,
    description=f"WITNESS for dcoh_slow_caches (DCOH(caches=2, sf 1x2, tracker=2, work=1, addr_width={ADDR_WIDTH})): "
                "no snoop is taken while a command's answer is owed: must FAIL (the side path is reached)",
    expect="FAIL",
    quick=False,
)
