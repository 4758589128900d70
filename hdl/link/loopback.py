"""Loopback top: device LinkPort -> wire (error injector) -> host LinkPort, and back.

``LinkLoopback(ber_up=..., ber_down=..., seed=..., pattern_up=(), pattern_down=(), **port_params)``:

* ``dev`` = ``LinkPort(upstream=True)`` (sends D2H), ``host`` = ``LinkPort(upstream=False)`` (sends H2D),
  both built with ``port_params`` (e.g. ``pack_wait``, the packers' wait);
* wire ``up``: ``dev.tx_flit`` -> ``WireInjector`` -> ``host.rx_flit``; wire ``down`` the other way;
* top-level streams: ``d2h_req/rsp/data`` In (into the device end), ``h2d_req/rsp/data`` Out (out of the
  device end); ``host_h2d_req/rsp/data`` In (into the host end), ``host_d2h_req/rsp/data`` Out;
* counters: ``dev_<counter>`` and ``host_<counter>`` for every ``LinkPort`` counter, ``up_injected`` /
  ``down_injected`` (flits corrupted on each wire), ``up_flits`` / ``down_flits`` (flits carried);
* ``up_threshold`` / ``down_threshold`` inputs: the injectors' thresholds (reset value from the BERs);
* ``up_<setting>`` / ``down_<setting>`` inputs for every runtime fault setting of the injectors
  (``FAULT_INPUTS``: ``mode``, ``burst_len``, ``nbits``, ``retry_threshold``, ``fault_at``,
  ``mask_escapes``), and ``up_escaped`` / ``down_escaped`` counters;
* ``dev_`` / ``host_`` ``link_error``, ``link_error_cause``, ``rx_errors`` (the ports' outputs) and
  ``withhold_acks`` / ``withhold_credits`` (the ports' fault knobs, inputs);
* ``up_force`` / ``down_force`` inputs: corrupt the flit on that wire in this cycle (a testbench that
  wants to hit a particular flit, e.g. a RETRY.Ack, watches ``up_wire`` / ``down_wire`` (``valid``: a flit is offered; ``payload``:
  it, before injection; ``ready`` unused) and holds the input high while that flit is offered).

``WireInjector``: a flit stream pass-through that damages a flit when (a) a per-flit Bernoulli draw
hits: a 32-bit xorshift generator (stepped once per flit taken from the sender) below the threshold
``round(p_flit * 2**32)`` with ``p_flit = 1 - (1 - ber)**528`` (the ``threshold`` input, reset value
from ``ber``, so a testbench can change the rate without rebuilding); (b) the flit's number on the
wire (0 = first flit taken from the sender) is in ``pattern`` or equals the ``fault_at`` input; (c)
``force`` is high; or (d) the flit is a RETRY flit and a third generator is below ``retry_threshold``
(a corrupted RETRY handshake at its own rate).  What a hit does is the ``mode`` input
(:class:`FaultMode`, runtime, so one build serves every fault kind):

* ``BIT``: one bit flipped, at ``(y & 0xFFFF) * 528 >> 16`` from a second generator (the reset mode);
* ``BURST``: a burst of ``burst_len`` (1..32) bits in the order the CRC reads the codeword (payload bit
  511 first ... payload bit 0, then CRC bit 15 ... 0): its first and last bits flipped, the bits
  between them random (so a burst longer than 17 bits escapes a CRC-16 with probability 2^-16);
* ``MULTI``: ``nbits`` (1..8) independent single-bit errors at random positions (two at the same
  position cancel);
* ``DROP``: the flit is taken from the sender and never delivered;
* ``DUP``: the flit is delivered twice;
* ``CUT``: this flit and every later one vanish: the peer falls silent.

Counters: ``flits`` (flits taken from the sender), ``injected`` (flits changed, dropped, duplicated or
cut), ``escaped`` (error patterns the CRC cannot see: the CRC of the pattern's payload bits equals
its CRC bits, the code being linear).  With ``mask_escapes`` high (the reset value) an escaping
pattern is counted and *not applied* (the flit goes through clean): the receiver would take such a
flit as good, which no link-layer retry can repair, so the bench counts how often it happens and keeps
the run measuring what the link can detect; with it low the pattern is applied.  Decisions are stable
while a flit is offered (the generators advance when the sender's flit is taken).

Error model (assumption): the rate is per flit; the patterns above stand for single-bit noise, burst
noise (a lane or a symbol), independent errors, and framing faults (DROP, DUP) that the PHY did not
flag.  DROP and DUP are invisible to CRC and to the implicit sequence numbers of the 68B link layer
(nothing in a flit names its number), so the link cannot recover from them; what it detects
afterwards (rule errors, ack or credit overflows, timeouts) is measured by bench/link_verilator.py.

# Ref: docs/sources.md §2.1 (528-bit flit), §2.3 (CRC: every 1-bit error detected).
"""

import enum

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hdl.link.crc import FlitCRC
from hdl.link.ports import FLIT_BITS, PAYLOAD_BITS, channel_stream, direction_channels, flit_stream
from hdl.link.port import COUNTERS, RETRY_KINDS, RX_ERROR_KINDS, LinkErrorCause, LinkPort, rx_errors_signature
from hdl.link.rx import CONTROL_TABLES

__all__ = ["WireInjector", "LinkLoopback", "FaultMode", "flit_error_probability", "COUNTERS",
           "FAULT_INPUTS"]


class FaultMode(enum.IntEnum):
    """What a hit does to a flit (``mode`` input of :class:`WireInjector`)."""
    BIT = 0
    BURST = 1
    MULTI = 2
    DROP = 3
    DUP = 4
    CUT = 5


MAX_BURST = 32
MAX_NBITS = 8
# runtime fault settings of a wire: name -> (shape, reset value)
FAULT_INPUTS = {"mode": (3, FaultMode.BIT), "burst_len": (range(MAX_BURST + 1), 16),
                "nbits": (range(MAX_NBITS + 1), 2), "retry_threshold": (32, 0),
                "fault_at": (32, 0xFFFFFFFF), "mask_escapes": (1, 1)}


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
    """One wire with fault injection; see the module docstring."""

    def __init__(self, *, ber=0.0, seed=1, pattern=()):
        if not 0.0 <= ber < 1.0:
            raise ValueError(f"ber={ber!r}: must be in [0, 1)")
        self.ber = ber
        self.threshold_init = min(round(flit_error_probability(ber) * 2**32), 2**32 - 1) if ber else 0
        self.seed = seed & 0xFFFFFFFF or 1
        # Start states: the seed mixed and stepped (a small state would give a run of early hits).
        self.x0 = _warm((self.seed * 0x9E3779B9) & 0xFFFFFFFF or 1)
        self.y0 = _warm((self.seed * 0x85EBCA6B + 0xC2B2AE35) & 0xFFFFFFFF or 1)
        self.more0 = [_warm((self.seed * 0x27D4EB2F + 0x165667B1 * (k + 1)) & 0xFFFFFFFF or 1)
                      for k in range(5)]
        self.pattern = tuple(sorted(set(int(i) for i in pattern)))
        members = {"i": In(flit_stream()), "o": Out(flit_stream()), "force": In(1),
                   "threshold": In(32, init=self.threshold_init),
                   "injected": Out(32), "escaped": Out(32), "flits": Out(32), "hit": Out(1),
                   "pos": Out(range(FLIT_BITS))}
        for name, (shape, init) in FAULT_INPUTS.items():
            members[name] = In(shape, init=init)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        x = Signal(32, init=self.x0)
        y = Signal(32, init=self.y0)
        z = Signal(32, init=self.more0[0])                              # RETRY-flit hits
        w = [Signal(32, init=v, name=f"w{k}") for k, v in enumerate(self.more0[1:])]   # pattern bits
        dup_second = Signal()       # DUP: the first copy went out; the held flit goes again, unhit
        cut = Signal()              # CUT: the wire is dead
        mode = self.mode
        p = self.i.payload[:PAYLOAD_BITS]
        is_retry = Cat(*(((p & (((1 << PAYLOAD_BITS) - 1) & ~CONTROL_TABLES[k][1])) == CONTROL_TABLES[k][0])
                         for k in RETRY_KINDS)).any()
        hit = Signal()
        pat = Cat(*(self.flits == k for k in self.pattern)).any() if self.pattern else Const(0, 1)
        ber_hit = x < self.threshold
        m.d.comb += [hit.eq((ber_hit | pat | self.force | (self.flits == self.fault_at)
                             | (is_retry & (z < self.retry_threshold))) & ~dup_second & ~cut),
                     self.hit.eq(hit),
                     self.pos.eq(((y[:16] * FLIT_BITS) >> 16)[:10])]

        # error patterns
        bit_mask = Signal(FLIT_BITS)
        m.d.comb += bit_mask.eq(Const(1, FLIT_BITS) << self.pos)
        length = Signal(range(MAX_BURST + 1))
        m.d.comb += length.eq(Mux(self.burst_len == 0, 1, Mux(self.burst_len > MAX_BURST, MAX_BURST, self.burst_len)))
        ones = Signal(MAX_BURST)
        m.d.comb += ones.eq((Const(1, MAX_BURST + 1) << length) - 1)
        burst = Signal(MAX_BURST)
        m.d.comb += burst.eq((w[0] | 1 | (Const(1, MAX_BURST) << (length - 1).as_unsigned())) & ones)
        start = Signal(range(FLIT_BITS))
        m.d.comb += start.eq((y[:16] * (FLIT_BITS + 1 - length)) >> 16)
        code_mask = Signal(FLIT_BITS)           # bit j = the j-th bit the CRC reads
        m.d.comb += code_mask.eq(burst << start)
        burst_mask = Signal(FLIT_BITS)
        m.d.comb += burst_mask.eq(Cat(*[code_mask[PAYLOAD_BITS - 1 - i] for i in range(PAYLOAD_BITS)],
                                      *[code_mask[FLIT_BITS - 1 - k] for k in range(FLIT_BITS - PAYLOAD_BITS)]))
        multi_mask = Signal(FLIT_BITS)
        halves = [h for v in w[:4] for h in (v[:16], v[16:])]
        acc = Const(0, FLIT_BITS)
        for k, h in enumerate(halves):
            one = Const(1, FLIT_BITS) << ((h * FLIT_BITS) >> 16)[:10]
            acc = acc ^ Mux(self.nbits > k, one, 0)
        m.d.comb += multi_mask.eq(acc)
        mask = Signal(FLIT_BITS)
        with m.Switch(mode):
            with m.Case(FaultMode.BURST):
                m.d.comb += mask.eq(burst_mask)
            with m.Case(FaultMode.MULTI):
                m.d.comb += mask.eq(multi_mask)
            with m.Case(FaultMode.BIT):
                m.d.comb += mask.eq(bit_mask)
        # the CRC is linear: a pattern escapes exactly when it is a codeword itself
        m.submodules.pattern_crc = pcrc = FlitCRC()
        escapes = Signal()
        m.d.comb += [pcrc.payload.eq(mask[:PAYLOAD_BITS]),
                     escapes.eq((mask != 0) & (pcrc.crc == mask[PAYLOAD_BITS:]))]
        apply = Signal()
        m.d.comb += apply.eq(hit & ~(escapes & self.mask_escapes))

        lose = Signal()             # taken from the sender, not delivered
        hold = Signal()             # delivered, not taken from the sender (DUP, first copy)
        m.d.comb += [lose.eq(cut | (hit & ((mode == FaultMode.DROP) | (mode == FaultMode.CUT)))),
                     hold.eq(hit & (mode == FaultMode.DUP))]
        m.d.comb += [self.o.valid.eq(self.i.valid & ~lose), self.i.ready.eq(Mux(lose, 1, self.o.ready & ~hold)),
                     self.o.payload.eq(self.i.payload)]
        with m.If(apply):
            m.d.comb += self.o.payload.eq(self.i.payload ^ mask)
        taken = self.i.valid & self.i.ready
        with m.If(self.o.valid & self.o.ready & hold):
            m.d.sync += dup_second.eq(1)
        with m.If(taken):
            m.d.sync += [x.eq(_hw_xorshift32(x)), y.eq(_hw_xorshift32(y)), z.eq(_hw_xorshift32(z)),
                         *[v.eq(_hw_xorshift32(v)) for v in w], dup_second.eq(0),
                         self.flits.eq(self.flits + 1)]
        changed = Signal()
        m.d.comb += changed.eq(hit & (((mode == FaultMode.DROP) | (mode == FaultMode.DUP) |
                                       (mode == FaultMode.CUT)) | (apply & (mask != 0))))
        # counted once per flit: when it leaves the sender, or at the first copy of a duplicate
        with m.If((taken & changed) | (self.o.valid & self.o.ready & hold)):
            m.d.sync += self.injected.eq(self.injected + 1)
        with m.If(taken & hit & escapes):
            m.d.sync += self.escaped.eq(self.escaped + 1)
        with m.If(hit & (mode == FaultMode.CUT) & self.i.valid):
            m.d.sync += cut.eq(1)
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
            members.update({f"{side}_link_error": Out(1), f"{side}_link_error_cause": Out(len(LinkErrorCause)),
                            f"{side}_rx_errors": Out(rx_errors_signature()),
                            f"{side}_withhold_acks": In(1), f"{side}_withhold_credits": In(1)})
        for w in ("up", "down"):
            thr = (self.up_inj if w == "up" else self.down_inj).threshold_init
            members.update({f"{w}_force": In(1), f"{w}_threshold": In(32, init=thr), 
                            f"{w}_injected": Out(32), f"{w}_flits": Out(32),
                            f"{w}_hit": Out(1), f"{w}_wire": Out(flit_stream()), f"{w}_escaped": Out(32)})
            for name, (shape, init) in FAULT_INPUTS.items():
                members[f"{w}_{name}"] = In(shape, init=init)
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
                         getattr(self, f"{side}_good").eq(port.rx_good),
                         getattr(self, f"{side}_link_error").eq(port.link_error),
                         getattr(self, f"{side}_link_error_cause").eq(port.link_error_cause),
                         *[getattr(getattr(self, f"{side}_rx_errors"), k).eq(getattr(port.rx_errors, k))
                           for k in RX_ERROR_KINDS],
                         port.withhold_acks.eq(getattr(self, f"{side}_withhold_acks")),
                         port.withhold_credits.eq(getattr(self, f"{side}_withhold_credits"))]
        for w, inj in (("up", up), ("down", down)):
            wire = getattr(self, f"{w}_wire")
            m.d.comb += [inj.force.eq(getattr(self, f"{w}_force")),
                         inj.threshold.eq(getattr(self, f"{w}_threshold")),
                         getattr(self, f"{w}_injected").eq(inj.injected),
                         getattr(self, f"{w}_flits").eq(inj.flits),
                         getattr(self, f"{w}_hit").eq(inj.hit),
                         getattr(self, f"{w}_escaped").eq(inj.escaped),
                         *[getattr(inj, n).eq(getattr(self, f"{w}_{n}")) for n in FAULT_INPUTS],
                         wire.valid.eq(inj.i.valid), wire.payload.eq(inj.i.payload)]
        return m
