"""Payload efficiency of the golden packer on a few workloads, beside the analytic optimum.
"""

import math
import random

from cxl.flit import CHUNKS_PER_LINE, MAX_PER_FLIT, SLOT_FORMATS, SLOTS, WIRE_BYTES, Direction
from cxl.messages import CODECS, LINE_BYTES, Channel

from .packer import pack
from .unpacker import unpack
from .vectors import random_msg

__all__ = ["WORKLOADS", "MIXED", "workload_streams", "optimum", "fewest_flits", "efficiency"]


WORKLOADS = ("streaming_reads", "streaming_writes", "snoop_storm", "mixed")

# The mixed workload, per 4 transactions: 2 reads (D2H Req up; H2D Rsp GO + H2D DataHdr with the line
# down), 1 write-back (D2H Req up; H2D Rsp GO_WritePull down; D2H DataHdr with the line up) and 1 snoop
# (H2D Req down; D2H Rsp up).  An assumption: a read-mostly coherent mix with some write-back and snoop
# traffic, not a measured trace.
MIXED = {Channel.D2H_REQ: 3, Channel.H2D_RSP: 3, Channel.H2D_DATA: 2, Channel.D2H_DATA: 1,
         Channel.H2D_REQ: 1, Channel.D2H_RSP: 1}


def _payload_bytes(msg):
    # Useful bytes of a message: its layout's bits (cxl.messages widths) plus the line it carries.
    return CODECS[msg.chan].width / 8 + (LINE_BYTES if msg.data is not None else 0)


def workload_streams(workload, n, rng):
    """(direction, messages) streams of a workload with ``n`` lines or snoops."""
    if n < 1:
        raise ValueError(f"a workload needs at least one line or snoop, got n={n}")
    if workload == "streaming_reads":        # host returns read data: H2D DataHdr + line
        return [(Direction.DOWNSTREAM, [random_msg(rng, Channel.H2D_DATA) for _ in range(n)])]
    if workload == "streaming_writes":       # device writes back: D2H DataHdr + line
        return [(Direction.UPSTREAM, [random_msg(rng, Channel.D2H_DATA) for _ in range(n)])]
    if workload == "snoop_storm":            # snoops down, their (dataless) responses up
        return [(Direction.DOWNSTREAM, [random_msg(rng, Channel.H2D_REQ) for _ in range(n)]),
                (Direction.UPSTREAM, [random_msg(rng, Channel.D2H_RSP) for _ in range(n)])]
    if workload == "mixed":                  # n transactions in the MIXED proportions, interleaved
        out = []
        for direction in (Direction.DOWNSTREAM, Direction.UPSTREAM):
            msgs = []
            for i in range(0, n, 4):
                for chan in direction.channels:
                    msgs += [random_msg(rng, chan) for _ in range(MIXED[chan] * min(4, n - i) // 4)]
            out.append((direction, msgs))
        return out
    raise ValueError(f"unknown workload {workload!r}; known: {WORKLOADS}")


def fewest_flits(direction, msgs):
    """A lower bound on the flits any legal transmitter needs to send ``msgs`` (one direction, all
    queued at once, no control flits), by counting slots: the fewest protocol flits ``p`` plus all-data
    flits ``a`` such that the messages fit the slot formats of ``cxl.flit.SLOT_FORMATS``, an integer
    programme solved exactly by z3 (the project's pinned solver).  It keeps every rule that counts:
    one H slot and three G slots per protocol flit, a data chunk in a G0 slot or an all-data flit
    (four), each format's positions, a multi-data-header format only with 2 or more Data Headers,
    one slot with Data Headers per flit, and the per-flit maxima (CXL 1.1 / 3.x §4.2.5, docs/sources.md §2.2).
    It drops only where in the flit things go (the rollover and next-data-slot positions) and the
    queue order, so it can only be lower than the truth; on the mixed workload at 4-24 transactions it
    equals the optimum found by searching every legal flit sequence (tests/test_flit.py).  A bound of
    bits alone (message bits / 128 per slot) is about 7 % higher in efficiency on ``mixed`` and cannot
    be reached: no upstream format carries two D2H Req, so a slot holds only what fits its positions."""
    import z3                                   # here: only the efficiency bound needs the solver

    data_chan = direction.data_channel
    count = {ch: sum(m.chan is ch for m in msgs) for ch in direction.channels}
    if not any(count.values()):
        return 0
    formats = [f for (d, _, _), f in SLOT_FORMATS.items() if d is direction and not f.data]
    p, a, g0 = z3.Int("protocol"), z3.Int("all_data"), z3.Int("g0_chunks")
    opt = z3.Optimize()
    opt.add(p >= 0, a >= 0, g0 >= 0, CHUNKS_PER_LINE * a + g0 == CHUNKS_PER_LINE * count[data_chan])
    slots = {f: z3.Int(f"slots_{f.name}") for f in formats}
    carried = {ch: [] for ch in direction.channels}
    data_slots = []                             # slots that carry Data Headers, at most one per flit
    for f, x in slots.items():
        opt.add(x >= 0)
        for ch in direction.channels:
            cap = sum(item is ch for item, _, _ in f.fields)
            if cap:
                c = z3.Int(f"{ch.name}_in_{f.name}")
                opt.add(c >= 0, c <= cap * x)
                carried[ch].append(c)
                if ch is data_chan:
                    if f.mdh:
                        opt.add(c >= 2 * x)     # an MDH slot only with 2 or more Data Headers
                        data_slots.append(x)
                    else:
                        data_slots.append(c)    # one Data Header position: one slot per header
    for ch, cs in carried.items():
        opt.add(z3.Sum(cs) == count[ch] if cs else count[ch] == 0)
        opt.add(MAX_PER_FLIT[ch] * p >= count[ch])
    opt.add(z3.Sum([x for f, x in slots.items() if f.kind == "H"]) <= p)
    opt.add(z3.Sum([x for f, x in slots.items() if f.kind == "G"]) + g0 <= (SLOTS - 1) * p)
    opt.add(z3.Sum(data_slots) <= p)
    opt.minimize(p + a)
    if opt.check() != z3.sat:
        raise ValueError(f"{direction.value}: no flit sequence carries {count}")
    return opt.model().eval(p + a).as_long()


def optimum(workload, n=None):
    """The analytic optimum payload efficiency (payload bytes / 68 wire bytes per flit) of a workload of
    ``n`` lines or snoops (None: the limit as n grows).  For ``mixed`` it is a bound (``"bound": True``):
    the efficiency at :func:`fewest_flits` per direction, the fewest flits the slot formats allow.

    Streaming: each line needs 4 G0 slots and a data header; at most 4 data headers fit a slot and a
    flit (facts §2.2), so n lines need at least 4n + ceil(n/4) slots, i.e. ceil((4n + ceil(n/4)) / 4)
    flits; the limit is 17 flits per 16 lines.  Snoop storm: at most 2 H2D Req per downstream flit and
    at most 2 D2H Rsp per upstream flit (facts §2.2), so ceil(n/2) flits each way."""
    rng = random.Random(0)
    # The limit: the periodic pattern of 16 lines or snoops; mixed has none, 4096 transactions stand in.
    streams = workload_streams(workload, n if n is not None else 4096 if workload == "mixed" else 16, rng)
    payload = sum(_payload_bytes(m) for _, msgs in streams for m in msgs)
    data = sum(LINE_BYTES for _, msgs in streams for m in msgs if m.data is not None)
    if workload == "mixed":
        flits = sum(fewest_flits(direction, msgs) for direction, msgs in streams)
        wire = WIRE_BYTES * flits
        return {"efficiency": payload / wire, "data_efficiency": data / wire, "flits": flits, "bound": True}
    if n is None:       # per 16 lines / snoops, the periodic pattern
        flits = 17 if workload != "snoop_storm" else 16
    elif workload == "snoop_storm":
        flits = 2 * math.ceil(n / 2)
    else:
        flits = math.ceil((CHUNKS_PER_LINE * n + math.ceil(n / 4)) / SLOTS)
    wire = WIRE_BYTES * flits
    return {"efficiency": payload / wire, "data_efficiency": data / wire, "flits": flits}


def efficiency(workload, n=1024, seed=0):
    """Measured payload efficiency of :class:`Packer` on a workload, beside its analytic optimum.

    Payload bytes = the bits of every message (at its cxl.messages width) / 8, plus 64 B per data line;
    wire bytes = 68 per flit (protocol ID and CRC counted), both directions together for the snoop storm.
    ``data_efficiency`` counts only the 64 B lines.  Returns a dict with the measured figures, the
    finite-``n`` optimum and the limit as n grows."""
    rng = random.Random(seed)
    flits, payload, data = 0, 0.0, 0
    for direction, msgs in workload_streams(workload, n, rng):
        out = pack(direction, msgs)
        got = unpack(direction, out)                          # the measurement is of a correct stream
        for chan in direction.channels:
            assert got.messages[chan] == [m for m in msgs if m.chan is chan]
        flits += len(out)
        payload += sum(_payload_bytes(m) for m in msgs)
        data += sum(LINE_BYTES for m in msgs if m.data is not None)
    wire = WIRE_BYTES * flits
    return {"workload": workload, "n": n, "flits": flits, "efficiency": payload / wire,
            "data_efficiency": data / wire, "optimum": optimum(workload, n),
            "limit": optimum(workload)}
