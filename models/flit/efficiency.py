"""Payload efficiency of the golden packer on a few workloads, beside the analytic optimum.
"""

import math
import random

from cxl.flit import CHUNKS_PER_LINE, MAX_PER_FLIT, SLOT_BITS, SLOTS, WIRE_BYTES, Direction
from cxl.messages import CODECS, LINE_BYTES, Channel

from .packer import pack
from .unpacker import unpack
from .vectors import random_msg

__all__ = ["WORKLOADS", "MIXED", "optimum", "efficiency"]


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


def _workload(workload, n, rng):
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


def optimum(workload, n=None):
    """The analytic optimum payload efficiency (payload bytes / 68 wire bytes per flit) of a workload of
    ``n`` lines or snoops (None: the limit as n grows).  For ``mixed`` it is a bound (``"bound": True``):
    the efficiency at the fewest flits that slot capacity and the per-flit maxima allow.

    Streaming: each line needs 4 G0 slots and a data header; at most 4 data headers fit a slot and a
    flit (facts §2.2), so n lines need at least 4n + ceil(n/4) slots, i.e. ceil((4n + ceil(n/4)) / 4)
    flits; the limit is 17 flits per 16 lines.  Snoop storm: at most 2 H2D Req per downstream flit and
    at most 2 D2H Rsp per upstream flit (facts §2.2), so ceil(n/2) flits each way."""
    rng = random.Random(0)
    streams = _workload(workload, 16 if n is None else n, rng)
    payload = sum(_payload_bytes(m) for _, msgs in streams for m in msgs)
    data = sum(LINE_BYTES for _, msgs in streams for m in msgs if m.data is not None)
    if workload == "mixed":
        # No closed form: a lower bound on flits per direction, so an upper bound on efficiency.  A
        # flit has 4 slots; a data chunk fills one G slot; no slot carries more than 128 bits of
        # messages; and no flit carries more than MAX_PER_FLIT of a channel (facts §2.2).
        flits = 0
        for direction, msgs in streams:
            chunks = sum(CHUNKS_PER_LINE for m in msgs if m.data is not None)
            bits = sum(CODECS[m.chan].width for m in msgs)
            per_chan = [sum(m.chan is c for m in msgs) for c in direction.channels]
            flits += max(math.ceil((chunks + math.ceil(bits / SLOT_BITS)) / SLOTS),
                         *(math.ceil(k / MAX_PER_FLIT[c]) for k, c in zip(per_chan, direction.channels)))
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
    for direction, msgs in _workload(workload, n, rng):
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
