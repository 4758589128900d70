"""The device top: the DCOH behind the device end of a 68B-flit CXL.cache link.

``Device(dcoh=..., link=..., pipelined=False)``: a :class:`hdl.dcoh.dcoh.DCOH` (``pipelined``: the pipelined
:class:`hdl.dcoh.pipe.dcoh_top.PipelinedDCOH`) whose six host-side channels go through a
:class:`hdl.link.port.LinkPort` (``upstream=True``: it sends D2H and receives H2D flits).  Ports: the
link's ``tx_flit`` (out) / ``rx_flit`` (in), the DCOH's internal-cache ports (``cpu_req``, ``cpu_rsp``,
``probe``, ``cmd``, ``cmd_rsp``) and status (``idle``, ``dispatch`` with ``work_line``, ``devload``,
``protocol_errors``, the link's ``retries``/``crc_errors``/``rule_errors``, its per-kind counters of bad
input from the host ``rx_errors`` and its ``link_error`` / ``link_error_cause``: see hdl/link/port.py).
With ``pipelined``, the engine's commit ports (hdl/dcoh/pipe/engine.py) in place of ``dispatch``,
``scan_before`` and ``work_line``, and ``took_snoop`` / ``took_rsp`` / ``took_data``: the DCOH took a
message from the link on that channel in this cycle (a shadow model takes it then, and applies it where
the engine commits it).

Credits: the link end holds the real D2H credits (returned by the host in its flits) and takes a
message only while its channel has one.  The DCOH's own D2H credit counters then only count messages
in the hand-off to the link: each credit comes back the cycle after its message was taken, so they
never limit anything; their conservation Asserts still check the hand-off.
"""

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hdl.dcoh.dcoh import DCOH
from hdl.dcoh.pipe.dcoh_top import COMMIT_PORTS, COMMIT_STROBES, PipelinedDCOH
from hdl.link.port import RX_ERROR_KINDS, LinkErrorCause, LinkPort, rx_errors_signature
from hdl.link.ports import flit_stream
from cxl.messages import Channel

__all__ = ["Device", "INTAKE_PORTS", "PIPELINED_EVENTS"]

_D2H = (Channel.D2H_REQ, Channel.D2H_RSP, Channel.D2H_DATA)
_H2D = (Channel.H2D_REQ, Channel.H2D_RSP, Channel.H2D_DATA)
_CACHE_PORTS = ("cpu_req", "cpu_rsp", "probe", "cmd", "cmd_rsp")
#: with ``pipelined``: the DCOH took a message from the link on that channel in this cycle
INTAKE_PORTS = ("took_snoop", "took_rsp", "took_data")
#: with ``pipelined``: the ports of which any non-zero value says the DCOH changed state in this cycle (what
#: a testbench watches to know that its shadow has something to follow: every intake and commit)
PIPELINED_EVENTS = INTAKE_PORTS + COMMIT_STROBES


class Device(wiring.Component):
    def __init__(self, *, dcoh=None, link=None, pipelined=False):
        self.pipelined = pipelined
        self.dcoh = (PipelinedDCOH if pipelined else DCOH)(**(dcoh or {}))
        self.link = LinkPort(True, **(link or {}))
        members = {"tx_flit": Out(flit_stream()), "rx_flit": In(flit_stream())}
        for name in _CACHE_PORTS + self.status_ports():
            members[name] = self.dcoh.signature.members[name]
        if pipelined:
            members.update({name: Out(1) for name in INTAKE_PORTS})
        members.update(idle=Out(1), devload=Out(2), protocol_errors=Out(16),
                       retries=Out(32), crc_errors=Out(32), rule_errors=Out(32),
                       rx_errors=Out(rx_errors_signature()), link_error=Out(1),
                       link_error_cause=Out(len(LinkErrorCause)))
        super().__init__(members)

    def status_ports(self):
        """The DCOH's ports that tell a shadow model what it did: ``dispatch`` or the commit ports."""
        return COMMIT_PORTS if self.pipelined else ("dispatch", "scan_before", "work_line")

    def elaborate(self, platform):
        m = Module()
        m.submodules.dcoh = dcoh = self.dcoh
        m.submodules.link = link = self.link
        for ch in _D2H:
            name = ch.name.lower()
            wiring.connect(m, getattr(dcoh, name), getattr(link, name))
        for ch in _H2D:
            name = ch.name.lower()
            wiring.connect(m, getattr(link, name), getattr(dcoh, name))
        # each D2H credit of the DCOH comes back the cycle after the link took its message
        for ch, ret in zip(_D2H, (dcoh.crd_req, dcoh.crd_rsp, dcoh.crd_data)):
            s = getattr(dcoh, ch.name.lower())
            taken = Signal(name=f"{ch.name.lower()}_taken")
            m.d.sync += taken.eq(s.valid & s.ready)
            m.d.comb += ret.eq(taken)
        wiring.connect(m, link.tx_flit, wiring.flipped(self.tx_flit))
        wiring.connect(m, wiring.flipped(self.rx_flit), link.rx_flit)
        for name in _CACHE_PORTS:
            port = getattr(self, name)
            inner = getattr(dcoh, name)
            if self.signature.members[name].flow is In:
                wiring.connect(m, wiring.flipped(port), inner)
            else:
                wiring.connect(m, inner, wiring.flipped(port))
        for name in self.status_ports():
            m.d.comb += getattr(self, name).eq(getattr(dcoh, name))
        if self.pipelined:
            m.d.comb += [self.took_snoop.eq(dcoh.h2d_req.valid & dcoh.h2d_req.ready),
                         self.took_rsp.eq(dcoh.h2d_rsp.valid & dcoh.h2d_rsp.ready),
                         self.took_data.eq(dcoh.h2d_data.valid & dcoh.h2d_data.ready)]
        m.d.comb += [self.idle.eq(dcoh.idle), self.devload.eq(dcoh.devload),
                     self.protocol_errors.eq(dcoh.protocol_errors), self.retries.eq(link.retries),
                     self.crc_errors.eq(link.crc_errors), self.rule_errors.eq(link.rule_errors),
                     self.link_error.eq(link.link_error), self.link_error_cause.eq(link.link_error_cause),
                     *[getattr(self.rx_errors, k).eq(getattr(link.rx_errors, k)) for k in RX_ERROR_KINDS]]
        return m
