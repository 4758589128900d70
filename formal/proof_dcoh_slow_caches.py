"""dcoh_one_response's safety with slow caches (formal/proof_dcoh_one_response.py, ``slow_caches``): the
caches take ``cmd`` and ``cpu_rsp`` and answer a command whenever they please (free inputs), so the DCOH
waits on them in the middle of events and its snoop side path (docs/dcoh.md) answers snoops meanwhile.
Every D2H Rsp must still retire exactly one pending snoop of its UQID.  No liveness bound: a cache may
hold the DCOH up for ever.  The side path is reached within the depth: dcoh_slow_caches_side_reached."""

import functools

from formal.common import Proof
from formal.dcoh_env import ENGINE, EXTRA_SCRIPT
from formal.proof_dcoh_one_response import ADDR_WIDTH, DCOHOneResponse

DEPTH = 16

PROOF = Proof(
    name="dcoh_slow_caches",
    mode="bmc", depth=DEPTH,
    harness=functools.partial(DCOHOneResponse, slow_caches=True),
    engine=ENGINE,
    extra_script=EXTRA_SCRIPT,
    description=f"DCOH(caches=2, sf 1x2, tracker=2, work=1, addr_width={ADDR_WIDTH}), host free, caches that take "
                "commands and completions and answer commands whenever they please: every D2H Rsp retires exactly "
                "one pending snoop of its UQID (the snoop side path answering while the DCOH waits on a cache)",
    quick=False,
)
