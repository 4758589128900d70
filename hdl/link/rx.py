"""RX unpacker of the CXL 2.0 68B-flit link layer: checked flits in, CXL.cache messages out.

Behaviourally identical to ``models.flit.Unpacker`` (the spec): the same CRC, the same rules in the same
order, the same messages, credits, acks and control flits.  Every slot format, offset, width, opcode
set, header field, control-flit layout and credit code is read at elaboration time from
``models.flit`` (``SLOT_FORMATS``, ``HEADER_FIELDS``, ``CONTROL_KINDS``/``encode_control``,
``decode_credit``, ``MAX_PER_FLIT``) and ``hdl.protocol`` (``CODECS``); nothing is restated here.

``FlitUnpacker(upstream)``: ``upstream=True`` receives D2H flits (the host's receiver), ``False`` H2D
flits (the device's receiver).

Ports
-----
``flit``: ``In(flit_stream())``, 528 bits: payload 511:0, CRC 527:512 (``hdl.link.ports``).
``discard``: ``In(1)``, drop the held flit (see "Discard" below); tie to 0 when unused.
``req``, ``rsp``, ``data``: ``Out(channel_stream(chan))`` for the direction's three channels
    (``direction_channels(upstream)``); ``data`` carries a ``DataMsg`` (header + 64-byte line), sent once
    the line's fourth chunk has arrived, in header order.  Per channel the order is the reference's.
Per retired flit, registered, high for exactly **one cycle** (the cycle after the retiring edge):
    ``done``        a flit was retired (every accepted flit is retired exactly once);
    ``discarded``   it was dropped by ``discard`` (then ``good``, ``crc_error``, ``rule_error`` are 0,
                    ``error`` is ``NONE`` and the other outputs are 0: exactly one of ``good``,
                    ``crc_error``, ``rule_error``, ``discarded`` goes with each ``done``);
    ``good``        it passed CRC and every rule (the retry logic counts these for Ak / sequence numbers);
    ``crc_error``   its CRC was wrong (nothing else about it is looked at);
    ``rule_error``  CRC good but a rule broken; ``error`` (``RxError``) names the first broken rule in
                    the reference's checking order (``error`` is ``CRC`` with ``crc_error``, ``NONE``
                    when good);
    ``kind``        ``FlitKind`` (protocol / all-data / control), valid with ``good``;
    ``credits``     CXL.cache credits returned (``req``/``rsp``/``data`` amounts 0..64, decoded from the
                    exponential code) by a good protocol flit or LLCRD; 0 otherwise;
    ``mem_credits`` the same for credit fields whose protocol-select bit says CXL.mem (reported, not
                    used: this block has no CXL.mem channels);
    ``acks``        flits acknowledged: 8 for a protocol flit with Ak, the Acknowledge count of an LLCRD;
    ``ctl_valid``   a good control flit; ``ctl.kind`` indexes ``CONTROL_KIND_NAMES`` (the reference's
                    ``CONTROL_KINDS`` keys, in order) and ``ctl.<field>`` holds every field any control
                    flit has (the union by name; fields the kind lacks are 0).
Counters (32 bits, wrap around): ``crc_errors``, ``rule_errors`` (the two error classes).

Structure, timing, throughput
-----------------------------
An input register holds one flit (``flit.ready`` = register empty or retiring this cycle).  The held
flit is decoded combinationally in full (CRC, all rules, every message of every format, the data
chunks) and retired at the next edge only when every output channel it writes has room in all its lanes
(a simple, slightly conservative condition that does not depend on which lanes it would use); a bad flit
(CRC or rule) is retired at once and changes nothing but the status outputs and counters, so the
unpacker state is exactly as before it (as in the reference).  Retiring writes the messages into
per-channel output queues and updates the data-chunk state at one edge, so a flit is never partly
delivered.

Each request/response channel has ``MAX_PER_FLIT[chan]`` lanes (``SyncFIFOBuffered``, ``depth`` entries
each) written round-robin, so one flit can hand over all its messages of a channel at one edge; the
output reads the lanes in the same rotation, which keeps the reference order.  At most one line can
complete per flit (checked at elaboration), so the data channel has one lane.  Data headers wait in a
small queue (``1 + MAX_PER_FLIT[data]`` entries: a protocol flit starts with at most 3 chunks owed, i.e.
one waiting header) with a chunk count and a buffer for the first three chunks of the head line.

Throughput: one flit per cycle while the outputs keep up (``done`` every cycle).  Latency: a flit
accepted at clock edge *n* is retired at edge *n+1*, so its status pulses are high between edges *n+1*
and *n+2*; its messages are valid on the output streams from edge *n+2* (the FIFO output register).
Backpressure never hangs: with full outputs, the held flit waits and ``flit.ready`` is low.

Discard
-------
``discard`` acts on the flit in the input register, in the cycle it is high (sampled at the next
edge): if a flit is held in that cycle, it is retired at that edge whatever its content and whether or
not the outputs have room, as if it had never arrived -- no message is written, the data-chunk state
(waiting headers, chunk count and buffer) and the counters are unchanged, and its status cycle shows
``done`` and ``discarded`` only.  ``flit.ready`` is high in that cycle (the register empties), so a flit
offered at the same edge is taken normally and is not affected.  With nothing held, ``discard`` does
nothing.  The use (``hdl.link.port``): a flit accepted at edge *n* is retired at *n+1* if it is bad (a
bad flit needs no output room), so its ``rule_error`` is high between *n+1* and *n+2*; the only flit
that can have followed it is one accepted at edge *n+1*, which is then the held flit (a flit is never
retired earlier than the edge after it is accepted), so ``discard = rule_error`` drops exactly the one
flit behind a rule error, at edge *n+2*, before any of its messages or state changes take effect.

# Ref: ../shared/reference/cxl_facts.md §2.1 (528-bit flit, header fields, Ak = 8 flits, all-data
#      flit and rollover), §2.2 (slot formats and per-flit maxima), §2.3 (CRC), §2.4 (credit fields),
#      §2.5 (control flits).
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, enum, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from hdl.link.crc import FlitCRC
from hdl.link.ports import (FLIT_BITS, PAYLOAD_BITS, channel_shape, channel_stream,
                            direction_channels, flit_stream)
from hdl.protocol import CODECS
from models.flit import (CHUNK_BYTES, CHUNKS_PER_LINE, CONTROL_KINDS, CREDIT_CLASSES, HEADER_FIELDS,
                         MAX_PER_FLIT, PAYLOAD_BYTES, S2M_NDR, SLOT_BYTES, SLOT_FORMATS, ControlFlit,
                         CreditProtocol, Direction, decode_credit, encode_control)

__all__ = ["RxError", "FlitKind", "CONTROL_KIND_NAMES", "FlitUnpacker"]


class RxError(enum.Enum, shape=4):
    """What was wrong with a retired flit: the first check that failed, in the reference's order."""
    NONE = 0
    CRC = 1          # CRC mismatch ("CRC")
    TYPE = 2         # control flit while data chunks are owed ("Type")
    RESERVED = 3     # protocol-flit header reserved bit set ("reserved")
    BE = 4           # byte-enable flit ("BE")
    FORMAT = 5       # reserved or unsupported slot format ("SlotN ... reserved / not supported")
    ROLLOVER = 6     # slot 1..P not G0 while P chunks roll over ("SlotN ... must be G0")
    NO_DATA = 7      # G0 slot with no data header waiting for data
    PADDING = 8      # bits above a format's last message set
    NDR = 9          # upstream H0's S2M NDR (CXL.mem) non-zero
    INVALID = 10     # message with Valid = 0 but other bits set
    OPCODE = 11      # an enum field (opcode, RSP_PRE, ...) holds no legal encoding
    MAX = 12         # per-flit maximum of a channel exceeded
    SZ = 13          # Sz is not 1 exactly when the flit has a data header
    CONTROL = 14     # bad control flit (CTL_FMT, LLCTRL, SubType, reserved bits, slots 1-3)


class FlitKind(enum.Enum, shape=2):
    PROTOCOL = 0
    ALL_DATA = 1
    CONTROL = 2


# Control kinds by index: Amaranth enums cannot be built from a table, so ``ctl.kind`` is an index.
CONTROL_KIND_NAMES = tuple(CONTROL_KINDS)

# ---------------------------------------------------------------- sizes, all from models.flit
SLOTS = PAYLOAD_BYTES // SLOT_BYTES
SLOT_BITS = 8 * SLOT_BYTES
CHUNK_BITS = 8 * CHUNK_BYTES
HEADER = {name: (offset, width) for name, offset, width in HEADER_FIELDS}
HEADER_BITS = max(offset + width for offset, width in HEADER.values())


def _control_tables():
    """Per control kind: (fixed bits, field mask, {field: pieces}), from the reference encoder itself.
    A payload is a legal control flit of ``kind`` iff its bits outside the field mask equal the fixed
    bits (Type = 1, CTL_FMT, LLCTRL, SubType, every reserved bit and slots 1-3 zero) -- exactly what
    ``decode_control`` accepts."""
    tables = {}
    for kind, (_, _, spec) in CONTROL_KINDS.items():
        widths = {name: max(shift + width for shift, _, width in pieces) for name, pieces in spec.items()}
        fixed = encode_control(ControlFlit(kind, dict.fromkeys(spec, 0)))
        ones = encode_control(ControlFlit(kind, {name: (1 << w) - 1 for name, w in widths.items()}))
        tables[kind] = (fixed, ones & ~fixed, spec, widths)
    return tables


CONTROL_TABLES = _control_tables()


def control_layout():
    """``ctl`` output: the kind index and every control field by name, at its widest."""
    fields = {}
    for _, _, _, widths in CONTROL_TABLES.values():
        for name, width in widths.items():
            fields[name] = max(width, fields.get(name, 0))
    return data.StructLayout({"kind": range(len(CONTROL_KIND_NAMES)), **fields})


CREDIT_MAX = max(decode_credit(code)[1] for code in range(1 << HEADER["req_crd"][1]))
CreditsLayout = data.StructLayout({name: range(CREDIT_MAX + 1) for name in CREDIT_CLASSES})


def _ack_weight():
    """Flits one Ak bit acknowledges: the LLCRD Acknowledge bit that shares the header's Ak position
    (Ref: cxl_facts.md §2.1, Ak = 8 flits [S]; models.flit CONTROL_KINDS, Acknowledge[3] at bit 2)."""
    ak_offset = HEADER["ak"][0]
    for shift, offset, _ in CONTROL_KINDS["LLCRD"][2]["acks"]:
        if offset == ak_offset:
            return 1 << shift
    raise ValueError("LLCRD Acknowledge has no bit at the header's Ak position")


ACKS_PER_AK = _ack_weight()
ACK_BITS = max(shift + width for shift, _, width in CONTROL_KINDS["LLCRD"][2]["acks"])


def _enum_fields(chan):
    """(offset, width, legal encodings) of every enum field of a channel's layout."""
    return [(offset, width, sorted(m.value for m in enum_cls))
            for _, offset, width, enum_cls in CODECS[chan].fields if enum_cls is not None]


def _popcount(bits):
    return sum((b.as_unsigned() for b in bits), Const(0, 1))


class FlitUnpacker(wiring.Component):
    """RX unpacker; see the module docstring for ports, timing and error handling."""

    def __init__(self, upstream, *, depth=4):
        if not isinstance(upstream, bool):
            raise ValueError(f"upstream={upstream!r}: must be True (D2H flits) or False (H2D flits)")
        if not isinstance(depth, int) or depth < 1:
            raise ValueError(f"depth={depth!r}: each output lane FIFO needs at least 1 entry")
        if CHUNK_BITS != SLOT_BITS:
            raise ValueError(f"CHUNK_BYTES={CHUNK_BYTES}: a data chunk must fill a G-slot ({SLOT_BYTES} bytes)")
        # At most one line completes per flit: the head line has <= CHUNKS_PER_LINE - 1 chunks and a
        # flit <= SLOTS chunks.  The single data lane below relies on it.
        if (CHUNKS_PER_LINE - 1 + SLOTS) // CHUNKS_PER_LINE != 1:
            raise ValueError(f"CHUNKS_PER_LINE={CHUNKS_PER_LINE}, SLOTS={SLOTS}: more than one line could "
                             "complete per flit, which this design does not support")
        self.upstream = upstream
        self.depth = depth
        self.direction = Direction.UPSTREAM if upstream else Direction.DOWNSTREAM
        self.chans = direction_channels(upstream)
        req, rsp, dat = self.chans
        self.ctl_layout = control_layout()
        super().__init__({
            "flit": In(flit_stream()),
            "discard": In(1),
            "req": Out(channel_stream(req)),
            "rsp": Out(channel_stream(rsp)),
            "data": Out(channel_stream(dat)),
            "done": Out(1),
            "discarded": Out(1),
            "good": Out(1),
            "crc_error": Out(1),
            "rule_error": Out(1),
            "error": Out(RxError),
            "kind": Out(FlitKind),
            "credits": Out(CreditsLayout),
            "mem_credits": Out(CreditsLayout),
            "acks": Out(range(1 << ACK_BITS)),
            "ctl_valid": Out(1),
            "ctl": Out(self.ctl_layout),
            "crc_errors": Out(32),
            "rule_errors": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        req_ch, rsp_ch, dat_ch = self.chans
        hdr_width = CODECS[dat_ch].width
        queue_len = 1 + MAX_PER_FLIT[dat_ch]   # one waiting header + a flit's worth (see docstring)

        # ------------------------------------------------ input register
        held = Signal(FLIT_BITS)
        held_valid = Signal()
        retire = Signal()
        commit = Signal()                       # retiring, not discarded: the flit takes effect
        m.d.comb += commit.eq(retire & ~self.discard)
        m.d.comb += self.flit.ready.eq(~held_valid | retire)
        with m.If(self.flit.valid & self.flit.ready):
            m.d.sync += [held.eq(self.flit.payload), held_valid.eq(1)]
        with m.Elif(retire):
            m.d.sync += held_valid.eq(0)
        p = held[:PAYLOAD_BITS]

        m.submodules.crc = crc = FlitCRC()
        crc_bad = Signal()
        m.d.comb += [crc.payload.eq(p), crc_bad.eq(crc.crc != held[PAYLOAD_BITS:])]

        # ------------------------------------------------ data-chunk state
        hq = [Signal(hdr_width, name=f"hq{i}") for i in range(queue_len)]      # waiting data headers
        hq_n = Signal(range(queue_len + 1))
        have = Signal(range(CHUNKS_PER_LINE))                                   # chunks of hq[0] so far
        buf = [Signal(CHUNK_BITS, name=f"buf{i}") for i in range(CHUNKS_PER_LINE - 1)]
        owed = Signal(range(CHUNKS_PER_LINE * queue_len + 1))
        m.d.comb += owed.eq(hq_n * CHUNKS_PER_LINE - have)

        all_data = Signal()
        is_ctl = Signal()
        is_proto = Signal()
        hdr = {name: p[offset:offset + width] for name, (offset, width) in HEADER.items()}
        m.d.comb += [
            all_data.eq(owed >= CHUNKS_PER_LINE),
            is_ctl.eq(~all_data & hdr["type"]),
            is_proto.eq(~all_data & ~hdr["type"]),
        ]

        # ------------------------------------------------ protocol flit: every check, in reference order
        checks = [(Cat(*(v for n, v in hdr.items() if n.startswith("rsvd"))).any(), RxError.RESERVED),
                  (hdr["be"], RxError.BE)]
        cands = {ch: [] for ch in self.chans}      # (valid, bits) of each message position, in order
        chunk_slots = []                           # (is G0, slot bits) for slots that can be G0
        counts = {ch: Const(0, 1) for ch in self.chans}   # valid messages in earlier slots
        g0_before = Const(0, 1)
        formats = {(kind, code): f for (d, kind, code), f in SLOT_FORMATS.items() if d is self.direction}
        for s in range(SLOTS):
            kind = "H" if s == 0 else "G"
            bits = p[HEADER_BITS:SLOT_BITS] if s == 0 else p[SLOT_BITS * s:SLOT_BITS * (s + 1)]
            code = hdr[f"slot{s}"]
            mine = [f for (k, _), f in sorted(formats.items()) if k == kind]
            sel = {f.code: Signal(name=f"slot{s}_{f.name}") for f in mine}
            for f in mine:
                m.d.comb += sel[f.code].eq(code == f.code)
            g0 = Cat(*(sel[f.code] for f in mine if f.data)).any()
            checks.append((~Cat(*sel.values()).any(), RxError.FORMAT))
            if s >= 1:
                checks.append(((owed >= s) & ~g0, RxError.ROLLOVER))
            if any(f.data for f in mine):
                # Chunks go to the first line still owed one; none owed -> no header to take it.
                hdrs_before = counts[dat_ch]
                checks.append((g0 & (owed + CHUNKS_PER_LINE * hdrs_before <= g0_before), RxError.NO_DATA))
                chunk_slots.append((g0, bits))
                g0_before = g0_before + g0.as_unsigned()
            slot_valid = {ch: [] for ch in self.chans}
            for f in mine:
                if f.data:
                    continue
                on = sel[f.code]
                if f.used_bits < len(bits):
                    checks.append((on & bits[f.used_bits:].any(), RxError.PADDING))
                taken = {ch: [] for ch in self.chans}
                for item, offset, width in f.fields:
                    v = bits[offset:offset + width]
                    if item == S2M_NDR:
                        checks.append((on & v.any(), RxError.NDR))
                        continue
                    valid = v[0]     # Valid is bit 0 of every message (hdl.protocol)
                    checks.append((on & ~valid & v.any(), RxError.INVALID))
                    illegal = Cat(*(~Cat(*(v[fo:fo + fw] == e for e in legal)).any()
                                    for fo, fw, legal in _enum_fields(item))).any()
                    checks.append((on & valid & illegal, RxError.OPCODE))
                    taken[item].append(valid)
                    n_so_far = counts[item] + _popcount(taken[item])
                    checks.append((on & valid & (n_so_far > MAX_PER_FLIT[item]), RxError.MAX))
                    present = Signal(name=f"slot{s}_{f.name}_{item.name.lower()}_at{offset}")
                    m.d.comb += present.eq(on & valid)
                    cands[item].append((present, v))
                    slot_valid[item].append(present)
            for ch in self.chans:
                if slot_valid[ch]:
                    counts[ch] = counts[ch] + _popcount(slot_valid[ch])
        checks.append((hdr["sz"] != (counts[dat_ch] != 0), RxError.SZ))

        proto_code = Signal(RxError)
        for cond, err in reversed(checks):          # later statements win: the first failing check does
            with m.If(cond):
                m.d.comb += proto_code.eq(err)

        # ------------------------------------------------ control flit
        ctl_hit = {}
        for kind, (fixed, fmask, _, _) in CONTROL_TABLES.items():
            ctl_hit[kind] = Signal(name=f"ctl_is_{kind.replace('.', '_').lower()}")
            keep = ((1 << PAYLOAD_BITS) - 1) & ~fmask
            m.d.comb += ctl_hit[kind].eq((p & keep) == fixed)
        ctl = Signal(self.ctl_layout)
        for i, (kind, (_, _, spec, _)) in enumerate(CONTROL_TABLES.items()):
            with m.If(ctl_hit[kind]):
                m.d.comb += ctl.kind.eq(i)
                for name, pieces in spec.items():
                    m.d.comb += getattr(ctl, name).eq(
                        sum((p[offset:offset + width].as_unsigned() << shift
                             for shift, offset, width in pieces), Const(0, 1)))

        # ------------------------------------------------ verdict
        code = Signal(RxError)
        with m.If(crc_bad):
            m.d.comb += code.eq(RxError.CRC)
        with m.Elif(all_data):
            m.d.comb += code.eq(RxError.NONE)
        with m.Elif(is_ctl):
            with m.If(owed != 0):
                m.d.comb += code.eq(RxError.TYPE)
            with m.Elif(~Cat(*ctl_hit.values()).any()):
                m.d.comb += code.eq(RxError.CONTROL)
        with m.Else():
            m.d.comb += code.eq(proto_code)
        good = Signal()
        m.d.comb += good.eq(code == RxError.NONE)

        # ------------------------------------------------ data chunks of this flit
        n_ch = Signal(range(SLOTS + 1))
        chunks = [Signal(CHUNK_BITS, name=f"chunk{j}") for j in range(SLOTS)]
        with m.If(all_data):
            m.d.comb += n_ch.eq(SLOTS)
            for j in range(SLOTS):
                m.d.comb += chunks[j].eq(p[SLOT_BITS * j:SLOT_BITS * (j + 1)])
        with m.Elif(is_proto):
            m.d.comb += n_ch.eq(_popcount([g for g, _ in chunk_slots]))
            rank = Const(0, 1)
            for g, bits in chunk_slots:            # compact the G0 slots, in slot order
                for j in range(SLOTS):
                    with m.If(g & (rank == j)):
                        m.d.comb += chunks[j].eq(bits)
                rank = rank + g.as_unsigned()
        # ext[q]: chunk q of the head line and then of the next line, buffered chunks first.
        ext = [Signal(CHUNK_BITS, name=f"ext{q}") for q in range(2 * CHUNKS_PER_LINE - 1)]
        with m.Switch(have):
            for h in range(CHUNKS_PER_LINE):
                with m.Case(h):
                    for q, e in enumerate(ext):
                        if q < h:
                            m.d.comb += e.eq(buf[q])
                        elif q - h < SLOTS:
                            m.d.comb += e.eq(chunks[q - h])
        complete = Signal()
        m.d.comb += complete.eq(have + n_ch >= CHUNKS_PER_LINE)
        line = Cat(*ext[:CHUNKS_PER_LINE])

        # ------------------------------------------------ output lanes
        def lane_group(name, n_lanes, width):
            lanes = []
            for i in range(n_lanes):
                fifo = SyncFIFOBuffered(width=width, depth=self.depth)
                m.submodules[f"{name}_lane{i}"] = fifo
                lanes.append(fifo)
            wptr = Signal(range(n_lanes), name=f"{name}_wptr")
            rptr = Signal(range(n_lanes), name=f"{name}_rptr")
            port = getattr(self, name)
            for i, fifo in enumerate(lanes):
                with m.If(rptr == i):
                    m.d.comb += [port.valid.eq(fifo.r_rdy), port.payload.eq(fifo.r_data),
                                 fifo.r_en.eq(port.ready)]
            with m.If(port.valid & port.ready):
                m.d.sync += rptr.eq(Mux(rptr == n_lanes - 1, 0, rptr + 1))
            return lanes, wptr

        lanes = {}
        need = {}
        for name, chan in (("req", req_ch), ("rsp", rsp_ch)):
            group, wptr = lane_group(name, MAX_PER_FLIT[chan], CODECS[chan].width)
            lanes[chan] = group
            n_lanes = len(group)
            rank = Const(0, 1)
            for present, v in cands[chan]:
                slot_idx = wptr + rank
                lane_idx = Mux(slot_idx >= n_lanes, slot_idx - n_lanes, slot_idx)
                for i, fifo in enumerate(group):
                    with m.If(present & (lane_idx == i)):
                        m.d.comb += [fifo.w_data.eq(v), fifo.w_en.eq(commit & good & is_proto)]
                rank = rank + present.as_unsigned()
            n_msgs = Signal(range(len(cands[chan]) + 1), name=f"{name}_count")
            m.d.comb += n_msgs.eq(rank)
            with m.If(commit & good & is_proto):
                m.d.sync += wptr.eq(Mux(wptr + n_msgs >= n_lanes, wptr + n_msgs - n_lanes, wptr + n_msgs))
            need[chan] = (good & is_proto & (n_msgs != 0), Cat(*(f.w_rdy for f in group)).all())

        (dfifo,), _ = lane_group("data", 1, channel_shape(dat_ch).size)
        dmsg = Signal(channel_shape(dat_ch))
        delivers_line = Signal()
        m.d.comb += [
            delivers_line.eq(good & ~is_ctl & complete),
            dmsg.hdr.eq(hq[0]), dmsg.data.eq(line),
            dfifo.w_data.eq(dmsg), dfifo.w_en.eq(commit & delivers_line),
        ]
        need[dat_ch] = (delivers_line, dfifo.w_rdy)
        has_room = Cat(*(~wants | room for wants, room in need.values())).all()
        m.d.comb += retire.eq(held_valid & (self.discard | has_room))   # a discarded flit writes nothing

        # ------------------------------------------------ commit the chunk state
        with m.If(commit & good & ~is_ctl):
            pop = complete.as_unsigned()
            m.d.sync += have.eq(have + n_ch - CHUNKS_PER_LINE * pop)
            for q, b in enumerate(buf):
                m.d.sync += b.eq(Mux(complete, ext[q + CHUNKS_PER_LINE], ext[q]))
            base = hq_n - pop
            for i in range(queue_len):                     # shift out the completed head
                m.d.sync += hq[i].eq(Mux(complete, hq[i + 1], hq[i]) if i + 1 < queue_len else
                                     Mux(complete, 0, hq[i]))
            with m.If(is_proto):
                rank = Const(0, 1)
                for present, v in cands[dat_ch]:           # then append this flit's headers in order
                    for i in range(queue_len):
                        with m.If(present & (base + rank == i)):
                            m.d.sync += hq[i].eq(v)
                    rank = rank + present.as_unsigned()
                m.d.sync += hq_n.eq(base + rank)
            with m.Else():
                m.d.sync += hq_n.eq(base)

        # ------------------------------------------------ per-flit status (registered pulses)
        def credits_of(fields, out, mem):
            # decode_credit gives (protocol, amount) for each 4-bit code: the table is built from it.
            for cls in CREDIT_CLASSES:
                with m.Switch(fields[cls]):
                    for c in range(1 << len(fields[cls])):
                        protocol, amount = decode_credit(c)
                        with m.Case(c):
                            target = out if protocol is CreditProtocol.CACHE else mem
                            m.d.sync += getattr(target, cls).eq(amount)

        m.d.sync += [self.done.eq(retire), self.discarded.eq(retire & self.discard),
                     self.good.eq(commit & good),
                     self.crc_error.eq(commit & crc_bad),
                     self.rule_error.eq(commit & ~crc_bad & ~good),
                     self.error.eq(Mux(commit, code, RxError.NONE)), self.kind.eq(FlitKind.PROTOCOL),
                     self.credits.eq(0), self.mem_credits.eq(0), self.acks.eq(0),
                     self.ctl_valid.eq(0), self.ctl.eq(0)]
        with m.If(commit & good):
            with m.If(all_data):
                m.d.sync += self.kind.eq(FlitKind.ALL_DATA)
            with m.Elif(is_ctl):
                m.d.sync += [self.kind.eq(FlitKind.CONTROL), self.ctl_valid.eq(1), self.ctl.eq(ctl)]
                with m.If(ctl_hit["LLCRD"]):
                    credits_of({cls: getattr(ctl, f"{cls}_crd") for cls in CREDIT_CLASSES},
                               self.credits, self.mem_credits)
                    m.d.sync += self.acks.eq(ctl.acks)
            with m.Else():
                credits_of({cls: hdr[f"{cls}_crd"] for cls in CREDIT_CLASSES}, self.credits, self.mem_credits)
                m.d.sync += self.acks.eq(Mux(hdr["ak"], ACKS_PER_AK, 0))
        with m.If(commit & crc_bad):
            m.d.sync += self.crc_errors.eq(self.crc_errors + 1)
        with m.If(commit & ~crc_bad & ~good):
            m.d.sync += self.rule_errors.eq(self.rule_errors + 1)
        return m
