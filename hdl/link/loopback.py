"""Loopback top: device LinkPort -> wire (error injector) -> host LinkPort, and back.

``LinkLoopback(ber_up=..., ber_down=..., seed=..., pattern_up=(), pattern_down=(), **port_params)``:

* ``dev`` = ``LinkPort(upstream=True)`` (sends D2H), ``host`` = ``LinkPort(upstream=False)`` (sends H2D);
* wire ``up``: ``dev.tx_flit`` -> ``WireInjector`` -> ``host.rx_flit``; wire ``down`` the other way;
* top-level streams: ``d2h_req/rsp/data`` In (into the device end), ``h2d_req/rsp/data`` Out (out of the
  device end); ``host_h2d_req/rsp/data`` In (into the host end), ``host_d2h_req/rsp/data`` Out;
* counters: ``dev_<counter>`` and ``host_<counter>`` for every ``LinkPort`` counter, ``up_injected`` /
  ``down_injected`` (flits corrupted on each wire), ``up_flits`` / ``down_flits`` (flits carried);
* ``up_threshold`` / ``down_threshold`` inputs: the injectors' thresholds (reset value from the BERs);
* ``up_force`` / ``down_force`` inputs: corrupt the flit on that wire in this cycle (a testbench that
  wants to hit a particular flit, e.g. a RETRY.Ack, watches ``up_wire`` / ``down_wire`` (``valid``: a flit is offered; ``payload``:
  it, before injection; ``ready`` unused) and holds the input high while that flit is offered).

``WireInjector``: a flit stream pass-through that flips **one** bit of a flit when (a) a per-flit
Bernoulli draw hits: a 32-bit xorshift generator (a linear-feedback generator, stepped once per flit
carried) below the threshold ``round(p_flit * 2**32)`` with ``p_flit = 1 - (1 - ber)**528`` (the ``threshold`` input, reset value
from ``ber``, so a testbench can change the rate without rebuilding); (b) the
flit's number on the wire (0 = first flit carried) is in ``pattern``; or (c) ``force`` is high.  The
bit to flip comes from a second generator: ``(y & 0xFFFF) * 528 >> 16``.  The decision is stable while
the flit is offered (the generators and the flit number advance on the handshake).

Error model (assumption): a flit that is hit gets exactly one flipped bit.  At a per-bit error rate
``ber`` the chance of a corrupted flit is ``p_flit``; a real flit can have several bad bits, which
matters only for whether the CRC sees them: a single flip is always detected (proved in
tests/test_crc.py), so every injected error here is a CRC error and no corruption goes undetected.
The flit-level retry behaviour is what is measured.

# Ref: docs/sources.md §2.1 (528-bit flit), §2.3 (CRC: every 1-bit error detected).
"""

from amaranth.hdl import Cat, Const, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hdl.link.ports import FLIT_BITS, channel_stream, direction_channels, flit_stream
from hdl.link.port import LinkPort

__all__ = ["WireInjector", "LinkLoopback", "flit_error_probability", "COUNTERS"]

COUNTERS = ("retries", "crc_errors", "rule_errors", "flits_sent", "flits_replayed")


def flit_error_probability(ber, bits=FLIT_BITS):
    """P(a flit has at least one bit error) at a per-bit error rate ``ber``: 1 - (1 - ber)**528."""
    return 1.0 - (1.0 - ber) ** bits


def xorshift32(x):
    """The generator step, as Python (for seeds and for a test of the RTL)."""
    x ^= (x << 13) & 0xFFFFFFFF
    x ^= x >> 17
    x ^= (x << 5) & 0xFFFFFFFF
    return x


def _warm(x, steps=16):
    for _ in range(steps):
        x = xorshift32(x)
    return x


def _hw_xorshift32(x):
    a = (x ^ (x << 13))[:32]
    b = a ^ (a >> 17)
    return (b ^ (b << 5))[:32]


class WireInjector(wiring.Component):
    """One wire with error injection; see the module docstring."""

    def __init__(self, *, ber=0.0, seed=1, pattern=()):
        if not 0.0 <= ber < 1.0:
            raise ValueError(f"ber={ber!r}: must be in [0, 1)")
        self.ber = ber
        self.threshold_init = min(round(flit_error_probability(ber) * 2**32), 2**32 - 1) if ber else 0
        self.seed = seed & 0xFFFFFFFF or 1
        # Start states: the seed mixed and stepped (a small state would give a run of early hits).
        self.x0 = _warm((self.seed * 0x9E3779B9) & 0xFFFFFFFF or 1)
        self.y0 = _warm((self.seed * 0x85EBCA6B + 0xC2B2AE35) & 0xFFFFFFFF or 1)
        self.pattern = tuple(sorted(set(int(i) for i in pattern)))
        super().__init__({"i": In(flit_stream()), "o": Out(flit_stream()), "force": In(1),
                          "threshold": In(32, init=self.threshold_init),
                          "injected": Out(32), "flits": Out(32), "hit": Out(1), "pos": Out(range(FLIT_BITS))})

    def elaborate(self, platform):
        m = Module()
        x = Signal(32, init=self.x0)
        y = Signal(32, init=self.y0)
        hit = Signal()
        pat = Cat(*(self.flits == k for k in self.pattern)).any() if self.pattern else Const(0, 1)
        ber_hit = x < self.threshold
        m.d.comb += [hit.eq(ber_hit | pat | self.force), self.hit.eq(hit),
                     self.pos.eq(((y[:16] * FLIT_BITS) >> 16)[:10])]
        mask = Signal(FLIT_BITS)
        m.d.comb += mask.eq(Const(1, FLIT_BITS) << self.pos)
        m.d.comb += [self.o.valid.eq(self.i.valid), self.i.ready.eq(self.o.ready),
                     self.o.payload.eq(self.i.payload)]
        with m.If(hit):
            m.d.comb += self.o.payload.eq(self.i.payload ^ mask)
        with m.If(self.i.valid & self.o.ready):
            m.d.sync += [x.eq(_hw_xorshift32(x)), y.eq(_hw_xorshift32(y)), self.flits.eq(self.flits + 1),
                         self.injected.eq(self.injected + hit)]
        return m


class LinkLoopback(wiring.Component):
    """Two LinkPorts joined by two injecting wires; see the module docstring."""

    def __init__(self, *, ber_up=0.0, ber_down=0.0, seed=1, pattern_up=(), pattern_down=(), **port_params):
        self.port_params = port_params
        self.dev_port = LinkPort(True, **port_params)
        self.host_port = LinkPort(False, **port_params)
        self.up_inj = WireInjector(ber=ber_up, seed=seed, pattern=pattern_up)
        self.down_inj = WireInjector(ber=ber_down, seed=seed * 2654435761 + 12345, pattern=pattern_down)
        d2h, h2d = direction_channels(True), direction_channels(False)
        members = {}
        for ch in d2h:
            members[ch.name.lower()] = In(channel_stream(ch))
            members[f"host_{ch.name.lower()}"] = Out(channel_stream(ch))
        for ch in h2d:
            members[ch.name.lower()] = Out(channel_stream(ch))
            members[f"host_{ch.name.lower()}"] = In(channel_stream(ch))
        for side in ("dev", "host"):
            for c in COUNTERS:
                members[f"{side}_{c}"] = Out(32)
            members[f"{side}_waiting"] = Out(1)
            members[f"{side}_good"] = Out(1)
        for w in ("up", "down"):
            thr = (self.up_inj if w == "up" else self.down_inj).threshold_init
            members.update({f"{w}_force": In(1), f"{w}_threshold": In(32, init=thr), 
                            f"{w}_injected": Out(32), f"{w}_flits": Out(32),
                            f"{w}_hit": Out(1), f"{w}_wire": Out(flit_stream())})
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        dev, host, up, down = self.dev_port, self.host_port, self.up_inj, self.down_inj
        m.submodules.dev, m.submodules.host = dev, host
        m.submodules.up_wire, m.submodules.down_wire = up, down
        wiring.connect(m, dev.tx_flit, up.i)
        wiring.connect(m, up.o, host.rx_flit)
        wiring.connect(m, host.tx_flit, down.i)
        wiring.connect(m, down.o, dev.rx_flit)
        for ch in direction_channels(True) + direction_channels(False):
            n = ch.name.lower()
            for port, top in ((dev, getattr(self, n)), (host, getattr(self, f"host_{n}"))):
                inner = getattr(port, n)
                if ch in port.tx_chans:     # top In -> port In
                    m.d.comb += [inner.valid.eq(top.valid), inner.payload.eq(top.payload), top.ready.eq(inner.ready)]
                else:                       # port Out -> top Out
                    m.d.comb += [top.valid.eq(inner.valid), top.payload.eq(inner.payload), inner.ready.eq(top.ready)]
        for side, port in (("dev", dev), ("host", host)):
            for c in COUNTERS:
                m.d.comb += getattr(self, f"{side}_{c}").eq(getattr(port, c))
            m.d.comb += [getattr(self, f"{side}_waiting").eq(port.rx_waiting),
                         getattr(self, f"{side}_good").eq(port.rx_good)]
        for w, inj in (("up", up), ("down", down)):
            wire = getattr(self, f"{w}_wire")
            m.d.comb += [inj.force.eq(getattr(self, f"{w}_force")),
                         inj.threshold.eq(getattr(self, f"{w}_threshold")),
                         getattr(self, f"{w}_injected").eq(inj.injected),
                         getattr(self, f"{w}_flits").eq(inj.flits),
                         getattr(self, f"{w}_hit").eq(inj.hit),
                         wire.valid.eq(inj.i.valid), wire.payload.eq(inj.i.payload)]
        return m
