"""RX unpacker of the CXL 2.0 68B-flit link layer: checked flits in, CXL.cache messages out.

Behaviourally identical to ``models.flit.Unpacker`` (the spec): the same CRC, the same rules in the same
order, the same messages, credits, acks and control flits.  Every slot format, offset, width, opcode
set, header field, control-flit layout and credit code is read at elaboration time from the
definitions (``cxl.flit``: ``SLOT_FORMATS``, ``HEADER_FIELDS``, ``MAX_PER_FLIT``; ``cxl.control``:
``CONTROL_KINDS``/``encode_control``; ``cxl.credits``: ``decode_credit``; ``cxl.messages``: ``CODECS``);
nothing is restated here.

``FlitUnpacker(upstream)``: ``upstream=True`` receives D2H flits (the host's receiver), ``False`` H2D
flits (the device's receiver).

Ports
-----
``flit``: ``In(flit_stream())``, 528 bits: payload 511:0, CRC 527:512 (``hdl.link.ports``).
``discard``: ``In(1)``, drop the held flit (see "Discard" below); tie to 0 when unused.
``req``, ``rsp``, ``data``: ``Out(channel_stream(chan))`` for the direction's three channels
    (``direction_channels(upstream)``); ``data`` carries a ``DataMsg`` (header + 64-byte line), sent once
    the line's fourth chunk has arrived, in header order.  Per channel the order is the reference's.
Per retired flit, from registers (a value gated by a registered pulse, see "per-flit status" in
``elaborate``), high for exactly **one cycle** (the cycle after the retiring edge):
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
                    0 unless ``good``;
    ``acks_if_good`` the same count from the register behind ``acks``, whatever the verdict: a user that
                    works out both outcomes ahead of ``good`` (the retry rules' occupancy) reads it, so
                    the verdict comes last in its logic;
    ``ctl_valid``   a good control flit; ``ctl.kind`` indexes ``CONTROL_KIND_NAMES`` (the reference's
                    ``CONTROL_KINDS`` keys, in order) and ``ctl.<field>`` holds every field any control
                    flit has (the union by name; fields the kind lacks are 0).
    ``overflow``    (``stall=False`` only, else 0) the flit carried a message its lane had no room for:
                    the sender broke its credits, and that message is lost (see "Never waiting for room";
                    formed in the move stage from its registers and the lanes' levels, not a register).
Counters (32 bits, wrap around): ``crc_errors``, ``rule_errors`` (the two error classes).

Structure, timing, throughput
-----------------------------
An input register holds one flit (``flit.ready`` = register empty or retiring this cycle).  The held
flit is retired at the next edge only when every output channel it writes has room in all its lanes
(a simple, slightly conservative condition that does not depend on which lanes it would use); a bad flit
(CRC or rule) is retired at once and changes nothing but the status outputs and counters, so the
unpacker state is exactly as before it (as in the reference).  Retiring writes the messages into
per-channel output queues and updates the data-chunk state at one edge, so a flit is never partly
delivered.

Pipelining for Fmax (docs/link_layer.md, "RTL pipelining"), without changing any timing above: all
that depends on a flit's bits alone is *pre-decoded* from ``flit.payload`` in the cycle it is offered
and registered together with it (``_predecode``): the CRC check, the slot formats, every content-only
rule (per run of such rules between the two state-dependent ones, ROLLOVER and NO_DATA, the first
failing one's code), the messages of each channel compacted in order (message k of the flit), their
counts, which G0 slot each chunk of the flit comes from, the control-flit decode, and the verdict for
each chunks-owed count.  The compaction chooses, for message k of the flit, the one field of a slot's
format that carries it (the slot has that format, more than i messages of the channel, and k - i
before it), one bit per slot, format and field, and takes that field's bits.  The per-slot message
counts are summed per slot (one format per slot is selected), not through a chain over every message
position.  The three checks that need the data-chunk state
(ROLLOVER, DATA_SLOT, NO_DATA) only need the chunks owed, which a protocol flit meets as
0..CHUNKS_PER_LINE-1, so the flit's whole verdict is pre-decoded once per owed value.  After the register
only the chunk-state part remains: ``owed`` and "all-data due" are registers of their own, ``good`` is
``owed`` selecting one of the pre-decoded verdicts (the CRC alone for an all-data flit), the first
failing check's code is found from the segments' codes and ``owed`` (a priority chain that only feeds
the ``error`` register), and message k goes to lane (wptr + k) mod lanes.

Early pre-decode
----------------
``FlitUnpacker(upstream, early=True)`` splits the pre-decode across a register its caller already has
in front of ``flit`` (``hdl.link.port.LinkPort``'s pre-check stage; ``RegisteredFlitUnpacker`` below for
the unpacker alone).  Two more inputs: ``early_payload``, the flit that register takes at the next edge,
and ``early_load``, its load enable; the caller must load its register with exactly these (the flit
then offered on ``flit.payload`` is always the one ``early_payload`` carried when ``early_load`` was last
high).  Two more outputs hand the caller verdicts it needs for that same flit, so it need not work
them out again: ``early_crc_bad`` (its CRC does not match) and ``early_ctl_hits`` (one bit per kind of
``CONTROL_KIND_NAMES``, in that order: the flit is that control flit), valid from the edge at which
the register takes the flit and held with it, each a few gates after those registers
(``early_crc_bad``: the XOR of the CRC's partials, the flit's CRC field folded into the first, and
whether it is 0; ``early_ctl_hits``: the AND of a kind's compares over the parts of the payload).  The
first half of the pre-decode, slot by slot (the slot formats, each slot's message counts and the counts
before it but the last slot's, every check that reads one slot's bits, the CRC of each quarter of the
payload, the flit's CRC field XORed into the first quarter's, the control-flit compares of each quarter,
which field of which slot is message k of each channel), is worked out
from ``early_payload`` into registers loaded on ``early_load``; the second half (the flit's totals, the
CRC's XOR and its test for 0, the per-flit rules, the first failing check, which message goes to which
lane) from those registers and ``flit.payload`` in the cycle the flit is offered, as before.  The CRC is
linear (no initial value, no final XOR: the CRC of the whole payload is the XOR of the CRCs of its
parts, each computed with the others' bits zero), which is what lets it split.  So the longest path
from a flit bit to the pre-decode's registers is cut in two (``_predecode``) without a cycle more; the
ports, timing and behaviour above are unchanged.
``early=False`` (the default) does both halves in the cycle the flit is offered.

Each request/response channel has ``MAX_PER_FLIT[chan]`` lanes (``LaneFIFO``, the cycles of ``SyncFIFOBuffered``
with its memory written ahead of the push; ``SyncFIFOBuffered`` itself for ``depth`` 1; ``depth`` entries
each) written round-robin, so one flit can hand over all its messages of a channel at one edge; the
output reads the lanes in the same rotation, which keeps the reference order.  At most one line can
complete per flit (checked at elaboration), so the data channel has one lane.  Data headers wait in a
small queue (``1 + MAX_PER_FLIT[data]`` entries: a protocol flit starts with at most 3 chunks owed, i.e.
one waiting header) with a chunk count and a buffer for the first three chunks of the head line.

Throughput: one flit per cycle while the outputs keep up (``done`` every cycle).  Latency: a flit
accepted at clock edge *n* is retired at edge *n+1*, so its status pulses are high between edges *n+1*
and *n+2*; its messages are valid on the output streams from edge *n+2* (the FIFO output register), or
*n+3* with ``stall=False`` (the move stage, below).
Backpressure never hangs: with full outputs, the held flit waits and ``flit.ready`` is low (with
``stall=True``; see "Never waiting for room" for the other choice).

Never waiting for room (``stall=False``)
----------------------------------------
A CXL receiver cannot hold the wire back: the sender spends a credit per message and the receiver
returns it when its consumer takes the message, so a sender whose credits equal what the receiver
buffers never sends a message the receiver has no room for (``hdl.link.port.default_credits``).
``FlitUnpacker(upstream, stall=False)`` relies on that: the held flit retires at the next edge whatever
the lanes hold, ``flit.ready`` is constant 1, and the input register and every pre-decode register load
every cycle, so none of their ~2 000 clock enables hangs on the room check (that loop, lane level ->
room -> ``retire`` -> ``flit.ready`` -> the enables, bounded the link end's Fmax: docs/link_layer.md,
"RTL pipelining").  Each lane then counts all ``depth`` of its entries as room (``LaneFIFO(exact=True)``:
a 2-deep ``SyncFIFOBuffered`` may refuse a push for a cycle while holding one entry).  A good flit with a
message for a lane that is full is a sender that broke its credits: the message is lost, and
``overflow`` pulses with the flit's status (the port turns it into a link error and stops).  With
``stall=True`` (the default) the held flit waits for room as described above and ``overflow`` is 0.

Messages per channel are written round-robin over the lanes and read in the same rotation, so with
``n`` lanes of ``depth`` entries no lane is full while the channel holds fewer than ``n * depth``
messages that the consumer has not taken: credits of ``n * depth`` are exactly enough.

The move stage (``stall=False`` only).  The verdict's cycle keeps only the chunk-state counts (the
chunks owed, ``have``, the number of waiting headers), which the next flit's verdict needs; the data
moves of a retired flit -- its messages into the lanes, its chunks into the chunk buffer, a completed
line into the data lane, its data headers into the waiting-header queue -- happen in the next cycle,
from registers loaded every cycle (no enable) with what the verdict decided and the data it moves.
So the ~1 000 register bits and lane writes of the data path no longer hang on ``good`` (all_data ->
``good`` -> the chunk buffer's enable was the link end's routed critical path, a net across the die);
a flit's messages reach the lanes one cycle later, in the cycle of its status pulses, and
``overflow`` is formed there.  With ``stall=True`` the room check must see the lanes as the retiring
flit finds them, so its moves stay in the verdict's cycle.

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

# Ref: docs/sources.md §2.1 (528-bit flit, header fields, Ak = 8 flits, all-data
#      flit and rollover), §2.2 (slot formats and per-flit maxima), §2.3 (CRC), §2.4 (credit fields),
#      §2.5 (control flits).
"""

from amaranth.hdl import Assert, Cat, Const, Module, Mux, Shape, Signal, Value
from amaranth.lib import data, enum, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from hdl.link.crc import FlitCRC
from hdl.link.lane_fifo import LaneFIFO
from hdl.link.ports import (FLIT_BITS, PAYLOAD_BITS, channel_shape, channel_stream,
                            direction_channels, flit_stream)
from cxl.messages import CODECS
from cxl.control import CONTROL_KINDS, ControlFlit, encode_control
from cxl.credits import CREDIT_CLASSES, CreditProtocol, decode_credit
from cxl.flit import (CHUNK_BYTES, CHUNKS_PER_LINE, HEADER_FIELDS, MAX_PER_FLIT, PAYLOAD_BYTES, S2M_NDR, SLOT_BYTES,
                      SLOT_FORMATS, Direction)

__all__ = ["RxError", "FlitKind", "CONTROL_KIND_NAMES", "FlitUnpacker", "RegisteredFlitUnpacker"]


class RxError(enum.Enum, shape=5):
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
    DATA_SLOT = 15   # the next slot for data after a Data Header is not G0 ("next slot for data")
    PACKING = 16     # a slot's messages of one channel are not tightly packed ("tightly packed")
    MDH = 17         # MDH slot with < 2 Data Headers, or a second Data Header outside it ("MDH", "DataHeaders")


class FlitKind(enum.Enum, shape=2):
    PROTOCOL = 0
    ALL_DATA = 1
    CONTROL = 2


# Control kinds by index: Amaranth enums cannot be built from a table, so ``ctl.kind`` is an index.
CONTROL_KIND_NAMES = tuple(CONTROL_KINDS)

# ---------------------------------------------------------------- sizes, all from cxl.flit
SLOTS = PAYLOAD_BYTES // SLOT_BYTES
CRC_PARTS = 4                                  # the CRC's partials staged by the first half of the pre-decode
CTL_PARTS = 4                                  # the control-flit compares' parts, staged likewise
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
    (Ref: docs/sources.md §2.1, Ak = 8 flits [S]; cxl.control CONTROL_KINDS, Acknowledge[3] at bit 2)."""
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


# ---------------------------------------------------------------- small counts as thermometer codes
# The pre-decode counts messages per channel (before a slot, before a message, in the flit) and G0 slots.
# The counts are tiny (at most a few), and as sums they become carry chains whose hops between LUTs cost
# more than the logic itself (the routed critical path ran through three of them).  So a count is a
# thermometer code t, t[j - 1] = (count >= j) for j = 1..len(t), built from AND/OR only; a code saturates at
# its ``cap`` (t[cap - 1] then means count >= cap), which keeps every question up to ``cap`` exact.

def _ge(t, j):
    """count >= j, for 0 <= j (exact for j <= the code's cap)."""
    if j <= 0:
        return Const(1, 1)
    return t[j - 1] if j <= len(t) else Const(0, 1)


def _is(t, j):
    """count == j (for j = the cap: count >= cap)."""
    return _ge(t, j) & ~_ge(t, j + 1)


def _code(m, bits):
    """A code held in a signal: every use then reads the signal, not a copy of the expression (which
    nested sums would repeat many times over, in the simulator's generated code above all)."""
    if not bits:
        return []
    sig = Signal(len(bits))
    m.d.comb += sig.eq(Cat(*bits))
    return [sig[j] for j in range(len(bits))]


def _therm_add(m, a, b, cap):
    """The code of the sum of two codes, saturated at ``cap``: sum >= j iff a >= i and b >= j - i for an i."""
    out = []
    for j in range(1, min(cap, len(a) + len(b)) + 1):
        terms = [_ge(a, j) if j <= len(a) else None, _ge(b, j) if j <= len(b) else None]
        terms += [a[i - 1] & b[j - i - 1] for i in range(max(1, j - len(b)), min(j - 1, len(a)) + 1)]
        out.append(_or([t for t in terms if t is not None], 1))
    return _code(m, out)


def _therm_sum(m, codes, cap):
    """The code of the sum of ``codes``, saturated at ``cap``: a balanced tree of sums."""
    codes = list(codes)
    if not codes:
        return []
    while len(codes) > 1:
        codes = [_therm_add(m, codes[i], codes[i + 1], cap) if i + 1 < len(codes) else codes[i]
                 for i in range(0, len(codes), 2)]
    return codes[0][:cap]


def _therm(m, bits, cap):
    """The code of the number of set ``bits`` (1-bit values), saturated at ``cap``."""
    return _therm_sum(m, [[b] for b in bits], cap)


def _therm_select(m, choices, cap):
    """The code of whichever of (selected, code) is selected (at most one is): an element-wise OR."""
    n = min(cap, max([len(t) for _, t in choices] + [0]))
    return _code(m, [_or([sel & t[j] for sel, t in choices if j < len(t)], 1) for j in range(n)])


def _therm_value(t, width):
    """The count as a binary number (``cap`` for a saturated code)."""
    return _or([Mux(_is(t, j), j, 0) for j in range(1, len(t) + 1)], width)


def _or(values, width):
    """Bitwise OR of ``values`` as a balanced tree (0 when empty)."""
    values = list(values)
    if not values:
        return Const(0, width)
    while len(values) > 1:
        values = [values[i] | values[i + 1] if i + 1 < len(values) else values[i]
                  for i in range(0, len(values), 2)]
    return values[0]


class FlitUnpacker(wiring.Component):
    """RX unpacker; see the module docstring for ports, timing and error handling."""

    def __init__(self, upstream, *, depth=4, early=False, stall=True):
        if not isinstance(upstream, bool):
            raise ValueError(f"upstream={upstream!r}: must be True (D2H flits) or False (H2D flits)")
        if not isinstance(stall, bool):
            raise ValueError(f"stall={stall!r}: must be True (a flit waits for lane room) or False (it never "
                             "waits: the sender's credits keep the lanes from overflowing)")
        if not isinstance(early, bool):
            raise ValueError(f"early={early!r}: must be True (the first half of the pre-decode from "
                             "early_payload, a cycle ahead) or False")
        if not isinstance(depth, int) or depth < 1:
            raise ValueError(f"depth={depth!r}: each output lane FIFO needs at least 1 entry")
        if CHUNK_BITS != SLOT_BITS:
            raise ValueError(f"CHUNK_BYTES={CHUNK_BYTES}: a data chunk must fill a G-slot ({SLOT_BYTES} bytes)")
        # At most one line completes per flit: the head line has <= CHUNKS_PER_LINE - 1 chunks and a
        # flit <= SLOTS chunks.  The single data lane below relies on it.
        # NO_DATA is pre-decoded as "no data header in an earlier slot and owed <= G0 slots before",
        # which needs the G0 slots before any slot (<= SLOTS - 2) to stay below CHUNKS_PER_LINE.
        if SLOTS - 2 >= CHUNKS_PER_LINE:
            raise ValueError(f"CHUNKS_PER_LINE={CHUNKS_PER_LINE}, SLOTS={SLOTS}: unsupported")
        if (CHUNKS_PER_LINE - 1 + SLOTS) // CHUNKS_PER_LINE != 1:
            raise ValueError(f"CHUNKS_PER_LINE={CHUNKS_PER_LINE}, SLOTS={SLOTS}: more than one line could "
                             "complete per flit, which this design does not support")
        self.upstream = upstream
        self.depth = depth
        self.early = early
        self.stall = stall
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
            "acks_if_good": Out(range(1 << ACK_BITS)),
            "ctl_valid": Out(1),
            "ctl": Out(self.ctl_layout),
            "crc_errors": Out(32),
            "rule_errors": Out(32),
            "overflow": Out(1),
            **({"early_payload": In(FLIT_BITS), "early_load": In(1),
                "early_crc_bad": Out(1), "early_ctl_hits": Out(len(CONTROL_TABLES))} if early else {}),
        })

    # ------------------------------------------------ stage 1: pre-decode of the offered flit
    def _predecode(self, m, pa, pb, stage):
        """Everything about a flit that depends on its bits alone (not on the data-chunk state); ``elaborate``
        registers it together with the flit.  Returns {name: signal}.  The proto checks are split into
        *segments*: runs of content-only checks between the checks that need the chunk state (ROLLOVER,
        DATA_SLOT, NO_DATA); per segment the first failing check's code is found here, so the verdict after
        the register only walks the segments.

        Built in two halves (see "Early pre-decode" in the module docstring).  The first reads the flit
        ``pa`` and works out, slot by slot, the slot formats, each slot's message counts, the messages
        before each slot, every check of one slot's bits (the *leaves*: format, padding, NDR, invalid
        message, opcode, packing, an MDH slot's count, and the header's reserved and BE bits) with their
        OR per slot, the CRC check and the control-flit matches.  ``stage(name, value)`` hands each of
        these to the second half in a signal of its own: a wire when the two halves run in one cycle, a
        register loaded a cycle ahead when they do not.  The second half reads the flit ``pb`` for its
        message and control fields (raw bits, selected by the staged slot formats) and combines: the
        flit's totals, the MAX, MDH and SZ rules, the first failing check per segment, the verdict per
        chunks-owed count, which message goes to which lane and which slot each chunk comes from."""
        req_ch, rsp_ch, dat_ch = self.chans
        out = {}

        def keep(name, value, shape=None):
            sig = Signal(shape if shape is not None else len(Value.cast(value)), name=f"pre_{name}")
            m.d.comb += sig.eq(value)
            out[name] = sig
            return sig

        def stage_codes(name, codes):
            """Hands {channel: thermometer code} to the second half, code by code in channel order."""
            flat = [b for ch in self.chans for b in codes[ch]]
            if not flat:
                return {ch: [] for ch in self.chans}
            sig = stage(name, Cat(*flat))
            staged, i = {}, 0
            for ch in self.chans:
                staged[ch] = [sig[j] for j in range(i, i + len(codes[ch]))]
                i += len(codes[ch])
            return staged

        a, p = pa[:PAYLOAD_BITS], pb[:PAYLOAD_BITS]
        # The CRC in two halves (hdl/link/crc.py, ``parts``): the CRC of each part of the payload in the
        # first half, the flit's CRC field XORed into the first part's (one more input of its XOR
        # tree), and in the second half the XOR of the parts, which is 0 exactly when the CRC matches
        # (both from staged values: ``early_crc_bad`` reads only the first half's registers).  Folding
        # the field in takes the compare's XOR out of the second half: four-input XORs, then the OR.
        m.submodules.crc = crc = FlitCRC(parts=CRC_PARTS)
        m.d.comb += crc.payload.eq(a)
        crc_bits = len(pa) - PAYLOAD_BITS
        folded = [crc.partials[0] ^ pa[PAYLOAD_BITS:]] + [crc.partials[k] for k in range(1, CRC_PARTS)]
        crc_parts = data.ArrayLayout(crc_bits, CRC_PARTS)(stage("crc_parts", Cat(*folded)))
        keep("crc_bad", FlitCRC.combine(m, crc_parts, name="pre_crc") != 0)
        hdr_a = {name: a[offset:offset + width] for name, (offset, width) in HEADER.items()}
        hdr = {name: p[offset:offset + width] for name, (offset, width) in HEADER.items()}

        def slot_bits(q, s):
            return q[HEADER_BITS:SLOT_BITS] if s == 0 else q[SLOT_BITS * s:SLOT_BITS * (s + 1)]

        # ---- first half: the leaves, slot by slot, and the message counts
        leaves, leaf_slot = [], []                 # the leaf conditions (from ``pa``) and their slot (-1: header)

        def leaf(cond, slot):
            leaves.append(cond)
            leaf_slot.append(slot)
            return ("leaf", len(leaves) - 1)

        # Protocol-flit checks in reference order: ("c", condition or a leaf, code) and the state-check markers.
        items = [("c", leaf(Cat(*(v for n, v in hdr_a.items() if n.startswith("rsvd"))).any(), -1), RxError.RESERVED),
                 ("c", leaf(hdr_a["be"], -1), RxError.BE)]
        chunk_slots = []                           # (is G0, slot index) for slots that can be G0
        formats = {(kind, code): f for (d, kind, code), f in SLOT_FORMATS.items() if d is self.direction}
        # Messages per channel in each slot, and before each slot.  At most one format of a slot is
        # selected, so a slot's count is an OR over its formats of (selected & that format's count); the
        # count before slot s adds those of slots 0..s-1 (a short sum, not a chain through every
        # message position).  A position's running count is then count before its slot + the valid bits
        # before it in its format.
        sel_a, sel, slot_mine = [], [], []
        for s in range(SLOTS):
            kind = "H" if s == 0 else "G"
            mine = [f for (k, _), f in sorted(formats.items()) if k == kind]
            sa = {f.code: Signal(name=f"slot{s}_{f.name}") for f in mine}
            for f in mine:
                m.d.comb += sa[f.code].eq(hdr_a[f"slot{s}"] == f.code)
            sel_a.append(sa)
            staged = stage(f"slot{s}_sel", Cat(*(sa[f.code] for f in mine)))
            sel.append({f.code: staged[i] for i, f in enumerate(mine)})
            slot_mine.append(mine)

        def valid_bits(q, s, f, ch):
            return [slot_bits(q, s)[offset] for item, offset, _ in f.fields if item == ch]   # Valid = bit 0

        # Counts (thermometer codes, see _therm) saturate one above the channel's per-flit maximum: every
        # question asked of them (MAX, == k for k < MAX, != 0, < 2, MDH's "all in one slot") is exact up
        # to there, and a flit with more messages fails MAX at an earlier check than any of the others.
        cap = {ch: MAX_PER_FLIT[ch] + 1 for ch in self.chans}
        count_a = [{ch: _therm_select(m, [(sel_a[s][f.code], _therm(m, valid_bits(a, s, f, ch), cap[ch]))
                                          for f in slot_mine[s] if not f.data], cap[ch])
                    for ch in self.chans} for s in range(SLOTS)]
        # before[s]: the messages in slots 0..s-1, each a balanced sum of the slot counts.  The flit's
        # totals are summed in the second half, the staged count before the last slot + the last slot's
        # (a four-slot sum in the first half was its longest path).
        before_a = [{ch: _therm_sum(m, [c[ch] for c in count_a[:s]], cap[ch]) for ch in self.chans}
                    for s in range(SLOTS)]
        slot_count = [stage_codes(f"slot{s}_count", count_a[s]) for s in range(SLOTS)]
        before = [{ch: [] for ch in self.chans}] + [stage_codes(f"before{s}", before_a[s])
                                                     for s in range(1, SLOTS)]
        counts = {ch: _therm_add(m, before[SLOTS - 1][ch], slot_count[SLOTS - 1][ch], cap[ch]) for ch in self.chans}
        before.append(counts)

        g0_before = []                             # the G0 flags of the slots before this one
        for s in range(SLOTS):
            bits_a, bits = slot_bits(a, s), slot_bits(p, s)
            mine = slot_mine[s]
            g0 = keep(f"s{s}_g0", Cat(*(sel[s][f.code] for f in mine if f.data)).any())
            items.append(("c", leaf(~Cat(*sel_a[s].values()).any(), s), RxError.FORMAT))
            if s >= 1:
                items.append(("rollover", s))          # (owed >= s) & ~g0
                # The next slot for data after a Data Header in slot h is max(h + 1, owed + 1): slot s
                # is it for a header in slot s - 1 when owed < s, for one in an earlier slot when
                # owed == s - 1 (the reference's data_slot rule).
                keep(f"s{s}_hdr_prev", _ge(slot_count[s - 1][dat_ch], 1))
                keep(f"s{s}_hdr_earlier", _ge(before[s - 1][dat_ch], 1))
                items.append(("nextdata", s))
            if any(f.data for f in mine):
                # Chunks go to the first line still owed one; none owed -> no header to take it:
                # g0 & (owed + CHUNKS_PER_LINE * headers before <= G0 slots before).  With a header
                # before, the left side is >= CHUNKS_PER_LINE > G0 slots before (checked in __init__).
                keep(f"s{s}_nd", g0 & ~_ge(before[s][dat_ch], 1))
                keep(f"s{s}_g0_before", Cat(*_therm(m, g0_before, SLOTS)))     # a thermometer code
                items.append(("nodata", s))
                chunk_slots.append((g0, s))
                g0_before = g0_before + [g0]
            for f in mine:
                if f.data:
                    continue
                on_a, on = sel_a[s][f.code], sel[s][f.code]
                if f.used_bits < len(bits_a):
                    items.append(("c", leaf(on_a & bits_a[f.used_bits:].any(), s), RxError.PADDING))
                taken = {ch: [] for ch in self.chans}
                for item, offset, width in f.fields:
                    v_a, v = bits_a[offset:offset + width], bits[offset:offset + width]
                    if item == S2M_NDR:
                        items.append(("c", leaf(on_a & v_a.any(), s), RxError.NDR))
                        continue
                    valid_a, valid = v_a[0], v[0]     # Valid is bit 0 of every message (cxl.messages)
                    items.append(("c", leaf(on_a & ~valid_a & v_a.any(), s), RxError.INVALID))
                    illegal = Cat(*(~Cat(*(v_a[fo:fo + fw] == e for e in legal)).any()
                                    for fo, fw, legal in _enum_fields(item))).any()
                    items.append(("c", leaf(on_a & valid_a & illegal, s), RxError.OPCODE))
                    # valid messages before this one (second half: the staged count before the slot)
                    rank = _therm_add(m, before[s][item], _therm(m, taken[item], cap[item]), cap[item])
                    taken[item].append(valid)
                    items.append(("c", on & valid & _ge(rank, MAX_PER_FLIT[item]), RxError.MAX))
                # Tight packing: per channel, no empty position before a filled one.
                for ch in self.chans:
                    vb = valid_bits(a, s, f, ch)
                    gaps = [~x & y for x, y in zip(vb, vb[1:])]
                    if gaps:
                        items.append(("c", leaf(on_a & Cat(*gaps).any(), s), RxError.PACKING))
                if f.mdh:                              # an MDH slot carries 2 or more Data Headers
                    # (with ``on_a`` the slot's count is this format's: its own valid bits, not the count's
                    # select over the slot's formats)
                    mdh_count = _therm(m, valid_bits(a, s, f, dat_ch), 2)
                    items.append(("c", leaf(on_a & ~_ge(mdh_count, 2), s), RxError.MDH))
        # The leaves, and their OR per slot (and the header's), go to the second half.
        staged_leaves = stage("leaves", Cat(*leaves))
        groups = sorted(set(leaf_slot))
        leaf_any = stage("leaf_any", Cat(*(_or([c for c, g in zip(leaves, leaf_slot) if g == grp], 1)
                                           for grp in groups)))
        items = [(it[0], staged_leaves[it[1][1]], it[2]) if it[0] == "c" and isinstance(it[1], tuple) else it
                 for it in items]

        # ---- second half: the flit-wide rules, from the staged counts and leaves
        # More than one Data Header in the flit: all of them in one MDH slot, or the flit breaks the rule;
        # Sz is 1 exactly when the flit has a Data Header.  Both from the slots' own counts, not the flit's
        # totals (a slot's selects -> the totals -> a compare with each slot's count -> the last segment's
        # first failing check was a critical path): more than one Data Header and not all in one MDH slot
        # <=> Data Headers in two slots, or two or more in one slot that is not an MDH slot (a slot holds
        # fewer than the count's cap, so a slot's count is never saturated); "the flit has one" <=> a slot
        # has one.
        has_hdr = [_ge(slot_count[s][dat_ch], 1) for s in range(SLOTS)]
        not_mdh = [~Cat(*(sel[s][f.code] for f in slot_mine[s] if f.mdh)).any() for s in range(SLOTS)]
        assert all(sum(item == dat_ch for item, _, _ in f.fields) < cap[dat_ch] for fs in slot_mine for f in fs)
        mdh_bad = Signal(name="pre_mdh_bad")
        sz_bad = Signal(name="pre_sz_bad")
        m.d.comb += [
            mdh_bad.eq(_ge(_therm(m, has_hdr, 2), 2)
                       | Cat(*(_ge(slot_count[s][dat_ch], 2) & not_mdh[s] for s in range(SLOTS))).any()),
            sz_bad.eq(hdr["sz"] != Cat(*has_hdr).any()),
        ]
        items.append(("c", mdh_bad, RxError.MDH))
        items.append(("c", sz_bad, RxError.SZ))

        # Whether any content check fails (``good`` needs no more): the same OR, with MAX in a shallower
        # form: MAX at some message <=> a channel's count reaches its maximum + 1 (one code bit instead of
        # a rank at every position).  Every other check is a leaf, in the staged ORs, or one of the two
        # above.  Checked against the segments in simulation (elaborate).
        flat = [leaf_any.any()]
        flat += [_ge(counts[ch], MAX_PER_FLIT[ch] + 1) for ch in self.chans]
        flat += [mdh_bad, sz_bad]
        keep("content_bad", Cat(*flat).any())

        # Segments of content checks: (any fails, first failing code); the state checks between them.
        order, seg = [], []
        def close():
            if seg:
                i = len([o for o in order if o[0] == "seg"])
                code = Signal(RxError, name=f"seg{i}_code")
                for cond, err in reversed(seg):     # later statements win: the first failing check does
                    with m.If(cond):
                        m.d.comb += code.eq(err)
                keep(f"seg{i}_fail", Cat(*(c for c, _ in seg)).any())
                keep(f"seg{i}_code", code, RxError)
                order.append(("seg", f"seg{i}_fail", f"seg{i}_code"))
                seg.clear()
        for it in items:
            if it[0] == "c":
                seg.append(it[1:])
            else:
                close()
                order.append(it)
        close()

        self._order = order

        # Whether a state check fails, for every chunks-owed count a protocol flit can meet (owed <
        # CHUNKS_PER_LINE, else the flit is all-data), with owed a constant: these fold to a few gates.
        # The flit's whole verdict per owed count is made from them at the end (``good_if_owed``).  The
        # first failing check's code is found after the register (it only feeds the ``error`` register).
        state_bad = []
        for o in range(CHUNKS_PER_LINE):
            checks = self._proto_checks(out, lambda values, o=o: Const(o in values, 1))
            state_bad.append(_or([c for c, err in checks if isinstance(err, RxError)], 1))

        # ---- the messages of each channel, in order, compacted to lanes 0.. (content only)
        # Message k of the flit is the i-th field of that channel in slot s's format f, for the one
        # (s, f, i) where slot s has format f, more than i such messages (tight packing makes the
        # slot's first count[s] fields the valid ones; a flit that breaks it fails PACKING and writes
        # nothing) and k - i before it.  That choice is made in the first half, one staged bit per
        # (k, s, f, i) (``<chan>_msg<k>_pick``: 113 bits for the H2D channels, 91 for the D2H), so the
        # second half is one AND-OR of the held flit's fields under flip-flops.  Before, the second half selected each
        # slot's i-th message by the staged formats and then message k by the staged counts: up to six
        # LUTs in a row behind a staged code, the receiver's longest path in two placements of three
        # (docs/link_layer.md, "RTL pipelining (Fmax)").  Staging the slots' messages themselves
        # (~1 100 register bits in the first half) routed slower (sixth and fifteenth rounds there).
        for ch, name in zip(self.chans, ("req", "rsp", "data")):
            width = CODECS[ch].width
            fields = [(s, f, i, offset, w) for s in range(SLOTS) for f in slot_mine[s] if not f.data
                      for i, (offset, w) in enumerate((o, w) for item, o, w in f.fields if item == ch)]
            for k in range(MAX_PER_FLIT[ch]):
                picks = [t for t in fields if t[2] <= k and (t[0] > 0 or t[2] == k)]
                assert picks, f"no slot can carry message {k} of {name}"
                on = stage(f"{name}_msg{k}_pick", Cat(*(
                    sel_a[s][f.code] & _ge(count_a[s][ch], i + 1) & _is(before_a[s][ch], k - i)
                    for s, f, i, _, _ in picks)))
                msg = Signal(width, name=f"pre_{name}_msg{k}")
                m.d.comb += msg.eq(_or([Mux(on[j], slot_bits(p, s)[offset:offset + w], 0)
                                        for j, (s, f, i, offset, w) in enumerate(picks)], width))
                out[f"{name}_msg{k}"] = msg
            n_shape = range(cap[ch] + 1)            # the count's code saturates at cap (a bad flit above it)
            keep(f"{name}_n", _therm_value(counts[ch], Shape.cast(n_shape).width), n_shape)

        # ---- the chunks of a protocol flit: its G0 slots, compacted in slot order.  Only which slot each
        # chunk comes from is pre-decoded; the chunks themselves are read from the held flit's bits after
        # the register (2 x 512 fewer bits loaded on ``accept``).
        self._chunk_slots = [s for _, s in chunk_slots]
        for i, (g, s) in enumerate(chunk_slots):
            before_g0 = _therm(m, [g for g, _ in chunk_slots[:i]], SLOTS)
            for j in range(SLOTS):
                keep(f"chunk{j}_from_slot{s}", g & _is(before_g0, j))
        n_chunks = _therm(m, [g for g, _ in chunk_slots], SLOTS)
        keep("n_chunks", _therm_value(n_chunks, Shape.cast(range(SLOTS + 1)).width), range(SLOTS + 1))
        keep("n_chunks_code", Cat(*n_chunks))

        # ---- control flit: which kind it is matches 512 bits (first half); its fields are raw bits
        # One order for the match bits (``early_ctl_hits``) and for ``ctl.kind``: CONTROL_KIND_NAMES.
        kinds = CONTROL_KIND_NAMES
        free = (1 << PAYLOAD_BITS) - 1
        # Each kind's compare in CTL_PARTS parts staged apart (a part with no fixed bit is left out),
        # and their AND after the register: a 512-input AND from the wire was the first half's longest
        # path in one placement of the receiver (docs/link_layer.md, "RTL pipelining (Fmax)").
        part_bits = PAYLOAD_BITS // CTL_PARTS
        part_hits = []
        for k in kinds:
            fixed, pattern = free & ~CONTROL_TABLES[k][1], CONTROL_TABLES[k][0]
            for q in range(CTL_PARTS):
                lo, mask = q * part_bits, (1 << part_bits) - 1
                f_q, p_q = (fixed >> lo) & mask, (pattern >> lo) & mask
                if f_q:
                    part_hits.append((k, (a[lo:lo + part_bits] & f_q) == p_q))
        staged_parts = stage("ctl_part_hits", Cat(*(hit for _, hit in part_hits)))
        hits = Signal(len(kinds), name="pre_ctl_hits")
        m.d.comb += hits.eq(Cat(*(Cat(*(staged_parts[j] for j, (kk, _) in enumerate(part_hits) if kk == k)).all()
                                  for k in kinds)))
        out["ctl_hits"] = hits
        ctl_hit = {kind: keep(f"ctl_is_{kind.replace('.', '_').lower()}", hits[i]) for i, kind in enumerate(kinds)}
        ctl = Signal(self.ctl_layout, name="pre_ctl")
        for i, kind in enumerate(kinds):
            spec = CONTROL_TABLES[kind][2]
            with m.If(ctl_hit[kind]):
                m.d.comb += ctl.kind.eq(i)
                for name, pieces in spec.items():
                    m.d.comb += getattr(ctl, name).eq(
                        sum((p[offset:offset + width].as_unsigned() << shift
                             for shift, offset, width in pieces), Const(0, 1)))
        out["ctl"] = ctl
        keep("ctl_any", Cat(*ctl_hit.values()).any())
        self._ctl_kinds = list(ctl_hit)

        # ---- the verdict for each chunks-owed count a flit that is not all-data can meet: good, if the
        # CRC matches and, for a control flit, nothing is owed and it is a known one, for a protocol
        # flit, no content or state check fails.  After the register ``good`` is then ``owed`` selecting
        # one of these (or the CRC alone for an all-data flit): the retire loop (``good`` -> ``retire``
        # -> ``flit.ready`` -> every input register's enable) starts at registered verdicts, with no
        # CRC, type or control-match gates after them.
        for o in range(CHUNKS_PER_LINE):
            keep(f"good_if_owed{o}", ~out["crc_bad"] & Mux(hdr["type"], out["ctl_any"] & Const(o == 0, 1),
                                                           ~out["content_bad"] & ~state_bad[o]))
        return out

    def _proto_checks(self, h, owed_in):
        """A protocol flit's checks in the reference's order, as (fails, code): the pre-decoded segments of
        content checks (``h``: the pre-decode or its registers) and between them the three checks that need
        the chunks owed (ROLLOVER, DATA_SLOT, NO_DATA).  ``owed_in(values)`` says whether the chunks owed
        (0..CHUNKS_PER_LINE-1 for a protocol flit) is one of ``values``: a constant for the pre-decode
        once per owed count, where these checks fold to a few gates, or a decode of the ``owed`` register
        (a set of values, not a comparison, so no carry chain)."""
        checks = []
        for it in self._order:
            if it[0] == "seg":
                checks.append((h[it[1]], h[it[2]]))
            elif it[0] == "rollover":              # slot s not G0 while s or more chunks roll over
                s = it[1]
                checks.append((owed_in(range(s, CHUNKS_PER_LINE)) & ~h[f"s{s}_g0"], RxError.ROLLOVER))
            elif it[0] == "nextdata":
                s = it[1]
                prev = h[f"s{s}_hdr_prev"] | (h[f"s{s}_hdr_earlier"] & owed_in([s - 1]))
                checks.append((~h[f"s{s}_g0"] & owed_in(range(s)) & prev, RxError.DATA_SLOT))
            else:                                  # a G0 slot with no line owed a chunk: owed <= G0 slots before
                s = it[1]
                g0_before = h[f"s{s}_g0_before"]   # a thermometer code
                fails = _or([owed_in([o]) & _ge([g0_before[j] for j in range(len(g0_before))], o)
                             for o in range(CHUNKS_PER_LINE)], 1)
                checks.append((h[f"s{s}_nd"] & fails, RxError.NO_DATA))
        return checks

    def elaborate(self, platform):
        m = Module()
        req_ch, rsp_ch, dat_ch = self.chans
        hdr_width = CODECS[dat_ch].width
        queue_len = 1 + MAX_PER_FLIT[dat_ch]   # one waiting header + a flit's worth (see docstring)

        # ------------------------------------------------ input register (+ the pre-decode of its flit)
        held = Signal(FLIT_BITS)
        held_valid = Signal()
        retire = Signal()
        commit = Signal()                       # retiring, not discarded: the flit takes effect
        accept = Signal()
        m.d.comb += commit.eq(retire & ~self.discard)
        # Without stalls (``stall=False``) every held flit retires at the next edge, so the input side is
        # always ready: the constant keeps ``retire`` out of the input registers' enables altogether.
        m.d.comb += self.flit.ready.eq(~held_valid | retire if self.stall else 1)
        m.d.comb += accept.eq(self.flit.valid & self.flit.ready)
        with m.If(accept):
            m.d.sync += held_valid.eq(1)
        with m.Elif(retire):
            m.d.sync += held_valid.eq(0)
        # The register loads whenever it may (``flit.ready``), whether or not a flit is offered: with none
        # it is empty after the edge anyway, and the enable of its ~1 100 bits is one gate shorter.
        with m.If(self.flit.ready):
            m.d.sync += held.eq(self.flit.payload)
        p = held[:PAYLOAD_BITS]
        # The first half of the pre-decode hands each value on in a signal of its own (every use reads the
        # signal, not a copy of the expression): with ``early``, a register loaded with the caller's, from
        # the flit that register takes (module docstring, "Early pre-decode"); else a wire.
        staged = {}

        def stage(name, value):
            value = Value.cast(value)
            sig = staged[name] = Signal(len(value), name=f"early_{name}" if self.early else f"pre_a_{name}")
            if self.early:
                with m.If(self.early_load):
                    m.d.sync += sig.eq(value)
            else:
                m.d.comb += sig.eq(value)
            return sig
        pre = self._predecode(m, self.early_payload if self.early else self.flit.payload, self.flit.payload, stage)
        hits_now = pre.pop("ctl_hits")          # the control matches, also kept per kind (``ctl_is_*``)
        if self.early:                          # the caller's verdicts for the flit it holds: from those registers
            m.d.comb += [self.early_crc_bad.eq(pre["crc_bad"]), self.early_ctl_hits.eq(hits_now)]
        h = {}
        for name, sig in pre.items():           # registered with the flit it describes
            h[name] = Signal.like(sig, name=f"h_{name}")
            with m.If(self.flit.ready):
                m.d.sync += h[name].eq(sig)
        crc_bad = h["crc_bad"]

        # ------------------------------------------------ data-chunk state
        hq = [Signal(hdr_width, name=f"hq{i}") for i in range(queue_len)]      # waiting data headers
        hq_n = Signal(range(queue_len + 1))
        have = Signal(range(CHUNKS_PER_LINE))                                   # chunks of hq[0] so far
        buf = [Signal(CHUNK_BITS, name=f"buf{i}") for i in range(CHUNKS_PER_LINE - 1)]
        # Chunks owed (= hq_n * CHUNKS_PER_LINE - have) and "an all-data flit is due" are registers of
        # their own, updated with hq_n and have, so the verdict does not start with that arithmetic.
        owed_max = CHUNKS_PER_LINE * queue_len
        owed = Signal(range(owed_max + 1))
        owed_big = Signal()                     # owed >= CHUNKS_PER_LINE
        owed_zero = Signal(init=1)              # owed == 0
        m.d.sync += Assert(owed == hq_n * CHUNKS_PER_LINE - have, "owed register out of step")
        m.d.sync += Assert(owed_zero == (owed == 0), "owed_zero out of step")

        all_data = Signal()
        is_ctl = Signal()
        is_proto = Signal()
        hdr = {name: p[offset:offset + width] for name, (offset, width) in HEADER.items()}
        m.d.comb += [
            all_data.eq(owed_big),
            is_ctl.eq(~all_data & hdr["type"]),
            is_proto.eq(~all_data & ~hdr["type"]),
        ]

        # ------------------------------------------------ protocol flit verdict
        owed_lo = Signal(range(CHUNKS_PER_LINE))   # = owed whenever the flit is a protocol flit
        m.d.comb += owed_lo.eq(owed)
        good_if_owed = Signal()                    # the verdict pre-decoded per owed count
        with m.Switch(owed_lo):
            for o in range(CHUNKS_PER_LINE):
                with m.Case(o):
                    m.d.comb += good_if_owed.eq(h[f"good_if_owed{o}"])
        m.d.sync += Assert(~held_valid | (h["content_bad"] == Cat(*(h[it[1]] for it in self._order if it[0] == "seg")).any()),
                           "the flat content verdict disagrees with the segments")
        proto_code = Signal(RxError)               # the first failing check: segments + state checks
        owed_in = lambda values: _or([owed_lo == v for v in values], 1)    # noqa: E731
        for cond, err in reversed(self._proto_checks(h, owed_in)):   # later statements win
            with m.If(cond):
                m.d.comb += proto_code.eq(err)

        # ------------------------------------------------ verdict
        ctl = h["ctl"]
        code = Signal(RxError)
        with m.If(crc_bad):
            m.d.comb += code.eq(RxError.CRC)
        with m.Elif(all_data):
            m.d.comb += code.eq(RxError.NONE)
        with m.Elif(is_ctl):
            with m.If(~owed_zero):
                m.d.comb += code.eq(RxError.TYPE)
            with m.Elif(~h["ctl_any"]):
                m.d.comb += code.eq(RxError.CONTROL)
        with m.Else():
            m.d.comb += code.eq(proto_code)
        # good == (code == NONE), from the verdicts pre-decoded per owed count (the ``code`` priority chain
        # only feeds the registered ``error`` output; ``good`` feeds ``retire`` and from there ``flit.ready``).
        good = Signal()
        m.d.comb += good.eq(Mux(all_data, ~crc_bad, good_if_owed))
        m.d.sync += Assert(~held_valid | (good == (code == RxError.NONE)), "good out of step with the verdict")

        # ------------------------------------------------ the move stage (``stall=False``)
        # Without stalls the data moves of a flit (its messages into the lanes, its chunks into the
        # chunk buffer and a completed line out, its data headers into the waiting headers) happen a
        # cycle after its verdict, from registers loaded with the verdict's outcome and the data it
        # needs ("the move stage", module docstring).  The verdict keeps only the chunk-state counts
        # (``owed``, ``have``, ``hq_n``): the ~1 000 enables of the data registers and the lanes' writes
        # no longer hang on ``good`` (all_data -> good -> the chunk buffer's enable, a net spread over
        # the link end, was its routed critical path).  ``late(v)`` is ``v`` as the move stage sees it:
        # a register loaded every cycle, or ``v`` itself with stalls (the lanes' room must then be
        # checked against the flit being retired, so its moves stay in the verdict's cycle).
        def late(value, name):
            value = Value.cast(value)
            if self.stall:
                return value
            sig = Signal(len(value), name=f"mv_{name}")
            m.d.sync += sig.eq(value)
            return sig

        # ------------------------------------------------ data chunks of this flit
        n_ch = Signal(range(SLOTS + 1))
        chunks = [Signal(CHUNK_BITS, name=f"chunk{j}") for j in range(SLOTS)]
        with m.If(all_data):
            m.d.comb += n_ch.eq(SLOTS)
            for j in range(SLOTS):
                m.d.comb += chunks[j].eq(p[SLOT_BITS * j:SLOT_BITS * (j + 1)])
        with m.Elif(is_proto):
            m.d.comb += n_ch.eq(h["n_chunks"])
            for j in range(SLOTS):
                m.d.comb += chunks[j].eq(_or([Mux(h[f"chunk{j}_from_slot{s}"], p[SLOT_BITS * s:SLOT_BITS * (s + 1)], 0)
                                              for s in self._chunk_slots], CHUNK_BITS))
        # ext[q]: chunk q of the head line and then of the next line, buffered chunks first (in the move
        # stage: ``have`` as it was before this flit, and this flit's chunks).
        mv_have = late(have, "have")
        mv_chunks = [late(c, f"chunk{j}") for j, c in enumerate(chunks)]
        ext = [Signal(CHUNK_BITS, name=f"ext{q}") for q in range(2 * CHUNKS_PER_LINE - 1)]
        with m.Switch(mv_have):
            for hv in range(CHUNKS_PER_LINE):
                with m.Case(hv):
                    for q, e in enumerate(ext):
                        if q < hv:
                            m.d.comb += e.eq(buf[q])
                        elif q - hv < SLOTS:
                            m.d.comb += e.eq(mv_chunks[q - hv])
        # complete: have + n_ch >= CHUNKS_PER_LINE, decoded per value of ``have`` from the chunk count's
        # thermometer code (it is in the ``retire`` path; a sum and compare would be a carry chain).
        n_chunks = [h["n_chunks_code"][j] for j in range(len(h["n_chunks_code"]))]
        def n_ch_ge(k):
            return (all_data & Const(SLOTS >= k, 1)) | (is_proto & _ge(n_chunks, k))
        complete = Signal()
        m.d.comb += complete.eq(_or([(have == a) & n_ch_ge(CHUNKS_PER_LINE - a) for a in range(CHUNKS_PER_LINE)], 1))
        m.d.sync += Assert(~held_valid | (complete == (have + n_ch >= CHUNKS_PER_LINE)), "complete out of step")
        line = Cat(*ext[:CHUNKS_PER_LINE])

        # ------------------------------------------------ output lanes
        def lane_group(name, n_lanes, width):
            lanes = []
            for i in range(n_lanes):
                # LaneFIFO writes its memory ahead of the push (hdl/link/lane_fifo.py); it needs 2+ entries.
                fifo = (LaneFIFO(width, self.depth, exact=not self.stall) if self.depth >= 2 else
                        SyncFIFOBuffered(width=width, depth=self.depth))
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

        # The flit was good, as the move stage sees it.  The lanes' writes register the rest of their
        # condition (from registers: ``commit``, ``is_proto``, the counts) and AND it with this one bit
        # in the move stage, so ``good`` feeds one flip-flop for all of them (``owed`` -> ``good`` -> the
        # lane takes and steps was link_rx_nostall's critical path; a lane's ``w_en`` only moves its
        # pointer and level, so the gate after the register is cheap).
        mv_good = late(good, "good")
        need = {}
        lane_sets = {}
        for name, chan in (("req", req_ch), ("rsp", rsp_ch)):
            group, wptr = lane_group(name, MAX_PER_FLIT[chan], CODECS[chan].width)
            lane_sets[name] = group
            n_lanes = len(group)
            n_msgs = h[f"{name}_n"]
            # Message k of this flit goes to lane (wptr + k) mod n_lanes (in the move stage: ``takes[k]``,
            # message k is written; ``step``, the messages written), each gated by ``mv_good`` there.
            takes = [late(commit & is_proto & (n_msgs > k), f"{name}_take{k}") & mv_good for k in range(n_lanes)]
            msgs = [late(h[f"{name}_msg{k}"], f"{name}_msg{k}") for k in range(n_lanes)]
            step = Mux(mv_good, late(Mux(commit & is_proto, n_msgs, 0), f"{name}_step"), 0)
            for i, fifo in enumerate(group):
                with m.Switch(wptr):
                    for w in range(n_lanes):
                        with m.Case(w):
                            k = (i - w) % n_lanes
                            m.d.comb += [fifo.w_data.eq(msgs[k]), fifo.w_en.eq(takes[k])]
            m.d.sync += wptr.eq(Mux(wptr + step >= n_lanes, wptr + step - n_lanes, wptr + step))
            need[chan] = (is_proto & (n_msgs != 0), Cat(*(f.w_rdy for f in group)).all())

        (dfifo,), _ = lane_group("data", 1, channel_shape(dat_ch).size)
        dmsg = Signal(channel_shape(dat_ch))
        m.d.comb += [
            dmsg.hdr.eq(hq[0]), dmsg.data.eq(line),
            dfifo.w_data.eq(dmsg), dfifo.w_en.eq(late(commit & ~is_ctl & complete, "deliver") & mv_good),
        ]
        need[dat_ch] = (~is_ctl & complete, dfifo.w_rdy)
        # A good flit waits for room in every channel it writes; a bad one retires at once.  Without stalls
        # every flit retires at once, and a message its lane has no room for is the sender's overflow.
        if self.stall:
            has_room = Cat(*(~wants | room for wants, room in need.values())).all()
            m.d.comb += retire.eq(held_valid & (self.discard | ~good | has_room))   # a discarded flit writes nothing
        else:
            m.d.comb += retire.eq(held_valid)
            # The move stage writes the lanes in the cycle of the flit's status pulses, so ``overflow``
            # is formed there (from the move stage's registers and the lanes' levels) and pulses with them.
            lanes = [f for name in ("req", "rsp") for f in lane_sets[name]] + [dfifo]
            m.d.comb += self.overflow.eq(Cat(*(f.w_en & ~f.w_rdy for f in lanes)).any())

        # ------------------------------------------------ commit the chunk state
        # The next chunk state is worked out for both kinds of flit that change it, each from registers
        # only, and ``all_data`` (itself a register) picks one last: so the carry chains of the owed
        # arithmetic do not start from ``all_data`` and its fan-out (before, all_data -> the chunk count
        # -> owed's adder -> the compare -> all_data was the routed critical path of link_rx_nostall).
        # An all-data flit brings exactly one line's chunks and no header: owed falls by a line, ``have``
        # stays.  A protocol flit adds a line per header and takes its chunks.
        owed_after_all = Signal.like(owed)
        owed_after_proto = Signal.like(owed)
        have_after_proto = Signal.like(have)
        # ``proto_complete`` is ``complete``'s protocol-flit half, written out again on purpose: built
        # as one signal that both use (``complete = all_data | is_proto & proto_complete``), the same
        # logic routed at 98.3 / 94.9 / 109.3 MHz with placement seeds 1 / 2 / 3, against 118.5 / 119.2 /
        # 123.3 for two separate cones (docs/link_layer.md, ninth round).
        proto_complete = Signal()
        m.d.comb += [
            owed_after_all.eq(owed - SLOTS),
            owed_after_proto.eq(owed + CHUNKS_PER_LINE * h["data_n"] - h["n_chunks"]),
            proto_complete.eq(_or([(have == a) & _ge(n_chunks, CHUNKS_PER_LINE - a)
                                   for a in range(CHUNKS_PER_LINE)], 1)),
            have_after_proto.eq(have + h["n_chunks"] - Mux(proto_complete, CHUNKS_PER_LINE, 0)),
        ]
        assert SLOTS == CHUNKS_PER_LINE            # an all-data flit is one line: ``have`` is unchanged
        with m.If(commit & good & ~is_ctl):
            pop = complete.as_unsigned()
            m.d.sync += [
                owed.eq(Mux(all_data, owed_after_all, owed_after_proto)),
                owed_big.eq(Mux(all_data, owed_after_all >= CHUNKS_PER_LINE,
                                owed_after_proto >= CHUNKS_PER_LINE)),
                owed_zero.eq(Mux(all_data, owed_after_all == 0, owed_after_proto == 0)),
                have.eq(Mux(all_data, have, have_after_proto)),
            ]
            m.d.sync += Assert(have + n_ch - CHUNKS_PER_LINE * pop == Mux(all_data, have, have_after_proto),
                               "chunk state: have out of step")
            m.d.sync += hq_n.eq(hq_n - pop + Mux(is_proto, h["data_n"], 0))

        # The chunk buffer and the waiting headers after the flit, in the move stage.
        mv_move = late(commit & good & ~is_ctl, "move")
        mv_complete = late(complete, "complete")
        mv_proto = late(is_proto, "proto")
        mv_hq_n = late(hq_n, "hq_n")
        mv_n_hdrs = late(h["data_n"], "data_n")
        mv_hdrs = [late(h[f"data_msg{k}"], f"data_msg{k}") for k in range(MAX_PER_FLIT[dat_ch])]
        with m.If(mv_move):
            for q, b in enumerate(buf):
                m.d.sync += b.eq(Mux(mv_complete, ext[q + CHUNKS_PER_LINE], ext[q]))
            # The waiting headers after the flit, worked out for both outcomes of ``complete`` (the head
            # line done with this flit, or not) from registers only, ``complete`` picking one last: the
            # head shifted out or not, then this flit's headers appended behind the ones left (before,
            # complete -> the append position -> every entry's select was the routed critical path).
            after = {}
            for c in (0, 1):
                after[c] = []
                for i in range(queue_len):
                    v = (hq[i + c] if i + c < queue_len else Const(0, hdr_width))
                    for k in range(MAX_PER_FLIT[dat_ch]):
                        if 0 <= i - k + c <= queue_len:    # the entry a header k lands in when hq_n = i - k + c
                            v = Mux(mv_proto & (mv_n_hdrs > k) & (mv_hq_n == i - k + c), mv_hdrs[k], v)
                    sig = Signal(hdr_width, name=f"hq{i}_after{c}")
                    m.d.comb += sig.eq(v)
                    after[c].append(sig)
            for i in range(queue_len):
                m.d.sync += hq[i].eq(Mux(mv_complete, after[1][i], after[0][i]))

        # ------------------------------------------------ per-flit status (registered pulses)
        # What a flit would report if good (kind, credits, acks, control fields) and its error code are
        # registered every cycle from the held flit, whether it retires or not; only the 1-bit pulses
        # below depend on ``retire``, and each output is its value gated by them (one gate after the
        # registers).  So no enable or reset of these ~100 bits depends on ``retire``.
        def credits_of(fields, out, mem):
            # decode_credit gives (protocol, amount) for each 4-bit code: the table is built from it.
            for cls in CREDIT_CLASSES:
                with m.Switch(fields[cls]):
                    for c in range(1 << len(fields[cls])):
                        protocol, amount = decode_credit(c)
                        with m.Case(c):
                            target = out if protocol is CreditProtocol.CACHE else mem
                            m.d.sync += getattr(target, cls).eq(amount)

        committed = Signal()                    # the flit retired last edge took effect (not discarded)
        v = {"kind": Signal(FlitKind, name="kind_if_good"), "credits": Signal(CreditsLayout, name="credits_if_good"),
             "mem_credits": Signal(CreditsLayout, name="mem_credits_if_good"),
             "acks": self.acks_if_good, "ctl": Signal(self.ctl_layout, name="ctl_if_good"),
             "error": Signal(RxError, name="error_if_committed")}
        m.d.sync += [self.done.eq(retire), self.discarded.eq(retire & self.discard), committed.eq(commit),
                     self.good.eq(commit & good),
                     self.crc_error.eq(commit & crc_bad),
                     self.rule_error.eq(commit & ~crc_bad & ~good),
                     v["error"].eq(code), v["kind"].eq(FlitKind.PROTOCOL),
                     v["credits"].eq(0), v["mem_credits"].eq(0), v["acks"].eq(0), v["ctl"].eq(0)]
        with m.If(all_data):
            m.d.sync += v["kind"].eq(FlitKind.ALL_DATA)
        with m.Elif(is_ctl):
            m.d.sync += [v["kind"].eq(FlitKind.CONTROL), v["ctl"].eq(ctl)]
            with m.If(h["ctl_is_llcrd"]):
                credits_of({cls: getattr(ctl, f"{cls}_crd") for cls in CREDIT_CLASSES}, v["credits"], v["mem_credits"])
                m.d.sync += v["acks"].eq(ctl.acks)
        with m.Else():
            credits_of({cls: hdr[f"{cls}_crd"] for cls in CREDIT_CLASSES}, v["credits"], v["mem_credits"])
            m.d.sync += v["acks"].eq(Mux(hdr["ak"], ACKS_PER_AK, 0))
        ctl_good = self.good & (v["kind"] == FlitKind.CONTROL)
        m.d.comb += [self.error.eq(Mux(committed, v["error"], RxError.NONE)),
                     self.kind.eq(Mux(self.good, v["kind"], FlitKind.PROTOCOL)),
                     self.credits.eq(Mux(self.good, v["credits"], 0)),
                     self.mem_credits.eq(Mux(self.good, v["mem_credits"], 0)),
                     self.acks.eq(Mux(self.good, v["acks"], 0)),
                     self.ctl_valid.eq(ctl_good), self.ctl.eq(Mux(ctl_good, v["ctl"], 0))]
        with m.If(commit & crc_bad):
            m.d.sync += self.crc_errors.eq(self.crc_errors + 1)
        with m.If(commit & ~crc_bad & ~good):
            m.d.sync += self.rule_errors.eq(self.rule_errors + 1)
        return m


class RegisteredFlitUnpacker(wiring.Component):
    """The unpacker behind a one-flit input register, the way ``hdl.link.port.LinkPort`` feeds it (its
    pre-check stage): ``FlitUnpacker(early=True)``, whose first half of the pre-decode reads the flit as
    the register takes it ("Early pre-decode" in the module docstring).  The same ports as
    ``FlitUnpacker`` and the same behaviour one cycle later: a flit taken at edge *n* enters the unpacker
    at *n+1* at the earliest (``flit.ready`` while the register is empty or hands its flit on, so one flit
    per cycle still passes) and retires at *n+2*.  ``discard`` acts on the unpacker's held flit, as there.
    The synthesis top ``link_rx_split`` (hdl/verilog.py) and the tests' second harness."""

    def __init__(self, upstream, *, depth=4, stall=True):
        self.unpacker = FlitUnpacker(upstream, depth=depth, early=True, stall=stall)
        super().__init__({name: member for name, member in self.unpacker.signature.members.items()
                          if not name.startswith("early_")})

    def elaborate(self, platform):
        m = Module()
        m.submodules.unpacker = up = self.unpacker
        valid = Signal()
        payload = Signal(FLIT_BITS)
        m.d.comb += self.flit.ready.eq(~valid | up.flit.ready)
        with m.If(self.flit.ready):
            m.d.sync += [valid.eq(self.flit.valid), payload.eq(self.flit.payload)]
        m.d.comb += [up.flit.valid.eq(valid), up.flit.payload.eq(payload),
                     up.early_payload.eq(self.flit.payload), up.early_load.eq(self.flit.ready),
                     up.discard.eq(self.discard)]
        for name, member in self.signature.members.items():
            if name in ("flit", "discard"):
                continue
            if member.is_port:
                m.d.comb += getattr(self, name).eq(getattr(up, name))
            else:                                  # an output stream
                wiring.connect(m, wiring.flipped(getattr(self, name)), getattr(up, name))
        return m
