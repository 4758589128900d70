"""Reachability witness (mode cover) for link_delivery: in its harness, a retry of the host's receiver
starts while a D2H data message is on its way (taken by the device's port, not yet out of the host's),
and, after the replay, that message comes out (the checker's Assert holding all along).  PASS means SBY
found both within ``DEPTH`` steps (steps 10 and 22; 8 and 20 before the packer's and the receiver's
added pipeline stages, when ``DEPTH`` was 22)."""

from amaranth.hdl import Cover, Signal

from formal.common import Proof
from formal.dcoh_env import ENGINE
from formal.proof_link_delivery import SCRIPT, LinkDelivery

DEPTH = 24


class Reached(LinkDelivery):
    def elaborate(self, platform):
        m = super().elaborate(platform)
        t = self.traffic
        waiting = t.loop.host_waiting
        waiting_before = Signal()
        m.d.sync += waiting_before.eq(waiting)
        armed = Signal()                         # a retry started with a data message on its way
        last = Signal.like(t.d2h_data_sent)      # ... the newest data message then
        start = waiting & ~waiting_before & (t.d2h_data_sent != t.d2h_data_received)
        with m.If(start & ~armed):
            m.d.sync += [armed.eq(1), last.eq(t.d2h_data_sent)]
        m.d.comb += [
            Cover(start, "a retry starts while a D2H data message is on its way"),
            Cover(armed & ~waiting & (t.d2h_data_received >= last), "that message is delivered after the replay"),
        ]
        return m


PROOF = Proof(
    name="link_delivery_reached",
    mode="cover", depth=DEPTH,
    harness=Reached,
    engine=ENGINE,
    extra_script=SCRIPT,
    description="WITNESS for link_delivery: a retry starting while a D2H data message is on its way, and that "
                "message delivered after the replay",
    quick=False,
)
