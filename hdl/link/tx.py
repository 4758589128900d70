"""TX packer of the CXL 2.0 68B-flit link layer: per-channel message streams in, sealed flits out.

Bit-exact with the golden model ``models.flit.Packer`` (its module docstring is the specification of
the policy; tests/test_rtl_link_tx.py checks every flit against it).  Every slot format, message
offset, header field, credit code and control-flit field is read at elaboration time from the
definitions (``cxl.flit``: ``SLOT_FORMATS``, ``MAX_PER_FLIT``, ``HEADER_FIELDS``; ``cxl.credits``:
``CREDIT_VALUES``/``encode_credit``; ``cxl.control``: ``CONTROL_KINDS``/``encode_control``; and
``cxl.messages.CODECS``); Python loops
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
  before the first flit, as the golden model assumes (keep it high one cycle after the last message:
  the plan sees inputs one cycle late, see "Timing").
* ``flit``: ``Out(flit_stream())``, 528 bits: payload 511:0 and CRC 527:512 (the integer of the 66
  little-endian bytes of ``models.flit.seal``).
* ``flit_lazy``: ``Out(1)``, a register that moves with ``flit.payload``: the offered flit is an LLCRD
  that returns no credits (every credit field 0; an ack-only LLCRD, which the peer acknowledges only
  with later traffic: the link port's ack timeout leaves it out).  From the plan, not from the bits: an
  all-data flit whose data happens to read as such an LLCRD is not one.

Timing.  A flit is *decided* (sent to the first output register) in a cycle where the skid register
beside the port is empty and ``~pause``.  Since the pipelining for Fmax (docs/link_layer.md, "RTL
pipelining (Fmax)") it is *planned* one cycle earlier: in every cycle the packer plans the next flit
from its queue counts, owed chunks, credit/ack counters and priority as they are at the start of the
cycle, minus what the flit decided in that same cycle (if any) takes; the plan is registered at the
clock edge and is the flit decided in the next cycle (if that cycle decides).  So a decision in cycle t
sees what was handed in up to cycle t-2 (inputs of cycle t-1 are not yet visible, nor are those of
cycle t), and nothing else: the flit contents and order for a given arrival are exactly what
``models.flit.Packer`` decides when fed with that one-cycle delay.  The decision moves the queue heads
and counters and registers the flit's slot layout (stage W); the flit is built from stage W in the next
cycle into stage A; stage B takes A's flit with the partial CRCs of its eighths, and the port register
B's flit with their XOR (``hdl.link.crc.FlitCRC``).  The ``OUTPUT_STAGES`` = 4 registers (W, A, B, the
port) move together in every cycle where ``~flit.valid | flit.ready``, so a flit decided in cycle t is
offered from cycle t+4 if the port does not stall.  In the first cycle of a stall B's flit moves into
a *skid register* beside the port while W, A and B move once more; then they wait until the port has
taken the skid's flit (``DECIDED_MAX`` = 5 flits decided and untaken at most).  So ``flit.ready``
drives only the port's and the skid's loads, and every decision and stage enable starts at a
register.  ``flit`` is a
valid/ready stream: ``flit.valid`` and ``flit.payload`` are registers, ``flit.valid`` never waits for
``flit.ready``, and a flit offered stays offered until taken.  Latency: a message handed in
(handshake) in cycle t is queued from cycle t+1, planned in cycle t+1, can be in the flit decided in
cycle t+2, and is offered from cycle t+6 (one cycle for the plan stage, one for stage W, two for the
CRC, more than the unpipelined packer's t+2; docs/link_layer.md, "RTL pipelining (Fmax)", says what
each stage bought).  Throughput: one flit per cycle while ``flit.ready`` stays high; each input takes
one message per cycle.  Lockstep with the golden model (tests/test_rtl_link_tx.py): at each decision
call ``next_flit()``, then push what was accepted and add what was returned in the *previous* cycle;
the flit leaves stage B at the (OUTPUT_STAGES - 1)-th advance after the decision, into the port
register or, while the port stalls, the skid register.

Structure.
* One *window queue* per channel, a ring of entries that never move: a message is written at the tail
  (the entry's clock enable is the port handshake and the tail register alone), a sent flit moves the
  head, and message k is read at entry (head + k) mod n.  The packer must see the first
  up-to-``MAX_PER_FLIT`` queued messages of each channel at once, and take several in one cycle, which
  a FIFO with a single read port cannot do.  Only ``min(depth, MAX_PER_FLIT)`` messages are looked at
  (the *window*), and ``ready`` is ``count != depth``.  The entries are in RAM, one copy per message of
  the window: copy k's read port registers entry (head + k) mod n in the cycle of the decision, so the
  build reads message k of the flit from a register.
* The data ring also holds the *lines owed*: a sent data header's line stays in its entry until its
  last chunk is sent (``line_head``, ``nlines`` and ``cidx``, the next chunk of the first owed line),
  so the owed lines and then the lines of the queued headers are consecutive entries from
  ``line_head`` and nothing is copied.  After any flit at most ``MAX_PER_FLIT[DataHdr]`` lines are owed
  (the rollover rule finishes an older line within the flit), so the data ring has ``data_depth`` +
  that many entries; ``data.ready`` still counts queued headers against ``data_depth``.  The ring's
  headers are in RAM like the other rings' messages; its lines are in four RAM banks, one per chunk
  position (bank c holds chunk c of every entry), read through registered ports whose addresses are
  formed a cycle ahead from what
  ``line_head`` and ``cidx`` will be: the chunks of one flit are consecutive, at most four, so each
  comes from a bank of its own and a slot's chunk is a 4-to-1 choice of the banks' outputs.
* Stage 1, the *plan* (registered every cycle): which flit kind (all-data if >= 4 chunks owed, else
  protocol if anything is queued, else LLCRD if acks wait or a credit return is ready, else nothing);
  for a protocol flit its key (the state below) and the totals per channel; the credit step per
  class, Ak, the LLCRD ack count.
  The slot choice depends only on ``avail`` = min(queued, MAX_PER_FLIT) per channel, the priority
  index and the chunks owed (0..3): never on message contents.  So the whole slot 0 -> 3 chain, the
  golden packer's own policy (``cxl.packing.plan_flit``, defined there once for both), is enumerated
  in Python at elaboration time (``_plans``) into tables indexed by that small state (900 entries
  for the default parameters), which synthesize to a few LUT levels instead of the former 13-level
  combinational slot chain: the plan stage looks up the narrow part (totals, G0 count, owed after,
  full), stage W the slot layout.  The chunks-owed count is a
  register of its own, and the plan carries its value after the planned flit.  The whole plan (the
  table lookup, the kind, the credit steps and codes, Ak, the LLCRD acks) is formed for both outcomes
  of the cycle's decision (the planned flit decided now, or nothing decided) from registers alone,
  and ``decide`` selects between them in front of the plan registers: two plan tables, so
  ``decide`` is one mux away from them (it depended on ``flit.ready`` before the port's skid
  register; now on that register and ``pause``).
* The *decision* (in the deciding cycle): the queue heads, owed lines, counters and priority are
  updated from the registered plan (for the heads both outcomes, planned flit sent or not, are formed
  from registers and ``decide`` selects last), and stage W registers
  the flit's slot layout from a second table over the plan's registered key (the format code of every
  slot, the messages each slot takes per channel and how many were taken before it, the chunk each G0
  slot takes), with the queue heads, ``cidx`` and the header and LLCRD fields as they were at the
  decision.  The rings' read ports and the chunk banks are read in the deciding cycle.
* Stage 2, the *build* (the cycle after the decision): stage W selects the flit's messages per slot
  position (message ``base + r``), the chunks, header fields and LLCRD fields; stage A takes the flit.
  G-slots 1-3 are built by their slot code for every kind of flit: stage W registers G0 and the chunk
  index for an all-data flit's slots, and a code no format has (bits 0) for an LLCRD's, so only slot 0
  chooses between the three kinds.
* Stage 3, the *CRC*, over two registers: stage B takes A's flit with the CRCs of its eight parts,
  the port register B's flit with their XOR (see "Timing").

Policy, in the golden model's words (``Packer.next_flit``): all-data flit when >= 4 chunks are owed;
else a protocol flit when a message or chunk is queued (the priority channel rotates req -> rsp ->
data after each protocol flit; credits: per class the largest of 0, 1, 2, 4, .., 64 not above what
waits; Ak when >= 8 acks wait, taking 8); else an LLCRD (same credit rule, acks up to 255) when acks
wait or a credit return is ready (with ``credit_batch`` B > 1: B credits of a class wait, or a
``quiet`` counter shows B - 1 decisions since the last flit with credit fields); else no flit.
Downstream an H2D Req joins a flit only after every H2D Rsp queued before it has gone in an earlier
flit (a GO before the snoop behind it, ``cxl.flit.ORDERED_BEHIND``; an H2D Rsp handed in in the same
cycle as an H2D Req counts as before it): per Req entry a count of the Rsps still ahead of it,
and the plan's Req count is limited to the prefix of entries with none ahead.  With ``wait`` > 0 the
protocol flit may be held instead (the model's "Waiting to fill"): the plan stage decides the hold
from a *full* bit of the plan table (``cxl.packing.flit_full``, enumerated like the plans), the
chunks owed, the due acks and credits and a counter of decisions since the last protocol flit; a held
decision offers no flit and changes nothing but that counter.  At ``wait`` = 0 none of this logic is
built.

Preconditions: the pending counters must not overflow ``counter_bits`` (asserted in simulation).

# Ref: docs/sources.md §2.1 (flit header, Ak = 8 flits, all-data flit and rollover),
#      §2.2 (slot formats, per-flit maxima), §2.4 (credit fields, 10-bit credit counters), §2.5 (LLCRD).
"""

from amaranth.hdl import Assert, Cat, Const, Module, Mux, Shape, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hdl.link.crc import FlitCRC
from hdl.link.ports import PAYLOAD_BITS, channel_shape, channel_stream, direction_channels, flit_stream
from cxl.messages import CODECS
from cxl.control import CONTROL_KINDS, control, encode_control
from cxl.credits import CREDIT_CLASSES, CREDIT_VALUES, encode_credit
from cxl.flit import (ACKS_DUE, AK_FLITS, CREDITS_DUE, CHUNKS_PER_LINE, check_credit_batch, check_pack_wait,
                      H_SLOT_BITS, HEADER_BITS, HEADER_FIELDS, MAX_PER_FLIT,
                      ORDERED_BEHIND, S2M_NDR, SLOT_BITS, SLOTS, Direction)
from cxl.packing import flit_full, plan_flit, positions, slot_formats

__all__ = ["FlitPacker", "AK_FLITS", "COUNTER_BITS"]

COUNTER_BITS = 10     # Ref: docs/sources.md §2.4 (10-bit credit counters, <= 1023 per class)
CRC_PARTS = 8         # the CRC stage's partial CRCs (hdl/link/crc.py): eighths of the payload

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


def _tree_table(m, name, key, table, width):
    """A Signal equal to ``table[key]`` (a dict of static key -> value; other keys give 0), built as a
    tree of 2-to-1 multiplexers on the key's bits, the most significant at the root, with identical
    subtrees shared and constant ones folded.  The same function as a switch over ``table``'s keys
    (``_mux_table``), in another form: yosys turns a switch into a comparator per key and an OR of
    them, which abc9 mapped several LUT levels deeper than this tree (docs/link_layer.md, "RTL
    pipelining (Fmax)", fourteenth round)."""
    nbits = len(key)
    memo = {}

    def build(entries, b):
        # ``entries``: (key, value) of the table's keys that agree with the path to this node on the
        # bits above ``b``; a key outside the table gives 0
        distinct = {v for _, v in entries}
        if len(entries) < 1 << (b + 1):
            distinct.add(0)
        if len(distinct) == 1:
            return Const(distinct.pop(), width)
        low = tuple(sorted((k & ((1 << (b + 1)) - 1), v) for k, v in entries))
        if (b, low) not in memo:
            node = Signal(width, name=f"{name}_t{len(memo)}")
            m.d.comb += node.eq(Mux(key[b], build([e for e in entries if e[0] >> b & 1], b - 1),
                                    build([e for e in entries if not e[0] >> b & 1], b - 1)))
            memo[b, low] = node
        return memo[b, low]

    out = Signal(width, name=name)
    m.d.comb += out.eq(build(list(table.items()), nbits - 1))
    return out


def _at_least(x, v):
    """``x >= v`` for an unsigned ``x``; for a power of two ``v``, an OR of ``x``'s bits from log2(v) up
    (yosys maps a ``>=`` to a carry chain)."""
    if v <= 0:
        return Const(1, 1)
    if v & (v - 1):
        return x >= v
    lg = v.bit_length() - 1
    return x[lg:].any() if lg < len(x) else Const(0, 1)


def _ring_add(m, a, b, n, name):
    """A Signal equal to ``(a + b) mod n`` (a ring-queue index), exact for ``0 <= a < n`` and
    ``0 <= b <= n``: the low bits when ``n`` is a power of two, else one conditional subtract.  (The
    build also forms it for message positions past the window, whose value is masked and unused.)"""
    out = Signal(range(n), name=name)
    total = a + b
    if n & (n - 1) == 0:
        m.d.comb += out.eq(total)              # truncated to log2(n) bits
    else:
        m.d.comb += out.eq(Mux(total >= n, total - n, total))
    return out


class FlitPacker(wiring.Component):
    """TX flit packer of one direction (see the module docstring for ports, timing and policy).

    Parameters: ``upstream`` (True: D2H channels, False: H2D), ``depth`` (entries of the req and rsp
    queues), ``data_depth`` (entries of the data queue, each a header and a 64-byte line),
    ``counter_bits`` (width of the pending credit and ack counters and of their add inputs), ``wait``
    (decisions a partly filled protocol flit may be held for more messages to join it; 0: never),
    ``credit_batch`` (credits an idle packer gathers before an LLCRD, ``models.flit.packer``
    "Batching credit returns"; 1: an LLCRD whenever a credit waits).
    """

    OUTPUT_STAGES = 4       # registers from a decision to the port: W (layout), A, B (CRC), the port
    # Flits decided and not yet taken when the port stalls: the output stages and the skid register
    # beside the port (it takes stage B's flit in the cycle the port stops being taken).  The link
    # port's retry-buffer reserve counts them (hdl/link/port.py).
    DECIDED_MAX = OUTPUT_STAGES + 1

    def __init__(self, upstream, *, depth=4, data_depth=4, counter_bits=COUNTER_BITS,
                 wait=0, credit_batch=1):
        if not isinstance(upstream, bool):
            raise ValueError(f"upstream={upstream!r}: must be True (D2H) or False (H2D)")
        for name, v in (("depth", depth), ("data_depth", data_depth), ("counter_bits", counter_bits)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name}={v!r}: must be an integer >= 1")
        self.wait = check_pack_wait(wait)
        self.credit_batch = check_credit_batch(credit_batch)
        self.upstream = upstream
        self.direction = Direction.UPSTREAM if upstream else Direction.DOWNSTREAM
        self.channels = direction_channels(upstream)
        assert self.channels == self.direction.channels      # ports.py and the model agree
        self.depths = dict(zip(self.channels, (depth, depth, data_depth)))
        self.counter_bits = counter_bits
        members = {name: In(channel_stream(ch)) for name, ch in zip(_PORTS, self.channels)}
        members.update({f"crd_{k}": In(counter_bits) for k in CREDIT_CLASSES})
        members.update(ack_add=In(counter_bits), pause=In(1), flit=Out(flit_stream()), flit_lazy=Out(1))
        super().__init__(members)

    # ------------------------------------------------------------------ helpers
    def _window(self, ch):
        """How many queued messages of ``ch`` the packer looks at: no flit takes more."""
        return min(self.depths[ch], MAX_PER_FLIT[ch])

    def _plans(self):
        """The protocol-flit plan (``cxl.packing.plan_flit``, the golden packer's own policy) for every
        visible state, enumerated at elaboration time, with its *full* bit (``cxl.packing.flit_full``,
        used by ``wait`` only; a flit with chunks owed is never held).  Key: (``avail`` per channel =
        min(queued, MAX_PER_FLIT), priority index, chunks owed 0..3): the plan depends on these few
        numbers only, never on message contents."""
        ranges = [range(min(self._window(ch), MAX_PER_FLIT[ch]) + 1) for ch in self.channels]
        plans = {}
        for a0 in ranges[0]:
            for a1 in ranges[1]:
                for a2 in ranges[2]:
                    for prio in range(len(self.channels)):
                        for owed in range(CHUNKS_PER_LINE):
                            avail = (a0, a1, a2)
                            plans[a0, a1, a2, prio, owed] = (plan_flit(self.direction, avail, prio, owed),
                                                             owed == 0 and flit_full(self.direction, avail, prio))
        return plans

    # ------------------------------------------------------------------ elaborate
    def elaborate(self, platform):
        m = Module()
        chans = self.channels
        data_ch = chans[2]
        ports = dict(zip(chans, (self.req, self.rsp, self.data)))
        h_formats, g_formats, g0 = slot_formats(self.direction)
        chunk_bits = SLOT_BITS                     # a data chunk fills one G-slot
        cpl = CHUNKS_PER_LINE
        n_prio = len(chans)

        # -------------------------------------------------------------- the registered plan (stage 1)
        # Decided in the cycle before the flit is built (see "Timing" in the module docstring).
        d_alldata, d_proto, d_llcrd = Signal(name="d_alldata"), Signal(name="d_proto"), Signal(name="d_llcrd")
        # The decided flit's slot layout, registered in the cycle of the decision from the plan's
        # registered key (``d_key``), and read by the build one cycle later (stage W).
        w_code = [Signal(_WIDTH[f"slot{s}"], name=f"w_s{s}_code") for s in range(SLOTS)]
        w_take = [{ch: Signal(range(MAX_PER_FLIT[ch] + 1), name=f"w_s{s}_{ch.name.lower()}_take") for ch in chans}
                  for s in range(SLOTS)]
        w_base = [{ch: Signal(range(MAX_PER_FLIT[ch] + 1), name=f"w_s{s}_{ch.name.lower()}_base") for ch in chans}
                  for s in range(SLOTS)]
        # The chunk a G0 slot s takes: chunk cidx + (G0 slots before s) of the virtual line sequence.
        # A protocol flit is planned with fewer than CHUNKS_PER_LINE chunks owed, and then ``cidx`` is
        # (-owed) mod CHUNKS_PER_LINE (one line owed, or none and cidx 0), so the index is a function of
        # the plan's key and comes out of the plan table: no adder in front of the chunk muxes.
        w_cx = [Signal(range(CHUNKS_PER_LINE - 1 + SLOTS), name=f"w_s{s}_chunk") for s in range(SLOTS)]
        assert CHUNKS_PER_LINE & (CHUNKS_PER_LINE - 1) == 0        # the Assert below takes mod by a bit slice
        d_total = {ch: Signal(range(MAX_PER_FLIT[ch] + 1), name=f"d_{ch.name.lower()}_total") for ch in chans}
        d_gtotal = Signal(range(SLOTS))            # G0 slots of the planned protocol flit
        d_ak = Signal()
        d_crd_step = {k: Signal(range(max(CREDIT_VALUES) + 1), name=f"d_{k}_crd_step") for k in CREDIT_CLASSES}
        d_crd_code = {k: Signal(_WIDTH[f"{k}_crd"], name=f"d_{k}_crd_code") for k in CREDIT_CLASSES}
        d_llcrd_acks = Signal(range(_LLCRD_MAX_ACKS + 1))

        out_valid = Signal()                       # stage A: the decided flit, without its CRC
        out_payload = Signal(PAYLOAD_BITS)
        port_valid = Signal()                      # the port register: the flit with its CRC
        port_payload = Signal.like(self.flit.payload)
        skid_valid = Signal()                      # the skid register: B's flit, taken while the port stalled
        advance = Signal()                         # the output stages move (the skid register is empty)
        decide = Signal()
        m.d.comb += [advance.eq(~skid_valid),
                     decide.eq(advance & ~self.pause)]
        dp, da, dl = Signal(), Signal(), Signal()  # the planned flit is sent now: protocol / all-data / LLCRD
        m.d.comb += [dp.eq(decide & d_proto), da.eq(decide & d_alldata), dl.eq(decide & d_llcrd)]

        # -------------------------------------------------------------- input window queues (rings)
        # Entries never move: a message is written at the tail (its clock enable depends only on the
        # port's handshake and the tail register, not on ``flit.ready``), and the flit reads entry
        # (head + k) mod n; a sent flit only moves the head.  Before, the queues were shift registers
        # and the enable of every entry bit (a 512-bit line per data entry) hung on ``decide``.
        # The data ring also keeps the lines (in the chunk banks below) whose headers were sent and
        # whose chunks are still owed (the "line buffer"): owed lines from ``line_head``, then the queued data entries from
        # ``head`` = line_head + nlines, so the virtual line sequence (owed lines, then the lines of
        # the queued headers) is ring entries line_head, line_head + 1, ...  After any flit at most
        # ``MAX_PER_FLIT[DataHdr]`` lines are owed (the rollover rule finishes an older line within
        # the flit), so ``data_depth`` + that many entries never overflow; ``data.ready`` still counts
        # queued headers only, as before.
        lq_depth = MAX_PER_FLIT[data_ch]
        count, cnt_vis, pops, pushes, head, head_vis, ring = {}, {}, {}, {}, {}, {}, {}
        msg_of_flit = {}                           # per channel: message k of the decided flit, registered
        head_sent, tails = {}, {}
        for ch, pname in zip(chans, _PORTS):
            depth, port = self.depths[ch], ports[ch]
            # The data ring's extra entries hold the owed lines.  The req and rsp rings need none: a
            # decided flit's messages are read into registers at its decision (below), so its entries
            # are free for new messages from the next edge on.
            n = depth + (lq_depth if ch is data_ch else 0)
            ring[ch] = n
            # The data ring's entries hold the headers only; their lines are in the chunk banks below.
            shape = channel_shape(ch)
            shape = shape.members["hdr"] if ch is data_ch else shape
            cnt = Signal(range(depth + 1), name=f"{pname}_count")
            hd = Signal(range(n), name=f"{pname}_head")
            tail = Signal(range(n), name=f"{pname}_tail")
            pop = Signal(range(self._window(ch) + 1), name=f"{pname}_pop")
            count[ch], head[ch] = cnt, hd
            m.d.comb += pop.eq(Mux(dp, d_total[ch], 0))
            # ``ready`` is ``count != depth``, kept in a register of its own (``full``), so that the
            # handshake, and the count's update that adds it, start at a flip-flop: as a compare on the
            # count it was a loop of its own, the count -> the compare -> the handshake -> the add ->
            # the count (the routed critical path of two placement seeds; docs/link_layer.md, "RTL
            # pipelining (Fmax)", sixteenth round).  A flit that takes a message of the channel leaves
            # the queue below ``depth`` (a full queue takes no message in that cycle, and one with room
            # takes at most one); else the queue fills when a message comes with one entry left.
            full = Signal(name=f"{pname}_full")
            m.d.comb += port.ready.eq(~full)
            m.d.sync += [full.eq(~(dp & (d_total[ch] != 0)) & (full | (port.valid & ~full & (cnt == depth - 1)))),
                         Assert(full == (cnt == depth), f"{pname}: the full register out of step with the count")]
            push = Signal(name=f"{pname}_push")
            m.d.comb += push.eq(port.valid & port.ready)
            pops[ch], pushes[ch] = pop, push
            # The ring's entries are in RAM, one copy per message a flit can take from it: copy k's read
            # port reads entry head + k in the cycle of the decision and registers it for the build
            # (held while the port stalls: its enable is ``advance``, like stage W's registers).  So
            # the build reads message k of the flit from a register, and chooses among at most a
            # window of them per slot position, where it chose among the ring's n entries (flip-flops)
            # by an index it first added up (docs/link_layer.md, "RTL pipelining (Fmax)", twelfth
            # round).  No transparency is needed: a decided flit's messages were written at least two
            # edges before its decision (a message handed in is planned a cycle later).
            msg_of_flit[ch] = []
            for k in range(self._window(ch)):
                mem = Memory(shape=shape, depth=n, init=[])
                m.submodules[f"{pname}_ring{k}"] = mem
                wr, rd = mem.write_port(), mem.read_port()
                m.d.comb += [wr.addr.eq(tail), wr.en.eq(push),
                             wr.data.eq(port.payload.hdr if ch is data_ch else port.payload),
                             rd.addr.eq(_ring_add(m, hd, k, n, f"{pname}_ring{k}_at")), rd.en.eq(advance)]
                msg_of_flit[ch].append(Value.cast(rd.data))
            m.d.sync += tail.eq(Mux(push, _ring_add(m, tail, 1, n, f"{pname}_tail_inc"), tail))
            tails[ch] = tail
            # Head after the flit decided now: both outcomes from registers, ``dp`` selects last.
            head_sent[ch] = _ring_add(m, hd, d_total[ch], n, f"{pname}_head_sent")
            head_vis[ch] = Signal(range(n), name=f"{pname}_head_vis")
            m.d.comb += head_vis[ch].eq(Mux(dp, head_sent[ch], hd))
            m.d.sync += hd.eq(head_vis[ch])
            cnt_vis[ch] = Signal(range(depth + 1), name=f"{pname}_count_vis")
            m.d.comb += cnt_vis[ch].eq(cnt - pop)
            # Both outcomes from registers and the handshake, ``dp`` last (as ``cnt_vis + push``,
            # ``decide`` -> the subtract was one of the longest paths, when ``flit.ready`` drove it).
            m.d.sync += cnt.eq(Mux(dp, cnt - d_total[ch] + push, cnt + push))

        # -------------------------------------------------------------- GO before snoop (downstream)
        # Per queued H2D Req, ``ahead``: the H2D Rsps queued before it that are still queued (the model's
        # ``Packer.visible``).  A Req is written with the Rsp count after the edge (a Rsp handed in the
        # same cycle counts as before it), stays with its ring entry, and every sent flit's Rsps come off
        # it.  The next plan sees the Reqs whose ``ahead`` falls to 0 with the flit sent now: the prefix
        # of the queue from the head after this flit (``ahead`` never decreases along the queue) that
        # may join it.
        ordered = ORDERED_BEHIND.get(self.direction)
        req_visible_of = None
        if ordered is not None:
            req_ch, rsp_ch = ordered
            rq_n = ring[req_ch]
            rsp_next = cnt_vis[rsp_ch] + pushes[rsp_ch]
            ahead = [Signal(range(self.depths[rsp_ch] + 1), name=f"req_q{i}_ahead") for i in range(rq_n)]
            for i in range(rq_n):                    # set as the Req is written into its entry
                left = Mux(ahead[i] > pops[rsp_ch], ahead[i] - pops[rsp_ch], 0)
                m.d.sync += ahead[i].eq(Mux(pushes[req_ch] & (tails[req_ch] == i), rsp_next, left))
            cap = min(self._window(req_ch), MAX_PER_FLIT[req_ch])

            def req_visible_of(sent, tag):
                """How many Reqs from the head may join the next flit if the planned flit is ``sent``."""
                rsp_pop = Mux(sent, d_total[rsp_ch], 0)
                hv = Mux(sent, head_sent[req_ch], head[req_ch])
                may = []
                for j in range(cap):                 # cap <= depth: the window is within the queue
                    at = _ring_add(m, hv, j, rq_n, f"req_vis{j}_{tag}_index")
                    sel = _mux_table(m, f"req_vis{j}_{tag}_ahead", at, dict(enumerate(ahead)), range(self.depths[rsp_ch] + 1))
                    ok = Signal(name=f"req_vis{j}_{tag}_may_join")      # it and every Req before it
                    m.d.comb += ok.eq((sel <= rsp_pop) & (may[-1] if may else 1))
                    may.append(ok)
                vis = Signal(range(cap + 1), name=f"req_visible_{tag}")
                m.d.comb += vis.eq(sum(may))
                return vis

        # -------------------------------------------------------------- owed lines (in the data ring)
        dn = ring[data_ch]
        line_head = Signal(range(dn))              # ring entry of the first owed line
        nlines = Signal(range(lq_depth + 1))
        cidx = Signal(range(cpl))                  # chunks of the first owed line already sent
        max_done = (cpl - 1 + SLOTS) // cpl        # whole lines one flit can finish
        max_x = (cpl - 1) + SLOTS                  # cidx + chunks one flit can take
        line_head_next = Signal(range(dn))         # line_head after this cycle's flit
        cidx_vis = Signal(range(cpl))              # cidx after this cycle's flit
        # The lines are kept in RAM, one bank per chunk position: bank c holds chunk c of every ring
        # entry, written at the tail with the header (all banks in one cycle).  The chunks one flit
        # takes are consecutive in the virtual line sequence (from chunk ``cidx`` of line 0: the owed
        # lines, then the lines of the queued headers) and there are at most CHUNKS_PER_LINE of them,
        # so each is in a bank of its own: chunk x is chunk x % cpl of virtual line x // cpl, and
        # bank c's chunk in the flit is that of line 1 (entry line_head + 1) if c < cidx, else of
        # line 0.  Each bank's read address is formed from line_head and cidx in the cycle of the
        # decision, the read port registers the chunk for the build in stage W's cycle (and holds it
        # while the port stalls: its enable is ``advance``), and a slot's chunk is a 4-to-1 choice of
        # the banks' registered outputs.  No transparency is needed: a decided flit's lines were
        # written at least two edges before its decision (a message handed in is planned a cycle
        # later), and a line whose last chunk the flit takes is freed only after the read.  Before,
        # the lines were flip-flops in the ring entries, read through two dn/2-to-1 line muxes of 512
        # bits and a chunk mux behind them: the entries' clock enables and the line muxes were among
        # the link end's most congested nets (docs/synth.md).
        assert max_x - 1 < 2 * cpl                 # a flit reads chunks of virtual lines 0 and 1 only
        bank_out = []
        for c in range(cpl):
            mem = Memory(shape=chunk_bits, depth=dn, init=[])
            m.submodules[f"line_chunk{c}"] = mem
            wr = mem.write_port()
            rd = mem.read_port()
            m.d.comb += [wr.addr.eq(tails[data_ch]), wr.en.eq(pushes[data_ch]),
                         wr.data.eq(ports[data_ch].payload.data[c * chunk_bits:(c + 1) * chunk_bits]),
                         rd.addr.eq(_ring_add(m, line_head, cidx > c, dn, f"line_chunk{c}_at")),
                         rd.en.eq(advance)]
            bank_out.append(rd.data)

        # Chunk x of the virtual sequence: the output of bank x % cpl (its address chose the line).
        def chunk_at(name, x):
            return _mux_table(m, name, x[:(cpl - 1).bit_length()], dict(enumerate(bank_out)), chunk_bits)

        # The sent flit consumes its chunks of the virtual sequence (4 for an all-data flit, the planned
        # G0 count for a protocol flit); whole lines leave the front.  The line state after each kind
        # of flit is formed from registers alone, and ``da`` / ``dp`` (from ``decide``) choose last;
        # nothing moves without a flit.
        new_lines = Signal(range(MAX_PER_FLIT[data_ch] + 1))
        m.d.comb += new_lines.eq(Mux(dp, d_total[data_ch], 0))

        def lines_after(tag, g, new):
            x_end = Signal(range(cpl + SLOTS), name=f"x_end_{tag}")
            m.d.comb += x_end.eq(cidx + g)
            done = _mux_table(m, f"lines_done_{tag}", x_end, {x: x // cpl for x in range(cpl + SLOTS)},
                              range(max_done + 1))
            cidx_sum = _mux_table(m, f"cidx_sum_{tag}", x_end, {x: x % cpl for x in range(cpl + SLOTS)}, range(cpl))
            return done, cidx_sum, nlines + new - done, _ring_add(m, line_head, done, dn, f"line_head_sum_{tag}")
        after_a = lines_after("alldata", SLOTS, 0)
        after_p = lines_after("proto", d_gtotal, d_total[data_ch])
        after_0 = (0, cidx, nlines, line_head)
        done, cidx_next, nlines_next, line_head_sum = (Mux(da, a, Mux(dp, p, z))
                                                       for a, p, z in zip(after_a, after_p, after_0))
        nlines_vis = Signal(range(lq_depth + 1))
        m.d.comb += [cidx_vis.eq(cidx_next), nlines_vis.eq(nlines_next), line_head_next.eq(line_head_sum)]
        # Chunks owed: kept in a register of its own (= nlines * cpl - cidx), and the plan carries what
        # it will be after the planned flit, so the next plan does not wait for the line arithmetic.
        owed_max = lq_depth * cpl
        owed = Signal(range(owed_max + 1))
        d_owed_exec = Signal(range(owed_max + 1))
        owed_vis = Signal(range(owed_max + 1))
        m.d.comb += owed_vis.eq(Mux(decide, d_owed_exec, owed))
        m.d.sync += [owed.eq(owed_vis),
                     Assert(owed == nlines * cpl - cidx, "owed register out of step with the line buffer"),
                     # what the plan table's chunk indices (``d_cx``) rely on
                     Assert(~d_proto | (cidx == (cpl - owed)[:(cpl - 1).bit_length()]),
                            "a protocol flit planned while cidx != (-owed) mod CHUNKS_PER_LINE")]
        m.d.sync += [cidx.eq(cidx_vis), nlines.eq(nlines_vis),
                     line_head.eq(line_head_next),
                     Assert(nlines + new_lines - done <= lq_depth, "line buffer overflow"),
                     Assert(head[data_ch] == (line_head + nlines) % dn, "data ring: head != line_head + nlines"),
                     Assert(nlines + count[data_ch] <= dn, "data ring overflow")]

        # -------------------------------------------------------------- pending credits and acks
        # What the next plan needs of them (the steps, codes, "any waits", "a return is due") is formed
        # for each outcome of the flit decided now from registers alone, and the outcome (``dp``/``dl``,
        # from ``decide``) selects last: the subtract and the compare chains are not behind ``decide``
        # (they were the critical path, flit.ready -> decide -> subtract -> compare -> step register,
        # before the port's skid register took ``flit.ready`` out of ``decide``).
        # ``x`` - the credit step of ``x`` (the largest CREDIT_VALUES entry not above it), with neither
        # the step's compares nor a subtract: CREDIT_VALUES are 0 and the powers of two up to the
        # largest, so it is ``x`` - the largest if ``x`` reaches it (a decrement of the bits above),
        # else ``x`` without its highest set bit.
        crd_max = CREDIT_VALUES[-1]
        lg_max = crd_max.bit_length() - 1
        assert tuple(CREDIT_VALUES) == (0, *(1 << i for i in range(lg_max + 1)))

        def less_step(x):
            low = x[:lg_max]
            below = Cat(*[low[i] & low[i + 1:].any() for i in range(lg_max - 1)], Const(0, 1))
            return Mux(x[lg_max:].any(), Cat(low, (x[lg_max:] - 1)[:len(x) - lg_max]), below)
        crd = {k: Signal(self.counter_bits, name=f"pending_{k}_crd") for k in CREDIT_CLASSES}
        acks = Signal(self.counter_bits)
        adds = {k: getattr(self, f"crd_{k}") for k in CREDIT_CLASSES}
        crd_sent = Signal()                        # the flit decided now returns the planned credits
        m.d.comb += crd_sent.eq(dp | dl)
        crd_nz, crd_due = {}, {}                   # after the flit decided now: credits wait / are due
        crd_batch = {}                             # ... / a batch waits (``credit_batch``)
        for k in CREDIT_CLASSES:
            # What waits if the planned flit is sent, ``crd - d_crd_step``, kept in a register of its own
            # (worked out with the next step below), so that the compares on it are not behind a
            # subtract (pending credits -> subtract -> compares -> the plan's kind was the packer's
            # longest path once the plan table's loop was cut).
            left = Signal(self.counter_bits, name=f"pending_{k}_crd_left")
            nxt = Mux(crd_sent, left + adds[k], crd[k] + adds[k])
            m.d.sync += [crd[k].eq(nxt),
                         Assert(nxt < (1 << self.counter_bits), f"pending {k} credits overflow counter_bits"),
                         Assert(left == crd[k] - d_crd_step[k], f"pending {k} credits: left out of step")]
            outcomes = []
            for tag, value in (("sent", left), ("kept", crd[k])):
                # The largest CREDIT_VALUES entry not above what waits (the values ascend): later wins.
                step_next = Signal.like(d_crd_step[k], name=f"{k}_crd_step_{tag}")
                code_next = Signal.like(d_crd_code[k], name=f"{k}_crd_code_{tag}")
                m.d.comb += [step_next.eq(CREDIT_VALUES[0]), code_next.eq(encode_credit(CREDIT_VALUES[0]))]
                for v in CREDIT_VALUES[1:]:
                    with m.If(_at_least(value, v)):
                        m.d.comb += [step_next.eq(v), code_next.eq(encode_credit(v))]
                outcomes.append((step_next, code_next, value != 0, _at_least(value, CREDITS_DUE),
                                 _at_least(value, self.credit_batch)))
            (s_step, s_code, s_nz, s_due, s_full), (k_step, k_code, k_nz, k_due, k_full) = outcomes
            # ``left`` after the step: what waits less the step, from the register alone, then the one
            # add (before: a compare chain, then the add and the subtract of the step: two carry chains
            # after the compares, the packer's longest path once the plan loop was shortened;
            # docs/link_layer.md, "RTL pipelining (Fmax)", fourteenth round).
            m.d.sync += [d_crd_step[k].eq(Mux(crd_sent, s_step, k_step)),
                         d_crd_code[k].eq(Mux(crd_sent, s_code, k_code)),
                         left.eq(Mux(crd_sent, less_step(left) + adds[k], less_step(crd[k]) + adds[k]))]
            crd_nz[k], crd_due[k] = (s_nz, k_nz), (s_due, k_due)       # (if sent, if kept)
            crd_batch[k] = (s_full, k_full)
        # Acks: three outcomes (protocol flit with Ak sent, LLCRD sent, neither), ``dp``/``dl`` last.
        # What waits after each of the first two (``acks_p`` = acks - 8 if Ak, ``acks_l`` = acks - the
        # LLCRD's count) is kept in registers, worked out with the plan's Ak and LLCRD count, for the
        # same reason as the credits' ``left``.
        acks_p = Signal(self.counter_bits)
        acks_l = Signal(self.counter_bits)

        def by_outcome(f, p=dp, l=dl):
            return Mux(p, f(acks_p), Mux(l, f(acks_l), f(acks)))

        def ak_of(a):
            return _at_least(a, AK_FLITS)

        def llcrd_acks_of(a):
            return Mux(_at_least(a, _LLCRD_MAX_ACKS + 1), _LLCRD_MAX_ACKS, a)

        # What waits after Ak (``a`` - 8 if ``a`` >= 8) and after an LLCRD (``a`` - its count, so
        # ``a`` - 255 above 255, else 0), from ``a`` alone, before the one add of ``ack_add``; as
        # ``a + ack_add - ...`` the compare and two carry chains were in series.
        assert AK_FLITS & (AK_FLITS - 1) == 0
        lg_ak = AK_FLITS.bit_length() - 1

        def less_ak(a):
            return Mux(a[lg_ak:].any(), Cat(a[:lg_ak], (a[lg_ak:] - 1)[:len(a) - lg_ak]), a)

        def less_llcrd(a):
            return Mux(_at_least(a, _LLCRD_MAX_ACKS + 1), (a - _LLCRD_MAX_ACKS)[:len(a)], 0)
        acks_next = by_outcome(lambda a: a + self.ack_add)
        m.d.sync += [acks.eq(acks_next),
                     Assert(acks_next < (1 << self.counter_bits), "pending acks overflow counter_bits"),
                     Assert((acks_p == acks - Mux(d_ak, AK_FLITS, 0)) & (acks_l == acks - d_llcrd_acks),
                            "pending acks: the registers after Ak / an LLCRD out of step"),
                     d_ak.eq(by_outcome(ak_of)),
                     d_llcrd_acks.eq(by_outcome(llcrd_acks_of)),
                     acks_p.eq(by_outcome(lambda a: less_ak(a) + self.ack_add)),
                     acks_l.eq(by_outcome(lambda a: less_llcrd(a) + self.ack_add))]

        # -------------------------------------------------------------- plan the next flit
        # The plan is formed twice from registers alone, once as if the planned flit is decided now
        # ("dec": its kind, d_proto / d_llcrd / d_alldata, takes effect) and once as if nothing is
        # decided ("idle"), and ``decide`` selects between the two in front of the plan registers: two
        # plan tables, but ``decide`` -> a 2-to-1 mux is all that is left in front of them (before,
        # ``decide`` entered the table's key, and ``flit.ready`` drove ``decide``).
        prio = Signal(range(n_prio))               # index into chans; rotates per protocol flit
        prio_next = Signal(range(n_prio))
        m.d.comb += prio_next.eq(Mux(prio == n_prio - 1, 0, prio + 1))
        m.d.sync += prio.eq(Mux(dp, prio_next, prio))
        if self.wait:
            # decisions since the last protocol flit, up to ``wait`` (from reset: ``wait``, a cold link)
            since = Signal(range(self.wait + 1), init=self.wait)
            since_dec = Signal.like(since)
            m.d.comb += since_dec.eq(Mux(d_proto, 0, Mux(since != self.wait, since + 1, since)))
            m.d.sync += since.eq(Mux(decide, since_dec, since))
        if self.credit_batch > 1:
            # decisions since the last flit with credit fields (protocol or LLCRD), up to credit_batch - 1
            quiet_max = self.credit_batch - 1
            quiet = Signal(range(quiet_max + 1), init=quiet_max)
            quiet_dec = Signal.like(quiet)
            m.d.comb += quiet_dec.eq(Mux(d_proto | d_llcrd, 0, Mux(quiet != quiet_max, quiet + 1, quiet)))
            m.d.sync += quiet.eq(Mux(decide, quiet_dec, quiet))

        # The plan tables: every visible state -> one word.  The plan stage's table gives what the next
        # plan and the queue moves need (totals, G0 count, owed after, full); the slot layout (codes,
        # chunk indices, takes, bases: most of the word's bits) comes from a second table over the
        # registered key in the deciding cycle, into stage W.  With one table the layout's wide
        # multiplexers sat at the end of the plan stage, the packer's longest path (docs/link_layer.md,
        # "RTL pipelining (Fmax)").
        wide_fields = []                   # (stage W register, python getter of (plan, full, owed before))
        for s in range(SLOTS):
            wide_fields.append((w_code[s], lambda p, s=s: p[0].slots[s].fmt.code))
            wide_fields.append((w_cx[s], lambda p, s=s: (-p[2]) % cpl + p[0].slots[s].g0_before))
            for i, ch in enumerate(chans):
                wide_fields.append((w_take[s][ch], lambda p, s=s, i=i: p[0].slots[s].taken[i]))
                wide_fields.append((w_base[s][ch], lambda p, s=s, i=i: p[0].slots[s].before[i]))
        fields = []                        # (plan register, getter)
        for i, ch in enumerate(chans):
            fields.append((d_total[ch], lambda p, i=i: p[0].totals[i]))
        fields.append((d_gtotal, lambda p: p[0].g0))
        owed_field = object()                      # the owed count after the planned protocol flit
        full_field = object()                      # the plan is full (``wait`` only)
        fields.append((owed_field, lambda p: p[0].owed))
        if self.wait:
            fields.append((full_field, lambda p: int(p[1])))
        widths = [len(sig) if sig is not owed_field and sig is not full_field else
                  (Shape.cast(range(owed_max + 1)).width if sig is owed_field else 1) for sig, _ in fields]
        wide_widths = [len(sig) for sig, _ in wide_fields]
        caps = {ch: min(self._window(ch), MAX_PER_FLIT[ch]) for ch in chans}
        key_widths = [Shape.cast(range(caps[ch] + 1)).width for ch in chans] + \
                     [Shape.cast(range(n_prio)).width, Shape.cast(range(cpl)).width]
        d_key = Signal(sum(key_widths))            # the registered plan's key (avail x 3, priority, owed)
        table = {}                                 # (priority, owed) -> [(counts, word)], for both plan tables
        wide_table = []                            # (key, word)

        def pack(values, ws):
            word, shift = 0, 0
            for v, w in zip(values, ws):
                assert 0 <= v < (1 << w)
                word |= v << shift
                shift += w
            return word
        for (a0, a1, a2, p, o), plan in self._plans().items():
            keyval = pack((a0, a1, a2, p, o), key_widths)
            table.setdefault(pack((p, o), key_widths[3:]), []).append(
                (pack((a0, a1, a2), key_widths[:3]), pack([get((*plan, o)) for _, get in fields], widths)))
            wide_table.append((keyval, pack([get((*plan, o)) for _, get in wide_fields], wide_widths)))

        def plan_for(tag, p, l, owed_o):
            """The next plan if the flit decided now is a protocol flit (``p``), an LLCRD (``l``),
            and leaves ``owed_o`` chunks owed: a dict of the values for the plan registers."""
            avail = {}
            for ch in chans:
                cap = caps[ch]
                avail[ch] = Signal(range(cap + 1), name=f"{ch.name.lower()}_avail_{tag}")
                if isinstance(p, Const):               # nothing decided: min(count, cap)
                    queued = Mux(count[ch] > cap, cap, count[ch])
                else:
                    # min(count - total, cap) for every total the plan can take, from ``count`` alone,
                    # and the registered total (0 unless the plan is a protocol flit) selects: no
                    # subtract and compare behind the plan register in the plan's loop.
                    after = {k: Mux(count[ch] >= cap + k, cap, count[ch] - k)
                             for k in range(MAX_PER_FLIT[ch] + 1)}
                    queued = _mux_table(m, f"{ch.name.lower()}_queued_{tag}", d_total[ch], after, range(cap + 1))
                if req_visible_of is not None and ch is ordered[0]:     # GO before snoop: fewer may join
                    vis = req_visible_of(p, tag)
                    queued = Mux(vis < queued, vis, queued)
                m.d.comb += avail[ch].eq(queued)
            prio_o = Signal(range(n_prio), name=f"prio_{tag}")
            m.d.comb += prio_o.eq(Mux(p, prio_next, prio))
            owed_lo = Signal(range(cpl), name=f"owed_lo_{tag}")
            m.d.comb += owed_lo.eq(owed_o)                   # < cpl whenever a protocol flit is planned
            busy = Signal(name=f"busy_{tag}")                # a message or chunk is queued
            is_alldata = Signal(name=f"is_alldata_{tag}")
            taken = {ch: 0 if isinstance(p, Const) else d_total[ch] for ch in chans}     # 0 unless protocol
            m.d.comb += [busy.eq(Cat(*[count[ch] != taken[ch] for ch in chans]).any() | (owed_o != 0)),
                         is_alldata.eq(owed_o >= cpl)]
            word = Signal(sum(widths), name=f"plan_word_{tag}")
            key = Signal.like(d_key, name=f"plan_key_{tag}")
            late = Cat(avail[chans[0]], avail[chans[1]], avail[chans[2]])
            m.d.comb += key.eq(Cat(late, prio_o, owed_lo))
            # One table over the late part of the key (the counts, through the clamp select) per value
            # of its early part (priority and owed, one register and a mux away), the early part
            # choosing among them last.  With one switch over the whole key the table's decoding put
            # the counts in front of the priority's and owed's terms: the plan loop (docs/link_layer.md,
            # "RTL pipelining (Fmax)", twelfth round).
            # Each of the twelve tables is a tree of multiplexers on the late part's bits
            # (``_tree_table``), not a switch.
            words = {early: _tree_table(m, f"plan_word_{tag}_e{early}", late, dict(rows), sum(widths))
                     for early, rows in table.items()}
            with m.Switch(Cat(prio_o, owed_lo)):
                for early, w in words.items():
                    with m.Case(early):
                        m.d.comb += word.eq(w)
            out, shift = {id(d_key): key}, 0     # id(target register) -> its value in this outcome
            for (sig, _), w in zip(fields, widths):
                out[id(sig)] = word[shift:shift + w]
                shift += w
            crd_sent_o = p | l
            crd_nz_o = [Mux(crd_sent_o, crd_nz[k][0], crd_nz[k][1]) for k in CREDIT_CLASSES]
            acks_nz = by_outcome(lambda a: a != 0, p, l)
            # Waiting to fill (models.flit.packer, "Waiting to fill"): hold a protocol flit that is not
            # full while no chunk is owed, no return is due and it has been held fewer than ``wait`` times.
            hold = Signal(name=f"hold_{tag}")
            if self.wait:
                since_o = since_dec if tag == "dec" else since
                due = Cat(by_outcome(lambda a: _at_least(a, ACKS_DUE), p, l),
                          *[Mux(crd_sent_o, crd_due[k][0], crd_due[k][1]) for k in CREDIT_CLASSES]).any()
                m.d.comb += hold.eq(busy & (owed_o == 0) & ~out[id(full_field)] & ~due & (since_o != self.wait))
            out[id(d_alldata)] = is_alldata
            out[id(d_proto)] = busy & ~is_alldata & ~hold
            if self.credit_batch > 1:
                # Batching credit returns: a class with a batch waiting, or any credit once quiet long enough.
                quiet_o = quiet_dec if tag == "dec" else quiet
                ready = (Cat(*[Mux(crd_sent_o, crd_batch[k][0], crd_batch[k][1]) for k in CREDIT_CLASSES]).any()
                         | (Cat(*crd_nz_o).any() & (quiet_o == self.credit_batch - 1)))
            else:
                ready = Cat(*crd_nz_o).any()
            out[id(d_llcrd)] = ~busy & (acks_nz | ready)
            out[id(d_owed_exec)] = Mux(is_alldata, owed_o - SLOTS, Mux(busy & ~hold, out[id(owed_field)], owed_o))
            return out

        dec = plan_for("dec", d_proto, d_llcrd, d_owed_exec)
        idle = plan_for("idle", Const(0), Const(0), owed)
        targets = [sig for sig, _ in fields if sig is not owed_field and sig is not full_field]
        for sig in targets + [d_key, d_alldata, d_proto, d_llcrd, d_owed_exec]:
            if any(sig is d_total[ch] for ch in chans):      # 0 unless the plan is a protocol flit
                m.d.sync += sig.eq(Mux(decide, Mux(dec[id(d_proto)], dec[id(sig)], 0),
                                       Mux(idle[id(d_proto)], idle[id(sig)], 0)))
            else:
                m.d.sync += sig.eq(Mux(decide, dec[id(sig)], idle[id(sig)]))
        m.d.sync += Assert(d_proto | (Cat(*d_total.values()) == 0), "a planned total outside a protocol flit")

        # -------------------------------------------------------------- stage W: the decided flit's layout
        # Loaded on every advance (a decision or an empty stage), held while the port stalls: the slot
        # layout from the registered key, and what the build needs of the registers the decision
        # updates (``cidx``, the Ak, credit and LLCRD fields; the rings' read ports register the messages).
        w_alldata, w_proto, w_llcrd = Signal(name="w_alldata"), Signal(name="w_proto"), Signal(name="w_llcrd")
        w_ak, w_sz = Signal(name="w_ak"), Signal(name="w_sz")
        w_crd_code = {k: Signal.like(d_crd_code[k], name=f"w_{k}_crd_code") for k in CREDIT_CLASSES}
        w_llcrd_acks = Signal.like(d_llcrd_acks)
        w_cidx = Signal.like(cidx)
        wide_word = _tree_table(m, "wide_word", d_key, dict(wide_table), sum(wide_widths))
        # G-slots 1-3 of every flit are built by their slot code (below): the code and chunk index that
        # stage W registers for slot s >= 1 are the plan's for a protocol flit, G0 with chunk cidx + s
        # for an all-data flit, and a code no G-slot format has (the slot's bits 0) for an LLCRD or no
        # flit, so the build needs no 384-bit choice between the three kinds of flit.
        no_format = (1 << len(w_code[1])) - 1
        assert no_format not in {f.code for f in g_formats} | {g0.code}
        by_kind = {}
        for s in range(1, SLOTS):
            by_kind[id(w_code[s])] = lambda v: Mux(d_alldata, g0.code, Mux(d_proto, v, no_format))
            by_kind[id(w_cx[s])] = lambda v, s=s: Mux(d_alldata, (cidx + s)[:(cpl - 1).bit_length()], v)
        with m.If(advance):
            shift = 0
            for (sig, _), w in zip(wide_fields, wide_widths):
                m.d.sync += sig.eq(by_kind.get(id(sig), lambda v: v)(wide_word[shift:shift + w]))
                shift += w
            m.d.sync += [w_alldata.eq(da), w_proto.eq(dp), w_llcrd.eq(dl), w_ak.eq(d_ak),
                         w_sz.eq(d_total[data_ch] != 0), w_llcrd_acks.eq(d_llcrd_acks), w_cidx.eq(cidx),
                         *[w_crd_code[k].eq(d_crd_code[k]) for k in CREDIT_CLASSES]]

        # -------------------------------------------------------------- build the decided flit (stage 2)
        # From stage W, a cycle after the decision.  Message r of ``ch`` behind ``base`` already-taken
        # ones is message base + r of the flit, which the ring's read port k = base + r registered in
        # the cycle of the decision (above).
        def slot_bits(s, formats, capacity):
            msgs = {}
            for ch in chans:
                limit = self._window(ch)
                most = max([positions(f, ch) for f in formats] + [0])
                for r in range(most):
                    name = f"s{s}_{ch.name.lower()}_at{r}"
                    if s == 0:
                        msgs[ch, r] = msg_of_flit[ch][r] if r < limit else Const(0, CODECS[ch].width)
                    else:
                        # base + r < window whenever the slot takes message r (else it is masked below)
                        msgs[ch, r] = _mux_table(m, name, w_base[s][ch],
                                                 {b: msg_of_flit[ch][b + r] for b in range(limit - r)},
                                                 CODECS[ch].width)
            table = {}
            for f in formats:
                fb = Signal(capacity, name=f"s{s}_{f.name}_bits")
                ordinal = dict.fromkeys(chans, 0)
                for item, offset, width in f.fields:
                    if item == S2M_NDR:            # CXL.mem position: always sent as zeros
                        continue
                    r = ordinal[item]
                    ordinal[item] += 1
                    m.d.comb += fb[offset:offset + width].eq(Mux(w_take[s][item] > r, msgs[item, r], 0))
                table[f.code] = fb
            return table

        bits0 = _mux_table(m, "s0_bits", w_code[0], slot_bits(0, h_formats, H_SLOT_BITS), H_SLOT_BITS)
        proto_slots = [bits0]
        for s in range(1, SLOTS):
            table = slot_bits(s, g_formats, SLOT_BITS)
            table[g0.code] = chunk_at(f"s{s}_chunk", w_cx[s])
            proto_slots.append(_mux_table(m, f"s{s}_bits", w_code[s], table, SLOT_BITS))

        crd_code = w_crd_code
        header_values = {"type": 0, "ak": w_ak, "sz": w_sz,
                         **{f"slot{s}": w_code[s] for s in range(SLOTS)},
                         **{f"{k}_crd": crd_code[k] for k in CREDIT_CLASSES}}
        proto0 = Signal(SLOT_BITS)                 # slot 0 of a protocol flit: the header and the H-slot
        for fname, offset, width in HEADER_FIELDS:           # fields not named stay 0 (reserved, BE)
            if fname in header_values:
                m.d.comb += proto0[offset:offset + width].eq(header_values[fname])
        m.d.comb += proto0[HEADER_BITS:SLOT_BITS].eq(bits0)

        # -------------------------------------------------------------- all-data flit
        # Its slot 0 (slots 1-3 are the slot code's G0 chunks above, stage W's codes say so).
        alldata0 = chunk_at("ad0_chunk", w_cidx)

        # -------------------------------------------------------------- LLCRD control flit
        llcrd = Signal(SLOT_BITS)                  # slot 0's bits; an LLCRD has none beyond (asserted)
        assert encode_control(control("LLCRD")) >> SLOT_BITS == 0
        assert all(offset + width <= SLOT_BITS for pieces in _LLCRD_FIELDS.values() for _, offset, width in pieces)
        llcrd_values = {"acks": w_llcrd_acks, **{f"{k}_crd": crd_code[k] for k in CREDIT_CLASSES}}
        assert set(llcrd_values) == set(_LLCRD_FIELDS), "LLCRD fields changed in cxl.control"
        m.d.comb += llcrd.eq(encode_control(control("LLCRD")))   # Type, LLCTRL, SubType; fields 0
        for fname, pieces in _LLCRD_FIELDS.items():
            for shift, offset, width in pieces:
                m.d.comb += llcrd[offset:offset + width].eq(llcrd_values[fname][shift:shift + width])

        # -------------------------------------------------------------- output pipeline
        # Three registers: stage A takes the decided flit; stage B takes A's flit and the partial CRCs
        # of its eight 64-bit parts (``FlitCRC(CRC_PARTS)``: XOR trees over up to ~32 payload bits
        # each, three LUT levels; with four 128-bit quarters a tree of ~64 bits was one of the routed
        # critical paths, 6.70 ns: docs/link_layer.md, "RTL pipelining (Fmax)", sixteenth round); the
        # port register takes B's flit with the XOR of the partials (two LUT levels per CRC bit).
        # With the whole CRC between two registers its trees (up to a few hundred payload bits per CRC
        # bit) were the packer's longest path once the plan was cut (docs/link_layer.md, "RTL
        # pipelining (Fmax)").  The stages move together whenever the skid register beside the port is
        # empty (``advance``, a register: ``flit.ready`` reaches only the port's and the skid's loads,
        # not the decision or the ~3 000 stage bits; as ``~port_valid | flit.ready`` it was the
        # packer's longest path, through ``decide`` into the plan's outcomes, and in the link end the
        # retry rules' ``ack_pending`` -> ``flit.ready`` -> the stages' enables).  The port register
        # loads whenever it is empty or taken: the skid's flit if it holds one (the stages wait that
        # cycle), else B's.  While the port holds an untaken flit, B's flit moves into the skid
        # register instead, once, and the stages stop until the port takes the skid's flit.  So
        # ``flit`` stays a valid/ready stream whose valid is a register and never waits for ready, one
        # flit per cycle passes while ready stays high, and a stalled packer holds ``DECIDED_MAX`` =
        # OUTPUT_STAGES + 1 decided flits.  Stages A and B load their payloads on every advance (only
        # their valid bits say whether they hold a flit).  Latency: a flit decided in cycle t is
        # offered from cycle t + OUTPUT_STAGES (stage W, A, B, the port) if the port does not stall.
        m.submodules.crc = crc = FlitCRC(CRC_PARTS)
        m.d.comb += crc.payload.eq(out_payload)
        mid_valid, mid_lazy = Signal(), Signal()     # stage B: A's flit with its partial CRCs
        mid_payload = Signal(PAYLOAD_BITS)
        mid_partials = Signal.like(crc.partials)
        mid_crc = FlitCRC.combine(m, mid_partials, name="mid_crc")   # outside m.If(advance): no enable term
        out_lazy, port_lazy = Signal(), Signal()     # the LLCRD with no credits, beside each stage's flit
        with m.If(advance):
            m.d.sync += [out_valid.eq(w_alldata | w_proto | w_llcrd),
                         out_payload.eq(Cat(Mux(w_alldata, alldata0, Mux(w_proto, proto0, llcrd)), *proto_slots[1:])),
                         out_lazy.eq(w_llcrd
                                     & (Cat(*(crd_code[k] for k in CREDIT_CLASSES)) == 0)),
                         mid_valid.eq(out_valid), mid_payload.eq(out_payload),
                         mid_partials.eq(crc.partials), mid_lazy.eq(out_lazy)]
        skid_payload, skid_lazy = Signal.like(port_payload), Signal()
        with m.If(~port_valid | self.flit.ready):
            m.d.sync += [port_valid.eq(Mux(skid_valid, 1, mid_valid)),
                         port_payload.eq(Mux(skid_valid, skid_payload, Cat(mid_payload, mid_crc))),
                         port_lazy.eq(Mux(skid_valid, skid_lazy, mid_lazy)),
                         skid_valid.eq(0)]
        with m.Elif(~skid_valid):
            m.d.sync += [skid_valid.eq(mid_valid), skid_payload.eq(Cat(mid_payload, mid_crc)),
                         skid_lazy.eq(mid_lazy)]
        m.d.comb += [self.flit.valid.eq(port_valid),
                     self.flit.payload.eq(port_payload),
                     self.flit_lazy.eq(port_lazy)]
        return m
