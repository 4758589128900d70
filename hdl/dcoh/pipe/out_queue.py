"""A queue in front of an output port that takes up to two messages a cycle, its head in a register: a
message pushed into an empty queue is offered in the next cycle.

Two producers push in a fixed order (``push`` first, then ``push2``); they never wait: they count the
room themselves (``level``: every message held, the register's included).  The register takes the next
message directly when it is free (empty, or its message taken in this cycle) and nothing waits in the
queue; the others wait in two FIFOs (distributed RAM, one write port each, read asynchronously at their
heads) that take alternate messages, so two messages a cycle go in with one write port per bank, and
the register refills from the bank whose turn it is.  The port's payload always comes from a flop, and
the latency is one cycle where an :class:`amaranth.lib.fifo.SyncFIFOBuffered` takes two.

``Assert``: no more pushed than the queue has room for.
"""

from amaranth.hdl import Assert, Module, Mux, Signal, Value
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["OutQueue"]


class OutQueue(wiring.Component):
    """``depth`` messages of ``shape`` (the register and ``depth - 1`` in the banks; ``depth`` odd >= 3,
    so the banks are of equal size)."""

    def __init__(self, shape, depth):
        if not isinstance(depth, int) or isinstance(depth, bool) or depth < 3 or depth % 2 == 0:
            raise ValueError(f"OutQueue: depth={depth!r}: must be an odd integer >= 3")
        self.shape, self.depth = shape, depth
        super().__init__({"push": In(1), "push_p": In(shape), "push2": In(1), "push2_p": In(shape),
                          "level": Out(range(depth + 1)), "out": Out(stream.Signature(shape))})

    def elaborate(self, platform):
        m = Module()
        width = len(Value.cast(self.push_p))
        banks = [fifo.SyncFIFO(width=width, depth=(self.depth - 1) // 2) for _ in range(2)]
        m.submodules.bank0, m.submodules.bank1 = banks
        wsel, rsel = Signal(), Signal()          # the bank of the next message written / read
        waiting = banks[0].r_rdy | banks[1].r_rdy
        free = ~self.out.valid | self.out.ready
        # The messages of this cycle in order (first, second) and how many there are.
        first_p = Mux(self.push, self.push_p, self.push2_p)
        n_in = self.push.as_unsigned() + self.push2
        direct = free & ~waiting & (n_in != 0)   # the first goes straight into the register
        # what the banks take: (valid, payload) in order
        w0 = Signal(), Signal.like(self.push_p)
        w1 = Signal(), Signal.like(self.push_p)
        with m.If(direct):
            m.d.comb += [w0[0].eq(n_in == 2), w0[1].eq(self.push2_p)]
        with m.Else():
            m.d.comb += [w0[0].eq(n_in != 0), w0[1].eq(first_p),
                         w1[0].eq(n_in == 2), w1[1].eq(self.push2_p)]
        for i, b in enumerate(banks):
            mine0 = wsel == i                    # the first message written goes to bank ``wsel``
            m.d.comb += [b.w_en.eq(Mux(mine0, w0[0], w1[0])), b.w_data.eq(Mux(mine0, w0[1], w1[1]))]
        m.d.sync += wsel.eq(wsel ^ w0[0] ^ w1[0])
        # The register refills from the bank whose turn it is.
        head_rdy = Mux(rsel, banks[1].r_rdy, banks[0].r_rdy)
        head = Mux(rsel, banks[1].r_data, banks[0].r_data)
        take = free & head_rdy
        m.d.comb += [banks[0].r_en.eq(take & ~rsel), banks[1].r_en.eq(take & rsel),
                     self.level.eq(banks[0].level + banks[1].level + self.out.valid)]
        with m.If(take):
            m.d.sync += rsel.eq(~rsel)
        with m.If(free):
            m.d.sync += self.out.valid.eq(take | direct)
            with m.If(take):
                m.d.sync += self.out.p.eq(head)
            with m.Elif(direct):
                m.d.sync += self.out.p.eq(first_p)
        m.d.sync += [
            Assert(self.level + n_in <= self.depth, "output queue: more pushed than it has room for"),
            Assert(~waiting | head_rdy, "output queue: the bank whose turn it is is empty while the other is not"),
        ]
        return m
