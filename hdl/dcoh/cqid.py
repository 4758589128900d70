"""CQID allocator of the DCOH request tracker: hands out the lowest free CQID, takes CQIDs back.

Matches the golden model (``models.dcoh.Device``: ``free_cqids`` kept sorted, lowest popped first).
``alloc`` is a ``lib.stream`` source: ``valid`` while a CQID is free, ``payload`` the lowest free one,
taken when ``ready``; ``free_valid``/``free_cqid`` return a CQID, which becomes free at the next clock
edge (a plain pair, not a stream: it cannot be back-pressured, and an always-ready stream's constant
``ready`` cannot be a top-level Verilog port in Amaranth 0.5).  A CQID freed in a cycle is not offered in that
same cycle (it is offered from the next).  Allocation and free in one cycle are both honoured.

Asserts (checked at the clock edge): no live CQID is handed out again, only live CQIDs are freed, and
the registered flags ``one_free`` / ``two_free`` (at least one / two CQIDs free) agree with ``count``.
# Ref: docs/sources.md §1.6 (CQID is 12 bits: at most 4096 outstanding requests).
"""

from amaranth.hdl import Assert, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from cxl.messages import ID_WIDTH, MAX_IDS

__all__ = ["CQIDAllocator"]


class CQIDAllocator(wiring.Component):
    def __init__(self, depth):
        if not 1 <= depth <= MAX_IDS:
            raise ValueError(f"depth={depth!r}: must be 1..{MAX_IDS} (12-bit CQID, facts §1.6)")
        self.depth = depth
        super().__init__({
            "alloc": Out(stream.Signature(ID_WIDTH)),
            "free_valid": In(1),
            "free_cqid": In(ID_WIDTH),
            "live": Out(depth),          # bit i: CQID i is in use
            "count": Out(range(depth + 1)),
            # at least one / two CQIDs free, registered (from the next cycle's count), so that a decision
            # that reads them starts from a flop rather than from a subtract and compare of ``count``
            "one_free": Out(1, init=1),
            "two_free": Out(1, init=int(depth >= 2)),
        })

    def elaborate(self, platform):
        m = Module()
        free_mask = ~self.live
        # lowest free CQID: later assignments win, so walk from the top down
        for i in reversed(range(self.depth)):
            with m.If(free_mask[i]):
                m.d.comb += self.alloc.payload.eq(i)
        m.d.comb += self.alloc.valid.eq(free_mask.any())
        took = self.alloc.valid & self.alloc.ready
        # One-hot decoders of the depth's own width: ``1 << cqid`` with a 12-bit CQID is a 4096-bit shift,
        # whatever the depth.  The index is the CQID's low bits (a freed CQID >= depth is an Assert below).
        ibits = max(1, (self.depth - 1).bit_length())
        alloc_i, free_i = self.alloc.payload[:ibits], self.free_cqid[:ibits]
        set_bits = Signal(self.depth)
        clr_bits = Signal(self.depth)
        m.d.comb += [set_bits[i].eq(took & (alloc_i == i)) for i in range(self.depth)]
        m.d.comb += [clr_bits[i].eq(self.free_valid & (free_i == i)) for i in range(self.depth)]
        next_count = Signal.like(self.count)
        m.d.comb += next_count.eq(self.count + took - self.free_valid)
        m.d.sync += [
            self.live.eq((self.live | set_bits) & ~clr_bits),
            self.count.eq(next_count),
            self.one_free.eq(next_count < self.depth),
            self.two_free.eq(next_count + 2 <= self.depth),
        ]
        m.d.sync += [
            Assert(~took | ~self.live.bit_select(alloc_i, 1), "live CQID handed out again"),
            Assert(~self.free_valid | (self.free_cqid < self.depth), "freed CQID out of range"),
            Assert(~self.free_valid | self.live.bit_select(free_i, 1), "freed a CQID that is not live"),
            Assert(self.one_free == (self.count < self.depth), "one_free disagrees with count"),
            Assert(self.two_free == (self.count + 2 <= self.depth), "two_free disagrees with count"),
        ]
        return m
