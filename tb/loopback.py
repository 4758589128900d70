"""A six-channel loopback DUT for the VIP's own tests: each CXL.cache channel goes through a small
FIFO (``amaranth.lib.fifo.SyncFIFOBuffered``) from ``i_<channel>`` to ``o_<channel>``."""

from amaranth.hdl import Module
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from cxl.messages import CHANNEL_LAYOUTS

__all__ = ["ChannelLoopback", "port_name"]


def port_name(channel, direction):
    return f"{'i' if direction == 'in' else 'o'}_{channel.name.lower()}"


class ChannelLoopback(wiring.Component):
    def __init__(self, depth=4):
        self.depth = depth
        members = {}
        for c, layout in CHANNEL_LAYOUTS.items():
            members[port_name(c, "in")] = In(stream.Signature(layout))
            members[port_name(c, "out")] = Out(stream.Signature(layout))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        for c, layout in CHANNEL_LAYOUTS.items():
            q = m.submodules[f"q_{c.name.lower()}"] = fifo.SyncFIFOBuffered(width=layout.as_shape().size,
                                                                            depth=self.depth)
            i, o = getattr(self, port_name(c, "in")), getattr(self, port_name(c, "out"))
            m.d.comb += [
                q.w_data.eq(i.payload), q.w_en.eq(i.valid), i.ready.eq(q.w_rdy),
                o.payload.eq(q.r_data), o.valid.eq(q.r_rdy), q.r_en.eq(o.ready),
            ]
        return m
