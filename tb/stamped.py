"""Cycle-stamped queues between a testbench and the RTL, so that the testbench wakes per batch, not per cycle.

* :class:`EventRecorder`: the RTL side writes one record (any layout) in each cycle it is told to, stamped
  with the cycle; the testbench reads the oldest ``window`` records at once (``window``, ``count``), works
  through them in cycle order and drops the ones it has read (``pop`` records, taken once each time
  ``pop_seq`` changes).  ``overflow`` (sticky): a record came while ``depth`` were unread (it is lost;
  a testbench must treat it as a failure).
* :class:`ReleaseQueue`: the testbench pushes up to ``lanes`` entries at once (``push``, taken once each
  time ``push_seq`` changes), each with the cycle at which it may go (``at``) and a ``gate``: it goes, in
  push order, on ``o`` once ``now >= at`` and ``gate_count >= gate`` (e.g. the number of H2D Rsps the DCOH
  has taken: a snoop that must not pass an earlier GO to its line carries that GO's number).  ``space``:
  free entries; ``overflow`` (sticky): a push beyond them (the extra entries are lost).

Both take ``now`` from outside (one counter per device: every stamp of a device is on one clock), and both
are plain FIFOs over a memory (the recorder: ``window`` asynchronous read ports at head, head+1, ...; the
queue: ``lanes`` write ports at tail, tail+1, ...): simulation blocks, not meant for synthesis.

Latency: a record written in cycle t is visible in ``window`` from cycle t+1; a push seen at the edge
ending cycle t is offered from cycle t+1 (if due); a pop likewise frees its records from cycle t+1.
"""

from amaranth.hdl import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

__all__ = ["STAMP_BITS", "EventRecorder", "ReleaseQueue"]

STAMP_BITS = 32          # cycles; 2^32 cycles are ~12 hours of simulation at 10^5 cycles/s


def _check(name, value, low):
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ValueError(f"{name}={value!r}: must be an integer >= {low}")


def _pow2(name, value):
    _check(name, value, 1)
    if value & (value - 1):
        raise ValueError(f"{name}={value}: must be a power of two")


class EventRecorder(wiring.Component):
    def __init__(self, layout, *, depth=256, window=64):
        _pow2("depth", depth)
        _check("window", window, 1)
        if window > depth:
            raise ValueError(f"window={window}: more than depth={depth}")
        self.layout, self.depth, self.window_size = layout, depth, window
        self.stamped = data.StructLayout({"cycle": STAMP_BITS, "record": layout})
        super().__init__({
            "now": In(STAMP_BITS), "record": In(layout), "write": In(1),
            "window": Out(data.ArrayLayout(self.stamped, window)), "count": Out(range(depth + 1)),
            "pop": In(range(window + 1)), "pop_seq": In(1), "overflow": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        D, W = self.depth, self.window_size
        m.submodules.mem = mem = Memory(shape=self.stamped, depth=D, init=[])
        wp = mem.write_port()
        head = Signal(range(D))
        count = Signal(range(D + 1))
        seen = Signal()                       # the pop_seq value last acted on
        overflow = Signal()
        full = count == D
        put = self.write & ~full
        m.d.comb += [wp.addr.eq(head + count), wp.en.eq(put), wp.data.cycle.eq(self.now),
                     wp.data.record.eq(self.record), self.count.eq(count), self.overflow.eq(overflow)]
        with m.If(self.write & full):
            m.d.sync += overflow.eq(1)
        for i in range(W):
            rp = mem.read_port(domain="comb")
            m.d.comb += [rp.addr.eq(head + i), self.window[i].eq(rp.data)]
        drop = Signal(range(W + 1))
        m.d.comb += drop.eq(0)
        with m.If(self.pop_seq != seen):
            m.d.comb += drop.eq(self.pop)
            m.d.sync += seen.eq(self.pop_seq)
        m.d.sync += [head.eq(head + drop), count.eq(count + put - drop)]
        return m


class ReleaseQueue(wiring.Component):
    def __init__(self, payload, *, depth=32, lanes=4):
        _pow2("depth", depth)
        _check("lanes", lanes, 1)
        if lanes > depth:
            raise ValueError(f"lanes={lanes}: more than depth={depth}")
        self.payload, self.depth, self.lanes = payload, depth, lanes
        self.entry = data.StructLayout({"at": STAMP_BITS, "gate": STAMP_BITS, "payload": payload})
        lane = data.StructLayout({"valid": 1, "entry": self.entry})
        super().__init__({
            "now": In(STAMP_BITS), "gate_count": In(STAMP_BITS),
            "push": In(data.ArrayLayout(lane, lanes)), "push_seq": In(1),
            "o": Out(stream.Signature(payload)), "space": Out(range(depth + 1)), "overflow": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        D, L = self.depth, self.lanes
        m.submodules.mem = mem = Memory(shape=self.entry, depth=D, init=[])
        head = Signal(range(D))
        count = Signal(range(D + 1))
        seen = Signal()
        overflow = Signal()
        fresh = Signal()
        m.d.comb += fresh.eq(self.push_seq != seen)
        m.d.sync += seen.eq(self.push_seq)
        # lane i goes to tail + (valid lanes before it), while there is room
        added = 0
        lost = 0
        for i in range(L):
            lane = self.push[i]
            wp = mem.write_port()
            slot = Signal(range(L + 1), name=f"slot{i}")
            m.d.comb += slot.eq(added)
            take = Signal(name=f"take{i}")
            m.d.comb += [take.eq(fresh & lane.valid & (count + slot < D)),
                         wp.addr.eq(head + count + slot), wp.en.eq(take), wp.data.eq(lane.entry)]
            added = added + take
            lost = lost | (fresh & lane.valid & ~take)
        with m.If(lost):
            m.d.sync += overflow.eq(1)
        rp = mem.read_port(domain="comb")
        m.d.comb += rp.addr.eq(head)
        due = (count != 0) & (self.now >= rp.data.at) & (self.gate_count >= rp.data.gate)
        m.d.comb += [self.o.valid.eq(due), self.o.p.eq(rp.data.payload), self.space.eq(D - count),
                     self.overflow.eq(overflow)]
        went = self.o.valid & self.o.ready
        m.d.sync += [head.eq(head + went), count.eq(count + added - went)]
        return m
