"""A queue in front of an output port, its head in a register: a message pushed into an empty queue is
offered in the next cycle.

The producer never waits: it counts the room itself (``level``: every message held, the register's
included) and pushes at most one message a cycle.  The register takes a pushed message directly when it
is free (empty, or its message taken in this cycle) and nothing waits behind it; otherwise the message
waits in a FIFO (distributed RAM, read asynchronously at its head) that refills the register.  So the
port's payload always comes from a flop, and the latency is one cycle where an
:class:`amaranth.lib.fifo.SyncFIFOBuffered` takes two.

``Assert``: no push into a full queue.
"""

from amaranth.hdl import Assert, Module, Value
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["OutQueue"]


class OutQueue(wiring.Component):
    """``depth`` messages of ``shape`` (the register and ``depth - 1`` in the FIFO; ``depth`` >= 2)."""

    def __init__(self, shape, depth):
        if not isinstance(depth, int) or isinstance(depth, bool) or depth < 2:
            raise ValueError(f"OutQueue: depth={depth!r}: must be an integer >= 2")
        self.shape, self.depth = shape, depth
        super().__init__({"push": In(1), "push_p": In(shape), "level": Out(range(depth + 1)),
                          "out": Out(stream.Signature(shape))})

    def elaborate(self, platform):
        m = Module()
        m.submodules.fifo = q = fifo.SyncFIFO(width=len(Value.cast(self.push_p)), depth=self.depth - 1)
        free = ~self.out.valid | self.out.ready           # the register may load in this cycle
        direct = free & ~q.r_rdy                          # nothing waits: a push goes straight in
        m.d.comb += [q.w_data.eq(self.push_p), q.w_en.eq(self.push & ~direct),
                     q.r_en.eq(free & q.r_rdy),
                     self.level.eq(q.level + self.out.valid)]
        with m.If(free):
            m.d.sync += self.out.valid.eq(q.r_rdy | self.push)
            with m.If(q.r_rdy):
                m.d.sync += self.out.p.eq(q.r_data)
            with m.Elif(self.push):
                m.d.sync += self.out.p.eq(self.push_p)
        m.d.sync += Assert(~self.push | (self.level < self.depth), "output queue: a push into a full queue")
        return m
