"""Two LinkPorts over wires that corrupt flits: every message is delivered exactly once, in order and
intact, across link-layer retries.  Bounded (BMC on a time budget).

Harness: :class:`hdl.link.traffic.LinkTraffic` (the RTL traffic generators and checkers of the batch
link bench) around a :class:`hdl.link.loopback.LinkLoopback` -- the device's LinkPort, a wire each way,
the host's LinkPort -- at the smallest legal sizes (``retry_depth`` 32: the retry buffer must exceed the
drain reserve ``LinkPort.reserve`` by 8; packer queues of 1, unpacker lanes of 2, ``pack_wait`` 0 so that
flits leave at once).  All six channels carry traffic every cycle (offer and ready rates 255), each
message numbered and its every bit derived from its number, so each checker knows what must come next.
Free every cycle: ``up_force`` / ``down_force``, so any flit on either wire -- protocol, all-data, LLCRD,
RETRY.Req or RETRY.Ack -- may be hit, any number of them; a hit flips one bit (the injector's ``BIT``
mode, at its pseudo-random position; every single-bit error is one the CRC detects,
proof_crc_detects_1_bit_errors.py).  Reset stays low.

Property (Assert, every cycle, every channel): the checker's error count stays 0, i.e. no message is lost,
duplicated, reordered or corrupted; plus every Assert of the two ports (credit counters never negative
or above their pools, at most one flit behind a rule error, a resume with the unpacker drained, the
unpacker's own state checks, ...).

Not unbounded: each port keeps 32 flits of 528 bits in its retry buffer and the CRC reads every payload
bit, so the state is ~37 000 flip-flop bits, and its invariants (what a replay leaves in the buffer and what
the peer's receiver has seen) are not stated.  The cost per step grows ~1.5x (step 20 after ~1 minute,
23 after ~4; docs/formal.md).  Not vacuous: proof_link_delivery_broken.py (the wires duplicate the
flits they hit, which no CRC or implicit sequence number can see) FAILs, and proof_link_delivery_reached.py
shows a retry that starts while a data message is on its way and the message delivered after the replay.
"""

from amaranth.asserts import AnySeq
from amaranth.hdl import Assert, Elaboratable, Module

from formal.common import Proof, no_reset
from formal.dcoh_env import ENGINE
from hdl.link.loopback import FaultMode
from hdl.link.traffic import CHANNELS, LinkTraffic

DEPTH = 26
MIN_DEPTH = 23      # what make formal's budget must reach: the reached witness delivers a replayed data message at step 22
BUDGET_S = 420
# the link is too wide for the DCOH proofs' gate-level rewriting (yosys alone took 8 minutes on it)
SCRIPT = ["flatten", "memory_map", "opt -fast"]
PORTS = dict(retry_depth=32, tx_depth=1, rx_depth=2, pack_wait=0)


class LinkDelivery(Elaboratable):
    """The harness; ``fault_mode``: what a hit does (``FaultMode.BIT``; ``DUP`` for the broken variant)."""

    def __init__(self, fault_mode=FaultMode.BIT):
        self.fault_mode = fault_mode
        self.traffic = LinkTraffic(**PORTS)

    def elaborate(self, platform):
        m = Module()
        m.submodules.traffic = t = self.traffic
        no_reset(m)
        m.d.comb += [t.offer_rate.eq(255), t.ready_rate.eq(255), t.target.eq(0), t.stop.eq(0),
                     t.fault_mode.eq(self.fault_mode),
                     t.loop.up_force.eq(AnySeq(1)), t.loop.down_force.eq(AnySeq(1))]
        for ch in CHANNELS:
            n = ch.name.lower()
            m.d.comb += Assert(getattr(t, f"{n}_errors") == 0,
                               f"harness: {n}: a message lost, duplicated, reordered or corrupted")
        return m


PROOF = Proof(
    name="link_delivery",
    mode="bmc", depth=DEPTH,
    budget_s=BUDGET_S, min_depth=MIN_DEPTH,
    harness=LinkDelivery,
    engine=ENGINE,
    extra_script=SCRIPT,
    description="two LinkPorts (retry_depth 32, tx_depth 1, rx_depth 2, pack_wait 0) over wires that may flip a "
                "bit of any flit, traffic on all six channels: no message lost, duplicated, reordered or corrupted",
    quick=False,
)
