"""link_retry_unbounded at slow timers: the same harness, property and invariants with a RETRY.Req re-sent
only after 7 cycles in WAIT, acks handed to the packer after 5 cycles (so they pile up and travel in
bigger counts), and the link-error limits at 3 and 5 (k-induction, every reachable state).

:data:`formal.link_retry_harness.PARAMS` sets every timer to 1, which gives the most interleavings per
step for a bounded check; an unbounded proof covers its own parameters only, so this one shows the
invariants do not lean on 1-cycle timers (none of them names a timer).  The link ends stop at any cycle
in both harnesses, which covers every cycle the limits could stop them at.  Runs with reserve 0 and 2
and other timers up to 7 PASSed as well (docs/formal.md).
"""

from formal.link_retry_harness import PARAMS, params_text
from formal.proof_link_retry_unbounded import induction_proof

SLOW = dict(PARAMS, ack_timer=5, retry_timeout=7, retry_limit=3, ack_timeout=5)

PROOF = induction_proof(
    "link_retry_slow_timers_unbounded",
    f"link_retry_unbounded with slow timers ({params_text(SLOW)}): every flit retired good exactly once and in "
    "order, acks never above the flits outstanding, in every reachable state (k-induction with the invariants of "
    "formal/link_retry_invariants.py)",
    params=SLOW)
