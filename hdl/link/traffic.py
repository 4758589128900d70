"""RTL traffic generator and checker around the link loopback, for batch (no per-cycle Python) runs.

``LinkTraffic(fault=None, **loopback_params)`` wraps a :class:`hdl.link.loopback.LinkLoopback`.  Per
channel (all six: D2H req/rsp/data into the device end, H2D req/rsp/data into the host end) it has

* a **generator** on the sending end: message number ``seq`` (32-bit counter of handshakes) and a
  32-bit xorshift *content* state ``c`` (stepped once per handshake) define the message.  Every message
  is legal: ``valid`` = 1, reserved fields 0, every enum field (opcode, RSP_PRE) taken from a table of
  that enum's members built at elaboration (the members repeated to a power-of-two length, indexed by
  bits of ``c``); the channel's widest plain field (``addr`` of the requests, ``uqid`` / ``cqid`` of
  the responses and data headers) carries ``seq`` in its low bits; the other fields, and the 64-byte
  line of a data message (word 0 = ``seq``), are bits derived from ``c``.  Whether a message is offered
  is drawn by a second xorshift (*offer* state, stepped every cycle): a new offer starts when
  ``offer[:8] <= offer_rate`` (255 = always); an offer, once made, is held until it is taken (payload
  stable), as ``lib.stream`` requires.
* a **checker** on the receiving end with its own copy of ``seq`` and ``c`` (same reset values, stepped
  per message received): every message taken is compared, all bits, with the one the generator would
  have built for that number; any difference (lost, duplicated, reordered or corrupted) adds 1 to that
  channel's ``errors``.  The sink's ``ready`` comes from a third xorshift (*ready* state, every cycle):
  ``ready = ready_state[:8] <= ready_rate``.

Control inputs: ``up_threshold`` / ``down_threshold`` (the wires' error injectors, per-flit hit
threshold ``round(p_flit * 2**32)``), ``offer_rate``, ``ready_rate`` (8 bits each), ``target`` (32 bits:
messages per channel; 0 = no limit), ``stop`` (no new offers; offers already made complete).

Fault inputs, passed to the loopback: ``fault_mode``, ``burst_len``, ``nbits``, ``retry_threshold``,
``mask_escapes`` (the same on both wires; ``hdl.link.loopback.FAULT_INPUTS``), ``up_fault_at`` /
``down_fault_at`` (one wire each), ``host_withhold_acks`` / ``host_withhold_credits`` (the host end
misbehaves, as the device end sees it).

Outputs: per channel ``<ch>_sent``, ``<ch>_received``, ``<ch>_errors`` (32 bits, ``ch`` = ``d2h_req`` ..
``h2d_data``); ``sent``, ``received``, ``errors`` (sums, 32 bits); ``up_flits``, ``down_flits``,
``up_injected``, ``down_injected``, ``dev_<c>`` / ``host_<c>`` for the loopback's counters (retries,
crc_errors, rule_errors, flits_sent, flits_replayed); ``up_escaped`` / ``down_escaped``, ``dev_`` / ``host_`` ``link_error`` and ``link_error_cause``, the sum
over both ends of every ``rx_errors`` counter (``rx_<kind>``, 32 bits), ``link_down`` (either end
reported a link error); ``cycles`` (64 bits); ``idle`` (no offer pending
and every channel's ``received == sent``) and ``done`` (``idle`` and either ``stop`` or every channel
sent ``target``).

``fault`` (tests only; a checker that cannot fail is worthless): ``(kind, channel, k)``, or a list of
such with at most one per channel, breaks the path
between the port's output and the checker at message ``k`` (0-based) of ``channel``: ``"flip"`` flips
bit 1 of the payload the checker sees (corruption), ``"drop"`` takes the message from the port without
checking it (a lost message), ``"dup"`` checks it without taking it, so it is seen again next time
(a duplicate).  Each must make ``errors`` rise.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hdl.link.loopback import COUNTERS, FAULT_INPUTS, LinkLoopback
from hdl.link.port import RX_ERROR_KINDS, LinkErrorCause
from hdl.link.ports import LINE_BITS, direction_channels
from cxl.messages import CODECS, Channel

__all__ = ["LinkTraffic", "CHANNELS", "xorshift32", "xorshift_step", "channel_seeds", "message_value", "build_message"]

CHANNELS = direction_channels(True) + direction_channels(False)
_MASK32 = 0xFFFFFFFF


def xorshift32(x):
    """One step of the generators, in Python (seeds, and a model of the RTL for the tests)."""
    x ^= (x << 13) & _MASK32
    x ^= x >> 17
    x ^= (x << 5) & _MASK32
    return x


def xorshift_step(x):
    """One step of the generators in RTL (the same step as :func:`xorshift32`) on a 32-bit Value."""
    a = (x ^ (x << 13))[:32]
    b = a ^ (a >> 17)
    return (b ^ (b << 5))[:32]


def channel_seeds(ch):
    """(content, offer, ready) reset states of channel ``ch``: distinct, non-zero, warmed up."""
    out = []
    for k in range(3):
        x = ((ch.value * 3 + k + 1) * 0x9E3779B9 + 0x7F4A7C15) & _MASK32 or 1
        for _ in range(20):
            x = xorshift32(x)
        out.append(x)
    return out


def _rotl(v, n):
    n %= 32
    return Cat(v[32 - n:], v[:32 - n]) if n else v


_MIX = [(5 * k + 3, (0x9E3779B9 * (k + 1)) & _MASK32) for k in range(16)]


def _words(c, n):
    """n 32-bit words derived from the content state by wiring and constant XORs (no logic depth)."""
    return [_rotl(c, r) ^ Const(k, 32) for r, k in _MIX[:n]]


def _plan(ch):
    """Field plan of a channel: (header width, seq field name, [(name, offset, width, table or None)])."""
    codec = CODECS[ch]
    plain = [(w, n) for n, _, w, e in codec.fields if e is None and n != "valid" and not n.startswith("rsvd")]
    seq_field = max(plain)[1]
    fields = []
    for name, offset, width, enum_cls in codec.fields:
        table = None
        if enum_cls is not None:
            members = [m.value for m in enum_cls]
            size = 1 << (len(members) - 1).bit_length()
            table = [members[i % len(members)] for i in range(size)]
        fields.append((name, offset, width, table))
    return codec.width, seq_field, fields


def message_value(ch, seq, c):
    """The payload integer the RTL builds for message ``seq`` with content state ``c`` (Python model)."""
    width, seq_field, fields = _plan(ch)
    pool = 0
    for i, (r, k) in enumerate(_MIX[:4]):
        r %= 32
        w = (((c << r) | (c >> (32 - r))) & _MASK32) if r else c
        pool |= (w ^ k) << (32 * i)
    value, pos = 0, 0
    for name, offset, fw, table in fields:
        if name == "valid":
            v = 1
        elif name.startswith("rsvd"):
            v = 0
        elif table is not None:
            ib = (len(table) - 1).bit_length()
            v = table[(pool >> pos) & ((1 << ib) - 1)]
            pos += ib
        elif name == seq_field:
            v = seq & ((1 << fw) - 1)
        else:
            v = (pool >> pos) & ((1 << fw) - 1)
            pos += fw
        value |= v << offset
    if ch in (Channel.D2H_DATA, Channel.H2D_DATA):
        line = seq & _MASK32
        for i, (r, k) in enumerate(_MIX[:LINE_BITS // 32 - 1]):
            r %= 32
            w = (((c << r) | (c >> (32 - r))) & _MASK32) if r else c
            line |= (w ^ k) << (32 * (i + 1))
        value |= line << width
    return value


def build_message(ch, seq, c):
    """The payload Value for message ``seq`` with content state ``c`` (matches :func:`message_value`)."""
    width, seq_field, fields = _plan(ch)
    pool = Cat(*_words(c, 4))
    parts, pos = [], 0
    for name, offset, fw, table in fields:
        if name == "valid":
            v = Const(1, 1)
        elif name.startswith("rsvd"):
            v = Const(0, fw)
        elif table is not None:
            ib = (len(table) - 1).bit_length()
            idx = pool[pos:pos + ib]
            pos += ib
            v = Const(table[0], fw)
            # A small mux tree from the table (table[0] is the default).
            for i, e in enumerate(table[1:], 1):
                v = Mux(idx == i, Const(e, fw), v)
        elif name == seq_field:
            v = seq[:fw] if fw <= 32 else Cat(seq, Const(0, fw - 32))
        else:
            v = pool[pos:pos + fw]
            pos += fw
        assert pos <= 128, (ch, "field plan needs more random bits")
        parts.append(v)
    if ch in (Channel.D2H_DATA, Channel.H2D_DATA):
        parts += [seq] + _words(c, LINE_BITS // 32 - 1)
    return Cat(*parts)


class LinkTraffic(wiring.Component):
    """Traffic generators and checkers on all six channels of a LinkLoopback; see the module docstring."""

    def __init__(self, *, fault=None, **loopback_params):
        faults = {}
        for kind, ch, k in ([fault] if fault and isinstance(fault[0], str) else (fault or ())):
            if kind not in ("flip", "drop", "dup"):
                raise ValueError(f"fault kind {kind!r}: one of flip, drop, dup")
            if Channel(ch) in faults:
                raise ValueError(f"one fault per channel ({Channel(ch).name})")
            faults[Channel(ch)] = (kind, int(k))
        self.faults = faults
        self.loop = LinkLoopback(**{"rx_depth": 16, **loopback_params})
        members = {"up_threshold": In(32, init=self.loop.up_inj.threshold_init),
                   "down_threshold": In(32, init=self.loop.down_inj.threshold_init),
                   "offer_rate": In(8, init=255), "ready_rate": In(8, init=255),
                   "target": In(32), "stop": In(1)}
        for name, (shape, init) in FAULT_INPUTS.items():
            if name == "fault_at":
                members.update(up_fault_at=In(shape, init=init), down_fault_at=In(shape, init=init))
            else:
                members["fault_mode" if name == "mode" else name] = In(shape, init=init)
        members.update(host_withhold_acks=In(1), host_withhold_credits=In(1),
                       up_escaped=Out(32), down_escaped=Out(32), link_down=Out(1))
        for side in ("dev", "host"):
            members.update({f"{side}_link_error": Out(1), f"{side}_link_error_cause": Out(len(LinkErrorCause))})
        for k in RX_ERROR_KINDS:
            members[f"rx_{k}"] = Out(32)
        for ch in CHANNELS:
            for c in ("sent", "received", "errors"):
                members[f"{ch.name.lower()}_{c}"] = Out(32)
        for c in ("sent", "received", "errors", "up_flits", "down_flits", "up_injected", "down_injected"):
            members[c] = Out(32)
        for side in ("dev", "host"):
            for c in COUNTERS:
                members[f"{side}_{c}"] = Out(32)
        members.update(cycles=Out(64), idle=Out(1), done=Out(1))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.loop = lb = self.loop
        all_idle, all_reached = [], []
        sums = {"sent": [], "received": [], "errors": []}
        for ch in CHANNELS:
            n = ch.name.lower()
            src = getattr(lb, n if ch.upstream else f"host_{n}")
            snk = getattr(lb, f"host_{n}" if ch.upstream else n)
            seed_c, seed_o, seed_r = channel_seeds(ch)
            sent, received, errors = (getattr(self, f"{n}_{c}") for c in ("sent", "received", "errors"))

            # ---------------------------------------------------------------- generator
            g_c = Signal(32, init=seed_c, name=f"{n}_gen_c")
            g_o = Signal(32, init=seed_o, name=f"{n}_gen_o")
            offering = Signal(name=f"{n}_offering")
            reached = Signal(name=f"{n}_reached")
            m.d.comb += reached.eq((self.target != 0) & (sent == self.target))
            may_start = Signal(name=f"{n}_may_start")
            m.d.comb += may_start.eq((g_o[:8] <= self.offer_rate) & ~self.stop & ~reached)
            m.d.comb += [src.valid.eq(offering),
                         src.payload.as_value().eq(build_message(ch, sent, g_c))]
            m.d.sync += g_o.eq(xorshift_step(g_o))
            took = src.valid & src.ready
            with m.If(took):
                m.d.sync += [sent.eq(sent + 1), g_c.eq(xorshift_step(g_c))]
            with m.If(~offering | took):
                # the next offer: may_start is about the *next* message, so a taken offer's successor
                # respects the target (sent + 1 == target -> reached next cycle; checked here early)
                last = (self.target != 0) & (sent + 1 == self.target)
                m.d.sync += offering.eq(may_start & ~(took & last))

            # ---------------------------------------------------------------- checker
            k_c = Signal(32, init=seed_c, name=f"{n}_chk_c")
            k_r = Signal(32, init=seed_r, name=f"{n}_chk_r")
            m.d.sync += k_r.eq(xorshift_step(k_r))
            seen = Signal(snk.payload.as_value().shape().width, name=f"{n}_seen")
            m.d.comb += seen.eq(snk.payload.as_value())
            ready = Signal(name=f"{n}_ready")
            m.d.comb += ready.eq(k_r[:8] <= self.ready_rate)
            check = Signal(name=f"{n}_check")       # the checker consumes a message this cycle
            m.d.comb += [snk.ready.eq(ready), check.eq(snk.valid & ready)]
            if ch in self.faults:
                kind, k = self.faults[ch]
                fired = Signal(name=f"{n}_fault_fired")  # one-shot: only message k is broken
                at = Signal(name=f"{n}_fault_at")
                m.d.comb += at.eq(snk.valid & ready & (received == k) & ~fired)
                m.d.sync += fired.eq(fired | at)
                if kind == "flip":
                    with m.If(at):
                        m.d.comb += seen.eq(snk.payload.as_value() ^ 2)
                elif kind == "drop":
                    with m.If(at):
                        m.d.comb += check.eq(0)     # taken from the port, never checked
                elif kind == "dup":
                    with m.If(at):
                        m.d.comb += snk.ready.eq(0)   # checked, not taken: seen again
            expect = Signal.like(seen, name=f"{n}_expect")
            m.d.comb += expect.eq(build_message(ch, received, k_c))
            with m.If(check):
                m.d.sync += [received.eq(received + 1), k_c.eq(xorshift_step(k_c))]
                with m.If(seen != expect):
                    m.d.sync += errors.eq(errors + 1)
            all_idle.append(~offering & (received == sent))
            all_reached.append(reached)
            for c, s in (("sent", sent), ("received", received), ("errors", errors)):
                sums[c].append(s)
        for c, parts in sums.items():
            total = parts[0]
            for p in parts[1:]:
                total = total + p
            m.d.comb += getattr(self, c).eq(total[:32])
        for c in ("up_flits", "down_flits", "up_injected", "down_injected") + tuple(
                f"{s}_{k}" for s in ("dev", "host") for k in COUNTERS):
            m.d.comb += getattr(self, c).eq(getattr(lb, c))
        m.d.comb += [lb.up_threshold.eq(self.up_threshold), lb.down_threshold.eq(self.down_threshold),
                     self.idle.eq(Cat(*all_idle).all()),
                     self.done.eq(self.idle & (self.stop | Cat(*all_reached).all()))]
        m.d.sync += self.cycles.eq(self.cycles + 1)
        for w in ("up", "down"):
            m.d.comb += [getattr(lb, f"{w}_fault_at").eq(getattr(self, f"{w}_fault_at")),
                         getattr(self, f"{w}_escaped").eq(getattr(lb, f"{w}_escaped"))]
            for name in FAULT_INPUTS:
                if name != "fault_at":
                    m.d.comb += getattr(lb, f"{w}_{name}").eq(getattr(self, "fault_mode" if name == "mode" else name))
        m.d.comb += [lb.host_withhold_acks.eq(self.host_withhold_acks),
                     lb.host_withhold_credits.eq(self.host_withhold_credits),
                     self.link_down.eq(lb.dev_link_error | lb.host_link_error)]
        for side in ("dev", "host"):
            for c in ("link_error", "link_error_cause"):
                m.d.comb += getattr(self, f"{side}_{c}").eq(getattr(lb, f"{side}_{c}"))
        for k in RX_ERROR_KINDS:
            m.d.comb += getattr(self, f"rx_{k}").eq(getattr(lb.dev_rx_errors, k) + getattr(lb.host_rx_errors, k))
        return m
