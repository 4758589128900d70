"""The device link end with its message side on chip: a synthesis top that measures ``LinkPort``
without 3 000 port bits chained through the die.

``synth/run.py`` puts every top inside a pin shell that shifts each of the top's port bits in or out
through a chain of flip-flops.  ``LinkPort``'s ports are its six message channels (a D2H or H2D data
message alone is 500+ bits) and its two flit buses: 1 166 bits in and 1 967 out, and the shell's chain
pulls the port's wide registers across the die (docs/link_layer.md, "RTL pipelining (Fmax)", eighth
round).  In a device the message channels meet the DCOH on chip and only the flits leave the link
layer (towards the ARB/MUX and the PHY), so this harness keeps the message side inside:

* each channel the end sends (``d2h_req``, ``d2h_rsp``, ``d2h_data``) is fed by a generator that always
  offers a message, message ``n`` built from a 32-bit counter and a xorshift content state as
  :class:`hdl.link.traffic.LinkTraffic` builds it (``build_message``), the state stepped per message
  taken;
* each channel it receives (``h2d_req``, ``h2d_rsp``, ``h2d_data``) is always taken, and every message
  is folded into a 32-bit register (``<channel>_fold``: the XOR of the register rotated by one and the
  message's 32-bit words), so no received bit is left without a load;
* ``tx_flit`` and ``rx_flit``, the port's counters, ``link_error`` and ``link_error_cause`` are the
  harness's ports, as they are the port's.

What it is for is a netlist of the port in a realistic context; it checks nothing itself.
tests/test_rtl_link_port.py runs two of them back to back (device end and host end, flit to flit) and
checks that each fold is that of a prefix of the messages the other end's generator built.
"""

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hdl.link.port import COUNTERS, LinkErrorCause, LinkPort
from hdl.link.ports import direction_channels, flit_stream
from hdl.link.traffic import build_message, channel_seeds, xorshift_step

__all__ = ["LinkEndHarness"]


class LinkEndHarness(wiring.Component):
    """``LinkPort(upstream, **port_params)`` with generators on its sent channels and a fold of each
    received channel (module docstring)."""

    def __init__(self, upstream=True, **port_params):
        self.port = LinkPort(upstream, **port_params)
        self.sent = direction_channels(upstream)
        self.received = direction_channels(not upstream)
        members = {"tx_flit": Out(flit_stream()), "rx_flit": In(flit_stream()),
                   "link_error": Out(1), "link_error_cause": Out(len(LinkErrorCause))}
        members.update({c: Out(32) for c in COUNTERS})
        members.update({f"{ch.name.lower()}_fold": Out(32) for ch in self.received})
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.port = port = self.port
        wiring.connect(m, port.tx_flit, wiring.flipped(self.tx_flit))
        wiring.connect(m, wiring.flipped(self.rx_flit), port.rx_flit)
        m.d.comb += [self.link_error.eq(port.link_error), self.link_error_cause.eq(port.link_error_cause),
                     port.withhold_acks.eq(0), port.withhold_credits.eq(0)]
        m.d.comb += [getattr(self, c).eq(getattr(port, c)) for c in COUNTERS]
        for ch in self.sent:
            n = ch.name.lower()
            src = getattr(port, n)
            seq = Signal(32, name=f"{n}_seq")
            content = Signal(32, init=channel_seeds(ch)[0], name=f"{n}_content")
            m.d.comb += [src.valid.eq(1), src.payload.as_value().eq(build_message(ch, seq, content))]
            with m.If(src.ready):
                m.d.sync += [seq.eq(seq + 1), content.eq(xorshift_step(content))]
        for ch in self.received:
            n = ch.name.lower()
            snk = getattr(port, n)
            bits = snk.payload.as_value()
            words = [bits[i:i + 32] for i in range(0, len(bits), 32)]
            fold = getattr(self, f"{n}_fold")
            folded = Cat(fold[31], fold[:31])             # rotated by one: reordered messages differ
            for w in words:
                folded = folded ^ w
            m.d.comb += snk.ready.eq(1)
            with m.If(snk.valid):
                m.d.sync += fold.eq(folded)
        return m
