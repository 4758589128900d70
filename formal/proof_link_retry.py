"""Link Layer Retry between two link ends over wires that may corrupt any flit (and stall): every retryable
flit is retired good exactly once and in order at the other end, and acks are never more than the flits
outstanding.  Bounded (BMC on a time budget); property-directed reachability found a bug here but gives
no verdict on the fixed RTL within 30 minutes (below).

Harness: formal/link_retry_harness.py -- two :class:`hdl.link.retry.LinkRetry` blocks (the LinkPort's
retry bookkeeping, unchanged) with abstract stand-ins for the port's wide parts (flits are sequence
tags with the acks they carry; retry buffer, output register, wire, pre-check stage, unpacker), at the
sizes of :data:`formal.link_retry_harness.PARAMS` (sequence numbers modulo 4, Req re-sends and ack
hand-overs every cycle).  Free every cycle: which flits the packers offer and the acks they carry,
wire stalls, which flits the wires corrupt, the unpackers' back-pressure, rule errors on CRC-good
flits, and a link error at any time.  The whole LinkPort pair is checked too, bounded as well
(proof_link_delivery.py, single-bit errors only): this harness is small enough to reach the corners
where both ends' sequence numbers, acks and replays interact, rule errors included.

Found with this harness, by ``abc pdr`` (a counterexample at step 49 after ~2 minutes, which no BMC of
this harness reaches in make formal's time), and fixed in hdl/link/retry.py: a receiver in NORMAL
ignored a RETRY.Ack whose Eseq lay behind its last resume point.  Such an Ack answers an old Req (one
sent before a rule error moved the receiver's Eseq back, answered after it had resumed on an answer to
an earlier Req with the same Eseq); the sender then replays from that older Eseq, and the receiver took
the replayed flits as new ones: a flit delivered twice (docs/link_layer.md, "A stale RETRY.Ack").  The
receiver now asks for a replay from its next flit instead.  On the fixed RTL, PDR ran 30 minutes
(and longer) without a verdict, so this proof stays a BMC (docs/formal.md).
Not vacuous: proof_link_retry_broken.py (wires that may lose a flit) FAILs, and
proof_link_retry_reached.py shows the retry rules' corners reachable within the depth this BMC covers.
"""

from formal.common import Proof
from formal.dcoh_env import ENGINE
from formal.link_retry_harness import PARAMS, LinkRetryPair

DEPTH = 24
MIN_DEPTH = 18      # what make formal's budget must reach: proof_link_retry_reached.py's corners are all by step 17
BUDGET_S = 360

PROOF = Proof(
    name="link_retry",
    mode="bmc", depth=DEPTH,
    budget_s=BUDGET_S, min_depth=MIN_DEPTH,
    harness=LinkRetryPair,
    engine=ENGINE,
    description=f"two LinkRetry blocks ({', '.join(f'{k} {v}' for k, v in PARAMS.items())}) over wires that may corrupt "
                "or stall any flit, rule errors and link errors free: every flit retired good exactly once and in "
                "order, acks never above the flits outstanding",
    quick=False,
)
