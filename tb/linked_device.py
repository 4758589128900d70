"""A device behind a whole link, for system tests: the host end of the link in RTL too.

``LinkedDevice(dcoh=..., link=..., ber=0.0, seed=1, pipelined=False)``: :class:`hdl.device.Device` (DCOH + device
``LinkPort``) <- two wires -> a host-end ``LinkPort``.  With ``ber`` > 0 the wires inject bit errors
(``hdl.link.loopback.WireInjector``); at 0 they are plain connections (an injector that never hits
passes every flit unchanged in the same cycle, but computes its error masks and their CRC every cycle:
about a fifth of a Verilated device's work).  Its ports are the DCOH's, seen from the host: ``h2d_req/rsp/data`` in and
``d2h_req/rsp/data`` out (the host end's channel streams), the internal-cache ports, and ``idle``
(the DCOH is idle and for ``QUIET`` cycles no flit was offered on either wire and no message on the
host end: nothing is in flight), the DCOH's own ``idle`` (``dcoh_idle``), ``dispatch``, ``scan_before``,
``work_line`` (``pipelined``: the commit ports and ``took_snoop`` / ``took_rsp`` / ``took_data`` instead,
hdl/device.py), ``devload`` and ``protocol_errors``,
``error`` (either end's link has stopped with a link error, or the DCOH has counted a protocol error, or
either end's receiver has rejected a CRC-good flit; the why in ``link_error_cause`` / ``host_link_error_cause``
(hdl/link/port.py LinkErrorCause), ``protocol_errors`` and ``rule_errors``, the two ends' sum), and flit
taps (``up_flit``/``down_flit``: a flit crossed that wire this cycle; ``up_word``/``down_word``: the
flit, payload and CRC) for a flit monitor.  ``dcoh`` is
the DCOH instance (tests read its snoop filter and tracker), so tests/dcoh_cosim.py co-simulates
this exactly as it does the bare DCOH, with every message crossing the flit link.
"""

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hdl.device import Device
from hdl.link.loopback import WireInjector
from hdl.link.port import LinkErrorCause, LinkPort
from hdl.link.ports import FLIT_BITS, channel_stream
from cxl.messages import Channel

__all__ = ["LinkedDevice"]

QUIET = 64       # cycles without a flit on either wire before the link counts as idle (> ack timer)


class LinkedDevice(wiring.Component):
    def __init__(self, *, dcoh=None, link=None, ber=0.0, seed=1, pipelined=False):
        self.device = Device(dcoh=dcoh, link=link, pipelined=pipelined)
        self.dcoh = self.device.dcoh
        self.coalesce_window = self.dcoh.coalesce_window
        self.host = LinkPort(False, **(link or {}))
        self.up = WireInjector(ber=ber, seed=seed) if ber else None
        self.down = WireInjector(ber=ber, seed=seed + 1) if ber else None
        members = {}
        for ch in (Channel.H2D_REQ, Channel.H2D_RSP, Channel.H2D_DATA):
            members[ch.name.lower()] = In(channel_stream(ch))
        for ch in (Channel.D2H_REQ, Channel.D2H_RSP, Channel.D2H_DATA):
            members[ch.name.lower()] = Out(channel_stream(ch))
        for name in ("cpu_req", "cpu_rsp", "probe", "cmd", "cmd_rsp"):
            members[name] = self.device.signature.members[name]
        # flit monitor taps: a flit crossed the wire (handshake) and the flit (payload and CRC)
        members.update(up_flit=Out(1), up_word=Out(FLIT_BITS), down_flit=Out(1), down_word=Out(FLIT_BITS))
        self.status = self.device.status_ports() + (("took_snoop", "took_rsp", "took_data") if pipelined else ())
        for name in self.status:
            members[name] = self.device.signature.members[name]
        members.update(idle=Out(1), dcoh_idle=Out(1), devload=Out(2),
                       protocol_errors=Out(16), retries=Out(32), injected=Out(32), crc_errors=Out(32),
                       rule_errors=Out(32), error=Out(1), link_error_cause=Out(len(LinkErrorCause)),
                       host_link_error_cause=Out(len(LinkErrorCause)))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.device = dev = self.device
        m.submodules.host = host = self.host
        if self.up is not None:
            m.submodules.up = self.up
            m.submodules.down = self.down
            wiring.connect(m, dev.tx_flit, self.up.i)
            wiring.connect(m, self.up.o, host.rx_flit)
            wiring.connect(m, host.tx_flit, self.down.i)
            wiring.connect(m, self.down.o, dev.rx_flit)
            up, down = self.up.o, self.down.o                   # what the receivers see
            injected = self.up.injected + self.down.injected
        else:
            wiring.connect(m, dev.tx_flit, host.rx_flit)
            wiring.connect(m, host.tx_flit, dev.rx_flit)
            up, down = dev.tx_flit, host.tx_flit
            injected = 0
        for ch in (Channel.H2D_REQ, Channel.H2D_RSP, Channel.H2D_DATA):
            wiring.connect(m, wiring.flipped(getattr(self, ch.name.lower())), getattr(host, ch.name.lower()))
        for ch in (Channel.D2H_REQ, Channel.D2H_RSP, Channel.D2H_DATA):
            wiring.connect(m, getattr(host, ch.name.lower()), wiring.flipped(getattr(self, ch.name.lower())))
        for name in ("cpu_req", "cpu_rsp", "probe", "cmd", "cmd_rsp"):
            if self.signature.members[name].flow is In:
                wiring.connect(m, wiring.flipped(getattr(self, name)), getattr(dev, name))
            else:
                wiring.connect(m, getattr(dev, name), wiring.flipped(getattr(self, name)))
        quiet = Signal(range(QUIET + 1))
        # anything entering the host end or offered by it, or any flit on a wire, restarts the count
        dcoh = self.dcoh
        moving = (dev.tx_flit.valid | host.tx_flit.valid |
                  Cat(getattr(self, ch.name.lower()).valid for ch in Channel) |
                  Cat(getattr(dcoh, ch.name.lower()).valid for ch in Channel)).any()
        with m.If(moving):
            m.d.sync += quiet.eq(0)
        with m.Elif(quiet != QUIET):
            m.d.sync += quiet.eq(quiet + 1)
        m.d.comb += [self.up_flit.eq(up.valid & up.ready), self.up_word.eq(up.payload),
                     self.down_flit.eq(down.valid & down.ready), self.down_word.eq(down.payload)]
        m.d.comb += [self.idle.eq(dev.idle & (quiet == QUIET)),
                     self.dcoh_idle.eq(dev.idle), self.devload.eq(dev.devload),
                     self.protocol_errors.eq(dev.protocol_errors),
                     self.retries.eq(dev.retries + host.retries),
                     self.injected.eq(injected),
                     self.crc_errors.eq(dev.crc_errors + host.crc_errors),
                     self.rule_errors.eq(dev.rule_errors + host.rule_errors),
                     self.link_error_cause.eq(dev.link_error_cause),
                     self.host_link_error_cause.eq(host.link_error_cause)]
        for name in self.status:
            m.d.comb += getattr(self, name).eq(getattr(dev, name))
        # CRC errors are not errors here: link-layer retry repairs them (a BER run has many)
        m.d.comb += self.error.eq(dev.link_error | host.link_error | (dev.protocol_errors != 0) |
                                  (dev.rule_errors != 0) | (host.rule_errors != 0))
        return m
