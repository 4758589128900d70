"""TX packer of the CXL 2.0 68B-flit link layer: per-channel message streams in, sealed flits out.

Bit-exact with the golden model ``models.flit.Packer`` (its module docstring is the specification of
the policy; tests/test_rtl_link_tx.py checks every flit against it).  Every slot format, message
offset, header field, credit code and control-flit field is read at elaboration time from
``models.flit`` (``SLOT_FORMATS``, ``MAX_PER_FLIT``, ``HEADER_FIELDS``, ``CREDIT_VALUES``/
``encode_credit``, ``CONTROL_KINDS``/``encode_control``) and ``hdl.protocol.CODECS``; Python loops
generate the hardware, so a change there changes the RTL with it.

Ports (``FlitPacker(upstream)``; the channels are ``hdl.link.ports.direction_channels(upstream)``):

* ``req``, ``rsp``, ``data``: ``In(channel_stream(chan))``, one message per handshake.  ``data``
  carries a data header and its 64-byte line (``DataMsg``).  ``ready`` is registered (a queue slot
  is free), it does not depend on ``valid``.
* ``crd_req``, ``crd_rsp``, ``crd_data``: ``In(counter_bits)``: credits to return for the channels
  of the *other* direction, added to the pending counters at the clock edge (``Packer.return_credits``).
* ``ack_add``: ``In(counter_bits)``: received good flits to acknowledge, added likewise
  (``Packer.acknowledge``).
* ``pause``: ``In(1)``: while 1 no new flit is decided (a flit already offered stays offered).  For a
  retry engine that must stop new flits while it replays, and for tests that load a whole message mix
  before the first flit, as the golden model assumes.
* ``flit``: ``Out(flit_stream())``, 528 bits: payload 511:0 and CRC 527:512 (the integer of the 66
  little-endian bytes of ``models.flit.seal``).

Timing.  A flit is *decided* in a cycle where ``~flit.valid | flit.ready`` and ``~pause``: the packer
looks at its queues, line buffer and counters as they are at the start of that cycle (anything handed
in during that cycle is not yet visible), and the decision is registered at the clock edge.  So the
flit is offered from the next cycle (``flit.valid`` is a register; the CRC is computed from the
registered payload, combinationally, by ``hdl.link.crc.FlitCRC``).  ``flit.valid`` never waits for
``flit.ready``.  Latency: a message handed in (handshake) in cycle t is queued from cycle t+1, can be
in the flit decided then, and is offered from cycle t+2.  Throughput: one flit per cycle while
``flit.ready`` stays high; each input takes one message per cycle.  Deciding at the moments of the
golden model's ``next_flit`` lets a test drive ``models.flit.Packer`` in lockstep: at each decision
call ``next_flit()``, then push what was accepted and add what was returned in that cycle.

Structure.
* One *window queue* per channel (``depth`` entries, a shift register): the packer must see the first
  up-to-``MAX_PER_FLIT`` queued messages of each channel at once, and take several in one cycle, which
  a FIFO with a single read port cannot do.  Only ``min(depth, MAX_PER_FLIT)`` entries are looked at.
* A *line buffer* of the lines whose data headers were sent and whose chunks are still owed, with the
  index of the next chunk of the first line.  After any flit at most ``MAX_PER_FLIT[DataHdr]`` lines
  are owed (the rollover rule finishes an older line within the flit), so that is its depth.
* A combinational stage evaluates every H-format for slot 0 (greedy fill, score = (carries the
  priority channel, message count), ties to the lower code), then slots 1-3 in turn (G0 while a chunk
  is owed, else the G-format with most messages), the header with Sz/Ak/credits, the all-data flit and
  the LLCRD; the policy picks one (all-data if >= 4 chunks owed, else protocol if anything is queued,
  else LLCRD if credits or acks wait, else nothing) and the output register takes it.
  The slot chain is long (slot 3 depends on what slots 0-2 took); a faster clock would pipeline it.

Policy, in the golden model's words (``Packer.next_flit``): all-data flit when >= 4 chunks are owed;
else a protocol flit when a message or chunk is queued (the priority channel rotates req -> rsp ->
data after each protocol flit; credits: per class the largest of 0, 1, 2, 4, .., 64 not above what
waits; Ak when >= 8 acks wait, taking 8); else an LLCRD (same credit rule, acks up to 255); else
no flit.

Preconditions: the pending counters must not overflow ``counter_bits`` (asserted in simulation).

# Ref: ../shared/reference/cxl_facts.md §2.1 (flit header, Ak = 8 flits, all-data flit and rollover),
#      §2.2 (slot formats, per-flit maxima), §2.4 (credit fields, 10-bit credit counters), §2.5 (LLCRD).
"""

from amaranth.hdl import Assert, Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hdl.link.crc import FlitCRC
from hdl.link.ports import LINE_BITS, PAYLOAD_BITS, channel_shape, channel_stream, direction_channels, flit_stream
from hdl.protocol import CODECS
from models.flit import (CHUNKS_PER_LINE, CONTROL_KINDS, CREDIT_CLASSES, CREDIT_VALUES, DATA_CHANNELS,
                         H_SLOT_BITS, HEADER_BITS, HEADER_FIELDS, MAX_PER_FLIT, S2M_NDR, SLOT_BITS,
                         SLOT_FORMATS, SLOTS, Direction, control, encode_control, encode_credit)

__all__ = ["FlitPacker", "AK_FLITS", "COUNTER_BITS"]

AK_FLITS = 8          # Ref: ../shared/reference/cxl_facts.md §2.1 (Ak acknowledges 8 received flits [S])
COUNTER_BITS = 10     # Ref: ../shared/reference/cxl_facts.md §2.4 (10-bit credit counters, <= 1023 per class)

_PORTS = ("req", "rsp", "data")       # port names, in direction_channels order
_WIDTH = {name: width for name, _, width in HEADER_FIELDS}
_LLCRD_FIELDS = CONTROL_KINDS["LLCRD"][2]
# Largest Acknowledge an LLCRD carries: all ones in its field (pieces are (value bit, flit bit, width)).
_LLCRD_MAX_ACKS = (1 << max(shift + width for shift, _, width in _LLCRD_FIELDS["acks"])) - 1


def _mux_table(m, name, index, table, shape):
    """A Signal equal to ``table[index]`` (a dict of static index -> value); other indices give 0."""
    out = Signal(shape, name=name)
    with m.Switch(index):
        for i, v in table.items():
            with m.Case(i):
                m.d.comb += out.eq(v)
    return out


class FlitPacker(wiring.Component):
    """TX flit packer of one direction (see the module docstring for ports, timing and policy).

    Parameters: ``upstream`` (True: D2H channels, False: H2D), ``depth`` (entries of the req and rsp
    queues), ``data_depth`` (entries of the data queue, each a header and a 64-byte line),
    ``counter_bits`` (width of the pending credit and ack counters and of their add inputs).
    """

    def __init__(self, upstream, *, depth=4, data_depth=4, counter_bits=COUNTER_BITS):
        if not isinstance(upstream, bool):
            raise ValueError(f"upstream={upstream!r}: must be True (D2H) or False (H2D)")
        for name, v in (("depth", depth), ("data_depth", data_depth), ("counter_bits", counter_bits)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name}={v!r}: must be an integer >= 1")
        self.upstream = upstream
        self.direction = Direction.UPSTREAM if upstream else Direction.DOWNSTREAM
        self.channels = direction_channels(upstream)
        assert self.channels == self.direction.channels      # ports.py and the model agree
        self.depths = dict(zip(self.channels, (depth, depth, data_depth)))
        self.counter_bits = counter_bits
        members = {name: In(channel_stream(ch)) for name, ch in zip(_PORTS, self.channels)}
        members.update({f"crd_{k}": In(counter_bits) for k in CREDIT_CLASSES})
        members.update(ack_add=In(counter_bits), pause=In(1), flit=Out(flit_stream()))
        super().__init__(members)

    # ------------------------------------------------------------------ helpers
    def _window(self, ch):
        """How many queued messages of ``ch`` the packer looks at: no flit takes more."""
        return min(self.depths[ch], MAX_PER_FLIT[ch])

    def _slot_msg(self, m, tag, ch, base, r):
        """Position for the ``r``-th message of ``ch`` in a format, ``base`` of that channel already
        taken by earlier slots: (filled?, message bits).  The greedy fill takes the next queued
        message unless the queue is out or the per-flit maximum is reached; both are monotone in r,
        so the r-th position is filled exactly when index base + r passes both checks."""
        entries, count = self._q[ch], self._count[ch]
        limit = self._window(ch)
        bits = [e.hdr.as_value() if ch in DATA_CHANNELS else e.as_value() for e in entries[:limit]]
        width = CODECS[ch].width
        if isinstance(base, int):
            idx = base + r
            if idx >= limit:
                return Const(0, 1), Const(0, width)
            return count > idx, bits[idx]
        ok = ((base + r) < count) & ((base + r) < MAX_PER_FLIT[ch])
        val = _mux_table(m, f"{tag}_{ch.name.lower()}_at{r}", base,
                         {i - r: bits[i] for i in range(r, limit)}, width)
        return ok, val

    def _choose(self, m, name, formats, base, capacity, prio=None):
        """Fill every format of ``formats`` from the queues (``base`` taken already) and pick the best:
        score (carries a message of the priority channel, count) or just the count, ties to the lower
        code.  Returns (code, slot bits, {channel: taken})."""
        chans = self.channels
        positions = max(len(f.fields) for f in formats)
        score_bits = positions.bit_length() + (prio is not None)
        cands = []
        for f in formats:
            tag = f"{name}_{f.name}"
            bits = Signal(capacity, name=f"{tag}_bits")
            ordinal = dict.fromkeys(chans, 0)
            oks = {ch: [] for ch in chans}
            for item, offset, width in f.fields:
                if item == S2M_NDR:                # CXL.mem position: always sent as zeros
                    continue
                r = ordinal[item]
                ordinal[item] += 1
                ok, val = self._slot_msg(m, tag, item, base[item], r)
                m.d.comb += bits[offset:offset + width].eq(Mux(ok, val, 0))
                oks[item].append(ok)
            taken = {}
            for ch in chans:
                taken[ch] = Signal(range(len(oks[ch]) + 1), name=f"{tag}_{ch.name.lower()}_n")
                m.d.comb += taken[ch].eq(sum(ok.as_unsigned() for ok in oks[ch]) if oks[ch] else 0)
            n = sum(taken.values())
            if prio is None:
                score = n
            else:                                  # the priority flag outranks any count
                has_prio = Cat(*[(prio == i) & (taken[ch] != 0) for i, ch in enumerate(chans)]).any()
                score = Cat(n.as_unsigned()[:positions.bit_length()], has_prio)
            s = Signal(score_bits, name=f"{tag}_score")
            m.d.comb += s.eq(score)
            cands.append((f, bits, taken, s))
        # Arg-max in code order: a later format replaces the best only with a strictly higher score.
        sel = Const(0, range(len(cands)))
        best = cands[0][3]
        for i, (_, _, _, s) in enumerate(cands[1:], 1):
            better = Signal(name=f"{name}_better{i}")
            m.d.comb += better.eq(s > best)
            nsel = Signal(range(len(cands)), name=f"{name}_sel{i}")
            nbest = Signal(score_bits, name=f"{name}_best{i}")
            m.d.comb += [nsel.eq(Mux(better, i, sel)), nbest.eq(Mux(better, s, best))]
            sel, best = nsel, nbest
        code = _mux_table(m, f"{name}_code", sel, {i: f.code for i, (f, *_) in enumerate(cands)}, _WIDTH["slot0"])
        bits = _mux_table(m, f"{name}_bits", sel, {i: b for i, (_, b, _, _) in enumerate(cands)}, capacity)
        taken = {ch: _mux_table(m, f"{name}_{ch.name.lower()}_taken", sel,
                                {i: t[ch] for i, (_, _, t, _) in enumerate(cands)}, range(MAX_PER_FLIT[ch] + 1))
                 for ch in self.channels}
        return code, bits, taken

    # ------------------------------------------------------------------ elaborate
    def elaborate(self, platform):
        m = Module()
        chans = self.channels
        data_ch = chans[2]
        ports = dict(zip(chans, (self.req, self.rsp, self.data)))
        mine = sorted((f for (d, _, _), f in SLOT_FORMATS.items() if d is self.direction), key=lambda f: f.code)
        h_formats = [f for f in mine if f.kind == "H"]
        g_formats = [f for f in mine if f.kind == "G" and not f.data]
        g0 = SLOT_FORMATS[self.direction, "G", 0]
        chunk_bits = SLOT_BITS                     # a data chunk fills one G-slot
        cpl = CHUNKS_PER_LINE

        # -------------------------------------------------------------- input window queues
        self._q, self._count = {}, {}
        pop = {}
        for ch, pname in zip(chans, _PORTS):
            depth, port = self.depths[ch], ports[ch]
            entries = [Signal(channel_shape(ch), name=f"{pname}_q{i}") for i in range(depth)]
            count = Signal(range(depth + 1), name=f"{pname}_count")
            pop[ch] = Signal(range(self._window(ch) + 1), name=f"{pname}_pop")
            self._q[ch], self._count[ch] = entries, count
            m.d.comb += port.ready.eq(count != depth)
            push = Signal(name=f"{pname}_push")
            m.d.comb += push.eq(port.valid & port.ready)
            with m.Switch(pop[ch]):
                for k in range(self._window(ch) + 1):
                    with m.Case(k):
                        for i in range(depth - k):       # shift the survivors to the front
                            if k:
                                m.d.sync += entries[i].eq(entries[i + k])
                        for i in range(depth):           # the new message goes behind them
                            with m.If(push & (count == i + k)):
                                m.d.sync += entries[i].eq(port.payload)
            m.d.sync += count.eq(count - pop[ch] + push)

        # -------------------------------------------------------------- line buffer (chunks owed)
        lq_depth = MAX_PER_FLIT[data_ch]
        lq = [Signal(LINE_BITS, name=f"line{i}") for i in range(lq_depth)]
        nlines = Signal(range(lq_depth + 1))
        cidx = Signal(range(cpl))                  # chunks of line0 already sent
        owed = Signal(range(lq_depth * cpl + 1))
        m.d.comb += owed.eq(nlines * cpl - cidx)
        # The "virtual" line sequence: owed lines, then the lines of the queued data headers in queue
        # order (a data header taken in this flit appends its line behind the owed ones).
        data_entries = self._q[data_ch][:self._window(data_ch)]
        max_done = (cpl - 1 + SLOTS) // cpl        # whole lines one flit can finish
        vlines = []
        for v in range(lq_depth + max_done):
            vl = Signal(LINE_BITS, name=f"vline{v}")
            m.d.comb += vl.eq(lq[v] if v < lq_depth else 0)
            for nl in range(min(v, lq_depth) + 1):
                with m.If(nlines == nl):
                    m.d.comb += vl.eq(data_entries[v - nl].data if v - nl < len(data_entries) else 0)
            vlines.append(vl)

        # Chunk x of the virtual sequence: chunk x % cpl of line x // cpl.
        max_x = (cpl - 1) + SLOTS                  # cidx + chunks one flit can take
        def chunk_at(name, x):
            return _mux_table(m, name, x, {i: vlines[i // cpl][(i % cpl) * chunk_bits:(i % cpl + 1) * chunk_bits]
                                           for i in range(max_x)}, chunk_bits)

        # -------------------------------------------------------------- pending credits and acks
        crd = {k: Signal(self.counter_bits, name=f"pending_{k}_crd") for k in CREDIT_CLASSES}
        acks = Signal(self.counter_bits)
        crd_step, crd_code = {}, {}
        for k in CREDIT_CLASSES:
            # Index of the largest CREDIT_VALUES entry not above what waits (the values ascend).
            idx = Signal(range(len(CREDIT_VALUES)), name=f"{k}_crd_idx")
            m.d.comb += idx.eq(sum((crd[k] >= v).as_unsigned() for v in CREDIT_VALUES[1:]))
            crd_step[k] = _mux_table(m, f"{k}_crd_step", idx, dict(enumerate(CREDIT_VALUES)),
                                     range(max(CREDIT_VALUES) + 1))
            crd_code[k] = _mux_table(m, f"{k}_crd_code", idx,
                                     {i: encode_credit(v) for i, v in enumerate(CREDIT_VALUES)}, _WIDTH[f"{k}_crd"])

        # -------------------------------------------------------------- protocol flit
        prio = Signal(range(len(chans)))           # index into chans; rotates per protocol flit
        counts = dict.fromkeys(chans, 0)           # messages taken so far in this flit
        code0, bits0, taken0 = self._choose(m, "s0", h_formats, counts, H_SLOT_BITS, prio)
        counts = taken0
        codes, slot_bits = [code0], [bits0]
        g_used = Const(0, range(SLOTS))            # G0 slots so far in this flit
        for s in range(1, SLOTS):
            # Owed now: at the flit's start, plus the lines of headers taken so far, minus chunks sent.
            is_g0 = Signal(name=f"s{s}_g0")
            m.d.comb += is_g0.eq((owed + cpl * counts[data_ch] - g_used) != 0)
            code_g, bits_g, taken_g = self._choose(m, f"s{s}", g_formats, counts, SLOT_BITS)
            chunk = chunk_at(f"s{s}_chunk", cidx + g_used)
            code, bits = Signal(_WIDTH[f"slot{s}"], name=f"s{s}_code"), Signal(SLOT_BITS, name=f"s{s}_slot")
            m.d.comb += [code.eq(Mux(is_g0, g0.code, code_g)), bits.eq(Mux(is_g0, chunk, bits_g))]
            codes.append(code)
            slot_bits.append(bits)
            nxt = {}
            for ch in chans:
                nxt[ch] = Signal(range(MAX_PER_FLIT[ch] + 1), name=f"s{s}_{ch.name.lower()}_total")
                m.d.comb += nxt[ch].eq(counts[ch] + Mux(is_g0, 0, taken_g[ch]))
            counts = nxt
            ng = Signal(range(SLOTS), name=f"s{s}_g_used")
            m.d.comb += ng.eq(g_used + is_g0)
            g_used = ng

        ak = Signal()
        m.d.comb += ak.eq(acks >= AK_FLITS)
        header_values = {"type": 0, "ak": ak, "sz": counts[data_ch] != 0,
                         **{f"slot{s}": codes[s] for s in range(SLOTS)},
                         **{f"{k}_crd": crd_code[k] for k in CREDIT_CLASSES}}
        proto = Signal(PAYLOAD_BITS)
        for fname, offset, width in HEADER_FIELDS:           # fields not named stay 0 (reserved, BE)
            if fname in header_values:
                m.d.comb += proto[offset:offset + width].eq(header_values[fname])
        m.d.comb += proto[HEADER_BITS:SLOT_BITS].eq(bits0)
        for s in range(1, SLOTS):
            m.d.comb += proto[SLOT_BITS * s:SLOT_BITS * (s + 1)].eq(slot_bits[s])

        # -------------------------------------------------------------- all-data flit
        alldata = Signal(PAYLOAD_BITS)
        for s in range(SLOTS):
            m.d.comb += alldata[SLOT_BITS * s:SLOT_BITS * (s + 1)].eq(chunk_at(f"ad{s}_chunk", cidx + s))

        # -------------------------------------------------------------- LLCRD control flit
        llcrd_acks = Signal(range(_LLCRD_MAX_ACKS + 1))
        m.d.comb += llcrd_acks.eq(Mux(acks > _LLCRD_MAX_ACKS, _LLCRD_MAX_ACKS, acks))
        llcrd = Signal(PAYLOAD_BITS)
        llcrd_values = {"acks": llcrd_acks, **{f"{k}_crd": crd_code[k] for k in CREDIT_CLASSES}}
        assert set(llcrd_values) == set(_LLCRD_FIELDS), "LLCRD fields changed in models.flit"
        m.d.comb += llcrd.eq(encode_control(control("LLCRD")))   # Type, LLCTRL, SubType; fields 0
        for fname, pieces in _LLCRD_FIELDS.items():
            for shift, offset, width in pieces:
                m.d.comb += llcrd[offset:offset + width].eq(llcrd_values[fname][shift:shift + width])

        # -------------------------------------------------------------- decision
        busy = Signal()                                      # a message or chunk is queued
        is_alldata, is_proto, is_llcrd = Signal(), Signal(), Signal()
        m.d.comb += [
            busy.eq(Cat(*[self._count[ch] != 0 for ch in chans]).any() | (owed != 0)),
            is_alldata.eq(owed >= cpl),
            is_proto.eq(busy & ~is_alldata),
            is_llcrd.eq(~busy & (Cat(acks != 0, *[crd[k] != 0 for k in CREDIT_CLASSES]).any())),
        ]
        out_valid = Signal()
        out_payload = Signal(PAYLOAD_BITS)
        decide = Signal()
        m.d.comb += decide.eq((~out_valid | self.flit.ready) & ~self.pause)

        with m.If(decide):
            m.d.sync += [out_valid.eq(is_alldata | is_proto | is_llcrd),
                         out_payload.eq(Mux(is_alldata, alldata, Mux(is_proto, proto, llcrd)))]
        with m.Elif(self.flit.ready):
            m.d.sync += out_valid.eq(0)                      # transferred while paused
        for ch in chans:
            m.d.comb += pop[ch].eq(Mux(decide & is_proto, counts[ch], 0))
        with m.If(decide & is_proto):
            m.d.sync += prio.eq(Mux(prio == len(chans) - 1, 0, prio + 1))

        # Line buffer: x_end chunks of the virtual sequence are consumed; whole lines leave the front.
        g_total = Signal(range(SLOTS + 1))
        new_lines = Signal(range(MAX_PER_FLIT[data_ch] + 1))
        m.d.comb += [g_total.eq(Mux(decide & is_alldata, SLOTS, Mux(decide & is_proto, g_used, 0))),
                     new_lines.eq(Mux(decide & is_proto, counts[data_ch], 0))]
        x_end = Signal(range(cpl + SLOTS))
        m.d.comb += x_end.eq(cidx + g_total)
        done = _mux_table(m, "lines_done", x_end, {x: x // cpl for x in range(cpl + SLOTS)}, range(max_done + 1))
        m.d.sync += [cidx.eq(_mux_table(m, "cidx_next", x_end, {x: x % cpl for x in range(cpl + SLOTS)}, range(cpl))),
                     nlines.eq(nlines + new_lines - done)]
        for i in range(lq_depth):
            m.d.sync += lq[i].eq(_mux_table(m, f"line{i}_next", done,
                                            {d: vlines[i + d] for d in range(max_done + 1)}, LINE_BITS))

        # Counters: what the decided flit returns leaves, what the inputs return arrives.
        sends_crd = Signal()
        m.d.comb += sends_crd.eq(decide & (is_proto | is_llcrd))
        adds = {k: getattr(self, f"crd_{k}") for k in CREDIT_CLASSES}
        for k in CREDIT_CLASSES:
            nxt = crd[k] + adds[k] - Mux(sends_crd, crd_step[k], 0)
            m.d.sync += [crd[k].eq(nxt),
                         Assert(nxt < (1 << self.counter_bits), f"pending {k} credits overflow counter_bits")]
        acks_next = (acks + self.ack_add - Mux(decide & is_proto & ak, AK_FLITS, 0)
                     - Mux(decide & is_llcrd, llcrd_acks, 0))
        m.d.sync += [acks.eq(acks_next),
                     Assert(acks_next < (1 << self.counter_bits), "pending acks overflow counter_bits"),
                     Assert(nlines + new_lines - done <= lq_depth, "line buffer overflow")]

        # -------------------------------------------------------------- output
        m.submodules.crc = crc = FlitCRC()
        m.d.comb += [crc.payload.eq(out_payload),
                     self.flit.valid.eq(out_valid),
                     self.flit.payload.eq(Cat(out_payload, crc.crc))]
        return m
